# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How fresh a release is: what pack records of the archive and the freshness gate it applies.

At pack time the image's installed packages (its package database, the same reader as the manifest) are
held against an archive view of its layer's apt sources (_archive/index.py, cached on the controller, the
view the plan reads). :func:`check` gives a :class:`Freshness`:

* ``repositories``: the repository states the image was built against - the ``hpc.stateless.repositories``
  labels of the leaf layer and its ancestors, one entry per state with the layers that saw it;
* ``archive``: the repository states read now, at pack time;
* ``origins``: per installed package, the suite of the source that serves its version (and whether that
  source is a security one), where the archive still serves it;
* ``pending``: the updates the archive offers for installed packages (normally none: the plan rebuilds a
  layer whose packages moved, unless ``hpc_stateless_freshness_policy`` is ``never``).

:func:`gate` refuses (``hpc_stateless_freshness_gate: refuse``, the default) an image with pending security
updates, naming them and the command that rebuilds it, or warns (``warn``). Pure but for the view's load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import (
    ArchiveError,
    ArchiveView,
    Update,
    describe_updates,
    pending_updates,
)

GATE_VARIABLE = "hpc_stateless_freshness_gate"
REFUSE = "refuse"
WARN = "warn"
GATES = (REFUSE, WARN)
REBUILD_COMMAND = "ansible-playbook site.yml"
#: Updates named in a message before "..." (the manifest lists them all).
NAMED = 5
#: The architecture whose Packages indexes are read when the image's packages name none but ``all``.
DEFAULT_ARCH = "amd64"


class StaleImageError(Exception):
    """The gate refuses an image with pending security updates; the message names them and what to run."""


@dataclass(frozen=True)
class Freshness:
    repositories: tuple[dict[str, Any], ...] = ()
    archive: tuple[dict[str, Any], ...] = ()
    origins: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: tuple[Update, ...] = ()

    @property
    def security(self) -> tuple[Update, ...]:
        return tuple(update for update in self.pending if update.security)

    def manifest_entry(self) -> dict[str, Any]:
        """The manifest's (and the module result's) ``freshness``."""
        return {
            "repositories": list(self.repositories),
            "archive": list(self.archive),
            "pending_updates": [update_entry(update) for update in self.pending],
            "pending_security_updates": len(self.security),
        }


def update_entry(update: Update) -> dict[str, Any]:
    return {"package": update.package, "installed": update.installed, "candidate": update.candidate,
            "suite": update.suite, "security": bool(update.security)}


# -- what pack records ------------------------------------------------------------------------------
def repository_states(chain: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> list[dict[str, Any]]:
    """One entry per repository state ``{uri, suite, date, sha256, layers}`` of the ``(layer, states)`` of an
    image's chain (the layers' ``hpc.stateless.repositories`` labels), sorted by URI, suite and date."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for layer, states in chain:
        for state in states:
            key = (str(state.get("uri", "")), str(state.get("suite", "")), str(state.get("sha256", "")))
            entry = merged.setdefault(key, {"uri": key[0], "suite": key[1], "date": str(state.get("date", "")),
                                            "sha256": key[2], "layers": []})
            if layer not in entry["layers"]:
                entry["layers"].append(layer)
    return sorted(merged.values(), key=lambda e: (e["uri"], e["suite"], e["date"], e["sha256"]))


def package_origins(view: Any, packages: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``{package: {suite, uri, security}}`` of each installed version the archive serves; a version no source
    serves any more (superseded in a security suite, a local build) has no entry."""
    origins = {}
    for name in sorted(packages):
        source = view.origin(name, packages[name])
        if source is not None:
            origins[name] = {"suite": source.suite, "uri": source.uri, "security": source.kind == "security"}
    return origins


def image_arch(architectures: Iterable[str]) -> str:
    """The architecture whose indexes hold the image's packages: the most common one but ``all``."""
    counts: dict[str, int] = {}
    for arch in architectures:
        if arch and arch != "all":
            counts[arch] = counts.get(arch, 0) + 1
    return max(sorted(counts), key=lambda arch: counts[arch]) if counts else DEFAULT_ARCH


def check(view: Any, packages: Mapping[str, str],
          chain: Iterable[tuple[str, Sequence[Mapping[str, Any]]]] = ()) -> Freshness:
    """The :class:`Freshness` of an image whose installed packages are ``{name: version}``, against ``view``."""
    return Freshness(
        repositories=tuple(repository_states(chain)),
        archive=tuple(dict(state) for state in view.states),
        origins=package_origins(view, packages),
        pending=tuple(pending_updates(view, packages, "any")),
    )


def load_view(sources: Sequence[Any], *, arch: str, cache_dir: str | None, image: str) -> ArchiveView:
    """The archive view of ``sources`` (cached under ``cache_dir``, None: the archive view's default, the plan's
    cache); StaleImageError naming the image when the
    archive cannot be read (the gate cannot tell whether the image is fresh)."""
    try:
        return ArchiveView.load(tuple(sources), arch=arch, cache_dir=cache_dir)
    except ArchiveError as exc:
        raise StaleImageError(f"image {image}: the freshness gate cannot read the archive: {exc}; with no "
                              f"archive at hand set {GATE_VARIABLE}: warn") from exc


# -- the gate ---------------------------------------------------------------------------------------
def gate(freshness: Freshness, policy: str, image: str) -> str | None:
    """None when ``image`` has no pending security update; else StaleImageError (policy refuse) or the
    warning to show (policy warn). Updates that are not security ones never stop a pack."""
    if policy not in GATES:
        raise StaleImageError(f"{GATE_VARIABLE}: {policy!r} is not one of {', '.join(GATES)}")
    security = freshness.security
    if not security:
        return None
    message = (f"image {image}: {describe_updates(security, NAMED)} pending; run {REBUILD_COMMAND} "
               "to rebuild the layers that installed them")
    if policy == REFUSE:
        raise StaleImageError(f"{message} (or set {GATE_VARIABLE}: warn to pack it anyway)")
    return f"{message}; packed anyway ({GATE_VARIABLE}: warn)"
