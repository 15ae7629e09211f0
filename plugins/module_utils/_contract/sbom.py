# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The software bill of materials of a version directory: CycloneDX 1.6 JSON (``SBOM_FILE``), pure functions.

Written by pack from the same package database reader as the manifest (_contract/pkgdb.py), with
no dependency beyond the standard library (modules run on ansible's Python); the tests check it
with cyclonedx-python-lib's JSON schema validator.

* ``metadata.component``: the image (name, version) with the layer, the key of every layer, the
  source image and its ID (or the source directory), the package database read and, without one,
  why there is none - all as ``hpc.stateless:*`` properties;
* its freshness, when pack checked the archive: the repository states the image was built
  against and those read at pack time, and each pending update, as ``hpc.stateless:repository``,
  ``hpc.stateless:archive`` and ``hpc.stateless:pending_update`` properties (CycloneDX has no field for them);
* one ``library`` component per installed package: name, version, purl, declared licenses (rpm
  ``License`` tag, Debian machine-readable copyright ``License:`` names, as free-text names since
  neither is always an SPDX id), architecture, source package and source version, installed size, and
  the suite and URI of the source that serves that version (``origin_suite``, ``origin_uri``,
  ``origin_security``) when known;
* one ``file`` component for the kernel published beside the image (version, SHA-256).

Reproducible: the timestamp is SOURCE_DATE_EPOCH (the manifest's ``created``), the serial number a
UUID 5 of the content, keys and components sorted - the same image gives the same bytes.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc
from ansible_collections.hpc.stateless.plugins.module_utils._contract.pkgdb import (
    DPKG,
    NONE,
    RPM,
    Distro,
    Package,
    PackageDb,
)

SPEC_VERSION = "1.6"
SCHEMA = f"http://cyclonedx.org/schema/bom-{SPEC_VERSION}.schema.json"
PROPERTY = "hpc.stateless:"  # namespace of our property names
IMAGE_REF = "image"
KERNEL_REF = "kernel"
# fixed for all time: changing it changes the serial number of every SBOM
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:hpc.stateless:sbom")
# purl namespaces of rpm distributions whose os-release ID is not the vendor name purl uses
RPM_VENDORS = {"rhel": "redhat", "opensuse-leap": "opensuse", "opensuse-tumbleweed": "opensuse",
               "opensuse-slowroll": "opensuse", "sles": "suse", "sled": "suse", "sle-micro": "suse"}


# -- purl ----------------------------------------------------------------------------------------
def purl_quote(text: str) -> str:
    """A purl component percent-encoded: everything but ``A-Z a-z 0-9 . - _ ~`` and ``:`` (which the
    purl specification leaves as it is); so ``+`` becomes ``%2B``, ``~`` and ``:`` stay."""
    return urllib.parse.quote(text, safe=":")


def purl(kind: str, namespace: str, name: str, version: str, qualifiers: dict[str, str]) -> str:
    """``pkg:<kind>/<namespace>/<name>@<version>?<key>=<value>&...`` with qualifiers sorted, empty ones left out."""
    path = "/".join(purl_quote(part) for part in (namespace, name) if part)
    query = "&".join(f"{key}={purl_quote(value)}" for key, value in sorted(qualifiers.items()) if value)
    return f"pkg:{kind}/{path}@{purl_quote(version)}" + (f"?{query}" if query else "")


def _distro_qualifier(distro: Distro, vendor: str) -> str:
    release = distro.version_id or distro.codename
    return f"{distro.id or vendor}-{release}" if release else ""


def package_purl(kind: str, package: Package, distro: Distro) -> str:
    """The purl of ``package`` from a ``kind`` (dpkg or rpm) database of the ``distro`` image.

    deb: ``pkg:deb/debian/<name>@<version>?arch=<arch>&distro=debian-<VERSION_ID>`` (the epoch stays
    in the version); rpm: ``pkg:rpm/<vendor>/<name>@<version>-<release>?arch=..&distro=..&epoch=N``
    with the vendor from os-release (left out when the image has none).
    """
    if kind == DPKG:
        vendor = distro.id or "debian"
        return purl("deb", vendor, package.name, package.version,
                    {"arch": package.architecture, "distro": _distro_qualifier(distro, vendor)})
    if kind == RPM:
        vendor = RPM_VENDORS.get(distro.id, distro.id)
        version = package.version[len(package.epoch) + 1:] if package.epoch else package.version
        return purl("rpm", vendor, package.name, version,
                    {"arch": package.architecture, "distro": _distro_qualifier(distro, vendor),
                     "epoch": package.epoch})
    raise ValueError(f"no purl type for package database {kind!r}")


# -- document ------------------------------------------------------------------------------------
def _properties(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": PROPERTY + key, "value": values[key]} for key in sorted(values) if values[key] != ""]


def package_component(kind: str, package: Package, distro: Distro,
                      origin: dict[str, Any] | None = None) -> dict[str, Any]:
    """``origin``: ``{suite, uri, security}`` of the source that serves the installed version, when known."""
    ref = package_purl(kind, package, distro)
    origin = origin or {}
    component: dict[str, Any] = {
        "type": "library",
        "bom-ref": ref,
        "name": package.name,
        "version": package.version,
        "purl": ref,
        "properties": _properties({
            "architecture": package.architecture,
            "source_package": package.source,
            "source_version": package.source_version if package.source_version != package.version else "",
            "installed_size": str(package.size) if package.size else "",
            "origin_suite": str(origin.get("suite") or ""),
            "origin_uri": str(origin.get("uri") or ""),
            "origin_security": "true" if origin.get("security") else "",
        }),
    }
    if package.licenses:
        component["licenses"] = [{"license": {"name": name, "acknowledgement": "declared"}}
                                 for name in package.licenses]
    return component


def kernel_component(kernel: dict[str, Any]) -> dict[str, Any]:
    """The kernel entry of the manifest (file, version, origin, sha256) as a component."""
    component: dict[str, Any] = {
        "type": "file",
        "bom-ref": KERNEL_REF,
        "name": kernel.get("file") or "vmlinuz",
        "version": str(kernel.get("version") or ""),
        "description": "Linux kernel published beside the image",
        "properties": _properties({"kernel_origin": str(kernel.get("origin") or "")}),
    }
    if kernel.get("sha256"):
        component["hashes"] = [{"alg": "SHA-256", "content": kernel["sha256"]}]
    return component


def image_properties(*, layer: str, layer_keys: dict[str, str], source: dict[str, Any],
                     db: PackageDb, arch: str = "") -> dict[str, str]:
    values = {
        "layer": layer,
        "arch": arch,
        "source_image": str(source.get("image") or ""),
        "source_image_id": str(source.get("image_id") or ""),
        "source_path": str(source.get("path") or ""),
        "package_database": db.kind,
        "package_database_reason": db.reason if db.kind == NONE else "",
        "distro": _distro_qualifier(db.distro, db.distro.id),
    }
    values.update({f"layer_key:{name}": key for name, key in layer_keys.items()})
    return values


def freshness_properties(freshness: dict[str, Any] | None) -> list[dict[str, str]]:
    """The image's freshness (_verify/freshness.py's manifest entry) as properties, one per repository state
    (``hpc.stateless:repository`` built against, ``hpc.stateless:archive`` read at pack time, each
    ``<uri> <suite> <date> sha256:<hash>``) and per pending update (``hpc.stateless:pending_update``,
    ``<package> <installed> -> <candidate> <suite>[ security]``), and their count; none without a check."""
    if freshness is None:
        return []
    found = []
    for name in ("repositories", "archive"):
        for state in freshness.get(name) or []:
            value = f"{state.get('uri', '')} {state.get('suite', '')} {state.get('date', '')} sha256:{state.get('sha256', '')}"
            found.append({"name": PROPERTY + ("repository" if name == "repositories" else "archive"), "value": value})
    pending = freshness.get("pending_updates") or []
    for update in pending:
        value = (f"{update['package']} {update['installed']} -> {update['candidate']} {update.get('suite', '')}"
                 + (" security" if update.get("security") else ""))
        found.append({"name": PROPERTY + "pending_update", "value": value})
    found.append({"name": PROPERTY + "pending_updates", "value": str(len(pending))})
    return sorted(found, key=lambda p: (p["name"], p["value"]))


def build_sbom(*, image: str, version: str, created: int, layer: str, layer_keys: dict[str, str],
               kernel: dict[str, Any], db: PackageDb, source: dict[str, Any],
               origins: dict[str, dict[str, Any]] | None = None,
               freshness: dict[str, Any] | None = None, arch: str = "") -> dict[str, Any]:
    """The SBOM document of one pack (see the module doc); :func:`sbom_bytes` serializes it. ``origins`` and
    ``freshness`` are the manifest's (pack's archive check, _verify/freshness.py), absent without one; ``arch``
    is the image's architecture (the property ``hpc.stateless:arch``, empty when its tree records none)."""
    components: dict[str, dict[str, Any]] = {}
    for package in db.packages:
        component = package_component(db.kind, package, db.distro, (origins or {}).get(package.name))
        components.setdefault(component["bom-ref"], component)  # one entry per purl
    components[KERNEL_REF] = kernel_component(kernel)
    ordered = sorted(components.values(), key=lambda c: (c["name"], c["version"], c["bom-ref"]))
    bom: dict[str, Any] = {
        "$schema": SCHEMA,
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "version": 1,
        "metadata": {
            "timestamp": iso_utc(created),
            "tools": {"components": [{"type": "application", "group": "hpc.stateless", "name": "pack"}]},
            "component": {
                "type": "operating-system",
                "bom-ref": IMAGE_REF,
                "name": image,
                "version": version,
                "properties": _properties(image_properties(layer=layer, layer_keys=layer_keys, source=source,
                                                           db=db, arch=arch)) + freshness_properties(freshness),
            },
        },
        "components": ordered,
        # With a package database the list is what it holds (files added outside it are not listed).
        "compositions": [{"aggregate": "unknown" if db.kind == NONE else "incomplete", "assemblies": [IMAGE_REF]}],
    }
    bom["serialNumber"] = f"urn:uuid:{uuid.uuid5(SERIAL_NAMESPACE, _canonical(bom))}"
    return bom


def _canonical(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sbom_bytes(data: dict[str, Any]) -> bytes:
    """The document as written: sorted keys, two-space indent, UTF-8, one trailing newline."""
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
