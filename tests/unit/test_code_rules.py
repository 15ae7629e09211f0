# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Two rules of the code a reviewer would otherwise check by hand.

- History lives in the changelog: no comment or text of plugins/, roles/ or playbooks/ names an issue or a
  session (``issue 27``, ``session 3``).
- Each default lives in one place: a ``hpc_stateless_*`` variable has its default in roles/hpc_stateless, which
  every play imports (its defaults apply to the play's ``hosts:`` and ``serial:`` too), so no playbook restates
  one inline (``| default(``); the playbooks keep at most :data:`MAX_INLINE_DEFAULTS` inline defaults in all
  (for registered results and facts that may be missing).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\b(issue|session) [0-9]+", re.I)
INLINE_DEFAULT = re.compile(r"\|\s*default\(")
#: The playbooks' inline defaults, at most: the count may only go down. Each one left is for a registered
#: result or fact that may be missing (a skipped task, a result without rc) or an include's optional input.
MAX_INLINE_DEFAULTS = 40


def _name(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _files(*tops: str) -> list[Path]:
    return [path for top in tops for path in sorted((REPO / top).rglob("*")) if path.is_file()
            and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".svg", ".png")]


def history_lines(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{_name(path)}:{number}: {line.strip()}")
    return found


def test_no_history_in_the_code():
    assert history_lines(_files("plugins", "roles", "playbooks")) == [], \
        "name what the code does and why; the changelog fragment holds the history"


def test_history_is_found(tmp_path):
    probe = tmp_path / "x.py"
    probe.write_text("# faster since issue 29\n")
    assert len(history_lines([probe])) == 1


def _role_defaults() -> set[str]:
    return set(yaml.safe_load((REPO / "roles/hpc_stateless/defaults/main.yml").read_text()) or {})


def inline_defaults(paths: list[Path], defaults: set[str]) -> tuple[int, list[str]]:
    """How many inline defaults the files hold, and those that restate a default of roles/hpc_stateless."""
    count, restated = 0, []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            uses = INLINE_DEFAULT.findall(line)
            count += len(uses)
            if not uses:
                continue
            for name in re.findall(r"\b(hpc_stateless_[a-z0-9_]+)\s*\|\s*default\(", line):
                if name in defaults:
                    restated.append(f"{_name(path)}:{number}: {name}")
    return count, restated


def test_each_default_lives_in_one_place():
    count, restated = inline_defaults(_files("playbooks"), _role_defaults())
    assert restated == [], "defaults of roles/hpc_stateless restated inline (the role is imported first)"
    assert count <= MAX_INLINE_DEFAULTS, f"{count} inline | default( in playbooks/ (at most {MAX_INLINE_DEFAULTS})"


def test_a_restated_default_is_found(tmp_path):
    probe = tmp_path / "p.yml"
    probe.write_text("- hosts: \"{{ hpc_stateless_boot_host | default('localhost') }}\"\n  tasks:\n"
                     "    - debug: {msg: \"{{ hpc_stateless_boot_host | default('localhost') }}\"}\n")
    count, restated = inline_defaults([probe], {"hpc_stateless_boot_host"})
    assert count == 2 and [entry.rsplit(":", 2)[1] for entry in restated] == ["1", "3"]
