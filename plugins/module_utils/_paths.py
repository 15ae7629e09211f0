# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Path helpers shared by the stages that create output trees (pack's output, deploy's boot root),
and the one way a file or a directory is replaced so that a reader sees the old one or the new one, never a part.

What is on its way to a final name, or on its way out, sits next to it under a hidden *staging name*
``.<name>.<tag>-<token>`` (:func:`staging_name`; :func:`parse_staging_name` reads one back, so that a run
can clean up after a killed one): ``new`` for a file being written (:func:`replacing`), ``partial`` and
``old`` for pack's version directories (the token is the pid, whose end tells a leftover apart).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator
from typing import NamedTuple

from ansible_collections.hpc.stateless.plugins.module_utils import _process

# The tag of a file being written under a temporary name: ``.<name>.new-<8 hex>``.
NEW_TAG = "new"
# What a temporary name next to a file carries between the file's name and its random token; the
# stages that clean up after a killed run look for it.
TEMP_INFIX = f".{NEW_TAG}-"
_STAGING_NAME = re.compile(r"^\.(?P<final>.+)\.(?P<tag>[a-z]+)-(?P<token>[^./]+)$")


class StagingName(NamedTuple):
    """A staging name read back: the final name it stands next to, its tag and its token."""

    final: str
    tag: str
    token: str


def staging_name(path: str, tag: str, token: str | int | None = None) -> str:
    """The hidden name ``.<name>.<tag>-<token>`` next to ``path`` (the same file system: a rename is atomic).

    ``token`` defaults to 8 random hex digits; a pid makes the owner's end tell a leftover apart.
    """
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{tag}-{uuid.uuid4().hex[:8] if token is None else token}")


def parse_staging_name(name: str) -> StagingName | None:
    """What :func:`staging_name` put into the file name ``name``; None for any other name."""
    match = _STAGING_NAME.match(name)
    return StagingName(match["final"], match["tag"], match["token"]) if match else None


def nearest_existing(path: str) -> str:
    """``path`` itself when it exists, else its closest existing ancestor (what a mkdir -p would write into).

    The stages check that ancestor for being a directory and writable before they create anything,
    so a bad output path is refused with its name instead of failing half-way.
    """
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def fsync_dir(path: str) -> None:
    """Make a rename or unlink inside directory ``path`` durable (the directory's own entry list is synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: str) -> str:
    """A fresh hidden name next to ``path``: ``.<name>.new-<8 hex>`` (same file system: a rename is atomic)."""
    return staging_name(path, NEW_TAG)


@contextlib.contextmanager
def replacing(path: str, sync: bool = True) -> Iterator[str]:
    """Yield a temporary name next to ``path`` for the caller to create; when the block ends without an
    error it is renamed over ``path`` (and, with ``sync``, the directory entry synced); on any error it
    is removed and ``path`` is untouched."""
    temp = temp_name(os.path.abspath(path))
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if sync:
        fsync_dir(os.path.dirname(temp))


def write_atomic(path: str, data: str | bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) under its final name only once complete.

    The file is written next to ``path``, given ``mode`` (whatever the umask), with ``sync`` flushed to
    disk before the rename and the directory synced after it. ``sync=False`` is for files re-rendered
    in bulk whose loss in a crash the next run repairs.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(path, sync) as temp:
        with open(temp, "xb") as handle:
            handle.write(payload)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, mode)


def move_into_place(staged: str, final: str, aside: str | None = None) -> None:
    """Rename the complete directory ``staged`` to ``final`` in one step, then sync their parent directory.

    An existing ``final`` is renamed to ``aside`` first (anything under that name is removed before) and
    removed once ``staged`` is in place: a reader finds the old tree or the new one, and a run killed
    between the two renames leaves the old tree whole under ``aside``, for the next run to put back.
    Without ``aside``, ``final`` must not exist (or be an empty directory, which the rename replaces).
    """
    if aside is not None and os.path.lexists(final):
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(final, aside)
    else:
        aside = None
    os.rename(staged, final)
    fsync_dir(os.path.dirname(os.path.abspath(final)))
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def controller_cache_dir(name: str) -> str:
    """Where the controller keeps its cache ``name`` between runs: ``/var/cache/hpc.stateless/<name>`` as root, else
    below ``$XDG_CACHE_HOME`` (default ``~/.cache``): ``hpc.stateless/<name>``.

    Inside a user namespace (``buildah unshare`` of a rootless build) uid 0 is the user, who cannot write root's
    cache: the user's own one then."""
    if os.geteuid() == 0 and not _process.in_user_namespace():
        return os.path.join("/var/cache/hpc.stateless", name)
    return os.path.join(user_cache_home(), "hpc.stateless", name)


