# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""bootconfig's validate_only tells the format each image boots, so deploy.yml publishes that one (bootlink's format)."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import render


def test_validate_only_returns_the_boot_format_of_every_image_and_writes_nothing(tmp_path):
    images = {"compute": {"formats": ["cpio.gz", "squashfs"]}, "gpu": {"formats": "squashfs"}, "login": {}}
    result = render({"boot_root": str(tmp_path / "tftp"), "images": images, "boot_url": "http://10.0.0.1/tftp",
                     "validate_only": True})
    assert result["images"] == {"compute": {"format": "cpio.gz"}, "gpu": {"format": "squashfs"},
                                "login": {"format": "cpio.zst"}}
    assert not (tmp_path / "tftp").exists()
