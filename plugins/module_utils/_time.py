# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one time format of hpc.stateless: UTC to the second, ``2026-11-24T09:30:00Z`` (RFC 3339).

The manifest, ``/etc/image-release``, the SBOM, the verification record, the boot tree's version list
and the note a lock holder leaves all write times with :func:`iso_utc`; :func:`parse_iso_utc` reads
them back, and the RFC 3339 times buildah prints.
"""

from __future__ import annotations

import datetime
import re
import time

#: ``time.strftime`` format of :func:`iso_utc`.
ISO_UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?")


def iso_utc(epoch: float | None = None) -> str:
    """``epoch`` (seconds since the epoch, fractions dropped; default: now) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime(ISO_UTC_FORMAT, time.gmtime(epoch))


def parse_iso_utc(text: str) -> int:
    """Seconds since the epoch of an RFC 3339 time as buildah prints it (fractions dropped; no zone is UTC).

    Raises ValueError naming ``text`` when it is no such time.
    """
    match = _ISO.match(text.strip())
    if not match:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    zone = match.group(3) or "Z"
    zone = "+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:])
    stamp = datetime.datetime.fromisoformat(f"{match.group(1)}T{match.group(2)}{zone}")
    return int(stamp.timestamp())
