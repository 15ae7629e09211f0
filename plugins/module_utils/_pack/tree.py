# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tree side of packing: what is packed, in which order, and what must not be.

* :class:`ExcludeRules` - shell globs on paths relative to the image root.
* :class:`Overlay` - entries that exist only in the packed copy (``/etc/image-release``...).
* :func:`walk` - the one sorted, depth-first walk both passes use: parents before children,
  names sorted bytewise, excluded subtrees pruned, overlay entries merged in.
* :func:`scan_tree` - pass 1, before any byte is written: sizes, hard links, secrets (by name,
  and by content through :mod:`.secrets`), files too large for cpio, prune points (for mksquashfs),
  file capabilities (``security.capability``, which cpio cannot carry: see :mod:`.capabilities`).
* :func:`write_cpio` - pass 2: the newc stream, with normalised inode numbers and mtimes
  clamped to SOURCE_DATE_EPOCH, so packing the same tree twice gives the same bytes.

Nothing here keeps the tree in memory: the walk holds the listings of the directories on
the current path only.
"""

from __future__ import annotations

import errno
import fnmatch
import heapq
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import MAX_FILE_SIZE, NewcWriter
from ansible_collections.hpc.stateless.plugins.module_utils._pack.secrets import sniff_bytes, sniff_file, sniff_many

# Runtime trees and caches that never belong in a node image. The directories stay (empty):
# systemd mounts over /proc, /sys, /run, /tmp; apt and dnf recreate their caches.
DEFAULT_EXCLUDES = (
    "proc/*",
    "sys/*",
    "run/*",
    "tmp/*",
    "var/tmp/*",
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/archives/partial/*",
    "var/lib/apt/lists/*",
    "var/cache/dnf/*",
    "var/cache/yum/*",
    "var/cache/zypp/*",
    "var/cache/debconf/*-old",
    "var/log/journal/*",
    # The kernel and its initrd are published next to the image; in a RAM root they are dead weight.
    "boot/*",
    # Debian's links to the kernel and initrd in /boot.
    "vmlinuz",
    "vmlinuz.old",
    "initrd.img",
    "initrd.img.old",
)

# (glob, what it is). Regular files only; matched after exclusions.
SECRET_RULES = (
    ("etc/ssh/ssh_host_*key", "SSH host private key"),
    ("etc/ssh/ssh_host_key", "SSH host private key"),
    ("*/.ssh/id_*", "SSH private key"),
    ("etc/munge/munge.key", "MUNGE key"),
    ("etc/slurm/jwt*.key", "Slurm JWT key"),
    ("var/spool/slurm*/jwt*.key", "Slurm JWT key"),
    ("etc/slurm/slurm.key", "Slurm auth/slurm key"),
    # The password of pam_ldap's and libnss-ldap's rootbinddn, alone in its file: nothing in it says what it is.
    ("etc/ldap.secret", "LDAP bind password file"),
    ("etc/pam_ldap.secret", "LDAP bind password file"),
    ("etc/libnss-ldap.secret", "LDAP bind password file"),
)


# The extended attribute that holds a file's capabilities (struct vfs_cap_data, see _pack/capabilities.py).
CAPABILITY_XATTR = "security.capability"
# What getxattr says of a file without the attribute, or on a file system without extended attributes.
_NO_XATTR = frozenset({errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP})


class PackTreeError(Exception):
    """The tree cannot be packed as asked; the message names the path at fault."""


def read_capability(path: bytes) -> bytes | None:
    """The raw ``security.capability`` of the file at ``path`` (never through a link), None when it has none."""
    try:
        return os.getxattr(path, CAPABILITY_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in _NO_XATTR:
            return None
        raise PackTreeError(f"{os.fsdecode(path)}: cannot read its {CAPABILITY_XATTR}: {exc.strerror}") from exc


def _normalise_pattern(pattern: str) -> str:
    pattern = pattern.strip()
    while pattern.startswith("/") or pattern.startswith("./"):
        pattern = pattern[1:] if pattern.startswith("/") else pattern[2:]
    return pattern.rstrip("/")


def _compile(patterns: list[str]) -> re.Pattern[str] | None:
    cleaned = [_normalise_pattern(p) for p in patterns if _normalise_pattern(p)]
    if not cleaned:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in cleaned))


class ExcludeRules:
    """Shell globs matched against the path relative to the root (``etc/ssh/x``, no leading ``/``).

    ``*`` also matches ``/``: ``var/tmp/*`` drops everything below ``var/tmp`` and keeps the
    directory itself; ``usr/share/doc`` drops the directory and its contents.

    ``paths`` are exact relative paths left out as well (a hardware profile's pruned modules and
    firmware: thousands of names, looked up in a set rather than matched as globs).
    """

    def __init__(self, patterns: list[str] | tuple[str, ...] = (), paths: set[str] | frozenset[str] = frozenset()) -> None:
        self.patterns = [_normalise_pattern(p) for p in patterns if _normalise_pattern(p)]
        self._regex = _compile(self.patterns)
        self.paths = frozenset(paths)

    def excluded(self, rel: str) -> bool:
        return rel in self.paths or bool(self._regex and self._regex.match(rel))


@dataclass(frozen=True)
class Secret:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"/{self.path} ({self.reason})"


class SecretRules:
    """Which files are secrets (by name, then by content), and which of those the user allowed.

    ``by_content=False`` keeps the name rules only (the benchmark measures what the content
    scan costs with it).
    """

    def __init__(self, extra_patterns: list[str] | tuple[str, ...] = (),
                 allowed: list[str] | tuple[str, ...] = (), by_content: bool = True) -> None:
        rules = [(_normalise_pattern(glob), reason) for glob, reason in SECRET_RULES]
        rules += [(_normalise_pattern(glob), "named in secret_patterns") for glob in extra_patterns
                  if _normalise_pattern(glob)]
        self._rules = [(re.compile(fnmatch.translate(glob)), reason) for glob, reason in rules]
        self._allowed = _compile(list(allowed))
        self.by_content = by_content

    def classify(self, rel: str, path: str | bytes, size: int) -> str | None:
        """Why the regular file at ``rel`` (``size`` bytes, by lstat) is a secret, or None."""
        return self.by_name(rel) or (sniff_file(path, size) if self.by_content else None)

    def classify_data(self, rel: str, data: bytes) -> str | None:
        """Why a file that pack adds at ``rel`` holding ``data`` is a secret, or None."""
        return self.by_name(rel) or (sniff_bytes(data) if self.by_content else None)

    def by_name(self, rel: str) -> str | None:
        """Why the file at ``rel`` is a secret by its path alone (the name rules), or None."""
        name = rel.rsplit("/", 1)[-1]
        for regex, reason in self._rules:
            if regex.match(rel) and not name.endswith(".pub"):
                return reason
        return None

    def allowed(self, rel: str) -> bool:
        return bool(self._allowed and self._allowed.match(rel))


@dataclass
class Entry:
    """One member of the packed tree. ``path`` is None for overlay entries (``data`` holds them)."""

    rel: str
    path: bytes | None
    mode: int
    uid: int
    gid: int
    size: int
    mtime: int
    nlink: int = 1
    rdev: int = 0
    dev: int = 0
    ino: int = 0
    subdirs: int = 0
    data: bytes | None = None

    @property
    def name(self) -> bytes:
        return os.fsencode(self.rel)

    @classmethod
    def from_stat(cls, rel: str, path: bytes, st: os.stat_result) -> "Entry":
        return cls(rel=rel, path=path, mode=st.st_mode, uid=st.st_uid, gid=st.st_gid, size=st.st_size,
                   mtime=int(st.st_mtime), nlink=st.st_nlink, rdev=st.st_rdev, dev=st.st_dev, ino=st.st_ino)


@dataclass
class OverlayFile:
    """A file, directory, symlink or device node added to (or replacing one in) the packed copy."""

    rel: str
    mode: int
    data: bytes = b""
    uid: int = 0
    gid: int = 0
    rdev: int = 0
    cpio_only: bool = False

    def entry(self, mtime: int) -> Entry:
        size = len(self.data) if stat.S_ISREG(self.mode) or stat.S_ISLNK(self.mode) else 0
        return Entry(rel=self.rel, path=None, mode=self.mode, uid=self.uid, gid=self.gid, size=size,
                     mtime=mtime, rdev=self.rdev, data=self.data)


class Overlay:
    """Overlay entries by path; missing parent directories are created (0755 root:root)."""

    def __init__(self, files: list[OverlayFile], mtime: int) -> None:
        self.mtime = mtime
        self.files = {f.rel.strip("/"): f for f in files}

    def for_format(self, cpio: bool) -> "Overlay":
        return Overlay([f for f in self.files.values() if cpio or not f.cpio_only], self.mtime)

    def children(self, dir_rel: str, root: bytes) -> dict[str, Entry]:
        """Overlay entries directly below ``dir_rel`` ('' for the root), plus missing parents."""
        found: dict[str, Entry] = {}
        prefix = "" if dir_rel == "" else dir_rel + "/"
        for rel, item in self.files.items():
            if not rel.startswith(prefix):
                continue
            rest = rel[len(prefix):]
            head = rest.split("/", 1)[0]
            child = prefix + head
            if "/" in rest:
                if child not in found and not _imagepath.exists_literal(os.fsdecode(root), child):
                    found[child] = Entry(rel=child, path=None, mode=stat.S_IFDIR | 0o755, uid=0, gid=0,
                                         size=0, mtime=self.mtime, nlink=2)
            else:
                found[child] = item.entry(self.mtime)
        return found

    def paths(self) -> list[str]:
        return sorted(self.files)


def _list_dir(root: bytes, dir_rel: str, dir_path: bytes | None, rules: ExcludeRules,
              overlay: Overlay | None, on_excluded: Callable[[str], None] | None) -> list[Entry]:
    entries: dict[str, Entry] = {}
    if dir_path is not None:
        try:
            scanner = os.scandir(dir_path)
        except OSError as exc:
            raise PackTreeError(f"/{dir_rel}: cannot list directory: {exc.strerror}") from exc
        with scanner:
            for item in scanner:
                name = os.fsdecode(item.name)
                rel = name if dir_rel == "" else f"{dir_rel}/{name}"
                if rules.excluded(rel):
                    if on_excluded:
                        on_excluded(rel)
                    continue
                entries[rel] = Entry.from_stat(rel, item.path, item.stat(follow_symlinks=False))
    if overlay is not None:
        for rel, entry in overlay.children(dir_rel, root).items():
            existing = entries.get(rel)
            if existing is not None and stat.S_ISDIR(existing.mode) and stat.S_ISDIR(entry.mode):
                continue  # a parent directory the tree already has
            entries[rel] = entry
    return [entries[rel] for rel in sorted(entries, key=os.fsencode)]


def walk(root: str | bytes, rules: ExcludeRules, overlay: Overlay | None = None,
         on_excluded: Callable[[str], None] | None = None) -> Iterator[Entry]:
    """Every packed entry, the root (``rel == ''``) first, parents before children, names sorted.

    Directories carry ``subdirs``, the number of packed subdirectories (for ``nlink``).
    """
    root_b = os.fsencode(root)
    try:
        root_entry = Entry.from_stat("", root_b, os.lstat(root_b))
    except OSError as exc:
        raise PackTreeError(f"{os.fsdecode(root_b)}: {exc.strerror}") from exc
    if not stat.S_ISDIR(root_entry.mode):
        raise PackTreeError(f"{os.fsdecode(root_b)} is not a directory")
    children = _list_dir(root_b, "", root_b, rules, overlay, on_excluded)
    root_entry.subdirs = sum(1 for c in children if stat.S_ISDIR(c.mode))
    yield root_entry
    stack = [iter(children)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if stat.S_ISDIR(entry.mode):
            children = _list_dir(root_b, entry.rel, entry.path, rules, overlay, on_excluded)
            entry.subdirs = sum(1 for c in children if stat.S_ISDIR(c.mode))
            yield entry
            stack.append(iter(children))
        else:
            yield entry


@dataclass
class TreeScan:
    """What pass 1 learnt about the tree."""

    entries: int = 0
    files: int = 0
    total_bytes: int = 0
    newest_mtime: int = 0
    hardlinks: dict[tuple[int, int], int] = field(default_factory=dict)
    too_large: list[tuple[str, int]] = field(default_factory=list)
    secrets: list[Secret] = field(default_factory=list)
    allowed_secrets: list[Secret] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    dir_bytes: dict[str, int] = field(default_factory=dict)
    largest_files: list[tuple[int, str]] = field(default_factory=list)
    # (path, raw security.capability) of every packed regular file that has one, in walk order
    capabilities: list[tuple[str, bytes]] = field(default_factory=list)

    def largest_directories(self, count: int = 20) -> list[dict[str, object]]:
        """Directories by cumulative size of what is packed below them (the root left out)."""
        totals = dict(self.dir_bytes)
        for rel in sorted(totals, key=lambda r: r.count("/"), reverse=True):
            if rel:
                parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
                totals[parent] = totals.get(parent, 0) + totals[rel]
        ranked = heapq.nlargest(count, ((size, rel) for rel, size in totals.items() if rel), key=lambda t: (t[0], t[1]))
        return [{"path": "/" + rel, "bytes": size} for size, rel in ranked]


def scan_tree(root: str | bytes, rules: ExcludeRules, secrets: SecretRules, overlay: Overlay | None = None,
              keep_largest: int = 20) -> TreeScan:
    """Pass 1: read metadata of everything that will be packed; no byte is written.

    Secrets by name are found during the walk; the files no name rule names are sniffed by content after
    it, all together (:func:`.secrets.sniff_many`), and every finding is listed in walk order."""
    scan = TreeScan()
    named: list[tuple[int, str, str]] = []  # (walk order, rel, reason)
    to_sniff: list[tuple[bytes, int]] = []
    sniffed: list[tuple[int, str]] = []  # (walk order, rel) of each file of to_sniff
    for entry in walk(root, rules, overlay, on_excluded=scan.excluded.append):
        scan.entries += 1
        scan.newest_mtime = max(scan.newest_mtime, entry.mtime)
        if stat.S_ISDIR(entry.mode):
            scan.dir_bytes.setdefault(entry.rel, 0)
            continue
        size = entry.size if stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode) else 0
        parent = entry.rel.rsplit("/", 1)[0] if "/" in entry.rel else ""
        if not stat.S_ISREG(entry.mode):
            scan.total_bytes += size
            scan.dir_bytes[parent] = scan.dir_bytes.get(parent, 0) + size
            continue
        capability = read_capability(entry.path) if entry.path is not None else None
        if capability is not None:
            scan.capabilities.append((entry.rel, capability))  # every name of a hard-linked file
        key = (entry.dev, entry.ino)
        if entry.path is not None and entry.nlink > 1:
            seen = scan.hardlinks.get(key, 0)
            scan.hardlinks[key] = seen + 1
            if seen:
                continue  # the data of a hard link is packed once
        scan.files += 1
        scan.total_bytes += size
        scan.dir_bytes[parent] = scan.dir_bytes.get(parent, 0) + size
        if size > MAX_FILE_SIZE:
            scan.too_large.append((entry.rel, size))
        if len(scan.largest_files) < keep_largest:
            heapq.heappush(scan.largest_files, (size, entry.rel))
        elif size > scan.largest_files[0][0]:
            heapq.heapreplace(scan.largest_files, (size, entry.rel))
        if entry.path is not None:
            reason = secrets.by_name(entry.rel)
            if reason:
                named.append((scan.entries, entry.rel, reason))
            elif secrets.by_content:
                to_sniff.append((entry.path, size))
                sniffed.append((scan.entries, entry.rel))
    for index, reason in sniff_many(to_sniff).items():
        named.append((*sniffed[index], reason))
    for _order, rel, reason in sorted(named):
        (scan.allowed_secrets if secrets.allowed(rel) else scan.secrets).append(Secret(rel, reason))
    scan.hardlinks = {k: v for k, v in scan.hardlinks.items() if v > 1}
    return scan


def scan_overlay(overlay: Overlay, secrets: SecretRules, scan: TreeScan) -> None:
    """Pass 1 for the regular files pack adds itself (regenerated depmod data, the unpruned alias table,
    the release file): the same secret rules, by name and by content, as for the files of the tree."""
    for rel, item in sorted(overlay.files.items()):
        if stat.S_ISREG(item.mode):
            reason = secrets.classify_data(rel, item.data)
            if reason:
                (scan.allowed_secrets if secrets.allowed(rel) else scan.secrets).append(Secret(rel, reason))


def write_cpio(root: str | bytes, rules: ExcludeRules, overlay: Overlay | None, hardlinks: dict[tuple[int, int], int],
               source_date_epoch: int, fd: int) -> int:
    """Pass 2: stream the newc archive of the tree to ``fd``; returns the archive size.

    ``hardlinks`` is :attr:`TreeScan.hardlinks` (how many names of each linked inode are
    packed): GNU cpio style, the data goes with the last name. Inode numbers are handed out
    in walk order from 1; mtimes newer than ``source_date_epoch`` are clamped to it.
    """
    writer = NewcWriter(fd)
    next_ino = 0
    pending: dict[tuple[int, int], list[int]] = {}
    for entry in walk(root, rules, overlay):
        name = entry.name if entry.rel else b"."
        fields = dict(mode=entry.mode, uid=entry.uid, gid=entry.gid, mtime=min(entry.mtime, source_date_epoch))
        kind = stat.S_IFMT(entry.mode)
        if kind == stat.S_IFREG:
            key = (entry.dev, entry.ino)
            count = hardlinks.get(key) if entry.path is not None and entry.nlink > 1 else None
            if count:
                state = pending.get(key)
                if state is None:
                    next_ino += 1
                    state = pending[key] = [next_ino, 0]
                state[1] += 1
                if state[1] < count:
                    writer.add_header_only(name, ino=state[0], nlink=count, **fields)
                    continue
                del pending[key]
                ino, nlink = state[0], count
            else:
                next_ino += 1
                ino, nlink = next_ino, 1
            if entry.path is None:
                writer.add_bytes(name, entry.data or b"", ino=ino, nlink=nlink, **fields)
            else:
                writer.add_file(name, entry.path, entry.size, ino=ino, nlink=nlink, **fields)
            continue
        next_ino += 1
        if kind == stat.S_IFDIR:
            writer.add_header_only(name, ino=next_ino, nlink=2 + entry.subdirs, **fields)
        elif kind == stat.S_IFLNK:
            target = entry.data if entry.path is None else os.readlink(entry.path)
            writer.add_bytes(name, target or b"", ino=next_ino, nlink=1, **fields)
        else:
            writer.add_header_only(name, ino=next_ino, nlink=1, rdevmajor=os.major(entry.rdev),
                                   rdevminor=os.minor(entry.rdev), **fields)
    if pending:
        names = ", ".join(str(k) for k in list(pending)[:5])
        raise PackTreeError(f"hard-linked files changed while they were packed (inodes {names}); "
                            "pack an image that is not being modified")
    return writer.finish()
