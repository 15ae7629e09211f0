# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad role variables fail before the roles touch anything, and the error names the variable.

The roles run against localhost with a tag no task has: only role argument validation and the
roles' own ``always`` checks run, so a bug here could never install packages on the build host.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def apply_role(tmp_path: Path, role: str, variables: dict) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{
        "name": "Apply one role with bad variables",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": True,
        "gather_subset": ["min"],
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}", **variables},
        "roles": [{"role": f"hpc.stateless.{role}"}],
    }]), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "PYTHONPATH": str(REPO / ".collections")}
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "--check", "--tags", "hpc_stateless_no_such_tag"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize("role, variables, expected", [
    ("base", {"base_journald_storage": "disk"}, ["base_journald_storage", "must be one of"]),
    ("base", {"base_sshd_max_auth_tries": "many"}, ["base_sshd_max_auth_tries", "int"]),
    ("base", {"base_limits": [{"domain": "*", "type": "hardest", "item": "core", "value": "0"}]},
     ["base_limits", "type", "must be one of"]),
    ("hsn", {"hsn_network_backend": "ifupdown"}, ["hsn_network_backend", "must be one of"]),
    ("hsn", {"hsn_interfaces": [{"name": "hsn0", "method": "carrier-pigeon"}]},
     ["hsn_interfaces", "method", "must be one of"]),
    ("hsn", {"hsn_interfaces": [{"name": "hsn0", "method": "static"}]},
     ["interface hsn0 has method static but no addresses"]),
])
@pytest.mark.fault
def test_bad_role_variables_are_named(tmp_path, role, variables, expected):
    proc = apply_role(tmp_path, role, variables)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for text in expected:
        assert text in out, f"{text!r} not in the output:\n{out[-3000:]}"


@pytest.mark.parametrize("role", ["base", "hsn"])
def test_good_defaults_pass_validation(tmp_path, role):
    proc = apply_role(tmp_path, role, {})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
