# -*- coding: utf-8 -*-
# Copyright (c) 2025, hpc.stateless developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layer DAG of hpc.stateless: validate ``hpc_stateless_layers`` and
``hpc_stateless_images`` and answer questions about their structure.

Pure Python, standard library only: no I/O. Each layer has at most one parent, so the DAG is a forest and
its queries are a few lines each (networkx, which answered them before, cost 0.15 s to import in every
process that planned). Every invalid input raises :class:`LayerSpecError` whose
message starts with the dotted path of the offending key. The schema itself (variable names,
keys, kinds, distros, tools) is _contract/inventory.py.
"""

from __future__ import annotations

import copy
import difflib
import heapq
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    DEFAULT_FORMATS as DEFAULT_IMAGE_FORMATS,
    FORMATS as IMAGE_FORMATS,
    ArtifactError,
    check_name as check_artifact_name,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import (
    ARCHITECTURES,
    host_arch as build_host_arch,
    variant_name,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import (
    ANSIBLE_BINDINGS,
    ARCH_KEY,
    BOOTSTRAP_FROM_LAYER,
    BOOTSTRAP_KEYS,
    BOOTSTRAP_REQUIRED,
    BOOTSTRAP_TOOLS,
    IMAGES_VAR,
    KIND_BOOL,
    KIND_PATH,
    KIND_STRING,
    LAYER_KEYS,
    LAYER_NAME_PATTERN as NAME_PATTERN,
    LAYERS_VAR,
    PROFILE_KEYS as HARDWARE_PROFILE_KEYS,
    ROLE_ENTRY_KEYS,
    SUPPORTED_DISTROS,
    type_name,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import (
    DEBIAN_STYLE_MIRRORS,
    SourceSpecError,
    check_bootstrap_sources,
    normalise_extra_sources,
    suite_default,
)


class LayerSpecError(ValueError):
    """Invalid layer/image/role input; ``path`` is the dotted key (or file) at fault."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem

    def __reduce__(self):  # keep the two-argument constructor picklable
        return (type(self), (self.path, self.problem))

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem


def bootstrap_tool(distro: str) -> str:
    """Return the bootstrap tool family ("debootstrap", "dnf", "zypper") for ``distro``."""
    try:
        return SUPPORTED_DISTROS[distro]
    except KeyError:
        raise LayerSpecError("distro", _unknown_distro(distro)) from None


def _unknown_distro(distro: object) -> str:
    return f"unsupported distro {distro!r} (supported: {', '.join(sorted(SUPPORTED_DISTROS))})"


def _expect_string(path: str, value: object, hint: str = "") -> str:
    if not isinstance(value, str):
        suffix = f" ({hint})" if hint else ""
        raise LayerSpecError(path, f"expected a string, got {type_name(value)}{suffix}")
    return value


def _expect_mapping(path: str, value: object) -> Mapping:
    if not isinstance(value, Mapping):
        raise LayerSpecError(path, f"expected a mapping, got {type_name(value)}")
    return value


def _expect_list(path: str, value: object) -> list:
    if not isinstance(value, (list, tuple)):
        raise LayerSpecError(path, f"expected a list, got {type_name(value)}")
    return list(value)


def _expect_strings(path: str, value: object) -> list[str]:
    items = _expect_list(path, value)
    return [_expect_string(f"{path}[{i}]", item) for i, item in enumerate(items)]


