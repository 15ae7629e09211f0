# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The task hpc.stateless.bootlink: its options and what one run does (publish, switch, roll back, remove).

Written once for both ways it runs: the module (a module process on the boot host) and its action plugin, which
calls :func:`run` in the controller's process when the boot host is the controller (plugin_utils/controller.py):
deploy runs it three times per image, and a module process costs about 0.5 s each time on a 2-core build
host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import FORMATS, ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.signature import SignatureError
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import STATES, BootlinkError, apply_state
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import serve_gate

ARGUMENT_SPEC: dict[str, Any] = dict(
    boot_root=dict(type="path", required=True),
    image=dict(type="str", required=True),
    state=dict(type="str", default="switched", choices=list(STATES)),
    src=dict(type="path"),
    version=dict(type="str"),
    format=dict(type="str", choices=list(FORMATS)),
    keep=dict(type="int", default=3),
    lock_timeout=dict(type="float", default=60.0),
    keyring=dict(type="path"),
    signers=dict(type="list", elements="str"),
    unverified_ok=dict(type="str", default=""),
    allow_downgrade=dict(type="bool", default=False),
)
VALIDATION: dict[str, Any] = {
    "required_if": [("state", "present", ("src",)), ("state", "absent", ("version",)),
                    ("state", "switched", ("src", "version"), True)],
    "required_by": {"signers": ("keyring",)},
}


def run(params: dict[str, Any], check_mode: bool, diff: bool, on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One run with validated ``params``: the task's result (``failed`` and ``msg`` when it failed). ``on_wait`` hears
    once whom a wait for the boot tree's lock waits for."""
    try:
        result = apply_state(params, check_mode=check_mode, on_wait=on_wait)
    except (ArtifactError, BootlinkError, SignatureError, ProcessError) as exc:
        return {"failed": True, "msg": str(exc), "image": params["image"], "boot_root": params["boot_root"]}
    if result.get("source"):
        result["gate"] = serve_gate(result["image"], result["version"], result["source"], result.get("verification"),
                                    params["unverified_ok"]).to_dict()
    if not diff:
        result.pop("diff")
    return result
