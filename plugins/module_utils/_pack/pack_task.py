# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The task hpc.stateless.pack: its options and what one run does (module_utils/_pack/run.py packs).

Written once for both ways it runs: the module (a module process on the build host) and its action plugin, which
calls :func:`run` in the controller's process when the build host is the controller (plugin_utils/controller.py;
a module process costs about 0.5 s each time on a 2-core build host). Pack's warnings are returned in
``warnings``, which Ansible shows either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.module_utils.common.text.formatters import human_to_bytes

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import FORMATS
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import Packer, PackError, PackRequest
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError

ARGUMENT_SPEC: dict[str, Any] = dict(
    image=dict(type="str", required=True),
    source_image=dict(type="str"),
    source_path=dict(type="path"),
    output_dir=dict(type="path", required=True),
    version=dict(type="str"),
    layer=dict(type="str"),
    layer_keys=dict(type="dict", no_log=False),
    formats=dict(type="list", elements="str", default=["cpio.zst"], choices=list(FORMATS)),
    levels=dict(type="dict", default={}),
    squashfs_compression=dict(type="str", default="zstd", choices=["zstd", "xz", "gzip"]),
    threads=dict(type="int", default=0),
    exclude=dict(type="list", elements="str", default=[]),
    exclude_defaults=dict(type="bool", default=True),
    secret_patterns=dict(type="list", elements="str", default=[], no_log=False),
    allowed_secrets=dict(type="list", elements="str", default=[], no_log=False),
    allow_secrets=dict(type="bool", default=False, no_log=False),
    kernel=dict(type="path"),
    kernel_version=dict(type="str"),
    kernel_args=dict(type="str", default=""),
    initrd=dict(type="path"),
    dracut=dict(type="bool", default=True),
    first_stage=dict(type="path"),
    source_date_epoch=dict(type="int"),
    size_ceiling=dict(type="str", default="4G"),
    size_warn_ratio=dict(type="float", default=0.8),
    size_ceiling_action=dict(type="str", default="fail", choices=["fail", "warn"]),
    reset_machine_id=dict(type="bool", default=True),
    release_extra=dict(type="dict", default={}),
    force=dict(type="bool", default=False),
    hardware_profile=dict(type="dict", options=dict(
        modules=dict(type="list", elements="str", default=[]),
        modaliases=dict(type="list", elements="str", default=[]),
        modaliases_file=dict(type="path"),
        force=dict(type="list", elements="str", default=[]),
        firmware=dict(type="list", elements="str", default=[]),
    )),
    verify_dir=dict(type="path"),
    unverified_ok=dict(type="str", default=""),
    layers=dict(type="dict"),
    project_dir=dict(type="path"),
    freshness_gate=dict(type="str", default="refuse", choices=["refuse", "warn"]),
    archive_cache_dir=dict(type="path"),
)
VALIDATION: dict[str, Any] = {
    "mutually_exclusive": [("source_image", "source_path")],
    "required_one_of": [("source_image", "source_path")],
}


def run(params: dict[str, Any], check_mode: bool, diff: bool = False,  # pylint: disable=unused-argument
        on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:  # pylint: disable=unused-argument
    """One run with validated ``params``: the task's result (``failed`` and ``msg`` when it failed). Pack shows no
    diff and takes no lock: ``diff`` and ``on_wait`` are unused."""
    p = params
    try:
        ceiling = human_to_bytes(p["size_ceiling"])
    except ValueError as exc:
        return {"failed": True, "msg": f"size_ceiling {p['size_ceiling']!r}: {exc}"}
    try:
        levels = {str(k): int(v) for k, v in p["levels"].items()}
    except (TypeError, ValueError):
        return {"failed": True, "msg": f"levels must map a format to an integer level, got {p['levels']!r}"}
    request = PackRequest(
        image=p["image"], output_dir=p["output_dir"], formats=p["formats"], version=p["version"],
        source_image=p["source_image"], source_path=p["source_path"], layer=p["layer"],
        layer_keys=p["layer_keys"], levels=levels, squashfs_compression=p["squashfs_compression"],
        threads=p["threads"], exclude=p["exclude"], exclude_defaults=p["exclude_defaults"],
        secret_patterns=p["secret_patterns"], allow_secrets=p["allow_secrets"],
        allowed_secrets=p["allowed_secrets"], kernel=p["kernel"], kernel_version=p["kernel_version"],
        initrd=p["initrd"], dracut=p["dracut"], first_stage=p["first_stage"], kernel_args=p["kernel_args"],
        source_date_epoch=p["source_date_epoch"], size_ceiling=ceiling, size_warn_ratio=p["size_warn_ratio"],
        size_ceiling_action=p["size_ceiling_action"], reset_machine_id=p["reset_machine_id"],
        release_extra={str(k): str(v) for k, v in p["release_extra"].items()}, force=p["force"],
        hardware_profile=p["hardware_profile"], verify_dir=p["verify_dir"], unverified_ok=p["unverified_ok"],
        layers=p["layers"], project_dir=p["project_dir"], freshness_gate=p["freshness_gate"],
        archive_cache_dir=p["archive_cache_dir"],
    )
    packer = Packer(request, Buildah() if p["source_image"] else None)
    try:
        result = packer.run(check_mode)
    except (PackError, ProcessError) as exc:
        return {"failed": True, "msg": f"pack {p['image']}: {exc}", "warnings": list(packer.warnings)}
    manifest = result["manifest"]
    result["verification"] = manifest.get("verification") or {}
    result["capabilities"] = manifest.get("capabilities") or []
    for key in ("freshness", "hardware_profile"):
        if manifest.get(key):
            result[key] = manifest[key]
    if packer.warnings:
        result["warnings"] = list(packer.warnings)
    return result
