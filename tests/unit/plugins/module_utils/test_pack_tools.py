"""Command lines of the compressors and mksquashfs (the real runs are in tests/integration)."""

from __future__ import annotations

import stat

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack.compress import CompressError, compressor_argv
from ansible_collections.hpc.stateless.plugins.module_utils._pack.squashfs import (
    SquashfsError,
    exclude_lines,
    mksquashfs_argv,
    pseudo_definitions,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import OverlayFile


def everything(tool):
    return f"/usr/bin/{tool}"


@pytest.mark.parametrize("fmt, level, threads, argv", [
    ("cpio.zst", None, 2, ["/usr/bin/zstd", "-q", "-c", "-3", "-T2"]),
    ("cpio.zst", 19, 4, ["/usr/bin/zstd", "-q", "-c", "-19", "-T4"]),
    ("cpio.gz", None, 2, ["/usr/bin/pigz", "-c", "-n", "-6", "-p", "2"]),
    ("cpio.xz", 9, 1, ["/usr/bin/xz", "-q", "-c", "-9", "--check=crc32", "-T1", "--memlimit-compress=160MiB"]),
])
def test_compressor_argv(fmt, level, threads, argv):
    assert compressor_argv(fmt, level, threads, everything).argv == argv


def test_gzip_without_pigz_and_errors():
    assert compressor_argv("cpio.gz", 1, 0, lambda t: None if t == "pigz" else f"/bin/{t}").argv == \
        ["/bin/gzip", "-c", "-n", "-1"]
    with pytest.raises(CompressError, match="zstd is not installed"):
        compressor_argv("cpio.zst", None, 0, lambda t: None)
    with pytest.raises(CompressError, match="out of range"):
        compressor_argv("cpio.zst", 22, 0, everything)
    with pytest.raises(CompressError, match="unknown cpio format 'cpio.lz4'"):
        compressor_argv("cpio.lz4", None, 0, everything)


def test_mksquashfs_argv():
    argv = mksquashfs_argv("/usr/bin/mksquashfs", "/src", "/out.sqfs", "zstd", None, 0, "/ef", "/pf")
    assert argv == ["/usr/bin/mksquashfs", "/src", "/out.sqfs", "-noappend", "-no-progress", "-quiet", "-xattrs", "-comp", "zstd",
                    "-mem", "96M", "-Xcompression-level", "3", "-ef", "/ef", "-pf", "/pf"]
    assert "-processors" in mksquashfs_argv("m", "s", "o", "gzip", 9, 2, None, None)
    assert "-Xcompression-level" not in mksquashfs_argv("m", "s", "o", "xz", None, 0, None, None)
    with pytest.raises(SquashfsError, match="no level"):
        mksquashfs_argv("m", "s", "o", "xz", 6, 0, None, None)
    with pytest.raises(SquashfsError, match="out of range"):
        mksquashfs_argv("m", "s", "o", "gzip", 12, 0, None, None)


def test_pseudo_definitions_and_excludes(tmp_path):
    overlay = [OverlayFile("etc/image-release", stat.S_IFREG | 0o644, b"IMAGE=x\n"),
               OverlayFile("var/lib/dbus/machine-id", stat.S_IFLNK | 0o777, b"/etc/machine-id"),
               OverlayFile("new", stat.S_IFDIR | 0o755)]
    lines, contents = pseudo_definitions(overlay, str(tmp_path), 1700)
    assert lines[0] == f"etc/image-release F 1700 644 0 0 cat {tmp_path}/overlay-0"
    assert lines[1] == "new D 1700 755 0 0"
    assert lines[2] == "var/lib/dbus/machine-id S 1700 777 0 0 /etc/machine-id"
    assert contents == {f"{tmp_path}/overlay-0": b"IMAGE=x\n"}
    assert exclude_lines(["tmp/b", "tmp/a"]) == ["tmp/a", "tmp/b"]
    with pytest.raises(SquashfsError, match="line break"):
        exclude_lines(["tmp/a\nb"])
