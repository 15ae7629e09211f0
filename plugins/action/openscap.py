# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hpc.stateless.openscap: one OpenSCAP scan of a verify boot, on the controller (_verify/openscap.py).

Runs in the task's worker process on the controller, where systemd-nspawn runs: ``prepare`` (before the boot) checks
the settings and makes the scan's private directory, returning the binds and the command the boot runs; ``bundle`` does
the same for live nodes (playbooks/compliance.yml), with the archive of the scanner each node unpacks in place of the
binds; ``judge`` (after the scan ran) reads the results, judges them and keeps the outputs beside the verify record,
or for a live node adds its checks to the node's compliance report; ``absent`` removes the private directory.
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.module_utils._verify import drift, openscap

# ansible_collections/hpc/stateless/plugins/action/openscap.py -> ansible_collections/hpc/stateless
_COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
FILES = os.path.join(_COLLECTION_ROOT, "roles", "hpc_stateless", "files")
#: The collection's tailoring, platform dictionary and waivers.
TAILORING = os.path.join(FILES, "openscap", "tailoring.xml")
PLATFORM_DIR = os.path.join(FILES, "openscap")
WAIVERS = os.path.join(FILES, "openscap-waivers.yml")
#: Read after the site's waivers when a live node is judged (O(report) given).
LIVE_WAIVERS = os.path.join(FILES, "openscap-live-waivers.yml")

_ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["prepare", "bundle", "judge", "absent"], default="prepare"),
    profile=dict(type="str", default="anssi_np_nt28_average"),
    content=dict(type="path"),
    tailoring=dict(type="path"),
    waivers=dict(type="list", elements="path", default=[]),
    minimum=dict(type="int", default=80),
    path=dict(type="path"),
    os_release=dict(type="str", default=""),
    record_dir=dict(type="path"),
    layer=dict(type="str", default=""),
    key=dict(type="str", default=""),
    keep_dir=dict(type="path"),
    report=dict(type="dict"),
    error=dict(type="raw"),
    failed_task=dict(type="str", default=""),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(
            _ARGUMENT_SPEC, required_if=[("state", "absent", ["path"]), ("state", "judge", ["path"])])
        tailoring = args["tailoring"] or TAILORING
        try:
            if args["state"] == "absent":
                removed = openscap.remove(args["path"])
                return {**result, "changed": removed, "path": args["path"],
                        "msg": f"removed {args['path']}" if removed else f"{args['path']} was gone already"}
            live = [LIVE_WAIVERS] if args["report"] is not None else []
            waivers = openscap.load_waivers([WAIVERS, *args["waivers"], *live])
            if args["state"] in ("prepare", "bundle"):
                bundle = args["state"] == "bundle"
                scan = openscap.prepare(args["profile"], tailoring, PLATFORM_DIR, args["content"], live=bundle)
                extra = {"archive": os.path.join(scan.path, openscap.BUNDLE_NAME),
                         "mount_point": openscap.MOUNT_POINT} if bundle else {}
                return {**result, "changed": True, **scan.as_dict(), **extra,
                        "msg": f"scan of {scan.profile} ({'tailored' if scan.tailored else 'not tailored'}) "
                               f"with {scan.content} prepared in {scan.path}"}
            if args["error"]:
                return {**result, "changed": False, **self._error(args)}
            judged = self._judge(args, tailoring, waivers)
            if args["report"] is not None:
                judged["report"] = drift.with_checks(args["report"], judged["checks"], "OpenSCAP", judged["message"])
            return {**result, "changed": False, **judged}
        except (openscap.OpenscapError, OSError) as exc:
            return {**result, "failed": True, "msg": str(exc)}

    @staticmethod
    def _judge(args, tailoring, waivers):
        results = openscap.read_results(args["path"])
        _evaluated, tailored = openscap.resolve_profile(args["profile"], openscap.read_tailoring(tailoring))
        content = args["content"] or openscap.newest_content()
        platform = openscap.platform_note(content, openscap.os_release_version(args["os_release"]))
        verdict = openscap.judge(results, openscap.profile_id(args["profile"]), args["minimum"], tailored, waivers,
                                 platform)
        kept = {}
        if args["keep_dir"]:
            kept = openscap.keep_outputs(args["path"], args["keep_dir"])
        elif args["record_dir"] and args["key"]:
            kept = openscap.keep_outputs(args["path"], openscap.kept_path(args["record_dir"], args["layer"], args["key"]))
        return {**verdict.as_dict(), "reports": kept, "platform": platform, "evaluated": results.profile}

    @staticmethod
    def _error(args):
        """A scan that did not run or wrote nothing to judge: one error check, never a pass."""
        detail = openscap.failure_text(args["failed_task"], args["error"])
        check = {"id": openscap.RUN_CHECK, "name": "OpenSCAP scan", "passed": False, "result": "error", "waiver": "",
                 "detail": detail}
        message = f"OpenSCAP: the scan did not run or could not be judged: {detail}"
        found = {"passed": False, "checks": [check], "message": message, "reports": {}}
        if args["report"] is not None:
            found["report"] = drift.with_checks(args["report"], [check], "OpenSCAP", message)
        return found
