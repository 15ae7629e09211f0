"""PXE proof: deploy.yml publishes, renders and switches, then qemu boots the tree like a node does.

qemu-system-x86_64 (TCG) with user networking and its built-in TFTP server pointed at the boot
root: the NIC's iPXE ROM PXE-boots pxelinux.0 (Debian pxelinux + syslinux-common, copied by
deploy.yml) -> pxelinux.cfg/01-<mac> or default (rendered by bootconfig) -> <image>/vmlinuz and
<image>/initrd (bootlink's symlink) -> a real kernel and a busybox initramfs that prints its
/etc/image-release and /proc/cmdline on the serial console. The iPXE path boots ipxe/boot.ipxe.
The versions are Debian-style (``~`` and ``+``): the TFTP server follows <image> into
images/<image>/<version>/, so every boot reads its files through such a directory name.
Measured boot times are printed (pytest -s) and written to build/test-logs/pxe-boot-times.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import REPO, run_site
from deploy_support import find_kernel, pxe_boot, release_of, write_inventory, write_pack

IMAGE = "pxetest"
V1 = "1.0~rc1+site1"
V2 = "2026.11.23+deb12u1"
NODE_MAC = "52:54:00:12:34:56"
OTHER_MAC = "52:54:00:65:43:21"  # no own entry: boots pxelinux.cfg/default
TIMES: dict[str, float] = {}

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or
                                not os.path.exists("/usr/lib/PXELINUX/pxelinux.0"),
                                reason="needs qemu-system-x86 and pxelinux + syslinux-common (scripts/setup.sh)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("pxe")
    kernel = find_kernel()
    inventory = write_inventory(
        base / "inventory",
        images={IMAGE: {"layer": "base", "formats": ["cpio.zst"], "kernel_args": "panic=-1 console=ttyS0"}},
        nodes={"n1": {"hpc_stateless_boot_mac": NODE_MAC, "hpc_stateless_boot_kernel_args": "hpc_node=n1"}},
        hpc_stateless_boot_root=str(base / "tftp"),
        hpc_stateless_pack_output_dir=str(base / "out"),
        hpc_stateless_boot_lock_timeout=0,
    )
    yield {"base": base, "kernel": kernel, "inventory": inventory, "root": base / "tftp", "out": base / "out"}
    if TIMES:
        log = REPO / "build" / "test-logs"
        log.mkdir(parents=True, exist_ok=True)
        (log / "pxe-boot-times.json").write_text(json.dumps(TIMES, indent=2) + "\n")
        print("\nPXE boot times (qemu TCG, qemu's TFTP):", json.dumps(TIMES))


def deploy(site, *extra):
    proc = run_site(*extra, inventory=site["inventory"], playbook="playbooks/deploy.yml")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    return proc


def boot(site, name: str, mac: str, bootfile: str = "pxelinux.0") -> dict[str, str]:
    console, seconds = pxe_boot(site["root"], mac, site["base"] / f"{name}.log", bootfile=bootfile)
    assert "HPC-STATELESS-PXE-BOOTED end" in console, console[-3000:]
    TIMES[name] = round(seconds, 1)
    return release_of(console)


def test_deploy_then_pxelinux_boots_the_node_entry(site):
    write_pack(site["out"], IMAGE, V1, site["kernel"], created="2026-01-01T00:00:00Z")
    proc = deploy(site)
    assert f"{IMAGE} none -> {V1}" in proc.stdout
    root = site["root"]
    assert os.readlink(root / IMAGE) == f"images/{IMAGE}/{V1}"
    assert (root / "pxelinux.0").is_file() and (root / "ldlinux.c32").is_file()
    assert (root / "pxelinux.cfg" / f"01-{NODE_MAC.replace(':', '-')}").is_file()

    release = boot(site, "pxelinux-node-entry-v1", NODE_MAC)
    assert release["IMAGE"] == IMAGE and release["VERSION"] == V1
    cmdline = release["CMDLINE"].split()
    assert f"initrd={IMAGE}/initrd" in cmdline and "rdinit=/sbin/init" in cmdline and "ip=dhcp" in cmdline
    assert "console=ttyS0,115200n8" in cmdline and "hpc_node=n1" in cmdline
    assert f"BOOTIF=01-{NODE_MAC.replace(':', '-')}" in cmdline
    ramdisk = int(next(arg for arg in cmdline if arg.startswith("ramdisk_size=")).split("=")[1])
    manifest = json.loads((root / IMAGE / "manifest.json").read_text())
    assert ramdisk * 1024 >= manifest["uncompressed_size"]


def test_second_deploy_without_news_changes_nothing(site):
    proc = deploy(site)
    assert "changed=0" in proc.stdout.split("PLAY RECAP", 1)[1]
    assert f"{IMAGE} {V1} -> {V1} (unchanged)" in proc.stdout


def test_check_diff_shows_the_switch_and_changes_nothing(site):
    write_pack(site["out"], IMAGE, V2, site["kernel"], created="2026-02-01T00:00:00Z")
    before = sorted(str(p) for p in site["root"].rglob("*"))
    proc = run_site("--check", "--diff", inventory=site["inventory"], playbook="playbooks/deploy.yml")
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert f"-{site['root']}/{IMAGE} -> images/{IMAGE}/{V1}" in proc.stdout
    assert f"+{site['root']}/{IMAGE} -> images/{IMAGE}/{V2}" in proc.stdout
    assert sorted(str(p) for p in site["root"].rglob("*")) == before


def test_switch_then_ipxe_boots_the_new_version(site):
    proc = deploy(site)
    assert f"{IMAGE} {V1} -> {V2}" in proc.stdout
    release = boot(site, "ipxe-node-script-v2", NODE_MAC, bootfile="ipxe/boot.ipxe")
    assert release["VERSION"] == V2
    assert "hpc_node=n1" in release["CMDLINE"].split() and "initrd=initrd" in release["CMDLINE"].split()


def test_rollback_then_default_entry_boots_the_previous_version(site):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    adhoc = subprocess.run([str(REPO / ".venv/bin/ansible"), "-i", str(site["inventory"]), "localhost",
                            "-m", "hpc.stateless.bootlink", "-a",
                            f"boot_root={site['root']} image={IMAGE} state=rollback"],
                           cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert adhoc.returncode == 0, adhoc.stdout + adhoc.stderr
    assert os.readlink(site["root"] / IMAGE) == f"images/{IMAGE}/{V1}"
    release = boot(site, "pxelinux-default-entry-after-rollback", OTHER_MAC)
    assert release["VERSION"] == V1
    assert "hpc_node=n1" not in release["CMDLINE"].split()  # the default entry, not n1's
