# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters hpc.stateless.image_release and hpc.stateless.image_release_keys: /etc/image-release for playbooks.

The format, its writer and its reader are plugins/module_utils/_contract/release.py; these filters only
hand them to Jinja, so a playbook reads the file by the same rule as pack writes it and image_diff
reads it. Their documentation is in image_release.yml and image_release_keys.yml next to this file.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import RELEASE_KEYS, parse_image_release


def image_release(text: Any) -> dict[str, str]:
    """The ``KEY: value`` pairs of an ``/etc/image-release`` text (for example a slurped file, b64-decoded)."""
    if text is None:
        return {}
    if not isinstance(text, (str, bytes)):
        raise AnsibleFilterError(f"image_release: expects the text of an /etc/image-release, got {type(text).__name__}")
    return parse_image_release(to_text(text, errors="surrogate_or_replace"))


def image_release_keys(_input: Any = None) -> list[str]:
    """The keys every ``/etc/image-release`` holds, in the order pack writes them; the input is ignored."""
    return list(RELEASE_KEYS)


class FilterModule:
    """The /etc/image-release filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"image_release": image_release, "image_release_keys": image_release_keys}
