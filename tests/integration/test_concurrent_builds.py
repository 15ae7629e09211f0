"""Builds of different projects on one host, started at once, all succeed (issue 29).

Each project is a site inventory of its own: the default base layer and a leaf layer of its own whose
role installs a small package with apt (tests/roles/site_apt_leaf, no retry and no lock timeout). They
share what two projects on one host share: the host's package caches and containers-storage, and here
the image prefix too. Before, every build bound the same ``/var/cache/apt/archives`` and the second apt
failed on its lock; now each build binds a view of its own (plugins/module_utils/_build/caches.py) and
what one downloads reaches the pool at its commit.

Two runs of ONE project started together (an admin and a cron job, two CI jobs of one pipeline) plan the
same stale layer: the second waits on the layer's build lock (plugins/module_utils/_build/buildlock.py),
says whom it waits for, and reuses the layer the first committed - it is built once, and nothing of one
run's working container is removed by the other.

The default base layer is tagged into the test's prefix from the default build (images are named by
content key), so only the leaf layers are built: the build stage alone (playbooks/build.yml).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import (REPO, apt_leaf_inventory, default_base_prefix, layer_images, our_containers, our_mounts,
                      playbook_command)
from pack_support import mounted_image

from ansible_collections.hpc.stateless.plugins.module_utils._build import buildlock
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock

CACHE_ROOT = Path("/var/cache/hpc-stateless")
TIMEOUT = 600


@pytest.fixture(scope="module", name="prefix")
def fixture_prefix():
    with default_base_prefix("concurrent") as prefix:
        yield prefix


def start_together(tmp_path: Path, prefix: str, runs: dict[str, Path]) -> tuple[dict[str, tuple[int, str]], float]:
    """Start the build stage of each ``{name: inventory}`` together; ``{name: (rc, log)}`` and the wall time."""
    started, procs = time.monotonic(), {}
    for name, inventory in runs.items():
        argv, env = playbook_command(("-e", f"hpc_stateless_image_prefix={prefix}"), inventory, "playbooks/build.yml")
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            procs[name] = (subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL), log)
    results = {}
    for name, (proc, log) in procs.items():
        rc = proc.wait(timeout=TIMEOUT)
        results[name] = (rc, log.read_text(encoding="utf-8", errors="replace"))
    return results, time.monotonic() - started


def build_at_once(tmp_path: Path, prefix: str, count: int) -> tuple[dict[str, tuple[int, str]], float]:
    """Start the build stage of ``count`` projects together; ``{leaf: (rc, log)}`` and the wall time."""
    run = uuid.uuid4().hex[:8]
    leaves = [f"aptleaf{count}x{index}" for index in range(count)]
    return start_together(tmp_path, prefix, {leaf: apt_leaf_inventory(tmp_path, leaf, run) for leaf in leaves})


def leaf_images(prefix: str, leaf: str) -> list[str]:
    return [ref for ref in layer_images(prefix) if ref.startswith(f"{prefix}/{leaf}:") and not ref.endswith(":latest")]


def squeezed(text: str) -> str:
    return "".join(text.split())


def failures(results: dict[str, tuple[int, str]]) -> str:
    return "\n\n".join(f"--- {name} (rc {rc})\n{log[-3000:]}" for name, (rc, log) in results.items() if rc != 0)


def test_two_then_four_builds_of_different_projects_at_once_all_succeed(tmp_path, prefix):
    views = CACHE_ROOT / ".builds"
    for count in (2, 4):
        results, elapsed = build_at_once(tmp_path, prefix, count)
        assert not failures(results), f"concurrent builds of {count} projects failed:\n" + failures(results)
        for leaf, (_rc, log) in results.items():
            assert "Could not get lock" not in log, leaf
            assert f"layer {leaf} committed as {prefix}/{leaf}:" in log, leaf
            (image,) = leaf_images(prefix, leaf)
            with mounted_image(image) as root:
                assert (root / "usr/bin/m4").is_file(), f"{leaf}: apt did not install m4"
                assert (root / "etc/hpc-stateless-project").read_text().startswith(leaf)
        print(f"{count} concurrent leaf builds: {elapsed:.1f} s")
        # Nothing left behind: no working container, no cache bind, no view of a build.
        assert not our_containers(prefix)
        assert not [m for m in our_mounts() if "/var/cache/apt/archives" in m]
        assert not (views.is_dir() and [name for name in os.listdir(views) if "aptleaf" in name])


def test_two_runs_of_one_project_at_once_build_the_layer_once_and_the_second_reuses_it(tmp_path, prefix):
    leaf = "sameleaf"
    inventory = apt_leaf_inventory(tmp_path, leaf, uuid.uuid4().hex[:8])
    results, elapsed = start_together(tmp_path, prefix, {"first": inventory, "second": inventory})
    assert not failures(results), "two runs of one project failed:\n" + failures(results)
    logs = {name: log for name, (_rc, log) in results.items()}
    built = [name for name, log in logs.items() if f"layer {leaf} committed as {prefix}/{leaf}:" in log]
    assert len(built) == 1, f"the layer was built by {built or 'no run'}:\n" + "\n\n".join(logs.values())
    (waiter,) = set(logs) - set(built)
    log = logs[waiter]
    # The second run said, when its wait began, whom it waited for: the first run's build of the layer (Ansible
    # wraps a warning at the terminal's width, also inside a name: compared without white space).
    flat = squeezed(log)
    wait = squeezed(f"[WARNING]: waiting for the build lock of layer {leaf} ({prefix}), held by pid ")
    assert wait in flat, log[-4000:]
    said = flat[flat.index(wait):flat.index("ok:[", flat.index(wait))]
    assert squeezed(f"build of layer {leaf} (key ") in said
    assert squeezed(f"image prefix {prefix}) for ansible-playbook pid ") in said
    (image,) = leaf_images(prefix, leaf)
    assert f"layer {leaf}: {image} was committed by another build after waiting " in log
    assert "reused (cached), not built again" in log
    assert "Could not get lock" not in log and "no working container" not in log
    with mounted_image(image) as root:
        assert (root / "usr/bin/m4").is_file()
    print(f"two runs of one project at once: {elapsed:.1f} s")
    assert not our_containers(prefix)
    assert not (CACHE_ROOT / ".builds").is_dir() or not [n for n in os.listdir(CACHE_ROOT / ".builds") if leaf in n]
    # The lock went with the builds (released after the commit; its holder process ended): free at once.
    lock = Flock(buildlock.lock_path(str(CACHE_ROOT), prefix, leaf))
    lock.acquire(timeout=0)
    lock.release()
