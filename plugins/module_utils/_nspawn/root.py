# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The OS tree a session runs: paths resolved as the container sees them, and the checks that it
can run commands (a shell) and boot (a systemd).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import NspawnError

# systemd-nspawn -b executes the first of these that exists; /sbin/init alone may be
# sysvinit or busybox, which nspawn would start but which never reports readiness.
SYSTEMD_INIT_PATHS = ("/usr/lib/systemd/systemd", "/lib/systemd/systemd")
SHELL_PATH = "/bin/sh"


def lookup_user(passwd_text: str, user: str) -> Optional[Tuple[int, int, str]]:
    """``(uid, gid, home)`` of ``user`` (a name or a number) from passwd file text."""
    for line in passwd_text.splitlines():
        fields = line.split(":")
        if len(fields) < 7:
            continue
        if fields[0] == user or (user.isdigit() and fields[2] == user):
            return int(fields[2]), int(fields[3]), fields[5] or "/"
    return None


def resolve_in_root(root: str, path: str) -> Optional[str]:
    """Host path of ``path`` as the container would resolve it (symlinks stay inside ``root``).

    Returns None when the path does not exist. Absolute link targets are taken relative to
    ``root``, never to the host's ``/`` (the one resolver: ``module_utils/_imagepath.py``).
    """
    return _imagepath.resolve(root, path)


def find_systemd(root: str) -> Optional[str]:
    """Path (inside the container) of the systemd that ``systemd-nspawn -b`` would start."""
    for path in SYSTEMD_INIT_PATHS:
        host_path = resolve_in_root(root, path)
        if host_path and os.path.isfile(host_path) and os.access(host_path, os.X_OK):
            return path
    return None


def check_root(root: str, boot: bool, label: Optional[str] = None) -> None:
    """Raise NspawnError unless ``root`` is an OS tree systemd-nspawn can run (and boot)."""
    label = label or f"root {root}"
    if not os.path.exists(root):
        raise NspawnError(f"{label} does not exist: build the layer first, or point "
                          f"ansible_nspawn_root at an existing OS tree")
    if not os.path.isdir(root):
        raise NspawnError(f"{label} is not a directory")
    shell = resolve_in_root(root, SHELL_PATH)
    if not shell or not os.access(shell, os.X_OK):
        raise NspawnError(f"{label} has no {SHELL_PATH}: it is not an OS tree Ansible can run in")
    if boot and not find_systemd(root):
        init = resolve_in_root(root, "/sbin/init")
        found = "/" + os.path.relpath(init, root) if init else "missing"
        raise NspawnError(
            f"{label} has no systemd ({' and '.join(SYSTEMD_INIT_PATHS)} are missing, /sbin/init is "
            f"{found}): it cannot be booted. Install systemd in the layer (Debian: the bootstrap "
            f"packages systemd and systemd-sysv) or use directory mode (ansible_nspawn_boot: false)")
