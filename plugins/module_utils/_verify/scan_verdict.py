# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verdict of an external scanner in the verify gate (Lynis, OpenSCAP): what every scanner's verdict holds.

Each scanner's module judges its own report (``lynis.judge``, ``openscap.judge``) and returns a :class:`ScanVerdict`,
or a subclass adding the scanner's own figures; :meth:`ScanVerdict.as_dict` is what the playbooks, the verify record
and the benchmarks read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class ScanVerdict:
    """``passed`` when the score reaches ``minimum`` and every finding is waived; one check per finding for the record,
    the findings no waiver covers, the waivers nothing used and a message naming what failed."""

    passed: bool
    score: float
    minimum: int
    checks: list[dict[str, Any]] = field(default_factory=list)
    unwaived: list[str] = field(default_factory=list)
    unused_waivers: list[str] = field(default_factory=list)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Every field by its name (the subclass's too), as the playbooks and the record read it."""
        return {item.name: getattr(self, item.name) for item in fields(self)}
