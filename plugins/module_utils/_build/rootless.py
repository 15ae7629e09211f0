# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Builds as an unprivileged user (rootless buildah): is this one, and can it work?

A user builds layers inside the user namespace of ``buildah unshare``: there it is uid 0, and the
ids 1..65535 of the image map to the user's subordinate ids (``/etc/subuid``, ``/etc/subgid``).
Without enough subordinate ids buildah still starts, with only the user's own id mapped, and fails
later on the first ``chown`` of a package; :func:`preflight` says so first, naming the user, the file
and the line to add. The whole ansible-playbook runs in one such namespace (mounts made in one
namespace are not seen from another): :func:`unshare_argv` is the command that starts it.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
from typing import Sequence

from ansible_collections.hpc.stateless.plugins.module_utils._paths import user_cache_home
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError, id_map, in_user_namespace

SUBID_FILES = {"uid": "/etc/subuid", "gid": "/etc/subgid"}
# Ids an image needs inside the namespace: 0..65535 (Debian's nobody/nogroup is 65534).
NEEDED_IDS = 65536
# Where a new range is suggested at the earliest (useradd's default SUB_UID_MIN).
FIRST_SUBORDINATE_ID = 100000
# Set by buildah/podman in the process tree of `buildah unshare`: the outer user's uid.
ROOTLESS_UID_ENV = "_CONTAINERS_ROOTLESS_UID"
UIDMAP_HINT = "install newuidmap/newgidmap (Debian/Ubuntu: apt-get install uidmap, EL: dnf install shadow-utils)"


class RootlessError(ProcessError):
    """The host is not set up for a rootless build; the message says what to change."""

    def __init__(self, message: str) -> None:
        super().__init__(["buildah"], 1, message)
        self.args = (message,)

    def __str__(self) -> str:
        return self.args[0]


def in_initial_namespace(proc: str = "/proc/self") -> bool:
    """True outside any user namespace (the host's own ids, all of them)."""
    return not in_user_namespace(proc)


def is_rootless(proc: str = "/proc/self") -> bool:
    """True for a build by an unprivileged user: outside a user namespace as non-root, or inside one."""
    return os.geteuid() != 0 or not in_initial_namespace(proc)


def outer_user() -> tuple[str, int]:
    """Name and uid of the user who started the build (inside ``buildah unshare`` too)."""
    uid = int(os.environ.get(ROOTLESS_UID_ENV) or os.getuid())
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def subordinate_ranges(path: str, user: str, uid: int) -> list[tuple[int, int]]:
    """``(start, count)`` of each line of ``path`` (``/etc/subuid`` format) for ``user`` or its uid."""
    ranges = []
    for owner, start, count in _entries(path):
        if owner in (user, str(uid)):
            ranges.append((start, count))
    return ranges


def _entries(path: str) -> list[tuple[str, int, int]]:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
            entries.append((fields[0], int(fields[1]), int(fields[2])))
    return entries


def suggested_line(path: str, user: str, need: int = NEEDED_IDS) -> str:
    """A ``user:start:count`` line for ``path`` that overlaps no other user's range."""
    ends = [start + count for owner, start, count in _entries(path) if owner != user]
    return f"{user}:{max([FIRST_SUBORDINATE_ID, *ends])}:{need}"


def subordinate_problems(user: str, uid: int, files: dict[str, str] | None = None,
                         need: int = NEEDED_IDS) -> list[str]:
    """What is wrong with ``user``'s subordinate ids, one sentence per file (empty when nothing is)."""
    problems = []
    for kind, path in (files or SUBID_FILES).items():
        total = sum(count for _start, count in subordinate_ranges(path, user, uid))
        if total >= need - 1:
            continue
        said = f"has no subordinate {kind}s in {path}" if total == 0 else \
            f"has only {total} subordinate {kind}s in {path}"
        problems.append(f"user {user} {said} (a rootless build needs {need - 1}); as root, add the line "
                        f"'{suggested_line(path, user, need)}' to {path}")
    return problems


def _mapped(kind: str, proc: str) -> int:
    return sum(count for _inside, _outside, count in id_map(kind, proc))


def preflight(files: dict[str, str] | None = None, proc: str = "/proc/self", need: int = NEEDED_IDS) -> None:
    """Raise :class:`RootlessError` when this rootless build cannot work; nothing for root.

    Outside a user namespace the user's lines in ``/etc/subuid`` and ``/etc/subgid`` are read, and
    ``newuidmap``/``newgidmap`` must be installed; inside one (``buildah unshare``), the namespace
    must map ``need`` ids.
    """
    initial = in_initial_namespace(proc)
    if initial and os.geteuid() == 0:
        return
    user, uid = outer_user()
    if initial:
        problems = subordinate_problems(user, uid, files, need)
        problems += [f"{tool} is not installed; {UIDMAP_HINT}" for tool in ("newuidmap", "newgidmap")
                     if not shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/bin:/usr/sbin")]
    else:
        # Inside a namespace (buildah unshare, a rootless CI container) only its map counts.
        short = [f"{_mapped(kind, proc)} {kind}s" for kind in ("uid", "gid") if _mapped(kind, proc) < need]
        problems = []
        if short:
            problems = subordinate_problems(user, uid, files, need) or [
                f"the user namespace maps only {' and '.join(short)} (a rootless build needs {need}): "
                f"start it again after the subordinate ids were added"]
    if problems:
        raise RootlessError("cannot build as an unprivileged user: " + "; ".join(problems))


# Root's package caches on the build host; a rootless build keeps its own below the user's cache directory.
HOST_CACHE_ROOT = "/var/cache/hpc-stateless"


def host_cache_path(path: str) -> str:
    """Where a package cache below :data:`HOST_CACHE_ROOT` lives for this build: as is for root; for an
    unprivileged user below ``$XDG_CACHE_HOME`` (default ``~/.cache``)/hpc-stateless, which it can write
    (root's directory is owned by an id its namespace does not map)."""
    if not is_rootless() or not (path == HOST_CACHE_ROOT or path.startswith(HOST_CACHE_ROOT + "/")):
        return path
    home = os.environ.get("HOME") or pwd.getpwuid(outer_user()[1]).pw_dir
    below = os.path.relpath(path, HOST_CACHE_ROOT)
    return os.path.join(user_cache_home(home), "hpc-stateless", *([] if below == "." else [below]))


_checked: list[bool] = []


def preflight_once() -> None:
    """:func:`preflight`, run once per process (every buildah call of a module asks)."""
    if not _checked:
        preflight()
        _checked.append(True)


def unshare_argv(argv: Sequence[str], buildah: str = "buildah") -> list[str]:
    """``argv`` run inside the user namespace of ``buildah unshare`` (where mounts of containers work)."""
    return [buildah, "unshare", "--", *argv]


def unshare_hint(argv: Sequence[str]) -> str:
    """The command line to give a user who ran ``argv`` outside ``buildah unshare``."""
    return shlex.join(unshare_argv(argv))
