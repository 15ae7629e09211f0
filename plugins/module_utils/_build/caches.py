# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's package caches as each layer build sees them: a private view over a shared pool.

Every build on a host (two projects, two CI jobs on one runner) reads packages from the same pool,
``/var/cache/hpc-stateless/{apt,dnf,zypp}``. apt locks its archive directory for a whole
``apt-get install`` and never waits for that lock (``DPkg::Lock::Timeout`` only covers dpkg's own
lock), dnf and zypper take their cache the same way: bound as is, the second of two builds fails.
Sharing the directory buys nothing but the downloaded packages themselves, so a build binds a view of
its own instead.

A build's package scripts and roles run as root in its container, and apt takes a package file it finds in
its cache by name and size alone, without its hash ("Need to get 0 B"): whatever a build can write into the
pool, every later build installs. So no build can change or add a file of the pool:

* :func:`open_view` - ``<views>/<container>/<n>-<cache>``: an overlay whose lower directory (``.lower``) holds a
  hard link of every package file of the pool (``.deb``, ``.rpm``, ``.drpm``; no lock file, no metadata) and
  whose upper directory (``.upper``) takes every write of the build. A write to a pooled file copies it up
  first: the pool's file is never changed. A ``.deb`` is linked only when its SHA256 and size are what the
  image's own apt lists say of that file name (:func:`apt_archive_hashes`: the Packages indexes apt verified
  against the signed InRelease), so a file some other build put into the pool reaches apt only when it is the
  archive's. dnf and zypper check a cached package's checksum against their repository metadata themselves.
* :func:`merge` - at commit, the package files the build added (regular files of ``.upper``: never a link,
  never a file the pool already has, a ``.deb`` only when its SHA256 is what the committing image's lists say)
  are copied into the pool, each under a temporary name and renamed, read through a descriptor opened
  without following links. A bootstrap's merge (mmdebstrap's apt reads the whole pool, unvouched) takes only the
  lists a Release file signed by the sources' keys names (:func:`signed_apt_archive_hashes`): the packages'
  scripts may rewrite the root's lists.
* :func:`remove_views` - the views of a working container go with it (unmounted first; the removal of a failed
  or killed build's container, the next run's clean-up, removes them too).

No lock is taken: a view is its build's alone, a hard link and a rename are atomic, and the pool only
grows. The views live beside the pools (``<cache root>/.builds``), on their file system: a pool
elsewhere, where a hard link cannot reach, seeds nothing. Where the kernel refuses the overlay, the view is an
empty directory of the build's own (the build downloads what it needs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import urllib.parse
from typing import Collection, Mapping, Optional, cast

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath, _paths, _process
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import parse_release, verify_signature
from ansible_collections.hpc.stateless.plugins.module_utils._build.records import APT_LISTS
from ansible_collections.hpc.stateless.plugins.module_utils._fs import mounts_below

#: Files of a pool that are whole packages, written once and never changed.
PACKAGE_SUFFIXES = (".deb", ".rpm", ".drpm")
#: Where the views live, below the host's cache root.
VIEWS_DIR = ".builds"
#: Beside each view, a symbolic link to the pool it was seeded from (what the commit merges into).
POOL_SUFFIX = ".pool"
#: Beside each view, the overlay's directories: the pool's files linked, the build's writes, the overlay's own.
LOWER_SUFFIX, UPPER_SUFFIX, WORK_SUFFIX = ".lower", ".upper", ".work"
#: What apt's Packages index says of one archive file: its SHA256 and size; None where two lists disagree.
Expected = Mapping[str, Optional[tuple[str, int]]]
_HASH_CHUNK = 1 << 20
#: Beside the views, one file per pool (``.sha256-<12 hex of the pool's path>.json``) of the SHA256 of its files
#: by file state (device, inode, size, mtime): a file of the pool is hashed once, not at each build's start.
HASHES_PREFIX = ".sha256-"
#: The fields of a Packages stanza that name an archive file and its content.
_STANZA_KEYS = ("Package", "Version", "Architecture", "Filename", "SHA256", "Size")


def views_root(cache_root: str) -> str:
    """The directory that holds every working container's views: ``<cache_root>/.builds``."""
    return os.path.join(cache_root, VIEWS_DIR)


def view_path(cache_root: str, container: str, index: int, pool: str) -> str:
    """The view of ``pool`` (the ``index``-th cache of the layer) for ``container``."""
    return os.path.join(views_root(cache_root), container, f"{index}-{os.path.basename(pool.rstrip('/'))}")


