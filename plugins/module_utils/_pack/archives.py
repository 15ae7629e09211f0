# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The members of tar, zip, gzip, bzip2 and xz files, for the secret scan, within fixed bounds.

:func:`scan_archive` walks an archive from a seekable binary stream and hands the beginning of
each member to a test (``sniff(head, whole)``); the first finding is returned with the member
named. What is read, whatever the archive claims:

* archives of :data:`ARCHIVE_MAX_SIZE` (16 MiB) or less; the size of a larger one is not read;
* at most :data:`MAX_MEMBERS` (1024) members, and of each its first ``head_bytes``;
* at most :data:`MAX_EXPANDED` (32 MiB) of decompressed bytes for the whole archive: a
  compressed stream is decompressed in chunks with a bounded output size (``max_length``), never
  whole, so a compression bomb costs at most that much work and a chunk of memory;
* zip: the central directory (its last 64 KiB locate it) lists the members; each is read from its
  local header, stored or deflated (other methods and encrypted members are skipped); ZIP64 and
  split archives are not read;
* tar: ustar and GNU headers with a valid checksum (old V7 archives without the ``ustar`` magic are
  not recognised), GNU long names and pax ``path`` records; regular files only;
* gzip, bzip2 and xz: one compressed stream; a tar inside is walked, anything else is one member.
  A member is not opened as an archive in its turn.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Callable, Protocol

try:
    import bz2
except ImportError:  # pragma: no cover - a Python built without it
    bz2 = None  # type: ignore[assignment]
try:
    import lzma
except ImportError:  # pragma: no cover - a Python built without it
    lzma = None  # type: ignore[assignment]

ARCHIVE_MAX_SIZE = 16 << 20
MAX_MEMBERS = 1024
MAX_EXPANDED = 32 << 20
CHUNK = 64 << 10

GZIP = b"\x1f\x8b"
BZIP2 = b"BZh"
XZ = b"\xfd7zXZ\x00"
ZIP = b"PK\x03\x04"
EMPTY_ZIP = b"PK\x05\x06"
_USTAR = b"ustar"
_TAR_MAGIC_AT = 257
_EOCD = b"PK\x05\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"

Sniff = Callable[[bytes, bool], "str | None"]


def kind_of(head: bytes) -> str | None:
    """The archive format ``head`` (a file's first 512 bytes or more) starts, or None."""
    if head.startswith(GZIP):
        return "gzip"
    if head.startswith(ZIP):
        return "zip"
    if head.startswith(XZ) and lzma is not None:
        return "xz"
    if head.startswith(BZIP2) and bz2 is not None and head[3:4].isdigit():
        return "bzip2"
    if _is_tar_header(head[:512]):
        return "tar"
    return None


def scan_archive(source: BinaryIO, kind: str, size: int, sniff: Sniff, head_bytes: int) -> str | None:
    """The first member of the ``kind`` archive ``source`` (``size`` bytes) that ``sniff`` finds a secret
    in, as ``"<finding> in <kind> member <name>"``, or None."""
    if size > ARCHIVE_MAX_SIZE:
        return None
    budget = _Budget()
    if kind == "zip":
        return _zip(source, size, sniff, head_bytes, budget)
    if kind == "tar":
        source.seek(0)
        return _tar(_Plain(source), "tar", sniff, head_bytes)
    stream = _Expanded(source, kind, budget)
    first = stream.read(512)
    if _is_tar_header(first):
        stream.unread(first)
        return _tar(stream, f"tar ({kind})", sniff, head_bytes)
    rest = stream.read(head_bytes - len(first))
    data = first + rest
    whole = stream.at_end()
    found = sniff(data, whole) if data else None
    return f"{found} in {kind}-compressed content" if found else None


class _Budget:
    """Decompressed bytes still allowed for one archive."""

    def __init__(self) -> None:
        self.left = MAX_EXPANDED

    def take(self, count: int) -> None:
        self.left -= count


class _Stream(Protocol):
    """What the tar walk reads from: a plain or a decompressed stream."""

    def read(self, count: int) -> bytes:
        """Up to ``count`` bytes; fewer only at the end."""

    def skip(self, count: int) -> bool:
        """Pass over ``count`` bytes; False when the stream ended first."""


class _Plain:
    """An uncompressed stream: skipping is seeking."""

    def __init__(self, source: BinaryIO) -> None:
        self.source = source

    def read(self, count: int) -> bytes:
        return self.source.read(count) if count > 0 else b""

    def skip(self, count: int) -> bool:
        self.source.seek(count, 1)
        return True


