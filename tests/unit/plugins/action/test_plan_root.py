# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan names the root layer of each layer's chain, so verify finds the bootstrapped root without a walk in Jinja."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.action.plan import ActionModule
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph

LAYERS = {
    "base": {"bootstrap": {"distro": "debian", "release": "bookworm"}, "roles": []},
    "compute": {"parent": "base", "roles": []},
    "slurm": {"parent": "compute", "roles": []},
    "el": {"bootstrap": {"distro": "rocky", "release": "9"}, "roles": []},
    "el-gpu": {"parent": "el", "roles": []},
}


def test_every_layer_names_the_root_of_its_chain():
    planned = ActionModule._plan(LayerGraph.from_spec(LAYERS, {}), {}, set(), "localhost/hpc", False, None)
    assert {name: layer["root"] for name, layer in planned["layers"].items()} == {
        "base": "base", "compute": "base", "slurm": "base", "el": "el", "el-gpu": "el"}
