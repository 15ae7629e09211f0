# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.compliance_suite: the testinfra suite against a booted image or a live node.

Booted image (verify.yml): the task runs over the hpc.stateless.nspawn connection in booted mode; this action
reads the leader PID of that connection's container and runs the suite (molecule/ of this collection,
module_utils/_verify/suite.py picks the files) in ONE pytest process on the controller, whose testinfra
backend enters the container with nsenter for every command (molecule/_shared/compliance.py).

Live node (``live: true``, playbooks/compliance.yml): the task runs over the node's own ssh connection. The
action checks that Ansible reaches the node, writes a one-host inventory with the SSH settings Ansible resolved
for it (host, port, user, key, ssh args, the connection master's ControlPath: suite.live_inventory) and runs the
same suite in one pytest process per node through testinfra's ansible backend, which maps that ssh connection
onto its own ssh backend. What keeps the suite from running on the node is one ``error`` check
(suite.RUN_CHECK), never a passed one; the checks go into the node's drift report (``report``).

pytest's JUnit report is read back into record checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.action.plan import LayerHosts, PlanError
from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import canonical_value
from ansible_collections.hpc.stateless.plugins.module_utils._verify.drift import with_suite
from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import (
    SSH_CONNECTIONS,
    SuiteError,
    bad_checks,
    chain_layers,
    chain_roles,
    live_config,
    live_environment,
    live_inventory,
    parse_junit,
    pytest_command,
    role_values,
    run_error,
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


def _ssh_settings(connection: Any, play_context: Any) -> dict[str, Any]:
    """The options Ansible resolved for a node's ssh connection (inventory, ansible.cfg, environment, command
    line), and the path of the connection master Ansible's own ssh commands share."""
    from ansible.plugins.connection.ssh import Connection as SshConnection  # pylint: disable=import-outside-toplevel
    from ansible.utils.path import unfrackpath  # pylint: disable=import-outside-toplevel

    def option(name: str) -> Any:
        try:
            return connection.get_option(name)
        except (KeyError, AnsibleError):
            return None

    names = ("host", "port", "remote_user", "private_key_file", "ssh_args", "ssh_common_args", "ssh_extra_args",
             "host_key_checking", "timeout", "password")
    settings = {name: option(name) for name in names}
    settings["host"] = settings["host"] or play_context.remote_addr
    path = option("control_path") or SshConnection._create_control_path(  # pylint: disable=protected-access
        settings["host"], settings["port"], settings["remote_user"])
    settings["control_path"] = path % {"directory": unfrackpath(option("control_path_dir") or "~/.ansible/cp")}
    settings.update(become=bool(play_context.become), become_user=play_context.become_user,
                    become_method=play_context.become_method)
    try:
        settings["remote_tmp"] = connection._shell.get_option("remote_tmp")  # pylint: disable=protected-access
    except (AttributeError, KeyError, AnsibleError):
        settings["remote_tmp"] = None
    return settings


def run_suite(paths: list[str], env: dict[str, str], timeout: int, what: str) -> tuple[list[dict[str, Any]], float, str]:
    """The ONE pytest process of the suite: ``(checks, seconds, output tail)``; SuiteError when it hangs past
    ``timeout`` or cannot run (no JUnit report)."""
    with tempfile.TemporaryDirectory(prefix="hpc-stateless-suite-") as scratch:
        report = os.path.join(scratch, "junit.xml")
        argv = pytest_command(sys.executable, SUITE_ROOT, report, paths)
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, env=env, cwd=SUITE_ROOT, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SuiteError(f"the compliance suite of {what} ran longer than {timeout}s and was stopped; a check "
                             "hangs (see the tests' commands)") from None
        seconds = round(time.monotonic() - started, 2)
        output = (proc.stdout + proc.stderr)[-_OUTPUT_TAIL:]
        if proc.returncode not in (0, 1) or not os.path.isfile(report):
            hint = (" (install pytest-testinfra on the controller: pip install pytest-testinfra)"
                    if "No module named" in output else "")
            raise SuiteError(f"the compliance suite of {what} could not run (pytest rc {proc.returncode}){hint}: "
                             f"{output}")
        with open(report, "rb") as handle:
            text = handle.read()
    try:
        return parse_junit(text, f"JUnit report of {what}'s suite"), seconds, output
    except SuiteError as exc:
        raise SuiteError(f"{exc}; pytest said: {output}") from None


def _outcome(checks: list[dict[str, Any]], seconds: float, roles: list[str], paths: list[str], output: str,
             headline: str) -> dict[str, Any]:
    """The task result of one run of the suite (booted image or live node): the checks, their counts by result,
    the failed ones, and ``headline`` followed by the counts as its message."""
    counts = summary(checks)
    return {"changed": False, "checks": checks, "counts": counts, "seconds": seconds, "roles": roles, "paths": paths,
            "failed_checks": [c["name"] for c in bad_checks(checks)], "output": output,
            "msg": f"{headline}, " + ", ".join(f"{n} {r}" for r, n in counts.items() if n)}


def _waiver_files(args: Any) -> list[str]:
    waivers = [str(w) for w in args.get("waivers") or []]
    missing = [w for w in waivers if not os.path.isfile(w)]
    if missing:
        raise AnsibleActionFail(f"hpc_stateless_verify_waivers: {missing} do not exist; name waiver files "
                                "(waivers: [{check, item, reason}])")
    return waivers


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("layer", "layers", "image", "root", "inventory", "waivers", "paths", "timeout", "live",
                             "boot_image", "report"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        if self._task.args.get("live"):
            return self._live(result, task_vars or {})
        args = self._task.args
        layer = args.get("layer")
        layers = args.get("layers")
        image = args.get("image") or ""
        root = args.get("root") or ""
        if not layer or not isinstance(layers, dict) or bool(image) == bool(root):
            raise AnsibleActionFail("compliance_suite needs layer, layers (hpc_stateless_plan.layers) and one of "
                                    "image (the booted layer image) and root (the booted packed tree)")
        waivers = _waiver_files(args)
        try:
            roles = chain_roles(layers, layer)
            chain = chain_layers(layers, layer)
            paths = suite_paths(SUITE_ROOT, roles, [str(p) for p in args.get("paths") or []])
        except SuiteError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        leader, nsenter = _leader(self._connection)
        # The values may hold an inventory's plain-text secrets: a file only this user reads, removed after the run.
        with tempfile.TemporaryDirectory(prefix="hpc-stateless-values-") as scratch:
            try:
                values_file = self._write_role_values(scratch, layers, str(layer), task_vars or {})
                env = suite_environment(os.environ, leader, nsenter, str(layer), roles, image=str(image),
                                        root=str(root), waivers=waivers, inventory=inventory_dir(args.get("inventory")),
                                        chain=chain, values=values_file)
                checks, seconds, output = run_suite(paths, env, int(args.get("timeout") or 600), str(layer))
            except SuiteError as exc:
                raise AnsibleActionFail(str(exc)) from exc
        result.update(_outcome(checks, seconds, roles, paths, output, f"{layer}: {len(checks)} checks in {seconds}s"))
        return result

    def _role_values(self, layers: dict[str, Any], layer: str, task_vars: dict[str, Any]) -> dict[str, Any]:
        """What each role of the image was applied with, read as the plan reads a layer for its key (the layer's
        inventory host with its groups, host_vars and extra variables, then its ``vars``): suite.role_values."""
        hosts = LayerHosts(self._loader, task_vars.get("hostvars"), str(task_vars.get("inventory_hostname") or ""))

        def variables_of(name: str) -> dict[str, Any]:
            entry = layers[name]
            return hosts.build_vars(name, list(entry.get("host_groups") or []), entry.get("vars") or {}, {})

        try:
            return canonical_value(role_values(layers, layer, variables_of))
        except PlanError as exc:
            raise SuiteError(f"the values the roles of {layer} were applied with cannot be read: {exc}") from exc

    def _write_role_values(self, scratch: str, layers: dict[str, Any], layer: str, task_vars: dict[str, Any]) -> str:
        """:meth:`_role_values` as the JSON file the suite reads (``$HPC_STATELESS_EXPECT_VALUES``) in ``scratch``."""
        path = os.path.join(scratch, "values.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self._role_values(layers, layer, task_vars), handle)
        return path

    # -- live nodes (playbooks/compliance.yml) ------------------------------------------------------------
    def _live(self, result: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        """The suite against the live node of this task over its ssh connection; what stops it is an error check."""
        args = self._task.args
        node = str(task_vars.get("inventory_hostname") or self._play_context.remote_addr)
        report = args.get("report")
        if report is not None and not isinstance(report, dict):
            raise AnsibleActionFail(f"compliance_suite: report must be the node's drift report (a dict), got {report!r}")
        started = time.monotonic()
        try:
            checks, roles, paths, output = self._live_checks(node, args, task_vars)
        except SuiteError as exc:
            checks, roles, paths, output = [run_error(f"{node}: {exc}")], [], [], ""
        seconds = round(time.monotonic() - started, 2)
        result.update(_outcome(checks, seconds, roles, paths, output,
                               f"{node}: {len(checks)} checks over SSH in {seconds}s"))
        if report is not None:
            result["report"] = with_suite(report, checks, seconds)
        return result

    def _live_checks(self, node: str, args: Any,
                     task_vars: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str], list[str], str]:
        layer, layers = args.get("layer"), args.get("layers")
        if not isinstance(layers, dict):
            raise AnsibleActionFail("compliance_suite: live needs layers (hpc_stateless_plan.layers)")
        waivers = _waiver_files(args)
        if not layer:
            raise SuiteError(f"its image {args.get('boot_image') or '(none)'} is no image of hpc_stateless_images, "
                             "so the checks it should pass are unknown; set hpc_stateless_boot_image for the node "
                             "(or hpc_stateless_boot_default_image)")
        roles = chain_roles(layers, layer)
        chain = chain_layers(layers, layer)
        paths = suite_paths(SUITE_ROOT, roles, [str(p) for p in args.get("paths") or []])
        transport = str(getattr(self._connection, "transport", ""))
        if transport not in SSH_CONNECTIONS:
            raise SuiteError(f"the suite reaches live nodes over ssh (testinfra's ssh backend); the node's connection "
                             f"is {transport!r}: set ansible_connection: ssh for it")
        try:
            self._connection._connect()  # pylint: disable=protected-access
            probe = self._low_level_execute_command("true")
        except AnsibleError as exc:  # AnsibleConnectionFailure included
            raise SuiteError(f"the node is unreachable over ssh ({str(exc).strip()[:500]}): no check could run") from None
        if probe.get("rc") != 0:
            raise SuiteError(f"the node is unreachable over ssh (rc {probe.get('rc')}: "
                             f"{str(probe.get('stderr') or '').strip()[:500]}): no check could run")
        settings = _ssh_settings(self._connection, self._play_context)
        with tempfile.TemporaryDirectory(prefix="hpc-stateless-live-") as scratch:
            inventory_file = os.path.join(scratch, "node.json")
            with open(inventory_file, "w", encoding="utf-8") as handle:
                json.dump(live_inventory(node, settings), handle)
            with open(live_config(inventory_file), "w", encoding="utf-8") as handle:
                handle.write("# The live suite reads no configuration of the controller's (suite.live_environment).\n")
            env = live_environment(os.environ, node, inventory_file, str(layer), roles, waivers=waivers,
                                   inventory=inventory_dir(args.get("inventory")), chain=chain,
                                   bindirs=[os.path.dirname(os.path.abspath(sys.argv[0])), os.path.dirname(sys.executable)],
                                   values=self._write_role_values(scratch, layers, str(layer), task_vars))
            checks, _seconds, output = run_suite(paths, env, int(args.get("timeout") or 600), node)
        return checks, roles, paths, output
