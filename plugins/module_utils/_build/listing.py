# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What layers the build host's containers-storage holds: the answer of hpc.stateless.layer_info.

One function, used by the module (a remote build host) and by the plan action when the build host is the
controller itself (a local connection): there it runs in the action's process, without a module's start-up
(about 0.5 s of every stage's plan on a quiet host).
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import ARCHITECTURES, MACHINES, host_arch
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    CONTAINER_PREFIX,
    KEY_LABEL,
    LAYER_LABEL,
    PARENT_LABEL,
)


#: Where the kernel lists the binfmt handlers (qemu-user's are ``qemu-<machine>``, _contract/arch.py MACHINES).
BINFMT_DIR = "/proc/sys/fs/binfmt_misc"


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def runnable_arches(binfmt_dir: str = BINFMT_DIR, native: str | None = None) -> list[str]:
    """The architectures whose programs this host runs: its own, and each one an enabled qemu-user binfmt handler
    runs (binfmt_misc mounted and enabled, ``qemu-<machine>`` enabled). The host's own first."""
    own = native or host_arch()
    found = [own]
    if _first_line(os.path.join(binfmt_dir, "status")) == "enabled":
        found += [arch for arch in ARCHITECTURES if arch != own
                  and _first_line(os.path.join(binfmt_dir, f"qemu-{MACHINES.get(arch, arch)}")) == "enabled"]
    return found


def layer_listing(buildah: Buildah) -> dict[str, Any]:
    """``{images, keys, containers, arches}``: every layer image with its layer, key and parent labels, the keys
    per layer, the names of the layer working containers, and the architectures the build host runs
    (:func:`runnable_arches`). Raises ProcessError when buildah fails."""
    images = []
    keys: dict[str, list[str]] = {}
    for image in buildah.layer_images():
        labels = image["labels"]
        entry = dict(image, layer=labels.get(LAYER_LABEL, ""), key=labels.get(KEY_LABEL, ""),
                     parent=labels.get(PARENT_LABEL, ""))
        images.append(entry)
        keys.setdefault(entry["layer"], []).append(entry["key"])
    return {"images": images, "keys": keys, "containers": sorted(buildah.container_names(CONTAINER_PREFIX)),
            "arches": runnable_arches()}
