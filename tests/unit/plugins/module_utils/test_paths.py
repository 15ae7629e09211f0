# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nearest_existing: the ancestor that pack and deploy check before they create an output tree;
write_atomic and replacing: a file or link appears under its final name only when complete."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._paths import (
    TEMP_INFIX,
    StagingName,
    UnsafeDirectory,
    move_into_place,
    nearest_existing,
    parse_staging_name,
    private_dir,
    replacing,
    runtime_path,
    staging_name,
    temp_name,
    write_atomic,
)


def test_an_existing_path_is_itself(tmp_path):
    assert nearest_existing(str(tmp_path)) == str(tmp_path)


def test_a_missing_path_gives_its_closest_existing_ancestor(tmp_path):
    (tmp_path / "a").mkdir()
    assert nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path / "a")


def test_a_file_on_the_way_is_returned_so_the_caller_can_name_it(tmp_path):
    (tmp_path / "f").write_text("x")
    assert nearest_existing(str(tmp_path / "f" / "out")) == str(tmp_path / "f")


# write_atomic / replacing: the one way a file is replaced under its final name only when complete.


def test_write_atomic_writes_text_and_bytes_with_the_mode_asked_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        write_atomic(str(tmp_path / "a.txt"), "grüße\n")
        write_atomic(str(tmp_path / "b.bin"), b"\x00\x01", mode=0o600, sync=False)
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").read_bytes() == "grüße\n".encode("utf-8")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.bin").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]  # no temp file left


def test_write_atomic_replaces_an_existing_file_with_a_new_inode(tmp_path):
    dest = tmp_path / "f"
    dest.write_text("old")
    inode = dest.stat().st_ino
    held = open(dest, encoding="utf-8")  # a reader that opened the old file keeps reading all of it
    try:
        write_atomic(str(dest), "new")
        assert held.read() == "old"
    finally:
        held.close()
    assert dest.read_text() == "new" and dest.stat().st_ino != inode


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    dest = tmp_path / "f"
    dest.write_text("old")

    def refuse(path, mode):
        raise PermissionError(1, "Operation not permitted", path)

    monkeypatch.setattr(os, "chmod", refuse)
    with pytest.raises(PermissionError):
        write_atomic(str(dest), "new")
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_replacing_renames_what_the_block_made_and_removes_it_on_error(tmp_path):
    link = tmp_path / "current"
    with replacing(str(link)) as temp:
        assert os.path.dirname(temp) == str(tmp_path)
        assert os.path.basename(temp).startswith(".current" + TEMP_INFIX)
        os.symlink("v1", temp)
    assert os.readlink(link) == "v1"
    with pytest.raises(ValueError):
        with replacing(str(link)) as temp:
            os.symlink("v2", temp)
            raise ValueError("checked and refused")
    assert os.readlink(link) == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["current"]


def test_write_atomic_into_a_missing_directory_names_it_and_makes_nothing(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        write_atomic(str(tmp_path / "missing" / "f"), "x")
    assert list(tmp_path.iterdir()) == []


# staging names: one scheme for what is on its way to a final name, or on its way out.


def test_staging_names_stand_next_to_their_final_name_and_read_back(tmp_path):
    assert staging_name(str(tmp_path / "v1"), "partial", 4242) == str(tmp_path / ".v1.partial-4242")
    assert parse_staging_name(".v1.partial-4242") == StagingName("v1", "partial", "4242")
    random = os.path.basename(staging_name(str(tmp_path / "v1"), "old"))
    assert random.startswith(".v1.old-") and len(random) == len(".v1.old-") + 8
    assert parse_staging_name(random).token == random[-8:]
    new = os.path.basename(temp_name(str(tmp_path / "01-aa-bb.ipxe")))
    assert new.startswith(".01-aa-bb.ipxe" + TEMP_INFIX) and parse_staging_name(new).final == "01-aa-bb.ipxe"


@pytest.mark.parametrize("name, expected", [
    (".x.partial-1.old-2", StagingName("x.partial-1", "old", "2")),  # the last tag counts
    (".v2.old-12-3", StagingName("v2", "old", "12-3")),
    ("v1", None),
    (".hpc-stateless.lock", None),
    (".v1.partial-", None),
    ("..partial-1", None),
])
def test_what_is_a_staging_name(name, expected):
    assert parse_staging_name(name) == expected


# move_into_place: a directory appears under its final name complete, in one rename.


def make_tree(path, text):
    path.mkdir()
    (path / "manifest.json").write_text(text)
    return path


def test_a_new_directory_is_renamed_into_place(tmp_path):
    staged = make_tree(tmp_path / ".v1.partial-1", "v1")
    move_into_place(str(staged), str(tmp_path / "v1"))
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]
    assert (tmp_path / "v1" / "manifest.json").read_text() == "v1"


