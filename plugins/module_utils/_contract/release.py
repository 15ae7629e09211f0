# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``/etc/image-release``: the one statement of its format, its writer and its reader (pure functions).

pack writes the file into every packed copy (:func:`image_release`); image_diff, verify and the rolling
update read it back (:func:`parse_image_release`, for playbooks the ``hpc.stateless.image_release``
filter). The format is the one of ``os-release(5)``, so a shell may also source it (the rolling
update does, on a node that did not come back)::

    IMAGE=compute
    VERSION=v1.2-3-gabc
    LAYER=slurm
    LAYER_KEY=<64 hex digits>
    BUILD_TIME=2023-11-14T22:13:20Z
    SITE='Lab 2'            # a release_extra line, quoted because of its space

* one ``KEY=value`` assignment a line, :data:`RELEASE_KEYS` first in that order, then the extra keys
  sorted (upper-case, :data:`EXTRA_KEY_PATTERN`);
* a value that a shell would take literally is written bare (every image, version and layer name, key
  and time is), any other value in single quotes (``'`` written as ``'\\''``), so sourcing the file
  assigns exactly the value;
* the reader ignores blank lines, ``#`` comments and lines that are no assignment, undoes the shell
  quoting the writer adds, and takes a bare value as written (files of older packs wrote
  ``SITE=Lab 2``); a key given twice keeps its last value, as in a shell.
"""

from __future__ import annotations

import re
import shlex

from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc

#: The keys every ``/etc/image-release`` holds, in the order pack writes them.
RELEASE_KEYS: tuple[str, ...] = ("IMAGE", "VERSION", "LAYER", "LAYER_KEY", "BUILD_TIME")
#: What an extra key (pack's ``release_extra``) must look like.
EXTRA_KEY_PATTERN = re.compile(r"[A-Z][A-Z0-9_]*")
# A line the reader takes as an assignment: a shell variable name, "=", the value.
_ASSIGNMENT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)")
# Characters a shell takes literally in the value of an assignment (a "~" only where it starts no
# tilde expansion: not first, not after ":").
_BARE_VALUE = re.compile(r"[A-Za-z0-9_.,:+/@%=~-]+")
# Characters that make a value quoted shell text for the reader.
_QUOTING = frozenset("'\"\\")


def shell_value(value: str) -> str:
    """``value`` as the right-hand side of a shell assignment that assigns exactly ``value``."""
    if not value or (_BARE_VALUE.fullmatch(value) and not value.startswith("~") and ":~" not in value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def image_release(image: str, version: str, layer: str, layer_key: str, build_time: int,
                  extra: dict[str, str] | None = None) -> bytes:
    """Content of ``/etc/image-release`` in the packed copy.

    ``build_time`` is seconds since the epoch (written as an ISO 8601 UTC time); ``extra`` adds
    ``KEY=value`` lines (pack's ``release_extra``): ValueError naming ``release_extra`` for a key that is
    not upper-case or is one of :data:`RELEASE_KEYS`, or a value of more than one line.
    """
    values = dict(zip(RELEASE_KEYS, (image, version, layer, layer_key, iso_utc(build_time))))
    for key in sorted(extra or {}):
        if not EXTRA_KEY_PATTERN.fullmatch(key) or key in values:
            raise ValueError(f"release_extra key {key!r}: use an upper-case KEY that is not one of "
                             f"{', '.join(RELEASE_KEYS)}")
        value = str((extra or {})[key])
        if "\n" in value or "\r" in value:
            raise ValueError(f"release_extra {key}: the value must be one line")
        values[key] = value
    return "".join(f"{key}={shell_value(value)}\n" for key, value in values.items()).encode("utf-8")


def _unquote(value: str) -> str:
    """A value as the shell assigns it when it is one quoted shell word; the text as written otherwise."""
    value = value.strip()
    if not _QUOTING.intersection(value):
        return value
    try:
        words = shlex.split(value, posix=True)
    except ValueError:  # an unbalanced quote: not shell text
        return value
    return words[0] if len(words) == 1 else value


def parse_image_release(text: str | bytes) -> dict[str, str]:
    """The ``KEY: value`` pairs of an ``/etc/image-release`` (bytes are read as UTF-8, bad bytes replaced).

    The reverse of :func:`image_release`: blank lines, ``#`` comments and lines without a ``NAME=``
    assignment are ignored, the writer's quoting is undone, a bare value is taken as written.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    release: dict[str, str] = {}
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)  # a "#" comment is no assignment
        if match:
            release[match.group(1)] = _unquote(match.group(2))
    return release
