# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Connection benchmark: the same 50 module tasks on one buildah working container, three ways.

Side by side in one run, on one working container of the same image, interleaved round by round:

* ``hpc.stateless.buildah`` as shipped: one agent in the container per play (``persistent``);
* ``hpc.stateless.buildah`` with ``ansible_hpc_stateless_buildah_persistent=false``: one
  ``buildah run`` per task, results through files (the code path before the agent);
* ``containers.podman.buildah``: one ``buildah run`` per command, as a new user would use.

The play has 50 module tasks (20 ``copy``, 10 ``template``, 20 ``command``) after one warm-up
task. Per-task cost = (play with 50 tasks - play with the warm-up only) / 50, so Ansible's start-up
and the connection's set-up (the agent's start) cancel out; both plays' wall times are kept.
Goal: per task <= 0.25 s over the shipped connection (a budget, the only machine-dependent
verdict); the ratios to the two other ways are reported.

    python benchmarks/connection_bench.py [--image REF] [--rounds N] [--output FILE]

Writes benchmarks/results/connection.json (with the ``comparisons`` block) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import comparisons

REPO = Path(__file__).resolve().parents[1]
TASKS = 50
PER_TASK_GOAL = 0.25
ATTEMPTS = 3
DEFAULT_IMAGE = "localhost/hpc-stateless/base:latest"
ENV = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
       "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
       "PYTHONPATH": str(REPO / ".collections")}
SIDES = {
    "persistent": ("hpc.stateless.buildah, one agent",
                   {"ansible_connection": "hpc.stateless.buildah"}),
    "per_run": ("hpc.stateless.buildah, one buildah run per task",
                {"ansible_connection": "hpc.stateless.buildah", "ansible_hpc_stateless_buildah_persistent": False}),
    "podman": ("containers.podman.buildah", {"ansible_connection": "containers.podman.buildah"}),
}


def log(message: str) -> None:
    print(f"[connection_bench] {message}", file=sys.stderr, flush=True)


def task_lines(index: int) -> list[str]:
    """Task ``index`` of the mix: 2 of 5 copy, 1 of 5 template, 2 of 5 command."""
    kind = index % 5
    name = f"    - name: Task {index + 1}"
    if kind in (0, 1):
        return [name, "      ansible.builtin.copy:", f"        content: \"copy {index}\\n\"",
                f"        dest: /tmp/bench-{index}.txt", "        mode: \"0644\""]
    if kind == 2:
        return [name, "      ansible.builtin.template:", "        src: bench.j2",
                f"        dest: /tmp/bench-{index}.conf", "        mode: \"0644\"",
                "      vars:", f"        bench_index: {index}"]
    return [name, f"      ansible.builtin.command: /bin/echo {index}", "      changed_when: false"]


def playbook(path: Path, tasks: int) -> Path:
    lines = ["- name: Connection benchmark", "  hosts: all", "  gather_facts: false", "  tasks:",
             "    - name: Warm up (the connection's set-up is not counted)",
             "      ansible.builtin.command: /bin/true", "      changed_when: false"]
    for index in range(tasks):
        lines += task_lines(index)
    lines += ["    - name: Remove what the tasks wrote", "      ansible.builtin.shell: rm -f /tmp/bench-*",
              "      changed_when: false"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_play(play: Path, container: str, variables: dict, failures: list) -> float:
    """Wall seconds of one successful run; a failed run is kept in ``failures`` and run again (at most
    :data:`ATTEMPTS` times): containers.podman.buildah loses a command's output now and then on a busy host."""
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", f"{container},", str(play), "-e", json.dumps(variables)]
    for _attempt in range(ATTEMPTS):
        started = time.monotonic()
        proc = subprocess.run(argv, cwd=play.parent, env=ENV, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
        if proc.returncode == 0:
            return elapsed
        said = [line for line in proc.stdout.splitlines() if line.startswith("fatal:")]
        failures.append(said[-1][:500] if said else proc.stdout[-500:])
        log(f"{play.name} over {variables['ansible_connection']} failed, running it again: {failures[-1]}")
    sys.exit(f"{' '.join(argv)} failed {ATTEMPTS} times:\n{proc.stdout[-3000:]}")


def measure(image: str, rounds: int, workdir: Path) -> dict:
    (workdir / "bench.j2").write_text("index={{ bench_index }}\nhost={{ inventory_hostname }}\n", encoding="utf-8")
    full, empty = playbook(workdir / "tasks50.yml", TASKS), playbook(workdir / "tasks0.yml", 0)
    container = f"hpc-stateless-connbench-{uuid.uuid4().hex[:6]}"
    subprocess.run(["buildah", "from", "--pull=never", "--quiet", "--name", container, image], env=ENV,
                   capture_output=True, check=True, stdin=subprocess.DEVNULL)
    times: dict = {side: {"tasks50": [], "tasks0": [], "failed_runs": []} for side in SIDES}
    try:
        for round_index in range(rounds):
            for side, (_label, variables) in SIDES.items():  # interleaved: drift hits every side alike
                for key, play in (("tasks50", full), ("tasks0", empty)):
                    times[side][key].append(run_play(play, container, variables, times[side]["failed_runs"]))
                log(f"round {round_index + 1}/{rounds} {side}: {TASKS} tasks {times[side]['tasks50'][-1]:.1f} s, "
                    f"warm-up only {times[side]['tasks0'][-1]:.1f} s")
    finally:
        subprocess.run(["buildah", "rm", container], env=ENV, capture_output=True, check=False,
                       stdin=subprocess.DEVNULL)
    result = {}
    for side, runs in times.items():
        per = [(a - b) / TASKS for a, b in zip(runs["tasks50"], runs["tasks0"])]
        result[side] = {**runs, "label": SIDES[side][0], "per_task_seconds": per,
                        "median_per_task_seconds": statistics.median(per)}
    return result


def failed_note(*sides: dict) -> str:
    """Which side had runs that failed and were run again (not in the figures)."""
    return "; ".join(f"{side['label']}: {len(side['failed_runs'])} failed run(s) repeated"
                     for side in sides if side["failed_runs"])


def rows(result: dict) -> list[dict]:
    per_task = result["per_task"]
    ours = per_task["persistent"]
    out = [comparisons.budget(f"per task, {TASKS} module tasks on one working container", PER_TASK_GOAL, ours["label"],
                              ours["median_per_task_seconds"], f"<= {PER_TASK_GOAL:g} s per task",
                              b_samples=ours["per_task_seconds"], note=failed_note(ours))]
    for side in ("per_run", "podman"):
        other = per_task[side]
        out.append(comparisons.comparison(
            f"per task, same {TASKS} module tasks, vs {other['label']}", other["label"],
            other["median_per_task_seconds"], ours["label"], ours["median_per_task_seconds"],
            "reported side by side", None, a_samples=other["per_task_seconds"],
            b_samples=ours["per_task_seconds"], note=failed_note(other, ours)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="image of the working container (needs python3)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks/results/connection.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="connection-bench-"))
    try:
        result = {"benchmark": "connection", "image": args.image, "tasks": TASKS, "host_cpus": os.cpu_count(),
                  "load_average_at_start": os.getloadavg(),
                  "per_task": measure(args.image, args.rounds, workdir),
                  "load_average_at_end": os.getloadavg()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["comparisons"] = rows(result)
    return comparisons.write_results(result, args.output)


if __name__ == "__main__":
    sys.exit(main())
