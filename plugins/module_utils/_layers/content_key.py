# -*- coding: utf-8 -*-
# Copyright (c) 2025, hpc.stateless developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Content keys of layers.

A layer's key is the sha256 of a canonical JSON document holding the key schema
version, the parent's key, the layer spec, every applied role (dependencies
first) with a digest of its files, and the values of the variables those roles
reference. A layer whose key is unchanged is never rebuilt, so anything that
can change a layer's content must reach the key, and nothing else should.

Reads role files; no other I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

try:
    import yaml
    import jinja2
    import jinja2.meta
    from jinja2 import nodes as jinja_nodes
except ImportError as _exc:  # reported by the calling module with missing_required_lib
    yaml = jinja2 = jinja_nodes = None
    CONTENT_KEY_IMPORT_ERROR: ImportError | None = _exc
else:
    CONTENT_KEY_IMPORT_ERROR = None

from ansible_collections.hpc.stateless.plugins.module_utils import _paths
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import (
    LAYERS_VAR,
    LayerGraph,
    LayerSpecError,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.seal import SEAL_VARIABLES

#: Bump when the key document changes shape, or when the build changes what it leaves in every layer
#: (so the layers built before hold other content), so every layer rebuilds once. 2: layers keep apt's parsed
#: lists (srcpkgcache.bin, _build/aptconf.py) and an empty /root/.ansible (_build/seal_tree.py).
KEY_SCHEMA_VERSION = 2

#: Value recorded for a referenced variable the host does not define.
UNDEFINED_MARKER: dict[str, bool] = {"__undefined__": True}

# Layer spec keys that never change the image: ``vars`` reach the key through
# the values the roles actually reference; ``description`` is documentation.
_SPEC_KEYS_NOT_KEYED = ("vars", "description")
# The bootstrap tool (mmdebstrap or debootstrap) is provenance, recorded in the root, not content.
_BOOTSTRAP_KEYS_NOT_KEYED = ("tool",)

# Names whose values come from inside the layer (facts) or from Ansible itself. Together with
# the ``ansible_`` prefix this covers ansible-core's magic and internal static variables.
_IGNORED_VARIABLES = frozenset({
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short",
    "inventory_dir", "inventory_file", "playbook_dir", "role_path", "role_name", "role_names",
    "role_uuid", "play_hosts", "omit", "item", "vars", "environment",
    # Jinja/Ansible template globals
    "lookup", "query", "q", "now", "undef", "range", "dict", "lipsum", "cycler", "joiner",
    "namespace", "zip",
})

_INCLUDE_ROLE_ACTIONS = frozenset(
    f"{prefix}{action}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for action in ("include_role", "import_role")
)
_ASSERT_ACTIONS = frozenset(f"{p}assert" for p in ("", "ansible.builtin.", "ansible.legacy."))
_CONDITIONAL_KEYS = ("when", "changed_when", "failed_when", "until")
_JINJA_MARKERS = ("{{", "{%", "{#")
_YAML_SUFFIXES = (".yml", ".yaml", ".json", "")
_TASK_DIRS = ("tasks", "handlers", "meta")  # conditionals are expressions here
_DATA_DIRS = ("defaults", "vars")
_LOOKUP_FUNCTIONS = ("lookup", "query", "q")
_VARS_LOOKUPS = ("vars", "ansible.builtin.vars", "ansible.legacy.vars")


class RoleError(LayerSpecError):
    """A role cannot be read: bad YAML or Jinja, or a dependency cycle; ``path`` names the file."""


class RoleNotFoundError(RoleError):
    """A role name resolves to no directory; the message lists where it was searched."""


# --------------------------------------------------------------------------- YAML


# libyaml's parser when PyYAML has it: planning reads every role's YAML files (500 layers must plan in seconds).
_SAFE_LOADER = (getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader) if yaml else object


class _TolerantLoader(_SAFE_LOADER):  # type: ignore[misc,valid-type]
    """SafeLoader that reads Ansible tags (``!unsafe``, ``!vault``...) as plain data."""


class _UnsafeText(str):
    """A ``!unsafe`` string of a role file: Ansible never templates it."""

    __UNSAFE__ = True


def _mark_unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return _UnsafeText(value)
    if isinstance(value, Mapping):
        return {_mark_unsafe(k): _mark_unsafe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark_unsafe(v) for v in value]
    return value


def _construct_unknown_tag(loader: Any, tag_suffix: str, node: Any) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return _mark_unsafe(value) if tag_suffix == "unsafe" else value


if yaml is not None:
    _TolerantLoader.add_multi_constructor("!", _construct_unknown_tag)


def _load_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_TolerantLoader)  # noqa: S506 - SafeLoader subclass
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise RoleError(path, f"cannot parse YAML: {exc}") from None


