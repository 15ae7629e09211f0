# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.layer_seal: whether the build seals a layer, for playbooks/tasks/build_layer.yml.

The rule is plugins/module_utils/_layers/seal.py; this filter hands it to Jinja and adds the image label
that records an opt-out. Its documentation is in layer_seal.yml next to this file.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import SEAL_SKIPPED_LABEL
from ansible_collections.hpc.stateless.plugins.module_utils._layers.seal import SealError, layer_seal as _layer_seal


def layer_seal(layer: Any, seal: Any = True, skip_reason: Any = None) -> dict[str, Any]:
    """``{layer, sealed, skip_reason, report, labels}`` of layer ``layer``; an error names the layer."""
    if not isinstance(layer, str) or not layer:
        raise AnsibleFilterError(f"layer_seal: expects the layer name, got {layer!r}")
    try:
        decision = _layer_seal(layer, seal, skip_reason)
    except SealError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return {
        "layer": decision.layer,
        "sealed": decision.sealed,
        "skip_reason": decision.skip_reason,
        "report": decision.report,
        "labels": {} if decision.sealed else {SEAL_SKIPPED_LABEL: decision.skip_reason},
    }


class FilterModule:
    """The seal filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"layer_seal": layer_seal}
