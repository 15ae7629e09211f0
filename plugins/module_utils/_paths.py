# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Path helpers shared by the stages that create output trees (pack's output, deploy's boot root),
and the one way a file is replaced so that a reader sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

# What a temporary name next to a file carries between the file's name and a random suffix:
# ``.<name>.new-<8 hex>``; the stages that clean up after a killed run look for it.
TEMP_INFIX = ".new-"


def nearest_existing(path: str) -> str:
    """``path`` itself when it exists, else its closest existing ancestor (what a mkdir -p would write into).

    The stages check that ancestor for being a directory and writable before they create anything,
    so a bad output path is refused with its name instead of failing half-way.
    """
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def fsync_dir(path: str) -> None:
    """Make a rename or unlink inside directory ``path`` durable (the directory's own entry list is synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: str) -> str:
    """A fresh hidden name next to ``path``: ``.<name>.new-<8 hex>`` (same file system: a rename is atomic)."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}{TEMP_INFIX}{uuid.uuid4().hex[:8]}")


@contextlib.contextmanager
def replacing(path: str, sync: bool = True) -> Iterator[str]:
    """Yield a temporary name next to ``path`` for the caller to create; when the block ends without an
    error it is renamed over ``path`` (and, with ``sync``, the directory entry synced); on any error it
    is removed and ``path`` is untouched."""
    temp = temp_name(os.path.abspath(path))
    try:
        yield temp
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if sync:
        fsync_dir(os.path.dirname(temp))


def write_atomic(path: str, data: str | bytes, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) under its final name only once complete.

    The file is written next to ``path``, given ``mode`` (whatever the umask), with ``sync`` flushed to
    disk before the rename and the directory synced after it. ``sync=False`` is for files re-rendered
    in bulk whose loss in a crash the next run repairs.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(path, sync) as temp:
        with open(temp, "xb") as handle:
            handle.write(payload)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, mode)
