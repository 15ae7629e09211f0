# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What changed between two versions of an image: packages, files, file capabilities, kernel, layers, image-release.

A :class:`Side` is one version, whatever it came from (a pack version directory, a version
published in a boot tree, a layer image): its manifest facts and a listing of its entries
(_diff/listing.py). :func:`diff_sides` reads both listings at once (two threads: hashing
and the decompressors run outside the GIL) and compares entries by type, permission bits,
owner, size and content digest (or link target / device numbers). Modification times are
not compared: pack clamps them to SOURCE_DATE_EPOCH. File capabilities, which a cpio artifact
cannot carry, are compared as the sides record them (a pack's manifest, a layer image's files).

Renderings of the result: :func:`render_table` (text lines a person reads),
:func:`render_markdown` (a short summary for a merge-request comment); the result itself is
the JSON.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import heapq
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ansible_collections.hpc.stateless.plugins.module_utils._archive import debversion
from ansible_collections.hpc.stateless.plugins.module_utils._paths import write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._diff.listing import Member
from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import human_size
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import RELEASE_PATH
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import parse_image_release
from ansible_collections.hpc.stateless.plugins.module_utils._pack.capabilities import PACK_ADDED as RESTORE_ADDED

DEFAULT_TOP = 10
# What pack puts into every packed copy (the release file, an empty machine-id and its dbus link,
# and for cpio /dev/console, /init and the restore of file capabilities): not compared between a
# pack and a layer image, which has not been through pack.
PACK_ADDED = frozenset({RELEASE_PATH, "etc/machine-id", "var/lib/dbus/machine-id", "dev/console", "init"}) | RESTORE_ADDED


@dataclass
class Side:
    """One version of an image. ``members`` is called once and may stream."""

    label: str
    members: Callable[[], Iterable[Member]]
    image: str = ""
    version: str = ""
    source: str = ""  # what it was read from (path or image reference)
    packages: list[dict[str, Any]] | None = None  # None: unknown (then the package section says so)
    kernel: str = ""
    kernel_args: str | None = None
    layer_keys: dict[str, str] = field(default_factory=dict)
    arch: str = ""  # the image's architecture, Debian's name ("" when its pack or labels record none)
    notes: list[str] = field(default_factory=list)
    packed: bool = True  # False for a layer image (no pack overlay, see PACK_ADDED)
    # {"/path": capabilities}, read with the members; None: unknown (a pack from before they were recorded)
    capabilities: Callable[[], dict[str, str] | None] = lambda: None


