# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rootless preflight on /etc/subuid-style files and /proc/<pid>/uid_map-style maps written here.

The effective uid is replaced (monkeypatch) where a case needs a user other than the one running
the tests; the real unprivileged build is tests/integration/test_rootless.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import buildah as buildah_mod
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah


def id_files(tmp_path: Path, subuid: str, subgid: str) -> dict[str, str]:
    (tmp_path / "subuid").write_text(subuid)
    (tmp_path / "subgid").write_text(subgid)
    return {"uid": str(tmp_path / "subuid"), "gid": str(tmp_path / "subgid")}


def proc_dir(tmp_path: Path, uid_map: str, gid_map: str | None = None) -> str:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "uid_map").write_text(uid_map)
    (proc / "gid_map").write_text(uid_map if gid_map is None else gid_map)
    return str(proc)


@pytest.fixture
def builder(monkeypatch):
    """The preflight runs for user 'builder' (uid 1500), not as root."""
    monkeypatch.setattr(rootless.os, "geteuid", lambda: 1500)
    monkeypatch.setattr(rootless, "outer_user", lambda: ("builder", 1500))


def test_enough_ids_by_name_or_by_uid_pass(tmp_path):
    files = id_files(tmp_path, "other:100000:65536\nbuilder:165536:65536\n", "1500:165536:65536\n")
    assert rootless.subordinate_problems("builder", 1500, files) == []


def test_missing_and_too_few_ids_name_the_user_file_and_a_free_line(tmp_path):
    files = id_files(tmp_path, "other:100000:65536\n", "builder:300000:1000\n")
    problems = rootless.subordinate_problems("builder", 1500, files)
    assert problems == [
        f"user builder has no subordinate uids in {files['uid']} (a rootless build needs 65535); "
        f"as root, add the line 'builder:165536:65536' to {files['uid']}",
        f"user builder has only 1000 subordinate gids in {files['gid']} (a rootless build needs 65535); "
        f"as root, add the line 'builder:100000:65536' to {files['gid']}",
    ]


def test_a_missing_file_is_no_ids(tmp_path):
    files = {"uid": str(tmp_path / "absent"), "gid": str(tmp_path / "absent")}
    assert len(rootless.subordinate_problems("builder", 1500, files)) == 2


def test_preflight_outside_a_namespace_reads_the_files(tmp_path, builder):
    files = id_files(tmp_path, "", "builder:100000:65536\n")
    proc = proc_dir(tmp_path, "0 0 4294967295\n")
    with pytest.raises(rootless.RootlessError) as raised:
        rootless.preflight(files, proc)
    assert str(raised.value).startswith("cannot build as an unprivileged user: user builder has no subordinate uids")
    assert "subgid" not in str(raised.value)


def test_preflight_inside_a_namespace_counts_its_map(tmp_path, builder, monkeypatch):
    monkeypatch.setattr(rootless.os, "geteuid", lambda: 0)
    files = id_files(tmp_path, "builder:100000:65536\n", "builder:100000:65536\n")
    full = proc_dir(tmp_path, "0 1500 1\n1 100000 65536\n")
    rootless.preflight(files, full)
    single = tmp_path / "single"
    single.mkdir()
    with pytest.raises(rootless.RootlessError, match="maps only 1 uids and 1 gids"):
        rootless.preflight(files, proc_dir(single, "0 1500 1\n"))


def test_root_outside_a_namespace_needs_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(rootless.os, "geteuid", lambda: 0)
    rootless.preflight({"uid": str(tmp_path / "absent"), "gid": str(tmp_path / "absent")},
                       proc_dir(tmp_path, "0 0 4294967295\n"))


def test_unshare_command():
    assert rootless.unshare_argv(["ansible-playbook", "site.yml"]) == ["buildah", "unshare", "--", "ansible-playbook",
                                                                       "site.yml"]
    assert rootless.unshare_hint(["ansible-playbook", "a b.yml"]) == "buildah unshare -- ansible-playbook 'a b.yml'"


def test_package_caches_move_below_the_users_cache_directory(monkeypatch):
    monkeypatch.setattr(rootless, "is_rootless", lambda proc="/proc/self": True)
    monkeypatch.setenv("HOME", "/home/builder")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert rootless.host_cache_path("/var/cache/hpc-stateless/apt") == "/home/builder/.cache/hpc-stateless/apt"
    assert rootless.host_cache_path("/var/cache/hpc-stateless") == "/home/builder/.cache/hpc-stateless"
    assert rootless.host_cache_path("/var/cache/hpc-stateless-other") == "/var/cache/hpc-stateless-other"
    monkeypatch.setenv("XDG_CACHE_HOME", "/scratch/cache")
    assert rootless.host_cache_path("/var/cache/hpc-stateless/dnf") == "/scratch/cache/hpc-stateless/dnf"
    monkeypatch.setattr(rootless, "is_rootless", lambda proc="/proc/self": False)
    assert rootless.host_cache_path("/var/cache/hpc-stateless/apt") == "/var/cache/hpc-stateless/apt"


def test_buildah_mount_outside_unshare_says_what_to_run(monkeypatch):
    monkeypatch.setattr(buildah_mod.os, "geteuid", lambda: 1500)
    with pytest.raises(rootless.RootlessError) as raised:
        Buildah().mount("hpc-stateless-base-abc123-0123456789ab")
    message = str(raised.value)
    assert "buildah unshare -- ansible-playbook site.yml" in message
    assert "hpc.stateless.buildah_isolation" in message
