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
