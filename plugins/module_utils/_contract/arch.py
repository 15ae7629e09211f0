# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Architectures: how a layer and an image name theirs, and how each tool spells it.

The inventory names an architecture as Debian does (``amd64``, ``arm64``): a root layer's ``arch``
(docs/arch.md). The layer DAG (_layers/graph.py) resolves it for every layer and image; the stages
ask the graph (``LayerGraph.arch``, ``LayerGraph.image_arch``) or an image's labels
(_contract/labels.py ``arch_of``), and translate here for the tool at hand: the OCI image config
(buildah ``--arch``/``--variant``, manifest lists), rpm (``dnf --forcearch``), qemu's binfmt handler
names and the kernel's ``uname -m``.
"""

from __future__ import annotations

import platform

#: ``uname -m`` -> Debian architecture.
DEBIAN_ARCHES: dict[str, str] = {
    "x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el", "s390x": "s390x",
    "i686": "i386", "armv7l": "armhf", "riscv64": "riscv64",
}
#: The architectures a layer may name (Debian's names), in the order an error lists them.
ARCHITECTURES: tuple[str, ...] = ("amd64", "arm64", "armhf", "i386", "ppc64el", "riscv64", "s390x")
#: Debian architecture -> (OCI ``architecture``, OCI ``variant``) of the image config and a manifest list.
OCI_ARCHES: dict[str, tuple[str, str]] = {
    "amd64": ("amd64", ""), "arm64": ("arm64", "v8"), "armhf": ("arm", "v7"), "i386": ("386", ""),
    "ppc64el": ("ppc64le", ""), "riscv64": ("riscv64", ""), "s390x": ("s390x", ""),
}
#: Debian architecture -> the name qemu-user's binfmt handler (``qemu-<name>``) and ``uname -m`` use.
MACHINES: dict[str, str] = {debian: machine for machine, debian in DEBIAN_ARCHES.items()}
MACHINES.update({"armhf": "arm"})  # qemu-user-static registers qemu-arm
#: Debian architecture -> rpm's name (``dnf --forcearch``).
RPM_ARCHES: dict[str, str] = {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le", "s390x": "s390x",
                              "i386": "i686", "armhf": "armv7hl", "riscv64": "riscv64"}
#: The Debian packages a build host needs to run another architecture's programs (docs/arch.md).
EMULATION_PACKAGES: tuple[str, ...] = ("qemu-user-static", "binfmt-support")


def host_arch() -> str:
    """The build host's architecture, Debian's name: the architecture of a root layer that names none."""
    machine = platform.machine()
    return DEBIAN_ARCHES.get(machine, machine)


def oci_arch(arch: str) -> tuple[str, str]:
    """(OCI architecture, variant) of Debian architecture ``arch`` (variant "" when it has none)."""
    return OCI_ARCHES.get(arch, (arch, ""))


def from_oci(architecture: str, variant: str = "") -> str:
    """The Debian architecture of an OCI image config's ``architecture`` (and ``variant``)."""
    for debian, (name, _variant) in OCI_ARCHES.items():
        if name == architecture:
            return debian
    return architecture


def variant_name(name: str, arch: str, first: str) -> str:
    """The name of layer or image ``name``'s ``arch`` variant when the first architecture it lists (or inherits)
    is ``first``: the first keeps the name as written (adding an architecture after it renames nothing that was
    built), every other is ``<name>-<arch>``."""
    return name if arch == first else f"{name}-{arch}"