def user_cache_home(home: str | None = None) -> str:
    """The user's cache directory: ``$XDG_CACHE_HOME``, else ``<home>/.cache`` (``home``: ``~`` when not given)."""
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(home or os.path.expanduser("~"), ".cache")


class UnsafeDirectory(OSError):
    """A directory that holds state other users must not change is not private; the message names it and the fix."""


#: The uid an id outside a user namespace's map shows as inside it (the kernel's overflowuid): real root, seen from
#: a rootless build's ``buildah unshare``.
OVERFLOW_UID = 65534


def _trusted_owners() -> set[int]:
    owners = {0, os.geteuid()}
    if _process.in_user_namespace():
        owners.add(OVERFLOW_UID)
    return owners


def _check_ancestor(path: str, owners: set[int], purpose: str) -> None:
    """``path`` (a directory above a private one) can be changed by no user but root and us, a sticky one (/tmp)
    aside: there no other user can rename or remove what we made."""
    info = os.stat(path)
    if info.st_uid not in owners:
        raise UnsafeDirectory(f"{purpose}: {path} belongs to uid {info.st_uid}, another user, who could swap what it "
                              "holds; choose a directory below ones that only root and you can write")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        raise UnsafeDirectory(f"{purpose}: {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}) "
                              "and not sticky; choose a directory below ones that only root and you can write")


def private_dir(path: str, purpose: str) -> str:
    """``path``, a directory that no other user can change, made (mode 0700, missing parents too) when missing.

    State that root acts on later (pids to kill, mounts to remove, names of things to delete) must come from a
    directory that only root wrote: a fixed name in a world-writable directory (``/var/tmp/x``) can be made first
    by any user. Checked with lstat, so a link is never followed: ``path`` is a directory, not a symbolic link,
    owned by the effective user and writable by nobody else; each directory above it (its nominal and its real
    path) belongs to root or the effective user and is writable by no other user unless sticky. Anything else is
    refused with :class:`UnsafeDirectory`, naming the path, what is wrong and what to do; ``purpose`` says what
    the directory is for.
    """
    path = os.path.abspath(path)
    owners = _trusted_owners()
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    prefix = "/"
    for part in parent.strip("/").split("/") if parent != "/" else []:
        prefix = os.path.join(prefix, part)
        link = os.lstat(prefix)
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in owners:
            raise UnsafeDirectory(f"{purpose}: {prefix} is a symbolic link of uid {link.st_uid}, another user; "
                                  "choose a directory below ones that only root and you can write")
        _check_ancestor(prefix, owners, purpose)
    real = os.path.realpath(parent)
    for depth in range(real.count("/") + 1 if real != "/" else 1):
        _check_ancestor(real.rsplit("/", depth)[0] or "/", owners, purpose)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    fix = f"remove it (as root: rm -rf {path}) so it is made afresh, or choose another directory"
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{purpose}: {path} is a {'symbolic link' if stat.S_ISLNK(info.st_mode) else 'file'}, "
                              f"not a directory of this user; {fix}")
    if info.st_uid != os.geteuid():
        raise UnsafeDirectory(f"{purpose}: {path} belongs to uid {info.st_uid}, not to this user (uid "
                              f"{os.geteuid()}): another user made it first and controls what it holds; {fix}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeDirectory(f"{purpose}: {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o});"
                              f" {fix}")
    return path


def runtime_path(name: str) -> str:
    """Where this user keeps the runtime state ``name`` (live sessions, their pids and mounts); check it with
    :func:`private_dir` before use: ``/run/hpc-stateless/<name>`` as root; else ``$XDG_RUNTIME_DIR/hpc-stateless/
    <name>``, or without that ``<temporary directory>/hpc-stateless-<uid>/<name>``."""
    if os.geteuid() == 0 and not _process.in_user_namespace():
        return os.path.join("/run/hpc-stateless", name)
    if os.environ.get("XDG_RUNTIME_DIR"):
        return os.path.join(os.environ["XDG_RUNTIME_DIR"], "hpc-stateless", name)
    return os.path.join(tempfile.gettempdir(), f"hpc-stateless-{os.geteuid()}", name)
