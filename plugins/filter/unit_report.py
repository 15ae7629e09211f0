# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.unit_report: verify's judgement of the units the roles enabled, from their systemd states.

playbooks/verify.yml reads every unit at once with one ``systemctl show --property=...`` (:data:`PROPERTIES`)
inside the booted image (a module run per unit cost ~0.3 s each, 3.8 s for the slurm image's twelve) and asks this
filter which of them are fine: active; a oneshot that ran and succeeded; kept from starting by one of its own
``Condition*=`` (a container is not the node); or allowed to stay inactive. And whether each has settled: not
starting, stopping or reloading, and in its state for the settle seconds (a service that fails some seconds after
its start has done so); verify.yml reads the units again until they have, within a bound. Documentation: unit_report.yml.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


#: Active states of a unit on its way somewhere else (a restart pending is ``activating (auto-restart)``).
CHANGING_STATES = ("activating", "deactivating", "reloading", "refreshing")


def judge_unit(unit: str, status: Mapping[str, Any], allowed_inactive: Iterable[str] = (),
               settle_seconds: float = 0, now: Optional[float] = None) -> dict[str, Any]:
    """One row of the report: ``unit``, ``state`` (for people), ``skipped`` (by a condition), ``ok``, and
    ``settled``: not changing state (:data:`CHANGING_STATES`) and in its state for ``settle_seconds`` at ``now``
    (``CLOCK_MONOTONIC`` seconds, the clock of systemd's ``*TimestampMonotonic``; a booted container shares the host's)."""
    active = status.get("ActiveState") or "?"
    ran_once = (status.get("Type") == "oneshot" and status.get("Result") == "success"
                and _int(status.get("ExecMainStartTimestampMonotonic")) > 0)
    skipped = active == "inactive" and status.get("ConditionResult", "yes") == "no"
    ok = active == "active" or (active == "inactive" and ran_once) or skipped or unit in set(allowed_inactive)
    changed = _int(status.get("StateChangeTimestampMonotonic")) / 1e6  # 0: never changed since the boot
    age = (time.monotonic() if now is None else now) - changed
    settled = active not in CHANGING_STATES and (not changed or age >= settle_seconds)
    state = f"{active} ({status.get('SubState') or '?'}, result {status.get('Result') or '-'})"
    since = f"{max(age, 0):.1f} s" if changed else "the boot"
    return {"unit": unit, "state": state, "skipped": skipped, "ok": ok, "settled": settled, "since": since}


#: The unit properties the judgement reads: verify.yml asks ``systemctl show`` for these (``--property=``).
PROPERTIES = ("Id", "Type", "ActiveState", "SubState", "Result", "ConditionResult", "ExecMainStartTimestampMonotonic",
              "StateChangeTimestampMonotonic")


def parse_show(text: str, units: list[str]) -> list[dict[str, str]]:
    """The ``{property: value}`` of each of ``units`` from the output of ``systemctl show --property=... -- units``:
    one block per unit, in the order asked, blocks separated by an empty line."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise AnsibleFilterError(f"unit_report: not a property line of systemctl show: {line!r:.200}")
        current[name] = value
    if current:
        blocks.append(current)
    if len(blocks) != len(units):
        raise AnsibleFilterError(f"unit_report: systemctl show answered {len(blocks)} units for the {len(units)} asked "
                                 f"({', '.join(units)})")
    return blocks


def unit_show_command(units: Any) -> list[str] | Undefined:
    """The argv of the one ``systemctl show`` that reads :data:`PROPERTIES` of ``units``."""
    if isinstance(units, Undefined):
        return units
    if not isinstance(units, list) or not units or not all(isinstance(unit, str) and unit for unit in units):
        # With no unit systemctl show would print the manager's own properties.
        raise AnsibleFilterError(f"unit_show_command: expects a non-empty list of unit names, got {units!r:.200}")
    return ["systemctl", "show", "--no-pager", "--property=" + ",".join(PROPERTIES), "--", *units]


def unit_report(show: Any, units: Any = None, allowed_inactive: Any = None, settle_seconds: Any = 0,
                now: Any = None) -> list[dict[str, Any]] | Undefined:
    """The rows of ``units`` (in their order) from ``show``, the standard output of ``systemctl show`` over them;
    ``settle_seconds`` and ``now`` (default: this host's monotonic clock) decide ``settled``."""
    for value in (show, units):
        if isinstance(value, Undefined):
            return value  # as Jinja's own filters do: the error names the undefined variable
    if not isinstance(show, str):
        raise AnsibleFilterError(f"unit_report: expects the standard output of systemctl show, got {type(show).__name__}")
    if not isinstance(units, list) or not all(isinstance(unit, str) for unit in units):
        raise AnsibleFilterError("unit_report: expects the list of unit names systemctl show was asked for, "
                                 f"got {type(units).__name__}")
    try:
        settle = float(settle_seconds)
        clock = None if now is None else float(now)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"unit_report: settle_seconds expects seconds (hpc_stateless_verify_settle_seconds), "
                                 f"got {settle_seconds!r}") from None
    allowed = list(allowed_inactive or [])
    return [judge_unit(unit, status, allowed, settle, clock) for unit, status in zip(units, parse_show(show, units))]


class FilterModule:
    """The unit report filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"unit_report": unit_report, "unit_show_command": unit_show_command}
