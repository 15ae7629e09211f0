"""Bad input to hpc.stateless.pack: a clear error naming what is wrong, and nothing left behind.

Most cases pack a small directory tree (fast); the missing-kernel case also packs a real layer
image, to prove the throw-away working container is removed on failure. "Disk full" is a real
16 MiB ext4 file system on a loop device; "not writable" a read-only tmpfs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import buildah, leftover_pack_containers, run_site
from pack_support import PACK_INVENTORY, PACK_PREFIX, REPO, pack_module, small_root

PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def nothing_published(output: Path, image: str) -> bool:
    """Not even an empty ``<output>/<image>/`` is left by a refused pack into a fresh output directory."""
    return not (output / image).exists()


def pack_dir(root: Path, output: Path, **params):
    return pack_module(image="bad", source_path=str(root), output_dir=str(output), version="v1", **params)


def test_missing_kernel_in_a_directory_and_the_kernel_option(tmp_path):
    root = small_root(tmp_path, kernel=False)
    rc, result = pack_dir(root, tmp_path / "out")
    assert rc != 0
    assert "no kernel in the image" in result["msg"] and "linux-image-amd64" in result["msg"]
    assert "kernel option" in result["msg"]
    assert nothing_published(tmp_path / "out", "bad")
    host_kernel = tmp_path / "bzImage"
    host_kernel.write_bytes(b"kernel from elsewhere")
    rc, result = pack_dir(root, tmp_path / "out", kernel=str(host_kernel), kernel_version="6.1.0-99-amd64")
    assert rc == 0, result.get("msg")
    assert (Path(result["version_dir"]) / "vmlinuz").read_bytes() == b"kernel from elsewhere"
    assert result["manifest"]["kernel"]["origin"] == f"host:{host_kernel}"


def _image_without_kernel() -> str:
    for ref in ("localhost/hpc-stateless/bootstrap/base:latest", f"{PACK_PREFIX}/bootstrap/base:latest"):
        if buildah("inspect", "--type", "image", ref, check=False):
            return ref
    built = run_site("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}", inventory=PACK_INVENTORY)
    assert built.returncode == 0, built.stdout[-3000:]
    return f"{PACK_PREFIX}/bootstrap/base:latest"


def test_missing_kernel_in_an_image_leaves_no_container(tmp_path):
    ref = _image_without_kernel()
    rc, result = pack_module(image="nokernel", source_image=ref, output_dir=str(tmp_path / "out"), version="v1")
    assert rc != 0
    assert ref in result["msg"] and "no kernel in the image" in result["msg"]
    assert not leftover_pack_containers()
    assert nothing_published(tmp_path / "out", "nokernel")


def test_missing_version_of_a_directory_leaves_no_image_directory(tmp_path):
    rc, result = pack_module(image="bad", source_path=str(small_root(tmp_path)), output_dir=str(tmp_path / "out"))
    assert rc != 0 and "version is not set" in result["msg"]
    assert nothing_published(tmp_path / "out", "bad")
    rc, result = pack_module(image="bad", source_path=str(small_root(tmp_path)), output_dir=str(tmp_path / "out"),
                             version="1.0 rc1")
    assert rc != 0 and "version '1.0 rc1' is not a valid name" in result["msg"]
    assert nothing_published(tmp_path / "out", "bad")


def test_unknown_format_is_refused_before_anything(tmp_path):
    rc, result = pack_dir(small_root(tmp_path), tmp_path / "out", formats=["cpio.zst", "cpio.lz4"])
    assert rc != 0 and "cpio.lz4" in result["msg"] and "cpio.zst, cpio.gz, cpio.xz, squashfs" in result["msg"]
    assert not (tmp_path / "out").exists()
    rc, result = pack_dir(small_root(tmp_path), tmp_path / "out", levels={"cpio.zst": 42})
    assert rc != 0 and "level 42 for cpio.zst is out of range (1..19)" in result["msg"]
    assert nothing_published(tmp_path / "out", "bad")


@pytest.fixture
def read_only_dir(tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], check=True)
    yield target
    subprocess.run(["umount", str(target)], check=False)


def test_output_dir_not_writable(tmp_path, read_only_dir):
    rc, result = pack_dir(small_root(tmp_path), read_only_dir / "images")
    assert rc != 0
    assert "output directory" in result["msg"] and "not writable" in result["msg"]
    assert str(read_only_dir) in result["msg"]
    (tmp_path / "a-file").write_text("")
    rc, result = pack_dir(small_root(tmp_path), tmp_path / "a-file" / "images")
    assert rc != 0 and "is not a directory" in result["msg"]


@pytest.fixture
def tiny_fs(tmp_path):
    """A 16 MiB ext4 file system on a loop device."""
    backing = tmp_path / "fs.img"
    with open(backing, "wb") as handle:
        handle.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(backing)], check=True)
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(backing), str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.fault
@pytest.mark.parametrize("fmt", ["cpio.zst", "squashfs"])
def test_disk_full_during_pack_leaves_no_artifact(tmp_path, tiny_fs, fmt):
    incompressible = {f"srv/data/blob{i}": os.urandom(8 << 20) for i in range(4)}  # 32 MiB > 16 MiB
    rc, result = pack_dir(small_root(tmp_path, extra=incompressible), tiny_fs, formats=[fmt])
    assert rc != 0
    assert "nothing was published" in result["msg"]
    assert "No space left on device" in result["msg"] or "disk full" in result["msg"], result["msg"]
    leftovers = [str(p.relative_to(tiny_fs)) for p in tiny_fs.rglob("*") if p.name != "lost+found"]
    assert leftovers == [], leftovers


@pytest.mark.fault
def test_secrets_are_refused_by_name_unless_allowed(tmp_path):
    root = small_root(tmp_path, extra={
        "etc/ssh/ssh_host_ed25519_key": PRIVATE_KEY.encode(),
        "etc/ssh/ssh_host_ed25519_key.pub": b"ssh-ed25519 AAAA",
        "etc/munge/munge.key": os.urandom(128),
        "home/alice/.ssh/id_rsa": PRIVATE_KEY.encode(),
        "etc/site/api-token": b"s3cr3t",
    })
    rc, result = pack_dir(root, tmp_path / "out", secret_patterns=["etc/site/api-token"])
    assert rc != 0
    for named in ("/etc/ssh/ssh_host_ed25519_key (SSH host private key)", "/etc/munge/munge.key (MUNGE key)",
                  "/home/alice/.ssh/id_rsa (SSH private key)", "/etc/site/api-token (named in secret_patterns)"):
        assert named in result["msg"]
    assert ".pub" not in result["msg"]
    assert nothing_published(tmp_path / "out", "bad")
    rc, result = pack_dir(root, tmp_path / "out", check_mode=True)
    assert rc != 0 and "refusing to pack secrets" in result["msg"]
    rc, result = pack_dir(root, tmp_path / "out", allowed_secrets=["etc/munge/*"],
                          exclude=["etc/ssh/ssh_host_*", "home/*/.ssh"])
    assert rc == 0, result.get("msg")
    assert result["allowed_secrets"] == ["/etc/munge/munge.key (MUNGE key)"]
    assert any("munge.key" in w for w in result.get("warnings", []))


@pytest.mark.fault
def test_file_of_4gib_is_refused_for_cpio_before_writing(tmp_path):
    root = small_root(tmp_path)
    with open(root / "huge.img", "wb") as handle:
        handle.truncate(4 << 30)  # sparse
    rc, result = pack_dir(root, tmp_path / "out", formats=["cpio.zst"], size_ceiling="16G")
    assert rc != 0
    assert "/huge.img (4294967296 bytes)" in result["msg"] and "4294967295 bytes, 4 GiB - 1" in result["msg"]
    assert "Pack it as squashfs" in result["msg"] and "boot it in two stages" in result["msg"], result["msg"]
    assert nothing_published(tmp_path / "out", "bad")


def test_size_ceiling_fails_or_warns(tmp_path):
    root = small_root(tmp_path, extra={"srv/blob": b"\0" * (1 << 20)})
    rc, result = pack_dir(root, tmp_path / "out", size_ceiling="512K")
    assert rc != 0 and "above size_ceiling 524288 bytes" in result["msg"]
    assert "what the nodes' memory allows for a cpio initramfs" in result["msg"], result["msg"]
    assert "boot it in two stages" in result["msg"], result["msg"]
    assert nothing_published(tmp_path / "out", "bad")
    # A squashfs root is not unpacked into RAM: the tree's size does not bound it, the squashfs file does.
    rc, result = pack_dir(root, tmp_path / "sq", formats=["squashfs"], size_ceiling="512K", dracut=False)
    assert rc == 0, result.get("msg")
    assert not any("size_ceiling" in w for w in result.get("warnings", [])), result.get("warnings")
    rc, result = pack_dir(root, tmp_path / "out", size_ceiling="512K", size_ceiling_action="warn")
    assert rc == 0 and any("size_ceiling" in w for w in result["warnings"])
    rc, result = pack_dir(root, tmp_path / "out", size_ceiling="1200K", force=True)
    assert rc == 0 and any("of size_ceiling" in w for w in result["warnings"])


def _wait_group_gone(pgid: int, timeout: float = 30) -> None:
    """Until no process of the killed group is left (zombies included)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                alive.append(pid)
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of group {pgid} still run: {alive}")


