# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A layer built in a user namespace (container root = an unprivileged host uid): the ids its files carry on disk.

buildah as root with ``--userns-uid-map``/``--userns-gid-map`` runs the roles as the host ids of a subordinate
range (``/etc/subuid`` line of root): a role's second ``chroot`` or write through ``/proc/1/root`` is that
unprivileged uid's. The parent layers are mounted idmapped, so only the container's own changes - the overlay's
upper directory - hold host ids of the range on disk; ``buildah commit`` (1.28) writes those ids into the layer
as they are. :func:`shift_back` maps them back to the container's ids before the commit:

* owner and group in the range -> id minus the range's start (``lchown``; never a link followed);
* the setuid/setgid bits ``chown`` clears are set again;
* ``security.capability`` (a v3 capability written in the namespace names the namespace's root as its root id)
  -> v2, which holds for root of any namespace the image later runs in;
* POSIX ACL entries naming a user or group of the range -> the container's id.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils import _fs
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless

#: The user whose subordinate ranges a root build maps container root to.
ROOT_USER = "root"
CAPABILITY_XATTR = "security.capability"
ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
# linux/capability.h: VFS_CAP_REVISION_MASK, _2, _3, VFS_CAP_FLAGS_EFFECTIVE.
_CAP_REVISION_MASK = 0xFF000000
_CAP_REVISION_2 = 0x02000000
_CAP_REVISION_3 = 0x03000000
_CAP_EFFECTIVE = 0x000001
# linux/posix_acl_xattr.h: a 4-byte version header, then entries (tag u16, perm u16, id u32); tags naming an id.
_ACL_HEADER = struct.Struct("<I")
_ACL_ENTRY = struct.Struct("<HHI")
_ACL_USER = 0x02
_ACL_GROUP = 0x08


class IdShiftError(Exception):
    """The upper directory cannot be shifted back; the message names the file."""


@dataclass(frozen=True)
class IdRange:
    """Container id 0 is host id ``start``; ``count`` ids are mapped."""
    start: int
    count: int

    def back(self, host_id: int) -> int:
        """The container's id of ``host_id`` (ids outside the range are the build's own and stay)."""
        return host_id - self.start if self.start <= host_id < self.start + self.count else host_id


def ranges_of(id_mapping: dict[str, Any] | None) -> tuple[IdRange, IdRange] | None:
    """``(uid range, gid range)`` of buildah's ``IDMappingOptions`` of a container mapped from id 0 in one piece;
    None for a container with the host's ids."""
    if not id_mapping or id_mapping.get("HostUIDMapping", True):
        return None
    found = []
    for key in ("UIDMap", "GIDMap"):
        maps: Sequence[dict[str, int]] = id_mapping.get(key) or []
        if len(maps) != 1 or maps[0].get("containerID") != 0:
            raise IdShiftError(f"the working container's {key} is {maps}: only one range from id 0 is supported")
        found.append(IdRange(int(maps[0]["hostID"]), int(maps[0]["size"])))
    return found[0], found[1]


def root_ranges(files: dict[str, str] | None = None, need: int = rootless.NEEDED_IDS) -> tuple[IdRange, IdRange]:
    """The first range of ``need`` ids of root in ``/etc/subuid`` and ``/etc/subgid``: what a root build maps
    container ids 0.. to. Raises :class:`IdShiftError` naming the line to add when one is missing."""
    found = []
    problems = []
    for kind, path in (files or rootless.SUBID_FILES).items():
        ranges = [r for r in rootless.subordinate_ranges(path, ROOT_USER, 0) if r[1] >= need]
        if ranges:
            found.append(IdRange(*ranges[0]))
        else:
            problems.append(f"add the line '{rootless.suggested_line(path, ROOT_USER, need)}' to {path}")
    if problems:
        raise IdShiftError("a build in a user namespace (hpc_stateless_build_userns: true) maps container root to "
                           f"root's subordinate ids, and root has no range of {need}: " + "; ".join(problems)
                           + " (scripts/setup.sh does)")
    return found[0], found[1]


def map_args(uids: IdRange, gids: IdRange) -> tuple[str, str]:
    """buildah's ``--userns-uid-map``/``--userns-gid-map`` values for the ranges."""
    return f"0:{uids.start}:{uids.count}", f"0:{gids.start}:{gids.count}"


def capability_v2(value: bytes) -> bytes:
    """A v3 ``security.capability`` as v2 (the same sets, no root id); any other revision unchanged."""
    if len(value) < 4:
        return value
    magic = struct.unpack_from("<I", value)[0]
    if magic & _CAP_REVISION_MASK != _CAP_REVISION_3 or len(value) < 20:
        return value
    return struct.pack("<I", _CAP_REVISION_2 | (magic & _CAP_EFFECTIVE)) + value[4:20]


def acl_shifted(value: bytes, uids: IdRange, gids: IdRange) -> bytes:
    """A POSIX ACL xattr with the user and group entries of the ranges mapped back."""
    if len(value) < _ACL_HEADER.size or (len(value) - _ACL_HEADER.size) % _ACL_ENTRY.size:
        return value
    out = bytearray(value[:_ACL_HEADER.size])
    for offset in range(_ACL_HEADER.size, len(value), _ACL_ENTRY.size):
        tag, perm, ident = _ACL_ENTRY.unpack_from(value, offset)
        if tag == _ACL_USER:
            ident = uids.back(ident)
        elif tag == _ACL_GROUP:
            ident = gids.back(ident)
        out += _ACL_ENTRY.pack(tag, perm, ident)
    return bytes(out)


def _xattr(path: str, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EPERM):
            return None
        raise


def _shift_one(path: str, uids: IdRange, gids: IdRange) -> bool:
    info = os.lstat(path)
    uid, gid = uids.back(info.st_uid), gids.back(info.st_gid)
    link = stat.S_ISLNK(info.st_mode)
    capability = None if link else _xattr(path, CAPABILITY_XATTR)
    acls = {} if link else {name: _xattr(path, name) for name in ACL_XATTRS}
    changed = False
    if (uid, gid) != (info.st_uid, info.st_gid):
        os.chown(path, uid, gid, follow_symlinks=False)
        if not link and stat.S_IMODE(info.st_mode) & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(info.st_mode))
        changed = True
    if capability is not None:
        # chown removed it: written back, as v2.
        os.setxattr(path, CAPABILITY_XATTR, capability_v2(capability), follow_symlinks=False)
        changed = changed or capability_v2(capability) != capability
    for name, value in acls.items():
        if value is not None:
            shifted = acl_shifted(value, uids, gids)
            if shifted != value:
                os.setxattr(path, name, shifted, follow_symlinks=False)
                changed = True
    return changed


