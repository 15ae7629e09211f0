# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift check of live nodes (playbooks/compliance.yml): its rules are module_utils/_verify/drift.py;
these filters hand them to Jinja and turn their errors into filter errors. Each filter's documentation is in
``<name>.yml`` next to this file."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.module_utils._verify import drift
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import Check, checks_junit


def compliance_find_command(extra_paths: Any = None, remote_tmp: Any = "/tmp") -> str:
    """The node's file search: drift.RUNTIME_PATHS and the site's ``extra_paths`` are left out, but for what runs
    in drift.WATCHED_PLACES; ``remote_tmp`` is where the check's own module files are (its ansible_remote_tmp)."""
    if extra_paths is None:
        extra_paths = []
    if not isinstance(extra_paths, list) or not all(isinstance(p, str) for p in extra_paths):
        raise AnsibleFilterError(f"compliance_find_command: hpc_stateless_compliance_runtime_paths must be a list "
                                 f"of absolute paths, got {extra_paths!r}")
    try:
        return drift.find_command([p for p, _why in drift.RUNTIME_PATHS] + extra_paths, str(remote_tmp or "/tmp"))
    except drift.DriftError as exc:
        raise AnsibleFilterError(f"compliance_find_command: hpc_stateless_compliance_runtime_paths: {exc}") from None


def compliance_drift(node: Any, *, image: Any, boot_root: Any, served: Any, release: Any, packages: Any,
                     changed: Any, waivers: Any = None) -> dict[str, Any]:
    """The drift report of ``node`` (drift.node_report) from its registered results and the served manifests
    (``served``: ``{image: manifest.json text}``, the images that are served)."""
    if not image:
        return drift.node_report(str(node), "", str(boot_root), [Check(
            drift.RELEASE_CHECK, False, f"{node} has no image: set hpc_stateless_boot_image for it or "
                                        "hpc_stateless_boot_default_image", drift.ERROR)], {}, int(time.time()))
    if not isinstance(served, Mapping):
        raise AnsibleFilterError(f"compliance_drift: served must be {{image: manifest text}}, got {served!r}")
    try:
        manifest = drift.served_manifest(served.get(str(image)), str(image), str(boot_root))
        checks, facts = drift.drift_checks(image=str(image), boot_root=str(boot_root), served=manifest,
                                           release=release, packages=packages, changed=changed,
                                           waivers=drift.parse_waivers(waivers))
    except drift.DriftError as exc:
        raise AnsibleFilterError(f"compliance_drift: {node}: {exc}") from None
    return drift.node_report(str(node), str(image), str(boot_root), checks, facts, int(time.time()))


def compliance_junit(report: Any) -> str:
    """A node's drift report as JUnit XML."""
    if not isinstance(report, Mapping) or not isinstance(report.get("checks"), list):
        raise AnsibleFilterError(f"compliance_junit: expects a report of compliance_drift, got {type(report).__name__}")
    checks = [Check.from_dict(f"report of {report.get('node')}", c) for c in report["checks"]]
    properties = [(k, str(report.get(k) or "")) for k in ("node", "image", "served", "booted", "since")]
    return checks_junit(f"compliance {report.get('node')}", f"compliance.{report.get('node')}",
                        str(report.get("node")), int(time.time()), properties, checks)


def compliance_drift_message(reports: Any) -> str:
    """One line per node with a failed or errored check; '' when every node passed."""
    if not isinstance(reports, list):
        raise AnsibleFilterError(f"compliance_drift_message: expects the list of reports, got {type(reports).__name__}")
    return drift.findings_message([r for r in reports if isinstance(r, Mapping)])


def compliance_report_line(report: Any) -> str:
    """A node's report in one line (drift.report_line)."""
    if not isinstance(report, Mapping):
        raise AnsibleFilterError(f"compliance_report_line: expects a report of compliance_drift, got "
                                 f"{type(report).__name__}")
    return drift.report_line(report)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"compliance_find_command": compliance_find_command, "compliance_drift": compliance_drift,
                "compliance_junit": compliance_junit, "compliance_drift_message": compliance_drift_message,
                "compliance_report_line": compliance_report_line}
