"""An arm64 image, built on this x86_64 host through qemu-user emulation, packed, boots under qemu-system-aarch64.

The DAG (tests/integration/arm64_inventory: one root layer bootstrapped for arm64 with the base role, whose
kernel flavour there is linux-image-arm64) is built under its own image prefix, so it stays cached between
runs like the pack tests' layers; a cached run builds nothing. The cpio image is the root (no initrd of its
own), as for amd64 in test_pack.py: qemu's generic ``virt`` board (TCG, a Cortex-A57, PL011 serial console
ttyAMA0) loads the packed ``vmlinuz`` (an arm64 Image) and the cpio.zst directly, the guest reaches
multi-user.target and prints /etc/image-release on its console (pack_support.IMAGE_RELEASE_TO_CONSOLE).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest
from conftest import REPO, run_site
from pack_support import MULTI_USER, boot_cpio, keep_boot_logs, run_pack_playbook

ARM64_INVENTORY = REPO / "tests" / "integration" / "arm64_inventory"
ARM64_PREFIX = "localhost/hpc-stateless-armtest"


def _emulates_arm64() -> bool:
    """Whether this host runs arm64 binaries (natively, or through a qemu-user binfmt handler): arch-test says."""
    if shutil.which("arch-test") is None:
        return False
    return subprocess.run(["arch-test", "arm64"], capture_output=True, check=False).returncode == 0


pytestmark = pytest.mark.skipif(shutil.which("qemu-system-aarch64") is None or not _emulates_arm64(),
                                reason="needs qemu-system-aarch64 and arm64 binaries to run (qemu-system-arm, "
                                       "qemu-user-static, binfmt-support, arch-test: scripts/setup.sh)")


def test_the_packed_arm64_image_boots_under_qemu_system_aarch64_to_multi_user(tmp_path):
    times: dict[str, float] = {}
    extra = ("-e", f"hpc_stateless_image_prefix={ARM64_PREFIX}")
    start = time.monotonic()
    built = run_site(*extra, inventory=ARM64_INVENTORY)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
    times["build"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    packed = run_pack_playbook(ARM64_INVENTORY, tmp_path, *extra)
    assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
    times["pack"] = round(time.monotonic() - start, 1)
    version_dir = next(p for p in (tmp_path / "armtest").iterdir() if not p.name.startswith("."))
    manifest = json.loads((version_dir / "manifest.json").read_text())
    # pack read the architecture from the kernel's own header, and the kernel is the arm64 flavour's
    assert manifest["kernel"]["arch"] == "arm64", manifest["kernel"]
    assert manifest["kernel"]["version"].endswith("-arm64"), manifest["kernel"]
    assert any(p["name"] == "linux-image-arm64" for p in manifest["packages"])
    times["cpio_mib"] = round((version_dir / "armtest.cpio.zst").stat().st_size / 2**20, 1)

    start = time.monotonic()
    console = boot_cpio(version_dir / "vmlinuz", version_dir / "armtest.cpio.zst",
                        [MULTI_USER, "IMAGE=armtest", re.escape(f"VERSION={manifest['version']}")], timeout=600,
                        arch="arm64")
    times["boot"] = round(time.monotonic() - start, 1)
    keep_boot_logs("arm64-boot", "arm64 boot under qemu-system-aarch64", times, console)

    # The guest's kernel is the packed arm64 one, on the emulated arm64 machine ("Machine model" is the DT's).
    assert "Machine model: linux,dummy-virt" in console, console[:4000]
    assert f"Linux version {manifest['kernel']['version']}" in console, console[:4000]
    assert re.search(MULTI_USER, console), console[-4000:]
    # /etc/image-release exists only in the packed image: its lines on the console prove the root is the pack's.
    assert "IMAGE=armtest" in console and f"VERSION={manifest['version']}" in console, console[-4000:]
    assert f"LAYER_KEY={manifest['layer_keys'][manifest['layer']]}" in console, console[-4000:]
    assert "Kernel panic" not in console
