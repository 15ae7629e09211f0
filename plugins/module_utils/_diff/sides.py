# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the two versions an image diff compares come from (see _diff/diff.py :class:`Side`).

* a pack version directory ``<output_dir>/<image>/<version>/``: its manifest.json (packages,
  kernel, kernel command line, layer keys, file capabilities) and one of its artifacts;
* a version published in a boot tree: the same, in ``<boot_root>/images/<image>/<version>/``;
  the default old version is the one the served link points at;
* a layer image in containers-storage: mounted read-only through a working container of our
  buildah client that is always removed again; packages from the tree's package database,
  kernel and file capabilities from the tree, layer keys from the image labels. A layer image
  has no kernel command line (pack adds it), which the result says.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._diff.diff import DEFAULT_TOP, Side, diff_sides
from ansible_collections.hpc.stateless.plugins.module_utils._diff.listing import (
    ListingError,
    list_artifact,
    list_tree,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import kernel_file, newest_version_dir, read_manifest
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    CPIO_FORMATS,
    FORMATS,
    MANIFEST_FILE,
    RELEASE_PATH,
    ArtifactError,
    check_name,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.pkgdb import read_package_db
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    KEY_LABEL,
    LAYER_LABEL,
    arch_of,
    container_name,
    image_prefix_of,
    layer_keys_of,
    owner_instance,
)
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import BootTree
from ansible_collections.hpc.stateless.plugins.module_utils._pack.capabilities import recorded, tree_capabilities
from ansible_collections.hpc.stateless.plugins.module_utils._pack.kernel import KernelError, find_kernel
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import DEFAULT_EXCLUDES, ExcludeRules

# purpose part of the names of the diff's throw-away working containers (see _contract/labels.py's container_name)
CONTAINER_PURPOSE = "diff"
KEEP = frozenset({RELEASE_PATH})  # files whose content the diff shows


class DiffError(ArtifactError):
    """A version to compare cannot be found or read; the message names the path, version or image."""


def _artifact(version_dir: str, manifest: dict[str, Any], fmt: str | None) -> tuple[str, str]:
    """(path, format) of the artifact to list: ``fmt`` when given, else a cpio one (one stream), else any."""
    found = {a.get("format") or "": a["file"] for a in manifest["artifacts"]}
    if fmt is not None:
        if fmt not in found:
            raise DiffError(f"{version_dir}: no {fmt} artifact (this version has: {', '.join(sorted(found)) or 'none'});"
                            " choose one of those with the format option")
        chosen = fmt
    else:
        usable = [f for f in CPIO_FORMATS if f in found] + [f for f in FORMATS if f in found and f not in CPIO_FORMATS]
        if not usable:
            raise DiffError(f"{version_dir}/{MANIFEST_FILE} lists no artifact of a known format "
                            f"({', '.join(FORMATS)}); re-run the pack step")
        chosen = usable[0]
    path = os.path.join(version_dir, found[chosen])
    if not os.path.isfile(path):
        raise DiffError(f"{path}: listed in {MANIFEST_FILE} but missing; re-run the pack step (or deploy again)")
    return path, chosen


def version_dir_side(version_dir: str, label: str = "", fmt: str | None = None) -> Side:
    """A pack version directory or a published version directory."""
    version_dir = os.path.abspath(version_dir)
    if not os.path.isdir(version_dir):
        raise DiffError(f"{version_dir} is not a directory; give a version directory <output_dir>/<image>/<version> "
                        "written by hpc.stateless.pack")
    try:
        manifest = read_manifest(os.path.join(version_dir, MANIFEST_FILE))
    except ArtifactError as exc:
        raise DiffError(str(exc)) from None
    path, chosen = _artifact(version_dir, manifest, fmt)
    kernel = manifest.get("kernel") or {}
    packages = manifest.get("packages")
    notes = [] if isinstance(packages, list) else [f"{version_dir}/{MANIFEST_FILE} has no package list"]
    return Side(label=label or f"{manifest['image']} {manifest['version']}",
                members=lambda: list_artifact(path, chosen, KEEP),
                image=manifest["image"], version=manifest["version"], source=path,
                packages=packages if isinstance(packages, list) else None,
                kernel=str(kernel.get("version") or kernel_file(manifest)),
                kernel_args=manifest.get("kernel_args"),
                layer_keys=dict(manifest.get("layer_keys") or {}), arch=str(manifest.get("arch") or ""), notes=notes,
                capabilities=lambda: recorded(manifest))


def newest_pack(output_dir: str, image: str) -> str:
    """The version directory of ``image`` under ``output_dir`` that was packed last (deploy's rule too)."""
    check_name("image", image)
    image_dir = os.path.join(os.path.abspath(output_dir), image)
    newest = None
    with contextlib.suppress(FileNotFoundError):
        newest = newest_version_dir(image_dir)
    if newest is None:
        raise DiffError(f"{image_dir}: no packed version of image {image} (no <version>/{MANIFEST_FILE}); "
                        "pack it first (ansible-playbook hpc.stateless.pack)")
    return newest


