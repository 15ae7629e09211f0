# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which key a layer's image has when the archive moved: the plan's freshness check.

A layer's content key over its inputs (roles, variables, spec, the parent's key: content_key.py) is its
*inputs key* K0. The image of a layer is tagged with its *key* K and labelled ``hpc.stateless.inputs-key=K0``
(_contract/labels.py). For each layer, in build order (:meth:`FreshnessCheck.settle`):

* no image of the layer was built from K0 -> stale, the layer is built under K = K0 ("inputs changed: ...", or
  "parent <p> rebuilds" when the parent's key moved);
* else the newest such image is asked: the packages it installed (its package record less its parent's,
  ``installed_by_layer``) against the archive view of the layer's sources (_archive/index.py: one view per run,
  shared by every layer). No pending update under the policy -> cached, K = that image's key. Policy ``never``
  -> cached as well, and the lag becomes a warning. Otherwise stale, K = :func:`updated_key` (K0 hashed with the
  sorted ``package=candidate`` of the updates) and the reason is ``base: 4 security updates (openssl 3.0.20 ->
  3.0.22, ...)``;
* an image without a package record (built before the record existed) cannot say what it lags behind: it
  is rebuilt once (K0 hashed with that reason), never taken as fresh.

Children's inputs keys hash the parent's K, so only a moved layer and the layers below it get new keys.
A root layer's bootstrapped root (:meth:`FreshnessCheck.settle_bootstrap`) is asked the same way when the root
layer rebuilds, so a root rebuilt for updates bootstraps again from the current archive.