def _package_files(top: str) -> list[str]:
    """Package files below ``top``, relative to it, sorted; hidden names (temporary, lock files) and views skipped."""
    found = []
    for directory, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "partial")
        found.extend(os.path.relpath(os.path.join(directory, name), top) for name in files
                     if name.endswith(PACKAGE_SUFFIXES) and not name.startswith("."))
    return sorted(found)


# -- what the archive says of a .deb ---------------------------------------------------------------------
def _apt_quote(text: str, bad: str) -> str:
    """apt's QuoteString: ``%xx`` for the characters of ``bad``, ``%``, blanks and controls."""
    return "".join(f"%{ord(c):02x}" if c in bad or c == "%" or ord(c) <= 0x20 or ord(c) >= 0x7f else c
                   for c in text)


def archive_name(package: str, version: str, arch: str, filename: str) -> str:
    """The name apt gives a downloaded package in its cache: ``<package>_<version>_<arch>.<ext>`` quoted as apt
    quotes it (an epoch's ``:`` is ``%3a``)."""
    ext = filename.rsplit(".", 1)[-1] if "." in os.path.basename(filename) else "deb"
    return f"{_apt_quote(package, '_:')}_{_apt_quote(version, '_:')}_{_apt_quote(arch, '_:.')}.{ext}"


def _package_of(name: str) -> str:
    """The package an archive file name is of (its part before the first ``_``, unquoted as apt quoted it)."""
    return urllib.parse.unquote(name.split("_", 1)[0])


def parse_packages_hashes(data: bytes, packages: Optional[Collection[str]] = None, into: Optional[dict] = None) -> dict:
    """``{archive name: (sha256, size)}`` of a Packages index (into ``into``), for the stanzas of ``packages``
    (default: all); a name two stanzas give different hashes maps to None (neither is taken)."""
    found: dict = {} if into is None else into
    wanted = None if packages is None else {p.encode("utf-8") for p in packages}
    for stanza in data.split(b"\n\n"):
        stanza = stanza.strip(b"\n")
        if not stanza.startswith(b"Package:"):
            continue
        if wanted is not None and stanza[8:stanza.find(b"\n") if b"\n" in stanza else None].strip() not in wanted:
            continue
        fields: dict[str, str] = {}
        for line in stanza.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key in _STANZA_KEYS:
                fields[key] = value.strip()
        if len(fields) < len(_STANZA_KEYS) - 1 or not fields.get("Size", "").isdigit():
            continue
        name = archive_name(fields["Package"], fields.get("Version", ""), fields.get("Architecture", ""),
                            fields.get("Filename", ""))
        entry = (fields.get("SHA256", "").lower(), int(fields["Size"]))
        if all(k in fields for k in ("Version", "Architecture", "SHA256")):
            found[name] = entry if found.get(name, entry) == entry else None
    return found


def apt_archive_hashes(root: str, names: Optional[Collection[str]] = None) -> dict:
    """What the apt lists of the tree ``root`` (``/var/lib/apt/lists/*_Packages``, read inside the tree: its links
    lead nowhere on the host) say of the archive files ``names`` (default: all): ``{archive name: (sha256, size) or
    None}``."""
    found: dict = {}
    packages = None if names is None else {_package_of(n) for n in names}
    if packages is not None and not packages:
        return found
    try:
        listed = _imagepath.list_dir(root, APT_LISTS)
    except OSError:
        return found  # no apt: no .deb is taken from the pool
    for name in listed:
        if name.endswith("_Packages"):
            try:
                data = _imagepath.read_file(root, f"{APT_LISTS}/{name}", follow_last=False)
            except OSError:
                continue
            if data is not None:
                parse_packages_hashes(data, packages, found)
    return found


def _list_path(name: str, prefix: str) -> str:
    """The index path a list file ``<prefix><part>_<part>`` names below its suite (``main/binary-amd64/Packages``):
    apt's list names join the URI's parts with ``_`` and quote a ``_`` of a part as ``%5f``."""
    return "/".join(urllib.parse.unquote(part) for part in name[len(prefix):].split("_"))


