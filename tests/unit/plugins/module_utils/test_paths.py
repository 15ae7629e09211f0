# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nearest_existing: the ancestor that pack and deploy check before they create an output tree."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._paths import nearest_existing


def test_an_existing_path_is_itself(tmp_path):
    assert nearest_existing(str(tmp_path)) == str(tmp_path)


def test_a_missing_path_gives_its_closest_existing_ancestor(tmp_path):
    (tmp_path / "a").mkdir()
    assert nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path / "a")


def test_a_file_on_the_way_is_returned_so_the_caller_can_name_it(tmp_path):
    (tmp_path / "f").write_text("x")
    assert nearest_existing(str(tmp_path / "f" / "out")) == str(tmp_path / "f")
