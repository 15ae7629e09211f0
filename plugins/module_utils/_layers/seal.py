# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The seal: what the build runs in every layer after its roles and handlers, before the commit.

Package scripts re-create what no image may carry whenever a layer installs or upgrades their package
(systemd's writes ``/etc/machine-id``, dbus's ``/var/lib/dbus/machine-id``, openssh-server's the SSH
host keys), whichever role installed it, ours or a site's. So the pipeline, not each role, seals a
layer: ``playbooks/tasks/build_layer.yml`` runs the ``seal`` entry point of :data:`SEAL_ROLE` in every
layer that applied roles. A layer opts out with the variable :data:`SEAL_VAR` false (in its ``vars``
or its inventory host's variables) and says why in :data:`SEAL_SKIP_REASON_VAR`; the reason goes into
the build output and an image label, and an opt-out without a reason is an error naming the layer.

A layer's content key covers the seal as it covers an applied role (``content_key.compute_keys``): the
files of :data:`SEAL_ROLE`, the values of the variables they read, and the two settings above.

Pure Python, no I/O.
"""

from __future__ import annotations

import dataclasses

from ansible.module_utils.parsing.convert_bool import boolean

#: The role whose ``seal`` entry point (``tasks_from: seal``) the build runs after every layer's roles.
SEAL_ROLE = "hpc.stateless.base"
#: Its entry point.
SEAL_ENTRY_POINT = "seal"
#: Layer variable: false keeps the layer unsealed (default true).
SEAL_VAR = "hpc_stateless_seal"
#: Layer variable: why a layer with :data:`SEAL_VAR` false is not sealed (required then).
SEAL_SKIP_REASON_VAR = "hpc_stateless_seal_skip_reason"
#: The variables of the opt-out, which every layer's key covers.
SEAL_VARIABLES = frozenset({SEAL_VAR, SEAL_SKIP_REASON_VAR})


class SealError(ValueError):
    """A layer's seal settings cannot be used; the message names the layer and the variable."""


@dataclasses.dataclass(frozen=True)
class LayerSeal:
    """Whether the build seals ``layer``; ``skip_reason`` says why not (empty when sealed)."""

    layer: str
    sealed: bool
    skip_reason: str = ""

    @property
    def report(self) -> str:
        """One line for the build output."""
        if self.sealed:
            return f"layer {self.layer} sealed ({SEAL_ROLE} tasks_from={SEAL_ENTRY_POINT})"
        return f"layer {self.layer} NOT sealed ({SEAL_VAR}: false): {self.skip_reason}"


def layer_seal(layer: str, seal: object = True, skip_reason: object = None) -> LayerSeal:
    """Decide whether the build seals ``layer`` from its :data:`SEAL_VAR` and :data:`SEAL_SKIP_REASON_VAR`.

    ``seal`` is a boolean or a string Ansible reads as one (``"no"``, ``"false"``...); ``None`` counts as
    unset (sealed). Raises :class:`SealError` for a value that is not a boolean, or for an opt-out whose
    reason is missing, empty or not one line of text.
    """
    try:
        sealed = True if seal is None else boolean(seal, strict=True)
    except TypeError:
        raise SealError(f"layer {layer}: {SEAL_VAR} must be true or false, not {seal!r}") from None
    if sealed:
        return LayerSeal(layer, True)
    reason = skip_reason.strip() if isinstance(skip_reason, str) else ""
    if not reason:
        raise SealError(
            f"layer {layer}: {SEAL_VAR} is false without {SEAL_SKIP_REASON_VAR}: say why the layer may keep "
            "what the seal removes (SSH host keys, the machine ID) - the reason is recorded in the image - "
            f"or leave {SEAL_VAR} unset")
    if "\n" in reason or "\r" in reason:
        raise SealError(f"layer {layer}: {SEAL_SKIP_REASON_VAR} must be one line (it becomes an image label)")
    return LayerSeal(layer, False, reason)
