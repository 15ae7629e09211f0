# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how mksquashfs is called.

mksquashfs reads the mounted tree itself (it is multi-threaded and fast at it). What the
walk decided is handed over as files, not as globs, so both formats pack exactly the same
entries: ``-ef`` lists the excluded paths literally, ``-pf`` adds the overlay entries as
pseudo files. ``SOURCE_DATE_EPOCH`` in the environment fixes the creation time and clamps
newer file times (mksquashfs >= 4.4), and ``-reproducible`` is the default: same tree,
same bytes.
"""

from __future__ import annotations

import os
import shlex
import stat

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import OverlayFile

# compression -> (default level, lowest, highest, option name)
SQUASHFS_COMPRESSION: dict[str, tuple[int, int, int]] = {
    "zstd": (3, 1, 22),
    "xz": (0, 0, 0),  # mksquashfs' xz has no level; -Xdict-size and filters only
    "gzip": (6, 1, 9),
}
# mksquashfs sizes its caches from physical memory (a quarter of it by default); bound them.
DEFAULT_MEMORY = "96M"


class SquashfsError(Exception):
    """mksquashfs failed or is missing; the message carries the command and its stderr."""


def pseudo_definitions(overlay: list[OverlayFile], contents_dir: str, mtime: int) -> tuple[list[str], dict[str, bytes]]:
    """Pseudo-file lines for the overlay, and ``{file in contents_dir: bytes}`` to write first."""
    lines: list[str] = []
    contents: dict[str, bytes] = {}
    for index, item in enumerate(sorted(overlay, key=lambda o: o.rel)):
        rel = item.rel.strip("/")
        if any(c in rel for c in " \t\n\"'\\"):
            raise SquashfsError(f"overlay path {rel!r} cannot be written as a mksquashfs pseudo file")
        perm = f"{stat.S_IMODE(item.mode):o}"
        if stat.S_ISREG(item.mode):
            source = os.path.join(contents_dir, f"overlay-{index}")
            contents[source] = item.data
            lines.append(f"{rel} F {mtime} {perm} {item.uid} {item.gid} cat {shlex.quote(source)}")
        elif stat.S_ISLNK(item.mode):
            lines.append(f"{rel} S {mtime} {perm} {item.uid} {item.gid} {item.data.decode()}")
        elif stat.S_ISDIR(item.mode):
            lines.append(f"{rel} D {mtime} {perm} {item.uid} {item.gid}")
        elif stat.S_ISCHR(item.mode):
            lines.append(f"{rel} C {mtime} {perm} {item.uid} {item.gid} {os.major(item.rdev)} {os.minor(item.rdev)}")
        else:
            raise SquashfsError(f"overlay entry {rel} has a type mksquashfs pseudo files cannot express")
    return lines, contents


def exclude_lines(excluded: list[str]) -> list[str]:
    """Literal ``-ef`` lines; mksquashfs cannot express names with a line break or edge blanks."""
    for rel in excluded:
        if "\n" in rel or rel != rel.strip():
            raise SquashfsError(f"/{rel}: a name with a line break or leading/trailing blanks cannot be "
                                "excluded from a squashfs image; remove the file in a layer role instead")
    return sorted(excluded)


def mksquashfs_argv(binary: str, source: str, output: str, compression: str, level: int | None, threads: int,
                    exclude_file: str | None, pseudo_file: str | None, memory: str = DEFAULT_MEMORY) -> list[str]:
    if compression not in SQUASHFS_COMPRESSION:
        raise SquashfsError(f"unknown squashfs compression {compression!r} "
                            f"(supported: {', '.join(SQUASHFS_COMPRESSION)})")
    default, lowest, highest = SQUASHFS_COMPRESSION[compression]
    # -xattrs: keep extended attributes (file capabilities among them), whatever this mksquashfs defaults to
    argv = [binary, source, output, "-noappend", "-no-progress", "-quiet", "-xattrs", "-comp", compression, "-mem", memory]
    if compression == "xz":
        if level is not None:
            raise SquashfsError("mksquashfs' xz compressor has no level; leave the squashfs level unset for xz")
    else:
        level = default if level is None else level
        if not lowest <= level <= highest:
            raise SquashfsError(f"compression level {level} for squashfs/{compression} is out of range "
                                f"({lowest}..{highest})")
        argv += ["-Xcompression-level", str(level)]
    if threads > 0:
        argv += ["-processors", str(threads)]
    if exclude_file:
        argv += ["-ef", exclude_file]
    if pseudo_file:
        argv += ["-pf", pseudo_file]
    return argv


def run_mksquashfs(argv: list[str], source_date_epoch: int) -> None:
    """Run ``argv`` (from :func:`mksquashfs_argv`); SquashfsError with its stderr on failure."""
    try:
        _process.run(argv, env={"SOURCE_DATE_EPOCH": str(source_date_epoch)})
    except _process.ProcessError as exc:
        raise SquashfsError(str(exc)) from exc
