# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rolling update's filters: playbooks/rolling_update.yml is glue, its rules are Python.

The rules are plugins/module_utils/_deploy/rollout.py; these filters hand them to Jinja and turn their
errors into filter errors. Each filter's documentation is in ``<name>.yml`` next to this file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable
from jinja2 import Undefined

from ansible_collections.hpc.stateless.plugins.module_utils._deploy import rollout

#: The fact the play sets on each node from :func:`roll_node` and reads back through ``hostvars``.
NODE_FACT = "hpc_stateless_roll_node"
#: The fact the play sets on a node that failed its reboot (:func:`roll_failure`).
FAILURE_FACT = "hpc_stateless_roll_failure"


def _defined(value: Any, filter_name: str) -> Any:
    """``value``; an undefined variable stays an undefined-variable error (what Jinja itself raises)."""
    if isinstance(value, Undefined):
        raise AnsibleUndefinedVariable(f"{filter_name}: its input is undefined")
    return value


def _mapping(value: Any, filter_name: str, what: str) -> Mapping[str, Any]:
    if not isinstance(_defined(value, filter_name), Mapping):
        raise AnsibleFilterError(f"{filter_name}: expects {what}, got {type(value).__name__}")
    return value


def _names(value: Any, filter_name: str) -> list[str]:
    if isinstance(_defined(value, filter_name), (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise AnsibleFilterError(f"{filter_name}: expects a list of host names, got {type(value).__name__}")
    return [str(name) for name in value]


def _fact(hostvars: Mapping[str, Any], node: str, fact: str) -> Any:
    """A fact of ``node`` in ``hostvars``, None when the node or the fact is not there."""
    if node not in hostvars:
        return None
    return hostvars[node].get(fact)


def roll_served(results: Any, boot_root: str) -> dict[str, str]:
    """``{image: version}`` from the slurp results (``loop`` over the images) of ``<boot_root>/<image>/manifest.json``."""
    if not isinstance(_defined(results, "roll_served"), list):
        raise AnsibleFilterError(f"roll_served: expects the results of the manifest reads, got {type(results).__name__}")
    try:
        return rollout.served_versions([_mapping(r, "roll_served", "slurp results") for r in results], boot_root)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(f"roll_served: {exc}") from None


def roll_node(release_file_result: Any, *, served: Mapping[str, str], images: Any, boot_root: str, release_file: str,
              image: str | None = None, default_image: str | None = None) -> dict[str, Any]:
    """A node's image, the version it should run, what it runs and why it needs a reboot (empty: it does not)."""
    result = _mapping(release_file_result, "roll_node", "the slurp result of the node's release file")
    boots = rollout.node_image(image, default_image, images or {})
    state = rollout.node_state(result, image=boots, served=_mapping(served, "roll_node", "served versions"),
                               boot_root=boot_root, release_file=release_file)
    return state.as_dict()


def roll_plan(nodes: Any, hostvars: Any, *, canary_size: Any, batch_size: Any, max_fail_percentage: Any) -> dict[str, Any]:
    """The canary, the play's ``serial`` and ``max_fail_percentage``, and the report of the nodes to reboot."""
    names = _names(nodes, "roll_plan")
    variables = _mapping(hostvars, "roll_plan", "hostvars as its argument")
    states = {node: _fact(variables, node, NODE_FACT) or {} for node in names}
    try:
        return rollout.roll_plan(names, states, canary_size=canary_size, batch_size=batch_size,
                                 max_fail_percentage=max_fail_percentage)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(f"roll_plan: {exc}") from None


def slurm_reboot_argv(node: Any, *, method: str, scontrol: str, image: str, version: str, reason: str | None = None,
                      nhc_reason: str = "reboot") -> list[str]:
    """The ``scontrol`` argv that asks Slurm to reboot ``node`` (its Slurm node name)."""
    try:
        return rollout.reboot_argv(str(node), method=method, scontrol=scontrol, image=image, version=version,
                                   reason=reason or "", nhc_reason=nhc_reason)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(f"slurm_reboot_argv: {exc}") from None


def slurm_reboot_check(show_node: Any, *, boot_time_before: str | None = None, requested_at: str | None = None,
                       timeout: Any = "?") -> dict[str, Any]:
    """One look at ``scontrol show node --oneliner`` after the reboot request: ``done``, ``ok`` and why not (``msg``)."""
    if not isinstance(_defined(show_node, "slurm_reboot_check"), str):
        raise AnsibleFilterError(f"slurm_reboot_check: expects the output of scontrol show node, got {type(show_node).__name__}")
    return rollout.reboot_check(show_node, boot_time_before=boot_time_before or "", requested_at=requested_at or "",
                                timeout=timeout).as_dict()


def roll_release_check(release_file_result: Any, *, image: str, version: str) -> dict[str, Any]:
    """Whether the node came back running ``image`` ``version``; ``msg`` says what it runs otherwise."""
    result = _mapping(release_file_result, "roll_release_check", "the slurp result of the node's release file")
    return rollout.release_check(result, image=image, version=version)


def roll_failure(task_name: Any, result: Any, probe: Any = None) -> str:
    """Why a node failed its reboot, from the failed task (name and result) and the probe of the node."""
    probe_result = None if probe is None else _mapping(probe, "roll_failure", "the probe's result")
    return rollout.node_failure(str(task_name), _mapping(result, "roll_failure", "the failed task's result"), probe_result)


def roll_canary(batch: Any, hostvars: Any, rollback: Any = None, servers: Any = None) -> dict[str, Any]:
    """The failed nodes of a canary batch, the images whose links roll back, and the message that stops the roll.

    ``rollback``: the registered result of the rollback loop, or a list of them (one per boot server in ``servers``).
    """
    names = _names(batch, "roll_canary")
    variables = _mapping(hostvars, "roll_canary", "hostvars as its argument")
    failures = {node: str(_fact(variables, node, FAILURE_FACT)) for node in names
                if _fact(variables, node, FAILURE_FACT) is not None}
    failed = [node for node in names if node in failures]
    images = list(dict.fromkeys((_fact(variables, node, NODE_FACT) or {}).get("image", "") for node in failed))
    registered = [rollback] if isinstance(rollback, Mapping) else list(rollback or []) \
        if isinstance(rollback, Iterable) and not isinstance(rollback, (str, bytes)) else []
    results = [result for one in registered if isinstance(one, Mapping) for result in one.get("results", [])]
    return {"failed": failed, "images": [image for image in images if image],
            "msg": rollout.canary_report(names, failures, results, _names(servers or [], "roll_canary"))}


class FilterModule:
    """The rolling update's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "roll_served": roll_served,
            "roll_node": roll_node,
            "roll_plan": roll_plan,
            "slurm_reboot_argv": slurm_reboot_argv,
            "slurm_reboot_check": slurm_reboot_check,
            "roll_release_check": roll_release_check,
            "roll_failure": roll_failure,
            "roll_canary": roll_canary,
        }
