# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The order of verify's checks in the boot: Lynis audits a quiet container.

Lynis's tests read the live system at one instant: PROC-3612 takes any process that has exited and is not yet
reaped for a zombie, PROC-3614 any process waiting for I/O, and its daemon tests grep the process list. Every
command verify enters into the boot (a module run, the compliance suite's testinfra commands, a wait loop) exits,
and is a zombie until its parent reaps it; beside Lynis, that made the gate's verdict depend on timing. The rule,
read from playbooks/verify.yml and its task files: Lynis runs in one task that returns when Lynis has ended (no
background job, no poll), and no task of the verification enters the container after it starts. The stress run
that shows the verdict steady under load is benchmarks/verify_stress_bench.py (make bench).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import yaml

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
#: Tasks that run in the controller only: they never start a process in the booted container.
CONTROLLER_ACTIONS = {
    "ansible.builtin.set_fact", "ansible.builtin.assert", "ansible.builtin.debug", "ansible.builtin.fail",
    "ansible.builtin.meta", "ansible.builtin.import_role", "hpc.stateless.verify_boot_files",
}
INCLUDES = ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks")


def _action(task: dict[str, Any]) -> str:
    return next(key for key in task if "." in key and key.split(".")[0] in ("ansible", "hpc"))


def _flatten(tasks: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The tasks in run order, with the task files of playbooks/tasks/ included in place."""
    for task in tasks:
        if "block" in task:
            yield from _flatten(task["block"])
            continue
        action = _action(task)
        if action in INCLUDES:
            yield from _flatten(yaml.safe_load((PLAYBOOKS / task[action]).read_text(encoding="utf-8")))
        else:
            yield task


def _enters_container(task: dict[str, Any]) -> bool:
    if _action(task) in CONTROLLER_ACTIONS or task.get("delegate_to") == "localhost":
        return False
    # The baseline listing runs in a container of its own (directory mode on the bootstrap image), not in the boot.
    return (task.get("vars") or {}).get("ansible_nspawn_boot") is not False


def _verify_block() -> list[dict[str, Any]]:
    plays = yaml.safe_load((PLAYBOOKS / "verify.yml").read_text(encoding="utf-8"))
    boot_play = next(play for play in plays if play.get("vars", {}).get("ansible_connection") == "hpc.stateless.nspawn")
    block = next(task for task in boot_play["tasks"] if "block" in task)
    return list(_flatten(block["block"]))


def test_lynis_runs_alone_in_the_boot_after_every_other_check():
    tasks = _verify_block()
    lynis = [i for i, task in enumerate(tasks) if "lynis_argv" in str(task.get(_action(task)))]
    assert len(lynis) == 1, f"one task runs Lynis, found {[tasks[i]['name'] for i in lynis]}"
    task = tasks[lynis[0]]
    assert "async" not in task and "poll" not in task, (
        f"{task['name']!r} runs Lynis in the background: the checks that run meanwhile leave zombies Lynis sees")
    # The timeout is the audit's own (coreutils' timeout in the command), since the task waits for the end.
    assert "hpc_stateless_verify_lynis_timeout" in str(task[_action(task)]["argv"])
    after = [t["name"] for t in tasks[lynis[0] + 1:] if _enters_container(t)]
    assert after == [], f"tasks enter the booted container while or after Lynis runs: {after}"
    before = [t["name"] for t in tasks[:lynis[0]] if _enters_container(t)]
    assert "Run the compliance suite in the booted image" in before
    # The last look before it: systemd has no job queued or running (a timer's service, a restart).
    assert before[-1] == "Wait until systemd has no job queued or running, so Lynis audits a quiet boot"
    assert any(name.startswith("Wait until the units the roles enabled have settled") for name in before)


def test_the_checks_wait_for_settled_units_and_judge_the_system_after():
    names = [task["name"] for task in _verify_block()]
    wait = next(i for i, name in enumerate(names) if name.startswith("Wait until the units the roles enabled have settled"))
    # No blind sleep: the settle wait is the units' condition, and everything that reads the running system follows it.
    assert not any("wait_for" in str(task) for task in _verify_block())
    for check in ("Read the state of the container's systemd", "List failed units",
                  "Assert that every unit the roles enabled is active", "Run the compliance suite in the booted image"):
        assert names.index(check) > wait, f"{check!r} reads the system before the units settled"
    task = _verify_block()[wait]
    assert task["until"] and task["delay"] == 1 and "hpc_stateless_verify_settle_timeout" in task["retries"]
