# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way the build host touches an image tree, and creates the files it writes next to one.

An image tree (a container's mounted root file system, a directory given as a source, a directory
a container could write into) is hostile input: any of its symlinks may point at the host's
``/etc/shadow``, any of its directories may be a link to the host's ``/boot``. Every read of a path
inside such a tree goes through this module:

* the path is resolved the way the image itself sees it (as in a chroot): an absolute link target
  is taken relative to the tree's root, ``..`` stops at the root, more than :data:`MAX_LINKS` links
  is a loop. The walk goes one component at a time with ``openat(O_PATH | O_NOFOLLOW)`` from a
  descriptor of the root, so a link swapped in while it runs still cannot lead out of the tree;
* a file is opened for reading only when it is a regular file (never a FIFO or a device), without
  following a link in its last component, and checked with ``fstat`` to be what the walk found;
* with ``follow_last=False`` a link in the last component is not followed (it is the link that is
  looked at); :func:`exists_literal` follows no link at all, the way pack's tree walk sees paths.

Files written by the host into a directory that it created itself are made by :func:`create_file`:
``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to a descriptor of that directory, so a name that
something else planted there (a symlink to a host file) is an error, never a file that is opened.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from ansible_collections.hpc.stateless.plugins.module_utils._paths import temp_name

MAX_LINKS = 40  # what the kernel allows in one lookup (MAXSYMLINKS)

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1 << 20
_KINDS = ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


class NotRegularFile(OSError):
    """The path exists in the tree but is no regular file (or is a link where none is followed)."""

    def __init__(self, path: str, mode: int) -> None:
        super().__init__(errno.EINVAL, f"not a regular file but a {kind(mode)}", path)


def kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``symbolic link``, ``directory``...)."""
    return next((name for test, name in _KINDS if test(mode)), "regular file")


@dataclass
class _Found:
    """The end of a walk: ``fd`` (O_PATH) of the object, ``parent`` (O_PATH) and ``name`` to reopen it by."""

    fd: int
    parent: int | None
    name: str
    rel: str  # link-free, relative to the root; '' for the root itself
    st: os.stat_result

    def close(self) -> None:
        os.close(self.fd)
        if self.parent is not None:
            os.close(self.parent)


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _walk(root: str, path: str, follow_last: bool = True, follow_links: bool = True) -> _Found | None:
    """Resolve ``path`` below ``root`` (see the module doc); None when it does not exist or loops."""
    try:
        stack = [os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]  # directories from the root down
    except (FileNotFoundError, NotADirectoryError):
        return None
    names: list[str] = []  # names[i] is stack[i + 1] inside stack[i]
    todo = _parts(path)
    links = 0
    try:
        while todo:
            part = todo.pop(0)
            if part == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                    names.pop()
                continue
            try:
                fd = os.open(part, _PATH_FLAGS, dir_fd=stack[-1])
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                return None  # PermissionError: a directory the caller may not search, as lstat would say
            try:
                st = os.fstat(fd)
            except OSError:
                os.close(fd)
                raise
            last = not todo
            if stat.S_ISLNK(st.st_mode) and follow_links and (follow_last or not last):
                try:
                    target = os.readlink("", dir_fd=fd)  # the link this descriptor holds, not a name looked up again
                finally:
                    os.close(fd)
                links += 1
                if links > MAX_LINKS:
                    return None
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                    names.clear()
                todo = _parts(target) + todo
                continue
            if last:
                return _Found(fd, stack.pop(), part, "/".join(names + [part]), st)
            if not stat.S_ISDIR(st.st_mode):
                os.close(fd)
                return None  # a file where a directory is needed, or a link the literal walk does not follow
            stack.append(fd)
            names.append(part)
        top = stack.pop()  # the path names a directory already on the stack (the root, or one reached by '..')
        parent = stack.pop() if stack else None
        return _Found(top, parent, names[-1] if names else "", "/".join(names), os.fstat(top))
    finally:
        for fd in stack:
            os.close(fd)


# -- reading an image tree ---------------------------------------------------------------------------
def resolve_rel(root: str, path: str, follow_last: bool = True) -> str | None:
    """``path`` (absolute or relative, as the image names it) resolved inside ``root``, as a link-free path
    relative to ``root`` (``''`` for the root itself); None when it does not exist or its links loop."""
    found = _walk(root, path, follow_last)
    if found is None:
        return None
    found.close()
    return found.rel


def resolve(root: str, path: str, follow_last: bool = True) -> str | None:
    """The host path of ``path`` resolved inside ``root`` (see :func:`resolve_rel`), or None."""
    rel = resolve_rel(root, path, follow_last)
    return None if rel is None else os.path.join(root, rel) if rel else root


def lstat(root: str, path: str, follow_last: bool = True) -> os.stat_result | None:
    """``stat`` of what ``path`` resolves to inside ``root`` (of the link itself with ``follow_last=False``), or None."""
    found = _walk(root, path, follow_last)
    if found is None:
        return None
    found.close()
    return found.st


def exists_literal(root: str, rel: str) -> bool:
    """Whether ``root/rel`` exists with no link followed on the way (a link as the last component counts):
    the path as pack's tree walk sees it, which descends into real directories only."""
    found = _walk(root, rel, follow_last=False, follow_links=False)
    if found is None:
        return False
    found.close()
    return True


def readlink(root: str, path: str) -> str | None:
    """The target of the symlink ``path`` names inside ``root`` (its directories resolved there), as written
    in the link; None when it does not exist or is no link. Resolve the target with :func:`resolve_rel`."""
    found = _walk(root, path, follow_last=False)
    if found is None:
        return None
    try:
        return os.readlink("", dir_fd=found.fd) if stat.S_ISLNK(found.st.st_mode) else None
    finally:
        found.close()


