"""The newc writer, read back by GNU cpio (an independent reader of the format the kernel unpacks)."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import (
    MAX_FILE_SIZE,
    NewcError,
    NewcWriter,
    header,
)


def parse_newc(data: bytes) -> list[dict]:
    """A minimal newc reader for assertions on header fields GNU cpio does not print."""
    members, pos = [], 0
    while True:
        assert data[pos:pos + 6] == b"070701", f"bad magic at {pos}"
        fields = [int(data[pos + 6 + 8 * i:pos + 14 + 8 * i], 16) for i in range(13)]
        names = ("ino", "mode", "uid", "gid", "nlink", "mtime", "filesize", "devmajor", "devminor",
                 "rdevmajor", "rdevminor", "namesize", "check")
        member = dict(zip(names, fields))
        pos += 110
        member["name"] = data[pos:pos + member["namesize"] - 1]
        pos += member["namesize"]
        pos += (4 - pos % 4) % 4
        member["data"] = data[pos:pos + member["filesize"]]
        pos += member["filesize"]
        pos += (4 - pos % 4) % 4
        if member["name"] == b"TRAILER!!!":
            return members
        members.append(member)


def test_header_layout_is_exact():
    head = header(b"etc/x", ino=1, mode=0o100644, uid=0, gid=0, nlink=1, mtime=0x65000000, filesize=3)
    expected = (b"070701" + b"00000001" + b"000081A4" + b"00000000" * 2 + b"00000001" + b"65000000"
                + b"00000003" + b"00000000" * 4 + b"00000006" + b"00000000" + b"etc/x\0")
    assert head[:len(expected)] == expected
    assert len(head) % 4 == 0 and set(head[len(expected):]) <= {0}


def test_header_refuses_4gib_and_nul():
    with pytest.raises(NewcError, match="4 GiB"):
        header(b"big", ino=1, mode=0o100644, uid=0, gid=0, nlink=1, mtime=0, filesize=MAX_FILE_SIZE + 1)
    with pytest.raises(NewcError, match="NUL"):
        header(b"a\0b", ino=1, mode=0o100644, uid=0, gid=0, nlink=1, mtime=0, filesize=0)


def _write_sample(tmp_path, out_path):
    small = tmp_path / "small"
    small.write_bytes(b"hello\n")
    large = tmp_path / "large"
    large.write_bytes(os.urandom(200_000))  # above the in-buffer limit: the sendfile path
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        writer = NewcWriter(fd)
        writer.add_header_only(b".", ino=1, mode=stat.S_IFDIR | 0o755, uid=0, gid=0, nlink=3, mtime=100)
        writer.add_header_only(b"d", ino=2, mode=stat.S_IFDIR | 0o700, uid=5, gid=6, nlink=2, mtime=100)
        writer.add_file(b"d/small", str(small), 6, ino=3, mode=stat.S_IFREG | 0o644, uid=0, gid=0, nlink=1, mtime=100)
        writer.add_file(b"large", str(large), 200_000, ino=4, mode=stat.S_IFREG | 0o600, uid=0, gid=0, nlink=1,
                        mtime=100)
        writer.add_bytes(b"link", b"d/small", ino=5, mode=stat.S_IFLNK | 0o777, uid=0, gid=0, nlink=1, mtime=100)
        writer.add_header_only(b"null", ino=6, mode=stat.S_IFCHR | 0o666, uid=0, gid=0, nlink=1, mtime=100,
                               rdevmajor=1, rdevminor=3)
        size = writer.finish()
    finally:
        os.close(fd)
    return size, large.read_bytes()


def test_gnu_cpio_lists_and_extracts_what_was_written(tmp_path):
    archive = tmp_path / "a.cpio"
    size, large = _write_sample(tmp_path, archive)
    assert size == archive.stat().st_size and size % 512 == 0
    listing = subprocess.run(["cpio", "-t", "--quiet"], stdin=archive.open("rb"), capture_output=True, check=True)
    assert listing.stdout.decode().split("\n")[:-1] == [".", "d", "d/small", "large", "link", "null"]
    dest = tmp_path / "out"
    dest.mkdir()
    subprocess.run(["cpio", "-i", "-d", "--quiet", "--no-absolute-filenames", "-D", str(dest),
                    "d/small", "large", "link"], stdin=archive.open("rb"), check=True)
    assert (dest / "d" / "small").read_bytes() == b"hello\n"
    assert (dest / "large").read_bytes() == large
    assert os.readlink(dest / "link") == "d/small"


def test_fields_survive_the_round_trip(tmp_path):
    archive = tmp_path / "a.cpio"
    _write_sample(tmp_path, archive)
    members = {m["name"]: m for m in parse_newc(archive.read_bytes())}
    assert members[b"d"]["uid"] == 5 and members[b"d"]["gid"] == 6 and stat.S_IMODE(members[b"d"]["mode"]) == 0o700
    assert (members[b"null"]["rdevmajor"], members[b"null"]["rdevminor"]) == (1, 3)
    assert all(m["devmajor"] == 0 and m["devminor"] == 0 and m["check"] == 0 for m in members.values())


def test_file_that_shrank_is_an_error(tmp_path):
    source = tmp_path / "f"
    source.write_bytes(b"abc")
    fd = os.open(tmp_path / "a.cpio", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(NewcError, match="changed while it was packed"):
            NewcWriter(fd).add_file(b"f", str(source), 10, ino=1, mode=stat.S_IFREG | 0o644, uid=0, gid=0, nlink=1,
                                    mtime=0)
    finally:
        os.close(fd)
