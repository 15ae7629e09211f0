# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lifecycle of one layer's buildah working container.

started   -> ``buildah from`` parent (or scratch), mount, bind the build's own views of the host package
             caches (_build/caches.py: two builds on one host never share a package manager's lock), write
             apt's build-time configuration (_build/aptconf.py)
committed -> release the binds, remove that configuration and apt's binary caches, record the packages and
             repository states of the tree (_build/records.py), merge what the build downloaded into the caches,
             label, ``buildah commit`` to ``<prefix>/<layer>:<key>`` (and any further references, so one commit
             serves a root layer's bootstrap image and the layer), remove
absent    -> release the binds, unmount and remove the layer's working containers

A layer whose image already exists is a cache hit: nothing is created.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils import _paths, _process
# mounts_under: the mount points below a container's root, deepest first (the order to unmount them).
from ansible_collections.hpc.stateless.plugins.module_utils._fs import mounts_below as mounts_under
from ansible_collections.hpc.stateless.plugins.module_utils._build import (
    aptconf,
    caches,
    idshift,
    records,
    rootless,
    seal_tree,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    ARCH_LABEL,
    PARENT_LABEL,
    container_name,
    container_stem,
    image_ref,
)

# In-image package cache -> host directory (the pool). A view of it is bound while roles run so a
# rebuild, a sibling layer or another project's build finds the packages already downloaded.
DEFAULT_PACKAGE_CACHES = [
    {"path": "/var/cache/apt/archives", "host_path": "/var/cache/hpc-stateless/apt"},
    {"path": "/var/cache/dnf", "host_path": "/var/cache/hpc-stateless/dnf"},
    {"path": "/var/cache/zypp/packages", "host_path": "/var/cache/hpc-stateless/zypp"},
]


def views_cache_root() -> str:
    """The cache root whose ``.builds`` holds the working containers' views (per user for a rootless build)."""
    return rootless.host_cache_path(rootless.HOST_CACHE_ROOT)


class LayerError(Exception):
    """The layer cannot be started or committed as asked; the message says why and what to do."""


@dataclass
class LayerResult:
    changed: bool = False
    cached: bool = False
    container: str = ""
    mountpoint: str = ""
    image: str = ""
    image_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def commit_tmpdir(container: str) -> str:
    """The TMPDIR ``buildah commit`` of ``container`` runs with: ``$TMPDIR`` (default /var/tmp)/hpc-stateless-commit/<container>.

    buildah copies the layer diff into temporary directories while it commits and removes them when it
    ends; a commit that is killed (OOM killer, CI timeout) leaves them, as large as the layer. A directory
    per working container lets the removal of the container - the next run's cleanup - remove them too.
    """
    # An unprivileged user (rootless build) cannot write into root's directory: one per user.
    name = f"hpc-stateless-commit-{rootless.outer_user()[1]}" if rootless.is_rootless() else "hpc-stateless-commit"
    return os.path.join(os.environ.get("TMPDIR") or "/var/tmp", name, container)


#: What the commit's temporary directories are, in the errors that refuse them.
COMMIT_TMPDIR_PURPOSE = "the temporary directory of buildah commit ($TMPDIR, default /var/tmp)"


def private_commit_tmpdir(container: str) -> str:
    """:func:`commit_tmpdir` of ``container``, made private to this user (module_utils/_paths.py private_dir).

    Its parent has a fixed name in a directory every user can write (/var/tmp): a user who made it first would
    choose where root's commit writes and what its clean-up removes, so one that is not this user's alone is
    refused (OSError naming it and what to do)."""
    tmpdir = commit_tmpdir(container)
    _paths.private_dir(os.path.dirname(tmpdir), COMMIT_TMPDIR_PURPOSE)
    return _paths.private_dir(tmpdir, COMMIT_TMPDIR_PURPOSE)


def _commit_tmpdirs_private() -> bool:
    """Whether the commit temporary directories' parent is this user's alone: only then are leftovers removed there."""
    try:
        _paths.private_dir(os.path.dirname(commit_tmpdir("-")), COMMIT_TMPDIR_PURPOSE)
    except OSError:
        return False
    return True


class LayerBuilder:
    """Drives one layer's working container through buildah."""

    def __init__(self, buildah: Buildah, name: str, key: str | None, image_prefix: str,
                 container: str | None = None) -> None:
        self.buildah = buildah
        self.name = name
        self.key = key or ""
        self.image = image_ref(image_prefix, name, self.key) if key else ""
        # A container started under another name (a root layer's bootstrap container) may be committed as this layer.
        self.container = container or (container_name(image_prefix, name, self.key) if key else "")
        self.container_stem = container_stem(image_prefix, name)

    # helpers ------------------------------------------------------------------
    @staticmethod
    def _release_binds(mountpoint: str) -> None:
        for target in mounts_under(mountpoint):
            if not _process.run(["umount", target], check=False).ok:
                _process.run(["umount", "-l", target])

    def _bind_caches(self, mountpoint: str, package_caches: list[dict[str, str]],
                     owner: tuple[int, int] | None = None) -> list[str]:
        """Bind a view of each host cache (seeded from it) over its in-image directory, where that exists.
        ``owner``: the host ``(uid, gid)`` of a mapped container's root, which must write the view's directories
        (its package files are the pool's, read only)."""
        bound = []
        already = set(mounts_under(mountpoint))
        for index, cache in enumerate(package_caches):
            inside = os.path.join(mountpoint, cache["path"].lstrip("/"))
            if not os.path.isdir(inside) or inside in already:
                continue
            pool = rootless.host_cache_path(cache["host_path"])
            os.makedirs(pool, mode=0o755, exist_ok=True)
            view = caches.open_view(views_cache_root(), self.container, index, pool, mountpoint)
            if owner:
                for top, dirs, _files in os.walk(view):
                    for path in [top] + [os.path.join(top, d) for d in dirs]:
                        os.chown(path, *owner, follow_symlinks=False)
            _process.run(["mount", "--bind", view, inside])
            bound.append(cache["path"])
        return bound

    def _remove(self, container: str) -> None:
        mountpoint = self.buildah.mounts().get(container)
        if mountpoint:
            self._release_binds(mountpoint)
        self.buildah.remove(container)
        if _commit_tmpdirs_private():
            shutil.rmtree(commit_tmpdir(container), ignore_errors=True)
        caches.remove_views(views_cache_root(), container)

    def _stale_commit_tmpdirs(self, stem: str) -> list[str]:
        """Commit temp directories of the containers named ``stem...`` (the removed ones)."""
        parent = os.path.dirname(commit_tmpdir(self.container_stem))
        if not _commit_tmpdirs_private():
            return []
        try:
            names = os.listdir(parent)
        except OSError:
            return []
        return [os.path.join(parent, n) for n in sorted(names) if n.startswith(stem)]

    def _tag_refs(self, tags: list[str]) -> list[str]:
        """The references ``tags`` give in the layer image's repository (``<prefix>/<layer>:<tag>``)."""
        return [f"{self.image.rsplit(':', 1)[0]}:{tag}" for tag in tags]

    # states -----------------------------------------------------------------
    def start(self, parent_image: str, caches: list[dict[str, str]], check_mode: bool,
              fresh: bool = False, userns: bool = False) -> LayerResult:
        """Start (mount, bind the caches into) the working container of the layer's key from ``parent_image``.

        ``fresh`` first removes every working container of the layer (any key: the leftovers of a killed run,
        which the build must never build into), as :meth:`absent` does; the build holds the layer's build lock.
        ``userns``: a new container maps its ids 0.. to root's subordinate range (_build/idshift.py), so the roles
        and package scripts run as an unprivileged host uid; the commit maps the layer's files back.
        """
        result = LayerResult(container=self.container, image=self.image)
        try:
            # A scratch container's tree is a bootstrap's, which maps its own tool and leaves the container's ids
            # (_build/bootstrap.py MODE_MAPPED). A rootless build's container root is the user already.
            mapped = userns and parent_image != "scratch" and not check_mode and not rootless.is_rootless()
            ranges = idshift.root_ranges() if mapped else None
        except idshift.IdShiftError as exc:
            raise LayerError(f"layer {self.name}: {exc}") from exc
        if fresh:
            result.removed = self._remove_containers(None, check_mode)
        if self.buildah.image_exists(self.image):
            result.cached = True
            return result
        # Fresh: the container of this key was among those just removed (one listing fewer).
        exists = False if fresh else self.buildah.container_exists(self.container)
        if check_mode:
            result.changed = not exists
            return result
        if not exists:
            if parent_image != "scratch" and not self.buildah.image_exists(parent_image):
                raise LayerError(
                    f"layer {self.name}: parent image {parent_image} is not in local containers-storage; "
                    "build the parent layer first (run site.yml) or pull it")
            try:
                self.buildah.from_image(parent_image, self.container,
                                        userns=idshift.map_args(*ranges) if ranges else None)
            except _process.ProcessError:
                self.buildah.remove(self.container)
                raise
            result.changed = True
        try:
            result.mountpoint = self.buildah.mount(self.container)
            if ranges:
                # The tree's "/" is the layer's upper directory, which containers-storage makes host root's: an id the
                # namespace does not map, so container root could not write "/" (the kernel's postinst links
                # /vmlinuz there). Given to the mapped root; the commit maps it back with the layer's other changes.
                os.chown(result.mountpoint, ranges[0].start, ranges[1].start, follow_symlinks=False)
            self._bind_caches(result.mountpoint, caches,
                              (ranges[0].start, ranges[1].start) if ranges else None)
            aptconf.install(result.mountpoint)
        except (_process.ProcessError, OSError):
            self._remove(self.container)
            raise
        return result

    def commit(self, labels: dict[str, str], extra_tags: list[str], check_mode: bool,
               also_tag: list[str] | None = None, userns: bool = False) -> LayerResult:
        """Commit the working container as the layer image, tagged with ``extra_tags`` in its repository and
        with every reference in ``also_tag``: tagging an image is free, a second commit of the same tree is not.
        ``userns``: the build runs nothing of the tree as host root, so a container that is not mapped (a
        bootstrap's, whose rootfs module parsed apt's lists in its own namespace) runs no command at the commit."""
        result = LayerResult(container=self.container, image=self.image, labels=labels)
        if self.buildah.image_exists(self.image):
            result.cached = True
            if not check_mode:
                missing = [ref for ref in also_tag or [] if not self.buildah.image_exists(ref)]
                # extra_tags (:latest) name the image of the current configuration, cached or built: moved here
                # when they name another image (a build of an earlier configuration, before a revert).
                image_id = self.buildah.image_id(self.image)
                missing += [ref for ref in self._tag_refs(extra_tags)
                            if not self.buildah.image_exists(ref) or self.buildah.image_id(ref) != image_id]
                if missing:
                    self.buildah.tag(self.image, *missing)
                    result.changed = True
                if self.buildah.container_exists(self.container):
                    self._remove(self.container)
                    result.removed = [self.container]
            return result
        if not self.buildah.container_exists(self.container):
            raise LayerError(
                f"layer {self.name}: no working container {self.container} to commit; "
                "run this module with state=started first")
        result.changed = True
        if check_mode:
            return result
        tmpdir = commit_tmpdir(self.container)
        try:
            private_commit_tmpdir(self.container)
        except OSError as exc:
            self._remove(self.container)
            raise LayerError(f"layer {self.name}: {exc}; or set TMPDIR to a directory of your own (its working "
                             "container was removed, run the build again)") from exc
        try:
            mountpoint = self.buildah.mount(self.container)
            self._release_binds(mountpoint)
            if not labels.get(PARENT_LABEL) and aptconf.lists_unparsed(mountpoint) and not (
                    userns and self._runs_as_host_root()):
                self._parse_apt_lists()
            # apt's build-time configuration and binary caches (_build/aptconf.py) and the build connection's
            # Ansible temporary directory (_build/seal_tree.py) are no part of the image.
            try:
                aptconf.remove(mountpoint)
                seal_tree.remove_ansible_tmp(mountpoint)
            except (OSError, seal_tree.SealTreeError) as exc:
                self._remove(self.container)
                raise LayerError(f"layer {self.name}: cannot remove the build's own files (apt's configuration and "
                                 f"caches, Ansible's temporary directory) from the working container ({exc}); its "
                                 "container was removed, run the build again") from exc
            # What the image holds, read from its tree as committed: the plan's freshness check compares it
            # with the archive (_layers/freshness.py), the release records it.
            try:
                result.labels = labels = {**labels, **records.read_records(mountpoint)}
            except records.RecordError as exc:
                self._remove(self.container)
                raise LayerError(f"layer {self.name}: {exc}") from exc
            self.buildah.config_labels(self.container, labels)
            if labels.get(ARCH_LABEL):  # a container from scratch (a bootstrap) has the build host's until told
                self.buildah.config_arch(self.container, labels[ARCH_LABEL])
            self._shift_ids_back(mountpoint)
            result.image_id = self.buildah.commit(self.container, self.image, tmpdir=tmpdir)
            caches.merge_views(views_cache_root(), self.container, mountpoint)
            caches.remove_views(views_cache_root(), self.container)
            for tag in extra_tags:
                self.buildah.tag(self.image, f"{self.image.rsplit(':', 1)[0]}:{tag}")
            if also_tag:
                self.buildah.tag(self.image, *also_tag)
        except _process.ProcessError:
            # Never leave a half-configured working container behind.
            self._remove(self.container)
            raise
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        return result

    def _shift_ids_back(self, mountpoint: str) -> None:
        """A container built in a user namespace: its changes carry the host ids of the range on disk, which
        ``buildah commit`` would write into the layer; mapped back to the container's ids (_build/idshift.py)."""
        try:
            ranges = idshift.ranges_of(self.buildah.id_mapping(self.container))
            if ranges:
                idshift.shift_back(idshift.upper_dir(mountpoint), *ranges)
        except idshift.IdShiftError as exc:
            self._remove(self.container)
            raise LayerError(f"layer {self.name}: {exc}; its container was removed, run the build again") from exc

    def _runs_as_host_root(self) -> bool:
        """Whether a command run in the working container runs as host root: a root build's container that is not
        mapped (_build/idshift.py)."""
        if rootless.is_rootless():
            return False
        try:
            return idshift.ranges_of(self.buildah.id_mapping(self.container)) is None
        except idshift.IdShiftError:
            return False  # mapped, in a shape the commit's shift refuses with its own message

    def _parse_apt_lists(self) -> None:
        """A root layer's apt lists parsed once, for every child (_build/aptconf.py). An apt that cannot parse them
        is left to the next apt run to report (a role's, a child's): the cache only saves it time."""
        try:
            self.buildah.run_in(self.container, list(aptconf.PARSE_LISTS))
        except _process.ProcessError:
            pass

    def absent(self, check_mode: bool) -> LayerResult:
        result = LayerResult(container=self.container, image=self.image)
        result.removed = self._remove_containers(self.container or None, check_mode)
        result.changed = bool(result.removed)
        return result

    def _remove_containers(self, only: str | None, check_mode: bool) -> list[str]:
        """Remove the working container ``only``, or with None every working container of this layer and prefix
        (every key, e.g. leftovers of a killed run), as one listing finds them; then what a killed run left of
        containers so named: commit temp directories and cache views. Returns the containers removed (or to be)."""
        stem = only or self.container_stem
        listed = self.buildah.container_names("")
        targets = [c for c in listed if c == only] if only else [c for c in listed if c.startswith(stem)]
        if check_mode:
            return targets
        for container in targets:
            self._remove(container)
        # A commit killed after buildah removed its container (or a container removed by hand).
        for leftover in self._stale_commit_tmpdirs(stem):
            shutil.rmtree(leftover, ignore_errors=True)
        stale_views = caches.stale_views(views_cache_root(), stem)
        if stale_views:
            existing = set(self.buildah.container_names(""))
            for leftover in stale_views:
                if leftover not in existing:
                    caches.remove_views(views_cache_root(), leftover)
        return targets
