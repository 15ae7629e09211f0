# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Path helpers shared by the stages that create output trees (pack's output, deploy's boot root)."""

from __future__ import annotations

import os


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
