# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hpc.stateless.compliance_suite_digest: what version of the checks a verification record was made with.

The rule lives in module_utils/_verify/suite.py (suite_digest); this filter adds the collection's own suite
(molecule/) and Lynis waivers in front of the site's files.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import SuiteError, suite_digest

_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The collection's files a check's verdict depends on: the testinfra suite and the Lynis waivers.
COLLECTION_SUITE_FILES = (os.path.join(_COLLECTION_ROOT, "molecule"),
                          os.path.join(_COLLECTION_ROOT, "roles", "hpc_stateless", "files", "lynis-waivers.yml"),
                          os.path.join(_COLLECTION_ROOT, "roles", "hpc_stateless", "files", "openscap-waivers.yml"),
                          os.path.join(_COLLECTION_ROOT, "roles", "hpc_stateless", "files", "openscap"))


def compliance_suite_digest(site_files: Any) -> str:
    """sha256 of the collection's suite, Lynis and OpenSCAP waivers and tailoring, then ``site_files`` (the site's test paths and waivers)."""
    if site_files is None:
        site_files = []
    if not isinstance(site_files, (list, tuple)) or not all(isinstance(path, str) for path in site_files):
        raise AnsibleFilterError(f"compliance_suite_digest: expects a list of paths, got {site_files!r}")
    try:
        return suite_digest([*COLLECTION_SUITE_FILES, *site_files])
    except (SuiteError, OSError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """The compliance suite's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"compliance_suite_digest": compliance_suite_digest}
