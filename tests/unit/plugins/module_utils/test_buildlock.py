# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The build lock of a layer (_build/buildlock.py) and the holder process that keeps a lock across tasks
(_fs.Flock.hand_over): real flock(2) locks held by real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _fs
from ansible_collections.hpc.stateless.plugins.module_utils._build import buildlock
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import container_stem
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, LockBusy, release_holder
from ansible_collections.hpc.stateless.plugins.module_utils._process import proc_stat

PREFIX = "localhost/hpc-stateless-test"


def free(path: str) -> bool:
    """Whether another Flock can take ``path`` at once (it is released again)."""
    try:
        Flock(path).acquire(timeout=0)
    except LockBusy:
        return False
    return True


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while True:
        info = proc_stat(pid)
        if info is None or not info.running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def test_one_lock_per_layer_and_image_prefix_below_the_cache_root(tmp_path):
    path = buildlock.lock_path(str(tmp_path), PREFIX, "compute")
    assert path == str(tmp_path / ".locks" / (container_stem(PREFIX, "compute").rstrip("-") + ".lock"))
    assert buildlock.lock_path(str(tmp_path), PREFIX, "slurm") != path
    assert buildlock.lock_path(str(tmp_path), "localhost/other-project", "compute") != path


def test_a_second_build_of_the_layer_waits_says_whom_for_and_then_takes_the_lock(tmp_path):
    first, _taken = buildlock.take(str(tmp_path), PREFIX, "compute", "a" * 64, owner=4242, timeout=5,
                                   on_wait=pytest.fail, clock=time.monotonic)
    told: list[str] = []

    def waiting(message: str) -> None:
        told.append(message)
        first.release()  # the first build commits while the second waits

    second, taken = buildlock.take(str(tmp_path), PREFIX, "compute", "a" * 64, owner=4343, timeout=5,
                                   on_wait=waiting, clock=time.monotonic)
    try:
        held_by = (f"pid {os.getpid()} build of layer compute (key {'a' * 12}, image prefix {PREFIX}) "
                   "for ansible-playbook pid 4242 since ")
        assert len(told) == 1
        assert told[0].startswith(f"waiting for the build lock of layer compute ({PREFIX}), held by {held_by}")
        assert taken.waited_for.startswith(held_by) and taken.waited >= 0
        assert Path(taken.path).read_text().startswith(f"pid {os.getpid()} build of layer compute")
        assert "ansible-playbook pid 4343 " in Path(taken.path).read_text()
    finally:
        second.release()


def test_a_build_that_waits_its_whole_timeout_fails_naming_the_holder_and_what_to_do(tmp_path):
    first, _taken = buildlock.take(str(tmp_path), PREFIX, "compute", "b" * 64, owner=4242, timeout=5,
                                   on_wait=pytest.fail, clock=time.monotonic)
    told: list[str] = []
    try:
        started = time.monotonic()
        with pytest.raises(buildlock.BuildLockBusy) as busy:
            buildlock.take(str(tmp_path), PREFIX, "compute", "c" * 64, owner=4343, timeout=0.3,
                           on_wait=told.append, clock=time.monotonic)
        assert time.monotonic() - started >= 0.3
    finally:
        first.release()
    message = str(busy.value)
    assert message.startswith("layer compute: another build of it still holds its build lock after 0.3 s - pid ")
    assert "for ansible-playbook pid 4242 since " in message
    assert f"(lock file {buildlock.lock_path(str(tmp_path), PREFIX, 'compute')})" in message
    assert "kill the ansible-playbook pid it names" in message and "hpc_stateless_build_lock_timeout" in message
    assert len(told) == 1 and told[0].startswith("waiting for the build lock of layer compute")


def test_builds_of_other_layers_or_projects_do_not_wait(tmp_path):
    first, _taken = buildlock.take(str(tmp_path), PREFIX, "compute", "a" * 64, owner=1, timeout=5,
                                   on_wait=pytest.fail, clock=time.monotonic)
    try:
        for prefix, layer in ((PREFIX, "slurm"), ("localhost/other-project", "compute")):
            lock, taken = buildlock.take(str(tmp_path), prefix, layer, "a" * 64, owner=1, timeout=0,
                                         on_wait=pytest.fail, clock=time.monotonic)
            assert taken.waited_for == ""
            lock.release()
    finally:
        first.release()


