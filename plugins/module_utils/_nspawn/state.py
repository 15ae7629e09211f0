# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Session state on disk: the runtime directory, ``spec.json``/``state.json`` written atomically,
and the lock that serialises starting, stopping and garbage collection of sessions.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Dict, Iterator, Optional

from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import NspawnError
from ansible_collections.hpc.stateless.plugins.module_utils._paths import (
    UnsafeDirectory,
    private_dir,
    runtime_path,
    write_atomic,
)

STATUS_STARTING = "starting"
STATUS_READY = "ready"
STATUS_FAILED = "failed"
STATUS_STOPPED = "stopped"


def default_runtime_dir() -> str:
    """The runtime directory of sessions when ansible_nspawn_runtime_dir is not set: root's ``/run/hpc-stateless/nspawn``
    (module_utils/_paths.py runtime_path)."""
    return runtime_path("nspawn")


def checked_runtime_dir(path: str) -> str:
    """``path`` made or found private to this user (module_utils/_paths.py private_dir): root kills the pids, unmounts
    the mounts and removes the containers its sessions' files name, so no other user may write there."""
    try:
        return private_dir(path, "the nspawn runtime directory (ansible_nspawn_runtime_dir)")
    except UnsafeDirectory as exc:
        raise NspawnError(str(exc)) from exc
    except OSError as exc:
        raise NspawnError(f"cannot make the nspawn runtime directory {path} (ansible_nspawn_runtime_dir): "
                          f"{exc.strerror or exc}") from exc


def write_json(path: str, data: Dict[str, Any]) -> None:
    """Replace ``path`` with ``data`` at once: a reader sees the old file or the new one."""
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True), sync=False)  # runtime state, not kept


def read_json(path: str) -> Optional[Dict[str, Any]]:
    """The data of ``path``, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(path: str, on_wait: Optional[Callable[[str], None]] = None) -> Iterator[Flock]:
    """Hold the exclusive lock of the directory ``path`` (sessions of one runtime directory) in a ``with``.
    When another process holds it, ``on_wait`` is called once before the wait (a directory lock records no
    holder, so the caller says what holds it: another run starting or stopping a session there)."""
    lock = Flock(path, directory=True)
    lock.acquire(on_wait=on_wait)
    try:
        yield lock
    finally:
        lock.release()