def signed_apt_archive_hashes(root: str, keyrings: Collection[str], names: Optional[Collection[str]] = None) -> dict:
    """:func:`apt_archive_hashes`, but only of the Packages lists that a Release file of the tree vouches for: an
    ``*_InRelease`` (or ``*_Release`` with its ``*_Release.gpg``) whose signature ``gpgv`` finds good by a key of
    ``keyrings`` and whose SHA256 entry of the list's index path is the list's own.

    The lists of a bootstrapped root are written by apt before the packages' scripts run, and those scripts may
    rewrite them (as root of the tree): its own lists would vouch for whatever a script put beside them. A
    Release file cannot be forged without the archive's key. Without a keyring (``gpg_check: false``) nothing
    is vouched for."""
    found: dict = {}
    packages = None if names is None else {_package_of(n) for n in names}
    if not keyrings or (packages is not None and not packages):
        return found
    try:
        listed = _imagepath.list_dir(root, APT_LISTS)
    except OSError:
        return found
    present = set(listed)

    def read(name: str) -> Optional[bytes]:
        try:
            return _imagepath.read_file(root, f"{APT_LISTS}/{name}", follow_last=False)
        except OSError:
            return None

    for name in listed:
        if name.endswith("_InRelease"):
            prefix, signed, detached = name[:-len("InRelease")], read(name), None
        elif name.endswith("_Release") and f"{name}.gpg" in present and name[:-len("Release")] + "InRelease" not in present:
            prefix, signed, detached = name[:-len("Release")], read(name), read(f"{name}.gpg")
            if detached is None:
                continue
        else:
            continue
        if signed is None:
            continue
        try:
            content = verify_signature(signed, list(keyrings), detached)
        except (ValueError, OSError, _process.ProcessError):
            continue
        vouched = cast("dict[str, tuple[str, int]]", parse_release(content.decode("utf-8", "replace"))["SHA256"])
        for listed_name in listed:
            if not (listed_name.startswith(prefix) and listed_name.endswith("_Packages")):
                continue
            want = vouched.get(_list_path(listed_name, prefix))
            data = read(listed_name) if want else None
            if data is not None and (hashlib.sha256(data).hexdigest(), len(data)) == want:
                parse_packages_hashes(data, packages, found)
    return found


def _sha256_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while True:
        chunk = os.read(fd, _HASH_CHUNK)
        if not chunk:
            return digest.hexdigest()
        digest.update(chunk)


