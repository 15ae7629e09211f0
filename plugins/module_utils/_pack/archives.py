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
  whole, so a compression bomb costs at most that much output and a chunk of memory;
* every compressed byte at most once: the work a decompressor does without output (a deflate
  stream of empty blocks) is bounded by the archive's size, whatever its members claim. Zip
  members that share their data (the directory points several members at one stream) would be
  read again and again: such an archive is refused (below), as is a zip member whose data does not
  expand to the size its directory entry gives;
* zip: the central directory (its last 64 KiB locate it) lists the members; each is read from its
  local header, stored or deflated (other methods and encrypted members are skipped); ZIP64 and
  split archives are not read;
* tar: ustar and GNU headers with a valid checksum (old V7 archives without the ``ustar`` magic are
  not recognised), GNU long names and pax ``path`` records; regular files only;
* gzip, bzip2 and xz: one compressed stream; a tar inside is walked, anything else is one member.
  Concatenated streams (``cat a.gz b.gz``) are read on, as gzip, bzip2 and xz themselves do;
  bytes after the last stream that start no stream are ignored, as they do.
  A member is not opened as an archive in its turn.

An archive the walk cannot read through is a finding of its own (:class:`Unscannable`, reported as
``"<kind> file the secret scan cannot read: <why>"``): compressed data that is damaged or ends before
its stream does, zip members that overlap or disagree with the directory. Such a file hides what
follows the damage from the scan, and a file built to hide it is what a leak looks like; the
bounds above (size, members, decompressed bytes) stop the walk quietly, as documented.
zstd, lz4 and lzo files are not opened (the standard library has no decompressor for them).
"""

from __future__ import annotations

import bisect
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

_DAMAGED = (zlib.error, OSError, EOFError, ValueError) + ((lzma.LZMAError,) if lzma is not None else ())
_MAGIC = {"gzip": GZIP, "bzip2": BZIP2, "xz": XZ}


class Unscannable(Exception):
    """The walk cannot read an archive through: why (the member or the byte at fault)."""


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
    budget = _Budget(size)
    try:
        return _scan(source, kind, sniff, head_bytes, budget)
    except Unscannable as exc:
        return f"{kind} file the secret scan cannot read: {exc}"


def _scan(source: BinaryIO, kind: str, sniff: Sniff, head_bytes: int, budget: _Budget) -> str | None:
    if kind == "zip":
        return _zip(source, sniff, head_bytes, budget)
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
    """Decompressed bytes still allowed for one archive, and compressed bytes still to be read of its ``size``."""

    def __init__(self, size: int) -> None:
        self.left = MAX_EXPANDED
        self.size = self.unread = size

    def take(self, count: int) -> None:
        self.left -= count

    def read(self, count: int) -> None:
        """Count ``count`` compressed bytes read; more than the archive holds means members share their data."""
        self.unread -= count
        if self.unread < 0:
            raise Unscannable(f"its members overlap: their data adds up to more than the archive's {self.size} "
                              "bytes (several members point at the same data, as in a zip bomb)")


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
        self.decompressor = self._decompressor()
        self.pending = b""  # compressed input not yet consumed
        self.buffer = b""  # decompressed output handed back by unread()
        self.consumed = 0  # compressed bytes fed to the decompressors
        self.ended = False

    def _decompressor(self):  # type: ignore[no-untyped-def]
        if self.kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.kind == "bzip2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor()

    def _input(self) -> bytes:
        """The compressed bytes not yet consumed: the pending ones, else the next chunk of the file."""
        if not self.pending:
            self.pending = self.source.read(CHUNK)
        return self.pending

    def _step(self, limit: int) -> bytes:
        """Up to ``limit`` more decompressed bytes (b"" at the end of the stream or of the budget)."""
        limit = min(limit, self.budget.left)
        if self.ended or limit <= 0:
            self.ended = True
            return b""
        if self.decompressor.eof:
            # The stream ended: another one may follow (concatenated files); other bytes are ignored.
            following = self.decompressor.unused_data + self.pending
            self.pending = following or self.source.read(CHUNK)
            if not self.pending.startswith(_MAGIC[self.kind][:len(self.pending)]) or not self.pending:
                self.ended = True
                return b""
            self.decompressor = self._decompressor()
        data = self._input() if self.kind == "gzip" or self.decompressor.needs_input else b""
        if not data and (self.kind == "gzip" or self.decompressor.needs_input):
            raise Unscannable(f"its {self.kind} data ends at byte {self.consumed}, before its stream does "
                              "(a truncated file)")
        before = len(data)
        try:
            out = self.decompressor.decompress(data, limit)
        except _DAMAGED as exc:
            raise Unscannable(f"its {self.kind} data is damaged after compressed byte {self.consumed} "
                              f"({exc or type(exc).__name__})") from None
        if self.kind == "gzip":
            self.pending = self.decompressor.unconsumed_tail
        else:
            self.pending = b""
        self.consumed += before - len(self.pending)
        if not out and before == len(self.pending) and not self.decompressor.eof:
            raise Unscannable(f"its {self.kind} decompressor made no progress at compressed byte {self.consumed}")
        self.budget.take(len(out))
        return out

    def read(self, count: int) -> bytes:
        out = [self.buffer[:count]]
        self.buffer = self.buffer[count:]
        have = len(out[0])
        while have < count and not self.ended:
            chunk = self._step(count - have)
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
        return self.budget.left > 0


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


def _zip(source: BinaryIO, sniff: Sniff, head_bytes: int, budget: _Budget) -> str | None:
    size = budget.size
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
    starts: list[int] = []  # the data each member read spans, sorted: [starts[i], ends[i])
    ends: list[int] = []
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
        want = min(expanded, head_bytes, budget.left)
        place = bisect.bisect(starts, local_at)
        if place and ends[place - 1] > local_at or place < len(starts) and starts[place] < local_at + 30 + compressed:
            raise Unscannable(f"member {name} overlaps another member's data (several members point at the same "
                              "data, as in a zip bomb)")
        starts.insert(place, local_at)
        ends.insert(place, local_at + 30 + compressed)
        try:
            data = _zip_member(source, local_at, method, compressed, want, budget)
        except Unscannable as exc:
            raise Unscannable(f"member {name}: {exc}") from None
        if len(data) < want:
            raise Unscannable(f"member {name}: its data expands to {len(data)} bytes, its directory entry says "
                              f"{expanded} (a damaged or crafted archive)")
        found = sniff(data, len(data) == expanded) if data else None
        if found:
            return f"{found} in zip member {name}"
    return None


def _zip_member(source: BinaryIO, local_at: int, method: int, compressed: int, want: int, budget: _Budget) -> bytes:
    """Up to ``want`` bytes of the member whose local header is at ``local_at``; every compressed byte read counts
    against the archive's size (:meth:`_Budget.read`)."""
    source.seek(local_at)
    local = source.read(30)
    if len(local) < 30 or not local.startswith(_LOCAL):
        raise Unscannable(f"no local header at byte {local_at}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    source.seek(local_at + 30 + name_len + extra_len)
    if method == 0:
        data = source.read(min(want, compressed))
        budget.read(len(data))
        budget.take(len(data))
        return data
    decompressor = zlib.decompressobj(-zlib.MAX_WBITS)
    out, left, pending = [], compressed, b""
    have = 0
    while have < want:
        if not pending:
            if left <= 0:
                break
            pending = source.read(min(CHUNK, left))
            budget.read(len(pending))
            left -= len(pending)
            if not pending:
                break
        try:
            chunk = decompressor.decompress(pending, want - have)
        except zlib.error as exc:
            raise Unscannable(f"its deflate data is damaged ({exc})") from None
        pending = decompressor.unconsumed_tail
        budget.take(len(chunk))
        out.append(chunk)
        have += len(chunk)
        if decompressor.eof:
            break
    return b"".join(out)
