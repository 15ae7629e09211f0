"""The release flow diffs and deploys the version it packed, whatever the file times say.

docs/release.md gives pack.yml, diff.yml and deploy.yml the same ``release.yml`` with
``hpc_stateless_pack_version``. A pack directory copied with ``cp -r`` (or rsync without -t) gets new
mtimes in copy order, and two packs of one layer image have the same manifest ``created`` time
(SOURCE_DATE_EPOCH), so "the newest pack" is then whichever was copied last. Here v2 is the release
and v1 looks newer on disk: diff.yml must compare v2 and deploy.yml must serve v2, not silently v1.
"""

from __future__ import annotations

import os
import time

from faults_site import FAULTS_IMAGE, run_site
from faults_support import copy_version, deploy_site, served

DIFF_PLAYBOOK = "playbooks/diff.yml"
DEPLOY_PLAYBOOK = "playbooks/deploy.yml"


def test_release_version_is_diffed_and_deployed_when_an_older_pack_looks_newer(small_packs, tmp_path):
    site = deploy_site(tmp_path)
    copy_version(small_packs, "v2", site["out"])
    v1 = copy_version(small_packs, "v1", site["out"])
    first = run_site("-e", "hpc_stateless_deploy_version=v1", inventory=site["inventory"], playbook=DEPLOY_PLAYBOOK)
    assert first.returncode == 0, first.stdout[-3000:]
    assert served(site["root"]) == "v1"
    later = time.time() + 60  # what cp -r does: the copy made last is the newest on disk
    for path in (v1, *v1.iterdir()):
        os.utime(path, (later, later))

    release = ("-e", "hpc_stateless_pack_version=v2")
    diffed = run_site(*release, "-e", f"hpc_stateless_diff_dir={tmp_path / 'diff'}", inventory=site["inventory"],
                      playbook=DIFF_PLAYBOOK)
    assert diffed.returncode == 0, diffed.stdout[-3000:]
    assert f"new: {FAULTS_IMAGE} v2" in diffed.stdout, diffed.stdout[-3000:]

    deployed = run_site(*release, inventory=site["inventory"], playbook=DEPLOY_PLAYBOOK)
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    assert served(site["root"]) == "v2"
