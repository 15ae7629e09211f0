"""Two deploys into one boot root at once.

The first deploy is caught (and frozen with SIGSTOP) while it copies a large version into the
boot tree, so it holds the boot root's lock for as long as the test needs; the second one
starts then. With ``hpc_stateless_boot_lock_timeout: 0`` the second must fail at once, naming
the holder; with a timeout it must wait and go through after the first. Either way the tree
ends consistent: every link points at a complete version and every version verifies with
``sha256sum -c``.
"""

from __future__ import annotations

import os
import re
import signal
import time

from faults_site import FAULTS_IMAGE, start_playbook
from faults_support import (
    DEPLOY_PLAYBOOK,
    boot_tree_problems,
    copy_version,
    deploy,
    deploy_site,
    failure_of,
    files_open_for_writing,
    group_processes,
    kill_group,
    served,
    stop_group_when,
)


def prepared_site(tmp_path, small_packs, layer_pack, lock_timeout: float) -> dict:
    site = deploy_site(tmp_path, lock_timeout=lock_timeout)
    for version in ("v1", "v2"):
        copy_version(small_packs, version, site["out"])
    copy_version(layer_pack, "big", site["out"])
    first = deploy(site, "v1")
    assert first.returncode == 0, first.stdout[-4000:]
    return site


def start_deploy(site: dict, version: str, log) -> object:
    # The versions go in either order (the lock decides which is served last; v2 was built before "big"): the
    # downgrade refusal is asked off, this file tests the lock.
    return start_playbook("-e", f"hpc_stateless_deploy_version={version}", "-e", "hpc_stateless_deploy_downgrade=true",
                          inventory=site["inventory"], playbook=DEPLOY_PLAYBOOK, log=log)


def paused_while_copying(site: dict, proc) -> dict[int, list[str]]:
    """Freeze ``proc``'s deploy while it copies into the boot tree (so it holds the lock); its processes."""
    images_dir = site["root"] / "images" / FAULTS_IMAGE
    stop_group_when(proc, lambda pgid: [p for p in files_open_for_writing(pgid, images_dir) if "/.publish-" in p],
                    "the first deploy copying into .publish-*", interval=0.002)
    return group_processes(proc.pid)


def test_second_deploy_fails_cleanly_while_the_first_holds_the_lock(small_packs, layer_pack, tmp_path):
    site = prepared_site(tmp_path, small_packs, layer_pack, lock_timeout=0)
    first = start_deploy(site, "big", tmp_path / "first.log")
    try:
        first_processes = paused_while_copying(site, first)
        second = deploy(site, "v2")
        os.killpg(first.pid, signal.SIGCONT)
        first_rc = first.wait(timeout=600)
    finally:
        if first.poll() is None:
            kill_group(first)

    assert second.returncode != 0
    failure = failure_of(second.stdout)
    holder = re.search(rf"boot root {re.escape(str(site['root']))} is locked by another deploy "
                       rf"\(pid (\d+) bootlink present {FAULTS_IMAGE} since [0-9T:-]+Z\)", failure)
    assert holder, failure[:2000]
    assert int(holder.group(1)) in first_processes, "the error names a process that is not the first deploy"
    assert first_rc == 0, (tmp_path / "first.log").read_text()[-4000:]
    assert served(site["root"]) == "big"
    assert os.readlink(site["root"] / "images" / FAULTS_IMAGE / "previous") == "v1"
    assert not (site["root"] / "images" / FAULTS_IMAGE / "v2").exists(), "the refused deploy published"
    assert boot_tree_problems(site["root"]) == []


def test_second_deploy_waits_for_the_first_and_both_go_through(small_packs, layer_pack, tmp_path):
    site = prepared_site(tmp_path, small_packs, layer_pack, lock_timeout=300)
    images_dir = site["root"] / "images" / FAULTS_IMAGE
    first = start_deploy(site, "big", tmp_path / "first.log")
    second = None
    try:
        first_processes = paused_while_copying(site, first)
        second = start_deploy(site, "v2", tmp_path / "second.log")
        # The second deploy's bootlink reaches the lock the frozen first one holds, and says whom it waits for.
        deadline = time.monotonic() + 120
        waiting = None
        while waiting is None:
            assert second.poll() is None, (tmp_path / "second.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the second deploy never said it waits for the boot tree"
            time.sleep(0.05)
            # Ansible wraps a warning at 79 columns, at spaces and after hyphens: compared without whitespace.
            waiting = re.search(rf"waitingfortheboottree{re.escape(str(site['root']))},heldbypid(\d+)"
                                rf"bootlinkpresent{FAULTS_IMAGE}since",
                                re.sub(r"\s+", "", (tmp_path / "second.log").read_text()))
        assert int(waiting.group(1)) in first_processes, "the wait names a process that is not the first deploy"
        time.sleep(2)
        assert second.poll() is None and not (images_dir / "v2").exists(), "the second deploy did not wait"
        os.killpg(first.pid, signal.SIGCONT)
        first_rc, second_rc = first.wait(timeout=600), second.wait(timeout=600)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                kill_group(proc)

    assert first_rc == 0, (tmp_path / "first.log").read_text()[-4000:]
    assert second_rc == 0, (tmp_path / "second.log").read_text()[-4000:]
    assert sorted(p.name for p in images_dir.iterdir()) == ["big", "previous", "v1", "v2"]
    assert served(site["root"]) in ("big", "v2")
    assert boot_tree_problems(site["root"]) == []
