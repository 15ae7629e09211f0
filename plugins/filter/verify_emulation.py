# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters hpc.stateless.verify_emulation and verify_emulation_files: a verify boot under qemu-user emulation.

The rules live in module_utils/_verify/emulation.py. Documentation: verify_emulation.yml, verify_emulation_files.yml.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.hpc.stateless.plugins.module_utils._verify import emulation


def verify_emulation(arch: Any) -> dict[str, str]:
    """The record settings an image of ``arch`` adds when it boots emulated on this build host; {} when native."""
    return emulation.settings(arch)


def verify_emulation_files(arch: Any) -> list[dict[str, str]]:
    """The boot files (verify_boot_files ``files``) of an emulated boot; [] when native."""
    return emulation.boot_files(arch)


class FilterModule:
    """The emulation filters of verify."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"verify_emulation": verify_emulation, "verify_emulation_files": verify_emulation_files}
