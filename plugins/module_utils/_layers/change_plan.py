# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Map changed files of the configuration repository to the layers they affect.

Given the layer DAG, what each layer is made of (:class:`LayerFacts`: its applied
roles, the variables its content key covers, the groups its build host is in) and a
list of changed files, decide per layer whether it must be rebuilt and why:

* a file of a role a layer applies (directly, through ``meta/main.yml`` dependencies
  or a static ``include_role``/``import_role``) -> that layer, unless the file never
  enters the role's digest (README, ``molecule/``, ``tests/``...);
* a build playbook -> every layer it builds;
* an inventory variable file (``group_vars``/``host_vars``, YAML inventory sources) ->
  the values of both revisions are compared, and only layers whose content key covers a
  variable whose value changed (as their build host sees it) are rebuilt; a
  comment-only edit rebuilds nothing. ``variable_changes="files"`` is the seed paper's
  behaviour instead: every variable of a changed file counts as changed;
* a layer definition (``hpc_stateless_layers``) -> compared layer by layer: the keyed
  part (parent, bootstrap, roles, groups) or a ``vars`` entry the key covers;
  the description alone rebuilds nothing;
* a layer whose packages moved in the archive (the plan's freshness check, given as ``archive_reasons``);
* a rebuilt layer rebuilds every layer below it.

Pure Python: file contents come through a :class:`RevisionReader` (git in production,
a dict in tests and benchmarks). Inventory files are read by ``_layers/scope.py``; the plan
is shown by ``_layers/render.py`` (table, DOT) and turned into a GitLab CI pipeline by
``_ci/gitlab.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import (
    _excluded_from_digest,
    canonical_value,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import (
    IMAGES_VAR,
    LAYERS_VAR,
    LayerGraph,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.scope import (
    ChangePlanError,
    files_by_scope,
    inventory_source_scopes,
    is_yaml_inventory,
    load_vars_file,
    vars_file_scope,
)

REBUILD = "rebuild"
REUSE = "reuse"

VARIABLE_CHANGE_MODES = ("values", "files")
PLAYBOOK_CHANGE_MODES = ("rebuild", "ignore")

#: Playbooks (repository-relative) that build layers: changing one changes how every layer is built.
DEFAULT_BUILD_PLAYBOOKS = ("playbooks/build.yml", "playbooks/layer.yml", "playbooks/tasks/build_layer.yml")

#: Group every layer build host is in (playbooks/build.yml adds it).
LAYER_HOSTS_GROUP = "hpc_stateless_layers"

# Keys of a layer spec that never reach its content key.
_UNKEYED_SPEC_KEYS = ("vars", "description")


# --------------------------------------------------------------------------- inputs


@dataclasses.dataclass(frozen=True)
class LayerFacts:
    """What one layer is made of, as far as changes are concerned.

    ``role_dirs`` maps a repository-relative role directory to the role name, for
    every role in the layer's closure that lives in the repository; ``variables`` are
    the names the layer's key covers (``LayerKey.variables``); ``groups`` are the
    inventory groups whose variables its build host sees (``all`` included);
    ``own_vars`` are the names its spec ``vars`` set (they win over the inventory).
    """

    name: str
    parent: str | None
    role_dirs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    variables: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset({"all", LAYER_HOSTS_GROUP})
    own_vars: frozenset[str] = frozenset()


class RevisionReader(Protocol):
    """File contents at the base revision and in the work tree (None = absent)."""

    base_label: str | None

    def base(self, path: str) -> str | None:
        """Content at the base revision."""

    def head(self, path: str) -> str | None:
        """Content in the work tree."""

    def base_files(self, directory: str) -> list[str]:
        """Files below ``directory`` at the base revision."""

    def head_files(self, directory: str) -> list[str]:
        """Files below ``directory`` in the work tree."""


class DictReader:
    """In-memory :class:`RevisionReader` (tests, benchmarks); ``base=None`` means no base revision."""

    def __init__(self, head: Mapping[str, str], base: Mapping[str, str] | None = None,
                 base_label: str = "base") -> None:
        self._head = dict(head)
        self._base = dict(base) if base is not None else None
        self.base_label = base_label if base is not None else None

    def base(self, path: str) -> str | None:
        return None if self._base is None else self._base.get(path)

    def head(self, path: str) -> str | None:
        return self._head.get(path)

    @staticmethod
    def _below(files: Iterable[str], directory: str) -> list[str]:
        prefix = directory.rstrip("/") + "/" if directory else ""
        return sorted(f for f in files if f.startswith(prefix))

    def base_files(self, directory: str) -> list[str]:
        return [] if self._base is None else self._below(self._base, directory)

    def head_files(self, directory: str) -> list[str]:
        return self._below(self._head, directory)


def normalise_changed_files(repo_root: str, files: Iterable[str]) -> list[str]:
    """Repository-relative POSIX paths of ``files`` (absolute, or relative to ``repo_root``).

    Raises :class:`ChangePlanError` naming a file outside the repository.
    """
    root = os.path.realpath(repo_root)
    result: set[str] = set()
    for raw in files:
        if not isinstance(raw, str) or not raw.strip():
            raise ChangePlanError("changed_files", f"expected a non-empty path, got {raw!r}")
        path = raw.strip()
        absolute = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
        # resolve symlinked directories on the way, but not a (possibly deleted) last component
        absolute = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
        if absolute != root and not absolute.startswith(root + os.sep):
            raise ChangePlanError(
                path, f"changed file is outside the repository {root}: list files of this repository only"
            )
        rel = os.path.relpath(absolute, root).replace(os.sep, "/")
        if rel == ".":
            raise ChangePlanError(path, "names the repository itself, not a file")
        result.add(rel)
    return sorted(result)


def layer_facts(
    graph: LayerGraph,
    keys: Mapping[str, Any],
    role_path: Callable[[str], str],
    repo_root: str,
    groups_for: Callable[[str], Iterable[str]] | None = None,
) -> dict[str, LayerFacts]:
    """Build :class:`LayerFacts` for every layer from its computed key (``compute_keys``).

    ``role_path`` is ``RoleIndex.path``; roles outside ``repo_root`` cannot change in
    this repository and are left out. ``groups_for(layer)`` returns the inventory groups
    of the layer's build host; default: ``all``, ``hpc_stateless_layers`` and its spec groups.
    """
    root = os.path.realpath(repo_root)
    facts: dict[str, LayerFacts] = {}
    for name in graph.order():
        spec = graph.spec(name)
        role_dirs: dict[str, str] = {}
        seal = keys[name].seal  # the role of the seal the build runs after the layer's roles is keyed too
        for role in [*keys[name].roles, *([seal] if seal else [])]:
            real = os.path.realpath(role_path(role))
            if real.startswith(root + os.sep):
                role_dirs[os.path.relpath(real, root).replace(os.sep, "/")] = role
        if groups_for is None:
            groups = {"all", LAYER_HOSTS_GROUP, *spec["groups"]}
        else:
            groups = {"all", *groups_for(name)}
        facts[name] = LayerFacts(
            name=name,
            parent=spec["parent"],
            role_dirs=role_dirs,
            variables=frozenset(keys[name].variables),
            groups=frozenset(groups),
            own_vars=frozenset(spec["vars"]),
        )
    return facts


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class FileChange:
    """One changed file: its kind, the layers it rebuilds directly, and why."""

    path: str
    kind: str  # role | playbook | inventory | other
    layers: list[str] = dataclasses.field(default_factory=list)
    detail: str = ""


@dataclasses.dataclass
class LayerDecision:
    name: str
    action: str = REUSE
    reasons: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    images: list[str] = dataclasses.field(default_factory=list)
    parent: str | None = None
    depth: int = 0

    @property
    def why(self) -> str:
        if self.reasons:
            return "; ".join(self.reasons)
        if self.notes:
            return "; ".join(self.notes)
        return "no change reaches it"


@dataclasses.dataclass
class ChangePlan:
    """The planner's answer; :meth:`as_dict` is its JSON form."""

    base: str | None
    variable_changes: str
    files: list[FileChange]
    layers: dict[str, LayerDecision]  # build order
    images: dict[str, dict[str, Any]]
    removed_layers: list[str] = dataclasses.field(default_factory=list)

    @property
    def rebuild(self) -> list[str]:
        return [n for n, d in self.layers.items() if d.action == REBUILD]

    @property
    def reuse(self) -> list[str]:
        return [n for n, d in self.layers.items() if d.action == REUSE]

    def as_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "variable_changes": self.variable_changes,
            "changed_files": [f.path for f in self.files],
            "files": [dataclasses.asdict(f) for f in self.files],
            "layers": {
                n: {"action": d.action, "why": d.why, "reasons": d.reasons, "notes": d.notes,
                    "images": d.images, "parent": d.parent, "depth": d.depth}
                for n, d in self.layers.items()
            },
            "rebuild": self.rebuild,
            "reuse": self.reuse,
            "removed_layers": self.removed_layers,
            "images": self.images,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- value comparison


def _comparable(value: Any) -> Any:
    """Canonical value that also tells ``!unsafe`` strings (never templated) from plain ones."""
    if isinstance(value, str) and getattr(value, "__UNSAFE__", False):
        return {"__unsafe__": str(value)}
    if isinstance(value, Mapping):
        return {str(k): _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    return value


def _same(first: Any, second: Any) -> bool:
    return canonical_value(_comparable(first)) == canonical_value(_comparable(second))


# --------------------------------------------------------------------------- planner


class _Planner:
    def __init__(self, graph: LayerGraph, facts: Mapping[str, LayerFacts], reader: RevisionReader | None,
                 variable_changes: str, playbook_changes: str, build_playbooks: Iterable[str],
                 inventory_sources: Iterable[str]) -> None:
        if variable_changes not in VARIABLE_CHANGE_MODES:
            raise ChangePlanError("variable_changes", f"must be one of {', '.join(VARIABLE_CHANGE_MODES)}")
        if playbook_changes not in PLAYBOOK_CHANGE_MODES:
            raise ChangePlanError("playbook_changes", f"must be one of {', '.join(PLAYBOOK_CHANGE_MODES)}")
        self.graph = graph
        self.facts = facts
        self.reader = reader
        self.has_base = reader is not None and reader.base_label is not None
        self.variable_changes = variable_changes
        self.playbook_changes = playbook_changes
        self.build_playbooks = set(build_playbooks)
        self.inventory_sources = set(inventory_sources)
        self.order = graph.order()
        # role directory -> layers applying it
        self.role_layers: dict[str, list[str]] = {}
        for name in self.order:
            for role_dir in facts[name].role_dirs:
                self.role_layers.setdefault(role_dir, []).append(name)
        self.role_names = {
            role_dir: sorted({facts[n].role_dirs[role_dir] for n in layers}) for role_dir, layers in self.role_layers.items()
        }
        # dicts as ordered sets: thousands of changed files may give the same reason
        self.reasons: dict[str, dict[str, None]] = {n: {} for n in self.order}
        self.notes: dict[str, dict[str, None]] = {n: {} for n in self.order}
        # layer -> role -> changed files of the role (summarised into one reason per role)
        self.role_files: dict[str, dict[str, list[str]]] = {n: {} for n in self.order}
        self.removed: list[str] = []
        self._listings: dict[tuple[str, str], dict[str, list[str]]] = {}

    # ---- helpers
    def _hit(self, layer: str, reason: str) -> None:
        if layer in self.reasons:
            self.reasons[layer][reason] = None

    def add_reason(self, layer: str, reason: str) -> None:
        """A reason to rebuild ``layer`` that no changed file gives (the archive moved)."""
        self._hit(layer, reason)

    def _note(self, layer: str, note: str) -> None:
        if layer in self.notes:
            self.notes[layer][note] = None

    def _role_reasons(self, layer: str) -> list[str]:
        reasons = []
        for role, paths in self.role_files[layer].items():
            more = f" and {len(paths) - 1} more file{'s' if len(paths) > 2 else ''}" if len(paths) > 1 else ""
            reasons.append(f"role {role} changed ({paths[0]}{more})")
        return reasons

    def _text(self, which: str, path: str) -> str | None:
        if self.reader is None:
            raise ChangePlanError(path, "cannot read the file: no revision reader given")
        return self.reader.base(path) if which == "base" else self.reader.head(path)

    def _label(self, which: str) -> str:
        return (self.reader.base_label or "base") if which == "base" else "the work tree"

    # ---- classification
    def _role_dir_of(self, path: str) -> str | None:
        directory = posixpath.dirname(path)
        while directory:
            if directory in self.role_layers:
                return directory
            directory = posixpath.dirname(directory)
        return None

    def classify(self, path: str) -> FileChange:
        role_dir = self._role_dir_of(path)
        if role_dir is not None:
            return self._role_change(path, role_dir)
        if path in self.build_playbooks:
            return self._playbook_change(path)
        if vars_file_scope(path) is not None or path in self.inventory_sources:
            return FileChange(path, "inventory")  # resolved per scope in _variables()
        parts = path.split("/")
        if "roles" in parts[:-2]:
            return FileChange(path, "role", detail="role not applied by any layer")
        return FileChange(path, "other", detail="not part of any layer")

    def _role_change(self, path: str, role_dir: str) -> FileChange:
        rel = path[len(role_dir) + 1:]
        parts = rel.split("/")
        excluded = _excluded_from_digest(rel, False) or any(
            _excluded_from_digest("/".join(parts[:i]), True) for i in range(1, len(parts))
        )
        layers = self.role_layers[role_dir]
        roles = self.role_names[role_dir]
        if excluded:
            for layer in layers:
                self._note(layer, f"{path} is not part of role {roles[0]}'s content")
            return FileChange(path, "role", [], f"role {', '.join(roles)}: file not in the role's content key")
        for layer in layers:
            self.role_files[layer].setdefault(self.facts[layer].role_dirs[role_dir], []).append(path)
        return FileChange(path, "role", list(layers), f"role {', '.join(roles)}")

    def _playbook_change(self, path: str) -> FileChange:
        if self.playbook_changes == "ignore":
            for layer in self.order:
                self._note(layer, f"build playbook {path} changed (ignored)")
            return FileChange(path, "playbook", [], "build playbook; playbook_changes=ignore")
        for layer in self.order:
            self._hit(layer, f"build playbook {path} changed")
        return FileChange(path, "playbook", list(self.order), "builds every layer")

    # ---- variables
    def _scope_values(self, which: str, vars_dir: str, name: str) -> dict[str, Any]:
        """Variables of one group/host, its files merged in load order (later files win)."""
        if (which, vars_dir) not in self._listings:
            files = self.reader.base_files(vars_dir) if which == "base" else self.reader.head_files(vars_dir)
            self._listings[(which, vars_dir)] = files_by_scope(files, vars_dir)
        merged: dict[str, Any] = {}
        for path in self._listings[(which, vars_dir)].get(name, []):
            text = self._text(which, path)
            if text is not None:
                merged.update(load_vars_file(text, path, self._label(which)))
        return merged

    def _inventory_source_values(self, which: str, path: str) -> tuple[dict, dict]:
        text = self._text(which, path)
        if text is None:
            return {}, {}
        return inventory_source_scopes(text, path, self._label(which))

    def _changed_names(self, base: Mapping[str, Any], head: Mapping[str, Any]) -> set[str]:
        if self.variable_changes == "files" or not self.has_base:
            return set(base) | set(head)
        return {n for n in set(base) | set(head)
                if n not in base or n not in head or not _same(base[n], head[n])}

    def _layers_seeing(self, kind: str, name: str) -> list[str]:
        if kind == "host":
            return [name] if name in self.facts else []
        return [n for n in self.order if name in self.facts[n].groups]

    def _apply_variable_changes(self, changed: set[str], kind: str, name: str, where: str,
                                change: FileChange) -> None:
        for special in (LAYERS_VAR, IMAGES_VAR):
            changed.discard(special)
        if not changed:
            return
        for layer in self._layers_seeing(kind, name):
            facts = self.facts[layer]
            hits = sorted((changed & facts.variables) - facts.own_vars)
            if hits:
                verb = "changed" if self.variable_changes == "values" and self.has_base else "in changed file"
                self._hit(layer, f"variable {', '.join(hits)} {verb} ({where})")
                if layer not in change.layers:
                    change.layers.append(layer)

    def variables(self, inventory_changes: list[FileChange]) -> None:
        by_path = {c.path: c for c in inventory_changes}
        scopes: dict[tuple[str, str, str], list[str]] = {}
        for change in inventory_changes:
            scope = vars_file_scope(change.path)
            if scope is not None:
                scopes.setdefault(scope, []).append(change.path)
        layer_values: list[tuple[Any, Any, str]] = []
        for (vars_dir, kind, name), paths in sorted(scopes.items()):
            head = self._scope_values("head", vars_dir, name)
            base = self._scope_values("base", vars_dir, name) if self.has_base else {}
            where = ", ".join(paths)
            changed = self._changed_names(base, head)
            if LAYERS_VAR in changed or IMAGES_VAR in changed:
                layer_values.append((base, head, where))
            first = by_path[paths[0]]
            first.detail = f"{kind} {name}: " + (", ".join(sorted(changed)) or "no variable changed value")
            self._apply_variable_changes(set(changed), kind, name, where, first)
            for other in paths[1:]:
                by_path[other].detail = f"see {paths[0]}"
        for path in sorted(p for p in by_path if p in self.inventory_sources):
            change = by_path[path]
            if not is_yaml_inventory(path):
                for layer in self.order:
                    self._hit(layer, f"inventory source {path} changed (not YAML: cannot compare values)")
                change.layers = list(self.order)
                change.detail = "not a YAML inventory: every layer rebuilds"
                continue
            head_scopes, head_members = self._inventory_source_values("head", path)
            base_scopes, base_members = (self._inventory_source_values("base", path) if self.has_base
                                         else ({}, {}))
            details = []
            for kind, name in sorted(set(head_scopes) | set(base_scopes)):
                base, head = base_scopes.get((kind, name), {}), head_scopes.get((kind, name), {})
                changed = self._changed_names(base, head)
                if LAYERS_VAR in changed or IMAGES_VAR in changed:
                    layer_values.append((base, head, path))
                if changed:
                    details.append(f"{kind} {name}: {', '.join(sorted(changed))}")
                self._apply_variable_changes(set(changed), kind, name, path, change)
            for host in sorted(set(head_members) | set(base_members)):
                if host in self.facts and head_members.get(host) != base_members.get(host):
                    self._hit(host, f"inventory groups of host {host} changed ({path})")
                    change.layers.append(host)
            change.detail = "; ".join(details) or "no variable changed value"
        for base, head, where in layer_values:
            self._layer_definitions(base.get(LAYERS_VAR), head.get(LAYERS_VAR), where, by_path)
            self._image_definitions(base.get(IMAGES_VAR), head.get(IMAGES_VAR), where)

    def _layer_definitions(self, base: Any, head: Any, where: str, by_path: Mapping[str, FileChange]) -> None:
        if base == head:
            return
        base = base if isinstance(base, Mapping) else {}
        head = head if isinstance(head, Mapping) else {}
        change = by_path[where.split(", ")[0]]
        for name in self.order:
            if name not in head:
                continue  # defined elsewhere; its own file decides
            if not self.has_base or name not in base:
                reason = ("layer definition in changed file" if not self.has_base else "new layer") + f" ({where})"
                self._hit(name, reason)
                if name not in change.layers:
                    change.layers.append(name)
                continue
            old, new = base[name], head[name]
            if _same(old, new):
                continue
            old = old if isinstance(old, Mapping) else {}
            new = new if isinstance(new, Mapping) else {}
            keyed = sorted(k for k in set(old) | set(new)
                           if k not in _UNKEYED_SPEC_KEYS and not _same(old.get(k), new.get(k)))
            old_vars = old.get("vars") if isinstance(old.get("vars"), Mapping) else {}
            new_vars = new.get("vars") if isinstance(new.get("vars"), Mapping) else {}
            changed_vars = {v for v in set(old_vars) | set(new_vars)
                            if v not in old_vars or v not in new_vars or not _same(old_vars[v], new_vars[v])}
            covered = sorted(changed_vars & self.facts[name].variables)
            if keyed:
                self._hit(name, f"layer definition changed: {', '.join(keyed)} ({where})")
            if covered:
                self._hit(name, f"layer vars changed: {', '.join(covered)} ({where})")
            if keyed or covered:
                if name not in change.layers:
                    change.layers.append(name)
            else:
                what = sorted(k for k in ("description", "vars") if not _same(old.get(k), new.get(k)))
                self._note(name, f"layer definition changed ({', '.join(what)}) but not its content key")
        self.removed = sorted(set(self.removed) | (set(base) - set(head) - set(self.order)))

    def _image_definitions(self, base: Any, head: Any, where: str) -> None:
        if base == head:
            return
        base = base if isinstance(base, Mapping) else {}
        head = head if isinstance(head, Mapping) else {}
        for image in sorted(set(base) | set(head)):
            if not _same(base.get(image), head.get(image)):
                layer = (head.get(image) or {}).get("layer") if isinstance(head.get(image), Mapping) else None
                if layer in self.notes:
                    self._note(layer, f"image {image} definition changed ({where}): repack only")

    # ---- result
    def decide(self, changed_files: list[str], image_types: Iterable[str] | None) -> ChangePlan:
        files = [self.classify(path) for path in changed_files]
        self.variables([f for f in files if f.kind == "inventory"])
        images = self.graph.images
        selected = set(image_types) if image_types else None
        if selected is not None:
            unknown = sorted(selected - set(images))
            if unknown:
                raise ChangePlanError(
                    "image_types", f"unknown image {', '.join(unknown)} (known images: {', '.join(sorted(images))})"
                )
        image_chain = {i: [*self.graph.ancestors(spec["layer"]), spec["layer"]] for i, spec in images.items()}
        layer_images: dict[str, list[str]] = {n: [] for n in self.order}
        for image, chain in sorted(image_chain.items()):
            for layer in chain:
                layer_images[layer].append(image)
        wanted = None
        if selected is not None:
            wanted = {layer for i in selected for layer in image_chain[i]}
        decisions: dict[str, LayerDecision] = {}
        depth: dict[str, int] = {}
        for name in self.order:
            parent = self.facts[name].parent
            depth[name] = 0 if parent is None else depth[parent] + 1
            decision = LayerDecision(name, reasons=self._role_reasons(name) + list(self.reasons[name]),
                                     notes=list(self.notes[name]),
                                     images=layer_images[name], parent=parent, depth=depth[name])
            if parent is not None and decisions[parent].action == REBUILD:
                decision.reasons.append(f"parent {parent} rebuilds")
            if decision.reasons:
                decision.action = REBUILD
            if wanted is not None and name not in wanted and decision.action == REBUILD:
                decision.action = REUSE
                decision.notes.insert(0, f"not part of image types {', '.join(sorted(selected))} "
                                         f"(would rebuild: {'; '.join(decision.reasons)})")
                decision.reasons = []
            decisions[name] = decision
        image_plan = {}
        for image, chain in sorted(image_chain.items()):
            rebuilt = [layer for layer in chain if decisions[layer].action == REBUILD]
            image_plan[image] = {
                "layer": images[image]["layer"],
                "chain": chain,
                "rebuild": rebuilt,
                "start": rebuilt[0] if rebuilt else None,
                "selected": selected is None or image in selected,
            }
        return ChangePlan(
            base=self.reader.base_label if self.has_base else None,
            variable_changes=self.variable_changes,
            files=files,
            layers=decisions,
            images=image_plan,
            removed_layers=self.removed,
        )


def plan_changes(
    graph: LayerGraph,
    facts: Mapping[str, LayerFacts],
    changed_files: Iterable[str],
    reader: RevisionReader | None = None,
    variable_changes: str = "values",
    playbook_changes: str = "rebuild",
    build_playbooks: Iterable[str] = DEFAULT_BUILD_PLAYBOOKS,
    inventory_sources: Iterable[str] = (),
    image_types: Iterable[str] | None = None,
    archive_reasons: Mapping[str, Iterable[str]] | None = None,
) -> ChangePlan:
    """Decide per layer of ``graph`` whether ``changed_files`` (repository-relative) rebuild it.

    ``reader`` gives file contents for variable files (``reader.base_label`` None: no
    base revision, so every variable of a changed file counts as changed).
    ``inventory_sources`` are repository-relative inventory files (inline variables).
    ``image_types`` restricts the rebuild to the layers of those images.
    ``archive_reasons`` are reasons no file gives: layers whose packages moved in the archive
    (_layers/freshness.py ``FreshnessCheck.archive_reasons``); they rebuild, and their children with them.
    Raises :class:`ChangePlanError` naming the file or revision at fault.
    """
    missing = [n for n in graph.order() if n not in facts]
    if missing:
        raise ChangePlanError("facts", f"no layer facts for {', '.join(missing)}")
    planner = _Planner(graph, facts, reader, variable_changes, playbook_changes, build_playbooks,
                       inventory_sources)
    for layer, reasons in (archive_reasons or {}).items():
        for reason in reasons:
            planner.add_reason(layer, reason)
    return planner.decide(sorted(set(changed_files)), image_types)
