# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Move layer images between local containers-storage and an OCI registry.

A layer ``<image_prefix>/<layer>:<key>`` lives in the registry as ``<registry>/<layer>:<key>``,
where ``registry`` is a repository prefix such as ``registry.example.org/hpc/layers``.
A pulled image is tagged with its local name again, so the build finds it as a parent;
its ``hpc.stateless.key`` label must match the key, otherwise it is removed and refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    ARCH_LABEL,
    KEY_LABEL,
    LAYER_LABEL,
    container_name,
    image_ref,
)

_KEY = re.compile(r"^[0-9a-f]{64}$")
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$")


class TransferError(Exception):
    """A layer cannot be pulled or pushed; the message says which image and what to do."""


@dataclass
class TransferResult:
    changed: bool = False
    image: str = ""
    remote: str = ""
    image_id: str = ""
    present: bool = False
    messages: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check_registry(registry: str) -> str:
    """``registry`` without a transport or trailing slash; raises :class:`TransferError` when malformed."""
    value = registry.strip().rstrip("/")
    if value.startswith("docker://"):
        value = value[len("docker://"):]
    if not value or not _REGISTRY.match(value):
        raise TransferError(
            f"registry {registry!r} is not a repository prefix like registry.example.org/hpc/layers "
            "or 127.0.0.1:5000/hpc"
        )
    return value


def remote_ref(registry: str, layer: str, key: str) -> str:
    """Registry reference of a layer image: ``<registry>/<layer>:<key>``."""
    return f"{check_registry(registry)}/{layer}:{key}"


def check_key(key: str) -> str:
    if not _KEY.match(key or ""):
        raise TransferError(f"key {key!r} is not a content key (64 hex digits) as computed by hpc.stateless.plan")
    return key


class LayerTransfer:
    """Pull or push one layer image through a :class:`Buildah` client."""

    def __init__(self, buildah: Buildah, layer: str, key: str, image_prefix: str, registry: str,
                 tls_verify: bool = True, authfile: str | None = None) -> None:
        self.buildah = buildah
        self.layer = layer
        self.key = check_key(key)
        self.local = image_ref(image_prefix, layer, key)
        self.remote = remote_ref(registry, layer, key)
        self.tls_verify = tls_verify
        self.authfile = authfile

    def pull(self, check_mode: bool) -> TransferResult:
        result = TransferResult(image=self.local, remote=self.remote)
        if self.buildah.image_exists(self.local):
            result.present = True
            result.image_id = self.buildah.image_id(self.local)
            return result
        result.changed = True
        if check_mode:
            return result
        try:
            image_id = self.buildah.pull(self.remote, self.tls_verify, self.authfile)
        except BuildahError as exc:
            raise TransferError(
                f"cannot pull layer {self.layer} ({self.remote}): {exc.stderr or exc}. Build and push it "
                "first (its pipeline job, or playbooks/layer.yml with hpc_stateless_registry)"
            ) from None
        labels = self.buildah.image_labels(image_id or self.remote)
        found = labels.get(KEY_LABEL)
        if found != self.key or labels.get(LAYER_LABEL) != self.layer:
            self.buildah.rmi(self.remote)
            raise TransferError(
                f"{self.remote} is not layer {self.layer} with key {self.key} (its labels say layer "
                f"{labels.get(LAYER_LABEL)!r}, key {found!r}); it was removed again. "
                "Push the right image under that tag"
            )
        self.buildah.tag(image_id or self.remote, self.local)
        # keep only the local name, as if the layer had been built here
        self.buildah.rmi(self.remote)
        result.image_id = image_id or self.buildah.image_id(self.local)
        result.present = True
        return result

    def push_list(self, variants: dict[str, str], tag: str, check_mode: bool) -> TransferResult:
        """Push this layer's architectures as ONE manifest list, ``<registry>/<layer>:<tag>``: ``variants`` is
        ``{architecture: local image}`` (LayerGraph.variants with each one's image reference). A node pulls its
        own architecture of it (``buildah pull --arch``, or any OCI client by its platform)."""
        remote = f"{self.remote.rsplit(':', 1)[0]}:{tag}"
        result = TransferResult(image=", ".join(variants.values()), remote=remote)
        for arch, ref in sorted(variants.items()):
            if not self.buildah.image_exists(ref):
                raise TransferError(f"layer image {ref} ({self.layer}, {arch}) is not in local storage: build "
                                    f"it first (site.yml or playbooks/layer.yml)")
            found = self.buildah.image_labels(ref).get(ARCH_LABEL)
            if found and found != arch:
                raise TransferError(f"layer image {ref} is {found}, not {arch}: give each architecture its own image")
        result.present = result.changed = True
        if check_mode:
            return result
        name = container_name(remote, "manifest", self.key)
        try:
            self.buildah.push_manifest_list(name, [variants[arch] for arch in sorted(variants)], remote,
                                            self.tls_verify, self.authfile)
        except BuildahError as exc:
            raise TransferError(f"cannot push layer {self.layer} ({', '.join(sorted(variants))}) to {remote}: "
                                f"{exc.stderr or exc}") from None
        result.messages.append(f"{remote}: manifest list of {', '.join(sorted(variants))}")
        return result

    def push(self, check_mode: bool) -> TransferResult:
        result = TransferResult(image=self.local, remote=self.remote)
        if not self.buildah.image_exists(self.local):
            raise TransferError(
                f"layer image {self.local} is not in local storage: build layer {self.layer} first "
                "(site.yml or playbooks/layer.yml)"
            )
        result.image_id = self.buildah.image_id(self.local)
        result.present = True
        result.changed = True
        if check_mode:
            return result
        try:
            self.buildah.push(self.local, self.remote, self.tls_verify, self.authfile)
        except BuildahError as exc:
            raise TransferError(f"cannot push layer {self.layer} to {self.remote}: {exc.stderr or exc}") from None
        return result
