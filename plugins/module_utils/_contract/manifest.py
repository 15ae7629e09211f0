# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The manifest of a version directory, and what pack writes into the packed copy: pure functions.

* ``manifest.json`` - the contract with deploy: :func:`build_manifest` writes it (pack),
  :func:`read_manifest` checks and reads it (deploy); the schema is :func:`check_manifest`
  (see docs/pack.md). Names and file names: _contract/names.py; SHA256SUMS: _contract/sums.py;
* the times they hold (:func:`iso_utc`; ``/etc/image-release`` itself: _contract/release.py);
* the installed package list (read by _contract/pkgdb.py, the same reader as the SBOM) and the size report.

Every value is derived from the image and SOURCE_DATE_EPOCH, never from the clock, so a
second pack of the same image writes the same bytes.
"""

from __future__ import annotations

import heapq
import json
import os
from typing import Any, Iterable

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    KERNEL_FILE,
    MANIFEST_FILE,
    ArtifactError,
    check_file_name,
    check_name,
)
# The times of the manifest; parse_iso_utc is named here too for the callers that read them through this module.
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc
from ansible_collections.hpc.stateless.plugins.module_utils._time import parse_iso_utc  # noqa: F401  # pylint: disable=unused-import


# -- packages (read by _contract/pkgdb.py) ----------------------------------------------------
def largest_packages(packages: Iterable[dict[str, Any]], count: int = 20) -> list[dict[str, Any]]:
    ranked = heapq.nlargest(count, packages, key=lambda p: (p["size"], p["name"]))
    return [{"name": p["name"], "version": p["version"], "bytes": p["size"]} for p in ranked]


def size_report(uncompressed: int, files: int, packages: list[dict[str, Any]],
                directories: list[dict[str, Any]], largest_files: list[tuple[int, str]],
                count: int = 20, pruned: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """``pruned``: what a hardware profile left out, ``{category: {files, bytes}}`` (the key is absent without one)."""
    report: dict[str, Any] = {
        "uncompressed_size": uncompressed,
        "files": files,
        "largest_packages": largest_packages(packages, count),
        "largest_directories": directories[:count],
        "largest_files": [{"path": "/" + rel, "bytes": size}
                          for size, rel in sorted(largest_files, key=lambda t: (-t[0], t[1]))[:count]],
    }
    if pruned is not None:
        report["pruned_by_hardware_profile"] = pruned
    return report


def human_size(value: int) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def format_size_report(report: dict[str, Any]) -> str:
    """The size report as the text table printed to the user."""
    lines = [f"uncompressed: {human_size(report['uncompressed_size'])} in {report['files']} files"]
    for category, removed in (report.get("pruned_by_hardware_profile") or {}).items():
        lines.append(f"removed by the hardware profile: {category} {removed['files']} files, "
                     f"{human_size(removed['bytes'])}")
    if report["largest_packages"]:
        lines.append("largest packages:")
        lines += [f"  {human_size(p['bytes']):>10}  {p['name']} {p['version']}" for p in report["largest_packages"]]
    lines.append("largest directories:")
    lines += [f"  {human_size(d['bytes']):>10}  {d['path']}" for d in report["largest_directories"]]
    return "\n".join(lines)


# -- manifest ----------------------------------------------------------------------------------
def build_manifest(*, image: str, version: str, created: int, layer: str, layer_keys: dict[str, str],
                   kernel: dict[str, Any], artifacts: list[dict[str, Any]], uncompressed_size: int,
                   packages: list[dict[str, Any]], kernel_args: str = "", initrd: dict[str, Any] | None = None,
                   source: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
                   report: dict[str, Any] | None = None,
                   hardware_profile: dict[str, Any] | None = None,
                   capabilities: list[dict[str, Any]] | None = None,
                   origins: dict[str, dict[str, Any]] | None = None,
                   freshness: dict[str, Any] | None = None, arch: str = "") -> dict[str, Any]:
    """The manifest deploy reads (checked by :func:`check_manifest`); keys beyond the shared contract are
    additions, never renames. ``capabilities``: the file capabilities of the packed tree (_pack/capabilities.py).
    ``origins``: ``{package: {suite, uri, security}}`` of the installed versions the archive serves, and
    ``freshness``: the repository states and pending updates at pack time (both _verify/freshness.py). ``arch``:
    the image's architecture, Debian's name (its layer image's label, docs/arch.md); "" (not written) for a tree
    that records none."""
    data: dict[str, Any] = {
        "image": image,
        "version": version,
        "created": iso_utc(created),
        "layer": layer,
        "layer_keys": dict(sorted(layer_keys.items())),
        "kernel": kernel,
        "artifacts": artifacts,
        "uncompressed_size": uncompressed_size,
        "packages": [package_entry(p, (origins or {}).get(p["name"])) for p in packages],
        "kernel_args": kernel_args,
        "initrd": initrd,
    }
    if source is not None:
        data["source"] = source
    if options is not None:
        data["options"] = options
    if report is not None:
        data["size_report"] = report
    if hardware_profile is not None:
        data["hardware_profile"] = hardware_profile
    if capabilities is not None:
        data["capabilities"] = capabilities
    if freshness is not None:
        data["freshness"] = freshness
    if arch:
        data["arch"] = arch
    return check_manifest(data, "the manifest pack writes")


def package_entry(package: dict[str, Any], origin: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``packages`` entry: name, version and, when known, architecture (multi-arch images list a
    package once per architecture) and ``origin``, the suite of the source that serves that version, with
    ``security`` true when it is a security suite (image_diff's security updates)."""
    entry: dict[str, Any] = {"name": package["name"], "version": package["version"]}
    if package.get("architecture"):
        entry["architecture"] = package["architecture"]
    if origin:
        entry["origin"] = origin["suite"]
        entry["security"] = bool(origin.get("security"))
    return entry


def manifest_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8")


def check_manifest(data: object, where: str) -> dict[str, Any]:
    """``data`` when it holds what deploy reads; ArtifactError naming ``where`` and the key otherwise.

    Required: ``image`` and ``version`` (valid names), ``artifacts`` (a list of objects with a plain
    ``file`` name). Checked when present: ``kernel.file``, ``initrd.file``, ``uncompressed_size``,
    ``capabilities`` (a list of objects with a ``path`` and ``capabilities`` text), ``freshness`` (an object
    of lists).
    """
    if not isinstance(data, dict):
        raise ArtifactError(f"{where}: manifest is not a JSON object; re-run the pack step")
    for key, kind in (("image", str), ("version", str), ("artifacts", list)):
        if not isinstance(data.get(key), kind):
            raise ArtifactError(f"{where}: key {key!r} is missing or not a {kind.__name__}; re-run the pack step")
    try:
        check_name("image", data["image"])
        check_name("version", data["version"])
    except ArtifactError as exc:
        raise ArtifactError(f"{where}: {exc}") from None
    for index, artifact in enumerate(data["artifacts"]):
        if not isinstance(artifact, dict) or not isinstance(artifact.get("file"), str):
            raise ArtifactError(f"{where}: artifacts[{index}] has no 'file'; re-run the pack step")
        check_file_name(f"{where}: artifacts[{index}].file", artifact["file"])
    for key in ("kernel", "initrd"):
        entry = data.get(key)
        if entry is not None and not isinstance(entry, dict):
            raise ArtifactError(f"{where}: key {key!r} is not an object; re-run the pack step")
        if entry and "file" in entry:
            check_file_name(f"{where}: {key}.file", entry["file"])
    size = data.get("uncompressed_size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ArtifactError(f"{where}: 'uncompressed_size' must be a byte count, got {size!r}")
    recorded = data.get("capabilities")
    if recorded is not None and not (isinstance(recorded, list) and all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("capabilities"), str)
            for e in recorded)):
        raise ArtifactError(f"{where}: 'capabilities' must be a list of objects with a path and capabilities; "
                            "re-run the pack step")
    freshness = data.get("freshness")
    if freshness is not None and not (isinstance(freshness, dict) and all(
            isinstance(freshness.get(key, []), list) for key in ("repositories", "archive", "pending_updates"))):
        raise ArtifactError(f"{where}: 'freshness' must be an object whose repositories, archive and pending_updates "
                            "are lists; re-run the pack step")
    return data


