# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad role variables of hpc.stateless.compute and hpc.stateless.slurm fail before anything is
changed, naming the variable. The roles run against localhost in check mode, so even a role that
got past validation would change nothing on the test host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: {gather}
  gather_subset: [min]
  roles:
    - role: hpc.stateless.{role}
"""


def run_role(tmp_path: Path, role: str, variables: dict, gather: bool = False) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(role=role, gather=str(gather).lower()))
    extra = tmp_path / "vars.json"
    extra.write_text(json.dumps(variables))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--check",
            "-e", f"@{extra}", str(playbook)]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("role", "variables", "message"), [
    ("compute", {"compute_local_swap_size_mib": "lots"}, "compute_local_swap_size_mib"),
    ("compute", {"compute_local_scratch_fstype": "btrfs"}, "compute_local_scratch_fstype"),
    ("compute", {"compute_nhc_install_method": "curl"}, "compute_nhc_install_method"),
    ("compute", {"compute_local_storage_disks": {"a": 1}}, "compute_local_storage_disks"),
    ("compute", {"compute_nhc_checks": [{"hosts": "*"}]}, "check"),
    ("slurm", {"slurm_role": "worker"}, "slurm_role"),
    ("slurm", {"slurm_process_tracking": "cgroups"}, "slurm_process_tracking"),
    ("slurm", {"slurm_munge_key_bake": "perhaps"}, "slurm_munge_key_bake"),
    ("slurm", {"slurm_nodes": [{"cpus": 4}]}, "name"),
    ("slurm", {"slurm_reboot_on_drain_mode": "ipmi"}, "slurm_reboot_on_drain_mode"),
])
def test_bad_variable_fails_argument_validation(tmp_path, role, variables, message):
    result = run_role(tmp_path, role, variables)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "Validating arguments against arg spec" in out
    assert "validation of arguments failed" in out.lower() or "argument spec validation failed" in out.lower(), out[-2000:]
    assert message in out, out[-2000:]


def test_baking_without_a_key_source_is_refused(tmp_path):
    result = run_role(tmp_path, "slurm", {"slurm_munge_key_bake": True}, gather=True)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "slurm_munge_key_bake needs slurm_munge_key_src" in out
    assert "changed=0" in out
