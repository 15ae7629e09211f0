# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.layer: the module's function in this process when the build host is the
controller, the module on the build host otherwise (plugin_utils/controller.py; the options and the run are
module_utils/_build/layer_task.py's)."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._build import layer_task
from ansible_collections.hpc.stateless.plugins.plugin_utils.controller import ModuleInProcess


class ActionModule(ModuleInProcess):
    MODULE = "hpc.stateless.layer"
    TASK = layer_task
