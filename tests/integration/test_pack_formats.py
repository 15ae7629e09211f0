"""Every format on a small directory tree: read back by gzip/xz/zstd + GNU cpio and unsquashfs,
byte-identical on repeat, check mode writing nothing. (The big image and the boot: test_pack.py.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from pack_support import pack_module, small_root

DECOMPRESS = {"cpio.zst": ["zstd", "-dc"], "cpio.gz": ["gzip", "-dc"], "cpio.xz": ["xz", "-dc"]}
ALL_FORMATS = ["cpio.zst", "cpio.gz", "cpio.xz", "squashfs"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("formats")
    root = small_root(base, extra={
        "usr/share/big": os.urandom(300_000),
        "usr/lib/libx.so.1": b"\x7fELF-ish" * 1000,
        "var/lib/apt/lists/deb_Packages": b"a list",
        "etc/image-release": b"IMAGE=stale-from-the-tree\n",
    })
    os.link(root / "usr/lib/libx.so.1", root / "usr/lib/libx-hardlink.so.1")
    (root / "usr/lib/libx.so").symlink_to("libx.so.1")
    os.mkfifo(root / "usr/share/fifo")
    return root


def _pack(tree, out, **params):
    params = {"formats": ALL_FORMATS, **params}
    rc, result = pack_module(image="small", source_path=str(tree), output_dir=str(out), version="v1",
                             source_date_epoch=1_700_000_000, **params)
    assert rc == 0, result.get("msg")
    return Path(result["version_dir"]), result


def _cpio_list(archive: Path, fmt: str) -> list[str]:
    data = subprocess.run([*DECOMPRESS[fmt], str(archive)], capture_output=True, check=True).stdout
    return subprocess.run(["cpio", "-t", "--quiet"], input=data, capture_output=True, check=True).stdout.decode().split()


def test_every_format_reads_back_and_repeats_byte_for_byte(tree, tmp_path):
    first, result = _pack(tree, tmp_path / "a")
    second, _second_result = _pack(tree, tmp_path / "b")
    for name in sorted(os.listdir(first)):
        subprocess.run(["cmp", str(first / name), str(second / name)], check=True)
    expected = [".", "boot", "etc", "etc/hostname", "etc/image-release", "etc/machine-id", "init", "sbin", "tmp",
                "usr", "usr/lib", "usr/lib/libx-hardlink.so.1", "usr/lib/libx.so", "usr/lib/libx.so.1", "usr/sbin",
                "usr/sbin/init", "usr/share", "usr/share/big", "usr/share/fifo", "var", "var/lib", "var/lib/apt",
                "var/lib/apt/lists"]
    for fmt in ("cpio.zst", "cpio.gz", "cpio.xz"):
        listing = _cpio_list(first / f"small.{fmt}", fmt)
        assert sorted(listing) == sorted(expected + ["dev", "dev/console"]), fmt  # /dev/console: cpio only
    squash = subprocess.run(["unsquashfs", "-l", str(first / "small.squashfs")], capture_output=True,
                            check=True).stdout.decode().split()
    names = sorted(n[len("squashfs-root/"):] for n in squash if n.startswith("squashfs-root/"))
    assert names == sorted(set(expected) - {".", "init"})
    release = subprocess.run(["unsquashfs", "-cat", str(first / "small.squashfs"), "etc/image-release"],
                             capture_output=True, check=True).stdout.decode()
    assert release.startswith("IMAGE=small\nVERSION=v1\n") and "BUILD_TIME=2023-11-14T22:13:20Z" in release
    assert (tree / "etc/image-release").read_bytes() == b"IMAGE=stale-from-the-tree\n"
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=first, check=True)
    manifest = result["manifest"]
    assert [a["format"] for a in manifest["artifacts"]] == ALL_FORMATS
    assert manifest["created"] == "2023-11-14T22:13:20Z" and manifest["initrd"] is None
    assert any("no initrd.img" in w for w in result["warnings"])


def test_cpio_extracts_the_same_tree(tree, tmp_path):
    version_dir, _result = _pack(tree, tmp_path / "a", formats=["cpio.gz"])
    dest = tmp_path / "x"
    dest.mkdir()
    data = subprocess.run(["gzip", "-dc", str(version_dir / "small.cpio.gz")], capture_output=True, check=True).stdout
    subprocess.run(["cpio", "-i", "-d", "--quiet", "-D", str(dest)], input=data, check=True)
    for rel in ("usr/share/big", "usr/lib/libx.so.1", "etc/hostname"):
        assert hashlib.sha256((dest / rel).read_bytes()).digest() == hashlib.sha256((tree / rel).read_bytes()).digest()
    assert os.stat(dest / "usr/lib/libx.so.1").st_ino == os.stat(dest / "usr/lib/libx-hardlink.so.1").st_ino
    assert os.readlink(dest / "usr/lib/libx.so") == "libx.so.1"
    assert os.readlink(dest / "init") == "/sbin/init"


def test_check_mode_writes_nothing_and_directories_are_always_repacked(tree, tmp_path):
    out = tmp_path / "c"
    rc, result = pack_module(image="small", source_path=str(tree), output_dir=str(out), version="v1",
                             check_mode=True)
    assert rc == 0 and result["changed"] is True
    assert result["manifest"]["artifacts"] == [{"file": "small.cpio.zst", "format": "cpio.zst"}]
    assert not out.exists()
    rc, result = pack_module(image="small", source_path=str(tree), output_dir=str(out), version="v1")
    assert rc == 0 and result["changed"] is True
    rc, result = pack_module(image="small", source_path=str(tree), output_dir=str(out), version="v1")
    assert rc == 0 and result["changed"] is True and result["up_to_date"] is False
