"""One flipped byte in a pack output: deploy refuses by checksum, naming the file, and the served
links stay as they were (same size, so only the checksum can tell)."""

from __future__ import annotations

import pytest

from bootlink_fixtures import tree_snapshot
from faults_site import FAULTS_IMAGE
from faults_support import boot_tree_problems, copy_version, deploy, deploy_site, failure_of, served


@pytest.mark.parametrize("victim", [f"{FAULTS_IMAGE}.cpio.zst", "vmlinuz"])
def test_flipped_byte_is_refused_by_checksum(victim, small_packs, tmp_path):
    site = deploy_site(tmp_path)
    copy_version(small_packs, "v1", site["out"])
    v2 = copy_version(small_packs, "v2", site["out"])
    assert deploy(site, "v1").returncode == 0
    before = tree_snapshot(site["root"])

    data = bytearray((v2 / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (v2 / victim).write_bytes(bytes(data))

    for check_mode in ((), ("--check",)):
        proc = deploy(site, "v2", *check_mode)
        assert proc.returncode != 0
        failure = failure_of(proc.stdout)
        assert f"checksum mismatch publishing {FAULTS_IMAGE} v2 from {v2}: {victim} (SHA256SUMS " in failure, \
            failure[:2000]
        assert tree_snapshot(site["root"]) == before, "a refused deploy changed the boot tree"
    assert served(site["root"]) == "v1" and boot_tree_problems(site["root"]) == []
