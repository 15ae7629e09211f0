# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cgroups of a session: one per session below the caller's own, in the hierarchies
systemd-nspawn manages, entered before systemd-nspawn starts and removed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Dict, List, Tuple


def cgroup_dirs(proc_cgroup: str, mountinfo: str, name: str) -> List[str]:
    """Directories of a cgroup ``name`` below the caller's own, in the hierarchies systemd-nspawn
    manages (cgroup v2 and the v1 ``name=systemd`` hierarchy).

    With ``--keep-unit`` systemd-nspawn puts the container into ``<its own cgroup>/payload``:
    containers started from one cgroup would share it and their systemds would remove each
    other's unit cgroups (units then fail with 219/CGROUP). Each session gets a cgroup of its own.
    """
    mounts: Dict[str, Tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4:
            continue
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        root, mount_point = fields[3], fields[4]
        if fstype == "cgroup2":
            mounts.setdefault("", (mount_point, root))
        elif fstype == "cgroup" and "name=systemd" in options:
            mounts.setdefault("name=systemd", (mount_point, root))
    dirs = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[1] not in mounts:
            continue
        mount_point, root = mounts[parts[1]]
        path = parts[2]
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root):]
        dirs.append(os.path.join(mount_point, path.lstrip("/"), name))
    return dirs


def in_cgroups_argv(dirs: List[str], argv: List[str]) -> List[str]:
    """``argv`` started from inside the cgroups ``dirs`` (a shell moves itself, then execs)."""
    if not dirs:
        return argv
    script = 'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "hpc-nspawn-cgroup", *dirs, "--", *argv]


def session_cgroups(session: str) -> List[str]:
    """The cgroups of session ``session`` (its id), created, below the caller's cgroup."""
    dirs = cgroup_dirs_of(session)
    for path in dirs:
        os.makedirs(path, exist_ok=True)
    return dirs


def cgroup_dirs_of(session: str) -> List[str]:
    """The cgroup directories of session ``session`` (its id), not created."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = handle.read()
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return cgroup_dirs(own, handle.read(), f"hpc-nspawn-{session}")
    except OSError:
        return []


def cgroup_pids(top: str) -> List[int]:
    """Every process in cgroup ``top`` and below it (its ``cgroup.procs`` files)."""
    pids: List[int] = []
    for current, _subdirs, _files in os.walk(top):
        with contextlib.suppress(OSError), open(os.path.join(current, "cgroup.procs"), encoding="ascii") as handle:
            pids += [int(line) for line in handle.read().split() if line.isdigit()]
    return pids


def remove_cgroups(dirs: List[str], timeout: float = 5.0) -> List[str]:
    """Remove session cgroups bottom-up; returns those still busy after ``timeout``.

    Processes left in a session's cgroups once its systemd-nspawn is gone (the container's init and its children,
    when nspawn was killed before their shutdown finished: slow under qemu-user emulation) are the session's own:
    they get SIGKILL, so the cgroups empty.
    """
    deadline = time.monotonic() + timeout
    left = []
    for top in dirs:
        for pid in cgroup_pids(top) if os.path.isdir(top) else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        while os.path.isdir(top):
            for current, _subdirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(current)
            if not os.path.isdir(top) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if os.path.isdir(top):
            left.append(top)
    return left
