# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hpc.stateless.verify_boot_files: one verify boot's files on the build host (_verify/boot_files.py).

Runs in the task's worker process, on the controller: systemd-nspawn runs there and binds the files in. One action
instead of a directory (ansible.builtin.tempfile), a command per test secret and a copy of the Lynis profile:
three module runs would cost 1.4-1.7 s before every verify boot on a 2-core build host.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.module_utils._verify import boot_files

_ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["present", "absent"], default="present"),
    secrets=dict(type="list", elements="str", default=[]),
    files=dict(type="list", elements="dict", default=[]),
    path=dict(type="str"),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(
            _ARGUMENT_SPEC, required_if=[("state", "absent", ["path"])])
        try:
            if args["state"] == "absent":
                removed = boot_files.remove(args["path"])
                return {**result, "changed": removed, "path": args["path"],
                        "msg": f"removed {args['path']}" if removed else f"{args['path']} was gone already"}
            made = boot_files.make(args["secrets"], args["files"])
        except (boot_files.BootFilesError, OSError) as exc:
            return {**result, "failed": True, "msg": str(exc)}
        return {**result, "changed": True, "path": made.path, "binds": made.binds,
                "msg": f"{len(args['secrets'])} test secret(s) and {len(args['files'])} file(s) in {made.path}"}