class _Expanded:
    """A decompressed stream read in bounded steps; it ends early when the archive's budget is spent."""

    def __init__(self, source: BinaryIO, kind: str, budget: _Budget) -> None:
        self.source, self.kind, self.budget = source, kind, budget
        source.seek(0)
        if kind == "gzip":
            self.decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif kind == "bzip2":
            self.decompressor = bz2.BZ2Decompressor()
        else:
            self.decompressor = lzma.LZMADecompressor()
        self.pending = b""  # compressed input not yet consumed (zlib)
        self.buffer = b""  # decompressed output handed back by unread()
        self.ended = False

    def _step(self, limit: int) -> bytes:
        """Up to ``limit`` more decompressed bytes (b"" at the end of the stream or of the input)."""
        limit = min(limit, self.budget.left)
        if self.ended or limit <= 0:
            self.ended = True
            return b""
        try:
            if self.kind == "gzip":
                if not self.pending:
                    self.pending = self.source.read(CHUNK)
                    if not self.pending:
                        self.ended = True
                        return b""
                out = self.decompressor.decompress(self.pending, limit)
                self.pending = self.decompressor.unconsumed_tail
            else:
                data = self.source.read(CHUNK) if self.decompressor.needs_input else b""
                if self.decompressor.needs_input and not data:
                    self.ended = True
                    return b""
                out = self.decompressor.decompress(data, limit)
        except (zlib.error, OSError, EOFError, ValueError):
            self.ended = True
            return b""
        self.ended = self.decompressor.eof
        self.budget.take(len(out))
        return out

    def read(self, count: int) -> bytes:
        out = [self.buffer[:count]]
        self.buffer = self.buffer[count:]
        have = len(out[0])
        stalls = 0
        while have < count and not self.ended and stalls < 64:
            chunk = self._step(count - have)
            stalls = stalls + 1 if not chunk else 0
            out.append(chunk)
            have += len(chunk)
        return b"".join(out)

    def skip(self, count: int) -> bool:
        while count > 0:
            chunk = self.read(min(count, CHUNK))
            if not chunk:
                return False
            count -= len(chunk)
        return True

    def unread(self, data: bytes) -> None:
        self.buffer = data + self.buffer

    def at_end(self) -> bool:
        """True when nothing follows what was read (the stream ended within the budget)."""
        if self.buffer:
            return False
        following = self.read(1)
        if following:
            self.unread(following)
            return False
        return bool(self.decompressor.eof)


def _is_tar_header(block: bytes) -> bool:
    if len(block) < 512 or block[_TAR_MAGIC_AT:_TAR_MAGIC_AT + 5] != _USTAR:
        return False
    stored = _octal(block[148:156])
    return stored is not None and stored == sum(block[:148]) + 8 * 32 + sum(block[156:512])


def _octal(field: bytes) -> int | None:
    if field[:1] and field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return None


def _tar(stream: _Stream, label: str, sniff: Sniff, head_bytes: int) -> str | None:
    long_name: str | None = None
    for _member in range(MAX_MEMBERS * 2):  # long-name and pax records count half
        header = stream.read(512)
        if len(header) < 512 or not _is_tar_header(header):
            return None
        size = _octal(header[124:136]) or 0
        padded = size + (-size % 512)
        kind = header[156:157]
        name = long_name or _tar_name(header)
        long_name = None
        if kind in (b"L", b"x"):
            record = stream.read(min(size, 64 << 10))
            if not stream.skip(padded - len(record)):
                return None
            long_name = _long_name(kind, record)
            continue
        if kind in (b"0", b"\0", b"7") and size:
            data = stream.read(min(size, head_bytes))
            found = sniff(data, len(data) == size) if data else None
            if found:
                return f"{found} in {label} member {name}"
            padded -= len(data)
        if not stream.skip(padded):
            return None
    return None


def _tar_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0]
    return (prefix + b"/" + name if prefix else name).decode("utf-8", "replace")


def _long_name(kind: bytes, record: bytes) -> str | None:
    if kind == b"L":
        return record.split(b"\0", 1)[0].decode("utf-8", "replace") or None
    for line in record.split(b"\n"):  # pax: "<length> path=<name>"
        _length, _space, field = line.partition(b" ")
        if field.startswith(b"path="):
            return field[5:].decode("utf-8", "replace")
    return None


def _zip(source: BinaryIO, size: int, sniff: Sniff, head_bytes: int, budget: _Budget) -> str | None:
    tail_size = min(size, 22 + 0xFFFF)
    source.seek(size - tail_size)
    tail = source.read(tail_size)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) < at + 22:
        return None
    entries, directory_size, directory_at = struct.unpack("<HII", tail[at + 10:at + 20])
    if directory_at + directory_size > size or directory_size > size:
        return None
    source.seek(directory_at)
    directory = source.read(min(directory_size, MAX_MEMBERS * (46 + 3 * 0xFFFF)))
    offset = 0
    for _entry in range(min(entries, MAX_MEMBERS)):
        if directory[offset:offset + 4] != _CENTRAL or len(directory) < offset + 46:
            return None
        flags, method = struct.unpack("<HH", directory[offset + 8:offset + 12])
        compressed, expanded = struct.unpack("<II", directory[offset + 20:offset + 28])
        name_len, extra_len, comment_len = struct.unpack("<HHH", directory[offset + 28:offset + 34])
        local_at = struct.unpack("<I", directory[offset + 42:offset + 46])[0]
        name = directory[offset + 46:offset + 46 + name_len].decode("utf-8", "replace")
        offset += 46 + name_len + extra_len + comment_len
        if flags & 1 or method not in (0, 8) or not expanded or name.endswith("/") or budget.left <= 0:
            continue
        data = _zip_member(source, local_at, method, compressed, min(expanded, head_bytes), budget)
        found = sniff(data, len(data) == expanded) if data else None
        if found:
            return f"{found} in zip member {name}"
    return None


def _zip_member(source: BinaryIO, local_at: int, method: int, compressed: int, want: int, budget: _Budget) -> bytes:
    source.seek(local_at)
    local = source.read(30)
    if len(local) < 30 or not local.startswith(_LOCAL):
        return b""
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    source.seek(local_at + 30 + name_len + extra_len)
    if method == 0:
        data = source.read(min(want, compressed))
        budget.take(len(data))
        return data
    decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
    out, left, pending = [], compressed, b""
    have = 0
    while have < want and budget.left > 0:
        if not pending:
            if left <= 0:
                break
            pending = source.read(min(CHUNK, left))
            left -= len(pending)
            if not pending:
                break
        try:
            chunk = decompressor.decompress(pending, min(want - have, budget.left))
        except zlib.error:
            break
        pending = decompressor.unconsumed_tail
        budget.take(len(chunk))
        out.append(chunk)
        have += len(chunk)
        if decompressor.eof or (not chunk and not pending and left <= 0):
            break
    return b"".join(out)
