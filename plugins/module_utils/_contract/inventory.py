# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The inventory schema: what a site writes in ``hpc_stateless_layers`` and ``hpc_stateless_images``.

Facts only, no checks: the layer DAG validates the inventory against them (_layers/graph.py), the
rootfs module derives its bootstrap options from :data:`BOOTSTRAP_KEYS` (_build/bootstrap.py, which
also picks the tool of a distro), pack reads a hardware profile by :data:`PROFILE_KEYS`
(_pack/hwprofile.py). A stage that needs one of them imports it from here, so the stages agree on
the schema without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The inventory variable of the layer DAG: ``{layer name: layer mapping}``.
LAYERS_VAR = "hpc_stateless_layers"
#: The inventory variable of the images: ``{image name: image mapping}``.
IMAGES_VAR = "hpc_stateless_images"

#: Layer and image names become image names and inventory host names: lower case, as OCI repository
#: names must be. Always ``fullmatch``: with ``$``, ``match()`` lets a trailing newline through.
LAYER_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]*")

#: The keys of a layer mapping.
LAYER_KEYS: tuple[str, ...] = ("parent", "bootstrap", "arch", "sources", "roles", "vars", "groups", "description")
#: The layer and image key naming architectures (Debian's names, _contract/arch.py; docs/arch.md).
ARCH_KEY = "arch"
#: The keys of a mapping entry of a layer's ``roles`` (exactly one of them).
ROLE_ENTRY_KEYS: tuple[str, ...] = ("role", "name")

#: distro name -> the bootstrap tool family that installs it.
SUPPORTED_DISTROS: dict[str, str] = {
    "debian": "debootstrap",
    "ubuntu": "debootstrap",
    "rocky": "dnf",
    "almalinux": "dnf",
    "centos": "dnf",
    "rhel": "dnf",
    "fedora": "dnf",
    "ol": "dnf",
    "opensuse-leap": "zypper",
    "opensuse-tumbleweed": "zypper",
    "sles": "zypper",
}
#: tool family -> the tools ``bootstrap.tool`` may choose, the default first.
BOOTSTRAP_TOOLS: dict[str, tuple[str, ...]] = {
    "debootstrap": ("mmdebstrap", "debootstrap"),
    "dnf": ("dnf",),
    "zypper": ("zypper",),
}

#: tool family -> (the interpreter, the binding Ansible's package module needs beside it). A root that lists the
#: interpreter is meant to be configured by Ansible, so the layer DAG (_layers/graph.py) adds the binding when the
#: list lacks it: without python3-apt, the first apt task of every child layer runs ``apt-get update`` and installs
#: python3-apt itself (about 4 s a layer on the 2-core build host), and that layer carries the refreshed lists.
#: dnf's binding comes with dnf itself, and zypper's module needs none.
ANSIBLE_BINDINGS: dict[str, tuple[str, str]] = {
    "debootstrap": ("python3", "python3-apt"),
}

# The kinds of value of a bootstrap key.
KIND_STRING = "string"
KIND_PATH = "path"        # a string naming a file of the build host
KIND_STRINGS = "strings"  # a list of strings
KIND_BOOL = "bool"
#: The keys of a layer's ``bootstrap`` mapping and the kind of each value, in the order the rootfs module
#: documents them.
BOOTSTRAP_KEYS: dict[str, str] = {
    "distro": KIND_STRING,
    "release": KIND_STRING,
    "mirror": KIND_STRING,
    "updates_mirror": KIND_STRING,
    "security_mirror": KIND_STRING,
    "updates": KIND_BOOL,
    "security": KIND_BOOL,
    "variant": KIND_STRING,
    "packages": KIND_STRINGS,
    "components": KIND_STRINGS,
    "arch": KIND_STRING,
    "extra_args": KIND_STRINGS,
    "keyring": KIND_PATH,
    "gpg_check": KIND_BOOL,
    "tool": KIND_STRING,
}
#: The bootstrap keys the inventory may not set: the layer graph fills them from the layer's own keys (one place for
#: each fact), key -> the layer key that holds it. The rootfs module still takes them as options.
BOOTSTRAP_FROM_LAYER: dict[str, str] = {"arch": ARCH_KEY}
#: The bootstrap keys a layer must set.
BOOTSTRAP_REQUIRED: tuple[str, ...] = ("distro", "release")

#: The keys of an image's ``hardware_profile`` (pack's option of the same name).
PROFILE_KEYS: tuple[str, ...] = ("modules", "modaliases", "modaliases_file", "force", "firmware")


def bootstrap_tool_choices() -> list[str]:
    """Every tool a ``bootstrap.tool`` may name, sorted."""
    return sorted({tool for tools in BOOTSTRAP_TOOLS.values() for tool in tools})


def type_name(value: object) -> str:
    """How an error message names the YAML type of ``value`` (null, bool, string, mapping, list...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__
