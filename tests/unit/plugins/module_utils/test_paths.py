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
    nearest_existing,
    replacing,
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