def boot_tree_side(boot_root: str, image: str, version: str | None, fmt: str | None = None) -> Side:
    """A version published in the boot tree at ``boot_root``; None means the served one."""
    check_name("image", image)
    tree = BootTree(boot_root)
    served = tree.current(image)
    if version is None:
        if served is None:
            raise DiffError(f"{tree.served_link(image)}: image {image} is not served from {tree.root} (no link); "
                            "deploy a version first or name the old version explicitly")
        version = served
    check_name("version", version)
    path = tree.version_dir(image, version)
    if not os.path.isdir(path):
        published = ", ".join(v.name for v in tree.versions(image)) or "none"
        raise DiffError(f"{path}: version {version} of image {image} is not published in {tree.root} "
                        f"(published: {published})")
    mark = " (served)" if version == served else ""
    return version_dir_side(path, label=f"{image} {version}{mark} in {tree.root}", fmt=fmt)


class LayerImages:
    """Opens layer images read-only for a diff; :meth:`close` (or the with block) removes every container."""

    def __init__(self, buildah: Buildah | None = None) -> None:
        self.buildah = buildah or Buildah()
        self.containers: list[str] = []

    def side(self, ref: str, role: str) -> Side:
        """``ref`` mounted through a working container named after this process and ``role`` (old/new)."""
        try:
            data = self.buildah.inspect_image(ref)
        except BuildahError as exc:
            raise DiffError(f"{role}_image {ref} is not in local containers-storage: build or pull it first "
                            f"({exc.stderr.strip() or exc})") from None
        labels = data.get("OCIv1", {}).get("config", {}).get("Labels") or {}
        name = container_name(image_prefix_of(ref), f"{CONTAINER_PURPOSE}-{role}", owner_instance(os.getpid()))
        self.buildah.remove(name)  # left by a killed diff of a process that had our pid
        self.containers.append(name)
        try:
            self.buildah.from_image(ref, name)
            root = self.buildah.mount(name)
        except BuildahError as exc:
            raise DiffError(f"{role}_image {ref}: cannot mount it: {exc}") from None
        notes = [f"{role}_image {ref} is a layer image: no kernel command line (pack adds it)"]
        database = read_package_db(root)
        packages: list[dict[str, Any]] | None = [p.summary() for p in database.packages]
        if database.reason:
            notes.append(f"{role}_image {ref}: {database.reason}")
            packages = None if database.failed else packages
        try:
            kernel = find_kernel(root).version
        except KernelError:
            kernel = ""
            notes.append(f"{role}_image {ref} has no kernel")
        layer = labels.get(LAYER_LABEL, "")
        return Side(label=f"{ref}", members=lambda: list_tree(root, KEEP), image=layer,
                    version=labels.get(KEY_LABEL, "")[:12], source=ref, packages=packages, kernel=kernel,
                    kernel_args=None, layer_keys=layer_keys_of(self.buildah, ref, labels), arch=arch_of(labels),
                    notes=notes, packed=False,
                    capabilities=lambda: tree_capabilities(root, ExcludeRules(DEFAULT_EXCLUDES)))

    def close(self) -> None:
        for name in self.containers:
            self.buildah.remove(name)
        self.containers.clear()

    def __enter__(self) -> "LayerImages":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def list_errors() -> tuple[type[Exception], ...]:
    """Errors of reading a side that the module reports as a failure with their message."""
    return (DiffError, ListingError, ArtifactError, _process.ProcessError, _process.ToolMissing)


# -- the module's entry point --------------------------------------------------------------------
def _side(params: dict[str, Any], images: LayerImages, role: str) -> Side:
    """The ``role`` (old/new) side: its version directory, its layer image, or what that role defaults to."""
    if params.get(f"{role}_dir"):
        return version_dir_side(params[f"{role}_dir"], fmt=params.get("format"))
    if params.get(f"{role}_image"):
        return images.side(params[f"{role}_image"], role)
    return _old_default(params) if role == "old" else _new_default(params)


def _old_default(params: dict[str, Any]) -> Side:
    """The version a boot tree serves (or ``old_version`` of it)."""
    if params.get("boot_root") and params.get("image"):
        return boot_tree_side(params["boot_root"], params["image"], params.get("old_version"), params.get("format"))
    raise DiffError("nothing to compare against: give old_dir, old_image, or boot_root and image "
                    "(old_version defaults to the version the boot tree serves)")


def _new_default(params: dict[str, Any]) -> Side:
    """The newest pack in ``output_dir`` (or ``new_version`` of it, or of a boot tree)."""
    if params.get("output_dir") and params.get("image"):
        image, version = params["image"], params.get("new_version")
        if version:
            check_name("version", version)
            path = os.path.join(os.path.abspath(params["output_dir"]), check_name("image", image), version)
            if not os.path.isdir(path):
                raise DiffError(f"{path}: version {version} of image {image} has not been packed into "
                                f"{params['output_dir']}")
        else:
            path = newest_pack(params["output_dir"], image)
        return version_dir_side(path, fmt=params.get("format"))
    if params.get("boot_root") and params.get("image") and params.get("new_version"):
        return boot_tree_side(params["boot_root"], params["image"], params["new_version"], params.get("format"))
    raise DiffError("nothing to compare: give new_dir, new_image, output_dir and image (newest pack), "
                    "or boot_root, image and new_version")


def compare(params: dict[str, Any], buildah: Buildah | None = None) -> dict[str, Any]:
    """Resolve both sides from the module parameters and diff them; layer images are always released."""
    with LayerImages(buildah) as images:
        old = _side(params, images, "old")
        new = _side(params, images, "new")
        return diff_sides(old, new, top=params.get("top") or DEFAULT_TOP)
