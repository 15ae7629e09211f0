# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of hpc.stateless.plan: the layer DAG, content keys, stale layers.

Keys are computed here, on the controller, because they need the role files and the
raw (untemplated) inventory variables of each layer host; only the look-up of which
images exist runs on the build host (through hpc.stateless.layer_info, or its function
in this process when the build host is the controller).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from ansible import constants as C
from ansible import context
from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import load_extra_vars
from ansible.vars.manager import VariableManager
from jinja2 import Undefined

from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import EMULATION_PACKAGES
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    DEFAULT_IMAGE_PREFIX,
    LATEST_TAG,
    container_name,
    image_ref,
)
from ansible_collections.hpc.stateless.plugins.module_utils._git import (
    GitError,
    GitRepository,
    GitRevisionReader,
    describe_work_tree,
    version_facts,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.versions import (
    VersionFacts,
    default_version,
    version_note,
)
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import default_cache_dir
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.listing import layer_listing
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError
from ansible_collections.hpc.stateless.plugins.module_utils._ci.gitlab import gitlab_pipeline, pipeline_yaml
from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import (
    DEFAULT_BUILD_PLAYBOOKS,
    PLAYBOOK_CHANGE_MODES,
    VARIABLE_CHANGE_MODES,
    layer_facts,
    normalise_changed_files,
    plan_changes,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import (
    VARIABLES_CACHE,
    RoleIndex,
    compute_keys,
    layer_key,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.freshness import (
    DEFAULT_POLICY,
    POLICIES,
    ArchiveViews,
    FreshnessCheck,
    Storage,
    rebuilt_for_updates,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError
from ansible_collections.hpc.stateless.plugins.module_utils._layers.render import render_dot, render_table
from ansible_collections.hpc.stateless.plugins.module_utils._layers.seal import SEAL_ROLE
from ansible_collections.hpc.stateless.plugins.module_utils._paths import controller_cache_dir
from ansible_collections.hpc.stateless.plugins.module_utils._project import project_dir, role_search_paths
from ansible_collections.hpc.stateless.plugins.plugin_utils.controller import runs_in_this_process

# ansible_collections/hpc/stateless/plugins/action/plan.py -> the dir holding ansible_collections
_OWN_COLLECTIONS_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))

display = Display()

_ARGUMENT_SPEC = dict(
    layers=dict(type="dict"),
    images=dict(type="dict"),
    image_prefix=dict(type="str"),
    compute_keys=dict(type="bool", default=True),
    check_storage=dict(type="bool", default=True),
    role_paths=dict(type="list", elements="path", default=[]),
    inventory=dict(type="list", elements="path"),
    # change planning: only when since or changed_files is given
    since=dict(type="str"),
    changed_files=dict(type="list", elements="str"),
    repo=dict(type="path"),
    merge_base=dict(type="bool", default=True),
    variable_changes=dict(type="str", default="values", choices=list(VARIABLE_CHANGE_MODES)),
    playbook_changes=dict(type="str", default="rebuild", choices=list(PLAYBOOK_CHANGE_MODES)),
    build_playbooks=dict(type="list", elements="str", default=list(DEFAULT_BUILD_PLAYBOOKS)),
    image_types=dict(type="list", elements="str"),
    freshness_policy=dict(type="str", default=DEFAULT_POLICY, choices=list(POLICIES)),
    freshness_cache_dir=dict(type="path"),
    pipeline=dict(type="dict", apply_defaults=True, options=dict(
        registry=dict(type="str", default=""),
        inventory=dict(type="str"),
        playbook=dict(type="str", default="hpc.stateless.layer"),
        image_prefix=dict(type="str", default=""),
        tags=dict(type="list", elements="str", default=[]),
        extra_args=dict(type="list", elements="str", default=[]),
        tls_verify=dict(type="bool", default=True),
        diff_boot_root=dict(type="str", default=""),
        rootless=dict(type="bool", default=False),
    )),
)


def _raw(value: Any) -> Any:
    """Strip Ansible's lazy containers down to plain data without templating."""
    if isinstance(value, dict):
        return {str(k): _raw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_raw(v) for v in value]
    return value


LAYERS_GROUP = "hpc_stateless_layers"


def layer_host_groups(spec: dict[str, Any]) -> list[str]:
    """Inventory groups of a layer's host: every layer host, then the groups its spec names.

    The one statement of it: playbooks/tasks/plan_layers.yml adds the hosts with these groups,
    and keys are computed with the group variables of exactly these groups.
    """
    return [LAYERS_GROUP, *[g for g in spec.get("groups", []) if g != LAYERS_GROUP]]


def _role_ref(name: str, role_index: RoleIndex) -> str:
    """How the build includes role ``name``: its FQCN, or the absolute directory the plan resolved."""
    return name if name.count(".") == 2 and "/" not in name else role_index.path(name)


class PlanError(Exception):
    """Input the plan cannot use; ``str()`` names the key, file or host and what to do."""


def check_emulation(graph: LayerGraph, runnable: list[str]) -> None:
    """Refuse, before any bootstrap, a layer whose architecture the build host cannot run (``runnable``: the
    build host's own first, then the emulated ones: hpc.stateless.layer_info's ``arches``)."""
    for arch in graph.arches():
        if runnable and arch not in runnable:
            layers = [name for name in graph.order() if graph.arch(name) == arch]
            raise PlanError(
                f"layer {', '.join(layers)}: architecture {arch}, which this {runnable[0]} build host can neither run "
                f"nor emulate (it runs {', '.join(runnable)}). Install {' and '.join(EMULATION_PACKAGES)} "
                f"(apt-get install {' '.join(EMULATION_PACKAGES)}; scripts/setup.sh does) and enable the handlers "
                f"(update-binfmts --enable; `arch-test {arch}` checks), or build on a {arch} host (docs/arch.md)")


class LayerHosts:
    """Raw (untemplated) variables of the planning host and of each layer's inventory host.

    A layer host is read from the run's inventory when a play added it (playbooks/tasks/
    plan_layers.yml does), through a fresh VariableManager: the run's own one also holds what
    earlier plays left on the host (gathered facts, include_vars of a role's OS-family file,
    registered results), so a build followed by pack or verify in the same run would see other
    keys than the build. A layer host the run does not know is read from a private inventory of
    the same sources with the host added to its groups, so a plan made by a bare task reaches the
    keys of the build too. With ``sources`` (the plan's ``inventory`` option) every variable,
    the planning host's included, comes from a private inventory of those sources.
    """

    def __init__(self, loader: Any, hostvars: Any, planning_host: str, sources: list[str] | None = None) -> None:
        self._loader = loader
        self._hostvars = hostvars
        self._planning_host = planning_host
        self._explicit = sources is not None
        run_inventory = getattr(hostvars, "_inventory", None)
        self._run_inventory = None if self._explicit else run_inventory
        if sources is None:
            sources = list(getattr(run_inventory, "_sources", None) or [])
        self._sources = [s for s in sources if s]
        self._private: InventoryManager | None = None
        self._added: set[str] = set()

    def planning_vars(self) -> dict[str, Any]:
        """Every variable of the planning host (the DAG, the image prefix and the fallback values)."""
        if self._explicit:
            inventory = self._private_inventory()
            return self._fresh_vars(inventory, inventory.get_host(self._planning_host))
        if self._hostvars is None:
            return {}
        try:
            found = self._hostvars.raw_get(self._planning_host)
        except AnsibleError as exc:
            raise PlanError(f"cannot read the variables of {self._planning_host}: {exc}") from exc
        return {} if isinstance(found, Undefined) else dict(found)

    def layer_vars(self, layer: str, groups: list[str]) -> dict[str, Any] | None:
        """Variables of layer host ``layer`` (in ``groups``), or None without any inventory."""
        if self._run_inventory is not None and self._run_inventory.get_host(layer) is not None:
            return self._fresh_vars(self._run_inventory, self._run_inventory.get_host(layer))
        if not self._sources:
            return None
        inventory = self._private_inventory()
        if layer not in self._added:
            # What add_host does in plan_layers.yml: the host joins its groups, 'all' above them.
            for group in groups:
                inventory.add_group(group)
                inventory.add_host(layer, group=group)
            inventory.reconcile_inventory()
            self._added.add(layer)
        return self._fresh_vars(inventory, inventory.get_host(layer))

    def build_vars(self, layer: str, groups: list[str], layer_own: Mapping[str, Any],
                   fallback: Mapping[str, Any]) -> dict[str, Any]:
        """Raw variables layer host ``layer`` sees while it is built: its inventory variables (``fallback``
        without any inventory), then the layer's own ``vars``, which build_layer.yml applies as facts."""
        found = self.layer_vars(layer, groups)
        merged = dict(fallback) if found is None else found
        merged.update(layer_own)
        return merged

    def source_paths(self) -> list[str]:
        """The inventory sources that are paths (not host lists): inputs of every layer key."""
        return [s for s in self._sources if "," not in s]

    def _private_inventory(self) -> InventoryManager:
        if self._private is None:
            missing = [s for s in self._sources if "," not in s and not os.path.exists(s)]
            if missing:
                raise PlanError(f"inventory: {', '.join(missing)} does not exist; name the inventory "
                                "directory or file the layers are built with")
            try:
                self._private = InventoryManager(loader=self._loader, sources=self._sources)
            except AnsibleError as exc:
                raise PlanError(f"inventory {', '.join(self._sources)}: {exc}") from exc
        return self._private

    def _fresh_vars(self, inventory: Any, host: Any) -> dict[str, Any]:
        try:
            return dict(VariableManager(loader=self._loader, inventory=inventory)
                        .get_vars(host=host, include_hostvars=False))
        except AnsibleError as exc:
            raise PlanError(f"cannot read the variables of {host.name}: {exc}") from exc


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _check_cache: str | None = None  # check mode: the private copy of the archive cache (removed after the plan)

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(_ARGUMENT_SPEC)
        try:
            result.update(self._run(args, task_vars))
        except (PlanError, LayerSpecError, GitError) as exc:
            # A bad DAG or revision is an answer, not a crash: no traceback above the message.
            return {**result, "failed": True, "changed": False, "msg": str(exc)}
        return result

    def _run(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        hosts = LayerHosts(self._loader, task_vars.get("hostvars"), task_vars.get("inventory_hostname", "localhost"),
                           args["inventory"])
        own_raw = hosts.planning_vars()
        layers = args["layers"] if args["layers"] is not None else own_raw.get("hpc_stateless_layers")
        images = args["images"] if args["images"] is not None else own_raw.get("hpc_stateless_images", {})
        prefix = args["image_prefix"] or own_raw.get("hpc_stateless_image_prefix") or DEFAULT_IMAGE_PREFIX
        if layers is None:
            raise PlanError("hpc_stateless_layers is not defined: define the layer DAG in the "
                            "inventory (see the collection README) or pass 'layers'")

        project, role_index = self._project_roles(args, task_vars)
        graph = LayerGraph.from_spec(
            _raw(layers), _raw(images), role_exists=role_index.exists,
            role_search_hint=(f"{', '.join(role_index.search_paths)}; put the role in {project}/roles or add its "
                              "directory to roles_path ([defaults] of ansible.cfg, ANSIBLE_ROLES_PATH); a role of "
                              "a collection needs the collection in collections_path"))
        existing: set[str] = set()
        image_ids: dict[str, str] = {}
        check: FreshnessCheck | None = None
        views: ArchiveViews | None = None
        if args["compute_keys"] and args["check_storage"]:
            info = self._layer_listing(task_vars)
            if info.get("failed"):
                raise PlanError(f"could not list layer images: {info.get('msg')}")
            check_emulation(graph, info.get("arches") or [])
            image_ids = {name: image.get("id") or "" for image in info.get("images", []) for name in image.get("names", [])}
            existing = set(image_ids)
            specs = {name: graph.spec(name) for name in graph.order()}
            views = ArchiveViews(specs, **self._archive_options(args))
            check = FreshnessCheck(Storage(info.get("images", [])), prefix, args["freshness_policy"], views.for_layer)

        keys = {}
        try:
            if args["compute_keys"]:
                keys = compute_keys(graph, role_index, lambda name: self._layer_vars(hosts, name, own_raw, graph),
                                    seal_role=SEAL_ROLE, settle=check.settle if check else None,
                                    variables_cache=controller_cache_dir(VARIABLES_CACHE))
            planned = self._plan(graph, keys, existing, prefix, args["check_storage"], role_index, check)
        except ValueError as exc:
            if isinstance(exc, LayerSpecError):
                raise
            # The archive cannot be read (ArchiveError names the layer, source and suite), or a label is malformed.
            raise PlanError(f"freshness check (hpc_stateless_freshness_policy {args['freshness_policy']}): {exc}") from exc
        finally:
            self._drop_check_cache()
        if check is not None:
            network: dict[str, str] = {}
            for view in views.loaded if views else []:
                network.update(view.network)
            planned["freshness"] = {"policy": args["freshness_policy"], "warnings": check.warnings,
                                    "seconds": round(check.seconds, 3), "network": network}
            if check.warnings:
                planned["warnings"] = list(check.warnings)
        for entry in planned["layers"].values():
            if "cached" in entry:
                # Whether <prefix>/<layer>:latest names the image of the current configuration (build.yml moves it).
                entry["latest"] = image_ref(prefix, entry["name"], LATEST_TAG)
                entry["latest_current"] = bool(entry["cached"] and image_ids.get(entry["latest"]) == image_ids[entry["image"]])
        if args["since"] is not None or args["changed_files"] is not None:
            if not args["compute_keys"]:
                raise PlanError("since/changed_files need compute_keys=true: changes are mapped "
                                "through the variables each layer's key covers")
            planned["changes"] = self._changes(args, graph, keys, role_index, task_vars,
                                               check.archive_reasons() if check else {})
        planned["git_commit"] = describe_work_tree(project)
        if keys:
            planned.update(self._versions(graph, keys, role_index, hosts, project))
        planned["project_dir"] = project
        planned["image_prefix"] = prefix
        planned["changed"] = False
        return planned

    def _layer_listing(self, task_vars: dict[str, Any]) -> dict[str, Any]:
        """The layer images and working containers of the build host (module hpc.stateless.layer_info). When the
        build host is the controller (a local connection, no become, no task environment), the same function runs
        here instead of in a module process: the answer is the same, without the module's start-up."""
        if not runs_in_this_process(self):
            return self._execute_module(module_name="hpc.stateless.layer_info", module_args={}, task_vars=task_vars)
        try:
            return layer_listing(Buildah())
        except ProcessError as exc:
            return {"failed": True, "msg": str(exc)}

    def _archive_options(self, args: dict[str, Any]) -> dict[str, Any]:
        """Where the archive view caches what it reads. In check mode the plan writes nothing: the view reads a
        private copy of the cache (hard links: the cache's files are replaced by rename, never written in place)."""
        cache_dir = args["freshness_cache_dir"] or None
        self._check_cache = None
        if self._task.check_mode:
            source = cache_dir or default_cache_dir()
            self._check_cache = tempfile.mkdtemp(prefix="hpc-stateless-archive-check-")
            cache_dir = os.path.join(self._check_cache, "archive")
            if os.path.isdir(source):
                shutil.copytree(source, cache_dir, copy_function=os.link,
                                ignore=shutil.ignore_patterns("lock"))
        # A plan that waits for another run's read of the archive cache says so when its wait begins.
        return {"on_wait": display.warning, **({"cache_dir": cache_dir} if cache_dir else {})}

    def _drop_check_cache(self) -> None:
        if self._check_cache:
            shutil.rmtree(self._check_cache, ignore_errors=True)
            self._check_cache = None

    def _versions(self, graph: LayerGraph, keys: dict[str, Any], role_index: RoleIndex, hosts: LayerHosts,
                  project: str) -> dict[str, Any]:
        """Each image's default version (_contract/versions.py) and why it is named so."""
        extra = set(load_extra_vars(self._loader))
        versions, notes = {}, {}
        for image, spec in graph.images.items():
            chain = [*graph.ancestors(spec["layer"]), spec["layer"]]
            # A collection's role (FQCN) is versioned by the collection's release, pinned by the project (a
            # requirements file): not an input that must lie in the repository. Had it changed under the same
            # commit, pack would refuse the version's other build, loudly.
            roles = {role_index.path(role) for layer in chain for role in keys[layer].roles
                     if _role_ref(role, role_index) != role}
            describe, inexact = version_facts(project, [*hosts.source_paths(), *roles])
            covered = sorted(name for name in extra if any(name in keys[layer].variables for layer in chain))
            if not inexact and covered:
                inexact = f"extra variables set {', '.join(covered)}, which the layer keys cover"
            moved = rebuilt_for_updates(chain, keys)
            if not inexact and moved:
                # The commit's first build may already be packed under the describe: this one differs.
                inexact = f"layer {', '.join(moved)} was rebuilt for archive updates"
            facts = VersionFacts(describe, inexact)
            try:
                versions[image] = default_version(facts, keys[spec["layer"]].key)
                notes[image] = version_note(facts)
            except ValueError as exc:  # a tag name that is no version name: the build goes on, pack names it
                versions[image] = None
                notes[image] = f"image {image}: {exc}; set hpc_stateless_pack_version"
        return {"versions": versions, "version_notes": notes}

    def _project_roles(self, args: dict[str, Any], task_vars: dict[str, Any]) -> tuple[str, RoleIndex]:
        """The project directory (module_utils/_project.py, as the hpc.stateless.project_dir lookup
        computes it) and the role index searching the project's roles before roles_path."""
        override = task_vars.get("hpc_stateless_project_dir")
        if override:
            override = self._templar.template(override)
        playbooks = context.CLIARGS.get("args") or ()
        playbook_dir = task_vars.get("playbook_dir")
        cwd = os.getcwd()
        project = project_dir(override, playbooks, playbook_dir, cwd)
        search = [*args["role_paths"], *role_search_paths(project, playbooks, playbook_dir, cwd), *C.DEFAULT_ROLES_PATH]
        role_index = RoleIndex(
            search_paths=list(dict.fromkeys(os.path.abspath(p) for p in search)),
            collections_paths=[_OWN_COLLECTIONS_ROOT, *C.COLLECTIONS_PATHS],
        )
        return project, role_index

    def _changes(self, args: dict[str, Any], graph: LayerGraph, keys: dict[str, Any],
                 role_index: RoleIndex, task_vars: dict[str, Any],
                 archive_reasons: dict[str, list[str]]) -> dict[str, Any]:
        """Map changed files to the layers to rebuild (plugins/module_utils/_layers/change_plan.py)."""
        sources = [os.path.realpath(s) for s in task_vars.get("ansible_inventory_sources") or []
                   if isinstance(s, str) and os.path.exists(s)]
        start = args["repo"] or (os.path.dirname(sources[0]) if sources and os.path.isfile(sources[0])
                                 else sources[0] if sources else os.getcwd())
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
            return found or layer_host_groups(graph.spec(layer))

        facts = layer_facts(graph, keys, role_index.path, repository.root, groups_for)
        plan = plan_changes(graph, facts, changed, reader, variable_changes=args["variable_changes"],
                            playbook_changes=args["playbook_changes"],
                            build_playbooks=args["build_playbooks"], inventory_sources=inventory_sources,
                            image_types=args["image_types"], archive_reasons=archive_reasons)
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
    def _layer_vars(hosts: LayerHosts, layer: str, own_raw: dict[str, Any], graph: LayerGraph) -> dict[str, Any]:
        """Raw variables the layer's inventory host will see while it is built."""
        spec = graph.spec(layer)
        return hosts.build_vars(layer, layer_host_groups(spec), spec.get("vars", {}), own_raw)

    @staticmethod
    def _plan(graph: LayerGraph, keys: dict[str, Any], existing: set[str],
              prefix: str, storage_checked: bool, role_index: RoleIndex,
              check: FreshnessCheck | None = None) -> dict[str, Any]:
        layers = {}
        stale = []
        for depth, level in enumerate(graph.levels()):
            for name in level:
                spec = graph.spec(name)
                parent = graph.parent(name)
                entry = {
                    "name": name,
                    "parent": parent,
                    # The root layer of the chain: its bootstrap_image is the layer's distribution as bootstrapped.
                    "root": (graph.ancestors(name) or [name])[0],
                    "depth": depth,
                    "roles": spec["roles"],
                    # What build_layer.yml includes: the directory the key hashed for a plain name
                    # (found in the project's roles/ or roles_path), the FQCN for a collection's role.
                    "role_refs": [_role_ref(role, role_index) for role in spec["roles"]],
                    "groups": spec["groups"],
                    "host_groups": layer_host_groups(spec),
                    "vars": spec["vars"],
                    "bootstrap": spec.get("bootstrap"),
                    "arch": spec["arch"],
                    # The layer as hpc_stateless_layers names it (base for base-arm64: docs/arch.md).
                    "origin": graph.origin(name)[0],
                }
                if name in keys:
                    key = keys[name].key
                    parent_key = keys[parent].key if parent else None
                    entry.update(
                        key=key,
                        inputs_key=keys[name].inputs_key or key,
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
                        bootstrap_key = bootstrap_inputs_key = layer_key(None, {"bootstrap": spec["bootstrap"]}, [], {})
                        bootstrap_prefix = f"{prefix.rstrip('/')}/bootstrap"
                        if check is not None and not check.verdicts[name].cached:
                            # The root rebuilds: its bootstrapped root is asked whether the archive moved too.
                            bootstrap = check.settle_bootstrap(name, bootstrap_inputs_key)
                            bootstrap_key = bootstrap.key
                            entry["bootstrap_freshness"] = bootstrap.as_dict()
                        entry.update(
                            bootstrap_key=bootstrap_key,
                            bootstrap_inputs_key=bootstrap_inputs_key,
                            bootstrap_prefix=bootstrap_prefix,
                            bootstrap_image=image_ref(bootstrap_prefix, name, bootstrap_key),
                        )
                        entry["parent_image"] = entry["bootstrap_image"]
                    if storage_checked:
                        entry["cached"] = entry["image"] in existing
                        if not entry["cached"]:
                            stale.append(name)
                            entry["why"] = check.verdicts[name].reason if check else "not built"
                        if check is not None:
                            entry["freshness"] = check.verdicts[name].as_dict()
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
            # Every layer's normalised spec, one per architecture (what a stage that reads a layer's chain by the
            # plan's names, such as pack's apt sources, takes instead of hpc_stateless_layers).
            "layer_specs": {name: graph.spec(name) for name in order},
            "leaves": sorted(graph.leaves()),
            # True once build.yml's last play recorded this plan as built (filter plan_after_build).
            "after_build": False,
        }
