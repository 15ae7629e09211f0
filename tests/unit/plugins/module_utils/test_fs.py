# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The build host's file systems: the mounts below a directory, and flock(2) locks taken by two real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _fs
from ansible_collections.hpc.stateless.plugins.module_utils._fs import UNKNOWN_HOLDER, Flock, LockBusy, mounts_below

# The directory that holds ansible_collections/, for the other processes of these tests.
COLLECTIONS = str(Path(_fs.__file__).parents[5])

# -- mounts below a directory ----------------------------------------------------------------------

MOUNTS = """\
overlay /m/merged overlay rw,relatime 0 0
/dev/sda1 /m/merged/var ext4 rw 0 0
tmpfs /m/merged/var/cache/apt/archives tmpfs rw 0 0
/dev/sda1 /m/merged/var ext4 rw 0 0
tmpfs /m/merged/with\\040space\\011tab tmpfs rw 0 0
tmpfs /m/merged-sibling tmpfs rw 0 0
proc /proc proc rw 0 0
"""


def test_mounts_strictly_below_deepest_first_each_once(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert mounts_below("/m/merged", str(mounts)) == [
        "/m/merged/var/cache/apt/archives", "/m/merged/with space\ttab", "/m/merged/var"]
    assert mounts_below("/m/merged/", str(mounts)) == mounts_below("/m/merged", str(mounts))
    assert mounts_below("/m/merged/var/cache/apt/archives", str(mounts)) == []


def test_a_path_through_a_link_is_resolved_first(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"tmpfs {tmp_path}/real/run tmpfs rw 0 0\n")
    assert mounts_below(str(tmp_path / "link"), str(mounts)) == [f"{tmp_path}/real/run"]


def test_the_real_mount_table_of_this_process():
    assert "/proc" in mounts_below("/")
    assert mounts_below("/proc/self/fd") == []


def test_an_unreadable_mount_table_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        mounts_below("/", str(tmp_path / "missing"))


# -- flock between two processes ------------------------------------------------------------------

HOLD = """
import sys, time
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock
path, purpose, directory = sys.argv[1], sys.argv[2], sys.argv[3] == "dir"
with Flock(path, purpose, directory=directory):
    print("held", flush=True)
    sys.stdin.read()
"""


class Holder:
    """Another process that holds the lock of ``path`` until :meth:`release`."""

    def __init__(self, path: Path, purpose: str = "", directory: bool = False) -> None:
        env = {**os.environ, "PYTHONPATH": COLLECTIONS}
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), purpose, "dir" if directory else "file"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        assert self.proc.stdout.readline() == "held\n"

    def release(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


def test_a_second_process_waits_and_its_error_names_the_holder(tmp_path):
    path = tmp_path / "cache.lock"
    holder = Holder(path, "rootfs bootstrap")
    try:
        note = path.read_text()
        assert note.startswith(f"pid {holder.proc.pid} rootfs bootstrap since ") and note.endswith("Z")
        started = time.monotonic()
        with pytest.raises(LockBusy) as busy:
            Flock(path).acquire(timeout=0.3)
        assert time.monotonic() - started >= 0.3
        assert busy.value.holder == note and busy.value.waited == 0.3
        assert str(busy.value) == f"{path} is locked by {note} (waited 0.3 s)"
        with pytest.raises(LockBusy):
            Flock(path).acquire(timeout=0)  # no wait: one try
    finally:
        holder.release()
    lock = Flock(path, "deploy")
    lock.acquire(timeout=0)
    try:
        assert path.read_text().startswith(f"pid {os.getpid()} deploy since ")  # the old note is gone whole
    finally:
        lock.release()


def test_a_waiter_without_timeout_gets_the_lock_when_the_holder_lets_go(tmp_path):
    path = tmp_path / "lock"
    holder = Holder(path)
    took = []
    waiter = subprocess.Popen([sys.executable, "-c", HOLD, str(path), "", "file"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": COLLECTIONS})
    try:
        time.sleep(0.3)
        assert waiter.poll() is None  # still waiting
        holder.release()
        took.append(waiter.stdout.readline())
    finally:
        waiter.stdin.close()
        waiter.wait(timeout=30)
    assert took == ["held\n"]


def test_a_waiter_is_told_once_whom_it_waits_for(tmp_path):
    path = tmp_path / "cache.lock"
    holder = Holder(path, "build of layer compute")
    told = []
    try:
        with pytest.raises(LockBusy):
            Flock(path).acquire(timeout=0.3, on_wait=told.append)
    finally:
        holder.release()
    assert len(told) == 1 and told[0].startswith(f"pid {holder.proc.pid} build of layer compute since ")
    assert _fs.wait_message("the apt cache", told[0]) == f"waiting for the apt cache, held by {told[0]}"
    with Flock(path) as lock:  # free: nobody is waited for
        assert lock.fd is not None
    lock.acquire(on_wait=told.append)
    lock.release()
    assert len(told) == 1


def test_a_holder_that_left_no_note_is_an_unknown_process(tmp_path):
    path = tmp_path / "lock"
    holder = Holder(path)
    try:
        with pytest.raises(LockBusy, match=UNKNOWN_HOLDER):
            Flock(path).acquire(timeout=0)
    finally:
        holder.release()


def test_a_killed_holder_releases_the_lock(tmp_path):
    path = tmp_path / "lock"
    holder = Holder(path, "killed")
    holder.proc.kill()
    holder.proc.wait()
    with Flock(path) as lock:
        assert lock.fd is not None
    assert lock.fd is None


def test_a_directory_is_locked_through_itself(tmp_path):
    holder = Holder(tmp_path, directory=True)
    try:
        with pytest.raises(LockBusy, match=UNKNOWN_HOLDER):
            Flock(tmp_path, directory=True).acquire(timeout=0.1)
    finally:
        holder.release()
    with Flock(tmp_path, directory=True):
        assert sorted(os.listdir(tmp_path)) == []  # nothing was created in it
    with pytest.raises(FileNotFoundError):
        Flock(tmp_path / "missing", directory=True).acquire()
    with pytest.raises(ValueError, match="cannot record its holder"):
        Flock(tmp_path, "purpose", directory=True)


def test_the_lock_belongs_to_the_open_file_not_to_the_process(tmp_path):
    path = tmp_path / "lock"
    with Flock(path):
        with pytest.raises(LockBusy):
            Flock(path).acquire(timeout=0)


def test_a_lock_that_cannot_be_created_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        Flock(tmp_path / "missing" / "lock").acquire()
    lock = Flock(tmp_path / "lock")
    lock.acquire()
    try:
        with pytest.raises(RuntimeError, match="locked already"):
            lock.acquire()
    finally:
        lock.release()
    lock.release()  # a second release is nothing


def test_an_option_of_the_topmost_mount_at_a_point(tmp_path):
    """The overlay upper directory of a container's root (what a layer built in a user namespace shifts back)."""
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS + "overlay /m/merged overlay rw,lowerdir=/l/1:/l/2,upperdir=/u/with\\040space/diff,"
                               "workdir=/u/work 0 0\n")
    assert _fs.mount_option("/m/merged", "overlay", "upperdir", str(mounts)) == "/u/with space/diff"
    assert _fs.mount_option("/m/merged", "overlay", "lowerdir", str(mounts)) == "/l/1:/l/2"
    assert _fs.mount_option("/m/merged", "tmpfs", "upperdir", str(mounts)) is None
    assert _fs.mount_option("/m/merged/var", "ext4", "upperdir", str(mounts)) is None
    assert [m.fstype for m in _fs.mount_table(str(mounts)) if m.point == "/m/merged"] == ["overlay", "overlay"]