def _yaml_files(directory: str) -> Iterator[str]:
    """YAML/JSON files below ``directory`` (recursively), in sorted order."""
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            if os.path.splitext(name)[1] in _YAML_SUFFIXES and not name.startswith("."):
                yield os.path.join(root, name)


# --------------------------------------------------------------------------- role index


def _is_fqcn(name: str) -> bool:
    return name.count(".") == 2 and all(name.split("."))


def _collection_fqcn(role_dir: str) -> str | None:
    """``ns.coll.role`` when ``role_dir`` sits in a collection's ``roles/`` directory."""
    roles_dir = os.path.dirname(os.path.abspath(role_dir))
    if os.path.basename(roles_dir) != "roles":
        return None
    collection_dir = os.path.dirname(roles_dir)
    parts = collection_dir.split(os.sep)
    if len(parts) >= 3 and parts[-3] == "ansible_collections":
        return f"{parts[-2]}.{parts[-1]}.{os.path.basename(role_dir)}"
    galaxy = os.path.join(collection_dir, "galaxy.yml")
    if os.path.isfile(galaxy):
        meta = _load_yaml(galaxy)
        if isinstance(meta, Mapping) and meta.get("namespace") and meta.get("name"):
            return f"{meta['namespace']}.{meta['name']}.{os.path.basename(role_dir)}"
    return None


def _role_entry_name(entry: object) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, Mapping):
        for key in ("role", "name"):
            if isinstance(entry.get(key), str):
                return entry[key]
    return None


def _include_role_name(args: object) -> str | None:
    if isinstance(args, Mapping):
        name = args.get("name")
        return name if isinstance(name, str) else None
    if isinstance(args, str):  # legacy "name=foo tasks_from=bar"
        for word in args.split():
            if word.startswith("name="):
                return word[len("name="):]
    return None


