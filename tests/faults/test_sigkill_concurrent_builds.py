"""SIGKILL of one of two builds that run at once on one host, while its apt holds the lock of its package cache.

Two projects (site inventories of their own: the default base layer and a leaf layer each whose role
installs m4 with apt, tests/roles/site_apt_leaf) start their build stage together. The first is
SIGKILLed, its whole process group, while apt runs in its layer (apt holds the lock of the archive
directory bound there: the build's own view of the host cache, plugins/module_utils/_build/caches.py).
The other build finishes; the next run of the killed project builds its layer and removes what the
kill left (working container, cache bind, the view); the host's cache is whole.

Two runs of one project: the one that holds the leaf layer's build lock is SIGKILLed; the lock goes with it
and the other run builds the layer.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from pathlib import Path

import pytest

from faults_site import (apt_leaf_inventory, default_base_prefix, layer_images, our_containers, our_mounts, run_site,
                         start_playbook)
from faults_support import group_processes, kill_group, stop_group_when

from ansible_collections.hpc.stateless.plugins.module_utils import _fs, _process
from ansible_collections.hpc.stateless.plugins.module_utils._build import buildlock
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock

VIEWS = Path("/var/cache/hpc-stateless/.builds")
APT_PROGRAMS = ("apt-get", "dpkg", "dpkg-deb")


@pytest.fixture(name="prefix")
def fixture_prefix():
    """A prefix of the test's own holding the default build's base layer (tagged by content key)."""
    with default_base_prefix("killapt") as prefix:
        yield prefix


def leaf_images(prefix: str, leaf: str) -> list[str]:
    return [ref for ref in layer_images(prefix) if ref.startswith(f"{prefix}/{leaf}:") and not ref.endswith(":latest")]


def test_sigkill_of_one_of_two_concurrent_builds_while_its_apt_holds_the_cache_lock(prefix, tmp_path):
    run = uuid.uuid4().hex[:8]
    killed_leaf, other_leaf = "killedapt", "survivingapt"
    extra = ("-e", f"hpc_stateless_image_prefix={prefix}")
    killed_inventory = apt_leaf_inventory(tmp_path, killed_leaf, run)
    env = {"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")}
    killed = start_playbook(*extra, inventory=killed_inventory, playbook="playbooks/build.yml",
                            log=tmp_path / "killed.log", env=env)
    other = start_playbook(*extra, inventory=apt_leaf_inventory(tmp_path, other_leaf, run), playbook="playbooks/build.yml",
                           log=tmp_path / "other.log", env=env)

    def apt_at_work(pgid: int) -> list[int]:
        return [pid for pid, argv in group_processes(pgid).items() if argv and os.path.basename(argv[0]) in APT_PROGRAMS]

    try:
        try:
            stop_group_when(killed, apt_at_work, "apt at work in the killed project's layer", interval=0.003)
        finally:
            kill_group(killed)
        assert other.wait(timeout=600) == 0, (tmp_path / "other.log").read_text()[-4000:]
    finally:
        kill_group(other)
    assert len(leaf_images(prefix, other_leaf)) == 1
    # What the kill left: the killed build's working container and its view of the apt cache.
    left = [name for name in our_containers(prefix) if f"-{killed_leaf}-" in name]
    assert len(left) == 1, f"expected the killed build's working container, found {our_containers(prefix)}"
    assert (VIEWS / left[0]).is_dir(), "the killed build had no view of the package cache"
    assert not leaf_images(prefix, killed_leaf)

    again = run_site(*extra, inventory=killed_inventory, playbook="playbooks/build.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    assert len(leaf_images(prefix, killed_leaf)) == 1
    assert our_containers(prefix) == [], "working containers left after the next run"
    assert our_mounts() == [], "package-cache or container mounts leaked"
    assert not (VIEWS.is_dir() and [name for name in os.listdir(VIEWS) if killed_leaf in name or other_leaf in name])


def test_sigkill_of_the_run_that_holds_a_layers_build_lock_lets_the_other_run_of_the_project_build_it(prefix, tmp_path):
    """Two runs of ONE project at once: the one holding the leaf layer's build lock (plugins/module_utils/_build/
    buildlock.py; its holder process is in the run's process group) is SIGKILLed while apt runs in its layer. The
    lock goes with it: the other run, which waited naming it, takes the lock, removes the killed run's working
    container and view (its clean-up, safe under the lock) and builds the layer."""
    leaf = "lockedapt"
    extra = ("-e", f"hpc_stateless_image_prefix={prefix}")
    inventory = apt_leaf_inventory(tmp_path, leaf, uuid.uuid4().hex[:8])
    env = {"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")}
    runs = {name: start_playbook(*extra, inventory=inventory, playbook="playbooks/build.yml", log=tmp_path / f"{name}.log",
                                 env=env) for name in ("one", "two")}
    lock = Path(buildlock.lock_path(str(VIEWS.parent), prefix, leaf))

    def holder_run() -> tuple[str, int] | None:
        """The run whose build holds the lock (its note names the run's ansible-playbook) while apt works for it."""
        note = lock.read_text() if lock.is_file() else ""
        for name, proc in runs.items():
            if f"for ansible-playbook pid {proc.pid} since " in note:
                holder = _fs.note_pid(lock)
                group = group_processes(proc.pid)
                if holder in group and any(argv and os.path.basename(argv[0]) in APT_PROGRAMS for argv in group.values()):
                    return name, holder
        return None

    try:
        deadline = time.monotonic() + 600
        found = None
        while found is None and time.monotonic() < deadline and all(p.poll() is None for p in runs.values()):
            found = holder_run()
            time.sleep(0.01)
        assert found, "no run held the layer's build lock while apt worked in its layer:\n" + "\n".join(
            (tmp_path / f"{name}.log").read_text()[-2000:] for name in runs)
        killed, holder = found
        kill_group(runs[killed])
        info = _process.proc_stat(holder)
        assert info is None or not info.running, "the lock's holder process outlived the killed run"
        (survivor,) = set(runs) - {killed}
        assert runs[survivor].wait(timeout=600) == 0, (tmp_path / f"{survivor}.log").read_text()[-4000:]
    finally:
        for proc in runs.values():
            kill_group(proc)
    log = (tmp_path / f"{survivor}.log").read_text()
    flat = "".join(log.split())
    # The wait message names the process that held the lock when the wait began: the killed run's task that took it
    # or, once that task handed it over, the holder process (buildlock.take, _fs.Flock.hand_over); which one depends on
    # when the survivor got there (stop 36's CI: the taker). Both are the killed run's; the pid that stays, and that the
    # message tells an admin to end, is its ansible-playbook's, asserted next.
    assert re.search(re.escape("".join(f"waiting for the build lock of layer {leaf} ({prefix}), held by pid".split()))
                     + r"\d+buildoflayer" + re.escape(leaf), flat), log[-4000:]
    assert "".join(f"for ansible-playbook pid {runs[killed].pid} since".split()) in flat
    assert f"layer {leaf} committed as {prefix}/{leaf}:" in log  # built by the survivor, not reused
    assert len(leaf_images(prefix, leaf)) == 1
    assert our_containers(prefix) == [], "the killed run's working container was left"
    assert our_mounts() == [], "package-cache or container mounts leaked"
    assert not (VIEWS.is_dir() and [name for name in os.listdir(VIEWS) if leaf in name])
    free = Flock(str(lock))
    free.acquire(timeout=0)  # released after the survivor's commit
    free.release()
