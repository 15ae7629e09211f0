# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the build host's file systems say, and how the stages take turns on them.

* :func:`mounts_below` - the mount points strictly below a directory, deepest first: what a wipe must
  not cross and what a teardown unmounts, in that order.
* :class:`Flock` - an exclusive ``flock(2)`` on a file or a directory: a package cache, the boot root,
  a runtime directory. A lock file may record who holds it (pid, what for, since when); a waiter is
  told once who it waits for (:func:`wait_message`), and one that gives up after its timeout raises
  :class:`LockBusy` naming that holder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from typing import Callable, Optional, Union

from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc

PathName = Union[str, bytes, os.PathLike]

MOUNTS_FILE = "/proc/self/mounts"
# /proc/self/mounts writes a space, tab, newline and backslash in a path as a 3-digit octal escape.
_MOUNT_ESCAPE = re.compile(r"\\([0-7]{3})")
# How often a lock with a timeout asks again, and how much of a holder's note is read.
LOCK_POLL = 0.1
_NOTE_MAX = 512
UNKNOWN_HOLDER = "unknown process"


def mounts_below(path: str, mounts_file: str = MOUNTS_FILE) -> list[str]:
    """Mount points strictly below ``path`` (resolved) in our mount namespace, each once, deepest first.

    Raises OSError when ``mounts_file`` cannot be read: an unknown answer is no answer for a wipe.
    """
    prefix = os.path.realpath(path).rstrip("/") + "/"
    with open(mounts_file, encoding="utf-8", errors="surrogateescape") as handle:
        points = {_MOUNT_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[1])
                  for fields in (line.split() for line in handle) if len(fields) > 1}
    return sorted((point for point in points if point.startswith(prefix)), key=lambda p: (-len(p), p))


def wait_message(what: str, holder: str) -> str:
    """What a build that must wait says: ``waiting for <what>, held by <holder>``."""
    return f"waiting for {what}, held by {holder}"


class LockBusy(TimeoutError):
    """Another process held the lock for all of the time a caller would wait; ``holder`` says who."""

    def __init__(self, path: PathName, holder: str, waited: float) -> None:
        self.path = os.fsdecode(path)
        self.holder = holder
        self.waited = waited
        super().__init__(errno.EWOULDBLOCK, f"{self.path} is locked by {holder} (waited {waited:g} s)")

    def __str__(self) -> str:
        return str(self.strerror)


class Flock:
    """An exclusive ``flock(2)`` on ``path``, held from :meth:`acquire` (or ``with``) until :meth:`release`.

    ``path`` is a file, created (mode 0644) when missing, or with ``directory`` a directory that must exist
    (locked through a read-only descriptor). With ``purpose`` the file records its holder once locked -
    ``pid <pid> <purpose> since <time>`` - so that a waiter which gives up, and a person who reads the file,
    learn who it is. The lock belongs to the open file: a second ``Flock`` on the same path waits even in
    the same process, and a killed holder releases it. The descriptor is not inherited by children.
    """

    def __init__(self, path: PathName, purpose: str = "", *, directory: bool = False) -> None:
        if directory and purpose:
            raise ValueError("a directory lock cannot record its holder: lock a file in it for that")
        self.path = path
        self.purpose = purpose
        self.directory = directory
        self.fd: int | None = None

    def acquire(self, timeout: float | None = None, on_wait: Optional[Callable[[str], None]] = None) -> None:
        """Wait for the lock; with ``timeout`` (seconds) raise :class:`LockBusy` once that has passed.

        When the lock is held, ``on_wait`` is called once, before the wait, with what its holder wrote
        (:meth:`holder`): the caller says whom it waits for.

        Raises OSError when ``path`` cannot be opened or created (the caller names what to fix).
        """
        if self.fd is not None:
            raise RuntimeError(f"{os.fsdecode(self.path)} is locked already by this Flock")
        if self.directory:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._wait(fd, timeout, on_wait)
            if self.purpose:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} {self.purpose} since {iso_utc()}".encode("utf-8"), 0)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def _wait(self, fd: int, timeout: float | None, on_wait: Optional[Callable[[str], None]] = None) -> None:
        if on_wait is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                on_wait(self.holder(fd))
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockBusy(self.path, self.holder(fd), max(timeout, 0.0)) from None
                time.sleep(LOCK_POLL)

    @staticmethod
    def holder(fd: int) -> str:
        """What the holder of the lock file open as ``fd`` wrote about itself, or ``unknown process``."""
        try:
            note = os.pread(fd, _NOTE_MAX, 0).decode("utf-8", "replace").strip()
        except OSError:  # a directory has no note
            note = ""
        return note or UNKNOWN_HOLDER

    def release(self) -> None:
        """Give the lock up (closing the descriptor releases it); nothing when it is not held."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> Flock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
