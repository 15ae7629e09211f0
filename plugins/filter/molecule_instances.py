# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.molecule_instances: the start image of each Molecule platform, from the layer plan.

playbooks/molecule_create.yml (hpc.stateless.molecule_create) starts one buildah working container per platform of
a scenario. A platform names a layer (``hpc_stateless_layer``) or an image of the DAG (``hpc_stateless_image``: its
layer) and where to start (``hpc_stateless_start``: ``parent``, as the build starts the layer, or ``layer``, the
layer's own image). Documentation: molecule_instances.yml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

#: Where an instance starts: the layer's parent image (a root layer: its bootstrapped root), or its own image.
STARTS = ("parent", "layer")


def platform_layer(platform: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    """The layer a platform is about, '' when it names no layer or image of the plan."""
    layer = platform.get("hpc_stateless_layer")
    if layer is None:
        image = (plan.get("images") or {}).get(platform.get("hpc_stateless_image") or "")
        layer = image.get("layer") if isinstance(image, Mapping) else ""
    return str(layer) if layer in (plan.get("layers") or {}) else ""


def molecule_instances(platforms: Any, plan: Any) -> list[dict[str, Any]] | Undefined:
    """``{name, layer, key, image, cached}`` of each platform that names a layer or image of ``plan``, in order.

    ``plan`` is the result of M(hpc.stateless.plan) with keys; platforms that name neither are left out (the
    caller names them). ``cached`` says whether the start image exists in local containers-storage.
    """
    for value in (platforms, plan):
        if isinstance(value, Undefined):
            return value  # as Jinja's own filters do: the error names the undefined variable
    if not isinstance(plan, Mapping) or not isinstance(plan.get("layers"), Mapping):
        raise AnsibleFilterError("molecule_instances: expects the result of hpc.stateless.plan as its argument")
    if not isinstance(platforms, Iterable) or isinstance(platforms, (str, bytes, Mapping)):
        raise AnsibleFilterError(f"molecule_instances: expects Molecule's platforms list, got {type(platforms).__name__}")
    instances = []
    for platform in platforms:
        if not isinstance(platform, Mapping) or not platform.get("name"):
            raise AnsibleFilterError(f"molecule_instances: a platform without a name: {platform!r:.200}")
        name = platform_layer(platform, plan)
        if not name:
            continue
        start = platform.get("hpc_stateless_start") or "parent"
        if start not in STARTS:
            raise AnsibleFilterError(f"platform {platform['name']}: hpc_stateless_start must be one of "
                                     f"{', '.join(STARTS)}, got {start!r}")
        layer = plan["layers"][name]
        if start == "layer":
            image, cached = layer["image"], layer.get("cached")
        elif layer.get("parent"):
            image, cached = layer["parent_image"], plan["layers"][layer["parent"]].get("cached")
        else:
            image, cached = layer["parent_image"], layer.get("bootstrap_cached")
        instances.append({"name": platform["name"], "layer": name, "key": layer["key"], "image": image,
                          "cached": bool(cached)})
    return instances


class FilterModule:
    """The Molecule instances filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"molecule_instances": molecule_instances}
