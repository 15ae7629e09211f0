# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.unit_report: verify's judgement of the units the roles enabled, from their systemd states.

playbooks/verify.yml reads each unit with ansible.builtin.systemd_service inside the booted image and asks this
filter which of them are fine: active; a oneshot that ran and succeeded; kept from starting by one of its own
``Condition*=`` (a container is not the node); or allowed to stay inactive. Documentation: unit_report.yml.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def judge_unit(unit: str, status: Mapping[str, Any], allowed_inactive: Iterable[str] = ()) -> dict[str, Any]:
    """One row of the report: ``unit``, ``state`` (for people), ``skipped`` (by a condition) and ``ok``."""
    active = status.get("ActiveState") or "?"
    ran_once = (status.get("Type") == "oneshot" and status.get("Result") == "success"
                and _int(status.get("ExecMainStartTimestampMonotonic")) > 0)
    skipped = active == "inactive" and status.get("ConditionResult", "yes") == "no"
    ok = active == "active" or (active == "inactive" and ran_once) or skipped or unit in set(allowed_inactive)
    state = f"{active} ({status.get('SubState') or '?'}, result {status.get('Result') or '-'})"
    return {"unit": unit, "state": state, "skipped": skipped, "ok": ok}


def unit_report(results: Any, allowed_inactive: Any = None) -> list[dict[str, Any]] | Undefined:
    """The rows of the ``results`` of a looped ansible.builtin.systemd_service task (``item`` the unit name)."""
    for value in (results,):
        if isinstance(value, Undefined):
            return value  # as Jinja's own filters do: the error names the undefined variable
    if not isinstance(results, Iterable) or isinstance(results, (str, bytes, Mapping)):
        raise AnsibleFilterError("unit_report: expects the results list of a looped systemd_service task, "
                                 f"got {type(results).__name__}")
    allowed = list(allowed_inactive or [])
    rows = []
    for result in results:
        if not isinstance(result, Mapping) or not isinstance(result.get("status"), Mapping) or "item" not in result:
            raise AnsibleFilterError("unit_report: each result needs the unit name as 'item' and its 'status' "
                                     f"(ansible.builtin.systemd_service), got {result!r:.200}")
        rows.append(judge_unit(str(result["item"]), result["status"], allowed))
    return rows


class FilterModule:
    """The unit report filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"unit_report": unit_report}
