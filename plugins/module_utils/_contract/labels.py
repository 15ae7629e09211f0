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
* a layer image records what it holds (:func:`record_labels`): :data:`PACKAGES_LABEL` (every installed package and
  its version, :func:`packages_of`), :data:`REPOSITORIES_LABEL` (the repository states apt saw while it was
  built, :func:`repositories_of`) and :data:`INPUTS_KEY_LABEL` (the content key of its inputs, which differs from
  its own key when the plan rebuilt it for archive updates: _layers/freshness.py);
* a layer image is ``<prefix>/<layer>:<content key>`` (:func:`image_ref`, :func:`image_prefix_of`);
* every working container is ``hpc-stateless-<purpose>-<scope tag>-<instance>`` (:func:`container_name`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
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
#: The architecture of a layer image, Debian's name (the image config's own ``architecture`` is OCI's name).
ARCH_LABEL = LABEL_PREFIX + "arch"
#: What a layer image holds: JSON ``{package: version}`` of every installed package (dpkg's "install ok installed",
#: rpm's database), JSON ``[{uri, suite, date, sha256}]`` of the repository states (InRelease/Release files) apt
#: had in its lists at commit, and the content key of the layer's inputs (its tag is that key, or that key hashed
#: with the archive updates it was rebuilt for).
PACKAGES_LABEL = LABEL_PREFIX + "packages"
REPOSITORIES_LABEL = LABEL_PREFIX + "repositories"
INPUTS_KEY_LABEL = LABEL_PREFIX + "inputs-key"
#: The fields of each entry of :data:`REPOSITORIES_LABEL`.
REPOSITORY_FIELDS = ("uri", "suite", "date", "sha256")
#: A record label longer than this is stored deflated and base64-encoded after :data:`PACKED_PREFIX`: a label
#: reaches buildah as one command-line argument, which Linux caps at 128 KiB (an image of thousands of packages).
PACK_ABOVE = 16384
PACKED_PREFIX = "zlib+base64:"
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
                 git_commit: str | None, extra: dict[str, str] | None = None,
                 inputs_key: str | None = None, arch: str | None = None) -> dict[str, str]:
    """The labels every layer image carries (a root layer's parent and parent key are empty; the inputs key is
    the key itself unless the plan gave another; the architecture, when given, is the layer's, _contract/arch.py)."""
    labels = {
        LAYER_LABEL: name,
        KEY_LABEL: key,
        **({ARCH_LABEL: arch} if arch else {}),
        INPUTS_KEY_LABEL: inputs_key or key,
        PARENT_LABEL: parent or "",
        PARENT_KEY_LABEL: parent_key or "",
        GIT_COMMIT_LABEL: git_commit or "",
    }
    labels.update(extra or {})
    return labels


def record_labels(packages: Mapping[str, str], repositories: list[Mapping[str, str]]) -> dict[str, str]:
    """The labels recording an image's packages and repository states (compact, sorted JSON)."""
    states = [{field: str(state.get(field) or "") for field in REPOSITORY_FIELDS} for state in repositories]
    states.sort(key=lambda state: (state["uri"], state["suite"]))
    return {
        PACKAGES_LABEL: _packed(json.dumps(dict(sorted(packages.items())), separators=(",", ":"))),
        REPOSITORIES_LABEL: _packed(json.dumps(states, separators=(",", ":"))),
    }


def _packed(text: str) -> str:
    if len(text) <= PACK_ABOVE:
        return text
    return PACKED_PREFIX + base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def arch_of(labels: Mapping[str, str]) -> str:
    """The architecture (Debian's name) a layer image's labels record; "" for an image built before they did."""
    return labels.get(ARCH_LABEL, "")


def has_package_record(labels: Mapping[str, str]) -> bool:
    """True when the image records its packages (images built before the record have no such label)."""
    return PACKAGES_LABEL in labels


def _json_label(labels: Mapping[str, str], name: str, kind: type) -> object:
    text = labels.get(name)
    if text is None or text == "":
        return kind()
    try:
        if text.startswith(PACKED_PREFIX):
            text = zlib.decompress(base64.b64decode(text[len(PACKED_PREFIX):], validate=True)).decode("utf-8")
        value = json.loads(text)
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"image label {name} is not a readable record ({exc}); rebuild the layer (run site.yml)") from exc
    if not isinstance(value, kind):
        raise ValueError(f"image label {name} holds a JSON {type(value).__name__}, not a {kind.__name__}; "
                         "rebuild the layer (run site.yml)")
    return value


def packages_of(labels: Mapping[str, str]) -> dict[str, str]:
    """``{package: version}`` of an image's :data:`PACKAGES_LABEL` (empty without one: see
    :func:`has_package_record`); ValueError naming the label when it is malformed."""
    value = _json_label(labels, PACKAGES_LABEL, dict)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):  # type: ignore[union-attr]
        raise ValueError(f"image label {PACKAGES_LABEL} must map package names to version strings; "
                         "rebuild the layer (run site.yml)")
    return dict(value)  # type: ignore[arg-type]


def repositories_of(labels: Mapping[str, str]) -> list[dict[str, str]]:
    """``[{uri, suite, date, sha256}]`` of an image's :data:`REPOSITORIES_LABEL` (empty without one);
    ValueError naming the label when it is malformed."""
    value = _json_label(labels, REPOSITORIES_LABEL, list)
    if not all(isinstance(entry, dict) for entry in value):  # type: ignore[union-attr]
        raise ValueError(f"image label {REPOSITORIES_LABEL} must be a list of objects; rebuild the layer (run site.yml)")
    return [{field: str(entry.get(field) or "") for field in REPOSITORY_FIELDS} for entry in value]  # type: ignore[union-attr]


def inputs_key_of(labels: Mapping[str, str]) -> str:
    """The content key of the image's inputs: its :data:`INPUTS_KEY_LABEL`, else (built before that label) its key."""
    return labels.get(INPUTS_KEY_LABEL) or labels.get(KEY_LABEL, "")


def installed_by_layer(packages: Mapping[str, str], parent_packages: Mapping[str, str]) -> dict[str, str]:
    """The packages a layer installed: those of its record missing from its parent's record, or at another version."""
    return {name: version for name, version in packages.items() if parent_packages.get(name) != version}


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
