# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The task hpc.stateless.bootconfig: its options and what one run does (render the pxelinux and iPXE entries).

Written once for both ways it runs: the module (a module process on the boot host) and its action plugin, which
calls :func:`run` in the controller's process when the boot host is the controller (plugin_utils/controller.py;
a module process costs about 0.5 s each time on a 2-core build host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import render
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import BootlinkError

ARGUMENT_SPEC: dict[str, Any] = dict(
    boot_root=dict(type="path", required=True),
    images=dict(type="dict", required=True),
    default_image=dict(type="str"),
    nodes=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        mac=dict(type="raw", required=True),
        image=dict(type="str"),
        kernel_args=dict(type="raw"),
        groups=dict(type="list", elements="str", default=[]),
    )),
    servers=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True),
        url=dict(type="str", required=True),
    )),
    server_map=dict(type="dict", default={}),
    pending_manifests=dict(type="list", elements="path", default=[]),
    serial_console=dict(type="str", default="ttyS0,115200n8"),
    ip=dict(type="str", default="dhcp"),
    rdinit=dict(type="str", default="/sbin/init"),
    ramdisk_headroom=dict(type="int", default=10),
    ramdisk_round_mib=dict(type="int", default=256),
    boot_url=dict(type="str", default=""),
    prompt_timeout=dict(type="int", default=30),
    ipappend=dict(type="int", default=2),
    remove_stale=dict(type="bool", default=True),
    diff_limit=dict(type="int", default=20),
    lock_timeout=dict(type="float", default=60.0),
    loader_dirs=dict(type="list", elements="path", default=[]),
    validate_only=dict(type="bool", default=False),
)
VALIDATION: dict[str, Any] = {}


def run(params: dict[str, Any], check_mode: bool, diff: bool, on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One run with validated ``params``: the task's result (``failed`` and ``msg`` when it failed). ``on_wait`` hears
    once whom a wait for the boot tree's lock waits for."""
    params = dict(params)
    if not diff:
        params["diff_limit"] = 0
    try:
        result = render(params, check_mode=check_mode, on_wait=on_wait)
    except (ArtifactError, BootlinkError) as exc:
        return {"failed": True, "msg": str(exc), "boot_root": params["boot_root"]}
    diffs = result.pop("diff")
    if diff:
        result["diff"] = diffs
    return result