# -- a lock kept across tasks: the holder process ---------------------------------------------------


@pytest.fixture(name="owner")
def fixture_owner():
    """A process standing in for the ansible-playbook a holder serves."""
    proc = subprocess.Popen(["sleep", "120"])  # pylint: disable=consider-using-with
    yield proc
    proc.kill()
    proc.wait()


def test_a_handed_over_lock_is_held_by_its_holder_until_released(tmp_path, owner):
    path = str(tmp_path / "layer.lock")
    lock = Flock(path, "build of layer compute")
    lock.acquire()
    holder = lock.hand_over(owner.pid)
    assert lock.fd is None and holder not in (os.getpid(), owner.pid)
    note = Path(path).read_text()
    assert note.startswith(f"pid {holder} build of layer compute since ")
    with pytest.raises(LockBusy, match=f"pid {holder} build of layer compute"):
        Flock(path).acquire(timeout=0.2)
    started = time.monotonic()
    assert release_holder(path, holder) is True
    assert time.monotonic() - started < _fs.HOLDER_POLL  # ended by the signal, not at its next look at the owner
    assert gone(holder, 0) and free(path)
    assert release_holder(path, holder) is False  # released already: nothing to end


def handed(tmp_path: Path, owner: int) -> tuple[str, int]:
    """A lock file taken and handed to a holder process serving ``owner``: its path and the holder's pid."""
    path = str(tmp_path / "layer.lock")
    lock = Flock(path, "build of layer compute")
    lock.acquire()
    return path, lock.hand_over(owner)


def test_a_holder_ends_with_the_playbook_it_serves(tmp_path, owner):
    path, holder = handed(tmp_path, owner.pid)
    assert not free(path)
    owner.kill()
    owner.wait()
    assert gone(holder, 5 + _fs.HOLDER_POLL), "the holder outlived its playbook"
    assert free(path)


def test_a_killed_holder_releases_the_lock(tmp_path, owner):
    path, holder = handed(tmp_path, owner.pid)
    os.kill(holder, 9)
    assert gone(holder)
    assert free(path)


def test_release_signals_only_the_holder_the_lock_file_names(tmp_path, owner):
    path, holder = handed(tmp_path, owner.pid)
    try:
        # Another process (here the stand-in playbook) is never signalled, whatever pid a caller passes.
        assert release_holder(path, owner.pid) is False
        assert owner.poll() is None and not free(path)
        other = str(tmp_path / "other.lock")
        Path(other).write_text(f"pid {holder} build of layer slurm since now")
        assert release_holder(other, holder) is False  # the holder of another lock file
        assert not free(path)
    finally:
        release_holder(path, holder)


def test_only_a_held_lock_with_a_purpose_is_handed_over(tmp_path, owner):
    with pytest.raises(RuntimeError, match="only a held lock file with a purpose"):
        Flock(tmp_path / "a.lock", "x").hand_over(owner.pid)
    lock = Flock(tmp_path / "b.lock")
    lock.acquire()
    try:
        with pytest.raises(RuntimeError, match="only a held lock file with a purpose"):
            lock.hand_over(owner.pid)
    finally:
        lock.release()


def test_the_holder_starts_without_the_callers_import_path(tmp_path, owner):
    """The holder imports the collection from the directory this module lives in, whatever PYTHONPATH says."""
    path = str(tmp_path / "layer.lock")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ("import sys; sys.path.insert(0, sys.argv[3]); "
              "from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock; "
              "lock = Flock(sys.argv[1], 'build'); lock.acquire(); print(lock.hand_over(int(sys.argv[2])))")
    out = subprocess.run([sys.executable, "-c", script, path, str(owner.pid), str(Path(_fs.__file__).parents[5])],
                         env=env, capture_output=True, text=True, check=True).stdout
    holder = int(out)
    assert not free(path)
    assert release_holder(path, holder)