def _open_regular(path: str) -> int:
    """A descriptor of the regular file ``path``, opened without following a link; OSError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _imagepath.NotRegularFile(path, mode)
    return fd


def _file_key(info: os.stat_result) -> str:
    """What identifies one state of a pool file: a write changes its mtime. (Not its ctime: every hard link of a
    view changes that.) Only root on the host writes the pool's files: a build's writes go to its overlay."""
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def _archive_says(rel: str, fd: int, expected: Optional[Expected], memo: Optional[dict] = None) -> bool:
    """Whether the package file ``rel`` (open as ``fd``, at its start) may be taken: any ``.rpm``/``.drpm``
    (dnf and zypper check them); a ``.deb`` whose SHA256 and size are what ``expected`` names it. ``memo``
    (``{file key: sha256}``) spares hashing a pool file again while it is the same file."""
    if not rel.endswith(".deb"):
        return True
    want = (expected or {}).get(os.path.basename(rel))
    info = os.fstat(fd)
    if want is None or info.st_size != want[1]:
        return False
    key = _file_key(info)
    if memo is None or key not in memo:
        digest = _sha256_fd(fd)
        if memo is None:
            return digest == want[0]
        memo[key] = digest
    return memo[key] == want[0]


def _link_fd(fd: int, target: str) -> None:
    """Hard-link the file open as ``fd`` (the very file checked, never what its name leads to now) at ``target``."""
    dir_fd = os.open(os.path.dirname(target), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # With a directory descriptor os.link is linkat(..., AT_SYMLINK_FOLLOW): /proc/self/fd/N is the open file.
        os.link(f"/proc/self/fd/{fd}", os.path.basename(target), dst_dir_fd=dir_fd, follow_symlinks=True)
    finally:
        os.close(dir_fd)


# -- the view ---------------------------------------------------------------------------------------------
def _expected_of(root: Optional[str], rels: list[str], keyrings: Optional[Collection[str]] = None) -> Expected:
    """What the apt lists of the tree ``root`` say of the ``.deb`` files among ``rels`` (nothing without a tree);
    with ``keyrings``, only the lists a signed Release file of the tree vouches for (:func:`signed_apt_archive_hashes`)."""
    debs = [os.path.basename(rel) for rel in rels if rel.endswith(".deb")]
    if not root or not debs:
        return {}
    return apt_archive_hashes(root, debs) if keyrings is None else signed_apt_archive_hashes(root, keyrings, debs)


def _read_memo(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(data, dict) else {}


def seed(pool: str, lower: str, root: Optional[str] = None, memo_path: Optional[str] = None) -> int:
    """Create ``lower`` afresh with a hard link of each package file of ``pool`` the archive vouches for (see
    :func:`_archive_says`, with the apt lists of the image tree ``root``; without one no ``.deb``); return how many
    were linked. ``memo_path``: a file of the pool files' hashes by file state (:data:`HASHES_PREFIX`), read and
    rewritten with the files of the pool seen now.

    A file the link cannot reach (another file system, a file removed meanwhile) is left out: the
    package manager downloads it again.
    """
    shutil.rmtree(lower, ignore_errors=True)
    os.makedirs(lower, mode=0o755)
    linked = 0
    files = _package_files(pool) if os.path.isdir(pool) else []
    expected = _expected_of(root, files)
    memo = _read_memo(memo_path) if memo_path else None
    before = dict(memo or {})
    seen: dict[str, str] = {}
    for rel in files:
        source, target = os.path.join(pool, rel), os.path.join(lower, rel)
        try:
            fd = _open_regular(source)
            try:
                accepted = _archive_says(rel, fd, expected, memo)
                key = _file_key(os.fstat(fd))
                if memo is not None and key in memo:
                    seen[key] = memo[key]
                if not accepted:
                    continue
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                _link_fd(fd, target)
            finally:
                os.close(fd)
        except OSError:
            continue
        linked += 1
    if memo_path and seen != before:
        with contextlib.suppress(OSError):
            _paths.write_atomic(memo_path, json.dumps(seen, sort_keys=True), mode=0o600, sync=False)
    return linked


def merge(upper: str, pool: str, root: Optional[str] = None, keyrings: Optional[Collection[str]] = None) -> list[str]:
    """Copy the package files the build added (regular files of ``upper`` the pool lacks, which the archive
    vouches for: :func:`_archive_says`, with the apt lists of the image tree ``root``; with ``keyrings`` only the
    lists a Release file signed by one of them vouches for) into ``pool``, each atomically; return them
    (relative)."""
    added = []
    files = [rel for rel in (_package_files(upper) if os.path.isdir(upper) else [])
             if not os.path.lexists(os.path.join(pool, rel))]
    expected = _expected_of(root, files, keyrings)
    for rel in files:
        final = os.path.join(pool, rel)
        try:
            if os.path.lexists(final):
                continue  # a file of the pool is never replaced
            fd = _open_regular(os.path.join(upper, rel))
            try:
                if not _archive_says(rel, fd, expected):
                    continue
                os.lseek(fd, 0, os.SEEK_SET)
                directory = os.path.dirname(final)
                os.makedirs(directory, mode=0o755, exist_ok=True)
                temp = os.path.basename(_paths.temp_name(final))
                try:
                    _imagepath.copy_fd(fd, directory, temp, mode=0o644, sync=False)
                    os.link(os.path.join(directory, temp), final)  # never over a file another build added meanwhile
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(directory, temp))
            finally:
                os.close(fd)
        except OSError:
            continue
        added.append(rel)
    return added


def _mount_overlay(view: str) -> bool:
    """Mount the overlay of ``view`` (its ``.lower``, ``.upper`` and ``.work``); False when the kernel refuses."""
    options = f"lowerdir={view}{LOWER_SUFFIX},upperdir={view}{UPPER_SUFFIX},workdir={view}{WORK_SUFFIX}"
    # In a user namespace (a rootless build) the overlay keeps its own attributes as user.* ones.
    return any(_process.run(["mount", "-t", "overlay", "overlay", "-o", options + extra, view], check=False).ok
               for extra in ("", ",userxattr"))


def open_view(cache_root: str, container: str, index: int, pool: str, root: Optional[str] = None) -> str:
    """Seed the view of ``pool`` for ``container`` (``root``: the working container's tree, whose apt lists say
    which ``.deb`` may be taken), mount it and record which pool it came from; return the view."""
    view = view_path(cache_root, container, index, pool)
    _unmount_below(os.path.dirname(view), view)
    for path in (view, view + UPPER_SUFFIX, view + WORK_SUFFIX):
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, mode=0o755)
    digest = hashlib.sha256(os.path.abspath(pool).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    memo = os.path.join(views_root(cache_root), f"{HASHES_PREFIX}{digest}.json")
    seed(pool, view + LOWER_SUFFIX, root, memo)
    if not _mount_overlay(view):
        shutil.rmtree(view + LOWER_SUFFIX)  # an empty directory of the build's own: nothing of the pool in reach
    record = view + POOL_SUFFIX
    if os.path.lexists(record):
        os.unlink(record)
    os.symlink(os.path.abspath(pool), record)
    return view


def merge_views(cache_root: str, container: str, root: Optional[str] = None) -> dict[str, list[str]]:
    """Merge every view of ``container`` into the pool it came from (``root``: the committed tree, whose apt lists
    say which ``.deb`` may enter): pool -> the package files added."""
    top = os.path.join(views_root(cache_root), container)
    merged: dict[str, list[str]] = {}
    for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        if not name.endswith(POOL_SUFFIX):
            continue
        view = os.path.join(top, name[:-len(POOL_SUFFIX)])
        pool = os.readlink(os.path.join(top, name))
        # Without an overlay the view itself took the build's writes.
        upper = view + UPPER_SUFFIX if os.path.isdir(view + LOWER_SUFFIX) else view
        merged[pool] = merge(upper, pool, root)
    return merged


def _unmount_below(top: str, only: str = "") -> None:
    """Unmount the views' overlays below ``top`` (``only``: that one), deepest first."""
    try:
        points = mounts_below(top)
    except OSError:
        return
    for point in points:
        if only and point != os.path.realpath(only):
            continue
        if not _process.run(["umount", point], check=False).ok:
            _process.run(["umount", "-l", point], check=False)


