# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One build of a layer at a time on a host: the layer's build lock.

Two runs of one project started together (an admin and a cron job, two CI jobs of one pipeline) plan
the same stale layer, and everything of its build is named by the layer and the image prefix: the
working container (``container_name``), the bootstrap container, and the clean-up of leftovers, which
removes every working container of the layer. Without a lock the second run removed the first one's
container, or built the layer a second time into it.

The lock is a file per layer and image prefix, ``<cache root>/.locks/<container stem>.lock`` (the cache
root of the host's package caches: per user for a rootless build, like its containers-storage). A build
takes it before it cleans up and starts the layer's working container and keeps it until the commit,
or the removal of a failed container; the task that takes it hands it to a holder process
(:meth:`~.._fs.Flock.hand_over`) that ends with the ``ansible-playbook``. A second build waits, says whom
it waits for, and then finds the layer committed under its own key: it reuses it and builds nothing.
A layer of another key (another configuration of the project) is built after the first, not into it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import container_stem
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, LockBusy, wait_message

LOCKS_DIR = ".locks"
#: How long a build waits for another build of the same layer by default (a root layer's bootstrap takes minutes).
DEFAULT_TIMEOUT = 3600.0


def lock_path(cache_root: str, image_prefix: str, layer: str) -> str:
    """The build lock of ``layer`` of ``image_prefix``: ``<cache_root>/.locks/<container stem>.lock``."""
    return os.path.join(cache_root, LOCKS_DIR, container_stem(image_prefix, layer).rstrip("-") + ".lock")


def purpose(layer: str, key: str, image_prefix: str, owner: int) -> str:
    """What the lock file says its holder does: the layer, its key, the prefix and the ``ansible-playbook`` pid."""
    return f"build of layer {layer} (key {key[:12]}, image prefix {image_prefix}) for ansible-playbook pid {owner}"


def what(layer: str, image_prefix: str) -> str:
    """What a waiting build waits for, in its message."""
    return f"the build lock of layer {layer} ({image_prefix})"


def busy_message(layer: str, path: str, exc: LockBusy) -> str:
    """The failure of a build that waited its whole timeout: the holder, and what to do."""
    return (f"layer {layer}: another build of it still holds its build lock after {exc.waited:g} s - {exc.holder} "
            f"(lock file {path}). Wait for that run to finish and run again (this layer is then cached), or end it "
            "if it hangs (kill the ansible-playbook pid it names; its lock goes with it); "
            "hpc_stateless_build_lock_timeout sets how long a build waits")


class BuildLockBusy(Exception):
    """Another build held the layer's lock for all of the timeout; the message names it and what to do."""


@dataclass
class Taken:
    """A taken build lock: its file, whom the build waited for (empty when it did not wait) and how long."""

    path: str
    waited_for: str = ""
    waited: float = 0.0


def take(cache_root: str, image_prefix: str, layer: str, key: str, owner: int, timeout: float,
         on_wait: Callable[[str], None], clock: Callable[[], float]) -> tuple[Flock, Taken]:
    """Wait for the build lock of ``layer`` (at most ``timeout`` s); ``on_wait`` gets the wait message once.

    Returns the held :class:`~.._fs.Flock` (the caller hands it over or releases it) and what the wait was.
    Raises :class:`BuildLockBusy` after ``timeout``, OSError when the lock file cannot be created.
    """
    path = lock_path(cache_root, image_prefix, layer)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    lock = Flock(path, purpose(layer, key, image_prefix, owner))
    taken = Taken(path)

    def waiting(holder: str) -> None:
        taken.waited_for = holder
        on_wait(wait_message(what(layer, image_prefix), holder))

    started = clock()
    try:
        lock.acquire(timeout=timeout, on_wait=waiting)
    except LockBusy as exc:
        raise BuildLockBusy(busy_message(layer, path, exc)) from None
    if taken.waited_for:
        taken.waited = clock() - started
    return lock, taken
