# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.layer_apt_sources: the apt sources file and keyrings a layer adds to its image.

The sources are plugins/module_utils/_contract/sources.py's; this filter resolves the keyrings on the
controller for playbooks/tasks/layer_sources.yml. Its documentation is in layer_apt_sources.yml next to this file.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import LAYERS_VAR
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import (
    DEBIAN_STYLE_MIRRORS,
    SourceSpecError,
    extra_sources,
    layer_chain,
    image_keyring_path,
    render_deb822,
    sources_file,
)


def layer_apt_sources(layer: Any, layers: Any, project_dir: str = "") -> dict[str, Any]:
    """``{path, content, keyrings: [{src, dest}]}`` of ``layer``'s own extra sources; ``path`` is None without any.

    A relative keyring is relative to ``project_dir``; a keyring that is not a readable file fails, naming
    the layer's key.
    """
    if not isinstance(layer, str) or not layer:
        raise AnsibleFilterError(f"layer_apt_sources: expects the layer name, got {layer!r}")
    if not isinstance(layers, dict) or not isinstance(layers.get(layer), dict):
        raise AnsibleFilterError(f"layer_apt_sources: {LAYERS_VAR} has no layer {layer!r}")
    try:
        sources = extra_sources(layer, layers[layer].get("sources"))
    except SourceSpecError as exc:
        raise AnsibleFilterError(str(exc)) from None
    if not sources:
        return {"path": None, "content": "", "keyrings": []}
    try:
        root = layers[layer_chain(layer, layers)[0]]
    except SourceSpecError as exc:
        raise AnsibleFilterError(str(exc)) from None
    distro = (root.get("bootstrap") or {}).get("distro")
    if distro not in DEBIAN_STYLE_MIRRORS:
        raise AnsibleFilterError(f"{LAYERS_VAR}.{layer}.sources: apt sources need a Debian or Ubuntu root layer; this "
                                 f"layer's root bootstraps {distro!r}: add its repositories in a role instead")
    keyrings = []
    for index, source in enumerate(sources):
        if not source.signed_by:
            continue
        src = os.path.join(project_dir, source.signed_by) if project_dir else source.signed_by
        if not os.path.isfile(src) or not os.access(src, os.R_OK):
            raise AnsibleFilterError(
                f"{LAYERS_VAR}.{layer}.sources[{index}].keyring: {src} is not a readable file on the controller; "
                "give the public key of the repository (binary .gpg or armored .asc), absolute or relative to "
                f"the project directory {project_dir or '(none given)'}")
        keyrings.append({"src": os.path.abspath(src), "dest": image_keyring_path(source)})
    return {"path": sources_file(layer), "content": render_deb822(sources), "keyrings": keyrings}


class FilterModule:
    """The layer sources filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"layer_apt_sources": layer_apt_sources}
