# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The play lynis_bench.py and openscap_bench.py run, and how they run it.

Each inventory host is an image (``ansible_nspawn_image``) booted under systemd-nspawn, one at a time, with a
throw-away munge key (``munge_key``) bound in; the benchmark's block runs a task file of verify.yml in the boot as
verify.yml runs it; a verdict below the gate's minimum is a result here, not an error (``rescue``); whatever happened,
``result`` (a Jinja expression) is written to ``<out>/<host>.json`` on the controller, the boot is stopped and its
files on the build host are removed (``cleanup``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def booted_play(name: str, *, binds: str, variables: dict[str, Any], block: list[dict[str, Any]],
                rescue_that: str, rescue_name: str, result: str, cleanup: dict[str, Any], out: Path) -> str:
    """The playbook's text: ``binds`` a Jinja list expression of systemd-nspawn arguments added to the munge key's."""
    play = {
        "name": name,
        "hosts": "all",
        "gather_facts": False,
        "serial": 1,
        "vars": {
            "ansible_connection": "hpc.stateless.nspawn",
            "ansible_nspawn_boot": True,
            "ansible_python_interpreter": "auto_silent",
            "ansible_nspawn_extra_args": "{{ ['--bind-ro=' ~ munge_key ~ ':/etc/munge/munge.key'] + " + binds + " }}",
            **variables,
            "_verify_checks": [],
        },
        "tasks": [{
            "name": "Run and judge",
            "block": block,
            "rescue": [{"name": rescue_name, "ansible.builtin.assert": {"that": rescue_that}}],
            "always": [
                {"name": "Write the verdict and the seconds",
                 "ansible.builtin.copy": {"content": "{{ " + result + " | to_json }}",
                                          "dest": f"{out}/{{{{ inventory_hostname }}}}.json", "mode": "0644"},
                 "delegate_to": "localhost",
                 "vars": {"ansible_connection": "local",
                          "ansible_python_interpreter": "{{ ansible_playbook_python }}"}},
                {"name": "Stop the container", "ansible.builtin.meta": "reset_connection"},
                cleanup,
            ],
        }],
    }
    return yaml.safe_dump([play], sort_keys=False, width=120)


def munge_key(work: Path) -> Path:
    """A throw-away munge key for the boots (the slurm layer's munge wants one)."""
    key = work / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    return key


def run_playbook(work: Path, name: str, text: str, inventory: dict[str, Any], what: str) -> None:
    """Write ``<work>/<name>.yml`` (``text``) and its ``inventory`` beside it and run it; the output's tail when it
    fails, said by ``what`` (the benchmark)."""
    (work / f"{name}.yml").write_text(text, encoding="utf-8")
    (work / f"{name}-inventory.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run(["ansible-playbook", "-i", str(work / f"{name}-inventory.yml"), str(work / f"{name}.yml")],
                          check=False, env=env, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"{what}: the playbook {name}.yml failed (exit {proc.returncode}):\n"
                         + (proc.stdout + proc.stderr)[-4000:])
