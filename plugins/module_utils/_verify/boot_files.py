# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The files of one verify boot on the build host: throw-away test secrets and texts such as the Lynis profile.

verify.yml boots a layer image under systemd-nspawn. What a node gets at boot rather than from its image (a munge
key: ``hpc_stateless_verify_test_secrets``) is made up for that boot only - :data:`SECRET_BYTES` random bytes per
path - and files of the boot itself (this run's Lynis profile) are written beside them, in one private directory
of the build host (mode 0700, each file 0600). The boot binds each over its path inside the image (secrets
read-write as a node's would be, texts read-only); the image never holds them. :func:`remove` deletes the
directory when the boot ends, and only a directory :func:`make` could have made.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

SECRET_BYTES = 1024
#: The name every directory of boot files ends with; :func:`remove` refuses any other.
SUFFIX = ".verify-boot"


class BootFilesError(ValueError):
    """A bad path or file; the message names the option and the value at fault."""


@dataclass(frozen=True)
class BootFiles:
    path: str
    binds: list[str]


def _image_path(option: str, value: Any, seen: set[str]) -> str:
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "":
        raise BootFilesError(f"{option}: {value!r} is not an absolute path of a file inside the image")
    if ":" in value or "\n" in value or any(part in (".", "..") for part in value.split("/")):
        raise BootFilesError(f"{option}: {value!r} cannot be bound by systemd-nspawn (no ':', newline, '.' or '..' "
                             "in the path)")
    path = os.path.normpath(value)
    if path in seen:
        raise BootFilesError(f"{option}: {path} is named twice; each path inside the image gets one file")
    seen.add(path)
    return path


def _write(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


def make(secrets: Iterable[str], files: Iterable[Mapping[str, Any]], parent: str | None = None) -> BootFiles:
    """Make the directory of one boot's files; the nspawn arguments that bind them in, in the order given."""
    seen: set[str] = set()
    secret_paths = [_image_path(f"secrets[{i}]", p, seen) for i, p in enumerate(secrets)]
    texts = []
    for i, item in enumerate(files):
        if not isinstance(item, Mapping) or set(item) != {"path", "content"} or not isinstance(item["content"], str):
            raise BootFilesError(f"files[{i}]: expects a mapping of path and content (text), got {item!r}")
        texts.append((_image_path(f"files[{i}].path", item["path"], seen), item["content"].encode("utf-8")))
    directory = tempfile.mkdtemp(suffix=SUFFIX, dir=parent)
    try:
        binds = []
        for index, target in enumerate(secret_paths, 1):
            binds.append(f"--bind={_write(directory, f'secret-{index}', os.urandom(SECRET_BYTES))}:{target}")
        for index, (target, data) in enumerate(texts, 1):
            binds.append(f"--bind-ro={_write(directory, f'file-{index}', data)}:{target}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return BootFiles(directory, binds)


def remove(path: str) -> bool:
    """Remove a directory of boot files; whether it was there. Refuses a path that is no such directory."""
    return remove_private_dir(path, SUFFIX, "verify boot files")


def remove_private_dir(path: str, suffix: str, what: str) -> bool:
    """Remove a private directory of the build host whose name ends in ``suffix`` (one boot's files, one scan's);
    whether it was there. Refuses any other path, and a link or file by that name."""
    if not path.endswith(suffix) or not os.path.isabs(path):
        raise BootFilesError(f"path: {path!r} is not a directory of {what} (an absolute path ending in "
                             f"{suffix}); nothing removed")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise BootFilesError(f"path: {path} is not a directory (a link or a file); nothing removed")
    shutil.rmtree(path)
    return True
