# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The default version of a pack: a name that identifies the content, never two different builds.

``git describe`` of the project names a build only when the image is what that commit builds: the
project's work tree is clean (no modified, staged or untracked file), every input of the image's
layer keys (the inventory sources, the role directories of its layer chain) lies in the repository
with no ignored file among them, and no extra variable (``-e``) sets a variable those keys cover.
The plan (plugins/action/plan.py) checks these facts; :func:`default_version` turns them into the
name:

* exact: ``<describe>`` (``v7``, ``v7-3-g3f2a9c0d1e4b``);
* otherwise ``<describe>+<first 12 of the image's leaf layer key>`` (``v7+5d41a2b3c4d5``), or the
  12 characters alone outside git. The key covers every input of the image (roles, variables, the
  parents' keys): two different builds get two names, the same content the same name again (an
  edit undone is the version it was before), and a repack of it is "up to date".

``+`` is a name character (names.py) and sorts after the end of a name and before ``-``, so in a
byte-wise listing ``v7+...`` (an uncommitted build on top of ``v7``) follows ``v7`` and precedes
``v7-1-g...`` (the next commit), as Debian's version comparison orders them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import check_name

KEY_SUFFIX_LENGTH = 12
KEY_SEPARATOR = "+"


@dataclass(frozen=True)
class VersionFacts:
    """What decides whether ``describe`` alone names an image's build: ``inexact`` says why not ('' when it does)."""

    describe: str
    inexact: str = ""


def default_version(facts: VersionFacts, leaf_key: str) -> str:
    """The version an image is packed under when ``hpc_stateless_pack_version`` does not name one."""
    if facts.describe and not facts.inexact:
        return check_name("version", facts.describe)
    if len(leaf_key) < KEY_SUFFIX_LENGTH:
        raise ValueError(f"layer key {leaf_key!r} is too short to name a version")
    suffix = leaf_key[:KEY_SUFFIX_LENGTH]
    return check_name("version", f"{facts.describe}{KEY_SEPARATOR}{suffix}" if facts.describe else suffix)


def version_note(facts: VersionFacts) -> str:
    """One line for the run's output: why the default version is the describe, or carries the key."""
    if not facts.describe:
        return "the project is not a git work tree: versions are named by the leaf layer key"
    if not facts.inexact:
        return f"versions are {facts.describe!r}: the image is what that commit builds"
    return (f"versions are {facts.describe!r}{KEY_SEPARATOR}<leaf layer key>: {facts.inexact}; "
            "commit to name a build by the commit alone")


def build_difference(manifest: dict[str, Any], source: dict[str, Any], options: dict[str, Any],
                     layer_key: str = "") -> list[str]:
    """How the build a packed version's ``manifest`` records differs from a pack of ``source`` with
    ``options``: [] when it is the same build (same source image or directory, same pack options)."""
    found = []
    recorded = manifest.get("source") or {}
    if recorded != source:
        before = recorded.get("image_id") or recorded.get("path") or "?"
        now = source.get("image_id") or source.get("path") or "?"
        keys = manifest.get("layer_keys") or {}
        before_key = keys.get(manifest.get("layer", ""), "")
        found.append(f"it was packed from {recorded.get('image') or recorded.get('path') or '?'} ({before[:19]}"
                     f"{', layer key ' + before_key[:12] if before_key else ''}), this pack is of "
                     f"{source.get('image') or source.get('path') or '?'} ({now[:19]}"
                     f"{', layer key ' + layer_key[:12] if layer_key else ''})")
    before_options = manifest.get("options") or {}
    changed = sorted(k for k in set(before_options) | set(options) if before_options.get(k) != options.get(k))
    if changed:
        found.append(f"pack options differ: {', '.join(changed)}")
    return found
