# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Process identity: a pid together with its start time, so a recycled pid is never mistaken
for ours; waiting for processes and keeping nsenter running while a container stops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Optional

from ansible_collections.hpc.stateless.plugins.module_utils._process import proc_stat
# owner_process: the process whose end ends a session (the ansible-playbook run, or the caller outside a worker).
from ansible_collections.hpc.stateless.plugins.module_utils._process import (  # noqa: F401  # pylint: disable=unused-import
    playbook_pid as owner_process,
)


def process_start(pid: int) -> Optional[str]:
    """Start time of ``pid`` (clock ticks since boot), or None when it is gone or a zombie.

    Used with the pid so a recycled pid is never mistaken for ours.
    """
    info = proc_stat(pid)
    return info.start_time if info is not None and info.running else None


def process_stopped(pid: int) -> bool:
    """True when ``pid`` is stopped (state T) by a job-control signal."""
    info = proc_stat(pid)
    return info is not None and info.state == "T"


def process_alive(pid: Optional[int], start: Optional[str] = None) -> bool:
    """True when ``pid`` runs (not a zombie) and, with ``start``, is the process that started then."""
    if not pid:
        return False
    current = process_start(int(pid))
    return current is not None and (start is None or current == start)


def wait_gone(pid: Optional[int], start: Optional[str], timeout: float) -> bool:
    """Wait until ``pid`` (started at ``start``) is gone; False when it outlived ``timeout``."""
    deadline = time.monotonic() + timeout
    while process_alive(pid, start):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def reap(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for our child ``proc``; False when it is still running after ``timeout``."""
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def keep_running(proc: subprocess.Popen, interval: float = 0.2) -> threading.Thread:
    """Resume ``proc`` (an nsenter) whenever it is stopped, until it exits.

    When a container shuts down, its systemd freezes every process of the container with
    SIGSTOP before killing it. nsenter, which waits for its child in the host's namespace,
    stops itself when it sees its child stopped, and nobody in the host resumes it: the
    command would never return. Resuming nsenter makes it resume (and then reap) its child.
    """
    def watch() -> None:
        while proc.poll() is None:
            if process_stopped(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name=f"nsenter-{proc.pid}-resume", daemon=True)
    thread.start()
    return thread
