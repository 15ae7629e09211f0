# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter hpc.stateless.plan_after_build: the plan of this run after its build, for build.yml's last play.

The rule is plugins/module_utils/_layers/built.py; its documentation is in plan_after_build.yml next to this file.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.module_utils._layers.built import BuiltPlanError, plan_after_build as _after


def plan_after_build(plan: Any, committed: Any) -> dict[str, Any]:
    """The plan with the layers the build committed cached; an error names the layer."""
    try:
        return _after(plan, committed)
    except BuiltPlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """The plan-after-build filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"plan_after_build": plan_after_build}
