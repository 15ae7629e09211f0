"""SIGKILL in the middle of a layer build and of a deploy: what survives, and what the next run cleans.

The whole process group of ansible-playbook is killed (as an OOM killer, a CI job timeout or a
lost runner would), so nothing of ours gets to run a rescue or a finally.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest

from conftest import REPO, layer_images, our_containers, our_mounts, run_site, start_site
from test_deploy_bad_input import deployed_v1, no_temp_files, setup_site

sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from bootlink_fixtures import make_pack  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.fault


def kill_group(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(condition, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def test_sigkill_during_a_layer_build_tags_nothing_and_the_next_run_cleans_up(image_prefix):
    prefix = ("-e", f"hpc_stateless_image_prefix={image_prefix}")
    built = run_site(*prefix)  # a no-op when test_build already built this session's prefix
    assert built.returncode == 0, built.stdout[-4000:]
    before = layer_images(image_prefix)
    change = ("-e", f'{{"probe_message": "killed mid-build {uuid.uuid4().hex[:8]}"}}')

    proc = start_site(*prefix, *change)
    try:
        probe_started = wait_for(lambda: any(name.startswith("hpc-stateless-probe-")
                                             for name in our_containers(image_prefix)), timeout=300, interval=0.5)
        assert probe_started, "the probe layer's working container never appeared"
        time.sleep(3)  # inside the role run: facts gathered, apt at work
        assert proc.poll() is None, "the build ended before it could be killed"
    finally:
        if proc.poll() is None:
            kill_group(proc)

    # Killed: the working container is left (nobody cleaned up), nothing new is tagged.
    assert our_containers(image_prefix), "no working container left: the kill came too late to prove anything"
    assert layer_images(image_prefix) == before, "a killed build tagged an image"

    # The next run removes the leftover, builds the layers again and leaves nothing behind.
    again = run_site(*prefix, *change)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "2 to build: probe -> probe_child" in again.stdout.replace("\n", " ")
    assert our_containers(image_prefix) == []
    assert our_mounts() == []


def test_sigkill_during_publish_keeps_serving_the_old_version(tmp_path):
    site = setup_site(tmp_path)
    deployed_v1(site)
    before_kernel = (site["root"] / "compute" / "vmlinuz").read_bytes()
    # Big enough that copying and checking it takes a while: the kill lands mid-publish.
    make_pack(site["out"], version="v2", created="2026-02-01T00:00:00Z", payload=os.urandom(2**20) * 96)
    images = site["root"] / "images" / "compute"

    proc = start_site(inventory=site["inventory"], playbook="playbooks/deploy.yml")
    try:
        publishing = wait_for(lambda: any(p.name.startswith(".publish-") for p in images.iterdir()), timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert publishing, "never saw the publish directory: the deploy was not killed mid-publish"

    # The served links and files are those of v1, and v2 is not a published version.
    assert os.readlink(site["root"] / "compute") == "images/compute/v1"
    assert (site["root"] / "compute" / "vmlinuz").read_bytes() == before_kernel
    assert not (images / "v2").exists()

    # The next deploy cleans what the killed one left, publishes v2 and serves it.
    proc = run_site(inventory=site["inventory"], playbook="playbooks/deploy.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert os.readlink(site["root"] / "compute") == "images/compute/v2"
    assert (site["root"] / "compute" / "vmlinuz").read_bytes().startswith(b"KERNEL v2")
    assert no_temp_files(site["root"]) == []
