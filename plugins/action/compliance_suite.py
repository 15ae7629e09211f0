# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.compliance_suite: the testinfra suite against a booted image.

The task runs over the hpc.stateless.nspawn connection in booted mode (verify.yml); this action
reads the leader PID of that connection's container and runs the suite (molecule/ of this collection,
module_utils/_verify/suite.py picks the files) in ONE pytest process on the controller, whose testinfra
backend enters the container with nsenter for every command (molecule/_shared/compliance.py).
pytest's JUnit report is read back into record checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import (
    SuiteError,
    bad_checks,
    chain_layers,
    chain_roles,
    parse_junit,
    pytest_command,
    suite_environment,
    suite_paths,
    summary,
)

# ansible_collections/hpc/stateless/plugins/action/compliance_suite.py -> ansible_collections/hpc/stateless
_COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
SUITE_ROOT = os.path.join(_COLLECTION_ROOT, "molecule")
_OUTPUT_TAIL = 3000


def _leader(connection: Any) -> tuple[int, str]:
    """(leader PID, nsenter) of the booted container behind an hpc.stateless.nspawn connection."""
    if getattr(connection, "transport", "") != "hpc.stateless.nspawn":
        raise AnsibleActionFail(f"compliance_suite runs over the hpc.stateless.nspawn connection in booted mode "
                                f"(verify.yml), not {getattr(connection, 'transport', connection)!r}")
    connection._connect()  # pylint: disable=protected-access
    # The connection's session state (plugins/connection/nspawn.py) names the container's leader.
    state = getattr(connection, "_state", None) or {}
    session = getattr(connection, "_session", None)
    if not state.get("leader_pid") or session is None or not session.spec.boot:
        raise AnsibleActionFail("compliance_suite needs the image booted: set ansible_nspawn_boot: true")
    return int(state["leader_pid"]), session.spec.nsenter


def inventory_dir(sources: Any) -> str:
    """The directory whose group_vars/ holds the inventory's values: the first source that is a directory,
    or the directory of the first source file (Ansible reads group_vars/ beside a hosts file); '' if none."""
    for source in [sources] if isinstance(sources, str) else list(sources or []):
        source = os.path.abspath(str(source))
        if os.path.isdir(source):
            return source
        if os.path.isfile(source):
            return os.path.dirname(source)
    return ""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("layer", "layers", "image", "root", "inventory", "waivers", "paths", "timeout"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        layer = args.get("layer")
        layers = args.get("layers")
        image = args.get("image") or ""
        root = args.get("root") or ""
        if not layer or not isinstance(layers, dict) or bool(image) == bool(root):
            raise AnsibleActionFail("compliance_suite needs layer, layers (hpc_stateless_plan.layers) and one of "
                                    "image (the booted layer image) and root (the booted packed tree)")
        waivers = [str(w) for w in args.get("waivers") or []]
        missing = [w for w in waivers if not os.path.isfile(w)]
        if missing:
            raise AnsibleActionFail(f"hpc_stateless_verify_waivers: {missing} do not exist; name waiver files "
                                    "(waivers: [{check, item, reason}])")
        try:
            roles = chain_roles(layers, layer)
            chain = chain_layers(layers, layer)
            paths = suite_paths(SUITE_ROOT, roles, [str(p) for p in args.get("paths") or []])
        except SuiteError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        leader, nsenter = _leader(self._connection)
        env = suite_environment(os.environ, leader, nsenter, str(layer), roles, image=str(image), root=str(root),
                                waivers=waivers, inventory=inventory_dir(args.get("inventory")), chain=chain)
        timeout = int(args.get("timeout") or 600)
        with tempfile.TemporaryDirectory(prefix="hpc-stateless-suite-") as scratch:
            report = os.path.join(scratch, "junit.xml")
            argv = pytest_command(sys.executable, SUITE_ROOT, report, paths)
            started = time.monotonic()
            try:
                proc = subprocess.run(argv, env=env, cwd=SUITE_ROOT, capture_output=True, text=True,
                                      timeout=timeout, check=False)
            except subprocess.TimeoutExpired as exc:
                raise AnsibleActionFail(f"the compliance suite of {layer} ran longer than {timeout}s and was "
                                        "stopped; a check hangs (see the tests' commands)") from exc
            seconds = round(time.monotonic() - started, 2)
            output = (proc.stdout + proc.stderr)[-_OUTPUT_TAIL:]
            if proc.returncode not in (0, 1) or not os.path.isfile(report):
                hint = (" (install pytest-testinfra on the controller: pip install pytest-testinfra)"
                        if "No module named" in output else "")
                raise AnsibleActionFail(f"the compliance suite of {layer} could not run (pytest rc "
                                        f"{proc.returncode}){hint}: {output}")
            try:
                with open(report, "rb") as handle:
                    checks = parse_junit(handle.read(), f"JUnit report of {layer}'s suite")
            except SuiteError as exc:
                raise AnsibleActionFail(f"{exc}; pytest said: {output}") from exc
        bad = bad_checks(checks)
        result.update(changed=False, checks=checks, counts=summary(checks), seconds=seconds, roles=roles,
                      paths=paths, failed_checks=[c["name"] for c in bad], output=output,
                      msg=f"{layer}: {len(checks)} checks in {seconds}s, " + ", ".join(
                          f"{n} {r}" for r, n in summary(checks).items() if n))
        return result
