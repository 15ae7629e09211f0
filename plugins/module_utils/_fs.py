# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the build host's file systems say, and how the stages take turns on them.

* :func:`mount_table` - the mounts of our mount namespace (/proc/self/mounts, escapes decoded), the one reader of it;
  :func:`mounts_below` - the mount points strictly below a directory, deepest first: what a wipe must not cross and
  what a teardown unmounts, in that order; :func:`mount_option` - an option of the mount at a point (an overlay's
  ``upperdir``).
* :class:`Flock` - an exclusive ``flock(2)`` on a file or a directory: a package cache, the boot root,
  a runtime directory. A lock file may record who holds it (pid, what for, since when); a waiter is
  told once who it waits for (:func:`wait_message`), and one that gives up after its timeout raises
  :class:`LockBusy` naming that holder. A lock held across tasks (each Ansible task is a process of its
  own) is handed over to a small holder process (:meth:`Flock.hand_over`) that keeps it until the
  ``ansible-playbook`` it serves ends, or :func:`release_holder` ends it; a killed playbook (its process
  group) takes the holder, and so the lock, with it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from ansible_collections.hpc.stateless.plugins.module_utils._process import command_env, proc_stat
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc

PathName = Union[str, bytes, os.PathLike]

MOUNTS_FILE = "/proc/self/mounts"
# /proc/self/mounts writes a space, tab, newline and backslash in a path as a 3-digit octal escape.
_MOUNT_ESCAPE = re.compile(r"\\([0-7]{3})")
# How often a lock with a timeout asks again, and how much of a holder's note is read.
LOCK_POLL = 0.1
_NOTE_MAX = 512
UNKNOWN_HOLDER = "unknown process"
#: How often a holder process looks whether the playbook it serves is still there.
HOLDER_POLL = 0.5
#: How long a hand-over waits for the holder to say it holds the lock, and a release for it to end.
HOLDER_START_TIMEOUT = 30.0
HOLDER_STOP_TIMEOUT = 10.0
_HOLDER_NOTE = re.compile(r"pid (\d+) ")


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mounts: the source, the mount point, the file system type and the options."""

    source: str
    point: str
    fstype: str
    options: tuple[str, ...]


def _unescaped(field: str) -> str:
    return _MOUNT_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def mount_table(mounts_file: str = MOUNTS_FILE) -> list[Mount]:
    """The mounts of our mount namespace in the kernel's order (a later mount on the same point covers an earlier).

    Raises OSError when ``mounts_file`` cannot be read: an unknown answer is no answer for a wipe.
    """
    with open(mounts_file, encoding="utf-8", errors="surrogateescape") as handle:
        return [Mount(_unescaped(fields[0]), _unescaped(fields[1]), fields[2] if len(fields) > 2 else "",
                      tuple(_unescaped(fields[3]).split(",")) if len(fields) > 3 else ())
                for fields in (line.split() for line in handle) if len(fields) > 1]


def mounts_below(path: str, mounts_file: str = MOUNTS_FILE) -> list[str]:
    """Mount points strictly below ``path`` (resolved) in our mount namespace, each once, deepest first.

    Raises OSError when ``mounts_file`` cannot be read: an unknown answer is no answer for a wipe.
    """
    prefix = os.path.realpath(path).rstrip("/") + "/"
    points = {mount.point for mount in mount_table(mounts_file)}
    return sorted((point for point in points if point.startswith(prefix)), key=lambda p: (-len(p), p))


def mount_option(point: str, fstype: str, name: str, mounts_file: str = MOUNTS_FILE) -> Optional[str]:
    """The value of option ``name`` (``upperdir``) of the topmost ``fstype`` mount at ``point``; None without one."""
    for mount in reversed(mount_table(mounts_file)):
        if mount.point == point and mount.fstype == fstype:
            return next((o.split("=", 1)[1] for o in mount.options if o.startswith(name + "=")), None)
    return None


def wait_message(what: str, holder: str) -> str:
    """What a build that must wait says: ``waiting for <what>, held by <holder>``."""
    return f"waiting for {what}, held by {holder}"


def holder_note(pid: int, purpose: str, since: str) -> str:
    """What a lock file says about its holder: ``pid <pid> <purpose> since <time>``."""
    return f"pid {pid} {purpose} since {since}"


def _write_note(fd: int, note: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, note.encode("utf-8"), 0)


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
                _write_note(fd, holder_note(os.getpid(), self.purpose, iso_utc()))
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

    def hand_over(self, owner: int) -> int:
        """Hand the held lock to a holder process that keeps it until process ``owner`` ends; return its pid.

        The holder (a detached Python process in our process group, stdio on ``/dev/null``) writes itself into
        the lock file as its holder, then keeps the lock until ``owner`` is gone, or until it gets SIGTERM
        (:func:`release_holder`), SIGINT or SIGHUP. This Flock no longer holds it afterwards. Raises
        RuntimeError when the lock is not held, OSError when the holder does not start (the lock is released).
        """
        if self.fd is None or self.directory or not self.purpose:
            raise RuntimeError(f"{os.fsdecode(self.path)}: only a held lock file with a purpose can be handed over")
        owner_stat = proc_stat(owner)
        if owner_stat is None:
            raise RuntimeError(f"process {owner} to hold {os.fsdecode(self.path)} for does not exist")
        ready_read, ready_write = os.pipe()
        try:
            config = [str(self.fd), str(ready_write), str(owner), owner_stat.start_time, self.purpose,
                      os.fsdecode(self.path), collection_root()]
            with subprocess.Popen([sys.executable, "-B", "-c", _HOLDER_BOOT, *config], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=command_env(),
                                  pass_fds=(self.fd, ready_write), cwd="/") as starter:
                os.close(ready_write)
                ready_write = -1
                said = _read_until_eof(ready_read, HOLDER_START_TIMEOUT)
                starter.wait(timeout=HOLDER_START_TIMEOUT)
        finally:
            os.close(ready_read)
            if ready_write >= 0:
                os.close(ready_write)
            self.release()  # the holder's descriptor keeps the lock; ours goes
        if not said.strip().isdigit():
            raise OSError(errno.ECHILD, f"the holder of {os.fsdecode(self.path)} did not start (it said {said!r})")
        return int(said)

    def __enter__(self) -> Flock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def collection_root() -> str:
    """The directory that holds ``ansible_collections`` for this collection: the import path a helper process
    started with ``python -c`` needs (the lock holder here, the buildah agent's holder)."""
    return str(Path(__file__).parents[len(__name__.split(".")) - 1])


def _read_until_eof(fd: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))[0]:
            break
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace")


