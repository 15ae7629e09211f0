# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.layer_lock: one build of a layer at a time (_build/buildlock.py).

Runs in the task's worker process, on the controller (the build host: buildah runs there), so that a
build that must wait says so on the playbook's output when the wait begins, and so that the lock is
handed to a holder process that lives as long as the ``ansible-playbook`` (the worker's parent).
"""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.hpc.stateless.plugins.module_utils._build import buildlock
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import views_cache_root
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import image_ref
from ansible_collections.hpc.stateless.plugins.module_utils._fs import release_holder
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError, playbook_pid

display = Display()

_ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    key=dict(type="str", required=True, no_log=False),
    image_prefix=dict(type="str", required=True),
    state=dict(type="str", default="held", choices=["held", "released"]),
    timeout=dict(type="float", default=buildlock.DEFAULT_TIMEOUT),
    holder_pid=dict(type="int", default=0),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(_ARGUMENT_SPEC)
        path = buildlock.lock_path(views_cache_root(), args["image_prefix"], args["name"])
        result.update(changed=False, lock=path)
        if self._task.check_mode:
            return {**result, "cached": False, "holder_pid": 0, "msg": "check mode: no lock taken"}
        try:
            if args["state"] == "released":
                return {**result, **self._release(path, args)}
            return {**result, **self._hold(args)}
        except (buildlock.BuildLockBusy, ProcessError, OSError, RuntimeError) as exc:
            return {**result, "failed": True, "msg": str(exc)}

    @staticmethod
    def _release(path: str, args: dict[str, Any]) -> dict[str, Any]:
        pid = args["holder_pid"]
        ended = bool(pid) and release_holder(path, pid)
        return {"changed": ended, "msg": f"build lock of layer {args['name']} released" if ended else
                f"build lock of layer {args['name']}: not held by this run (nothing to release)"}

    @staticmethod
    def _hold(args: dict[str, Any]) -> dict[str, Any]:
        name, key, prefix = args["name"], args["key"], args["image_prefix"]
        owner = playbook_pid()
        lock, taken = buildlock.take(views_cache_root(), prefix, name, key, owner, args["timeout"],
                                     on_wait=display.warning, clock=time.monotonic)
        image = image_ref(prefix, name, key)
        try:
            # Another build of this key may have committed it while this one waited (or since the plan).
            cached = Buildah().image_exists(image)
            holder = 0 if cached else lock.hand_over(owner)
        finally:
            lock.release()
        waited = f" after waiting {taken.waited:.1f} s for {taken.waited_for}" if taken.waited_for else ""
        msg = (f"layer {name}: {image} was committed by another build{waited}; reused (cached), not built again"
               if cached else f"build lock of layer {name} taken{waited}")
        return {"changed": not cached, "cached": cached, "image": image, "holder_pid": holder,
                "waited_for": taken.waited_for, "waited": round(taken.waited, 3), "msg": msg}
