# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.pack_options: one image's options of M(hpc.stateless.pack), its keys over the site's settings.

The rules of docs/pack.md in one place: an image's ``formats``, ``kernel_args``, ``levels`` and
``squashfs_compression`` are taken as they are; its ``exclude``, ``secret_patterns`` and ``allowed_secrets``
add to the site-wide lists; its ``size_ceiling`` wins over the site-wide one; a relative ``modaliases_file``
of its ``hardware_profile`` is a file of the project directory. Documentation: pack_options.yml.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

#: Image keys passed to pack as they are; left out when the image does not set them (pack's default).
OWN_KEYS = ("formats", "kernel_args", "levels", "squashfs_compression")
#: Image keys whose entries add to the site-wide setting of the same name.
ADDED_KEYS = ("exclude", "secret_patterns", "allowed_secrets")
#: Image keys that win over the site-wide setting of the same name.
OVERRIDING_KEYS = ("size_ceiling",)


def _mapping(what: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"pack_options: {what} must be a mapping, got {type(value).__name__}")
    return value


def _strings(what: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise AnsibleFilterError(f"pack_options: {what} must be a list, got {type(value).__name__}")
    return list(value)


def pack_options(image: Any, settings: Any, project_dir: str) -> dict[str, Any] | Undefined:
    """The pack options of ``image`` (its entry of the plan's validated images) under the site-wide ``settings``.

    ``settings`` holds ``exclude``, ``secret_patterns``, ``allowed_secrets`` and ``size_ceiling``; a key neither
    sets is left out, so the module's default applies.
    """
    for value in (image, settings):
        if isinstance(value, Undefined):
            return value  # as Jinja's own filters do: the error names the undefined variable
    image = _mapping("the image", image)
    settings = _mapping("the settings", settings)
    options: dict[str, Any] = {key: image[key] for key in OWN_KEYS if image.get(key) is not None}
    for key in ADDED_KEYS:
        options[key] = _strings(f"settings.{key}", settings.get(key)) + _strings(f"the image's {key}", image.get(key))
    for key in OVERRIDING_KEYS:
        value = image.get(key) if image.get(key) is not None else settings.get(key)
        if value is not None:
            options[key] = value
    profile = image.get("hardware_profile")
    if profile:
        profile = dict(_mapping("the image's hardware_profile", profile))
        if profile.get("modaliases_file"):
            # os.path.join keeps an absolute path as it is.
            profile["modaliases_file"] = os.path.join(project_dir, str(profile["modaliases_file"]))
        options["hardware_profile"] = profile
    return options


class FilterModule:
    """The pack options filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"pack_options": pack_options}