Pure apart from the view, which is loaded (network, cache) only when some image has to be asked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import (
    POLICIES,
    ArchiveView,
    Update,
    describe_updates,
    pending_updates,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import ARCH_KEY
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    KEY_LABEL,
    PARENT_KEY_LABEL,
    has_package_record,
    image_ref,
    inputs_key_of,
    installed_by_layer,
    packages_of,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import (
    DEBIAN_STYLE_MIRRORS,
    layer_chain,
    layer_sources,
)

DEFAULT_POLICY = "any"
#: What an image without a package record is rebuilt for (hashed into its key, so the rebuild gets a new one).
NO_RECORD = "no package record"


def updated_key(inputs_key: str, updates: Iterable[Update | str]) -> str:
    """The key of a layer rebuilt from inputs ``inputs_key`` for ``updates`` (or a reason such as :data:`NO_RECORD`)."""
    moved = sorted(u if isinstance(u, str) else f"{u.package}={u.candidate}" for u in updates)
    text = json.dumps({"inputs": inputs_key, "updates": moved}, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rebuilt_for_updates(chain: Iterable[str], keys: Mapping[str, Any]) -> list[str]:
    """The layers of ``chain`` whose key is not their inputs key (``compute_keys``' LayerKey): rebuilt for archive
    updates, so their image is not what the configuration alone builds (the default version says so)."""
    return [layer for layer in chain if keys[layer].inputs_key and keys[layer].key != keys[layer].inputs_key]


@dataclasses.dataclass(frozen=True)
class StoredImage:
    """A layer image in local storage (an entry of hpc.stateless.layer_info's ``images``)."""

    id: str
    names: tuple[str, ...]
    labels: Mapping[str, str]
    created: float = 0.0


class Storage:
    """The layer images in local storage, by reference and by repository (``<prefix>/<layer>``)."""

    def __init__(self, images: Iterable[Mapping[str, Any]]) -> None:
        self._by_name: dict[str, StoredImage] = {}
        self._by_repo: dict[str, list[StoredImage]] = {}
        for raw in images:
            image = StoredImage(str(raw.get("id") or ""), tuple(raw.get("names") or ()), dict(raw.get("labels") or {}),
                                float(raw.get("created") or 0))
            for name in image.names:
                self._by_name[name] = image
                repo = name.rsplit(":", 1)[0]
                if image not in self._by_repo.setdefault(repo, []):
                    self._by_repo[repo].append(image)

    def names(self) -> set[str]:
        return set(self._by_name)

    def get(self, ref: str) -> StoredImage | None:
        return self._by_name.get(ref)

    def built_from(self, prefix: str, layer: str, inputs_key: str) -> list[StoredImage]:
        """Images of ``layer`` under ``prefix`` built from inputs ``inputs_key``, newest first (an image tagged with
        the inputs key counts too: it was built before images recorded their inputs key). Only an image still
        named by its own key counts: one left with ``:latest`` alone (its key tag removed) is no cache of it,
        and trusting it would build its children on a key no image carries."""
        repo = image_ref(prefix, layer, "x").rsplit(":", 1)[0]
        exact = f"{repo}:{inputs_key}"
        found = [image for image in self._by_repo.get(repo, [])
                 if exact in image.names
                 or (inputs_key_of(image.labels) == inputs_key and f"{repo}:{image.labels.get(KEY_LABEL)}" in image.names)]
        return sorted(found, key=lambda image: (image.created, image.labels.get(KEY_LABEL, "")), reverse=True)


@dataclasses.dataclass
class Verdict:
    """What the check found for one layer (or a root's bootstrap): the key to build or reuse, and why."""

    layer: str
    inputs_key: str
    key: str
    cached: bool
    reason: str = ""  # why it is stale ("" when cached)
    image: str = ""  # the image asked (the newest built from the inputs key)
    updates: list[Update] = dataclasses.field(default_factory=list)  # what the rebuild is for
    lag: list[Update] = dataclasses.field(default_factory=list)  # policy never: what is not rebuilt for
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"inputs_key": self.inputs_key, "key": self.key, "cached": self.cached, "reason": self.reason,
                "image": self.image, "updates": [str(u) for u in self.updates],
                "security_updates": [str(u) for u in self.updates if u.security],
                "lag": [str(u) for u in self.lag], "note": self.note}


class FreshnessCheck:
    """Settles each layer's key against local storage and the archive (see the module doc).

    ``view_for(layer)`` returns the archive view of the layer's sources (``ArchiveView.restricted``), or None
    when the layer's packages come from no apt archive (then it is cached by its inputs, with a note); it may
    raise ``ArchiveError``, which ends the plan unless the policy is ``never``.
    """

    def __init__(self, storage: Storage, prefix: str, policy: str,
                 view_for: Callable[[str], Any], bootstrap_prefix: str = "") -> None:
        if policy not in POLICIES:
            raise ValueError(f"hpc_stateless_freshness_policy: {policy!r} is not one of {', '.join(POLICIES)}")
        self.storage = storage
        self.prefix = prefix
        self.bootstrap_prefix = bootstrap_prefix or f"{prefix.rstrip('/')}/bootstrap"
        self.policy = policy
        self._view_for = view_for
        self.verdicts: dict[str, Verdict] = {}
        self.bootstraps: dict[str, Verdict] = {}
        self.warnings: list[str] = []
        self.seconds = 0.0  # spent asking images and the archive (the view's loading included)

    # -- per layer ------------------------------------------------------------------------------------
    def settle(self, layer: str, inputs_key: str, parent: str | None) -> str:
        """The key of ``layer`` whose inputs key is ``inputs_key`` (a ``compute_keys`` settle callback)."""
        parent_verdict = self.verdicts.get(parent) if parent else None
        started = time.perf_counter()
        try:
            verdict = self._ask(layer, inputs_key, self.prefix, parent, parent_verdict)
        finally:
            self.seconds += time.perf_counter() - started
        self.verdicts[layer] = verdict
        return verdict.key

    def settle_bootstrap(self, root: str, inputs_key: str) -> Verdict:
        """The key of root layer ``root``'s bootstrapped root, whose key over the bootstrap spec is ``inputs_key``."""
        started = time.perf_counter()
        try:
            verdict = self._ask(root, inputs_key, self.bootstrap_prefix, None, None, what="bootstrapped root of ")
        finally:
            self.seconds += time.perf_counter() - started
        self.bootstraps[root] = verdict
        return verdict

    def _ask(self, layer: str, inputs_key: str, prefix: str, parent: str | None,
             parent_verdict: Verdict | None, what: str = "") -> Verdict:
        built = self.storage.built_from(prefix, layer, inputs_key)
        if not built:
            if parent_verdict is not None and not parent_verdict.cached:
                reason = f"parent {parent} rebuilds"
            else:
                reason = f"inputs changed: no image of the {what}layer built from key {inputs_key[:12]}"
            return Verdict(layer, inputs_key, inputs_key, False, reason)
        image = built[0]
        own_key = image.labels.get(KEY_LABEL) or inputs_key
        ref = image_ref(prefix, layer, own_key)
        if ref not in image.names:  # built before images recorded their key: named by its inputs key
            own_key, ref = inputs_key, image_ref(prefix, layer, inputs_key)
        if not has_package_record(image.labels):
            if self.policy == "never":
                self.warnings.append(f"{what}{layer}: image {ref} records no packages, its freshness is unknown "
                                     "(policy never: kept)")
                return Verdict(layer, inputs_key, own_key, True, image=ref, note=NO_RECORD)
            key = updated_key(inputs_key, [NO_RECORD])
            return Verdict(layer, inputs_key, key, self._exists(prefix, layer, key),
                           f"{what}{layer}: {NO_RECORD} (built before images recorded their packages)", ref)
        view, note = self._view(layer)
        if view is None:
            return Verdict(layer, inputs_key, own_key, True, image=ref, note=note)
        try:
            installed = packages_of(image.labels)
            if parent is not None:
                parent_image = self.storage.get(image_ref(prefix, parent, image.labels.get(PARENT_KEY_LABEL, "")))
                if parent_image is not None:
                    installed = installed_by_layer(installed, packages_of(parent_image.labels))
            updates = pending_updates(view, installed, self.policy)
        except ValueError as exc:
            raise ValueError(f"{what}layer {layer}, image {ref}: {exc}") from None
        if not updates:
            return Verdict(layer, inputs_key, own_key, True, image=ref)
        if self.policy == "never":
            self.warnings.append(f"{what}{layer} lags behind its archive: {describe_updates(updates)} "
                                 "(hpc_stateless_freshness_policy never: not rebuilt)")
            return Verdict(layer, inputs_key, own_key, True, image=ref, lag=updates)
        key = updated_key(inputs_key, updates)
        if key == own_key:
            # This image is the rebuild for exactly these updates, and still lacks them: apt did not install them
            # (a pin, a held package, a role asking for a version). Rebuilding again would change nothing.
            self.warnings.append(f"{what}{layer} was rebuilt for {describe_updates(updates)} and still lacks them "
                                 "(pinned or held packages, or a role installing a fixed version?)")
            return Verdict(layer, inputs_key, key, True, image=ref, lag=updates)
        return Verdict(layer, inputs_key, key, self._exists(prefix, layer, key),
                       f"{what}{layer}: {describe_updates(updates)}", ref, updates)

    def archive_reasons(self) -> dict[str, list[str]]:
        """The layers stale because their packages moved in the archive, and why: what the change plan (plan.yml,
        the CI pipeline) adds to the reasons a changed file gives. (An image without a package record is rebuilt
        by the build's own plan; it is no change of the configuration.)"""
        return {layer: [v.reason] for layer, v in self.verdicts.items() if not v.cached and v.updates}

    def _exists(self, prefix: str, layer: str, key: str) -> bool:
        return self.storage.get(image_ref(prefix, layer, key)) is not None

    def _view(self, layer: str) -> tuple[Any, str]:
        """The layer's archive view, or None and why there is none."""
        try:
            view = self._view_for(layer)
        except ValueError as exc:  # ArchiveError is a ValueError
            if self.policy != "never":
                raise
            said = any(str(exc) in warning for warning in self.warnings)
            self.warnings.append(f"{layer}: the archive cannot be read, so its lag is unknown (policy never: kept)"
                                 + (" - see above" if said else f": {exc}"))
            return None, "archive unreadable (policy never)"
        return view, "" if view is not None else "packages from no apt archive: not compared with one"


class ArchiveViews:
    """The archive views of one plan run: ONE view per architecture over the sources of every layer of the DAG,
    loaded the first time a layer asks (never when no image has to be asked), restricted to each layer's sources.

    ``layers`` are the layer specs (as the DAG normalised them); ``load`` is ``ArchiveView.load`` (a fake in
    unit tests) and gets ``load_options`` (cache_dir, max_age...). A layer whose root bootstraps a distribution
    without apt archives (EL, SUSE) has no view (None).
    """

    def __init__(self, layers: Mapping[str, Mapping[str, Any]], load: Callable[..., Any] = ArchiveView.load,
                 **load_options: Any) -> None:
        self._layers = layers
        self._load = load
        self._options = load_options
        self._views: dict[str, Any] = {}
        self._failed: dict[str, ValueError] = {}

    def _root_bootstrap(self, layer: str) -> Mapping[str, Any]:
        return self._layers[layer_chain(layer, self._layers)[0]].get("bootstrap") or {}

    def _arch(self, layer: str) -> str:
        return str(self._layers[layer][ARCH_KEY])

    def _apt(self, layer: str) -> bool:
        return self._root_bootstrap(layer).get("distro") in DEBIAN_STYLE_MIRRORS

    @property
    def loaded(self) -> list[Any]:
        return list(self._views.values())

    def for_layer(self, layer: str) -> Any:
        if not self._apt(layer):
            return None
        arch = self._arch(layer)
        if arch in self._failed:  # loaded once per run: an unreachable mirror is not asked again per layer
            raise self._failed[arch]
        if arch not in self._views:
            sources = [source for name in self._layers if self._apt(name) and self._arch(name) == arch
                       for source in layer_sources(name, self._layers)]
            try:
                self._views[arch] = self._load(sources, arch=arch, **self._options)
            except ValueError as exc:  # ArchiveError
                self._failed[arch] = exc
                raise
        return self._views[arch].restricted(layer_sources(layer, self._layers))
