# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hpc.stateless.verify_record: write or read the verification record of a layer image (_verify/record.py).

Runs in the task's worker process, on the controller: the records live in the project's build directory and
buildah (whose image ID the record names) runs there, the build host. A module run per
call would cost about 0.5 s on a 2-core build host, twice on the critical path of every verify: the query before
the boot and the record after Lynis.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import (
    Check,
    Record,
    RecordError,
    judge,
    junit_path,
    record_path,
    write_record,
)

_ARGUMENT_SPEC = dict(
    dir=dict(type="path", required=True),
    layer=dict(type="str", required=True),
    key=dict(type="str", required=True, no_log=False),
    image=dict(type="str", required=True),
    state=dict(type="str", choices=["present", "query"], default="query"),
    checks=dict(type="list", elements="dict", default=[]),
    settings=dict(type="dict"),
)


def record_result(args: dict[str, Any], check_mode: bool, buildah: Buildah) -> dict[str, Any]:
    """The task's result for validated ``args`` (the options of the module's documentation)."""
    try:
        path = record_path(args["dir"], args["layer"], args["key"])
    except RecordError as exc:
        return {"failed": True, "msg": str(exc)}
    try:
        image_id = buildah.image_id(args["image"])
    except (BuildahError, ProcessError) as exc:
        return {"failed": True, "msg": f"image {args['image']} of layer {args['layer']} is not in local "
                                       f"containers-storage ({exc}); build it first (ansible-playbook site.yml)"}
    if args["state"] == "present":
        try:
            checks = tuple(Check.from_dict(f"checks[{i}]", c) for i, c in enumerate(args["checks"]))
            record = Record(args["layer"], args["key"], args["image"], image_id, checks, settings=args["settings"] or {})
            if not check_mode:
                write_record(args["dir"], record)
        except RecordError as exc:
            return {"failed": True, "msg": str(exc)}
        outcome = "passed" if record.passed else "failed: " + ", ".join(c.name for c in record.failed)
        return {"changed": True, "path": path, "junit": junit_path(path), "passed": record.passed,
                "status": "passed" if record.passed else "failed", "message": f"recorded {path}: {outcome}",
                "record": record.to_dict()}
    verdict = judge(args["dir"], args["layer"], args["key"], image_id, args["settings"])
    return {"changed": False, "path": path, "junit": junit_path(path), "passed": verdict.passed,
            "status": verdict.status, "message": verdict.message,
            "record": verdict.record.to_dict() if verdict.record else {}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(_ARGUMENT_SPEC)
        return {**result, **record_result(args, bool(self._task.check_mode), Buildah())}
