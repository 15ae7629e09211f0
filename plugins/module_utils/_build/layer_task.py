# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The task hpc.stateless.layer: its options and what one run does (start, commit or remove a working container).

Written once for both ways it runs: the module (a module process on the build host) and its action plugin, which
calls :func:`run` in the controller's process when the build host is the controller - every layer build starts
and commits through it, and a module process costs about 0.4 s each time on a 2-core build host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import (
    DEFAULT_PACKAGE_CACHES,
    LayerBuilder,
    LayerError,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import host_arch
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import DEFAULT_IMAGE_PREFIX, layer_labels
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError

ARGUMENT_SPEC: dict[str, Any] = dict(
    name=dict(type="str", required=True),
    key=dict(type="str", no_log=False),
    state=dict(type="str", default="started", choices=["started", "committed", "absent"]),
    parent_image=dict(type="str", default="scratch"),
    image_prefix=dict(type="str", default=DEFAULT_IMAGE_PREFIX),
    parent=dict(type="str"),
    parent_key=dict(type="str", no_log=False),
    git_commit=dict(type="str"),
    inputs_key=dict(type="str", no_log=False),
    arch=dict(type="str"),
    labels=dict(type="dict", default={}),
    extra_tags=dict(type="list", elements="str", default=["latest"]),
    also_tag=dict(type="list", elements="str", default=[]),
    container=dict(type="str"),
    package_caches=dict(type="list", elements="dict", options=dict(
        path=dict(type="str", required=True),
        host_path=dict(type="path", required=True),
    )),
    isolation=dict(type="str", choices=["chroot", "oci", "rootless"]),
    fresh=dict(type="bool", default=False),
    userns=dict(type="bool", default=False),
)
REQUIRED_IF = [("state", "started", ["key"]), ("state", "committed", ["key"])]
VALIDATION: dict[str, Any] = {"required_if": REQUIRED_IF}


def run(params: dict[str, Any], check_mode: bool, diff: bool = False,  # pylint: disable=unused-argument
        on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:  # pylint: disable=unused-argument
    """One run with validated ``params``: the task's result (``failed`` and ``msg`` when it failed). A layer's run
    takes no lock of its own (the build lock is hpc.stateless.layer_lock's): ``diff`` and ``on_wait`` are unused."""
    builder = LayerBuilder(Buildah(isolation=params["isolation"]), params["name"], params["key"],
                           params["image_prefix"], container=params["container"])
    try:
        if params["state"] == "started":
            caches = params["package_caches"]
            result = builder.start(params["parent_image"], DEFAULT_PACKAGE_CACHES if caches is None else caches,
                                   check_mode, fresh=params["fresh"], userns=params["userns"])
        elif params["state"] == "committed":
            labels = layer_labels(params["name"], params["key"], params["parent"], params["parent_key"],
                                  params["git_commit"], params["labels"], params["inputs_key"], params["arch"] or host_arch())
            result = builder.commit(labels, params["extra_tags"], check_mode, params["also_tag"], userns=params["userns"])
        else:
            result = builder.absent(check_mode)
    except LayerError as exc:
        return {"failed": True, "msg": str(exc)}
    except ProcessError as exc:
        return {"failed": True, "msg": f"layer {params['name']}: {exc}", "cmd": exc.argv, "rc": exc.rc,
                "stderr": exc.stderr}
    return result.as_dict()
