# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The buildah working container of an image session: its name, creation and removal."""

from __future__ import annotations

import os
import time
from typing import Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils._process import ToolMissing
from ansible_collections.hpc.stateless.plugins.module_utils._contract import labels as _labels
from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import NspawnError
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec

#: The purpose part of the names of verify's working containers (the naming scheme of _contract/labels.py).
PURPOSE = "nspawn"


def container_stem(runtime_dir: str) -> str:
    """Start of the names of the buildah working containers of sessions under ``runtime_dir``.

    Sessions of different runtime directories (tests, benchmarks, users) never see, or
    clean up, each other's containers.
    """
    return _labels.container_stem(os.path.abspath(runtime_dir), PURPOSE)


def container_name(spec: SessionSpec) -> str:
    """Name of the working container of an image session (the same for a rerun of a killed one).

    The instance part is the whole session id, so the container is found by the id that also
    names the session's directory and cgroup.
    """
    return container_stem(spec.runtime_dir) + spec.id


def userns_range() -> Tuple[int, int]:
    """``(start, count)``: the host ids a session in a user namespace maps its ids 0.. to - root's subordinate
    range, the one a root build maps its containers to (``_build/idshift.py``). systemd-nspawn maps uids and gids
    with one range, so root's uid and gid ranges must start at the same id."""
    try:
        uids, gids = idshift.root_ranges()
    except idshift.IdShiftError as exc:
        raise NspawnError(f"{exc}; or boot unmapped with ansible_nspawn_userns: false "
                          "(hpc_stateless_verify_userns: false), as host root") from exc
    if (uids.start, uids.count) != (gids.start, gids.count):
        raise NspawnError(f"root's subordinate uids ({uids.start}, {uids.count} ids) and gids ({gids.start}, "
                          f"{gids.count} ids) differ: systemd-nspawn maps both with one range; give root the same "
                          "range in /etc/subuid and /etc/subgid, or set ansible_nspawn_userns: false")
    return uids.start, uids.count


def mount_image(spec: SessionSpec, name: str, private_users: Optional[Tuple[int, int]] = None) -> str:
    """Start working container ``name`` from the session's image and mount it; returns the mount point.

    ``private_users`` ``(start, count)``: the working container maps ids 0.. to host ids from ``start`` (its
    image's layers mounted idmapped by containers-storage), so the mounted tree shows the owners a container
    with that user namespace expects; its ``/`` (the container's own upper directory, host root's) is given to
    the mapped root. A leftover container of a killed session with the same id is removed first.
    """
    client = Buildah(executable=spec.buildah)
    ids = idshift.IdRange(*private_users) if private_users is not None else None
    try:
        client.rm(name)  # a leftover of a killed session with this id
        client.from_image(spec.image, name, userns=idshift.map_args(ids, ids) if ids else None)
        mountpoint = client.mount(name)
        if private_users is not None:
            os.chown(mountpoint, private_users[0], private_users[0], follow_symlinks=False)
        return mountpoint
    except ToolMissing as exc:
        raise NspawnError(str(exc)) from exc
    except BuildahError as exc:
        if exc.gone:
            raise NspawnError(f"image {spec.image} is not in local containers-storage: build it "
                              f"first (ansible-playbook site.yml) or fix ansible_nspawn_image") from exc
        raise NspawnError(f"cannot start a working container from image {spec.image}: {exc}") from exc


def remove_container(spec: SessionSpec, name: str, attempts: int = 5) -> Optional[str]:
    """Remove a buildah working container (``buildah rm`` unmounts it first); returns the problem, if any.

    Works by name, without listing containers: listing fails now and then while other
    builds remove containers at the same time ("reading build containers: container not known").
    """
    client = Buildah(executable=spec.buildah)
    error = ""
    for attempt in range(attempts):
        try:
            client.run("rm", name)
            return None
        except ToolMissing as exc:
            return f"buildah working container {name}: {exc}"
        except BuildahError as exc:
            if exc.gone:
                return None
            error = exc.stderr
        time.sleep(0.5 * (attempt + 1))
    return f"buildah working container {name} could not be removed: {error}"