def _check_name(path: str, name: object, what: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise LayerSpecError(
            path,
            f"invalid {what} name {name!r}: must match {NAME_PATTERN.pattern} "
            f"(it becomes an image name and an inventory host)",
        )
    return name


def _check_known_keys(path: str, spec: Mapping, allowed: tuple[str, ...]) -> None:
    for key in spec:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise LayerSpecError(
                f"{path}.{key}", f"unknown key{hint} (allowed: {', '.join(sorted(allowed))})"
            )


def _normalise_bootstrap(path: str, raw: object) -> dict[str, Any]:
    if isinstance(raw, (list, tuple)):
        raise LayerSpecError(
            path, "expected one mapping, got a list: a layer bootstraps exactly one distro"
        )
    spec = _expect_mapping(path, raw)
    _check_known_keys(path, spec, tuple(BOOTSTRAP_KEYS))
    for key, layer_key in BOOTSTRAP_FROM_LAYER.items():
        if key in spec:
            layer_path = path.rsplit(".", 1)[0]
            raise LayerSpecError(f"{path}.{key}", f"is the layer's own key: move it to {layer_path}.{layer_key} "
                                                  f"(`{layer_key}: {spec[key]}`), where its child layers inherit it")
    for key in BOOTSTRAP_REQUIRED:
        if spec.get(key) in (None, ""):
            raise LayerSpecError(f"{path}.{key}", "is required")
    result: dict[str, Any] = {"packages": [], "components": [], "extra_args": []}
    for key, kind in BOOTSTRAP_KEYS.items():
        if key not in spec or spec[key] is None:
            continue
        value, key_path = spec[key], f"{path}.{key}"
        if kind in (KIND_STRING, KIND_PATH):
            hint = f"quote it: '{value}'" if isinstance(value, (int, float)) else ""
            result[key] = _expect_string(key_path, value, hint)
        elif kind == KIND_BOOL:
            if not isinstance(value, bool):
                raise LayerSpecError(key_path, f"expected a bool, got {type_name(value)}")
            result[key] = value
        elif key == "extra_args" and isinstance(value, str):
            try:
                result[key] = shlex.split(value)
            except ValueError as exc:  # e.g. an unbalanced quote
                raise LayerSpecError(key_path, f"cannot split {value!r}: {exc}") from None
        else:
            result[key] = _expect_strings(key_path, value)
    if result["distro"] not in SUPPORTED_DISTROS:
        raise LayerSpecError(f"{path}.distro", _unknown_distro(result["distro"]))
    tools = BOOTSTRAP_TOOLS[SUPPORTED_DISTROS[result["distro"]]]
    if "tool" in result and result["tool"] not in tools:
        raise LayerSpecError(f"{path}.tool", f"{result['tool']!r} cannot bootstrap {result['distro']} "
                                             f"(allowed: {', '.join(tools)})")
    try:
        check_bootstrap_sources(path, result)
    except SourceSpecError as exc:
        raise LayerSpecError(exc.path, exc.problem) from None
    binding = ANSIBLE_BINDINGS.get(SUPPORTED_DISTROS[result["distro"]])
    if binding and binding[0] in result["packages"] and binding[1] not in result["packages"]:
        # Ansible configures the layers on this root: its package module's binding comes with the interpreter.
        result["packages"] = result["packages"] + [binding[1]]
    if result["distro"] in DEBIAN_STYLE_MIRRORS:
        # The suites are keyed as resolved: a root made before the updates and security suites were on by
        # default differs from one made now.
        for key in ("updates", "security"):
            result.setdefault(key, suite_default(result["release"]))
    return result


def _normalise_arches(path: str, raw: object) -> list[str] | None:
    """A layer's or image's ``arch``: one architecture or a list of them (Debian's names), None when unset."""
    if raw is None:
        return None
    arches = [raw] if isinstance(raw, str) else _expect_strings(path, raw)
    if not arches:
        raise LayerSpecError(path, "is empty: name at least one architecture, or remove the key")
    for index, arch in enumerate(arches):
        at = path if isinstance(raw, str) else f"{path}[{index}]"
        if arch not in ARCHITECTURES:
            close = difflib.get_close_matches(arch, ARCHITECTURES, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise LayerSpecError(at, f"unknown architecture {arch!r}{hint} (Debian's names: {', '.join(ARCHITECTURES)})")
        if arch in arches[:index]:
            raise LayerSpecError(at, f"architecture {arch!r} is listed twice")
    return arches


def _normalise_role(path: str, entry: object) -> str:
    if isinstance(entry, Mapping):
        _check_known_keys(path, entry, ROLE_ENTRY_KEYS)
        names = [entry[k] for k in ROLE_ENTRY_KEYS if k in entry]
        if len(names) != 1:
            raise LayerSpecError(path, "a role entry needs exactly one of 'role' or 'name'")
        entry = names[0]
    name = _expect_string(path, entry)
    if not name.strip():
        raise LayerSpecError(path, "empty role name")
    return name


def _normalise_roles(
    path: str,
    raw: object,
    role_exists: Callable[[str], bool] | None,
    role_search_hint: str,
) -> list[str]:
    roles: list[str] = []
    for index, entry in enumerate(_expect_list(path, raw)):
        entry_path = f"{path}[{index}]"
        name = _normalise_role(entry_path, entry)
        if name in roles:
            raise LayerSpecError(entry_path, f"role {name!r} is listed twice")
        if role_exists is not None and not role_exists(name):
            searched = f" (searched: {role_search_hint})" if role_search_hint else ""
            raise LayerSpecError(entry_path, f"role {name!r} not found{searched}")
        roles.append(name)
    return roles


def _normalise_layer(
    path: str,
    raw: object,
    role_exists: Callable[[str], bool] | None,
    role_search_hint: str,
) -> dict[str, Any]:
    spec = _expect_mapping(path, raw)
    _check_known_keys(path, spec, LAYER_KEYS)
    has_parent = spec.get("parent") is not None
    has_bootstrap = spec.get("bootstrap") is not None
    if has_parent and has_bootstrap:
        raise LayerSpecError(
            path,
            "has both 'parent' and 'bootstrap'; a layer either bootstraps a distro "
            "or builds on a parent",
        )
    if not has_parent and not has_bootstrap:
        raise LayerSpecError(
            path,
            "has neither 'parent' nor 'bootstrap'; a layer either bootstraps a distro "
            "or builds on a parent",
        )
    try:
        sources = normalise_extra_sources(f"{path}.sources", spec.get("sources"))
    except SourceSpecError as exc:
        raise LayerSpecError(exc.path, exc.problem) from None
    variables = _expect_mapping(f"{path}.vars", spec.get("vars") or {})
    for key in variables:
        _expect_string(f"{path}.vars", key)
    normalised = {
        "parent": _expect_string(f"{path}.parent", spec["parent"]) if has_parent else None,
        "bootstrap": _normalise_bootstrap(f"{path}.bootstrap", spec["bootstrap"])
        if has_bootstrap
        else None,
        "roles": _normalise_roles(f"{path}.roles", spec.get("roles") or [], role_exists, role_search_hint),
        "vars": copy.deepcopy(dict(variables)),
        "groups": _expect_strings(f"{path}.groups", spec.get("groups") or []),
        "description": _expect_string(f"{path}.description", spec.get("description") or ""),
        # The architectures as written (None: the parent's, or the build host's for a root); LayerGraph.from_spec
        # resolves them and gives each layer of the expanded DAG exactly one.
        ARCH_KEY: _normalise_arches(f"{path}.{ARCH_KEY}", spec.get(ARCH_KEY)),
    }
    if sources:  # keyed (content_key.keyed_spec); absent when empty, so a layer without sources keeps its key
        normalised["sources"] = sources
    return normalised


def _normalise_kernel_args(path: str, raw: object) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    return " ".join(_expect_strings(path, raw))


def _normalise_image(path: str, raw: object, layers: Mapping[str, Any]) -> dict[str, Any]:
    spec = _expect_mapping(path, raw)
    if spec.get("layer") is None:
        raise LayerSpecError(f"{path}.layer", "is required")
    layer = _expect_string(f"{path}.layer", spec["layer"])
    if layer not in layers:
        raise LayerSpecError(
            f"{path}.layer", f"unknown layer {layer!r} (known layers: {', '.join(sorted(layers))})"
        )
    raw_formats = spec.get("formats")
    if raw_formats is None:
        raw_formats = list(DEFAULT_IMAGE_FORMATS)
    elif isinstance(raw_formats, str):
        raw_formats = [raw_formats]
    formats: list[str] = []
    for index, fmt in enumerate(_expect_strings(f"{path}.formats", raw_formats)):
        if fmt not in IMAGE_FORMATS:
            raise LayerSpecError(
                f"{path}.formats[{index}]",
                f"unknown format {fmt!r} (supported: {', '.join(IMAGE_FORMATS)})",
            )
        if fmt not in formats:
            formats.append(fmt)
    profile = spec.get("hardware_profile")
    if profile is not None:
        _check_known_keys(f"{path}.hardware_profile", _expect_mapping(f"{path}.hardware_profile", profile),
                          HARDWARE_PROFILE_KEYS)
    result = copy.deepcopy(dict(spec))  # extra keys are owned by later consumers
    result.update(
        layer=layer,
        formats=formats,
        kernel_args=_normalise_kernel_args(f"{path}.kernel_args", spec.get("kernel_args")),
    )
    result[ARCH_KEY] = _normalise_arches(f"{path}.{ARCH_KEY}", spec.get(ARCH_KEY))
    return result


def _expand_arches(specs: dict[str, dict[str, Any]], images: dict[str, dict[str, Any]],
                   host: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]],
                                       dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """One layer per (layer, architecture) and one image per (image, architecture).

    A root's architectures are its ``arch`` (default: ``host``, the build host's); a child's are its parent's,
    or the ones it names among them. The first architecture a layer or image lists (or inherits) builds under the
    name as written, every other under ``<name>-<arch>`` (_contract/arch.py ``variant_name``). An image is made
    for each architecture of its ``arch`` (default: all of its layer's). Returns the expanded layer and image specs (each with one
    ``arch``) and, for each expanded name, the (name as written, architecture) it stands for.
    """
    arches: dict[str, list[str]] = {}
    pending = sorted(specs)
    while pending:  # parents first (the input has no cycle)
        name = pending.pop(0)
        parent = specs[name]["parent"]
        if parent is not None and parent not in arches:
            pending.append(name)
            continue
        own = specs[name][ARCH_KEY]
        if parent is None:
            arches[name] = own or [host]
            continue
        if own is None:
            arches[name] = list(arches[parent])
            continue
        foreign = [arch for arch in own if arch not in arches[parent]]
        if foreign:
            raise LayerSpecError(
                f"{LAYERS_VAR}.{name}.{ARCH_KEY}",
                f"layer {name} names {', '.join(foreign)}, but its parent layer {parent} is "
                f"{', '.join(arches[parent])}: a layer builds on its parent's image, so it has its parent's "
                f"architecture; name one of {', '.join(arches[parent])} or remove {ARCH_KEY}")
        arches[name] = own

    layers: dict[str, dict[str, Any]] = {}
    layer_origin: dict[str, tuple[str, str]] = {}
    for name in sorted(specs):
        for arch in arches[name]:
            node = variant_name(name, arch, arches[name][0])
            if node != name and node in specs:
                raise LayerSpecError(f"{LAYERS_VAR}.{name}.{ARCH_KEY}",
                                     f"the {arch} layer of {name} is named {node}, which is a layer of "
                                     f"{LAYERS_VAR} already: rename that layer")
            spec = copy.deepcopy(specs[name])
            spec[ARCH_KEY] = arch
            if spec["parent"] is not None:
                spec["parent"] = variant_name(spec["parent"], arch, arches[spec["parent"]][0])
            else:
                for key, layer_key in BOOTSTRAP_FROM_LAYER.items():
                    spec["bootstrap"][key] = spec[layer_key]
            layers[node] = spec
            layer_origin[node] = (name, arch)

    expanded: dict[str, dict[str, Any]] = {}
    image_origin: dict[str, tuple[str, str]] = {}
    for name in sorted(images):
        layer = images[name]["layer"]
        wanted = images[name][ARCH_KEY] or arches[layer]
        foreign = [arch for arch in wanted if arch not in arches[layer]]
        if foreign:
            raise LayerSpecError(
                f"{IMAGES_VAR}.{name}.{ARCH_KEY}",
                f"image {name} names {', '.join(foreign)}, but its layer {layer} is {', '.join(arches[layer])}: "
                f"name one of {', '.join(arches[layer])}, or add the architecture to the layer's tree")
        for arch in wanted:
            node = variant_name(name, arch, wanted[0])
            if node != name and node in images:
                raise LayerSpecError(f"{IMAGES_VAR}.{name}.{ARCH_KEY}",
                                     f"the {arch} image of {name} is named {node}, which is an image of "
                                     f"{IMAGES_VAR} already: rename that image")
            try:  # the rule of pack and deploy for the name the image is packed under
                check_artifact_name("image", node)
            except ArtifactError as exc:
                raise LayerSpecError(f"{IMAGES_VAR}.{name}", str(exc)) from None
            spec = copy.deepcopy(images[name])
            spec.update(layer=variant_name(layer, arch, arches[layer][0]), **{ARCH_KEY: arch})
            expanded[node] = spec
            image_origin[node] = (name, arch)
    return layers, expanded, layer_origin, image_origin


def _find_cycle(parents: Mapping[str, str | None]) -> list[str] | None:
    """First parent-reference cycle, starting at its smallest name, or None."""
    for start in sorted(parents):
        seen: list[str] = []
        node: str | None = start
        while node is not None and node not in seen:
            seen.append(node)
            node = parents.get(node)
        if node is not None:
            cycle = seen[seen.index(node):]
            first = cycle.index(min(cycle))
            return cycle[first:] + cycle[:first]
    return None


class LayerGraph:
    """Validated layer DAG; edges run from a parent to each child.

    Build with :meth:`from_spec`. Lists of names are sorted by name unless a
    method says it returns topological order.
    """

    def __init__(self, specs: dict[str, dict[str, Any]], images: dict[str, dict[str, Any]],
                 layer_origin: dict[str, tuple[str, str]] | None = None,
                 image_origin: dict[str, tuple[str, str]] | None = None) -> None:
        """Use :meth:`from_spec`; this constructor trusts already validated (and expanded) input."""
        self._specs = specs
        self._images = images
        self._layer_origin = layer_origin or {name: (name, spec[ARCH_KEY]) for name, spec in specs.items()}
        self._image_origin = image_origin or {name: (name, spec[ARCH_KEY]) for name, spec in images.items()}
        self._children: dict[str, list[str]] = {name: [] for name in specs}
        for name in sorted(specs):
            if specs[name]["parent"] is not None:
                self._children[specs[name]["parent"]].append(name)

    @classmethod
    def from_spec(
        cls,
        layers: Mapping[str, Any],
        images: Mapping[str, Any] | None = None,
        role_exists: Callable[[str], bool] | None = None,
        role_search_hint: str = "",
        host_arch: str | None = None,
    ) -> LayerGraph:
        """Validate ``hpc_stateless_layers`` (+ ``hpc_stateless_images``) and build the graph.

        ``role_exists`` (e.g. ``RoleIndex.exists``) checks every listed role;
        ``role_search_hint`` (e.g. ``RoleIndex.search_hint``) is quoted in the error.
        ``host_arch`` is the architecture of a root layer that names none (default: this host's).
        The graph holds one layer per layer and architecture, and one image per image and architecture
        (:func:`_expand_arches`; :meth:`arch`, :meth:`origin`, :meth:`variants`).
        Raises :class:`LayerSpecError`.
        """
        layers = _expect_mapping(LAYERS_VAR, layers)
        specs: dict[str, dict[str, Any]] = {}
        for name in sorted(layers, key=str):
            path = f"{LAYERS_VAR}.{name}"
            _check_name(path, name, "layer")
            specs[name] = _normalise_layer(path, layers[name], role_exists, role_search_hint)
        known = ", ".join(sorted(specs))
        for name, spec in specs.items():
            if spec["parent"] is not None and spec["parent"] not in specs:
                raise LayerSpecError(
                    f"{LAYERS_VAR}.{name}.parent",
                    f"unknown parent layer {spec['parent']!r} (known layers: {known})",
                )
        cycle = _find_cycle({name: spec["parent"] for name, spec in specs.items()})
        if cycle:
            raise LayerSpecError(
                LAYERS_VAR, f"cycle between layers {' -> '.join(cycle + cycle[:1])}"
            )
        normalised_images: dict[str, dict[str, Any]] = {}
        raw_images = _expect_mapping(IMAGES_VAR, images if images is not None else {})
        for name in sorted(raw_images, key=str):
            path = f"{IMAGES_VAR}.{name}"
            _check_name(path, name, "image")
            try:  # also the rule of pack and deploy: length, the boot tree's reserved names
                check_artifact_name("image", name)
            except ArtifactError as exc:
                raise LayerSpecError(path, str(exc)) from None
            normalised_images[name] = _normalise_image(path, raw_images[name], specs)
        return cls(*_expand_arches(specs, normalised_images, host_arch or build_host_arch()))

    def _check(self, name: str) -> str:
        if name not in self._specs:
            raise KeyError(f"unknown layer {name!r} (known layers: {', '.join(self.names)})")
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def names(self) -> list[str]:
        """All layer names, sorted."""
        return sorted(self._specs)

    def order(self) -> list[str]:
        """All layers in build order: parents first, ties broken by name (the smallest ready name next)."""
        ready = [name for name in self._specs if self._specs[name]["parent"] is None]
        heapq.heapify(ready)
        built: list[str] = []
        while ready:
            name = heapq.heappop(ready)
            built.append(name)
            for child in self._children[name]:
                heapq.heappush(ready, child)
        return built

    def parent(self, name: str) -> str | None:
        """The parent layer, or None for a root (bootstrap) layer."""
        return self._specs[self._check(name)]["parent"]

    def children(self, name: str) -> list[str]:
        """Layers built directly on ``name``."""
        return list(self._children[self._check(name)])

    def ancestors(self, name: str) -> list[str]:
        """Layers under ``name``, root first, not including ``name``."""
        chain: list[str] = []
        parent = self.parent(name)
        while parent is not None:
            chain.append(parent)
            parent = self._specs[parent]["parent"]
        return chain[::-1]

    def descendants(self, name: str) -> list[str]:
        """Layers built on ``name`` directly or indirectly, in build order."""
        below, todo = set(), [self._check(name)]
        while todo:
            for child in self._children[todo.pop()]:
                below.add(child)
                todo.append(child)
        return [n for n in self.order() if n in below]

    def roots(self) -> list[str]:
        """Layers that bootstrap a distro."""
        return [n for n in self.names if self._specs[n]["parent"] is None]

    def leaves(self) -> list[str]:
        """Layers no other layer builds on."""
        return [n for n in self.names if not self._children[n]]

    def levels(self) -> list[list[str]]:
        """Layers grouped by depth (roots first); layers of one level may build in parallel."""
        depth: dict[str, int] = {}
        for name in self.order():
            parent = self._specs[name]["parent"]
            depth[name] = 0 if parent is None else depth[parent] + 1
        grouped: list[list[str]] = [[] for _level in range(max(depth.values(), default=-1) + 1)]
        for name in sorted(depth):
            grouped[depth[name]].append(name)
        return grouped

    def spec(self, name: str) -> dict[str, Any]:
        """Canonical spec (a copy): keys parent, bootstrap, arch, roles, vars, groups, description, and sources
        when set.

        ``parent`` is None for roots, ``bootstrap`` is None otherwise (a root's ``bootstrap.arch`` is its
        ``arch``); roles are plain strings in application order; ``arch`` is one architecture.
        """
        return copy.deepcopy(self._specs[self._check(name)])

    @property
    def images(self) -> dict[str, dict[str, Any]]:
        """Normalised image specs (a copy): ``layer``, ``arch``, ``formats`` (list), ``kernel_args`` (str) + extra
        keys."""
        return copy.deepcopy(self._images)

    # -- architectures ------------------------------------------------------------------------------
    def arch(self, name: str) -> str:
        """The architecture (Debian's name) of layer ``name``: what every stage asks."""
        return self._specs[self._check(name)][ARCH_KEY]

    def image_arch(self, image: str) -> str:
        """The architecture (Debian's name) of image ``image``."""
        self.image_layer(image)
        return self._images[image][ARCH_KEY]

    def arches(self) -> list[str]:
        """Every architecture the DAG builds, sorted."""
        return sorted({spec[ARCH_KEY] for spec in self._specs.values()})

    def origin(self, name: str) -> tuple[str, str]:
        """(the layer as the inventory names it, the architecture) of layer ``name`` (``base-arm64`` ->
        ``("base", "arm64")``)."""
        return self._layer_origin[self._check(name)]

    def image_origin(self, image: str) -> tuple[str, str]:
        """(the image as the inventory names it, the architecture) of image ``image``."""
        self.image_layer(image)
        return self._image_origin[image]

    def variants(self, layer: str) -> dict[str, str]:
        """``{architecture: layer}`` of the layer the inventory names ``layer`` (one entry per architecture)."""
        found = {arch: name for name, (written, arch) in sorted(self._layer_origin.items()) if written == layer}
        if not found:
            raise KeyError(f"unknown layer {layer!r} (known layers: {', '.join(self.names)})")
        return found

    def image_variants(self, image: str) -> dict[str, str]:
        """``{architecture: image}`` of the image the inventory names ``image``."""
        found = {arch: name for name, (written, arch) in sorted(self._image_origin.items()) if written == image}
        if not found:
            raise KeyError(f"unknown image {image!r} (known images: {', '.join(sorted(self._images))})")
        return found

    def image_layer(self, image: str) -> str:
        """The layer an image is packed from."""
        try:
            return self._images[image]["layer"]
        except KeyError:
            raise KeyError(
                f"unknown image {image!r} (known images: {', '.join(sorted(self._images))})"
            ) from None
