# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The seal's work on a layer's tree: what no image may carry, removed in one pass (module hpc.stateless.seal).

Package scripts re-create per-node identity whenever a layer installs or upgrades their package: systemd's
postinst writes ``/etc/machine-id``, dbus's ``/var/lib/dbus/machine-id``, openssh-server's the SSH host keys
``/etc/ssh/ssh_host_*``; and pam_tmpdir leaves ``/tmp/user`` behind each session a package script opened.
:func:`remove_ansible_tmp` removes what the build itself leaves, Ansible's remote temporary directory (``remote_tmp``,
``/root/.ansible/tmp``), empty or with a killed task's payload, which no node needs; the layer's commit runs it.
:func:`seal` leaves an empty ``/etc/machine-id`` (root:root 0444: systemd makes the node's own at boot) and
removes the rest, in one module run (as five tasks they cost about 1 s of every layer's build).

``root`` is the tree: ``/`` inside the working container, where the module runs, or a directory (the unit
tests). Every path is resolved the way the image sees it, inside ``root`` (module_utils/_imagepath.py), and
only the last component is removed or created, through a descriptor of its directory: a link in the tree is
removed as a link, never followed out of it.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
from dataclasses import dataclass, field

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath

MACHINE_ID = "/etc/machine-id"
MACHINE_ID_MODE = 0o444
DBUS_MACHINE_ID = "/var/lib/dbus/machine-id"
SSH_DIR = "/etc/ssh"
SSH_HOST_KEYS = "ssh_host_*"
SESSION_TMPDIRS = "/tmp/user"
#: The directory of Ansible's per-user files (``~/.ansible``) that holds ``remote_tmp`` by default.
ANSIBLE_DIR_NAME = ".ansible"
#: Ansible's remote temporary directory in a layer: ansible-core's default remote_tmp for the build's user, root.
BUILD_ANSIBLE_TMP = "/root/.ansible/tmp"


class SealTreeError(Exception):
    """The tree holds something the seal cannot make right; the message names the path."""


@dataclass
class SealResult:
    """What :func:`seal` changed (or would change in check mode): image paths."""

    removed: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.emptied)


def _split(root: str, path: str) -> tuple[str | None, str]:
    """The host path of ``path``'s directory resolved inside ``root`` (None when it does not exist), and its name."""
    directory, name = os.path.split(path.rstrip("/"))
    return _imagepath.resolve(root, directory or "/"), name


def _lstat_in(directory: str, name: str) -> os.stat_result | None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(fd)


def _remove_in(directory: str, name: str, st: os.stat_result) -> None:
    """Remove ``name`` of ``directory``: a directory with what it holds (no link followed), anything else itself."""
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(os.path.join(directory, name))  # rmtree walks by descriptors and never follows a link
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _remove(root: str, path: str, result: SealResult, check_mode: bool) -> None:
    directory, name = _split(root, path)
    if directory is None:
        return
    st = _lstat_in(directory, name)
    if st is None:
        return
    result.removed.append(path)
    if not check_mode:
        _remove_in(directory, name, st)


def _empty_machine_id(root: str, result: SealResult, check_mode: bool) -> None:
    directory, name = _split(root, MACHINE_ID)
    if directory is None:
        raise SealTreeError(f"{os.path.dirname(MACHINE_ID)} does not exist in the tree {root}: no root file system "
                            "to seal (is the layer's working container mounted?)")
    st = _lstat_in(directory, name)
    if (st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == 0 and st.st_gid == 0
            and stat.S_IMODE(st.st_mode) == MACHINE_ID_MODE):
        return
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise SealTreeError(f"{MACHINE_ID} is a directory in the tree {root}; a role or package made it one. "
                            "Remove it in that role: systemd needs an empty file there to give each node its ID")
    result.emptied.append(MACHINE_ID)
    if check_mode:
        return
    if st is not None:
        _remove_in(directory, name, st)  # a link is replaced, never written through
    fd = _imagepath.create_file(directory, name, MACHINE_ID_MODE)  # the mode set exactly, whatever the umask
    try:
        os.fchown(fd, 0, 0)
    finally:
        os.close(fd)


def ssh_host_keys(root: str) -> list[str]:
    """Image paths of the SSH host keys (and anything else named ``ssh_host_*``) in ``/etc/ssh``, sorted."""
    try:
        names = _imagepath.list_dir(root, SSH_DIR)
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return [f"{SSH_DIR}/{name}" for name in sorted(names) if fnmatch.fnmatchcase(name, SSH_HOST_KEYS)]


def remove_ansible_tmp(root: str, path: str = BUILD_ANSIBLE_TMP, check_mode: bool = False) -> list[str]:
    """Remove Ansible's remote temporary directory ``path`` (an image path) from the tree ``root`` when it is a
    directory of a ``.ansible`` directory (the default ``~/.ansible/tmp``). The ``.ansible`` directory itself stays,
    empty: it is a run-time place of the live nodes' drift check (_verify/drift.py RUNTIME_PATHS), and the first
    Ansible run on a node booted without it (a rolling update, a site's own play) would make it and so change
    ``/root``, which that check watches: drift on every node. A ``remote_tmp`` set elsewhere (``/tmp``,
    ``/var/tmp``) is the image's own directory: left alone. The image paths removed (or that would be, in check
    mode).

    The layer's commit runs it on the working container's tree (_build/layer.py), as it removes apt's build-time
    files: the build's connection made the directory, and re-makes it at each task, so a task of the roles (the
    seal) could not remove it and stay idempotent under Molecule."""
    if not os.path.isabs(path):
        raise SealTreeError(f"Ansible's remote temporary directory {path!r} is not an absolute path in the image")
    path = os.path.normpath(path)
    result = SealResult()
    if os.path.basename(os.path.dirname(path)) != ANSIBLE_DIR_NAME:
        return []
    _remove(root, path, result, check_mode)
    return result.removed


def seal(root: str = "/", machine_id: bool = True, host_keys: bool = True, session_tmpdirs: bool = True,
         check_mode: bool = False) -> SealResult:
    """Seal the tree at ``root``: each part only when its flag is set; see the module doc."""
    if not os.path.isdir(root):
        raise SealTreeError(f"the tree to seal, {root}, is not a directory")
    result = SealResult()
    if machine_id:
        _empty_machine_id(root, result, check_mode)
        _remove(root, DBUS_MACHINE_ID, result, check_mode)
    if host_keys:
        for path in ssh_host_keys(root):
            _remove(root, path, result, check_mode)
    if session_tmpdirs:
        _remove(root, SESSION_TMPDIRS, result, check_mode)
    return result