def _static_role_includes(data: object) -> Iterator[str]:
    """Role names of include_role/import_role tasks with a literal name, anywhere in ``data``."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            if key in _INCLUDE_ROLE_ACTIONS:
                name = _include_role_name(value)
                if name and not any(m in name for m in _JINJA_MARKERS):
                    yield name.strip()
            else:
                yield from _static_role_includes(value)
    elif isinstance(data, list):
        for item in data:
            yield from _static_role_includes(item)


class RoleIndex:
    """Resolve role names to directories the way Ansible does, and follow dependencies.

    ``search_paths`` are roles directories (``roles_path``); ``collections_paths``
    are directories holding ``ansible_collections/`` (``collections_path``).
    A plain name referenced by a role resolves first next to that role (its
    collection's ``roles/``), then in ``search_paths``.
    """

    def __init__(self, search_paths: list[str], collections_paths: list[str]) -> None:
        self.search_paths = [os.path.abspath(p) for p in search_paths]
        self.collections_paths = [os.path.abspath(p) for p in collections_paths]
        self._known: dict[str, str] = {}  # canonical name -> role directory
        self._deps: dict[str, list[str]] = {}

    @property
    def search_hint(self) -> str:
        """Where names are searched, for error messages (``LayerGraph.from_spec``)."""
        return ", ".join(self.search_paths + self.collections_paths)

    def _candidates(self, name: str) -> list[str]:
        if _is_fqcn(name):
            namespace, collection, role = name.split(".")
            bases = [
                p if os.path.basename(p) == "ansible_collections" else os.path.join(p, "ansible_collections")
                for p in self.collections_paths
            ]
            return [os.path.join(b, namespace, collection, "roles", role) for b in bases]
        return [os.path.join(p, name) for p in self.search_paths]

    def _find(self, name: str) -> str | None:
        if name in self._known:
            return self._known[name]
        for candidate in self._candidates(name):
            if os.path.isdir(candidate):
                self._known[name] = candidate
                return candidate
        return None

    def exists(self, name: str) -> bool:
        """True when ``name`` resolves to a role directory."""
        return self._find(name) is not None

    def path(self, name: str) -> str:
        """The role directory of ``name``; raises :class:`RoleNotFoundError` listing the searched paths."""
        found = self._find(name)
        if found is None:
            raise RoleNotFoundError(
                f"role {name!r}", f"not found (searched: {', '.join(self._candidates(name))})"
            )
        return found

    def _resolve_from(self, name: str, referrer_dir: str, source: str) -> str:
        """Canonical name of ``name`` as referenced from the role in ``referrer_dir``."""
        if not _is_fqcn(name) and "/" not in name:
            sibling = os.path.join(os.path.dirname(referrer_dir), name)
            if os.path.isdir(sibling):
                plain = self._find(name)
                if plain is not None and os.path.realpath(plain) == os.path.realpath(sibling):
                    return name
                canonical = _collection_fqcn(sibling) or os.path.abspath(sibling)
                self._known.setdefault(canonical, sibling)
                return canonical
        if self._find(name) is None:
            searched = [os.path.dirname(referrer_dir)] if not _is_fqcn(name) else []
            searched += self._candidates(name)
            raise RoleNotFoundError(source, f"role {name!r} not found (searched: {', '.join(searched)})")
        return name

    def dependencies(self, name: str) -> list[str]:
        """Roles ``name`` needs, in order: ``meta/main.yml`` dependencies, then roles
        named literally by include_role/import_role in tasks/ and handlers/.

        Returned names resolve with :meth:`path` (a role found inside a collection
        may come back as its FQCN).
        """
        if name in self._deps:
            return list(self._deps[name])
        role_dir = self.path(name)
        found: list[str] = []

        def add(raw: str, source: str) -> None:
            dep = self._resolve_from(raw, role_dir, source)
            if dep not in found and os.path.realpath(self.path(dep)) != os.path.realpath(role_dir):
                found.append(dep)

        for meta_name in ("main.yml", "main.yaml", "main.json", "main"):
            meta_file = os.path.join(role_dir, "meta", meta_name)
            if os.path.isfile(meta_file):
                meta = _load_yaml(meta_file)
                deps = meta.get("dependencies") if isinstance(meta, Mapping) else None
                for index, entry in enumerate(deps or []):
                    dep_name = _role_entry_name(entry)
                    if dep_name is None:
                        raise RoleError(f"{meta_file}: dependencies[{index}]", "expected a role name")
                    add(dep_name, f"{meta_file}: dependencies[{index}]")
                break
        for subdir in ("tasks", "handlers"):
            for task_file in _yaml_files(os.path.join(role_dir, subdir)):
                for dep_name in _static_role_includes(_load_yaml(task_file)):
                    add(dep_name, task_file)
        self._deps[name] = found
        return list(found)

    def closure(self, names: Iterable[str]) -> list[str]:
        """``names`` plus all their dependencies, each dependency before the role
        needing it, each role once (by directory). Raises :class:`RoleError` on a cycle."""
        ordered: list[str] = []
        done: set[str] = set()

        def visit(name: str, stack: list[str]) -> None:
            real = os.path.realpath(self.path(name))
            if real in done:
                return
            if name in stack:
                cycle = stack[stack.index(name):] + [name]
                raise RoleError(
                    f"role {stack[-1]!r}", f"role dependency cycle: {' -> '.join(cycle)}"
                )
            for dep in self.dependencies(name):
                visit(dep, stack + [name])
            if real not in done:
                done.add(real)
                ordered.append(name)

        for name in names:
            visit(name, [])
        return ordered


# --------------------------------------------------------------------------- role digest


def _excluded_from_digest(relpath: str, is_dir: bool) -> bool:
    parts = relpath.split("/")
    base = parts[-1]
    if is_dir:
        return base == "__pycache__" or (len(parts) == 1 and base in ("molecule", "tests"))
    if len(parts) == 1 and base.startswith("README"):
        return True
    return (
        base.endswith((".pyc", "~"))
        or (base.startswith(".") and base.endswith(".swp"))
        or "__pycache__" in parts
    )


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def role_digest(role_dir: str) -> str:
    """sha256 over (relative path, kind, content hash) of every file in the role.

    Left out, because they never enter an image: ``README*`` at the role top,
    the top-level ``molecule/`` and ``tests/`` directories, ``__pycache__/``,
    ``*.pyc`` and editor leftovers (``*~``, ``.*.swp``). A symlink is hashed by
    its target string, not followed; the executable bit of files counts.
    """
    return role_digest_and_links(role_dir)[0]


def role_digest_and_links(role_dir: str) -> tuple[str, bool]:
    """:func:`role_digest`, and whether the role holds a symbolic link (which its digest does not follow)."""
    entries: list[str] = []
    for root, dirs, files in os.walk(role_dir):
        rel_root = os.path.relpath(root, role_dir)
        rel_root = "" if rel_root == "." else rel_root.replace(os.sep, "/") + "/"
        for name in sorted(dirs + files):
            path, rel = os.path.join(root, name), rel_root + name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) and not _excluded_from_digest(rel, name in dirs):
                target = hashlib.sha256(os.readlink(path).encode("utf-8", "surrogateescape"))
                entries.append(f"link\0{rel}\0{target.hexdigest()}")
            elif stat.S_ISREG(mode) and not _excluded_from_digest(rel, False):
                kind = "exec" if mode & stat.S_IXUSR else "file"
                entries.append(f"{kind}\0{rel}\0{_file_sha256(path)}")
        # walk into real directories only; a symlinked directory was hashed as a link
        dirs[:] = sorted(
            d for d in dirs
            if not os.path.islink(os.path.join(root, d))
            and not _excluded_from_digest(rel_root + d, True)
        )
    digest = hashlib.sha256("\n".join(sorted(entries)).encode("utf-8", "surrogateescape")).hexdigest()
    return digest, any(entry.startswith("link\0") for entry in entries)


# --------------------------------------------------------------------------- variables


_ENVIRONMENT = None


def _unknown_plugin(*args: Any, **kwargs: Any) -> None:
    """Stands in for filters and tests only Ansible knows; templates are analysed, never rendered."""


class _AnyPluginTable(dict):
    """Filter/test table that knows every name, so that ``| bool`` or ``is succeeded``
    (Ansible and collection plugins) do not fail jinja2.meta's compile step."""

    def get(self, key: Any, default: Any = None) -> Any:
        return super().get(key, _unknown_plugin)


def _jinja_environment() -> Any:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        # Ansible enables these extensions; without them `{% do %}`/`{% break %}` fail to parse.
        environment = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
        environment.filters = _AnyPluginTable(environment.filters)
        environment.tests = _AnyPluginTable(environment.tests)
        _ENVIRONMENT = environment
    return _ENVIRONMENT


def _literal_lookups(ast: Any) -> Iterator[str]:
    """Names read through ``lookup('vars', 'x')``, ``vars['x']`` and
    ``hostvars[inventory_hostname]['x']`` with literal strings."""
    for call in ast.find_all(jinja_nodes.Call):
        if (
            isinstance(call.node, jinja_nodes.Name)
            and call.node.name in _LOOKUP_FUNCTIONS
            and call.args
            and isinstance(call.args[0], jinja_nodes.Const)
            and call.args[0].value in _VARS_LOOKUPS
        ):
            for arg in call.args[1:]:
                if isinstance(arg, jinja_nodes.Const) and isinstance(arg.value, str):
                    yield arg.value
    for node in ast.find_all((jinja_nodes.Getitem, jinja_nodes.Getattr)):
        if isinstance(node, jinja_nodes.Getitem):
            if not (isinstance(node.arg, jinja_nodes.Const) and isinstance(node.arg.value, str)):
                continue
            attr = node.arg.value
        else:
            attr = node.attr
        target = node.node
        if isinstance(target, jinja_nodes.Name) and target.name == "vars":
            yield attr
        elif (
            isinstance(target, jinja_nodes.Getitem)
            and isinstance(target.node, jinja_nodes.Name)
            and target.node.name == "hostvars"
            and isinstance(target.arg, jinja_nodes.Name)
            and target.arg.name == "inventory_hostname"
        ):
            yield attr


def template_variables(text: str, source: str = "<string>") -> set[str]:
    """Variable names a Jinja template reads; raises :class:`RoleError` naming ``source``."""
    try:
        ast = _jinja_environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise RoleError(source, f"Jinja syntax error: {exc.message} (line {exc.lineno})") from None
    return set(jinja2.meta.find_undeclared_variables(ast)) | set(_literal_lookups(ast))


def _has_jinja(text: str) -> bool:
    return any(marker in text for marker in _JINJA_MARKERS)


def _expression_variables(value: object, source: str) -> set[str]:
    """Names read by a conditional (str, bool or list of them)."""
    items = value if isinstance(value, list) else [value]
    found: set[str] = set()
    for item in items:
        if isinstance(item, str) and item.strip():
            text = item if _has_jinja(item) else "{{ " + item + " }}"
            found |= template_variables(text, source)
    return found


def _data_variables(data: object, source: str, conditionals: bool, task: str | None = None) -> set[str]:
    """Names read by the Jinja strings (and, if ``conditionals``, the bare
    conditional expressions) anywhere in parsed YAML ``data``."""
    if getattr(data, "__UNSAFE__", False):  # ``!unsafe``: never templated
        return set()
    if isinstance(data, str):
        return template_variables(data, source) if _has_jinja(data) else set()
    found: set[str] = set()
    if isinstance(data, Mapping):
        if isinstance(data.get("name"), str):
            task = data["name"]
        where = f"{source}: task {task!r}" if task and conditionals else source
        for key, value in data.items():
            if isinstance(key, str) and _has_jinja(key) and not getattr(key, "__UNSAFE__", False):
                found |= template_variables(key, where)
            if conditionals and key in _CONDITIONAL_KEYS:
                found |= _expression_variables(value, where)
            elif conditionals and key in _ASSERT_ACTIONS and isinstance(value, Mapping):
                found |= _expression_variables(value.get("that"), where)
                rest = {k: v for k, v in value.items() if k != "that"}
                found |= _data_variables(rest, source, conditionals, task)
            else:
                found |= _data_variables(value, source, conditionals, task)
    elif isinstance(data, (list, tuple)):
        for item in data:
            found |= _data_variables(item, source, conditionals, task)
    return found


def referenced_variables(role_dir: str) -> set[str]:
    """Names a role's templates and YAML files read, before filtering out facts
    and Ansible's own variables (see :func:`resolve_variable_values`).

    Reads ``templates/`` (every file, as Jinja) and YAML files in ``tasks/``,
    ``handlers/``, ``meta/`` (where ``when``/``changed_when``/``failed_when``/
    ``until`` and assert ``that`` are expressions) and ``defaults/``, ``vars/``.
    Raises :class:`RoleError` naming the file (and task) on bad YAML or Jinja.
    """
    found: set[str] = set()
    templates = os.path.join(role_dir, "templates")
    for root, dirs, files in os.walk(templates):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if _excluded_from_digest(os.path.relpath(path, role_dir).replace(os.sep, "/"), False):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except UnicodeDecodeError:
                raise RoleError(path, "template is not UTF-8 text") from None
            found |= template_variables(text, path)
    for subdir in _TASK_DIRS + _DATA_DIRS:
        for path in _yaml_files(os.path.join(role_dir, subdir)):
            found |= _data_variables(_load_yaml(path), path, conditionals=subdir in _TASK_DIRS)
    return found


#: The controller's cache (_paths.controller_cache_dir) of the variables each role reads, by the role's digest.
VARIABLES_CACHE = "role-variables"


@functools.lru_cache(maxsize=None)
def _rules_stamp() -> str:
    """What a role's variables depend on besides its files: the rules here and Jinja's parser ("" if unknown)."""
    try:
        with open(__file__, "rb") as handle:
            rules = handle.read()
    except (NameError, OSError):
        return ""
    return hashlib.sha256(rules + b"\0" + str(getattr(jinja2, "__version__", "")).encode()).hexdigest()[:16]


def role_variables(role_dir: str, digest: str, has_links: bool, cache_dir: str | None) -> set[str]:
    """:func:`referenced_variables` of ``role_dir``, kept in ``cache_dir`` under the role's ``digest``.

    The Jinja parse of every template and task is most of a plan's key computation; a role whose files did not
    change is not parsed again. The entry is named by the digest and :func:`_rules_stamp`, so another rule or
    Jinja release never reads an old one; a role with a symbolic link is always parsed (its digest covers the
    link, not what it names). An entry that cannot be read is parsed again and rewritten; one that cannot be
    written costs the next run the parse, nothing else. A role that changed while it was parsed is not kept.
    """
    stamp = _rules_stamp()
    if cache_dir is None or has_links or not stamp:
        return referenced_variables(role_dir)
    path = os.path.join(cache_dir, f"{digest}-{stamp}.json")
    try:
        with open(path, encoding="utf-8") as handle:
            names = json.load(handle)
        if isinstance(names, list) and all(isinstance(name, str) for name in names):
            return set(names)
    except (OSError, ValueError):
        pass
    found = referenced_variables(role_dir)
    if role_digest(role_dir) == digest:
        try:
            os.makedirs(cache_dir, exist_ok=True)
            _paths.write_atomic(path, json.dumps(sorted(found)), sync=False)
        except OSError:
            pass
    return found


def is_ignored_variable(name: str) -> bool:
    """True for facts and Ansible-provided names, whose values never come from the inventory."""
    return name.startswith("ansible_") or name in _IGNORED_VARIABLES


def canonical_value(value: Any) -> Any:
    """``value`` as JSON-able data that serialises the same way for equal content.

    Vault-encrypted values are replaced by a digest of their ciphertext so that
    secrets never appear in key documents.
    """
    ciphertext = getattr(value, "_ciphertext", None)
    if isinstance(ciphertext, bytes):
        return {"__vault_sha256__": hashlib.sha256(ciphertext).hexdigest()}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)  # drops unsafe/tagged str subclasses
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        items = [canonical_value(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, (list, tuple)):
        return [canonical_value(v) for v in value]
    return str(value)


def _value_variables(value: Any, name: str) -> set[str]:
    """Names referenced by the Jinja strings inside a raw variable value.

    Strings marked unsafe (``!unsafe``) are never templated by Ansible, so skipped.
    """
    if getattr(value, "__UNSAFE__", False) or getattr(value, "_ciphertext", None) is not None:
        return set()
    if isinstance(value, str):
        return template_variables(value, f"variable {name!r}") if _has_jinja(value) else set()
    found: set[str] = set()
    if isinstance(value, Mapping):
        for key, item in value.items():
            found |= _value_variables(key, name) | _value_variables(item, name)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            found |= _value_variables(item, name)
    return found


def resolve_variable_values(names: Iterable[str], variables: Mapping[str, Any]) -> dict[str, Any]:
    """Canonical values of ``names`` and of every variable their values reference
    (transitively), from the raw, untemplated host ``variables``.

    Facts and Ansible's own variables are left out; a name missing from
    ``variables`` maps to :data:`UNDEFINED_MARKER`, so defining it later changes the key.
    """
    pending = sorted(n for n in set(names) if not is_ignored_variable(n))
    values: dict[str, Any] = {}
    while pending:
        name = pending.pop()
        if name in values:
            continue
        if name not in variables:
            values[name] = dict(UNDEFINED_MARKER)
            continue
        raw = variables[name]
        values[name] = canonical_value(raw)
        pending.extend(
            n for n in sorted(_value_variables(raw, name)) if n not in values and not is_ignored_variable(n)
        )
    return dict(sorted(values.items()))


# --------------------------------------------------------------------------- keys


def keyed_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a canonical layer spec that enters the key (no ``vars``, no ``description``)."""
    keyed = {k: v for k, v in spec.items() if k not in _SPEC_KEYS_NOT_KEYED}
    if isinstance(keyed.get("bootstrap"), Mapping):
        keyed["bootstrap"] = {k: v for k, v in keyed["bootstrap"].items() if k not in _BOOTSTRAP_KEYS_NOT_KEYED}
    return canonical_value(keyed)


def layer_key(
    parent_key: str | None,
    spec: Mapping[str, Any],
    roles: list[tuple[str, str]],
    variable_values: Mapping[str, Any],
    seal: tuple[str, str] | None = None,
) -> str:
    """sha256 hex content key of one layer.

    ``spec`` is ``LayerGraph.spec(name)``; ``roles`` is ``[(name, role_digest)]``
    in application order; ``variable_values`` comes from :func:`resolve_variable_values`;
    ``seal`` is ``(role, role_digest)`` of the seal the build runs after the roles (_layers/seal.py).
    """
    document = {
        "schema": KEY_SCHEMA_VERSION,
        "parent": parent_key,
        "spec": keyed_spec(spec),
        "roles": [[name, digest] for name, digest in roles],
        "variables": canonical_value(dict(variable_values)),
    }
    if seal is not None:
        document["seal"] = list(seal)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclasses.dataclass
class LayerKey:
    """The key of one layer and what went into it.

    ``variables`` holds the (canonical) values the key covers, for explaining a
    rebuild; they may be sensitive, so do not write them into image labels.
    """

    name: str
    key: str
    parent: str | None
    parent_key: str | None
    roles: list[str]
    variables: dict[str, Any]
    seal: str | None = None  # the role whose seal entry point the key covers (_layers/seal.py)
    #: The key over the layer's inputs alone; ``key`` differs from it when the layer is rebuilt for archive
    #: updates (_layers/freshness.py).
    inputs_key: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain-data copy, e.g. for a module's return value."""
        return dataclasses.asdict(self)


def compute_keys(
    graph: LayerGraph,
    role_index: RoleIndex,
    variables_for: Callable[[str], Mapping[str, Any]],
    seal_role: str | None = None,
    settle: Callable[[str, str, str | None], str] | None = None,
    variables_cache: str | None = None,
) -> dict[str, LayerKey]:
    """Keys of every layer in ``graph``, in build order (dict order).

    ``settle(layer, inputs key, parent)`` gives the key a layer's image has for the key over its inputs (the
    freshness check, _layers/freshness.py: another key when the layer is rebuilt for archive updates);
    children hash that key. Without it a layer's key is its inputs key.
    ``variables_for(layer)`` returns the layer's raw host variables (inventory
    variables merged with the layer's ``vars``). ``seal_role`` is the role whose seal the
    build runs after every layer's roles (_layers/seal.py): the key of each layer with roles then
    covers its files, the variables it reads and the layer's opt-out settings, opted out or not.
    ``variables_cache`` is the directory where the variables each role reads are kept between runs
    (:func:`role_variables`); None parses every role.
    Raises :class:`LayerSpecError` (a :class:`RoleError` for role problems).
    """
    digests: dict[str, str] = {}
    variables_of: dict[str, set[str]] = {}
    keys: dict[str, LayerKey] = {}

    def hashed_dir(role: str) -> str:
        """The role's real directory; its digest and variables are read once per run."""
        role_dir = os.path.realpath(role_index.path(role))
        if role_dir not in digests:
            digests[role_dir], has_links = role_digest_and_links(role_dir)
            variables_of[role_dir] = role_variables(role_dir, digests[role_dir], has_links, variables_cache)
        return role_dir

    for name in graph.order():
        spec = graph.spec(name)
        for index, role in enumerate(spec["roles"]):
            if not role_index.exists(role):
                raise RoleNotFoundError(
                    f"{LAYERS_VAR}.{name}.roles[{index}]",
                    f"role {role!r} not found (searched: {role_index.search_hint})",
                )
        applied = role_index.closure(spec["roles"])
        referenced = _data_variables(keyed_spec(spec), f"{LAYERS_VAR}.{name}", conditionals=False)
        role_entries: list[tuple[str, str]] = []
        for role in applied:
            role_dir = hashed_dir(role)
            role_entries.append((role, digests[role_dir]))
            referenced |= variables_of[role_dir]
        seal = None
        if seal_role is not None and applied:  # a layer without roles is committed as it is, unsealed
            seal_dir = hashed_dir(seal_role)
            seal = (seal_role, digests[seal_dir])
            referenced |= variables_of[seal_dir] | SEAL_VARIABLES
        values = resolve_variable_values(referenced, variables_for(name))
        parent = spec["parent"]
        parent_key = keys[parent].key if parent is not None else None
        # The parent as the inventory names it: the parent's key already differs by architecture, so the keys of
        # one layer's architectures differ by the architecture alone (base-arm64's child hashes "base").
        keyed = {**spec, "parent": graph.origin(parent)[0]} if parent is not None else spec
        inputs_key = layer_key(parent_key, keyed, role_entries, values, seal)
        keys[name] = LayerKey(
            name=name,
            key=settle(name, inputs_key, parent) if settle is not None else inputs_key,
            parent=parent,
            parent_key=parent_key,
            roles=applied,
            variables=values,
            seal=seal[0] if seal else None,
            inputs_key=inputs_key,
        )
    return keys
