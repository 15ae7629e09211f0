# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Inventory scopes: which group or host a variable file belongs to, and its variables.

Reads inventory files the way Ansible loads them, from text of one revision:

* ``group_vars``/``host_vars`` files (``name.yml`` or the files of ``name/``) ->
  the group or host they set variables for (:func:`vars_file_scope`), in Ansible's load
  order (:func:`files_by_scope`), as a mapping of variables (:func:`load_vars_file`);
* YAML inventory sources -> variables per group and host, and the groups of each host
  (:func:`inventory_source_scopes`).

Errors are :class:`ChangePlanError` naming the file and the revision at fault.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

try:
    import yaml
except ImportError:  # reported by the calling plugin
    yaml = None

from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import _TolerantLoader
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerSpecError

VARS_DIRS = ("group_vars", "host_vars")
#: Suffixes of variable files Ansible loads, in its load order ("" = no suffix).
VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")
YAML_INVENTORY_SUFFIXES = (".yml", ".yaml", ".json")


class ChangePlanError(LayerSpecError):
    """Bad input to the change planner; ``path`` names the file or revision at fault."""


def parse_yaml(text: str, path: str, revision: str) -> Any:
    """YAML ``text`` of ``path`` at ``revision``, read as the content keys read it."""
    try:
        return yaml.load(text, Loader=_TolerantLoader)  # noqa: S506 - SafeLoader subclass, as the content keys read
    except yaml.YAMLError as exc:
        raise ChangePlanError(
            f"{path} at {revision}", f"cannot parse YAML: {exc}; fix the file in that revision or "
            "compare against another one"
        ) from None


def vars_file_scope(path: str) -> tuple[str, str, str] | None:
    """``(vars dir, "group"|"host", name)`` for a file Ansible loads as group/host variables."""
    parts = path.split("/")
    for index, part in enumerate(parts[:-1]):
        if part in VARS_DIRS:
            rest = parts[index + 1:]
            if len(rest) == 1:
                stem, suffix = posixpath.splitext(rest[0])
                if suffix not in VARS_SUFFIXES or rest[0].startswith("."):
                    return None
                name = stem
            else:
                name = rest[0]
                if posixpath.splitext(rest[-1])[1] not in VARS_SUFFIXES or rest[-1].startswith("."):
                    return None
            return "/".join(parts[:index + 1]), part[: -len("_vars")], name
    return None


def is_yaml_inventory(path: str) -> bool:
    """True when an inventory source is YAML (or JSON), so its values can be compared."""
    return posixpath.splitext(path)[1] in YAML_INVENTORY_SUFFIXES


def files_by_scope(files: Iterable[str], vars_dir: str) -> dict[str, list[str]]:
    """Files below ``vars_dir`` per group/host name, in Ansible's load order:
    ``name.yml`` (and the other suffixes) first, then the files of ``name/``, sorted."""
    direct: dict[str, list[str]] = {}
    nested: dict[str, list[str]] = {}
    cut = len(vars_dir) + 1
    for path in files:
        rest = path[cut:]
        head, sep, tail = rest.partition("/")
        if not sep:
            stem, suffix = posixpath.splitext(rest)
            if suffix in VARS_SUFFIXES and not rest.startswith("."):
                direct.setdefault(stem, []).append(path)
        elif posixpath.splitext(tail)[1] in VARS_SUFFIXES and not posixpath.basename(tail).startswith("."):
            nested.setdefault(head, []).append(path)
    order = {suffix: index for index, suffix in enumerate(VARS_SUFFIXES)}
    return {
        name: sorted(direct.get(name, []), key=lambda p: order[posixpath.splitext(p)[1]])
        + sorted(nested.get(name, []))
        for name in set(direct) | set(nested)
    }


def load_vars_file(text: str, path: str, revision: str) -> dict[str, Any]:
    """Variables of one group/host variable file (empty for an empty file)."""
    data = parse_yaml(text, path, revision)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ChangePlanError(
            f"{path} at {revision}", "expected a mapping of variable names to values"
        )
    return dict(data)


def inventory_source_scopes(text: str, path: str, revision: str
                            ) -> tuple[dict[tuple[str, str], dict], dict[str, set[str]]]:
    """Variables per ``("group"|"host", name)`` and groups per host of a YAML inventory source."""
    data = parse_yaml(text, path, revision)
    scopes: dict[tuple[str, str], dict[str, Any]] = {}
    members: dict[str, set[str]] = {}
    if data is None:
        return scopes, members
    if not isinstance(data, Mapping):
        raise ChangePlanError(f"{path} at {revision}", "expected a YAML inventory (a mapping of groups)")

    def walk(group: str, body: Any, parents: tuple[str, ...]) -> None:
        if body is None:
            return
        if not isinstance(body, Mapping):
            raise ChangePlanError(f"{path} at {revision}", f"group {group!r} is not a mapping")
        scopes.setdefault(("group", group), {}).update(body.get("vars") or {})
        for host, host_vars in (body.get("hosts") or {}).items():
            scopes.setdefault(("host", str(host)), {}).update(host_vars or {})
            members.setdefault(str(host), set()).update({group, *parents})
        for child, child_body in (body.get("children") or {}).items():
            walk(str(child), child_body, (*parents, group))

    for group, body in data.items():
        walk(str(group), body, ())
    return scopes, members
