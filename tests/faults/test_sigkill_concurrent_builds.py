"""SIGKILL of one of two builds that run at once on one host, while its apt holds the lock of its package cache.

Two projects (site inventories of their own: the default base layer and a leaf layer each whose role
installs m4 with apt, tests/roles/site_apt_leaf) start their build stage together. The first is
SIGKILLed, its whole process group, while apt runs in its layer (apt holds the lock of the archive
directory bound there: the build's own view of the host cache, plugins/module_utils/_build/caches.py).
The other build finishes; the next run of the killed project builds its layer and removes what the
kill left (working container, cache bind, the view); the host's cache is whole.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from faults_site import (apt_leaf_inventory, layer_images, our_containers, our_mounts, remove_prefix_images,
                         run_site, start_playbook, tag_default_layers)
from faults_support import group_processes, kill_group, stop_group_when

VIEWS = Path("/var/cache/hpc-stateless/.builds")
APT_PROGRAMS = ("apt-get", "dpkg", "dpkg-deb")


@pytest.fixture(name="prefix")
def fixture_prefix():
    """A prefix of the test's own holding the default build's base layer (tagged by content key)."""
    prefix = f"localhost/hpc-stateless-killapt-{uuid.uuid4().hex[:6]}"
    tag_default_layers(prefix)
    yield prefix
    remove_prefix_images(prefix)


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