def kernel_file(data: dict[str, Any]) -> str:
    """The kernel's file name in a checked manifest."""
    return (data.get("kernel") or {}).get("file", KERNEL_FILE)


def read_manifest(path: str) -> dict[str, Any]:
    """Load ``manifest.json`` at ``path`` and :func:`check_manifest` it; ArtifactError naming the file."""
    return parse_manifest(read_manifest_bytes(path), path)


def read_manifest_bytes(path: str) -> bytes:
    """The bytes of ``manifest.json`` at ``path``, unparsed (to check them against SHA256SUMS first);
    ArtifactError naming the file when it is missing or unreadable."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no manifest.json; is this a version directory written by "
                            "hpc.stateless.pack?") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: unreadable manifest ({exc}); re-run the pack step") from None


def parse_manifest(data: bytes, where: str) -> dict[str, Any]:
    """:func:`check_manifest` of the JSON in ``data`` (read from ``where``); ArtifactError naming it."""
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise ArtifactError(f"{where}: unreadable manifest ({exc}); re-run the pack step") from None
    return check_manifest(parsed, where)


def newest_version_dir(image_dir: str) -> str | None:
    """The version directory under ``image_dir`` packed last, or None when it holds none.

    The one rule deploy and image_diff pick "the newest pack" by: the manifest's ``created`` (the
    build time of the layer), then the manifest file's modification time (two packs of one layer
    image), then the name. Raises FileNotFoundError when ``image_dir`` does not exist.
    """
    candidates = []
    for entry in os.scandir(image_dir):
        path = os.path.join(entry.path, MANIFEST_FILE)
        if entry.name.startswith(".") or not entry.is_dir() or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                created = str(json.load(handle).get("created") or "")
        except (OSError, ValueError, AttributeError):
            created = ""
        candidates.append((created, os.stat(path).st_mtime, entry.name, entry.path))
    return max(candidates)[3] if candidates else None
