# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The container contract: how our layer images are labelled and named, and our working containers too.

Pure functions, no buildah call (the one buildah client is _build/buildah.py; what reads labels back
takes it as an argument):

* every label we write starts with :data:`LABEL_PREFIX`; a layer image carries :func:`layer_labels`
  (:data:`LAYER_LABEL`, :data:`KEY_LABEL`, :data:`PARENT_LABEL`, :data:`PARENT_KEY_LABEL`,
  :data:`GIT_COMMIT_LABEL`), and :func:`layer_keys_of` walks them up to the root layer;
* a layer image is ``<prefix>/<layer>:<content key>`` (:func:`image_ref`, :func:`image_prefix_of`);
* every working container is ``hpc-stateless-<purpose>-<scope tag>-<instance>`` (:func:`container_name`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Mapping, Protocol

from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError

#: The start of every label (and annotation) we write.
LABEL_PREFIX = "hpc.stateless."
#: The labels of a layer image: its layer name, content key, parent layer and its key, the git commit built.
LAYER_LABEL = LABEL_PREFIX + "layer"
KEY_LABEL = LABEL_PREFIX + "key"
PARENT_LABEL = LABEL_PREFIX + "parent"
PARENT_KEY_LABEL = LABEL_PREFIX + "parent-key"
GIT_COMMIT_LABEL = LABEL_PREFIX + "git-commit"
#: On a layer the build did not seal (hpc_stateless_seal: false); its value is the reason given.
SEAL_SKIPPED_LABEL = LABEL_PREFIX + "seal-skipped"

#: Where layer images go unless the inventory says otherwise.
DEFAULT_IMAGE_PREFIX = "localhost/hpc-stateless"
#: The tag that names the image of the current configuration of a layer (``<prefix>/<layer>:latest``), moved by
#: every build run, cached layers included (build.yml).
LATEST_TAG = "latest"
#: The start of every working container's name.
CONTAINER_PREFIX = "hpc-stateless-"
#: Characters of the instance part of a container name (a content key is cut to this length).
INSTANCE_LENGTH = 12
#: Parents followed at most from a layer image to its root layer (a guard against a label loop).
MAX_PARENTS = 64


class LabelReader(Protocol):
    """What reads an image's labels (the buildah client does)."""

    def image_labels(self, ref: str) -> dict[str, str]:
        """The labels of local image ``ref``; ProcessError when it cannot be read."""


# -- labels ------------------------------------------------------------------------------------
def layer_labels(name: str, key: str, parent: str | None, parent_key: str | None,
                 git_commit: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels every layer image carries (a root layer's parent and parent key are empty)."""
    labels = {
        LAYER_LABEL: name,
        KEY_LABEL: key,
        PARENT_LABEL: parent or "",
        PARENT_KEY_LABEL: parent_key or "",
        GIT_COMMIT_LABEL: git_commit or "",
    }
    labels.update(extra or {})
    return labels


def layer_keys_of(reader: LabelReader | None, ref: str, labels: Mapping[str, str]) -> dict[str, str]:
    """``{layer: content key}`` of layer image ``ref`` (whose ``labels`` are given) and its parents, up the
    chain of parent labels; a parent that cannot be read (or with no ``reader``) is named with its key
    and ends the walk."""
    keys: dict[str, str] = {}
    prefix = image_prefix_of(ref)
    for _depth in range(MAX_PARENTS):
        layer, key = labels.get(LAYER_LABEL), labels.get(KEY_LABEL)
        if not layer or not key:
            break
        keys[layer] = key
        parent, parent_key = labels.get(PARENT_LABEL), labels.get(PARENT_KEY_LABEL)
        if not parent or not parent_key:
            break
        try:
            if reader is None:
                raise ValueError("no buildah client to read the parent with")
            labels = reader.image_labels(image_ref(prefix, parent, parent_key) if prefix else f"{parent}:{parent_key}")
        except (ProcessError, ValueError):
            keys[parent] = parent_key
            break
    return keys


# -- image names -------------------------------------------------------------------------------
def image_ref(prefix: str, layer: str, key: str) -> str:
    """Image reference of a layer: ``<prefix>/<layer>:<content key>``."""
    return f"{prefix.rstrip('/')}/{layer}:{key}"


def image_prefix_of(ref: str) -> str:
    """The repository prefix of ``ref`` (``localhost/p/base:k`` -> ``localhost/p``), empty without one."""
    return ref.rsplit("/", 1)[0] if "/" in ref else ""


# -- container names ---------------------------------------------------------------------------
def scope_tag(scope: str) -> str:
    """Six hex digits naming ``scope`` (an image prefix, a runtime directory) inside container names."""
    return hashlib.sha256(scope.rstrip("/").encode("utf-8")).hexdigest()[:6]


def container_stem(scope: str, purpose: str) -> str:
    """Start of every working-container name of ``purpose`` (a layer name, ``pack``...) within ``scope``.

    The scope (the image prefix of a build, the runtime directory of verify sessions) is part of
    the name so that runs in different scopes (tests, CI runners, benchmarks) never see, or clean
    up, each other's containers.
    """
    return f"{CONTAINER_PREFIX}{purpose}-{scope_tag(scope)}-"


def container_name(scope: str, purpose: str, instance: str) -> str:
    """Deterministic working-container name, so a rerun finds a leftover of a killed run.

    ``instance`` is a content key (a layer), a session id or :func:`owner_instance` of a process;
    it is cut to :data:`INSTANCE_LENGTH` characters.
    """
    return container_stem(scope, purpose) + instance[:INSTANCE_LENGTH]


def owner_instance(pid: int) -> str:
    """Instance part of a container that lives as long as process ``pid`` (``pid<n>``, never a hex key)."""
    return f"pid{pid}"


def container_owner(name: str, purpose: str) -> int | None:
    """The pid of the process a ``purpose`` container belongs to (any scope), None for other names."""
    match = re.fullmatch(rf"{re.escape(CONTAINER_PREFIX + purpose)}-[0-9a-f]{{6}}-pid([0-9]+)", name)
    return int(match.group(1)) if match else None
