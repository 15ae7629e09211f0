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
from ansible.vars.manager import VariableManager

from ansible_collections.hpc.stateless.plugins.module_utils.build.buildah import (
    DEFAULT_IMAGE_PREFIX,
    container_name,
    image_ref,
)
from ansible_collections.hpc.stateless.plugins.module_utils._git import GitError, GitRepository, GitRevisionReader
from ansible_collections.hpc.stateless.plugins.module_utils.ci.gitlab import gitlab_pipeline, pipeline_yaml
from ansible_collections.hpc.stateless.plugins.module_utils.layers.change_plan import (
    DEFAULT_BUILD_PLAYBOOKS,
    PLAYBOOK_CHANGE_MODES,
    VARIABLE_CHANGE_MODES,
    layer_facts,
    normalise_changed_files,
    plan_changes,
)
from ansible_collections.hpc.stateless.plugins.module_utils.layers.content_key import RoleIndex, compute_keys, layer_key
from ansible_collections.hpc.stateless.plugins.module_utils.layers.graph import LayerGraph, LayerSpecError
from ansible_collections.hpc.stateless.plugins.module_utils.layers.render import render_dot, render_table

# ansible_collections/hpc/stateless/plugins/action/plan.py -> the dir holding ansible_collections
_OWN_COLLECTIONS_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))

_ARGUMENT_SPEC = dict(
    layers=dict(type="dict"),
    images=dict(type="dict"),
    image_prefix=dict(type="str"),
    compute_keys=dict(type="bool", default=True),
    check_storage=dict(type="bool", default=True),
    role_paths=dict(type="list", elements="path", default=[]),
    # change planning (issue 8): only when since or changed_files is given
    since=dict(type="str"),
    changed_files=dict(type="list", elements="str"),
    repo=dict(type="path"),
    merge_base=dict(type="bool", default=True),
    variable_changes=dict(type="str", default="values", choices=list(VARIABLE_CHANGE_MODES)),
    playbook_changes=dict(type="str", default="rebuild", choices=list(PLAYBOOK_CHANGE_MODES)),
    build_playbooks=dict(type="list", elements="str", default=list(DEFAULT_BUILD_PLAYBOOKS)),
    image_types=dict(type="list", elements="str"),
    pipeline=dict(type="dict", apply_defaults=True, options=dict(
        registry=dict(type="str", default=""),
        inventory=dict(type="str"),
        playbook=dict(type="str", default="hpc.stateless.layer"),
        image_prefix=dict(type="str", default=""),
        tags=dict(type="list", elements="str", default=[]),
        extra_args=dict(type="list", elements="str", default=[]),
        tls_verify=dict(type="bool", default=True),
    )),
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
        if args["since"] is not None or args["changed_files"] is not None:
            if not args["compute_keys"]:
                raise AnsibleActionFail("since/changed_files need compute_keys=true: changes are mapped "
                                        "through the variables each layer's key covers")
            result["changes"] = self._changes(args, graph, keys, role_index, task_vars)
        result["git_commit"] = git_describe(playbook_dir)
        result["image_prefix"] = prefix
        result["changed"] = False
        return result

    def _changes(self, args: dict[str, Any], graph: LayerGraph, keys: dict[str, Any],
                 role_index: RoleIndex, task_vars: dict[str, Any]) -> dict[str, Any]:
        """Map changed files to the layers to rebuild (plugins/module_utils/layers/change_plan.py)."""
        sources = [os.path.realpath(s) for s in task_vars.get("ansible_inventory_sources") or []
                   if isinstance(s, str) and os.path.exists(s)]
        start = args["repo"] or (os.path.dirname(sources[0]) if sources and os.path.isfile(sources[0])
                                 else sources[0] if sources else os.getcwd())
        try:
            repository = GitRepository(start)
            reader = GitRevisionReader(repository, None, None)  # no base: every variable of a changed file counts
            if args["since"] is not None:
                base = repository.resolve(args["since"])
                if args["merge_base"]:
                    base = repository.merge_base(base, "HEAD")
                reader = GitRevisionReader(repository, base, f"{args['since']} ({base[:12]})")
            if args["changed_files"] is not None:
                changed = normalise_changed_files(repository.root, args["changed_files"])
            else:
                changed = repository.changed_files(reader.base_commit or "HEAD")
            inventory_sources = self._inventory_sources(repository.root, sources, changed)
            groups = task_vars.get("groups") or {}

            def groups_for(layer: str) -> list[str]:
                found = [g for g, hosts in groups.items() if layer in (hosts or [])]
                return found or ["hpc_stateless_layers", *graph.spec(layer)["groups"]]

            facts = layer_facts(graph, keys, role_index.path, repository.root, groups_for)
            plan = plan_changes(graph, facts, changed, reader, variable_changes=args["variable_changes"],
                                playbook_changes=args["playbook_changes"],
                                build_playbooks=args["build_playbooks"], inventory_sources=inventory_sources,
                                image_types=args["image_types"])
        except (GitError, LayerSpecError) as exc:
            raise AnsibleActionFail(str(exc)) from exc
        options = dict(args["pipeline"] or {})
        if not options.get("inventory"):
            inventory = [os.path.relpath(s, repository.root) for s in sources
                         if s == repository.root or s.startswith(repository.root + os.sep)]
            options["inventory"] = inventory[0] if inventory else "inventory"
        pipeline = gitlab_pipeline(plan, **options)
        return {
            "repo": repository.root,
            "plan": plan.as_dict(),
            "table": render_table(plan),
            "dot": render_dot(plan),
            "pipeline": pipeline_yaml(pipeline, plan),
        }

    @staticmethod
    def _inventory_sources(root: str, sources: list[str], changed: list[str]) -> list[str]:
        """Repository-relative inventory files among the sources (files of a source directory included)."""
        found = []
        for source in sources:
            if not (source == root or source.startswith(root + os.sep)):
                continue
            rel = os.path.relpath(source, root).replace(os.sep, "/")
            if os.path.isfile(source):
                found.append(rel)
            else:
                found += [c for c in changed if os.path.dirname(c) == (rel if rel != "." else "")]
        return found

    @staticmethod
    def _raw_host_vars(hostvars: Any, host: str) -> dict[str, Any]:
        """Every variable of ``host`` in this run, unrendered (the planning host's view)."""
        if hostvars is None:
            return {}
        try:
            return dict(hostvars.raw_get(host))
        except Exception:  # noqa: BLE001 - a host unknown to the inventory has no vars
            return {}

    @staticmethod
    def _inventory_host_vars(hostvars: Any, host: str) -> dict[str, Any]:
        """Inventory, group and extra variables of layer host ``host``, unrendered.

        Read through a fresh VariableManager: the run's own one also holds what earlier plays left
        on the host (gathered facts, include_vars of a role's OS-family file, registered results),
        so a build followed by pack or verify in the same run would see other keys than the build.
        """
        inventory = getattr(hostvars, "_inventory", None)
        if inventory is None or inventory.get_host(host) is None:
            return {}
        fresh = VariableManager(loader=hostvars._loader, inventory=inventory)  # pylint: disable=protected-access
        return dict(fresh.get_vars(host=inventory.get_host(host), include_hostvars=False))

    def _layer_vars(self, hostvars: Any, layer: str, own_raw: dict[str, Any],
                    graph: LayerGraph) -> dict[str, Any]:
        """Raw variables the layer's inventory host will see while it is built."""
        merged = self._inventory_host_vars(hostvars, layer) or dict(own_raw)
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