def is_file(root: str, path: str, follow_last: bool = True) -> bool:
    st = lstat(root, path, follow_last)
    return st is not None and stat.S_ISREG(st.st_mode)


def is_dir(root: str, path: str) -> bool:
    st = lstat(root, path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def open_file(root: str, path: str, follow_last: bool = True) -> int:
    """A read-only descriptor of the regular file ``path`` resolves to inside ``root``; the caller closes it.

    FileNotFoundError when it does not exist (or its links loop), :class:`NotRegularFile` when it is
    something else: a directory, a FIFO, a device, or a symlink with ``follow_last=False``.
    """
    found = _walk(root, path, follow_last)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such file in the image", path)
    try:
        if not stat.S_ISREG(found.st.st_mode) or found.parent is None:
            raise NotRegularFile(path, found.st.st_mode)
        fd = os.open(found.name, _READ_FLAGS, dir_fd=found.parent)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (found.st.st_dev, found.st.st_ino) or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EAGAIN, "replaced while it was opened", path)
        return fd
    finally:
        found.close()


def open_dir(root: str, path: str) -> int:
    """A descriptor of the directory ``path`` names in the image tree ``root``, its links resolved inside ``root``.

    The walk (:func:`lstat`, :func:`resolve`) finds the directory without leaving the tree; the descriptor,
    opened by the host path of what it found, must be that very directory (a link swapped in meanwhile by a
    process in the container fails). FileNotFoundError when there is no such directory.
    """
    found, host = lstat(root, path), resolve(root, path)
    if found is None or host is None or not stat.S_ISDIR(found.st_mode):
        raise FileNotFoundError(errno.ENOENT, "no such directory in the container", path)
    fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise OSError(errno.EAGAIN, "replaced while it was opened", path)
    return fd


def read_file(root: str, path: str, follow_last: bool = True) -> bytes | None:
    """The bytes of the regular file ``path`` inside ``root`` (see :func:`open_file`); None when it does not exist."""
    try:
        fd = open_file(root, path, follow_last)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def list_dir(root: str, path: str) -> list[str]:
    """Names in the directory ``path`` resolves to inside ``root``, sorted.

    FileNotFoundError when it does not exist, NotADirectoryError when it is no directory.
    """
    found = _walk(root, path)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such directory in the image", path)
    try:
        if not stat.S_ISDIR(found.st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, f"not a directory but a {kind(found.st.st_mode)}", path)
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=found.fd)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)
    finally:
        found.close()


# -- files the host writes ---------------------------------------------------------------------------
def create_file(directory: str, name: str, mode: int = 0o644) -> int:
    """A descriptor, open for writing, of the new file ``name`` in ``directory`` (one the caller created).

    ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to a descriptor of ``directory`` (itself not a symlink):
    whatever already has that name (a file, a link to anywhere) raises FileExistsError and is never
    opened. ``mode`` is set exactly, whatever the umask.
    """
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a file name")
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = os.open(name, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def write_file(directory: str, name: str, data: bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Create ``name`` in ``directory`` (see :func:`create_file`) holding ``data``, with ``sync`` synced to disk."""
    with os.fdopen(create_file(directory, name, mode), "wb") as handle:
        handle.write(data)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())


def copy_fd(source: int, directory: str, name: str, mode: int = 0o644, sync: bool = True) -> int:
    """Copy what is left to read of descriptor ``source`` into the new file ``name`` of ``directory``
    (see :func:`create_file`), with ``sync`` synced to disk; returns the bytes copied."""
    total = 0
    with os.fdopen(create_file(directory, name, mode), "wb") as out:
        while True:
            chunk = os.read(source, _COPY_CHUNK)
            if not chunk:
                break
            out.write(chunk)
            total += len(chunk)
        if sync:
            out.flush()
            os.fsync(out.fileno())
    return total


def copy_out(root: str, path: str, directory: str, name: str, mode: int = 0o644, follow_last: bool = True,
             sync: bool = True) -> int:
    """Copy the regular file ``path`` of the tree ``root`` (see :func:`open_file`) to the new file ``name``
    of ``directory`` (see :func:`create_file`); returns its size."""
    fd = open_file(root, path, follow_last)
    try:
        return copy_fd(fd, directory, name, mode, sync)
    finally:
        os.close(fd)


# -- files the host writes into an image tree ----------------------------------------------------------
def make_dirs(root: str, path: str, mode: int = 0o755) -> int:
    """A descriptor of the directory ``path`` of the tree ``root``, each missing component made inside the tree
    (``mkdir`` relative to a descriptor of its parent, found by :func:`open_dir`): a link on the way is resolved
    inside ``root``, never on the host. FileNotFoundError when a component is a file."""
    done = ""
    for part in _parts(path):
        below = f"{done}/{part}" if done else part
        if lstat(root, below) is None:
            parent = open_dir(root, done)
            try:
                os.mkdir(part, mode, dir_fd=parent)
            except FileExistsError:
                pass  # made meanwhile, or a dangling link: open_dir below decides
            finally:
                os.close(parent)
        done = below
    return open_dir(root, done)


def replace_file(root: str, path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` as the file ``path`` of the tree ``root`` (its directory made first where missing, see
    :func:`make_dirs`), atomically: a new file under a temporary name (:func:`create_file`'s flags), synced, then
    renamed over ``path`` relative to the directory's descriptor; whatever had the name (a link too) is replaced,
    never followed."""
    directory, name = os.path.split(path.strip("/"))
    if not name or name in (".", ".."):
        raise ValueError(f"{path!r} names no file")
    dir_fd = make_dirs(root, directory)
    try:
        temp = os.path.basename(temp_name(name))
        fd = os.open(temp, _CREATE_FLAGS, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
