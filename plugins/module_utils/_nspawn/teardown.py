# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Teardown of a session: what a supervisor, or whoever finds a dead one, releases."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any, Dict, List, Optional

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.cgroups import remove_cgroups
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.container import remove_container
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.overlay import is_mounted, unmount_overlay
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import process_alive, reap, wait_gone
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec


def teardown(state: Dict[str, Any], spec: SessionSpec, proc: Optional[subprocess.Popen] = None) -> List[str]:
    """Stop the container, unmount the overlay, remove the working container.

    Works from the supervisor (``proc`` is its child) and from any other process that finds
    a session whose supervisor died (pids checked with their start times). Returns what
    could not be cleaned, for the error message.
    """
    problems = []
    pid, start = state.get("nspawn_pid"), state.get("nspawn_start")
    if process_alive(pid, start):
        # SIGTERM makes systemd-nspawn shut the container down in order (SIGRTMIN+3 to its init).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        stopped = reap(proc, spec.stop_timeout) if proc else wait_gone(pid, start, spec.stop_timeout)
        if not stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not (reap(proc, 10) if proc else wait_gone(pid, start, 10)):
                problems.append(f"systemd-nspawn pid {pid} did not exit")
    elif proc is not None:
        reap(proc, 1)
    busy = remove_cgroups(state.get("cgroups") or [])
    if busy:
        problems.append(f"cgroups still in use: {', '.join(busy)}")
    overlay = state.get("overlay")
    if overlay and is_mounted(overlay):
        problem = unmount_overlay(overlay)
        if problem:
            problems.append(problem)
    container = state.get("container")
    if container:
        problem = remove_container(spec, container)
        if problem:
            problems.append(problem)
    return problems
