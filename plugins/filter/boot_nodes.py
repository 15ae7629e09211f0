# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.boot_nodes: the nodes of an inventory group as M(hpc.stateless.bootconfig) takes them.

Which host is a node (it has ``hpc_stateless_boot_mac``) and which of its variables say what
(``hpc_stateless_boot_image``, ``hpc_stateless_boot_kernel_args``) is decided here once, for
playbooks/deploy.yml and any site playbook that renders boot entries. Documentation: boot_nodes.yml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

#: Host variable -> key of a bootconfig node; a host without the first one gets no entry of its own.
NODE_VARIABLES = (("hpc_stateless_boot_mac", "mac"), ("hpc_stateless_boot_image", "image"),
                  ("hpc_stateless_boot_kernel_args", "kernel_args"))


def boot_nodes(hosts: Any, hostvars: Any) -> list[dict[str, Any]] | Undefined:
    """``{name, mac, image, kernel_args, groups}`` of each host of ``hosts`` that has ``hpc_stateless_boot_mac``, in order.

    ``hostvars`` is Ansible's ``hostvars`` (or any mapping of host name to variables); an unset image or
    kernel_args is ``''``, which bootconfig reads as the default image and no extra arguments.
    """
    for value in (hosts, hostvars):
        if isinstance(value, Undefined):
            return value  # as Jinja's own filters do: the error names the undefined variable
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Iterable):
        raise AnsibleFilterError(f"boot_nodes: expects a list of host names, got {type(hosts).__name__}")
    if not isinstance(hostvars, Mapping):
        raise AnsibleFilterError(f"boot_nodes: expects hostvars as its argument, got {type(hostvars).__name__}")
    nodes = []
    for host in hosts:
        variables = hostvars[host]
        if NODE_VARIABLES[0][0] not in variables:
            continue
        node: dict[str, Any] = {"name": str(host)}
        for variable, key in NODE_VARIABLES:
            value = variables.get(variable)
            node[key] = "" if value is None else value
        # Its inventory groups: with several boot servers, hpc_stateless_boot_server_map picks its own server by group.
        node["groups"] = [str(group) for group in variables.get("group_names") or []]
        nodes.append(node)
    return nodes


class FilterModule:
    """The boot node filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"boot_nodes": boot_nodes}
