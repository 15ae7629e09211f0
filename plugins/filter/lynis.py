# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters hpc.stateless.lynis_nspawn_args, lynis_profile, lynis_argv, lynis_boot_path and lynis_verdict: Lynis in the
verify gate.

playbooks/verify.yml boots the image with the host's Lynis bound in read-only (lynis_nspawn_args),
playbooks/tasks/verify_lynis.yml runs it with the skipped tests of the waiver files (lynis_profile, lynis_argv) and judges its report (lynis_verdict) with the
collection's waiver file (roles/hpc_stateless/files/lynis-waivers.yml) and the site's. The rules live in
module_utils/_verify/lynis.py, and where its files are in the boot (lynis_boot_path) there too. Documentation:
lynis_nspawn_args.yml, lynis_profile.yml, lynis_argv.yml, lynis_boot_path.yml, lynis_verdict.yml.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.hpc.stateless.plugins.module_utils._verify import lynis

# The collection's own waivers: always read, before the site's files.
COLLECTION_WAIVERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                  "roles", "hpc_stateless", "files", "lynis-waivers.yml")


def lynis_nspawn_args(enabled: Any) -> list[str] | Undefined:
    """``--bind-ro`` arguments that show the build host's Lynis in the booted container; [] when not ``enabled``."""
    if isinstance(enabled, Undefined):
        return enabled
    if not enabled:
        return []
    try:
        return lynis.nspawn_binds(lynis.host_install())
    except lynis.LynisError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def lynis_argv(report_file: Any, log_file: Any = "", profile: Any = "", print_report: Any = False,
               timeout: Any = 0) -> list[str]:
    """The command that audits the booted container (run in lynis.MOUNT_POINT)."""
    if not isinstance(report_file, str) or not report_file.startswith("/"):
        raise AnsibleFilterError(f"lynis_argv: expects the absolute path of the report file, got {report_file!r}")
    if not isinstance(print_report, bool):
        raise AnsibleFilterError(f"lynis_argv: print_report expects true or false, got {print_report!r}")
    try:
        seconds = -1 if isinstance(timeout, bool) else int(timeout)
    except (TypeError, ValueError):
        seconds = -1
    if seconds < 0:
        raise AnsibleFilterError(f"lynis_argv: timeout expects whole seconds (0: none), got {timeout!r}; "
                                 "see hpc_stateless_verify_lynis_timeout")
    timeout = seconds
    return lynis.lynis_argv(report_file, str(log_file or ""), str(profile or ""), print_report=print_report,
                            timeout=timeout)


def lynis_boot_path(name: Any) -> str | Undefined:
    """Where verify's Lynis keeps ``name`` (workdir, profile, report) in the boot."""
    if isinstance(name, Undefined):
        return name
    try:
        return lynis.BOOT_PATHS[name]
    except (KeyError, TypeError):
        raise AnsibleFilterError(f"lynis_boot_path: unknown name {name!r} "
                                 f"(known: {', '.join(sorted(lynis.BOOT_PATHS))})") from None


def _waiver_set(waiver_files: Any) -> lynis.Waivers:
    if isinstance(waiver_files, str) or not isinstance(waiver_files, (list, tuple, type(None))):
        raise AnsibleFilterError("hpc_stateless_verify_lynis_waivers: expects a list of waiver files, "
                                 f"got {waiver_files!r}")
    try:
        return lynis.load_waivers([COLLECTION_WAIVERS] + [str(f) for f in waiver_files or []])
    except lynis.LynisError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def lynis_profile(waiver_files: Any) -> str | Undefined:
    """The text of the run's Lynis profile: a ``skip-test=`` line per skipped test of the waiver files."""
    if isinstance(waiver_files, Undefined):
        return waiver_files
    return lynis.profile_text(_waiver_set(waiver_files))


def lynis_verdict(report_text: Any, waiver_files: Any = None, minimum: Any = 80) -> dict[str, Any] | Undefined:
    """The verdict on one report: passed, score, minimum, checks (one per finding), unwaived, message."""
    if isinstance(report_text, Undefined):
        return report_text
    if not isinstance(report_text, str):
        raise AnsibleFilterError(f"lynis_verdict: expects the text of a Lynis report file, got {type(report_text).__name__}")
    waivers = _waiver_set(waiver_files)
    try:
        minimum = int(minimum) if not isinstance(minimum, bool) else minimum
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"hpc_stateless_verify_lynis_min_score: expected a whole number, got {minimum!r}") from exc
    try:
        return lynis.judge(lynis.parse_report(report_text), waivers, minimum).as_dict()
    except lynis.LynisError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """The Lynis filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"lynis_nspawn_args": lynis_nspawn_args, "lynis_argv": lynis_argv, "lynis_verdict": lynis_verdict,
                "lynis_profile": lynis_profile, "lynis_boot_path": lynis_boot_path}