def test_an_existing_directory_goes_aside_then_away(tmp_path):
    make_tree(tmp_path / "v1", "old")
    held = open(tmp_path / "v1" / "manifest.json", encoding="utf-8")  # a reader of the old tree
    try:
        staged = make_tree(tmp_path / ".v1.partial-1", "new")
        make_tree(tmp_path / ".v1.old-1", "stale leftover under the aside name")
        move_into_place(str(staged), str(tmp_path / "v1"), aside=str(tmp_path / ".v1.old-1"))
        assert held.read() == "old"
    finally:
        held.close()
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]
    assert (tmp_path / "v1" / "manifest.json").read_text() == "new"


def test_a_failed_second_rename_leaves_the_old_tree_whole_aside(tmp_path):
    """What a run killed between the two renames leaves: the old tree under its aside name, for the next run."""
    make_tree(tmp_path / "v1", "old")
    with pytest.raises(FileNotFoundError):
        move_into_place(str(tmp_path / ".v1.partial-1"), str(tmp_path / "v1"), aside=str(tmp_path / ".v1.old-1"))
    assert [p.name for p in tmp_path.iterdir()] == [".v1.old-1"]
    assert (tmp_path / ".v1.old-1" / "manifest.json").read_text() == "old"


def test_without_aside_a_complete_final_directory_is_never_replaced(tmp_path):
    make_tree(tmp_path / "v1", "old")
    staged = make_tree(tmp_path / ".publish-v1-deadbeef", "new")
    with pytest.raises(OSError):
        move_into_place(str(staged), str(tmp_path / "v1"))
    assert (tmp_path / "v1" / "manifest.json").read_text() == "old" and staged.is_dir()


# private_dir: state root acts on lives where no other user can write.


def test_private_dir_makes_a_missing_directory_mode_0700_with_its_parents(tmp_path):
    made = private_dir(str(tmp_path / "a" / "b"), "test state")
    assert made == str(tmp_path / "a" / "b")
    assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(tmp_path / "a").st_mode) == 0o700
    assert private_dir(made, "test state") == made  # again: found as is


@pytest.mark.parametrize(("make", "problem"), [
    (lambda p: (p.mkdir(), p.chmod(0o777)), "is writable by other users (mode 0777)"),
    (lambda p: (p.mkdir(), p.chmod(0o775)), "is writable by other users (mode 0775)"),
    (lambda p: (p.mkdir(), os.chown(p, 65534, 65534)), "belongs to uid 65534, not to this user"),
    (lambda p: p.symlink_to(p.parent), "is a symbolic link, not a directory of this user"),
    (lambda p: p.write_text(""), "is a file, not a directory of this user"),
])
def test_private_dir_refuses_what_another_user_made_or_can_change(tmp_path, make, problem):
    path = tmp_path / "state"
    make(path)
    with pytest.raises(UnsafeDirectory) as caught:
        private_dir(str(path), "test state")
    assert str(caught.value).startswith(f"test state: {path} {problem}")
    assert f"rm -rf {path}" in str(caught.value)


def test_private_dir_refuses_a_directory_below_one_others_can_write_unless_sticky(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match=f"{shared} is writable by other users \\(mode 0777\\) and not sticky"):
        private_dir(str(shared / "state"), "test state")
    shared.chmod(0o1777)  # as /tmp: no other user can rename or remove what we made there
    assert private_dir(str(shared / "state"), "test state") == str(shared / "state")


def test_private_dir_refuses_a_parent_that_is_another_users_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.lchown(tmp_path / "link", 65534, 65534)
    with pytest.raises(UnsafeDirectory, match=f"{tmp_path / 'link'} is a symbolic link of uid 65534"):
        private_dir(str(tmp_path / "link" / "state"), "test state")


def test_runtime_path_is_roots_own_directory_or_the_users(monkeypatch):
    from ansible_collections.hpc.stateless.plugins.module_utils import _paths

    monkeypatch.setattr(_paths.os, "geteuid", lambda: 0)
    monkeypatch.setattr(_paths._process, "in_user_namespace", lambda: False)
    assert runtime_path("nspawn") == "/run/hpc-stateless/nspawn"
    monkeypatch.setattr(_paths.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert runtime_path("nspawn") == "/run/user/1000/hpc-stateless/nspawn"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setattr(_paths.tempfile, "gettempdir", lambda: "/scratch")
    assert runtime_path("nspawn") == "/scratch/hpc-stateless-1000/nspawn"
