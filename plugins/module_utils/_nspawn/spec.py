# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What defines a session (:class:`SessionSpec`) and its stable id."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import (
    NETWORK_HOST,
    NETWORK_PRIVATE,
    NspawnError,
    hostname_for,
    machine_name,
    network_args,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import owner_process, process_start
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.state import default_runtime_dir


def session_id(identity: Dict[str, Any]) -> str:
    """Stable id of a session from what identifies it (owner process, host, root, mode...)."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


class SessionSpec:
    """Everything that defines one session; written to ``spec.json`` for the supervisor.

    The programs a session runs (:data:`PROGRAMS`) are never written there nor read back: they come from the
    connection's options (or the defaults, names looked up in PATH), so no file of a session names a program that
    root would run.
    """

    FIELDS = ("host", "root", "image", "boot", "ephemeral", "hostname", "network", "extra_args",
              "boot_timeout", "stop_timeout", "runtime_dir", "owner_pid", "owner_start", "userns")
    PROGRAMS = ("nspawn", "nsenter", "buildah")

    def __init__(self, host: str, root: Optional[str] = None, image: Optional[str] = None,
                 boot: bool = False, ephemeral: bool = True, hostname: Optional[str] = None,
                 network: Optional[str] = None, extra_args: Optional[List[str]] = None,
                 boot_timeout: float = 60.0, stop_timeout: float = 10.0,
                 runtime_dir: Optional[str] = None, owner_pid: Optional[int] = None,
                 owner_start: Optional[str] = None, nspawn: str = "systemd-nspawn",
                 nsenter: str = "nsenter", buildah: str = "buildah", userns: bool = False) -> None:
        if bool(root) == bool(image):
            raise NspawnError(f"host {host}: set exactly one of ansible_nspawn_root (a directory) "
                              f"and ansible_nspawn_image (a local image)")
        if userns and root:
            # A directory tree would have to be mounted idmapped; its ephemeral overlay cannot be (overlayfs here
            # refuses it), and an idmapped lower layer needs a mount(8) newer than this host's.
            raise NspawnError(f"host {host}: ansible_nspawn_userns (a user namespace, container root an unprivileged "
                              f"host uid) needs ansible_nspawn_image; the directory tree {root} cannot be mapped. Boot "
                              "it unmapped, as host root, only if its services are trusted: ansible_nspawn_userns: "
                              "false (verify: hpc_stateless_verify_userns: false)")
        self.host = host
        self.root = os.path.abspath(root) if root else None
        self.image = image or None
        self.boot = bool(boot)
        self.ephemeral = bool(ephemeral)
        self.hostname = hostname or hostname_for(host)
        self.network = network or (NETWORK_PRIVATE if self.boot else NETWORK_HOST)
        network_args(self.network)  # validate early
        self.extra_args = [str(a) for a in extra_args or []]
        self.boot_timeout = float(boot_timeout)
        self.stop_timeout = float(stop_timeout)
        self.runtime_dir = os.path.abspath(runtime_dir or default_runtime_dir())
        self.owner_pid = int(owner_pid or owner_process())
        self.owner_start = owner_start if owner_start is not None else process_start(self.owner_pid)
        self.nspawn = nspawn
        self.nsenter = nsenter
        self.buildah = buildah
        self.userns = bool(userns)

    def to_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @property
    def programs(self) -> Dict[str, str]:
        """The programs of this session, to hand to whatever acts on it in another process."""
        return {name: getattr(self, name) for name in self.PROGRAMS}

    @classmethod
    def from_dict(cls, data: Dict[str, Any], programs: Optional[Mapping[str, str]] = None) -> "SessionSpec":
        """The spec ``data`` (read from ``spec.json``) describes, running ``programs`` (the caller's own; the
        defaults without): what the file itself says of programs is ignored."""
        fields = {name: data.get(name) for name in cls.FIELDS if name in data}
        return cls(**fields, **{name: path for name, path in (programs or {}).items() if name in cls.PROGRAMS})

    @property
    def id(self) -> str:
        return session_id({
            "owner": [self.owner_pid, self.owner_start], "host": self.host, "root": self.root,
            "image": self.image, "boot": self.boot, "ephemeral": self.ephemeral,
            "hostname": self.hostname, "network": self.network, "extra": self.extra_args, "userns": self.userns,
        })

    @property
    def machine(self) -> str:
        return machine_name(self.host, self.id)

    @property
    def needs_supervisor(self) -> bool:
        """A plain directory used in place needs nothing that outlives a command."""
        return self.boot or bool(self.image) or self.ephemeral

    @property
    def source(self) -> str:
        return f"image {self.image}" if self.image else f"root {self.root}"
