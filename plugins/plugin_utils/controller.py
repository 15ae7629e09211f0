# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""When an action plugin may run its module's function in the controller's process instead of a module process.

The collection's playbooks run the build host's steps (buildah, the layer listing) on the controller: the build host
is the controller. A module process then costs its start-up (about 0.4 s on the 2-core build host) for the same
answer. It is the same answer only when the module would run here, as this user, with this environment: a local
connection, no become, and no task environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

LOCAL_TRANSPORTS = ("local", "ansible.builtin.local")


def runs_in_this_process(action: Any) -> bool:
    """Whether the task of ``action`` (an ActionBase) would run its module on the controller, as this user and with
    this process's environment."""
    # A play that sets no environment hands its tasks [{}]: that sets nothing, any other entry may.
    no_environment = all(isinstance(entry, Mapping) and not entry for entry in action._task.environment or [])
    return (action._connection.transport in LOCAL_TRANSPORTS and not action._play_context.become
            and no_environment)


class ModuleInProcess(ActionBase):
    """The action of a module whose function may run in this process: that function, validated by the module's own
    argument spec, when :func:`runs_in_this_process`; the module (on the task's host) otherwise.

    ``TASK`` is the module_utils module that holds, once, what both ways run: ``ARGUMENT_SPEC``, ``VALIDATION`` (the
    other keywords of the argument spec: required_if, required_by, ...) and ``run(params, check_mode, diff, on_wait)``,
    which returns the task's result (``failed`` and ``msg`` when it failed). In this process a run that must wait
    for a lock says so on the playbook's output when the wait begins (``on_wait``), which a module cannot.
    """

    MODULE = ""
    TASK: Any = None
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if not runs_in_this_process(self):
            return {**result, **self._execute_module(module_name=self.MODULE, module_args=self._task.args,
                                                     task_vars=task_vars)}
        _validation, args = self.validate_argument_spec(self.TASK.ARGUMENT_SPEC, **self.TASK.VALIDATION)
        return {**result, **self.TASK.run(args, bool(self._task.check_mode), bool(self._task.diff),
                                          on_wait=display.warning)}