def remove_tree(path: str) -> None:
    """Remove ``path`` and all below it, the directories an overlay leaves without permissions (``work/work``,
    mode 0) too: as an unprivileged user, their owner, who may not list them until it gives itself leave."""
    def unlock(_function, failed: str, _error) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                shutil.rmtree(failed)
            else:
                os.unlink(failed)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=unlock)  # pylint: disable=deprecated-argument


def remove_views(cache_root: str, container: str) -> None:
    """Remove every view of ``container`` (nothing when it has none), its overlays unmounted first."""
    top = os.path.join(views_root(cache_root), container)
    if os.path.isdir(top):
        _unmount_below(top)
    remove_tree(top)


def bootstrap_view(cache_dir: str, root: str) -> str:
    """Where the overlay of a bootstrap of ``root`` over the package cache ``cache_dir`` keeps the bootstrap's writes
    (its ``upper`` and ``work``): ``<cache root>/.builds/bootstrap-<12 hex of root>``, beside the layers' views."""
    digest = hashlib.sha256(os.path.abspath(root).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return os.path.join(views_root(os.path.dirname(os.path.abspath(cache_dir))), f"bootstrap-{digest}")


#: In a mapped bootstrap's view, where its tool sees the tree (_build/bootstrap.py mapped_target).
BOOTSTRAP_TARGET = "root"
#: apt's lock file and download directory in a package archive: in a mapped bootstrap's ``upper`` they are the
#: mapped root's, and hide the pool's (host root's, which that root may not open).
APT_ARCHIVE_STATE = (("lock", False), ("partial", True))


def new_bootstrap_view(cache_dir: str, root: str, owner: Optional[tuple[int, int]] = None) -> str:
    """:func:`bootstrap_view`, made afresh (a killed bootstrap's writes removed) with its empty ``upper`` and
    ``work``, as mmdebstrap's setup hook mounts them (:func:`_build.bootstrap.mmdebstrap_argv`).

    ``owner``: the (uid, gid) of a mapped bootstrap's root, whose overlay ``upper``, ``work``, the tree's mount point
    (:data:`BOOTSTRAP_TARGET`) and apt's state in ``upper`` (:data:`APT_ARCHIVE_STATE`) are its own."""
    view = bootstrap_view(cache_dir, root)
    remove_tree(view)
    names = ("upper", "work") + ((BOOTSTRAP_TARGET,) if owner else ())
    for name in names:
        os.makedirs(os.path.join(view, name), mode=0o700)
    if owner:
        made = [os.path.join(view, name) for name in names]
        for name, is_dir in APT_ARCHIVE_STATE:
            path = os.path.join(view, "upper", name)
            if is_dir:
                os.mkdir(path, 0o700)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640))
            made.append(path)
        for path in made:
            os.chown(path, *owner, follow_symlinks=False)
        # The mapped root (any other uid to the host) searches the view's directory and the one above it.
        os.chmod(view, 0o755)
        parent = os.path.dirname(view)
        os.chmod(parent, stat.S_IMODE(os.stat(parent).st_mode) | 0o011)
    return view


def stale_views(cache_root: str, stem: str) -> list[str]:
    """The containers, named from ``stem`` on, that have views: a killed build's, for the next run's clean-up."""
    try:
        names = os.listdir(views_root(cache_root))
    except OSError:
        return []
    return sorted(name for name in names if name.startswith(stem))