# -- versions --------------------------------------------------------------------------------------
def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as dpkg orders two package versions ``[epoch:]upstream[-revision]`` (the archive view's
    :func:`debversion.compare`, the one rule of the collection).

    rpm versions (``[epoch:]version-release``) order the same way in all but corner cases; a version that
    is no Debian version at all (empty, white space) falls back to plain text order, so a listing never fails.
    """
    try:
        return debversion.compare(left, right)
    except ValueError:
        return (left > right) - (left < right)


# -- comparisons -----------------------------------------------------------------------------------
def _versions_by_name(packages: Iterable[dict[str, Any]]) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for package in packages:
        found.setdefault(str(package["name"]), []).append(str(package.get("version", "")))
    return {name: ", ".join(sorted(set(versions))) for name, versions in found.items()}


def diff_packages(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> dict[str, Any]:
    """added / removed / upgraded / downgraded / changed (several versions of one name) packages, and the
    ``security`` updates among the changed ones (see :func:`security_updates`)."""
    result: dict[str, Any] = {"known": old is not None and new is not None, "added": [], "removed": [],
                              "upgraded": [], "downgraded": [], "changed": [], "security": [],
                              "security_known": False}
    if not result["known"]:
        return result
    before, after = _versions_by_name(old or []), _versions_by_name(new or [])
    for name in sorted(set(before) | set(after)):
        was, now = before.get(name), after.get(name)
        if was is None:
            result["added"].append({"name": name, "version": now})
        elif now is None:
            result["removed"].append({"name": name, "version": was})
        elif was != now:
            entry = {"name": name, "old": was, "new": now}
            if ", " in was or ", " in now:
                result["changed"].append(entry)
            else:
                result["upgraded" if compare_versions(was, now) < 0 else "downgraded"].append(entry)
    result["security_known"], result["security"] = security_updates(result, new or [])
    return result


def security_updates(packages: dict[str, Any], new: list[dict[str, Any]]) -> tuple[bool, list[dict[str, Any]]]:
    """Whether the new side says where its packages come from (a pack whose manifest records each package's
    ``origin``), and the changed packages whose new version's origin is a security suite:
    ``{name, old, new, origin}``."""
    origins = {str(p["name"]): p for p in new if "origin" in p}
    if not origins:
        return False, []
    found = []
    for kind in ("upgraded", "downgraded", "changed"):
        for entry in packages[kind]:
            origin = origins.get(entry["name"])
            if origin and origin.get("security"):
                found.append({**entry, "origin": origin["origin"]})
    return True, sorted(found, key=lambda e: e["name"])


def diff_capabilities(old: dict[str, str] | None, new: dict[str, str] | None) -> dict[str, Any]:
    """added / removed / changed file capabilities (``{path, capabilities}``, ``{path, old, new}``)."""
    result: dict[str, Any] = {"known": old is not None and new is not None, "added": [], "removed": [], "changed": []}
    if old is None or new is None:
        return result
    for path in sorted(set(old) | set(new)):
        was, now = old.get(path), new.get(path)
        if was is None:
            result["added"].append({"path": path, "capabilities": now})
        elif now is None:
            result["removed"].append({"path": path, "capabilities": was})
        elif was != now:
            result["changed"].append({"path": path, "old": was, "new": now})
    return result


def _what_changed(old: Member, new: Member) -> list[str]:
    if old.kind != new.kind:
        return ["type"]
    what = []
    if old.digest != new.digest or old.size != new.size:
        what.append({"symlink": "target", "char": "device", "block": "device"}.get(old.kind, "content"))
    if old.mode != new.mode:
        what.append("mode")
    if (old.uid, old.gid) != (new.uid, new.gid):
        what.append("owner")
    return what


def _describe(member: Member) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": "/" + member.path, "type": member.kind, "size": member.size}
    if member.kind == "symlink":
        entry["target"] = member.digest
    return entry


def _collect(members: Iterable[Member], keep: frozenset[str]) -> tuple[dict[str, Member], dict[str, bytes]]:
    table: dict[str, Member] = {}
    kept: dict[str, bytes] = {}
    for member in members:
        if member.path in keep and member.data is not None:
            kept[member.path] = member.data
        member.data = None
        table[member.path] = member
    return table, kept


def diff_files(old: dict[str, Member], new: dict[str, Member], top: int = DEFAULT_TOP) -> dict[str, Any]:
    added = [_describe(new[p]) for p in sorted(set(new) - set(old))]
    removed = [_describe(old[p]) for p in sorted(set(old) - set(new))]
    changed = []
    for path in sorted(set(old) & set(new)):
        was, now = old[path], new[path]
        if was.key() == now.key():
            continue
        entry: dict[str, Any] = {"path": "/" + path, "type": now.kind, "changed": _what_changed(was, now),
                                 "old_size": was.size, "new_size": now.size, "delta": now.size - was.size}
        if "mode" in entry["changed"]:
            entry["old_mode"], entry["new_mode"] = f"{was.mode:04o}", f"{now.mode:04o}"
        if "owner" in entry["changed"]:
            entry["old_owner"], entry["new_owner"] = f"{was.uid}:{was.gid}", f"{now.uid}:{now.gid}"
        if "target" in entry["changed"]:
            entry["old_target"], entry["new_target"] = was.digest, now.digest
        changed.append(entry)
    growth = [{"path": e["path"], "delta": e["size"], "old_size": 0, "new_size": e["size"]}
              for e in added if e["type"] == "file"]
    growth += [{"path": e["path"], "delta": e["delta"], "old_size": e["old_size"], "new_size": e["new_size"]}
               for e in changed if e["type"] == "file"]
    largest = heapq.nlargest(top, (g for g in growth if g["delta"] > 0), key=lambda g: (g["delta"], g["path"]))
    old_bytes = sum(m.size for m in old.values() if m.kind == "file")
    new_bytes = sum(m.size for m in new.values() if m.kind == "file")
    return {
        "added": added, "removed": removed, "changed": changed, "largest_growths": largest,
        "old": {"entries": len(old), "bytes": old_bytes}, "new": {"entries": len(new), "bytes": new_bytes},
        "delta": new_bytes - old_bytes,
    }


def diff_layers(old: dict[str, str], new: dict[str, str]) -> dict[str, Any]:
    """Layers whose content key differs were rebuilt; a layer in one side only was added or removed."""
    rebuilt = [{"layer": n, "old": old[n], "new": new[n]} for n in sorted(set(old) & set(new)) if old[n] != new[n]]
    return {"rebuilt": rebuilt, "added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
            "unchanged": sorted(n for n in set(old) & set(new) if old[n] == new[n])}


def parse_release(data: bytes | None) -> dict[str, str] | None:
    """The ``/etc/image-release`` of a side (_contract/release.py reads it); None when the side has none."""
    return None if data is None else parse_image_release(data)


def _changed(old: Any, new: Any) -> dict[str, Any]:
    """A value of both sides; None on either side is unknown (a layer image has no kernel command line)."""
    return {"old": old, "new": new, "changed": old is not None and new is not None and old != new}


def _read(side: Side, keep: frozenset[str]) -> tuple[dict[str, Member], dict[str, bytes], dict[str, str] | None]:
    return (*_collect(side.members(), keep), side.capabilities())


def diff_sides(old: Side, new: Side, top: int = DEFAULT_TOP) -> dict[str, Any]:
    """The whole comparison of ``old`` and ``new`` as JSON-ready data."""
    keep = frozenset({RELEASE_PATH})
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(_read, side, keep) for side in (old, new)]
        (old_members, old_kept, old_caps), (new_members, new_kept, new_caps) = [f.result() for f in futures]
    notes = old.notes + [n for n in new.notes if n not in old.notes]
    if old.packed != new.packed:
        for table in (old_members, new_members):
            for path in PACK_ADDED:
                table.pop(path, None)
        notes.append("a pack and a layer image: /" + ", /".join(sorted(PACK_ADDED)) + " are added by pack "
                     "and not compared")
    files = diff_files(old_members, new_members, top)
    release_old, release_new = parse_release(old_kept.get(RELEASE_PATH)), parse_release(new_kept.get(RELEASE_PATH))
    release_keys = sorted(set(release_old or {}) | set(release_new or {}))
    result: dict[str, Any] = {
        "old": _side_facts(old), "new": _side_facts(new),
        "packages": diff_packages(old.packages, new.packages),
        "files": files,
        "capabilities": diff_capabilities(old_caps, new_caps),
        "kernel": _changed(old.kernel or None, new.kernel or None),
        "kernel_args": _changed(old.kernel_args, new.kernel_args),
        "arch": _changed(old.arch or None, new.arch or None),
        "layers": diff_layers(old.layer_keys, new.layer_keys),
        "release": {"old": release_old, "new": release_new,
                    "changed": [k for k in release_keys if (release_old or {}).get(k) != (release_new or {}).get(k)]},
        "notes": notes,
    }
    if not result["capabilities"]["known"]:
        notes.append("file capabilities: not compared (a pack from before pack recorded them in its manifest)")
    packages, capabilities = result["packages"], result["capabilities"]
    result["differs"] = bool(
        files["added"] or files["removed"] or files["changed"] or result["kernel"]["changed"]
        or capabilities["added"] or capabilities["removed"] or capabilities["changed"]
        or result["kernel_args"]["changed"] or result["arch"]["changed"] or result["layers"]["rebuilt"]
        or result["layers"]["added"] or result["layers"]["removed"]
        or any(packages[k] for k in ("added", "removed", "upgraded", "downgraded", "changed")))
    result["summary"] = summary_counts(result)
    return result


def _side_facts(side: Side) -> dict[str, Any]:
    return {"label": side.label, "image": side.image, "version": side.version, "source": side.source,
            "kernel": side.kernel, "kernel_args": side.kernel_args, "arch": side.arch,
            "layer_keys": dict(sorted(side.layer_keys.items())),
            "packages": None if side.packages is None else len(side.packages)}


def summary_counts(result: dict[str, Any]) -> dict[str, int]:
    packages, files = result["packages"], result["files"]
    return {
        "packages_added": len(packages["added"]), "packages_removed": len(packages["removed"]),
        "packages_upgraded": len(packages["upgraded"]), "packages_downgraded": len(packages["downgraded"]),
        "packages_changed": len(packages["changed"]), "security_updates": len(packages.get("security") or []),
        "files_added": len(files["added"]), "files_removed": len(files["removed"]),
        "files_changed": len(files["changed"]), "bytes_delta": files["delta"],
        "capabilities_added": len(result["capabilities"]["added"]),
        "capabilities_removed": len(result["capabilities"]["removed"]),
        "capabilities_changed": len(result["capabilities"]["changed"]),
        "layers_rebuilt": len(result["layers"]["rebuilt"]),
    }


# -- renderings ------------------------------------------------------------------------------------
def signed_size(delta: int) -> str:
    return ("+" if delta >= 0 else "-") + human_size(abs(delta))


def _limited(items: list[Any], limit: int, line: Callable[[Any], str]) -> Iterator[str]:
    for item in items[:limit]:
        yield "  " + line(item)
    if len(items) > limit:
        yield f"  ... {len(items) - limit} more (see the JSON result)"


def _package_lines(packages: dict[str, Any], limit: int) -> Iterator[str]:
    if not packages["known"]:
        yield "packages: not compared (one side has no package list)"
        return
    for kind, sign in (("added", "+"), ("removed", "-")):
        yield f"packages {kind}: {len(packages[kind])}"
        yield from _limited(packages[kind], limit, lambda p, s=sign: f"{s} {p['name']} {p['version']}")
    for kind in ("upgraded", "downgraded", "changed"):
        if packages[kind] or kind != "changed":
            yield f"packages {kind}: {len(packages[kind])}"
            yield from _limited(packages[kind], limit, lambda p: f"  {p['name']} {p['old']} -> {p['new']}")
    if packages.get("security_known"):
        yield f"security updates: {len(packages['security'])}"
        yield from _limited(packages["security"], limit, lambda p: f"! {p['name']} {p['old']} -> {p['new']} ({p['origin']})")
    elif packages["upgraded"] or packages["downgraded"] or packages["changed"]:
        yield "security updates: not known (the new side records no package origins: compare packed versions)"


def _capability_lines(capabilities: dict[str, Any], limit: int) -> Iterator[str]:
    """Changed file capabilities; nothing when none changed (or they are unknown: a note says so)."""
    for kind, sign in (("added", "+"), ("removed", "-")):
        if capabilities[kind]:
            yield f"file capabilities {kind}: {len(capabilities[kind])}"
            yield from _limited(capabilities[kind], limit, lambda c, s=sign: f"{s} {c['path']} {c['capabilities']}")
    if capabilities["changed"]:
        yield f"file capabilities changed: {len(capabilities['changed'])}"
        yield from _limited(capabilities["changed"], limit, lambda c: f"~ {c['path']} {c['old']} -> {c['new']}")


def _file_line(entry: dict[str, Any], sign: str) -> str:
    target = f" -> {entry['target']}" if "target" in entry else ""
    return f"{sign} {entry['path']} ({entry['type']}, {human_size(entry['size'])}){target}"


def _changed_line(entry: dict[str, Any]) -> str:
    details = []
    for what in entry["changed"]:
        if what == "mode":
            details.append(f"mode {entry['old_mode']} -> {entry['new_mode']}")
        elif what == "owner":
            details.append(f"owner {entry['old_owner']} -> {entry['new_owner']}")
        elif what == "target":
            details.append(f"target {entry['old_target']} -> {entry['new_target']}")
        else:
            details.append(what)
    return f"~ {entry['path']} ({', '.join(details)}; {signed_size(entry['delta'])})"


def render_table(result: dict[str, Any], limit: int = 50) -> list[str]:
    """The comparison as text lines a person reads, at most ``limit`` lines per list."""
    old, new, files = result["old"], result["new"], result["files"]
    lines = [f"old: {old['label']}", f"new: {new['label']}"]
    if not result["differs"]:
        lines.append("no difference")
    lines += list(_package_lines(result["packages"], limit))
    lines.append(f"files added: {len(files['added'])}")
    lines += _limited(files["added"], limit, lambda e: _file_line(e, "+"))
    lines.append(f"files removed: {len(files['removed'])}")
    lines += _limited(files["removed"], limit, lambda e: _file_line(e, "-"))
    lines.append(f"files changed: {len(files['changed'])}")
    lines += _limited(files["changed"], limit, _changed_line)
    lines.append(f"size: {human_size(files['old']['bytes'])} -> {human_size(files['new']['bytes'])} "
                 f"({signed_size(files['delta'])})")
    if files["largest_growths"]:
        lines.append("largest growths:")
        lines += [f"  {signed_size(g['delta']):>12}  {g['path']}" for g in files["largest_growths"]]
    lines += _capability_lines(result["capabilities"], limit)
    for key, title in (("arch", "architecture"), ("kernel", "kernel"), ("kernel_args", "kernel command line")):
        item = result[key]
        same = item["old"] == item["new"]
        lines.append(f"{title}: {_shown(item['new'])}" if same else f"{title}: {_shown(item['old'])} -> {_shown(item['new'])}")
    layers = result["layers"]
    rebuilt = [f"{r['layer']} ({r['old'][:12]} -> {r['new'][:12]})" for r in layers["rebuilt"]]
    lines.append("layers rebuilt: " + (", ".join(rebuilt) or "none"))
    for kind in ("added", "removed"):
        if layers[kind]:
            lines.append(f"layers {kind}: {', '.join(layers[kind])}")
    release = result["release"]
    for side in ("old", "new"):
        values = release[side]
        text = " ".join(f"{k}={v}" for k, v in values.items()) if values is not None else f"no /{RELEASE_PATH}"
        lines.append(f"image-release ({side}): {text}")
    lines += [f"note: {note}" for note in result["notes"]]
    return lines


def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_|<>\[\]])", r"\\\1", str(text))


def _code(text: object) -> str:
    """``text`` as a Markdown code span (literal inside; a backquote cannot end it early)."""
    if text is None:
        return "_unknown_"
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`" if text != "" else "_empty_"


def _shown(value: object) -> str:
    return "unknown" if value is None else str(value)


def _capability_items(capabilities: dict[str, Any]) -> list[str]:
    """Markdown list items of the changed file capabilities: added, removed, then changed."""
    items = [f"added {_code(c['path'])} {_code(c['capabilities'])}" for c in capabilities["added"]]
    items += [f"removed {_code(c['path'])} {_code(c['capabilities'])}" for c in capabilities["removed"]]
    items += [f"{_code(c['path'])} {_code(c['old'])} → {_code(c['new'])}" for c in capabilities["changed"]]
    return items


def render_markdown(result: dict[str, Any], limit: int = 20) -> str:
    """A short Markdown summary (counts, then the first ``limit`` entries of each list) for a merge request."""
    old, new, files, packages, counts = result["old"], result["new"], result["files"], result["packages"], \
        result["summary"]
    out = [f"### Image diff: {_md_escape(old['label'])} → {_md_escape(new['label'])}", ""]
    if not result["differs"]:
        out += ["No difference.", ""]
    out += ["| | added | removed | upgraded | downgraded | changed |", "|---|---:|---:|---:|---:|---:|"]
    if packages["known"]:
        out.append(f"| packages | {counts['packages_added']} | {counts['packages_removed']} | "
                   f"{counts['packages_upgraded']} | {counts['packages_downgraded']} | {counts['packages_changed']} |")
    else:
        out.append("| packages | n/a | n/a | n/a | n/a | n/a |")
    out.append(f"| files | {counts['files_added']} | {counts['files_removed']} | | | {counts['files_changed']} |")
    if result["capabilities"]["known"]:
        out.append(f"| file capabilities | {counts['capabilities_added']} | {counts['capabilities_removed']} | | | "
                   f"{counts['capabilities_changed']} |")
    out += ["", f"Size: {human_size(files['old']['bytes'])} → {human_size(files['new']['bytes'])} "
                f"(**{signed_size(files['delta'])}**)"]
    for key, title in (("arch", "Architecture"), ("kernel", "Kernel"), ("kernel_args", "Kernel command line")):
        item = result[key]
        value = (f"{_code(item['new'])} (unchanged)" if item["old"] == item["new"]
                 else f"{_code(item['old'])} → {_code(item['new'])}")
        out.append(f"{title}: {value}  ")
    rebuilt = ", ".join(_md_escape(r["layer"]) for r in result["layers"]["rebuilt"]) or "none"
    layer_lines = [f"Layers rebuilt: {rebuilt}"] + [
        f"Layers {kind}: " + ", ".join(_md_escape(name) for name in result["layers"][kind])
        for kind in ("removed", "added") if result["layers"][kind]]
    out.append("  \n".join(layer_lines))  # Markdown line breaks
    if packages.get("security"):
        out += ["", f"**Security updates ({len(packages['security'])})**", ""]
        out += [f"- {_code(p['name'])} {_md_escape(p['old'])} → {_md_escape(p['new'])} ({_md_escape(p['origin'])})"
                for p in packages["security"][:limit]]
        if len(packages["security"]) > limit:
            out.append(f"- … {len(packages['security']) - limit} more")
    sections: list[tuple[str, list[str]]] = [
        ("Packages added", [f"{_code(p['name'])} {_md_escape(p['version'])}" for p in packages["added"]]),
        ("Packages removed", [f"{_code(p['name'])} {_md_escape(p['version'])}" for p in packages["removed"]]),
        ("Packages upgraded", [f"{_code(p['name'])} {_md_escape(p['old'])} → {_md_escape(p['new'])}"
                               for p in packages["upgraded"]]),
        ("Packages downgraded", [f"{_code(p['name'])} {_md_escape(p['old'])} → {_md_escape(p['new'])}"
                                 for p in packages["downgraded"]]),
        ("Largest growths", [f"{_code(g['path'])} {signed_size(g['delta'])}"
                             for g in files["largest_growths"]]),
        ("File capabilities", _capability_items(result["capabilities"])),
    ]
    for title, items in sections:
        if items:
            out += ["", f"<details><summary>{title} ({len(items)})</summary>", ""]
            out += [f"- {item}" for item in items[:limit]]
            if len(items) > limit:
                out.append(f"- … {len(items) - limit} more")
            out += ["", "</details>"]
    return "\n".join(out) + "\n"


def write_markdown(path: str, text: str, check_mode: bool = False) -> bool:
    """Replace ``path`` with ``text`` at once (temporary file, fsync, rename); False when it holds it already."""
    path = os.path.abspath(path)
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    directory = os.path.dirname(path)
    if check_mode:  # the directory may be one an earlier task would have made
        return True
    if not os.path.isdir(directory):
        raise OSError(f"directory {directory} does not exist; create it first")
    write_atomic(path, text)
    return True
