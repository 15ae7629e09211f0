# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lookup hpc.stateless.project_dir: the directory every default output of the stages is under."""

from __future__ import annotations

DOCUMENTATION = r"""
name: project_dir
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
short_description: The project directory the stages write their default outputs under
description:
  - Returns one path, the project directory. Pack writes to C(<project>/build/images), deploy to
    C(<project>/build/tftpboot), the change planner to C(<project>/build/plan); the plan searches
    C(<project>/roles) for a layer's roles and names the version after the project's git repository.
  - The rule, in order - O(hpc_stateless_project_dir) when set; the directory of the first playbook
    file named on the C(ansible-playbook) command line (a site's own C(site.yml), also when it imports
    C(hpc.stateless.site) or a stage by FQCN) unless that file lies inside an installed collection;
    C(playbook_dir) unless it lies inside an installed collection; the current directory.
  - A playbook directory named C(playbooks) stands for its parent, unless it holds C(.git) or
    C(ansible.cfg) (a site repository cloned as C(playbooks) is its own project).
  - The path is never inside the installed collection unless O(hpc_stateless_project_dir) says so.
options:
  hpc_stateless_project_dir:
    description: The project directory, instead of the rule; a relative path is taken from the current directory.
    type: path
    vars:
      - name: hpc_stateless_project_dir
"""

EXAMPLES = r"""
- name: Show where the stages write
  ansible.builtin.debug:
    msg: "packs go to {{ lookup('hpc.stateless.project_dir') }}/build/images"
"""

RETURN = r"""
_raw:
  description: The project directory, an absolute path (one element).
  type: list
  elements: path
"""

import os

from ansible import context
from ansible.plugins.lookup import LookupBase

from ansible_collections.hpc.stateless.plugins.module_utils._project import project_dir


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        self.set_options(var_options=variables, direct=kwargs)
        override = self.get_option("hpc_stateless_project_dir")
        return [project_dir(override, context.CLIARGS.get("args") or (), variables.get("playbook_dir"), os.getcwd())]
