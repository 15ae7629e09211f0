"""A hardware profile end to end: the default compute image packed with the qemu profile by playbooks/pack.yml.

The pruned cpio.zst boots under qemu (TCG, as test_pack.py boots cpio images) to multi-user; on
the guest console a kept module loads with modprobe and shows in lsmod, a pruned one is absent,
and the node-side check names a module left out when it is given a device that needs it. The
cached layer keeps every module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from hwprofile_support import FIXTURE, KEPT_PROBE, PRUNED_PROBE, boot_and_probe, qemu_profile
from pack_support import (
    DEFAULT_INVENTORY,
    HEADLESS,
    NO_LOCAL_DISK_WAIT,
    OUTPUT_ROOT,
    mounted_image,
    pack_module,
    run_pack_playbook,
)
from test_pack import _cpio_names  # noqa: E402 - sibling test module (rootdir-relative import)


@pytest.fixture(scope="module")
def pruned():
    """The compute image packed by pack.yml with the image's hardware_profile key set to the qemu profile."""
    OUTPUT_ROOT.mkdir(parents=True, exist_ok=True)
    output = Path(tempfile.mkdtemp(prefix="hwprofile-", dir=OUTPUT_ROOT))
    profile = qemu_profile()
    profile["modaliases_file"] = os.path.relpath(FIXTURE, DEFAULT_INVENTORY.parent)  # relative: the project dir
    images = {"compute": {"layer": "slurm", "formats": ["cpio.zst"], "kernel_args": "console=ttyS0",
                          "hardware_profile": profile}}
    proc = run_pack_playbook(DEFAULT_INVENTORY, output, "-e", json.dumps({"hpc_stateless_images": images}))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    found = [p for p in (output / "compute").iterdir() if not p.name.startswith(".")]
    assert len(found) == 1, found
    version_dir = found[0]
    yield version_dir, json.loads((version_dir / "manifest.json").read_text()), proc.stdout
    shutil.rmtree(output, ignore_errors=True)


def test_manifest_records_the_profile_and_what_it_removed(pruned):
    version_dir, manifest, stdout = pruned
    entry = manifest["hardware_profile"]
    assert {"e1000", "virtio_net", "virtio_blk", "virtio_pci"} <= set(entry["kept_modules"])
    assert PRUNED_PROBE not in entry["kept_modules"]
    assert entry["removed"]["modules"]["files"] > 3000 and entry["removed"]["modules"]["bytes"] > 300 << 20
    captured = {line for line in FIXTURE.read_text().splitlines() if line and not line.startswith("#")}
    assert manifest["options"]["hardware_profile"]["modaliases"] == sorted(captured)
    assert "removed by the hardware profile: modules" in stdout
    names = _cpio_names(version_dir / "compute.cpio.zst")
    kver = entry["kernel_version"]
    kos = [n for n in names if n.startswith(f"usr/lib/modules/{kver}/") and ".ko" in n]
    assert len(kos) == len(entry["kept_modules"])
    assert f"usr/lib/modules/{kver}/modules.alias.unpruned" in names
    assert "usr/local/sbin/hpc-hwprofile-check" in names
    with mounted_image(manifest["source"]["image"]) as root:
        in_layer = subprocess.run(["find", str(root / "usr/lib/modules" / kver), "-name", "*.ko*"],
                                  capture_output=True, text=True, check=True).stdout.split()
        assert len(in_layer) == len(kos) + entry["removed"]["modules"]["files"], "the cached layer must keep them all"
        assert not (root / "usr/local/sbin/hpc-hwprofile-check").exists()


def test_unknown_module_is_refused_naming_the_key(pruned, tmp_path):
    _version_dir, manifest, _stdout = pruned
    rc, result = pack_module(image="compute", source_image=manifest["source"]["image"], output_dir=str(tmp_path),
                             version="bad", hardware_profile={"modules": ["e1000"], "force": ["no_such_driver"]})
    assert rc != 0
    assert "hardware_profile.force: unknown module 'no_such_driver'" in result["msg"]
    assert not (tmp_path / "compute").exists()


def test_pruned_image_boots_and_modprobe_sees_only_kept_modules(pruned):
    version_dir, _manifest, _stdout = pruned
    # Masked: the local storage units' 30 s wait for a disk (not what this boot tests); no display adapter.
    probe = boot_and_probe(version_dir / "vmlinuz", version_dir / "compute.cpio.zst", args=NO_LOCAL_DISK_WAIT,
                           extra=HEADLESS)
    section = probe.section()
    assert "Kernel panic" not in probe.console
    assert "HWP-KEPT-LOADED" in section, section[-3000:]
    assert re.search(rf"^{KEPT_PROBE}\s+\d+", section, re.M), section[-3000:]  # lsmod
    assert re.search(r"^e1000\s+\d+", section, re.M), section[-3000:]  # loaded by udev for qemu's NIC
    assert "HWP-PRUNED-ABSENT" in section and re.search(rf"Module {PRUNED_PROBE} not found", section), section[-3000:]
    assert "HWP-CHECK-CLEAN" in section, section[-3000:]
    assert re.search(rf"missing module {PRUNED_PROBE} \(needed by pci:v000014E4", section), section[-3000:]
    assert "HWP-CHECK-FOUND" in section
    print(f"pruned guest: {probe.ram_used / 2**20:.0f} MiB used after boot, multi-user at "
          f"{probe.uptime_at_multi_user:.1f} s uptime")