def keep_lock(fd: int, ready: int, owner: int, owner_start: str, purpose: str) -> None:
    """The holder process (:meth:`Flock.hand_over`): detach, say who holds the lock open as ``fd``, keep it."""
    if os.fork():
        os._exit(0)  # pylint: disable=protected-access
    # Blocked and waited for: a release (SIGTERM) ends the holder at once, not after its next look at the owner.
    stop = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    _write_note(fd, holder_note(os.getpid(), purpose, iso_utc()))
    os.write(ready, str(os.getpid()).encode("ascii"))
    os.close(ready)
    while True:
        info = proc_stat(owner)
        if info is None or not info.running or info.start_time != owner_start:
            break
        if signal.sigtimedwait(stop, HOLDER_POLL) is not None:
            break
    os._exit(0)  # pylint: disable=protected-access


_HOLDER_BOOT = ("import sys; a = sys.argv[1:]; sys.path[:0] = [a[6]]; "
                "from ansible_collections.hpc.stateless.plugins.module_utils._fs import keep_lock; "
                "keep_lock(int(a[0]), int(a[1]), int(a[2]), a[3], a[4])")


def note_pid(path: PathName) -> int | None:
    """The pid the lock file ``path`` names as its holder (its note), None when it names none."""
    try:
        with open(path, "rb") as handle:
            note = handle.read(_NOTE_MAX).decode("utf-8", "replace")
    except OSError:
        return None
    found = _HOLDER_NOTE.match(note)
    return int(found.group(1)) if found else None


def release_holder(path: PathName, pid: int, timeout: float = HOLDER_STOP_TIMEOUT) -> bool:
    """End holder process ``pid`` of the lock file ``path`` (:meth:`Flock.hand_over`) and wait until it is gone.

    Only a process the lock file names as its holder and whose command line holds ``path`` is signalled (a
    holder that ended already, its pid now another process's, is left alone). True when it was ended, False
    when ``pid`` held nothing there any more. Raises TimeoutError when it is still there after ``timeout``.
    """
    name = os.fsdecode(path)
    if note_pid(path) != pid or not _runs_holder_of(pid, name):
        return False
    before = proc_stat(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while True:
        info = proc_stat(pid)
        if info is None or not info.running or (before is not None and info.start_time != before.start_time):
            return True
        if time.monotonic() >= deadline:
            raise TimeoutError(errno.ETIMEDOUT, f"the holder (pid {pid}) of {name} did not end within {timeout:g} s")
        time.sleep(LOCK_POLL / 10)


def _runs_holder_of(pid: int, path: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return b"keep_lock" in b" ".join(argv) and os.fsencode(path) in argv
