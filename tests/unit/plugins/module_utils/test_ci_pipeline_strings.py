# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The pipeline writer takes settings as Ansible hands them over: strings of an inventory or of role defaults
are str subclasses (AnsibleUnicode), which a plain SafeDumper cannot represent."""

from __future__ import annotations

import yaml
from ansible.parsing.yaml.objects import AnsibleUnicode

from ansible_collections.hpc.stateless.plugins.module_utils._ci.gitlab import gitlab_pipeline, pipeline_yaml
from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import REBUILD, ChangePlan, LayerDecision


def test_settings_from_an_inventory_are_written_as_plain_strings():
    plan = ChangePlan(base="HEAD~1", variable_changes="values", files=[],
                      layers={"base": LayerDecision("base", action=REBUILD, images=["base"])},
                      images={"base": {"layer": "base"}})
    pipeline = gitlab_pipeline(plan, registry=AnsibleUnicode("r.example.org/hpc"), image_prefix=AnsibleUnicode(""),
                               diff_boot_root=AnsibleUnicode(""))
    text = pipeline_yaml(pipeline, plan)
    assert yaml.safe_load(text)["variables"]["HPC_STATELESS_REGISTRY"] == "r.example.org/hpc"
