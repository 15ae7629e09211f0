# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One pack run: source tree -> ``<output_dir>/<image>/<version>/`` with every artifact.

Order of work, so that bad input costs nothing and leaves nothing:

1. validate the request (names, formats, levels);
2. open the source: a throw-away buildah working container of the image (the cached
   layer is never written), or a directory;
3. find the kernel; pass 1 over the tree: sizes, secrets, files too large for cpio, file
   capabilities (restored at boot from a record in cpio images); refuse or warn *before* writing a byte;
4. write every artifact into ``.<version>.partial-<pid>/`` next to the final directory,
   manifest, SBOM and sums last, then rename the directory into place (one rename(2));
5. on any failure remove the partial directory and the working container.

A version directory whose manifest records the same source image and options, and
whose files match SHA256SUMS, is up to date: nothing is written (``changed=false``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract import names, pkgdb, sbom, sums
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import image_release
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import layer_sources
from ansible_collections.hpc.stateless.plugins.module_utils._contract.versions import build_difference
from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath, _process
from ansible_collections.hpc.stateless.plugins.module_utils._paths import (
    fsync_dir,
    move_into_place,
    nearest_existing,
    parse_staging_name,
    staging_name,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    GIT_COMMIT_LABEL,
    KEY_LABEL,
    LAYER_LABEL,
    arch_of,
    container_name,
    container_owner,
    image_prefix_of,
    image_ref,
    layer_keys_of,
    owner_instance,
    repositories_of,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import (
    Buildah,
    BuildahError,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.compress import (
    CompressError,
    CompressorProcess,
    compressor_argv,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.squashfs import (
    SQUASHFS_COMPRESSION,
    SquashfsError,
    exclude_lines,
    mksquashfs_argv,
    pseudo_definitions,
    run_mksquashfs,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.kernel import (
    DRACUT_KERNEL_ARGS,
    HOST_ORIGIN,
    FIRST_STAGE_DIR,
    FIRST_STAGE_FILES,
    FIRST_STAGE_KERNEL_ARGS,
    FIRST_STAGE_MODULE,
    LIVE_BOOT_KERNEL_ARGS,
    Kernel,
    dracut_modules,
    KernelError,
    find_kernel,
    read_kernel_arch,
    has_modules,
    image_initrd,
    squashfs_boot_method,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.hwprofile import (
    NODE_CHECK_PATH,
    NODE_CHECK_SCRIPT,
    HardwareProfile,
    HardwareProfileError,
    PrunePlan,
    depmod_outputs,
    plan_pruning,
    stage_modules,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import MAX_FILE_SIZE, NewcError
from ansible_collections.hpc.stateless.plugins.module_utils._pack import capabilities
from ansible_collections.hpc.stateless.plugins.module_utils._verify import freshness as fresh
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import (
    NOT_CHECKED,
    OVERRIDDEN,
    OVERRIDE_VARIABLE,
    UnverifiedError,
    gate,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import (
    DEFAULT_EXCLUDES,
    ExcludeRules,
    Overlay,
    OverlayFile,
    PackTreeError,
    SecretRules,
    TreeScan,
    scan_overlay,
    scan_tree,
    write_cpio,
)

# purpose part of the names of pack's throw-away working containers (see _contract/labels.py's container_name)
CONTAINER_PURPOSE = "pack"
# Tags of the staging names of a version directory: ``.<version>.partial-<pid>`` while it is written,
# ``.<version>.old-<pid>`` for the version it replaces, between the two renames of the swap.
PARTIAL_TAG = "partial"
OLD_TAG = "old"
_DRACUT_OUT = "/run/hpc-stateless-pack-out"
_DEPMOD_BASE = "/run/hpc-stateless-depmod"
# What an image too large for a cpio initramfs does instead (docs/scale.md).
TWO_STAGE_ADVICE = ("Pack it as squashfs (the image's formats: [squashfs]) and boot it in two stages: the initrd "
                    "fetches the squashfs from the boot servers by its sha256 and mounts it as root (root=hpcfetch; "
                    "docs/scale.md)")
# The one directory of the partial version directory that a container writes into (dracut's output):
# what it leaves there is read like an image, and only the initrd, a regular file, is copied out.
_DRACUT_WORK = ".dracut-work"


class PackError(Exception):
    """Packing failed or was refused; the message names the file, key or option at fault."""


def find_binary(name: str) -> str | None:
    """Absolute path of tool ``name`` on the build host, None when it is not installed."""
    try:
        return _process.which(name)
    except _process.ToolMissing:
        return None


@dataclass
class PackRequest:
    image: str
    output_dir: str
    formats: list[str]
    version: str | None = None
    source_image: str | None = None
    source_path: str | None = None
    layer: str | None = None
    layer_keys: dict[str, str] | None = None
    levels: dict[str, int] = field(default_factory=dict)
    squashfs_compression: str = "zstd"
    threads: int = 0
    exclude: list[str] = field(default_factory=list)
    exclude_defaults: bool = True
    secret_patterns: list[str] = field(default_factory=list)
    allow_secrets: bool = False
    allowed_secrets: list[str] = field(default_factory=list)
    kernel: str | None = None
    kernel_version: str | None = None
    initrd: str | None = None
    dracut: bool = True
    first_stage: str | None = None  # the collection's dracut module hpcfetch (a directory on the build host)
    kernel_args: str = ""
    source_date_epoch: int | None = None
    size_ceiling: int = 4 << 30
    size_warn_ratio: float = 0.8
    size_ceiling_action: str = "fail"
    reset_machine_id: bool = True
    release_extra: dict[str, str] = field(default_factory=dict)
    force: bool = False
    hardware_profile: dict[str, Any] | None = None
    # The verification gate (_verify/record.py): with verify_dir, a source_image is packed only when its
    # layer key has a passing record there for its image ID, or unverified_ok gives the reason to pack anyway.
    verify_dir: str | None = None
    unverified_ok: str = ""
    # The freshness gate (_verify/freshness.py): with layers (hpc_stateless_layers, whose layer's apt sources
    # _contract/sources.py resolves), the image's packages are held against the archive they offer; pending security updates refuse the pack
    # (freshness_gate "refuse") or are warned about ("warn"). The archive's indexes are cached in archive_cache_dir.
    layers: dict[str, Any] | None = None
    project_dir: str | None = None  # what a relative keyring of a source is relative to
    freshness_gate: str = fresh.REFUSE
    archive_cache_dir: str | None = None

    def validate(self) -> None:
        try:
            names.check_name("image", self.image)
            if self.version is not None:
                names.check_name("version", self.version)
        except ValueError as exc:
            raise PackError(str(exc)) from exc
        if bool(self.source_image) == bool(self.source_path):
            raise PackError("give exactly one of source_image (a layer image) and source_path (a directory)")
        if not self.formats:
            raise PackError("formats is empty: name at least one of " + ", ".join(names.FORMATS))
        self.formats = list(dict.fromkeys(self.formats))
        for fmt in self.formats:
            if fmt not in names.FORMATS:
                raise PackError(f"unknown format {fmt!r} (supported: {', '.join(names.FORMATS)})")
        for fmt in self.levels:
            if fmt not in names.FORMATS:
                raise PackError(f"levels: unknown format {fmt!r} (supported: {', '.join(names.FORMATS)})")
        if self.squashfs_compression not in SQUASHFS_COMPRESSION:
            raise PackError(f"squashfs_compression {self.squashfs_compression!r} is not one of "
                            f"{', '.join(SQUASHFS_COMPRESSION)}")
        if not 0 < self.size_warn_ratio <= 1:
            raise PackError("size_warn_ratio must be in (0, 1]")
        if self.freshness_gate not in fresh.GATES:
            raise PackError(f"freshness_gate {self.freshness_gate!r} is not one of {', '.join(fresh.GATES)}")
        self.profile()  # a bad hardware_profile costs nothing: refused before the source is opened

    def profile(self) -> HardwareProfile | None:
        try:
            return HardwareProfile.from_option(self.hardware_profile)
        except HardwareProfileError as exc:
            raise PackError(str(exc)) from exc


@dataclass
class Source:
    root: str
    image_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    created: int | None = None
    container: str | None = None


def _pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, killed but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    info = _process.proc_stat(pid)
    return info is None or info.running


class Packer:
    """Runs one :class:`PackRequest`; warnings are collected in :attr:`warnings` for the caller to show."""

    def __init__(self, request: PackRequest, buildah: Buildah | None = None) -> None:
        self.req = request
        self.buildah = buildah
        self.warnings: list[str] = []
        self._partial: str | None = None
        self._made_dirs: list[str] = []  # created by this run for its output, deepest first
        self._profile: HardwareProfile | None = None

    # -- public ------------------------------------------------------------------------
    def run(self, check_mode: bool) -> dict[str, Any]:
        self.req.validate()
        image_dir = os.path.join(os.path.abspath(self.req.output_dir), self.req.image)
        try:
            self._check_output_dir(image_dir, check_mode)
            source = self._open_source()
            try:
                return self._pack(source, image_dir, check_mode)
            finally:
                self._close_source(source)
                if self._partial and os.path.exists(self._partial):
                    shutil.rmtree(self._partial, ignore_errors=True)
        except BaseException:
            self._remove_made_dirs()
            if not check_mode:
                try:
                    os.rmdir(image_dir)  # empty, left by an earlier refused pack; never one that holds versions
                except OSError:
                    pass
            raise

    def _remove_made_dirs(self) -> None:
        """A refused or failed pack leaves no empty ``<output_dir>/<image>/`` (or parent) it created."""
        for path in self._made_dirs:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                continue
            except OSError:
                break  # not empty (another pack writes there): keep it and its parents

    # -- output directory --------------------------------------------------------------
    def _check_output_dir(self, image_dir: str, check_mode: bool) -> None:
        probe = nearest_existing(image_dir)
        if not os.path.isdir(probe):
            raise PackError(f"output directory {image_dir}: {probe} exists and is not a directory; "
                            "choose another output_dir")
        if check_mode:
            if not os.access(probe, os.W_OK):
                raise PackError(f"output directory {image_dir} is not writable ({probe}); "
                                "choose a writable output_dir or fix its permissions")
            return
        self._made_dirs = []
        missing = image_dir
        while missing != probe and os.path.dirname(missing) != missing:
            self._made_dirs.append(missing)
            missing = os.path.dirname(missing)
        try:
            os.makedirs(image_dir, exist_ok=True)
            test = os.path.join(image_dir, f".write-test-{os.getpid()}")
            with open(test, "wb"):
                pass
            os.unlink(test)
        except OSError as exc:
            raise PackError(f"output directory {image_dir} is not writable: {exc.strerror}; "
                            "choose a writable output_dir or fix its permissions/mount") from exc
        # Leftovers of killed packs (their pid is gone) are removed; a live pack's are left alone.
        for name in sorted(os.listdir(image_dir)):
            staged = parse_staging_name(name)
            if staged is None or staged.tag not in (PARTIAL_TAG, OLD_TAG) or not staged.token.isdigit():
                continue
            if _pid_alive(int(staged.token)):
                continue  # a running pack's
            path = os.path.join(image_dir, name)
            final = os.path.join(image_dir, staged.final)
            if staged.tag == OLD_TAG and not os.path.lexists(final):
                os.rename(path, final)  # killed between the two renames of _publish: the old one is back
            else:
                shutil.rmtree(path, ignore_errors=True)

    # -- source --------------------------------------------------------------------------
    def _open_source(self) -> Source:
        if self.req.source_path:
            root = os.path.abspath(self.req.source_path)
            if not os.path.isdir(root):
                raise PackError(f"source_path {root} is not a directory")
            return Source(root=root)
        if self.buildah is None:
            raise PackError("source_image needs buildah on the build host")
        ref = self.req.source_image or ""
        self._remove_stale_containers()
        try:
            data = self.buildah.inspect_image(ref)
        except BuildahError as exc:
            raise PackError(f"source_image {ref} is not in local containers-storage: build it first "
                            "(ansible-playbook site.yml) or check the name") from exc
        image_id = data.get("FromImageID") or ""
        if not image_id:
            raise PackError(f"source_image {ref}: buildah inspect names no image ID; cannot tell which image "
                            "the verification gate checks")
        created = data.get("OCIv1", {}).get("created") or data.get("Docker", {}).get("created")
        source = Source(root="", image_id=image_id,
                        labels=data.get("OCIv1", {}).get("config", {}).get("Labels") or {},
                        created=pm.parse_iso_utc(created) if created else None)
        name = container_name(image_prefix_of(ref), CONTAINER_PURPOSE, owner_instance(os.getpid()))
        try:
            # By ID: the image inspected here (whose ID the gate checks) is the one packed, even if the
            # reference is moved to another image meanwhile.
            self.buildah.from_image(image_id, name)
            source.container = name
            source.root = self.buildah.mount(name)
        except BuildahError as exc:
            self._close_source(source)
            raise PackError(f"source_image {ref}: {exc}") from exc
        return source

    def _close_source(self, source: Source) -> None:
        if source.container and self.buildah is not None:
            self.buildah.remove(source.container)

    def _remove_stale_containers(self) -> None:
        if self.buildah is None:
            return
        for name in self.buildah.container_names():
            pid = container_owner(name, CONTAINER_PURPOSE)
            # Ours before we start one: left by a killed pack that had our pid.
            if pid is not None and (pid == os.getpid() or not _pid_alive(pid)):
                self.buildah.remove(name)

    # -- packing -------------------------------------------------------------------------
    def _pack(self, source: Source, image_dir: str, check_mode: bool) -> dict[str, Any]:
        req = self.req
        root = source.root
        layer = req.layer or source.labels.get(LAYER_LABEL) or ""
        layer_keys = (dict(req.layer_keys) if req.layer_keys
                      else layer_keys_of(self.buildah, req.source_image or "", source.labels))
        layer_key = layer_keys.get(layer, source.labels.get(KEY_LABEL, ""))
        version = req.version or source.labels.get(GIT_COMMIT_LABEL) or (layer_key[:12] if layer_key else "")
        if not version:
            raise PackError("version is not set and the source carries no git commit or layer key: set version")
        try:
            names.check_name("version", version)
        except ValueError as exc:
            raise PackError(str(exc)) from exc
        verification = self._verification(layer, layer_key, source.image_id or "", check_mode)
        db = self._package_db(root) if req.layers is not None else None
        checked = self._freshness(db, layer, layer_keys, source) if db is not None else None
        try:
            kernel = find_kernel(root, req.kernel_version, req.kernel)
        except KernelError as exc:
            raise PackError(f"image {req.image} ({req.source_image or req.source_path}): {exc}") from exc
        if req.kernel and not has_modules(root, kernel.version):
            self._warn(f"the kernel {req.kernel} ({kernel.version}) has no /lib/modules/{kernel.version} in the "
                       "image: modules will not load on the node")
        kernel_arch = self._check_kernel_arch(kernel, root, arch_of(source.labels))

        profile = req.profile()
        self._profile = profile
        secrets = SecretRules(req.secret_patterns, ["*"] if req.allow_secrets else req.allowed_secrets)
        source_info = ({"image": req.source_image, "image_id": source.image_id} if req.source_image
                       else {"path": os.path.abspath(req.source_path or "")})
        final = os.path.join(image_dir, version)
        sde = self._source_date_epoch(source)
        if sde is not None and not req.force and self._up_to_date(final, source_info,
                                                                  self._options_fingerprint(kernel, sde),
                                                                  verification):
            with open(os.path.join(final, names.MANIFEST_FILE), "rb") as handle:
                current = json.load(handle)
            return self._result(False, final, current, None, current.get("uncompressed_size", 0), up_to_date=True)
        if sde is not None:
            self._refuse_other_build(final, version, source_info, self._options_fingerprint(kernel, sde), layer_key)

        plan = self._plan_pruning(root, kernel.version, profile) if profile else None
        depmod_files = self._depmod(source, plan) if plan else {}
        # The regenerated files replace the image's: left out of the walk, added back by the overlay.
        replaced = {rel for rel in depmod_files if _imagepath.exists_literal(root, rel)}
        rules = ExcludeRules([*(DEFAULT_EXCLUDES if req.exclude_defaults else ()), *req.exclude],
                             (plan.excluded | replaced) if plan else frozenset())
        scan = scan_tree(root, rules, secrets)
        if sde is None:
            sde = scan.newest_mtime
        options = self._options_fingerprint(kernel, sde)
        caps = capabilities.plan(root, scan.capabilities, rules, cpio=any(f in names.CPIO_FORMATS for f in req.formats))
        lost = caps.warning()
        if lost:
            self._warn(lost)
        overlay = self._overlay(root, req.image, version, layer, layer_key, sde, depmod_files, caps.overlay())
        scan_overlay(overlay, secrets, scan)
        uncompressed = scan.total_bytes + sum(len(f.data) for f in overlay.files.values()
                                              if stat.S_ISREG(f.mode))
        self._preflight(scan, uncompressed)
        if check_mode:
            would = {"image": req.image, "version": version, "layer": layer, "layer_keys": layer_keys,
                     "artifacts": [{"file": names.artifact_file(req.image, fmt), "format": fmt} for fmt in req.formats],
                     "kernel": {"file": names.KERNEL_FILE, "version": kernel.version},
                     "verification": verification, "capabilities": caps.manifest()}
            if checked is not None:
                would["freshness"] = checked.manifest_entry()
            if plan and profile:
                would["hardware_profile"] = plan.manifest_entry(profile)
            return self._result(True, final, would, scan, uncompressed)

        self._partial = staging_name(final, PARTIAL_TAG, os.getpid())
        shutil.rmtree(self._partial, ignore_errors=True)
        os.makedirs(self._partial)
        try:
            artifacts = self._write_artifacts(root, rules, overlay, scan, sde)
            files = {a["file"]: a["sha256"] for a in artifacts}
            kernel_entry = self._copy_kernel(root, kernel, kernel_arch)
            files[names.KERNEL_FILE] = kernel_entry["sha256"]
            initrd_entry = None
            if "squashfs" in req.formats:
                initrd_entry = self._initrd(source, kernel, sde)
                if initrd_entry:
                    files[names.INITRD_FILE] = initrd_entry["sha256"]
            db = db or self._package_db(root)
            packages = [p.summary() for p in db.packages]
            report = pm.size_report(uncompressed, scan.files, packages, scan.largest_directories(),
                                    scan.largest_files, pruned=plan.removed if plan else None)
            data = pm.build_manifest(image=req.image, version=version, created=sde, layer=layer, layer_keys=layer_keys,
                                     kernel=kernel_entry, artifacts=artifacts, uncompressed_size=uncompressed,
                                     packages=packages, kernel_args=req.kernel_args, initrd=initrd_entry,
                                     source=source_info, options=options, report=report,
                                     hardware_profile=plan.manifest_entry(profile) if plan and profile else None,
                                     capabilities=caps.manifest(),
                                     origins=checked.origins if checked else None,
                                     freshness=checked.manifest_entry() if checked else None,
                                     arch=arch_of(source.labels))
            data["verification"] = verification
            self._write_small(names.MANIFEST_FILE, pm.manifest_bytes(data))
            files[names.MANIFEST_FILE] = sums.sha256_bytes(pm.manifest_bytes(data))
            bom = sbom.sbom_bytes(sbom.build_sbom(image=req.image, version=version, created=sde, layer=layer,
                                                  layer_keys=layer_keys, kernel=kernel_entry, db=db,
                                                  source=source_info, origins=checked.origins if checked else None,
                                                  freshness=checked.manifest_entry() if checked else None,
                                                  arch=arch_of(source.labels)))
            self._write_small(names.SBOM_FILE, bom)
            files[names.SBOM_FILE] = sums.sha256_bytes(bom)
            self._write_small(names.SUMS_FILE, sums.sums_text(files).encode())
            fsync_dir(self._partial)
            self._publish(final)
        except OSError as exc:
            where = exc.filename or self._partial
            raise PackError(f"writing {where} failed: {exc.strerror or exc}; nothing was published "
                            f"(free space or permissions of {image_dir}?)") from exc
        return self._result(True, final, data, scan, uncompressed)

    def _verification(self, layer: str, key: str, image_id: str, check_mode: bool = False) -> dict[str, Any]:
        """The manifest's ``verification``; PackError when the gate refuses the image (in check mode a
        warning: site.yml --check verifies nothing, its real run verifies before it packs)."""
        req = self.req
        if not req.verify_dir or not req.source_image:
            return {"status": NOT_CHECKED}  # a directory, or the module used without the gate
        if not layer or not key:
            raise PackError(f"source_image {req.source_image} carries no layer name and content key (labels "
                            f"hpc.stateless.layer, hpc.stateless.key): its verification cannot be looked up; pack "
                            f"a layer image built by site.yml, or set {OVERRIDE_VARIABLE} with the reason")
        try:
            verdict = gate(req.verify_dir, layer, key, image_id, req.unverified_ok)
        except UnverifiedError as exc:
            if check_mode:
                self._warn(f"check mode: image {req.image} would be refused unless verify passes it first: {exc}")
                return {"status": NOT_CHECKED, "layer": layer, "key": key}
            raise PackError(f"image {req.image} ({req.source_image}): {exc}") from exc
        if verdict.status == OVERRIDDEN:
            self._warn(f"packing image {req.image} UNVERIFIED on override ({OVERRIDE_VARIABLE}: "
                       f"{verdict.reason!r}): {verdict.message}")
        return verdict.manifest_entry()

    def _freshness(self, db: pkgdb.PackageDb, layer: str, layer_keys: dict[str, str],
                   source: Source) -> fresh.Freshness | None:
        """The image's packages against its layer's sources' archive (the manifest's ``freshness``), and the gate:
        PackError naming the pending security updates when it refuses, a warning when it warns (then an
        archive that cannot be read is a warning too, and the manifest has no ``freshness``). Debian-style
        images only: an rpm image's repositories have no apt archive to read."""
        req = self.req
        if db.kind != pkgdb.DPKG:
            return None
        try:
            sources = tuple(replace(source, signed_by=os.path.join(req.project_dir, source.signed_by))
                            if source.signed_by and req.project_dir else source
                            for source in layer_sources(layer, req.layers or {}))
        except ValueError as exc:
            raise PackError(f"image {req.image}: the sources of layer {layer!r}: {exc}") from exc
        installed = {p.name: p.version for p in db.packages}
        try:
            view = fresh.load_view(sources, arch=fresh.image_arch(p.architecture for p in db.packages),
                                   cache_dir=req.archive_cache_dir, image=req.image)
        except fresh.StaleImageError as exc:
            if req.freshness_gate != fresh.WARN:
                raise PackError(str(exc)) from exc
            self._warn(f"image {req.image}: the archive cannot be read ({exc.__cause__}); packed without a freshness "
                       "record")
            return None
        try:
            checked = fresh.check(view, installed, self._chain_repositories(layer_keys, source))
            warning = fresh.gate(checked, req.freshness_gate, req.image)
        except fresh.StaleImageError as exc:
            raise PackError(str(exc)) from exc
        except ValueError as exc:  # a version that is no Debian version
            raise PackError(f"image {req.image}: the freshness check failed: {exc}") from exc
        if warning:
            self._warn(warning)
        return checked

    def _chain_repositories(self, layer_keys: dict[str, str], source: Source) -> list[tuple[str, list[dict[str, str]]]]:
        """``(layer, repository states)`` of the packed layer image and each ancestor, from their labels (a layer
        image built before the record, or a directory, has none)."""
        if not self.req.source_image:
            return []
        prefix = image_prefix_of(self.req.source_image)
        chain = []
        for layer, key in layer_keys.items():
            try:
                labels = (source.labels if key == source.labels.get(KEY_LABEL)
                          else self.buildah.image_labels(image_ref(prefix, layer, key)) if self.buildah else {})
                chain.append((layer, repositories_of(labels)))
            except (BuildahError, ValueError) as exc:
                self._warn(f"the repository states of layer {layer} ({key[:12]}) are not recorded in the manifest: {exc}")
        return chain

    def _source_date_epoch(self, source: Source) -> int | None:
        """SOURCE_DATE_EPOCH: the option, the environment, the image's creation time; None for a directory."""
        if self.req.source_date_epoch is not None:
            return self.req.source_date_epoch
        env = os.environ.get("SOURCE_DATE_EPOCH", "")
        if env.isdigit():
            return int(env)
        return source.created

    def _plan_pruning(self, root: str, kernel_version: str, profile: HardwareProfile) -> PrunePlan:
        try:
            plan = plan_pruning(root, kernel_version, profile)
        except (HardwareProfileError, OSError) as exc:
            raise PackError(str(exc)) from exc
        if plan.unmatched_modaliases:
            listed = "; ".join(plan.unmatched_modaliases[:5])
            more = f" (and {len(plan.unmatched_modaliases) - 5} more)" if len(plan.unmatched_modaliases) > 5 else ""
            self._warn(f"hardware_profile: {len(plan.unmatched_modaliases)} modalias line(s) match no module of "
                       f"kernel {kernel_version} (devices without a driver module, or builtin): {listed}{more}")
        return plan

    def _depmod(self, source: Source, plan: PrunePlan) -> dict[str, bytes]:
        """depmod data of the kept modules only: depmod of the image (else of the build host) on a staging tree."""
        staging = tempfile.mkdtemp(prefix="hpc-stateless-depmod-")
        try:
            stage_modules(source.root, plan, staging)
            if source.container and self.buildah is not None:
                self.buildah.run_in(source.container, ["depmod", "-b", _DEPMOD_BASE, plan.kernel_version],
                                    volumes={staging: _DEPMOD_BASE})
            else:
                depmod = find_binary("depmod")
                if not depmod:
                    raise PackError("hardware_profile: depmod is not installed on the build host (Debian: apt-get "
                                    "install kmod); it regenerates modules.dep for the kept modules")
                _process.run([depmod, "-b", staging, plan.kernel_version])
            return depmod_outputs(source.root, plan, staging)
        except (_process.ProcessError, HardwareProfileError, OSError) as exc:
            raise PackError(f"hardware_profile: depmod of the kept modules failed: {exc}") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _overlay(self, root: str, image: str, version: str, layer: str, layer_key: str, sde: int,
                 extra: dict[str, bytes], restore: list[OverlayFile]) -> Overlay:
        """What pack adds to the packed copy: the release file, ``extra`` (regenerated depmod data), ``restore``
        (the capability restore of cpio images), a fresh machine-id and, for cpio, what an initramfs root needs."""
        try:
            release = image_release(image, version, layer, layer_key, sde, self.req.release_extra)
        except ValueError as exc:
            raise PackError(str(exc)) from exc
        files = [OverlayFile(names.RELEASE_PATH, stat.S_IFREG | 0o644, release)]
        files += [OverlayFile(rel, stat.S_IFREG | 0o644, data) for rel, data in sorted(extra.items())]
        if extra:
            files.append(OverlayFile(NODE_CHECK_PATH, stat.S_IFREG | 0o755, NODE_CHECK_SCRIPT.encode()))
        files += restore
        if self.req.reset_machine_id:
            # Every node must make its own machine-id at first boot (systemd does when the file is empty).
            files.append(OverlayFile("etc/machine-id", stat.S_IFREG | 0o444, b""))
            dbus_id = _imagepath.lstat(root, "var/lib/dbus/machine-id", follow_last=False)
            if dbus_id is not None and not stat.S_ISLNK(dbus_id.st_mode):
                files.append(OverlayFile("var/lib/dbus/machine-id", stat.S_IFLNK | 0o777, b"/etc/machine-id"))
        # The kernel opens /dev/console before init runs, and execs /init of an initramfs.
        if not _imagepath.exists_literal(root, "dev/console"):
            files.append(OverlayFile("dev/console", stat.S_IFCHR | 0o600, rdev=os.makedev(5, 1), cpio_only=True))
        if not _imagepath.exists_literal(root, "init"):
            for candidate in ("sbin/init", "usr/sbin/init", "usr/lib/systemd/systemd", "lib/systemd/systemd"):
                if _imagepath.lstat(root, candidate, follow_last=False) is not None:
                    files.append(OverlayFile("init", stat.S_IFLNK | 0o777, ("/" + candidate).encode(),
                                             cpio_only=True))
                    break
        return Overlay(files, sde)

    def _preflight(self, scan: TreeScan, uncompressed: int) -> None:
        req = self.req
        problems = []
        if scan.secrets:
            listed = "; ".join(str(s) for s in scan.secrets)
            problems.append(f"refusing to pack secrets: {listed}. Remove them in a layer role, exclude them "
                            "(the image's exclude: [...] or hpc_stateless_pack_exclude), or allow them by path "
                            "(the image's allowed_secrets: [...] or hpc_stateless_pack_allowed_secrets; "
                            "the module's allow_secrets: true allows all)")
        for secret in scan.allowed_secrets:
            self._warn(f"packing an allowed secret: {secret}")
        cpio = [fmt for fmt in req.formats if fmt.startswith("cpio.")]
        if scan.too_large and cpio:
            listed = "; ".join(f"/{rel} ({size} bytes)" for rel, size in scan.too_large)
            problems.append(f"a cpio initramfs ({', '.join(cpio)}) cannot hold a file of 4 GiB or more (newc's size "
                            f"field is 32 bits, limit {MAX_FILE_SIZE} bytes, 4 GiB - 1): {listed}. {TWO_STAGE_ADVICE}, or "
                            "exclude those files")
        # An initramfs is unpacked into RAM (the archive and the tree at once); a squashfs root stays compressed
        # in RAM and is read as it is used, so the tree's size bounds only cpio (the squashfs file itself is held
        # against size_ceiling once written).
        if uncompressed > req.size_ceiling and cpio:
            message = (f"the packed tree is {uncompressed} bytes ({pm.human_size(uncompressed)}), above size_ceiling "
                       f"{req.size_ceiling} bytes ({pm.human_size(req.size_ceiling)}), what the nodes' memory allows "
                       f"for a cpio initramfs ({', '.join(cpio)}; legacy BIOS/PXE loaders cannot load one near 4 GiB "
                       f"either). {TWO_STAGE_ADVICE}; or exclude what the size report lists, or raise size_ceiling "
                       "(hpc_stateless_pack_size_ceiling, or the image's size_ceiling) if the nodes have the memory")
            if req.size_ceiling_action == "fail":
                problems.append(message)
            else:
                self._warn(message)
        elif cpio and uncompressed >= req.size_warn_ratio * req.size_ceiling:
            self._warn(f"the packed tree is {pm.human_size(uncompressed)}, {100 * uncompressed // req.size_ceiling}% "
                       f"of size_ceiling {pm.human_size(req.size_ceiling)}")
        if problems:
            raise PackError(" | ".join(problems))

    def _options_fingerprint(self, kernel: Kernel, sde: int) -> dict[str, Any]:
        req = self.req
        return {
            "formats": list(req.formats),
            "levels": {fmt: req.levels[fmt] for fmt in sorted(req.levels) if fmt in req.formats},
            "squashfs_compression": req.squashfs_compression if "squashfs" in req.formats else None,
            "exclude": ([*DEFAULT_EXCLUDES] if req.exclude_defaults else []) + list(req.exclude),
            "kernel": kernel.origin,
            "initrd": req.initrd,
            "dracut": req.dracut,
            "kernel_args": req.kernel_args,
            "source_date_epoch": sde,
            "reset_machine_id": req.reset_machine_id,
            "secret_patterns": list(req.secret_patterns),
            "allowed_secrets": ["*"] if req.allow_secrets else list(req.allowed_secrets),
            "size_ceiling": req.size_ceiling,
            "size_ceiling_action": req.size_ceiling_action,
            "release_extra": dict(sorted(req.release_extra.items())),
            **({"hardware_profile": self._profile.fingerprint()} if self._profile else {}),
            **({"first_stage": self._first_stage_digest()} if req.first_stage and "squashfs" in req.formats else {}),
        }

    def _first_stage_digest(self) -> str:
        """sha256 over the first stage's files (name and bytes): a changed hpc-fetch makes another initrd."""
        digest = hashlib.sha256()
        for name in FIRST_STAGE_FILES:
            path = os.path.join(self.req.first_stage or "", name)
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                raise PackError(f"first_stage: {path} cannot be read ({exc.strerror}); it names the collection's "
                                "dracut module directory roles/hpc_stateless/files/dracut/95hpcfetch") from exc
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        return digest.hexdigest()

    def _up_to_date(self, final: str, source_info: dict[str, Any], options: dict[str, Any],
                    verification: dict[str, Any]) -> bool:
        if "image_id" not in source_info or not source_info.get("image_id"):
            return False  # a directory may have changed in place: always pack it
        try:
            with open(os.path.join(final, names.MANIFEST_FILE), "rb") as handle:
                current = json.load(handle)
            listed = sums.read_sums(os.path.join(final, names.SUMS_FILE))
        except (OSError, ValueError):  # ArtifactError is a ValueError: an unreadable pack is packed again
            return False
        if current.get("source") != source_info or current.get("options") != options:
            return False
        if "capabilities" not in current:
            return False  # packed before file capabilities were recorded (and restored in cpio images)
        recorded = current.get("verification") or {}
        if (recorded.get("status"), recorded.get("override_reason")) != (verification.get("status"),
                                                                         verification.get("override_reason")):
            return False  # e.g. packed on an override, verified since: the manifest must say so
        expected = {a["file"] for a in current.get("artifacts", [])}
        expected |= {names.KERNEL_FILE, names.MANIFEST_FILE, names.SBOM_FILE}
        if not expected <= set(listed):
            return False
        for name, digest in listed.items():
            path = os.path.join(final, name)
            if not os.path.isfile(path) or sums.sha256_file(path) != digest:
                return False
        return True

    def _refuse_other_build(self, final: str, version: str, source_info: dict[str, Any], options: dict[str, Any],
                            layer_key: str) -> None:
        """PackError when version directory ``final`` holds another build: a version never names two builds
        (a repack of the same image with the same options, e.g. with force, replaces it)."""
        try:
            with open(os.path.join(final, names.MANIFEST_FILE), "rb") as handle:
                current = json.load(handle)
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            return  # an unreadable pack is no build: packed again
        differences = build_difference(current, source_info, options, layer_key)
        if not differences:
            return
        raise PackError(
            f"version {version!r} of image {self.req.image} already holds a different build ({'; '.join(differences)}) "
            f"in {final}; versions are immutable, pack never replaces one: name a new version "
            "(-e hpc_stateless_pack_version=<name>; without it the version names the content unless that "
            f"version was set), or, if {version!r} was never deployed, remove {final} and pack again")

    def _write_artifacts(self, root: str, rules: ExcludeRules, overlay: Overlay, scan: TreeScan,
                         sde: int) -> list[dict[str, Any]]:
        artifacts = []
        for fmt in self.req.formats:
            name = names.artifact_file(self.req.image, fmt)
            path = os.path.join(self._partial, name)
            if fmt == "squashfs":
                self._write_squashfs(root, overlay.for_format(cpio=False), scan, sde, path)
            else:
                self._write_cpio(fmt, root, rules, overlay, scan, sde, path)
            size = os.path.getsize(path)
            if size > self.req.size_ceiling:
                message = (f"{name} is {size} bytes ({pm.human_size(size)}), above size_ceiling "
                           f"{pm.human_size(self.req.size_ceiling)}")
                if self.req.size_ceiling_action == "fail":
                    raise PackError(message + "; nothing was published")
                self._warn(message)
            artifacts.append({"file": name, "format": fmt, "size": size, "sha256": sums.sha256_file(path)})
        return artifacts

    def _write_cpio(self, fmt: str, root: str, rules: ExcludeRules, overlay: Overlay, scan: TreeScan,
                    sde: int, path: str) -> None:
        try:
            command = compressor_argv(fmt, self.req.levels.get(fmt), self.req.threads, find_binary)
        except CompressError as exc:
            raise PackError(str(exc)) from exc
        if command.tool == "gzip":
            self._warn("pigz is not installed: cpio.gz is compressed by single-threaded gzip")
        try:
            with CompressorProcess(command, path) as proc:
                try:
                    write_cpio(root, rules, overlay, scan.hardlinks, sde, proc.fd)
                except BrokenPipeError:
                    said = proc.abort()
                    raise PackError(f"{command.tool} stopped while writing {path}: {said or 'no message'}; "
                                    "nothing was published (disk full?)") from None
                proc.close()
        except (CompressError, NewcError, PackTreeError) as exc:
            raise PackError(f"{fmt}: {exc}; nothing was published") from exc

    def _write_squashfs(self, root: str, overlay: Overlay, scan: TreeScan, sde: int, path: str) -> None:
        binary = find_binary("mksquashfs")
        if not binary:
            raise PackError("mksquashfs is not installed on the build host (Debian: apt-get install squashfs-tools)")
        work = os.path.join(self._partial, ".squashfs-work")
        os.mkdir(work, 0o700)
        try:
            excluded = list(scan.excluded)
            items = list(overlay.files.values())
            for item in list(items):
                if _imagepath.exists_literal(root, item.rel) and not stat.S_ISDIR(item.mode):
                    excluded.append(item.rel)  # replaced by the pseudo file
                parent = os.path.dirname(item.rel)
                while parent and not _imagepath.exists_literal(root, parent):
                    items.append(OverlayFile(parent, stat.S_IFDIR | 0o755))
                    parent = os.path.dirname(parent)
            lines, contents = pseudo_definitions(items, work, sde)
            for file_path, data in contents.items():
                _imagepath.write_file(work, os.path.basename(file_path), data, sync=False)
            exclude_file = os.path.join(work, "exclude")
            _imagepath.write_file(work, "exclude", "".join(line + "\n" for line in exclude_lines(excluded)).encode(
                "utf-8", "surrogateescape"), sync=False)
            pseudo_file = os.path.join(work, "pseudo")
            _imagepath.write_file(work, "pseudo", "".join(line + "\n" for line in lines).encode("utf-8"), sync=False)
            argv = mksquashfs_argv(binary, root, path, self.req.squashfs_compression, self.req.levels.get("squashfs"),
                                   self.req.threads, exclude_file, pseudo_file)
            run_mksquashfs(argv, sde)
        except SquashfsError as exc:
            raise PackError(f"squashfs: {exc}; nothing was published") from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _check_kernel_arch(self, kernel: Kernel, root: str, image_arch: str) -> str | None:
        """The architecture the kernel's header names (None: a format pack does not read); refuses, before a byte
        is written, one that names another architecture than the image's (the layer image's label): no node of
        either architecture could boot the pack."""
        try:
            fd = kernel.open(root)
        except OSError as exc:
            raise PackError(f"kernel {kernel.origin}: {exc.strerror}") from exc
        try:
            arch = read_kernel_arch(fd)
        finally:
            os.close(fd)
        if image_arch and arch and arch != image_arch:
            where = "the kernel option" if kernel.origin.startswith(HOST_ORIGIN) else "the image"
            raise PackError(f"image {self.req.image}: kernel {kernel.origin} (from {where}) is an {arch} kernel, but "
                            f"the image is {image_arch} (its layer's architecture); install the {image_arch} kernel "
                            f"in a layer (Debian: linux-image-{image_arch}) or name one in the kernel option")
        return arch

    def _copy_kernel(self, root: str, kernel: Kernel, arch: str | None) -> dict[str, Any]:
        try:
            fd = kernel.open(root)
        except OSError as exc:
            raise PackError(f"kernel {kernel.origin}: {exc.strerror}") from exc
        try:
            _imagepath.copy_fd(fd, self._partial_dir(), names.KERNEL_FILE)
        finally:
            os.close(fd)
        dest = os.path.join(self._partial_dir(), names.KERNEL_FILE)
        return {"file": names.KERNEL_FILE, "version": kernel.version, "origin": kernel.origin, "arch": arch,
                "size": os.path.getsize(dest), "sha256": sums.sha256_file(dest)}

    def _partial_dir(self) -> str:
        if self._partial is None:
            raise PackError("internal error: no partial version directory to write into")
        return self._partial

    def _initrd(self, source: Source, kernel: Kernel, sde: int) -> dict[str, Any] | None:
        """An initrd that mounts the squashfs root, or None (with a warning saying why)."""
        partial = self._partial_dir()
        first_stage = False
        if self.req.initrd:
            try:
                fd = os.open(self.req.initrd, os.O_RDONLY | os.O_CLOEXEC)  # the build host's file, named by the user
            except OSError as exc:
                raise PackError(f"initrd {self.req.initrd} cannot be read on the build host (option initrd): "
                                f"{exc.strerror}") from exc
            try:
                _imagepath.copy_fd(fd, partial, names.INITRD_FILE)
            finally:
                os.close(fd)
            generator, args = f"host:{self.req.initrd}", ""
        else:
            method = squashfs_boot_method(source.root)
            own = image_initrd(source.root, kernel.version)
            if method == "dracut" and self.req.dracut and source.container and self.buildah is not None:
                first_stage = self._run_dracut(source.container, source.root, kernel.version, sde)
                generator, args = "dracut", DRACUT_KERNEL_ARGS
            elif method == "live-boot" and own:
                self._copy_out(source.root, own, names.INITRD_FILE, f"the image's initrd {own}")
                generator, args = "live-boot", LIVE_BOOT_KERNEL_ARGS
            else:
                self._warn("squashfs: no initrd.img was made - the image carries neither dracut with its live "
                           "modules (Debian: dracut dracut-live, EL: dracut-live) nor live-boot; add one to a "
                           "layer, or pass initrd=<path on the build host>. See docs/pack.md")
                return None
        dest = os.path.join(partial, names.INITRD_FILE)
        entry = {"file": names.INITRD_FILE, "generator": generator, "kernel_args": args,
                 "size": os.path.getsize(dest), "sha256": sums.sha256_file(dest)}
        if generator == "dracut" and first_stage:
            entry["first_stage"] = {"module": FIRST_STAGE_MODULE, "kernel_args": FIRST_STAGE_KERNEL_ARGS}
        return entry

    def _copy_out(self, tree: str, path: str, name: str, what: str, follow_last: bool = True) -> None:
        """Copy the regular file ``path`` of ``tree`` (an image, or what a container wrote) into the partial
        directory as ``name``; a link out of ``tree``, a FIFO or a device is refused by name."""
        try:
            _imagepath.copy_out(tree, path, self._partial_dir(), name, follow_last=follow_last)
        except _imagepath.NotRegularFile as exc:
            raise PackError(f"{what} is {exc.strerror}: refusing to publish it as {name}; nothing was "
                            "published") from exc
        except FileNotFoundError as exc:
            raise PackError(f"{what} is missing; nothing was published") from exc

    def _run_dracut(self, container: str, root: str, kernel_version: str, sde: int) -> bool:
        """dracut inside the throw-away working container, writing into a directory of its own; True when the
        initrd carries the first stage (``first_stage``: the collection's module, bound read-only into the
        container's dracut modules when the image's dracut can fetch over the network).

        The container shares only that directory (``.dracut-work`` in the partial directory) with the build
        host, never the directory whose files are published: whatever the image's dracut leaves there
        (a symlink to a host file, a FIFO) is never followed, and only ``initrd.img``, a regular file, is
        copied out.
        """
        if self.buildah is None:
            raise PackError("dracut needs a source_image (a buildah working container)")
        modules, missing = dracut_modules(root)
        if missing:
            self._warn(f"the image lacks {', '.join(missing)}: its dracut initrd cannot fetch the squashfs over "
                       "HTTP (root=live:http://...), only find it on a block device (root=live:/dev/...); Debian: "
                       "add curl isc-dhcp-client iputils-arping procps to a layer")
        volumes = {}
        first_stage = bool(self.req.first_stage) and not missing
        if first_stage:
            self._first_stage_digest()  # every file is there and readable, or a clear error
            volumes[os.path.abspath(self.req.first_stage or "")] = f"/{FIRST_STAGE_DIR}:ro"
            modules = [*modules, FIRST_STAGE_MODULE]
        elif self.req.first_stage:
            self._warn(f"the initrd cannot fetch over the network, so it carries no first stage ({FIRST_STAGE_MODULE}): "
                       "root=hpcfetch will not boot it")
        work = os.path.join(self._partial_dir(), _DRACUT_WORK)
        os.mkdir(work, 0o700)
        volumes[work] = _DRACUT_OUT
        dracut = ["dracut", "--quiet", "--force", "--no-hostonly", "--no-hostonly-cmdline", "--reproducible",
                  "--add", " ".join(modules), "--kver", kernel_version, f"{_DRACUT_OUT}/{names.INITRD_FILE}"]
        try:
            self.buildah.run_in(container, dracut, volumes=volumes,
                                environment={"SOURCE_DATE_EPOCH": str(sde)})
            self._copy_out(work, names.INITRD_FILE, names.INITRD_FILE, f"the {names.INITRD_FILE} the image's dracut "
                           "wrote", follow_last=False)
        except _process.ProcessError as exc:
            raise PackError(f"dracut could not build the squashfs initrd: {exc}") from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if os.path.lexists(work):
            raise PackError(f"what the image's dracut left in {work} cannot be removed; nothing was published")
        return first_stage

    def _package_db(self, root: str) -> pkgdb.PackageDb:
        """The image's package database, read once for the manifest and the SBOM."""
        db = pkgdb.read_package_db(root)
        if db.failed:
            self._warn(f"{db.reason}; the manifest and the SBOM list no packages")
        return db

    def _write_small(self, name: str, data: bytes) -> None:
        _imagepath.write_file(self._partial_dir(), name, data)

    def _publish(self, final: str) -> None:
        """Rename the finished partial directory to its version name (replacing an older pack)."""
        move_into_place(self._partial, final, aside=staging_name(final, OLD_TAG, os.getpid()))
        self._partial = None

    def _warn(self, message: str) -> None:
        self.warnings.append(message)

    def _result(self, changed: bool, final: str, data: dict[str, Any], scan: TreeScan | None, uncompressed: int,
                up_to_date: bool = False) -> dict[str, Any]:
        report = data.get("size_report")
        if not report:
            scan = scan or TreeScan()
            report = pm.size_report(uncompressed, scan.files, [], scan.largest_directories(), scan.largest_files)
        return {
            "changed": changed,
            "up_to_date": up_to_date,
            "version_dir": final,
            "version": data.get("version"),
            "manifest": data,
            "artifacts": [os.path.join(final, a["file"]) for a in data.get("artifacts", [])],
            "kernel": os.path.join(final, names.KERNEL_FILE),
            "sbom": os.path.join(final, names.SBOM_FILE),
            "uncompressed_size": uncompressed,
            "size_report": report,
            "size_report_text": pm.format_size_report(report),
            "excluded": len(scan.excluded) if scan else None,
            "allowed_secrets": [str(s) for s in scan.allowed_secrets] if scan else [],
        }
