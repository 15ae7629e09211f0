"""A deploy that would serve an older build than the served one says so and asks: deploy.yml end to end.

v1 and v2 of image ``faults`` are packed by the real module, v2 a second after v1 (the build times the
manifests compare are whole seconds; the session's ``small_packs`` may share one), and v2 is served. Then the pack output
loses v2's pack, as a pack output that was cleaned or restored from an older copy does: a deploy of "the newest
pack" now finds v1, and a deploy by version names v1 itself. Both are refused naming both versions and their
build times, the boot tree unchanged; asked for (``hpc_stateless_deploy_downgrade: true`` with the version), the
switch back goes through.
"""

from __future__ import annotations

import shutil
import time

from bootlink_fixtures import tree_snapshot
from faults_site import FAULTS_IMAGE, run_site
from faults_support import (
    DEPLOY_PLAYBOOK, boot_tree_problems, copy_version, deploy, deploy_site, failure_of, pack_dir, served)


def test_an_older_pack_is_served_only_when_the_downgrade_is_asked_for(tmp_path):
    packs = tmp_path / "packs"
    for version in ("v1", "v2"):
        rc, result = pack_dir(packs, version, tmp_path / "trees")
        assert rc == 0, result.get("msg")
        time.sleep(1.1)
    site = deploy_site(tmp_path / "site")
    for version in ("v1", "v2"):
        copy_version(packs, version, site["out"])
    first = deploy(site, "v2")
    assert first.returncode == 0, first.stdout[-3000:]
    shutil.rmtree(site["out"] / FAULTS_IMAGE / "v2")  # the newest pack is gone from the pack output
    before = tree_snapshot(site["root"])

    newest = run_site(inventory=site["inventory"], playbook=DEPLOY_PLAYBOOK)
    by_version = deploy(site, "v1")
    for proc, picked in ((newest, "'v1' (the newest pack in"), (by_version, "'v1' was built")):
        assert proc.returncode != 0, "a downgrade was served without a word"
        failure = " ".join(failure_of(proc.stdout).split())
        assert f"image '{FAULTS_IMAGE}': {picked}" in failure, failure[:3000]
        assert "before the served 'v2'" in failure and "serving it is a downgrade" in failure, failure[:3000]
        assert "hpc_stateless_deploy_downgrade: true with hpc_stateless_deploy_version: v1" in failure, failure[:3000]
        assert tree_snapshot(site["root"]) == before and served(site["root"]) == "v2"

    asked = deploy(site, "v1", "-e", "hpc_stateless_deploy_downgrade=true")
    assert asked.returncode == 0, asked.stdout[-3000:]
    assert served(site["root"]) == "v1" and boot_tree_problems(site["root"]) == []
