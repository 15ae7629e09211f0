# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a packed artifact or an image tree holds, entry by entry, read in one pass.

Every reader yields :class:`Member` records: path, type, permission bits, owner, size and a
``digest`` that stands for the content (SHA-256 of a regular file's data, a symlink's target,
a device's numbers). Two members are the same when :meth:`Member.key` is.

* cpio (``cpio.zst``/``cpio.gz``/``cpio.xz``): the compressor tool decompresses into a pipe and
  the newc headers (_pack/newc.py's format) are parsed from it; file data is hashed as it
  streams by and never written anywhere.
* squashfs: ``unsquashfs -pf`` writes a *pseudo file* to a pipe, the definitions of every
  entry followed by the data of all regular files in one stream. Nothing is extracted to disk
  and no mount (root, loop device) is needed; unsquashfs decompresses with all processors.
* a directory tree (a mounted layer image): the walk pack uses (_pack/tree.py), with pack's
  default exclusions, so the tree lists what a pack of it would hold.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from typing import IO, Callable, Iterator

from ansible_collections.hpc.stateless.plugins.module_utils._process import ToolMissing, command_env, which
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    CPIO_FORMATS,
    SQUASHFS_FORMAT,
    ArtifactError,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.compress import COMPRESSORS
from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import HEADER_SIZE, MAGIC, TRAILER
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import DEFAULT_EXCLUDES, ExcludeRules, walk

CHUNK = 1 << 20
_FIELDS = 13  # 8-hex-digit fields after the magic in a newc header
_PSEUDO_DATA_MARK = "# START OF DATA - DO NOT MODIFY"
_EMPTY = hashlib.sha256(b"").hexdigest()

KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "symlink", stat.S_IFCHR: "char",
         stat.S_IFBLK: "block", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket"}


@dataclass
class Member:
    """One entry of an image. ``path`` is relative to the root ('' is the root itself)."""

    path: str
    kind: str
    mode: int  # permission bits, set-id and sticky included
    uid: int
    gid: int
    size: int
    digest: str
    data: bytes | None = None  # content of the files the caller asked to keep (small text files)

    def key(self) -> tuple[str, int, int, int, int, str]:
        return (self.kind, self.mode, self.uid, self.gid, self.size, self.digest)


class ListingError(ArtifactError):
    """An artifact cannot be read; the message names the file and what is wrong with it."""


class TruncatedError(ListingError):
    """The stream ended early: the tool that wrote it has finished (and may say why)."""


def _kind(mode: int, where: str) -> str:
    kind = KINDS.get(stat.S_IFMT(mode))
    if kind is None:
        raise ListingError(f"{where}: unknown file type in mode {mode:o}")
    return kind


def _device(major: int, minor: int) -> str:
    return f"{major}:{minor}"


# -- newc ---------------------------------------------------------------------------------------
class _Reader:
    """Exact reads from a byte stream; hashes data without keeping it."""

    def __init__(self, stream: IO[bytes], where: str) -> None:
        self.stream = stream
        self.where = where
        self.offset = 0

    def exact(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise TruncatedError(f"{self.where}: the archive ends inside a member at byte {self.offset + len(data)} "
                                 "(truncated or not a newc cpio archive); re-run the pack step")
        self.offset += size
        return data

    def digest(self, size: int, keep: list[bytes] | None = None) -> str:
        hasher = hashlib.sha256()
        remaining = size
        while remaining:
            data = self.stream.read(min(remaining, CHUNK))
            if not data:
                raise TruncatedError(f"{self.where}: the archive ends inside file data at byte {self.offset}; "
                                     "re-run the pack step")
            hasher.update(data)
            if keep is not None:
                keep.append(data)
            remaining -= len(data)
            self.offset += len(data)
        return hasher.hexdigest()

    def skip_pad(self, length: int) -> None:
        pad = (4 - length % 4) % 4
        if pad:
            self.exact(pad)


def read_newc(stream: IO[bytes], where: str, keep: frozenset[str] = frozenset()) -> Iterator[Member]:
    """Members of a newc archive read from ``stream``; hard-linked names all get the data's digest.

    Pack writes a hard-linked file's data with its last name only (GNU cpio style); the earlier
    names come out once the data is seen. The data of the regular files named in ``keep`` is
    returned in :attr:`Member.data`.
    """
    reader = _Reader(stream, where)
    waiting: dict[int, list[Member]] = {}
    while True:
        at = reader.offset
        head = reader.exact(HEADER_SIZE)
        if head[:len(MAGIC)] != MAGIC:
            raise ListingError(f"{where}: no newc header at byte {at} (found {head[:6]!r}); "
                               "is this a cpio artifact written by hpc.stateless.pack?")
        try:
            fields = [int(head[6 + 8 * i:14 + 8 * i], 16) for i in range(_FIELDS)]
        except ValueError:
            raise ListingError(f"{where}: header at byte {at} has a field that is not hexadecimal") from None
        ino, mode, uid, gid, nlink, _mtime, size, _dmaj, _dmin, rmaj, rmin, namesize, _check = fields
        name = reader.exact(namesize)[:-1]
        reader.skip_pad(HEADER_SIZE + namesize)
        if name == TRAILER:
            break
        path = os.fsdecode(name)
        path = "" if path == "." else path.removeprefix("./")
        kind = _kind(mode, f"{where}: /{path}")
        perm = stat.S_IMODE(mode)
        if kind == "file":
            if nlink > 1 and size == 0:
                waiting.setdefault(ino, []).append(Member(path, kind, perm, uid, gid, 0, ""))
                continue
            kept: list[bytes] | None = [] if path in keep else None
            digest = reader.digest(size, kept)
            reader.skip_pad(size)
            data = b"".join(kept) if kept is not None else None
            for early in waiting.pop(ino, []) if nlink > 1 else []:
                early.size, early.digest = size, digest
                yield early
            yield Member(path, kind, perm, uid, gid, size, digest, data)
        elif kind == "symlink":
            target = reader.exact(size)
            reader.skip_pad(size)
            yield Member(path, kind, perm, uid, gid, size, os.fsdecode(target))
        else:
            reader.exact(size)
            reader.skip_pad(size)
            digest = _device(rmaj, rmin) if kind in ("char", "block") else ""
            yield Member(path, kind, perm, uid, gid, 0, digest)
    for names in waiting.values():  # hard-linked empty files: no member carried data
        for early in names:
            early.digest = _EMPTY
            yield early


# -- tools ---------------------------------------------------------------------------------------
def _find(name: str, hint: str) -> str:
    try:
        return which(name, hint)
    except ToolMissing as exc:
        raise ListingError(str(exc)) from None


def decompressor_argv(fmt: str, find: Callable[[str, str], str] = _find) -> list[str]:
    """argv that decompresses a ``fmt`` artifact from stdin to stdout (the tools pack compresses with)."""
    if fmt not in COMPRESSORS:
        raise ListingError(f"unknown cpio format {fmt!r} (supported: {', '.join(CPIO_FORMATS)})")
    tool = COMPRESSORS[fmt][0]
    if tool == "gzip":
        try:
            return [which("pigz"), "-d", "-c"]
        except ToolMissing:
            return [find("gzip", "Debian: apt-get install gzip"), "-d", "-c"]
    if tool == "xz":
        return [find("xz", "Debian: apt-get install xz-utils"), "-d", "-c", "-q", "-T0"]
    return [find(tool, f"Debian: apt-get install {tool}"), "-d", "-c", "-q"]


class _Pipe:
    """A tool writing to a pipe we read; killed and reaped however the reading ends."""

    def __init__(self, argv: list[str], stdin: IO[bytes] | None, where: str) -> None:
        self.argv = argv
        self.where = where
        self._stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=self._stderr, env=command_env(),
                                         close_fds=True, bufsize=CHUNK)
        except OSError as exc:
            self._stderr.close()
            raise ListingError(f"{' '.join(argv)} could not start: {exc.strerror}") from exc
        if self.proc.stdout is None:  # cannot happen with stdout=PIPE; keeps type checkers honest
            raise ListingError(f"{' '.join(argv)}: no stdout pipe")
        self.stdout: IO[bytes] = self.proc.stdout

    def error(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace").strip()

    def finish(self) -> None:
        """Wait for a tool whose output was read to the end; ListingError when it failed."""
        rest = self.stdout.read(CHUNK).strip(b"\0")  # the archive is padded with NULs to a block
        rc = self.proc.wait()
        if rc != 0:
            raise ListingError(f"{self.where}: {' '.join(self.argv)} failed (rc={rc}): {self.error() or 'no message'}; "
                               "the artifact is damaged: re-run the pack step")
        if rest:
            raise ListingError(f"{self.where}: data after the end of the archive; re-run the pack step")

    def __enter__(self) -> "_Pipe":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.stdout.close()
        self.proc.wait()
        self._stderr.close()


def _with_tool_error(pipe: _Pipe, exc: ListingError) -> ListingError:
    """A stream cut short by a failing tool says what the tool said."""
    if not isinstance(exc, TruncatedError):
        return exc
    try:
        rc = pipe.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return exc
    return ListingError(f"{exc}; {' '.join(pipe.argv)} exited {rc}: {pipe.error() or 'no message'}") if rc else exc


def list_cpio(path: str, fmt: str, keep: frozenset[str] = frozenset()) -> Iterator[Member]:
    """Members of the compressed cpio artifact at ``path``."""
    argv = decompressor_argv(fmt)
    try:
        source = open(path, "rb")
    except OSError as exc:
        raise ListingError(f"{path}: cannot read the artifact: {exc.strerror}") from None
    with source, _Pipe(argv, source, path) as pipe:
        try:
            yield from read_newc(pipe.stdout, path, keep)
        except ListingError as exc:
            raise _with_tool_error(pipe, exc) from None
        pipe.finish()


# -- squashfs ------------------------------------------------------------------------------------
def _pseudo_words(line: str, count: int) -> tuple[list[str], str]:
    """The first ``count`` words of a pseudo-file definition line (blank separated, a backslash escapes
    the next character) and the rest of the line as it is (a symlink's target)."""
    words: list[str] = []
    current: list[str] = []
    escaped = started = False
    for index, char in enumerate(line):
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = started = True
        elif char == " ":
            if started:
                words.append("".join(current))
                current, started = [], False
                if len(words) == count:
                    return words, line[index + 1:]
        else:
            current.append(char)
            started = True
    if started:
        words.append("".join(current))
    return words, ""


def _definition(line: str, where: str) -> tuple[Member, int, str]:
    """(member, data offset, hard-link target) of one ``unsquashfs -pf`` line."""
    words, rest_of_line = _pseudo_words(line, 6)
    bad = ListingError(f"{where}: unsquashfs -pf line not understood: {line!r} (a file name with a line break?)")
    if len(words) < 2:
        raise bad
    path = "" if words[0] == "/" else words[0].strip("/")
    kind = words[1]
    if kind == "L":
        return Member(path, "file", 0, 0, 0, 0, ""), -1, _pseudo_words(line, 2)[1].strip("/")
    if len(words) < 6:
        raise bad
    try:
        perm, uid, gid = int(words[3], 8), int(words[4]), int(words[5])
        rest = rest_of_line.split(" ")
        if kind == "R":
            return Member(path, "file", perm, uid, gid, int(rest[0]), ""), int(rest[1]), ""
        if kind == "D":
            return Member(path, "dir", perm, uid, gid, 0, ""), -1, ""
        if kind == "S":
            target = rest_of_line
            return Member(path, "symlink", perm, uid, gid, len(os.fsencode(target)), target), -1, ""
        if kind in ("C", "B"):
            return (Member(path, "char" if kind == "C" else "block", perm, uid, gid, 0,
                           _device(int(rest[0]), int(rest[1]))), -1, "")
        if kind == "I":
            return Member(path, "fifo" if rest[0] == "f" else "socket", perm, uid, gid, 0, ""), -1, ""
    except (ValueError, IndexError):
        raise bad from None
    raise bad


def read_pseudo(stream: IO[bytes], where: str, keep: frozenset[str] = frozenset()) -> Iterator[Member]:
    """Members of an ``unsquashfs -pf`` stream: definitions first, then the data of every file by offset."""
    members: list[Member] = []
    files: list[tuple[int, Member]] = []
    links: list[tuple[Member, str]] = []
    while True:
        raw = stream.readline()
        if not raw:
            raise TruncatedError(f"{where}: unsquashfs -pf ended before its data section")
        line = os.fsdecode(raw.rstrip(b"\n"))
        if line == "#":
            continue
        if line == _PSEUDO_DATA_MARK:
            if stream.readline() != b"#\n":
                raise ListingError(f"{where}: unsquashfs -pf data section does not start as expected")
            break
        member, offset, link = _definition(line, where)
        if link:
            links.append((member, link))
        else:
            members.append(member)
            if member.kind == "file":
                files.append((offset, member))
    reader = _Reader(stream, where)
    seen: dict[tuple[int, int], str] = {}
    for offset, member in sorted(files, key=lambda f: (f[0], -f[1].size)):
        if member.size == 0:
            member.digest = _EMPTY
            continue
        if (offset, member.size) in seen:  # data shared by several files: same bytes, same digest
            member.digest = seen[(offset, member.size)]
            continue
        if offset < reader.offset:
            raise ListingError(f"{where}: /{member.path}: data offset {offset} overlaps the file before it")
        if offset > reader.offset:
            reader.exact(offset - reader.offset)
        kept: list[bytes] | None = [] if member.path in keep else None
        member.digest = seen[(offset, member.size)] = reader.digest(member.size, kept)
        member.data = b"".join(kept) if kept is not None else None
    by_path = {m.path: m for m in members}
    for member, link in links:
        target = by_path.get(link)
        if target is None:
            raise ListingError(f"{where}: /{member.path} is a hard link to /{link}, which is not in the image")
        members.append(Member(member.path, target.kind, target.mode, target.uid, target.gid, target.size,
                              target.digest))
    return iter(members)


def list_squashfs(path: str, keep: frozenset[str] = frozenset()) -> Iterator[Member]:
    """Members of the squashfs artifact at ``path``, through ``unsquashfs -pf`` on a pipe."""
    binary = _find("unsquashfs", "Debian: apt-get install squashfs-tools (4.5 or later, for -pf)")
    if not os.path.isfile(path):
        raise ListingError(f"{path}: no such artifact file")
    argv = [binary, "-no-progress", "-pf", "/dev/stdout", path]
    with _Pipe(argv, None, path) as pipe:
        try:
            members = read_pseudo(pipe.stdout, path, keep)
        except ListingError as exc:
            raise _with_tool_error(pipe, exc) from None
        pipe.finish()
    yield from members


# -- trees ---------------------------------------------------------------------------------------
def _file_digest(path: bytes, where: str, keep: list[bytes] | None = None) -> str:
    hasher = hashlib.sha256()
    try:
        with open(path, "rb", buffering=0) as handle:
            while True:
                data = handle.read(CHUNK)
                if not data:
                    break
                hasher.update(data)
                if keep is not None:
                    keep.append(data)
    except OSError as exc:
        raise ListingError(f"{where}: cannot read: {exc.strerror}") from None
    return hasher.hexdigest()


def list_tree(root: str, keep: frozenset[str] = frozenset(),
              excludes: tuple[str, ...] | list[str] = DEFAULT_EXCLUDES) -> Iterator[Member]:
    """Members of the tree at ``root`` (a mounted image) as pack would pack it."""
    for entry in walk(root, ExcludeRules(list(excludes))):
        kind = _kind(entry.mode, f"{root}/{entry.rel}")
        perm = stat.S_IMODE(entry.mode)
        if kind == "file":
            kept: list[bytes] | None = [] if entry.rel in keep else None
            digest = _file_digest(entry.path or b"", f"{root}/{entry.rel}", kept)
            yield Member(entry.rel, kind, perm, entry.uid, entry.gid, entry.size, digest,
                         b"".join(kept) if kept is not None else None)
        elif kind == "symlink":
            target = os.fsdecode(os.readlink(entry.path or b""))
            yield Member(entry.rel, kind, perm, entry.uid, entry.gid, len(os.fsencode(target)), target)
        elif kind in ("char", "block"):
            yield Member(entry.rel, kind, perm, entry.uid, entry.gid, 0,
                         _device(os.major(entry.rdev), os.minor(entry.rdev)))
        else:
            yield Member(entry.rel, kind, perm, entry.uid, entry.gid, 0, "")


def list_artifact(path: str, fmt: str, keep: frozenset[str] = frozenset()) -> Iterator[Member]:
    """Members of the artifact at ``path`` of format ``fmt`` (see _contract/names.py FORMATS)."""
    if fmt == SQUASHFS_FORMAT:
        return list_squashfs(path, keep)
    return list_cpio(path, fmt, keep)