def shift_back(upper: str, uids: IdRange, gids: IdRange) -> int:
    """Map every id of the ranges under ``upper`` (the layer's own changes) back to the container's; the number of
    files changed. No link is followed: ``os.walk`` lists a link to a directory but does not enter it."""
    changed = 0
    for top, dirs, files in os.walk(upper, onerror=_raise):
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                changed += _shift_one(path, uids, gids)
            except OSError as exc:
                raise IdShiftError(f"cannot map the ids of {path} back to the container's: {exc}") from exc
    try:
        changed += _shift_one(upper, uids, gids)
    except OSError as exc:
        raise IdShiftError(f"cannot map the ids of {upper} back to the container's: {exc}") from exc
    return changed


def _raise(exc: OSError) -> None:
    raise IdShiftError(f"cannot read the layer's changes: {exc}") from exc


def upper_dir(mountpoint: str, mounts_file: str = _fs.MOUNTS_FILE) -> str:
    """The overlay upper directory of the container mounted at ``mountpoint`` (its own changes)."""
    upper = _fs.mount_option(mountpoint, "overlay", "upperdir", mounts_file)
    if upper:
        return upper
    raise IdShiftError(f"no overlay mount with an upper directory at {mountpoint}: a layer built in a user "
                       "namespace needs containers-storage's overlay driver")
