# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.bootconfig: the module's function in this process when the boot host is the
controller, the module on the boot host otherwise (plugin_utils/controller.py; the options and the run are
module_utils/_deploy/bootconfig_task.py's)."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._deploy import bootconfig_task
from ansible_collections.hpc.stateless.plugins.plugin_utils.controller import ModuleInProcess


class ActionModule(ModuleInProcess):
    MODULE = "hpc.stateless.bootconfig"
    TASK = bootconfig_task
