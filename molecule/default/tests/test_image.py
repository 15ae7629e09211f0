# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks of the whole built image that belong to no single role.

Molecule's testinfra verifier only runs when the scenario's own tests directory holds a test
file; the role checks of this scenario come in through ``additional_files_or_dirs``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

PROJECT_DIR = Path(__file__).resolve().parents[3]
INVENTORY = Path(os.environ.get("HPC_STATELESS_MOLECULE_INVENTORY") or PROJECT_DIR / "inventory")


def _inventory_value(name: str):
    value = None
    for path in sorted((INVENTORY / "group_vars" / "all").glob("*.y*ml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        value = data.get(name, value)
    return value


@pytest.fixture(scope="module")
def root_bootstrap():
    """The bootstrap spec of the root layer under image ``compute``."""
    layers = _inventory_value("hpc_stateless_layers")
    layer = _inventory_value("hpc_stateless_images")["compute"]["layer"]
    while "parent" in layers[layer]:
        layer = layers[layer]["parent"]
    return layers[layer]["bootstrap"]


def test_distribution_is_the_root_layers_release(host, root_bootstrap):
    assert host.system_info.distribution == root_bootstrap["distro"]
    assert host.system_info.codename == root_bootstrap["release"]


def test_bootstrap_packages_are_installed(host, root_bootstrap):
    missing = [name for name in root_bootstrap.get("packages", []) if not host.package(name).is_installed]
    assert not missing, f"bootstrap packages missing from the image: {missing}"


def test_the_build_left_nothing_behind(host):
    # Result files of the hpc.stateless.buildah connection, Ansible's remote temp files, staging dirs.
    left = host.run("find /tmp /var/tmp /root/.ansible/tmp -mindepth 1 2>/dev/null").stdout.split()
    assert not left, f"build leftovers in the image: {left[:10]}"
