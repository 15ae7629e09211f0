# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan of a run after its build: what verify and pack of the same run take instead of planning again.

A plan (action hpc.stateless.plan) is made of the role files and the inventory, read from their sources, and of
the build host's image listing. Within one ansible-playbook run the first two are what the build planned with,
so the keys, images and versions a later stage would compute are the build's. The listing changed by what the
build did: each stale layer was committed under the plan's key, or found committed by the build it waited for
(layer_lock). Once every stale layer has such an image, the build's plan with those layers cached is the plan a
later stage would reach. A stale layer without one leaves the plan as it was (``after_build`` false): the later
stage plans again, and refuses the layer, naming it.

Pure Python, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


#: What build_layer.yml registers on a layer's host: the commit's result and the build lock's (layer_lock).
COMMIT_RESULT = "_hpc_stateless_commit"
LOCK_RESULT = "_hpc_stateless_build_lock"


class BuiltPlanError(ValueError):
    """The build's answer does not fit the plan; the message names the layer and both images."""


def committed_image(layer_vars: Mapping[str, Any]) -> str | None:
    """The image a layer's build committed (its commit succeeded), else the image the build it waited for
    committed (the build lock found the layer cached), else None; ``layer_vars``: the layer host's variables."""
    commit = layer_vars.get(COMMIT_RESULT) or {}
    lock = layer_vars.get(LOCK_RESULT) or {}
    if isinstance(commit, Mapping) and "image" in commit and not commit.get("failed", False):
        return commit["image"]
    if isinstance(lock, Mapping) and lock.get("cached", False):
        return lock.get("image")
    return None


def committed_images(stale: list[str], hostvars: Mapping[str, Any]) -> dict[str, str]:
    """``{layer: image}`` for each of the ``stale`` layers that has an image after the build (:func:`committed_image`
    of its host's variables in ``hostvars``)."""
    found = {}
    for layer in stale:
        layer_vars = hostvars[layer] if layer in hostvars else {}
        image = committed_image(layer_vars) if isinstance(layer_vars, Mapping) else None
        if image:
            found[layer] = image
    return found


def plan_after_build(plan: Mapping[str, Any], committed: Mapping[str, Any]) -> dict[str, Any]:
    """``plan`` with the stale layers cached, given ``committed``: {layer: the image the build committed for it,
    or found committed by the build it waited for}, or the run's ``hostvars``, whose layer hosts hold what the
    build registered (:func:`committed_images`).

    The result has ``stale`` empty, ``built`` (the layers built, in build order; none when every layer was
    cached) and ``after_build`` true; each built layer's entry is ``cached`` (its root's bootstrap too) and loses
    ``why``, and every layer's image is its current ``:latest`` (a commit moves it, build.yml moves it for a
    cached layer). ``freshness`` stays: the verdict that had the layer built. A plan with stale layers the build
    left without an image is returned unchanged, so a later stage plans again. Raises :class:`BuiltPlanError`
    when an image is not the one the plan named (another key: the plan is not this build's).
    """
    if not isinstance(plan, Mapping) or not isinstance(plan.get("layers"), Mapping) or "stale" not in plan:
        raise BuiltPlanError("plan_after_build: expects the plan of hpc.stateless.plan with storage checked "
                             "(layers, stale)")
    if not isinstance(committed, Mapping):
        raise BuiltPlanError(f"plan_after_build: expects a mapping of layer to committed image, got {committed!r}")
    stale = list(plan["stale"])
    if any(isinstance(committed.get(layer) if layer in committed else None, Mapping) for layer in stale):
        committed = committed_images(stale, committed)
    for layer in stale:
        image = committed.get(layer)
        if not image:
            continue
        planned = plan["layers"][layer].get("image")
        if image != planned:
            raise BuiltPlanError(f"layer {layer}: the build committed {image}, the plan named {planned}; "
                                 "the plan is not this build's, plan again")
    if any(not committed.get(layer) for layer in stale):
        return dict(plan)
    after = copy.deepcopy(dict(plan))
    for layer in stale:
        entry = after["layers"][layer]
        entry["cached"] = True
        entry.pop("why", None)
        if "bootstrap_cached" in entry:
            entry["bootstrap_cached"] = True
    for entry in after["layers"].values():
        if "cached" in entry:
            # A commit moves :latest; the build play moved it for each cached layer.
            entry["latest_current"] = True
    after["stale"] = []
    after["built"] = stale
    after["after_build"] = True
    return after
