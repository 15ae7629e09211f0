"""Builds of different projects on one host, started at once, all succeed (issue 29).

Each project is a site inventory of its own: the default base layer and a leaf layer of its own whose
role installs a small package with apt (tests/roles/site_apt_leaf, no retry and no lock timeout). They
share what two projects on one host share: the host's package caches and containers-storage, and here
the image prefix too. Before, every build bound the same ``/var/cache/apt/archives`` and the second apt
failed on its lock; now each build binds a view of its own (plugins/module_utils/_build/caches.py) and
what one downloads reaches the pool at its commit.

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

from conftest import (REPO, apt_leaf_inventory, layer_images, our_containers, our_mounts, playbook_command,
                      remove_prefix_images, tag_default_layers)
from pack_support import mounted_image

CACHE_ROOT = Path("/var/cache/hpc-stateless")
TIMEOUT = 600


@pytest.fixture(scope="module", name="prefix")
def fixture_prefix():
    prefix = f"localhost/hpc-stateless-concurrent-{uuid.uuid4().hex[:6]}"
    tag_default_layers(prefix)
    yield prefix
    remove_prefix_images(prefix)


def build_at_once(tmp_path: Path, prefix: str, count: int) -> tuple[dict[str, tuple[int, str]], float]:
    """Start the build stage of ``count`` projects together; ``{leaf: (rc, log)}`` and the wall time."""
    run = uuid.uuid4().hex[:8]
    started, procs = time.monotonic(), {}
    for index in range(count):
        leaf = f"aptleaf{count}x{index}"
        argv, env = playbook_command(("-e", f"hpc_stateless_image_prefix={prefix}"),
                                     apt_leaf_inventory(tmp_path, leaf, run), "playbooks/build.yml")
        log = tmp_path / f"{leaf}.log"
        with open(log, "wb") as out:
            procs[leaf] = (subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL), log)
    results = {}
    for leaf, (proc, log) in procs.items():
        rc = proc.wait(timeout=TIMEOUT)
        results[leaf] = (rc, log.read_text(encoding="utf-8", errors="replace"))
    return results, time.monotonic() - started


def test_two_then_four_builds_of_different_projects_at_once_all_succeed(tmp_path, prefix):
    views = CACHE_ROOT / ".builds"
    for count in (2, 4):
        results, elapsed = build_at_once(tmp_path, prefix, count)
        failed = {leaf: log[-3000:] for leaf, (rc, log) in results.items() if rc != 0}
        assert not failed, f"{len(failed)} of {count} concurrent builds failed:\n" + "\n\n".join(
            f"--- {leaf}\n{log}" for leaf, log in failed.items())
        for leaf, (_rc, log) in results.items():
            assert "Could not get lock" not in log, leaf
            assert f"layer {leaf} committed as {prefix}/{leaf}:" in log, leaf
            (image,) = [ref for ref in layer_images(prefix) if ref.startswith(f"{prefix}/{leaf}:") and not ref.endswith(":latest")]
            with mounted_image(image) as root:
                assert (root / "usr/bin/m4").is_file(), f"{leaf}: apt did not install m4"
                assert (root / "etc/hpc-stateless-project").read_text().startswith(leaf)
        print(f"{count} concurrent leaf builds: {elapsed:.1f} s")
        # Nothing left behind: no working container, no cache bind, no view of a build.
        assert not our_containers(prefix)
        assert not [m for m in our_mounts() if "/var/cache/apt/archives" in m]
        assert not (views.is_dir() and [name for name in os.listdir(views) if "aptleaf" in name])
