# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SHA256SUMS of a version directory: hashing, the one writer and the one (strict) reader.

The format is what ``sha256sum --check --strict`` accepts: ``<64 hex>  <name>`` per line, names
relative to the version directory, sorted by name. Pack writes it, deploy reads it and publishes it
unchanged (it may be signed: _contract/signature.py); both go through this module.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    SUMS_FILE,
    ArtifactError,
    check_file_name,
)

_CHUNK = 1 << 20
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(_CHUNK)
            if not block:
                return digest.hexdigest()
            digest.update(block)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sums_text(files: Mapping[str, str]) -> str:
    """SHA256SUMS content for ``{file name: hex digest}``, sorted by name."""
    for name in files:
        check_file_name(SUMS_FILE, name)
    return "".join(f"{files[name].lower()}  {name}\n" for name in sorted(files))


def parse_sums(text: str, where: str = SUMS_FILE) -> dict[str, str]:
    """``{file name: lower-case hex digest}``; ArtifactError naming ``where`` and the line for anything else.

    Blank lines are skipped; a line that is not ``<64 hex> <space or *><name>``, a name with a
    path, a name listed twice, or a file that lists nothing is refused.
    """
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if not match:
            raise ArtifactError(f"{where}:{number}: not a sha256sum line ('<64 hex digits>  <file name>'): "
                                f"{line[:80]!r}; pack the image again")
        name = check_file_name(f"{where}:{number}", match.group(2))
        if name in sums:
            raise ArtifactError(f"{where}:{number}: {name} is listed twice; pack the image again")
        sums[name] = match.group(1).lower()
    if not sums:
        raise ArtifactError(f"{where}: lists no files; pack the image again")
    return sums


def read_sums(path: str) -> dict[str, str]:
    """:func:`parse_sums` of the file at ``path``; a missing or unreadable file is an ArtifactError too."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing; the pack step writes {SUMS_FILE} next to the artifacts") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc}); pack the image again") \
            from None
    return parse_sums(text, path)
