# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.plan: the layer DAG, content keys, stale layers.

Keys are computed here, on the controller, because they need the role files and the
raw (untemplated) inventory variables of each layer host; only the look-up of which
images exist runs on the build host (through hpc.stateless.layer_info).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.hpc.stateless.plugins.module_utils._buildah import (
    DEFAULT_IMAGE_PREFIX,
    container_name,
    image_ref,
)
from ansible_collections.hpc.stateless.plugins.module_utils.content_key import RoleIndex, compute_keys, layer_key
from ansible_collections.hpc.stateless.plugins.module_utils.layer_graph import LayerGraph, LayerSpecError

# ansible_collections/hpc/stateless/plugins/action/plan.py -> the dir holding ansible_collections
_OWN_COLLECTIONS_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))

_ARGUMENT_SPEC = dict(
    layers=dict(type="dict"),
    images=dict(type="dict"),
    image_prefix=dict(type="str"),
    compute_keys=dict(type="bool", default=True),
    check_storage=dict(type="bool", default=True),
    role_paths=dict(type="list", elements="path", default=[]),
)


def _raw(value: Any) -> Any:
    """Strip Ansible's lazy containers down to plain data without templating."""
    if isinstance(value, dict):
        return {str(k): _raw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_raw(v) for v in value]
    return value


def git_describe(path: str) -> str:
    """``git describe --always --dirty`` of the configuration repository, or ''."""
    try:
        out = subprocess.run(["git", "-C", path, "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(_ARGUMENT_SPEC)

        hostvars = task_vars.get("hostvars")
        own_raw = self._raw_host_vars(hostvars, task_vars.get("inventory_hostname", "localhost"))
        layers = args["layers"] if args["layers"] is not None else own_raw.get("hpc_stateless_layers")
        images = args["images"] if args["images"] is not None else own_raw.get("hpc_stateless_images", {})
        prefix = args["image_prefix"] or own_raw.get("hpc_stateless_image_prefix") or DEFAULT_IMAGE_PREFIX
        if layers is None:
            raise AnsibleActionFail("hpc_stateless_layers is not defined: define the layer DAG in the "
                                    "inventory (see the collection README) or pass 'layers'")

        playbook_dir = task_vars.get("playbook_dir") or os.getcwd()
        role_index = RoleIndex(
            search_paths=[*args["role_paths"], os.path.join(playbook_dir, "roles"), *C.DEFAULT_ROLES_PATH],
            collections_paths=[_OWN_COLLECTIONS_ROOT, *C.COLLECTIONS_PATHS],
        )
        try:
            graph = LayerGraph.from_spec(_raw(layers), _raw(images), role_exists=role_index.exists,
                                         role_search_hint=", ".join(role_index.search_paths))
            keys = {}
            if args["compute_keys"]:
                keys = compute_keys(graph, role_index,
                                    lambda name: self._layer_vars(hostvars, name, own_raw, graph))
        except LayerSpecError as exc:
            raise AnsibleActionFail(str(exc)) from exc

        existing: set[str] = set()
        if args["compute_keys"] and args["check_storage"]:
            info = self._execute_module(module_name="hpc.stateless.layer_info", module_args={},
                                        task_vars=task_vars)
            if info.get("failed"):
                raise AnsibleActionFail(f"could not list layer images: {info.get('msg')}")
            existing = {name for image in info.get("images", []) for name in image.get("names", [])}

        result.update(self._plan(graph, keys, existing, prefix, args["check_storage"]))
        result["git_commit"] = git_describe(playbook_dir)
        result["image_prefix"] = prefix
        result["changed"] = False
        return result

    @staticmethod
    def _raw_host_vars(hostvars: Any, host: str) -> dict[str, Any]:
        if hostvars is None:
            return {}
        try:
            return dict(hostvars.raw_get(host))
        except Exception:  # noqa: BLE001 - a host unknown to the inventory has no vars
            return {}

    def _layer_vars(self, hostvars: Any, layer: str, own_raw: dict[str, Any],
                    graph: LayerGraph) -> dict[str, Any]:
        """Raw variables the layer's inventory host will see while it is built."""
        merged = self._raw_host_vars(hostvars, layer) or dict(own_raw)
        # build_layer.yml applies the layer's vars as facts, above inventory variables.
        merged.update(graph.spec(layer).get("vars", {}))
        return merged

    @staticmethod
    def _plan(graph: LayerGraph, keys: dict[str, Any], existing: set[str],
              prefix: str, storage_checked: bool) -> dict[str, Any]:
        layers = {}
        stale = []
        for depth, level in enumerate(graph.levels()):
            for name in level:
                spec = graph.spec(name)
                parent = graph.parent(name)
                entry = {
                    "name": name,
                    "parent": parent,
                    "depth": depth,
                    "roles": spec["roles"],
                    "groups": spec["groups"],
                    "vars": spec["vars"],
                    "bootstrap": spec.get("bootstrap"),
                }
                if name in keys:
                    key = keys[name].key
                    parent_key = keys[parent].key if parent else None
                    entry.update(
                        key=key,
                        parent_key=parent_key,
                        image=image_ref(prefix, name, key),
                        parent_image=image_ref(prefix, parent, parent_key) if parent else "scratch",
                        container=container_name(prefix, name, key),
                        role_closure=keys[name].roles,
                        variables=sorted(keys[name].variables),
                    )
                    if parent is None:
                        # The bootstrapped root is committed on its own before the roles run,
                        # so a change to a root layer's roles does not bootstrap again.
                        bootstrap_key = layer_key(None, {"bootstrap": spec["bootstrap"]}, [], {})
                        bootstrap_prefix = f"{prefix.rstrip('/')}/bootstrap"
                        entry.update(
                            bootstrap_key=bootstrap_key,
                            bootstrap_prefix=bootstrap_prefix,
                            bootstrap_image=image_ref(bootstrap_prefix, name, bootstrap_key),
                        )
                        entry["parent_image"] = entry["bootstrap_image"]
                    if storage_checked:
                        entry["cached"] = entry["image"] in existing
                        if not entry["cached"]:
                            stale.append(name)
                        if parent is None:
                            entry["bootstrap_cached"] = entry["bootstrap_image"] in existing
                layers[name] = entry
        order = graph.order()
        return {
            "order": order,
            "levels": graph.levels(),
            "layers": layers,
            "stale": [name for name in order if name in stale],
            "images": graph.images,
            "leaves": sorted(graph.leaves()),
        }
