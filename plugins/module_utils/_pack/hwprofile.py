# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kernel modules and firmware pruned to a hardware profile, in the packed copy only.

A profile names the modules the nodes need (``modules``, ``force``) and/or the modalias lines
captured on real nodes (``modaliases``, ``modaliases_file``). :func:`plan_pruning` reads the
image's ``modules.dep``, ``modules.alias``, ``modules.softdep`` and ``modules.builtin`` and
the ``.modinfo`` section of each kept module, and returns what to keep and what to leave out:

* the named modules, the modules whose ``modules.alias`` patterns (fnmatch globs) match a
  modalias line, what the boot path may load (:data:`BOOT_MODULES`), and ``force``;
* their dependencies (``modules.dep``) and soft ``pre:``/``post:`` dependencies, transitively;
* the firmware files they reference (``firmware=`` of ``.modinfo``).

:func:`regenerate_depmod` runs ``depmod`` on a staging tree holding only the kept modules,
so ``modprobe`` on the node sees exactly what is packed. The source tree is only read, and only
through :mod:`_imagepath` (inside the image, never through a link to a file of the build host);
the staging tree, which the image's own depmod writes, is read back the same way.
"""

from __future__ import annotations

import fnmatch
import lzma
import os
import posixpath
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import PROFILE_KEYS

# Loaded by systemd (modprobe@.service, autofs for automounts) or by the squashfs boot path after
# switch_root, when the kernel has them as modules; kept without being named.
BOOT_MODULES = ("autofs4", "configfs", "dm_mod", "efi_pstore", "fuse", "loop", "overlay", "squashfs")
# depmod's inputs, copied into the staging tree; everything else named modules.* is its output.
DEPMOD_INPUTS = ("modules.order", "modules.builtin", "modules.builtin.modinfo")
_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.gz", ".ko.zst")
# A compressed module is decompressed up to this size (the largest of a Debian kernel is a few tens of MiB): an
# image's bytes are hostile, a module that expands past it is refused rather than read into memory whole.
MODULE_MAX_SIZE = 256 << 20
_MODULE_DIRS = ("usr/lib/modules", "lib/modules")
_FIRMWARE_DIRS = ("usr/lib/firmware", "lib/firmware")

# The node-side check, shipped into the packed copy as NODE_CHECK_PATH (POSIX sh and awk only).
NODE_CHECK_PATH = "usr/local/sbin/hpc-hwprofile-check"
FULL_ALIAS_NAME = "modules.alias.unpruned"
NODE_CHECK_SCRIPT = r"""#!/bin/sh
# hpc-hwprofile-check [MODALIASES_FILE]: name the modules this node's devices need that the image's
# hardware profile left out. Reads the node's modaliases (default: /sys/devices/**/modalias), the
# unpruned alias table the pack kept (modules.alias.unpruned) and the packed modules.dep.
# HPC_HWPROFILE_MODULES=<dir> checks another modules directory (an unpacked image on the build host).
# Exit 0: nothing missing; 1: modules missing (listed); 2: cannot check.
set -eu
dir=${HPC_HWPROFILE_MODULES:-/usr/lib/modules/$(uname -r)}
[ -r "$dir/modules.alias.unpruned" ] || { echo "no $dir/modules.alias.unpruned: not a pruned image" >&2; exit 2; }
if [ $# -gt 0 ]; then aliases=$1; else
  aliases=$(mktemp); trap 'rm -f "$aliases"' EXIT
  find /sys/devices -name modalias -exec cat {} + 2>/dev/null | sort -u > "$aliases"
fi
rc=0
out=$(awk -v dep="$dir/modules.dep" '
function glob2re(g,   r, i, c) {
  r = "^"
  for (i = 1; i <= length(g); i++) {
    c = substr(g, i, 1)
    if (c == "*") r = r ".*"; else if (c == "?") r = r "."
    else if (c == "[") { j = index(substr(g, i), "]"); if (j > 1) { r = r substr(g, i, j); i += j - 1 } else r = r "\\[" }
    else if (index(".+()^$|{}\\/", c)) r = r "\\" c
    else r = r c
  }
  return r "$"
}
BEGIN {
  while ((getline line < dep) > 0) {
    sub(/:.*/, "", line); n = split(line, p, "/"); m = p[n]; sub(/\.ko.*$/, "", m); gsub(/-/, "_", m); kept[m] = 1
  }
}
FNR == NR {
  if ($1 == "alias") { pat[++np] = $2; m = $3; gsub(/-/, "_", m); mod[np] = m; lit[np] = $2; sub(/[*?[].*/, "", lit[np]) }
  next
}
{
  for (k = 1; k <= np; k++) {
    if (substr($0, 1, length(lit[k])) != lit[k] || (mod[k] in kept) || (mod[k] in seen)) continue
    if (!(k in re)) re[k] = glob2re(pat[k])
    if ($0 ~ re[k]) seen[mod[k]] = $0
  }
}
END { for (m in seen) { print "missing module " m " (needed by " seen[m] ")"; bad = 1 } ; exit bad }
' "$dir/modules.alias.unpruned" "$aliases") || rc=$?
[ -z "$out" ] || printf '%s\n' "$out" | sort
exit "$rc"
"""


class HardwareProfileError(Exception):
    """The profile or the image's module data is unusable; the message names the key or file."""


@dataclass(frozen=True)
class HardwareProfile:
    modules: tuple[str, ...] = ()
    modaliases: tuple[str, ...] = ()
    modaliases_file: str | None = None
    force: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()

    @classmethod
    def from_option(cls, value: dict[str, Any] | None) -> "HardwareProfile | None":
        """The ``hardware_profile`` option (None or ``{}``: no profile); reads ``modaliases_file``."""
        if not value:
            return None
        unknown = sorted(set(value) - set(PROFILE_KEYS))
        if unknown:
            raise HardwareProfileError(f"hardware_profile: unknown key(s) {', '.join(unknown)} "
                                       f"(known: {', '.join(PROFILE_KEYS)})")
        lists = {}
        for key in ("modules", "modaliases", "force", "firmware"):
            items = value.get(key) or []
            if isinstance(items, str) or not isinstance(items, (list, tuple)):
                raise HardwareProfileError(f"hardware_profile.{key} must be a list of strings, got {items!r}")
            lists[key] = tuple(str(i).strip() for i in items if str(i).strip())
        path = value.get("modaliases_file")
        aliases = list(lists["modaliases"])
        if path:
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    aliases += [line.strip() for line in handle if line.strip() and not line.startswith("#")]
            except OSError as exc:
                raise HardwareProfileError(f"hardware_profile.modaliases_file {path}: {exc.strerror}; capture it on "
                                           "a node (docs/pack.md, 'Hardware profile')") from exc
        return cls(modules=tuple(normalise(m) for m in lists["modules"]), modaliases=tuple(sorted(set(aliases))),
                   modaliases_file=str(path) if path else None, force=tuple(normalise(m) for m in lists["force"]),
                   firmware=lists["firmware"])

    def fingerprint(self) -> dict[str, Any]:
        """What the manifest's options record (the modalias lines themselves, not the file's path)."""
        return {"modules": sorted(self.modules), "modaliases": list(self.modaliases), "force": sorted(self.force),
                "firmware": sorted(self.firmware)}


def normalise(name: str) -> str:
    """Module name as the kernel spells it: ``-`` and ``_`` are the same."""
    return name.replace("-", "_")


def module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for suffix in _MODULE_SUFFIXES:
        if base.endswith(suffix):
            return normalise(base[: -len(suffix)])
    return normalise(base)


# -- the image's module data ---------------------------------------------------------------
def _real_rel(root: str, candidates: Iterable[str]) -> str | None:
    """The first candidate that is a directory, as a link-free path relative to ``root``, resolved inside
    the image (merged /usr: ``lib/modules`` is ``usr/lib/modules``)."""
    for rel in candidates:
        resolved = _imagepath.resolve_rel(root, rel)
        if resolved and _imagepath.is_dir(root, resolved):
            return resolved
    return None


def modules_rel(root: str, kernel_version: str) -> str | None:
    return _real_rel(root, (f"{base}/{kernel_version}" for base in _MODULE_DIRS))


def _read_file(root: str, rel: str) -> bytes | None:
    """The bytes of module data file ``rel`` of the tree ``root`` (None when there is none). depmod writes
    regular files: a link there is not followed but refused, as is anything else that is no file."""
    try:
        return _imagepath.read_file(root, rel, follow_last=False)
    except OSError as exc:
        raise HardwareProfileError(f"/{rel}: {exc.strerror}; kernel module data must be regular files") from exc


def _read_lines(root: str, rel: str) -> list[str]:
    data = _read_file(root, rel)
    return [] if data is None else data.decode("utf-8", "surrogateescape").splitlines()


def _module_path(head: str, dep_file: str) -> str:
    """A module path of ``modules.dep``: relative to the modules directory, and staying below it."""
    path = head.strip()
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise HardwareProfileError(f"/{dep_file} lists {path!r}, which is not a path below its modules directory; "
                                   "run depmod in a layer to regenerate it")
    return path


class AliasIndex:
    """``modules.alias`` patterns, bucketed by their literal bus prefix (``pci``, ``usb``...)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.by_prefix: dict[str, list[tuple[str, str]]] = {}
        for line in lines:
            parts = line.split()
            if len(parts) != 3 or parts[0] != "alias":
                continue
            head = parts[1].split(":", 1)[0]
            key = head if ":" in parts[1] and not re.search(r"[*?\[]", head) else ""
            self.by_prefix.setdefault(key, []).append((parts[1], normalise(parts[2])))

    def match(self, text: str) -> list[str]:
        head = text.split(":", 1)[0]
        found = []
        for bucket in (self.by_prefix.get(head, []) if ":" in text else [], self.by_prefix.get("", [])):
            found += [name for pattern, name in bucket if fnmatch.fnmatchcase(text, pattern)]
        return sorted(set(found))


@dataclass
class ModuleData:
    """One kernel's module tree: ``{name: path relative to the modules directory}`` and its relations."""

    directory: str  # relative to the root, link-free
    paths: dict[str, str]
    deps: dict[str, list[str]]
    softdeps: dict[str, list[str]]
    builtin: set[str]
    aliases: AliasIndex

    @classmethod
    def read(cls, root: str, directory: str) -> "ModuleData":
        """The module data of ``root/directory`` (a link-free path relative to ``root``)."""
        dep_file = f"{directory}/modules.dep"
        dep_data = _read_file(root, dep_file)
        if dep_data is None:
            raise HardwareProfileError(f"/{dep_file} is missing: the image's kernel modules have no depmod data "
                                       "(run depmod in a layer), so they cannot be pruned")
        paths: dict[str, str] = {}
        deps: dict[str, list[str]] = {}
        for line in dep_data.decode("utf-8", "surrogateescape").splitlines():
            if ":" not in line:
                continue
            head, tail = line.split(":", 1)
            name = module_name(head.strip())
            paths[name] = _module_path(head, dep_file)
            deps[name] = [module_name(d) for d in tail.split()]
        aliases = AliasIndex(_read_lines(root, f"{directory}/modules.alias"))
        softdeps: dict[str, list[str]] = {}
        for line in _read_lines(root, f"{directory}/modules.softdep"):
            parts = line.split()
            if len(parts) < 3 or parts[0] != "softdep":
                continue
            names = [p for p in parts[2:] if p not in ("pre:", "post:")]
            softdeps.setdefault(normalise(parts[1]), []).extend(names)
        builtin = {module_name(line.strip()) for line in _read_lines(root, f"{directory}/modules.builtin")
                   if line.strip()}
        return cls(directory, paths, deps, softdeps, builtin, aliases)

    def resolve(self, name: str) -> list[str]:
        """Modules a name stands for: itself when it is a module, else what its alias matches."""
        if normalise(name) in self.paths:
            return [normalise(name)]
        return [m for m in self.aliases.match(name) if m in self.paths]


# -- .modinfo --------------------------------------------------------------------------------
def _module_bytes(root: str, rel: str) -> bytes:
    """The uncompressed ELF of module file ``rel`` of the tree ``root`` (read inside it, see :mod:`_imagepath`)."""
    try:
        data = _imagepath.read_file(root, rel)
    except OSError as exc:
        raise HardwareProfileError(f"/{rel}: {exc.strerror}") from exc
    if data is None:
        raise HardwareProfileError(f"/{rel} is listed in modules.dep but missing; run depmod in a layer")
    if rel.endswith((".xz", ".gz")):
        decompressor = lzma.LZMADecompressor() if rel.endswith(".xz") else zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            module = decompressor.decompress(data, MODULE_MAX_SIZE)
        except (lzma.LZMAError, zlib.error, EOFError) as exc:
            raise HardwareProfileError(f"/{rel}: cannot decompress: {exc}; reinstall its package in a layer") from exc
        if not decompressor.eof:
            what = "is truncated" if len(module) < MODULE_MAX_SIZE else f"expands past {MODULE_MAX_SIZE >> 20} MiB"
            raise HardwareProfileError(f"/{rel}: cannot decompress: it {what}; reinstall its package in a layer")
        return module
    if rel.endswith(".zst"):
        from ansible_collections.hpc.stateless.plugins.module_utils import _process
        tool = _process.which("zstd", "apt-get install zstd")
        try:
            return _process.run([tool, "-dcq", f"--memory={MODULE_MAX_SIZE >> 20}MB"], input=data, text=False).stdout
        except _process.ProcessError as exc:
            raise HardwareProfileError(f"/{rel}: cannot decompress: {exc}; reinstall its package in a layer") from exc
    return data


def modinfo_field(data: bytes, key: str) -> list[str]:
    """Every ``key=`` value of the ``.modinfo`` section of an ELF64 little-endian module ([] for anything else)."""
    try:
        return _modinfo_field(data, key)
    except (struct.error, IndexError):
        return []  # a truncated or malformed ELF


def _modinfo_field(data: bytes, key: str) -> list[str]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off, strtab_size = sections[shstrndx][4], sections[shstrndx][5]
    for name_off, _type, _flags, _addr, offset, size in sections:
        end = data.find(b"\0", strtab_off + name_off, strtab_off + strtab_size)
        if data[strtab_off + name_off:end] == b".modinfo":
            prefix = key.encode() + b"="
            return [item[len(prefix):].decode("utf-8", "replace") for item in data[offset:offset + size].split(b"\0")
                    if item.startswith(prefix)]
    return []


# -- the plan ----------------------------------------------------------------------------------
@dataclass
class PrunePlan:
    kernel_version: str
    modules_rel: str
    kept: list[str]
    matched: dict[str, list[str]]
    unmatched_modaliases: list[str]
    builtin_named: list[str]
    firmware_kept: list[str]
    kept_paths: dict[str, str] = field(default_factory=dict)  # name -> path below the modules directory
    excluded: set[str] = field(default_factory=set)  # paths relative to the root
    removed: dict[str, dict[str, int]] = field(default_factory=dict)
    kept_size: dict[str, dict[str, int]] = field(default_factory=dict)

    def manifest_entry(self, profile: HardwareProfile) -> dict[str, Any]:
        return {
            "kernel_version": self.kernel_version,
            "profile": profile.fingerprint(),
            "kept_modules": self.kept,
            "builtin_named": self.builtin_named,
            "unmatched_modaliases": self.unmatched_modaliases,
            "kept_firmware": self.firmware_kept,
            "kept": self.kept_size,
            "removed": self.removed,
        }


def _closure(data: ModuleData, start: Iterable[str]) -> list[str]:
    kept: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept.add(name)
        todo += [d for d in data.deps.get(name, []) if d not in kept]
        for soft in data.softdeps.get(name, []):
            todo += [m for m in data.resolve(soft) if m not in kept]
    return sorted(kept)


def _wanted(profile: HardwareProfile, data: ModuleData) -> tuple[set[str], dict[str, list[str]], list[str], list[str]]:
    wanted: set[str] = set()
    builtin_named = []
    for key, names in (("modules", profile.modules), ("force", profile.force)):
        for name in names:
            if name in data.paths:
                wanted.add(name)
            elif name in data.builtin:
                builtin_named.append(name)
            else:
                raise HardwareProfileError(f"hardware_profile.{key}: unknown module {name!r} - the image's kernel "
                                           f"({posixpath.basename(data.directory)}) has no such module; check the "
                                           "name with 'modinfo <name>' on a node")
    matched: dict[str, list[str]] = {}
    unmatched = []
    for line in profile.modaliases:
        found = [m for m in data.aliases.match(line) if m in data.paths]
        if found:
            matched[line] = found
            wanted.update(found)
        else:
            unmatched.append(line)
    wanted.update(m for m in BOOT_MODULES if m in data.paths)
    return wanted, matched, unmatched, sorted(set(builtin_named))


def _file_size(path: str) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _tree_files(root: str, rel: str) -> list[str]:
    """Files and symlinks below ``root/rel``, relative to ``root``, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, rel)):
        dirnames.sort()
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return found


def _exclusions(base: str, removed: list[str], kept: list[str]) -> set[str]:
    """The removed files plus every directory below ``base`` left with nothing kept in it."""
    kept_dirs = {base}
    for rel in kept:
        parent = os.path.dirname(rel)
        while parent.startswith(base + "/") and parent not in kept_dirs:
            kept_dirs.add(parent)
            parent = os.path.dirname(parent)
    excluded = set(removed)
    for rel in removed:
        parent = os.path.dirname(rel)
        while parent.startswith(base + "/") and parent not in kept_dirs and parent not in excluded:
            excluded.add(parent)
            parent = os.path.dirname(parent)
    return excluded


def plan_pruning(root: str, kernel_version: str, profile: HardwareProfile,
                 read_module: Callable[[str, str], bytes] = _module_bytes) -> PrunePlan:
    rel = modules_rel(root, kernel_version)
    if rel is None:
        raise HardwareProfileError(f"hardware_profile: the image has no /usr/lib/modules/{kernel_version} to prune; "
                                   "drop hardware_profile or install the kernel's modules")
    data = ModuleData.read(root, rel)
    wanted, matched, unmatched, builtin_named = _wanted(profile, data)
    kept = _closure(data, wanted)
    firmware_names = set(profile.firmware)
    for name in kept:
        firmware_names.update(modinfo_field(read_module(root, f"{rel}/{data.paths[name]}"), "firmware"))
    kept_paths = {f"{rel}/{data.paths[name]}" for name in kept}
    module_files = [p for p in _tree_files(root, rel) if p.endswith(_MODULE_SUFFIXES)]
    removed_modules = [p for p in module_files if p not in kept_paths]
    fw_rel = _real_rel(root, _FIRMWARE_DIRS)
    fw_kept: list[str] = []
    removed_fw: list[str] = []
    fw_files = _tree_files(root, fw_rel) if fw_rel else []
    for path in fw_files:
        inside = os.path.relpath(path, fw_rel)
        bare = re.sub(r"\.(xz|zst)$", "", inside)
        if any(fnmatch.fnmatchcase(bare, pattern) for pattern in firmware_names):
            fw_kept.append(inside)
        else:
            removed_fw.append(path)
    fw_kept = _with_link_targets(root, fw_rel, fw_kept) if fw_rel else []
    removed_fw = [p for p in removed_fw if os.path.relpath(p, fw_rel) not in fw_kept]
    plan = PrunePlan(kernel_version, rel, kept, matched, unmatched, builtin_named, sorted(fw_kept),
                     {name: data.paths[name] for name in kept})
    plan.excluded = _exclusions(rel, removed_modules, sorted(kept_paths)) | (
        _exclusions(fw_rel, removed_fw, [f"{fw_rel}/{f}" for f in fw_kept]) if fw_rel else set())
    plan.removed = {"modules": _count(root, removed_modules), "firmware": _count(root, removed_fw)}
    plan.kept_size = {"modules": _count(root, sorted(kept_paths)),
                      "firmware": _count(root, [f"{fw_rel}/{f}" for f in fw_kept])}
    return plan


def _with_link_targets(root: str, fw_rel: str, kept: list[str]) -> list[str]:
    """Firmware names that are symlinks keep their targets (inside the firmware directory, resolved in the image)."""
    result = set(kept)
    todo = list(kept)
    while todo:
        rel = f"{fw_rel}/{todo.pop()}"
        target = _imagepath.readlink(root, rel)
        if target is None:
            continue
        hop = _imagepath.resolve_rel(root, posixpath.join(posixpath.dirname(rel), target), follow_last=False)
        if hop is not None and hop.startswith(fw_rel + "/"):
            inside = hop[len(fw_rel) + 1:]
            if inside not in result:
                result.add(inside)
                todo.append(inside)
    return sorted(result)


def _count(root: str, paths: list[str]) -> dict[str, int]:
    return {"files": len(paths), "bytes": sum(_file_size(os.path.join(root, p)) for p in paths)}


# -- depmod ------------------------------------------------------------------------------------
def staged_rel(kernel_version: str) -> str:
    """Where the kept modules are staged for depmod, relative to the staging root (depmod's ``-b``)."""
    return f"lib/modules/{kernel_version}"


def stage_modules(root: str, plan: PrunePlan, staging: str) -> str:
    """``staging/lib/modules/<version>/`` with the kept modules and depmod's inputs; returns that path.

    ``staging`` is a fresh directory of the caller's; every file is read from the image inside it and
    created here anew (the module paths of modules.dep were checked to stay below their directory)."""
    target = os.path.join(staging, staged_rel(plan.kernel_version))
    for rel in plan.kept_paths.values():
        directory, name = posixpath.split(rel)
        os.makedirs(os.path.join(target, directory), exist_ok=True)
        try:
            _imagepath.copy_out(root, f"{plan.modules_rel}/{rel}", os.path.join(target, directory), name, sync=False)
        except OSError as exc:
            raise HardwareProfileError(f"/{plan.modules_rel}/{rel}: {exc.strerror}") from exc
    kept = {_uncompressed_name(rel) for rel in plan.kept_paths.values()}
    for name in DEPMOD_INPUTS:
        data = _read_file(root, f"{plan.modules_rel}/{name}")
        if data is None:
            continue
        if name == "modules.order":
            lines = [line for line in data.decode("utf-8", "surrogateescape").splitlines()
                     if _uncompressed_name(line.strip()) in kept]
            data = "".join(line + "\n" for line in lines).encode("utf-8", "surrogateescape")
        _imagepath.write_file(target, name, data, sync=False)
    return target


def _uncompressed_name(rel: str) -> str:
    """``x.ko`` for ``x.ko.xz``: modules.order lists modules without the compression suffix."""
    return re.sub(r"\.ko\.\w+$", ".ko", rel)


def depmod_outputs(root: str, plan: PrunePlan, staging: str) -> dict[str, bytes]:
    """``{path relative to the root: bytes}`` of the regenerated depmod files (and the filtered order),
    plus the unpruned alias table and the node-side check script.

    The staging tree was written by the image's depmod: it is read like an image (links resolved
    inside ``staging``, the files themselves regular files, never a link), and so is the image's alias table.
    """
    staged = staged_rel(plan.kernel_version)
    try:
        names = _imagepath.list_dir(staging, staged)
    except OSError as exc:
        raise HardwareProfileError(f"depmod's output directory {os.path.join(staging, staged)}: {exc.strerror}") from exc
    files: dict[str, bytes] = {}
    for name in names:
        if name.startswith("modules.") and name not in ("modules.builtin", "modules.builtin.modinfo"):
            try:
                data = _imagepath.read_file(staging, f"{staged}/{name}", follow_last=False)
            except OSError as exc:
                raise HardwareProfileError(f"depmod's {name} in {os.path.join(staging, staged)}: {exc.strerror}") from exc
            if data is not None:
                files[f"{plan.modules_rel}/{name}"] = data
    if f"{plan.modules_rel}/modules.dep" not in files:
        raise HardwareProfileError(f"depmod wrote no modules.dep in {os.path.join(staging, staged)}")
    full_alias = _read_file(root, f"{plan.modules_rel}/modules.alias")
    if full_alias is not None:
        files[f"{plan.modules_rel}/{FULL_ALIAS_NAME}"] = full_alias
    return files


def format_report(plan: PrunePlan) -> str:
    from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import human_size
    lines = [f"hardware profile: kept {len(plan.kept)} modules, {len(plan.firmware_kept)} firmware files"]
    for category in ("modules", "firmware"):
        removed = plan.removed.get(category, {"files": 0, "bytes": 0})
        lines.append(f"  removed {category}: {removed['files']} files, {human_size(removed['bytes'])}")
    if plan.unmatched_modaliases:
        lines.append(f"  modalias lines no module claims: {len(plan.unmatched_modaliases)}")
    return "\n".join(lines)
