# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Streaming writer of the SVR4 "newc" cpio format, the one the Linux kernel unpacks.

Layout of one member (all numbers 8 upper-case hex digits)::

    "070701" ino mode uid gid nlink mtime filesize devmajor devminor
             rdevmajor rdevminor namesize check   name NUL  pad-to-4  data  pad-to-4

The archive ends with a member named ``TRAILER!!!`` and is padded to a 512-byte block,
as GNU cpio does. ``filesize`` is 32 bits wide: no member can hold 4 GiB or more.

The writer never holds a file in memory: small files go through a 1 MiB buffer, large
ones are copied kernel-side with ``sendfile(2)`` straight into the output descriptor
(a pipe to the compressor, usually).
"""

from __future__ import annotations

import errno
import os

MAGIC = b"070701"
TRAILER = b"TRAILER!!!"
HEADER_SIZE = 110
MAX_FILE_SIZE = 0xFFFFFFFF  # newc filesize field: 32 bits
BLOCK = 512

_BUFFER_LIMIT = 1 << 20
_SMALL_FILE = 1 << 16
_SENDFILE_CHUNK = 1 << 30


class NewcError(Exception):
    """A member cannot be written (too large, changed while read, name invalid)."""


def _pad4(length: int) -> int:
    return (4 - length % 4) % 4


def header(name: bytes, *, ino: int, mode: int, uid: int, gid: int, nlink: int, mtime: int,
           filesize: int, rdevmajor: int = 0, rdevminor: int = 0) -> bytes:
    """Header + NUL-terminated name + padding of one member (device of the archive is 0:0)."""
    if b"\0" in name:
        raise NewcError(f"member name {name!r} contains a NUL byte")
    if filesize > MAX_FILE_SIZE:
        raise NewcError(f"{name.decode('utf-8', 'replace')}: {filesize} bytes do not fit the cpio newc format "
                        f"(largest member: {MAX_FILE_SIZE} bytes, 4 GiB - 1)")
    namesize = len(name) + 1
    fields = (ino, mode, uid, gid, nlink, mtime, filesize, 0, 0, rdevmajor, rdevminor, namesize, 0)
    for value in fields:
        if value < 0 or value > 0xFFFFFFFF:
            raise NewcError(f"{name.decode('utf-8', 'replace')}: header field value {value} out of range")
    head = MAGIC + b"%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X" % fields + name + b"\0"
    return head + b"\0" * _pad4(len(head))


class NewcWriter:
    """Write members to a file descriptor; call :meth:`finish` once at the end.

    ``bytes_written`` counts the archive bytes so far (the uncompressed stream size).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.bytes_written = 0
        self._buffer = bytearray()

    # -- low level -----------------------------------------------------------------
    def _flush(self) -> None:
        view = memoryview(self._buffer)
        while view:
            done = os.write(self.fd, view)
            view = view[done:]
        view.release()
        self._buffer.clear()

    def _emit(self, data: bytes) -> None:
        self._buffer += data
        self.bytes_written += len(data)
        if len(self._buffer) >= _BUFFER_LIMIT:
            self._flush()

    def _copy_file(self, source: str | bytes, size: int, display: str) -> None:
        """Append exactly ``size`` bytes of ``source``; fail if it is not that long any more."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            src = os.open(source, flags)
        except OSError as exc:
            raise NewcError(f"{display}: cannot open: {exc.strerror}") from exc
        try:
            if size <= _SMALL_FILE:
                data = os.read(src, size + 1)
                if len(data) != size:
                    raise NewcError(f"{display} changed while it was packed (expected {size} bytes, read "
                                    f"{len(data)}); pack an image that is not being modified")
                self._emit(data)
                return
            self._flush()
            offset = 0
            while offset < size:
                try:
                    sent = os.sendfile(self.fd, src, offset, min(size - offset, _SENDFILE_CHUNK))
                except OSError as exc:
                    if exc.errno in (errno.EINVAL, errno.ENOSYS):  # no sendfile for this pair: copy
                        sent = self._copy_read_write(src, offset, size - offset)
                    else:
                        raise
                if sent == 0:
                    raise NewcError(f"{display} changed while it was packed (expected {size} bytes, read "
                                    f"{offset}); pack an image that is not being modified")
                offset += sent
            self.bytes_written += size
        finally:
            os.close(src)

    def _copy_read_write(self, src: int, offset: int, remaining: int) -> int:
        data = os.pread(src, min(remaining, _BUFFER_LIMIT), offset)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        return len(data)

    def _pad_data(self, size: int) -> None:
        pad = _pad4(size)
        if pad:
            self._emit(b"\0" * pad)

    # -- members -------------------------------------------------------------------
    def add_header_only(self, name: bytes, *, ino: int, mode: int, uid: int, gid: int, nlink: int, mtime: int,
                        rdevmajor: int = 0, rdevminor: int = 0) -> None:
        """A member without data: directory, device, FIFO, socket, or a hard link's early name."""
        self._emit(header(name, ino=ino, mode=mode, uid=uid, gid=gid, nlink=nlink, mtime=mtime, filesize=0,
                          rdevmajor=rdevmajor, rdevminor=rdevminor))

    def add_bytes(self, name: bytes, data: bytes, *, ino: int, mode: int, uid: int, gid: int, nlink: int,
                  mtime: int) -> None:
        """A member whose data is given (symlink target, generated file)."""
        self._emit(header(name, ino=ino, mode=mode, uid=uid, gid=gid, nlink=nlink, mtime=mtime, filesize=len(data)))
        self._emit(data)
        self._pad_data(len(data))

    def add_file(self, name: bytes, source: str | bytes, size: int, *, ino: int, mode: int, uid: int, gid: int,
                 nlink: int, mtime: int) -> None:
        """A regular file copied from ``source`` (never followed if it is a symlink)."""
        self._emit(header(name, ino=ino, mode=mode, uid=uid, gid=gid, nlink=nlink, mtime=mtime, filesize=size))
        self._copy_file(source, size, os.fsdecode(name))
        self._pad_data(size)

    def finish(self) -> int:
        """Write the trailer, pad to 512 bytes, flush; returns the archive size."""
        self._emit(header(TRAILER, ino=0, mode=0, uid=0, gid=0, nlink=1, mtime=0, filesize=0))
        pad = (BLOCK - self.bytes_written % BLOCK) % BLOCK
        if pad:
            self._emit(b"\0" * pad)
        self._flush()
        return self.bytes_written