@pytest.mark.fault
def test_killed_pack_leaves_no_final_name_and_the_next_run_cleans_up(tmp_path):
    root = small_root(tmp_path, extra={f"srv/blob{i}": os.urandom(16 << 20) for i in range(6)})
    output = tmp_path / "out"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": str(REPO / ".collections")}
    args = ('{"image": "bad", "source_path": "%s", "output_dir": "%s", "version": "v1", "formats": ["cpio.xz"],'
            ' "levels": {"cpio.xz": 9}, "threads": 1}' % (root, output))
    proc = subprocess.Popen([str(REPO / ".venv/bin/ansible"), "localhost", "-i", str(REPO / "inventory"),
                             "-m", "hpc.stateless.pack", "-a", args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    partial = []
    while time.monotonic() < deadline and not partial:
        time.sleep(0.2)
        partial = list((output / "bad").glob(".v1.partial-*/bad.cpio.xz")) if (output / "bad").exists() else []
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _wait_group_gone(proc.pid)
    assert partial, "the pack never started writing"
    assert partial[0].exists(), "the killed pack's partial file is gone"
    assert not (output / "bad" / "v1").exists()
    rc, result = pack_dir(root, output, formats=["cpio.zst"])
    assert rc == 0, result.get("msg")
    assert sorted(p.name for p in (output / "bad").iterdir()) == ["v1"]
