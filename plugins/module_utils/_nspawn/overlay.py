# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The overlay that keeps a directory root untouched (ephemeral mode): options, mount, unmount."""

from __future__ import annotations

import os
import time
from typing import List, Optional

from ansible_collections.hpc.stateless.plugins.module_utils._process import Result, run
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import host_env

#: mount/umount never wait longer than this (a timeout is rc 124).
MOUNT_TIMEOUT = 30.0


def escape_overlay_path(path: str) -> str:
    """Escape a path for an overlayfs ``lowerdir=``/``upperdir=`` mount option."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def overlay_options(lower: str, upper: str, work: str) -> str:
    """The ``-o`` of an overlay mount over ``lower``."""
    return (f"lowerdir={escape_overlay_path(lower)},upperdir={escape_overlay_path(upper)},"
            f"workdir={escape_overlay_path(work)}")


def is_mounted(path: str) -> bool:
    """True when something is mounted on ``path`` (in our mount namespace)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return any(line.split()[4] == real for line in handle if len(line.split()) > 4)
    except OSError:
        return False


def _mount_tool(argv: List[str]) -> Result:
    return run(argv, check=False, inherit_env=False, env=host_env(), timeout=MOUNT_TIMEOUT)


def mount_overlay(lower: str, upper: str, work: str, merged: str) -> Result:
    """Mount an overlay of ``lower`` on ``merged`` (changes go to ``upper``); the caller reads rc/stderr."""
    return _mount_tool(["mount", "-t", "overlay", "overlay", "-o", overlay_options(lower, upper, work), merged])


def unmount_overlay(path: str) -> Optional[str]:
    """Unmount the overlay on ``path``, retrying while it is busy; when it stays busy it is
    detached lazily and the problem returned (for the teardown report)."""
    err = ""
    for attempt in range(20):
        rc, _out, err = _mount_tool(["umount", path])
        if rc == 0 or not is_mounted(path):
            return None
        time.sleep(0.1 * (attempt + 1))
    _mount_tool(["umount", "--lazy", path])
    return f"overlay {path} was busy and was detached lazily: {err.strip()}"
