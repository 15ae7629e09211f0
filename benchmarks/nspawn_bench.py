# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nspawn benchmark: boot to ready, and per-task cost of the nspawn vs the buildah connection.

One invocation measures, on the same image:

1. boot to ready of a booted container (hpc.stateless.nspawn, boot=true): from asking for the
   session to systemd reporting running (buildah working container + mount + systemd-nspawn
   --boot + READY=1 + state check), N times; goal <= 10 s (issue 5);
2. the same 50 Ansible tasks (``ansible.builtin.command: /bin/true``) over
   containers.podman.buildah (a working container of the image), over hpc.stateless.nspawn in
   booted mode and in directory mode. Per-task cost = (run with 50 tasks - run with 0 tasks) / 50,
   so connection set-up (boot, working container) and Ansible start-up cancel out;
3. the raw per-command overhead under Ansible: the command line each connection runs for one
   command (``buildah run``, ``nsenter``, ``systemd-nspawn --pipe``), 50 times.

    python benchmarks/nspawn_bench.py [--image REF] [--boots N] [--rounds N] [--output FILE]

Writes JSON to benchmarks/results/nspawn.json and prints a table with both sides, medians and ratios.
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
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session, stop_sessions  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec  # noqa: E402

BOOT_GOAL_SECONDS = 10.0
TASKS = 50
TEST_PREFIX = "localhost/hpc-stateless-nspawn-test"
ENV = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
       "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
       "PYTHONPATH": str(REPO / ".collections")}


def log(message: str) -> None:
    print(f"[nspawn_bench] {message}", file=sys.stderr, flush=True)


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], env=ENV, capture_output=True, text=True, check=True).stdout


def default_image() -> str:
    """The base layer of the nspawn tests (built, or found cached, with the build engine)."""
    log("building (or finding cached) the nspawn test layers")
    proc = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", str(REPO / "tests/integration/inventory_nspawn"),
                           str(REPO / "site.yml"), "-e", f"hpc_stateless_image_prefix={TEST_PREFIX}"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"building the test layers failed:\n{proc.stdout[-3000:]}")
    return f"{TEST_PREFIX}/base:latest"


def boot_to_ready(image: str, runtime_dir: str, boots: int) -> dict:
    totals, nspawn_part, stops = [], [], []
    for index in range(boots):
        spec = SessionSpec(host=f"bench-boot-{index}", image=image, boot=True, runtime_dir=runtime_dir)
        session = Session(spec)
        started = time.monotonic()
        state = session.ensure()
        totals.append(time.monotonic() - started)
        nspawn_part.append(state["boot_seconds"])
        if state["system_state"] != "running":
            sys.exit(f"boot {index} ended {state['system_state']}: {state.get('failed_units')}")
        started = time.monotonic()
        left = session.stop()
        stops.append(time.monotonic() - started)
        if left:
            sys.exit(f"stopping left {left}")
        log(f"boot {index + 1}/{boots}: ready after {totals[-1]:.2f} s (systemd-nspawn to running "
            f"{nspawn_part[-1]:.2f} s), stopped in {stops[-1]:.2f} s")
    return {"runs": boots, "ready_seconds": totals, "nspawn_to_running_seconds": nspawn_part, "stop_seconds": stops,
            "median_ready_seconds": statistics.median(totals),
            "median_nspawn_to_running_seconds": statistics.median(nspawn_part),
            "median_stop_seconds": statistics.median(stops), "goal_seconds": BOOT_GOAL_SECONDS,
            "goal_met": statistics.median(totals) <= BOOT_GOAL_SECONDS}


def playbook(path: Path, tasks: int) -> Path:
    lines = ["- name: Per-task benchmark", "  hosts: bench", "  gather_facts: false", "  tasks:",
             "    - name: Warm up (the connection set-up is not counted)", "      ansible.builtin.command: /bin/true",
             "      changed_when: false"]
    for index in range(tasks):
        lines += [f"    - name: Task {index + 1}", "      ansible.builtin.command: /bin/true", "      changed_when: false"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_play(play: Path, variables: dict) -> float:
    argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", "bench,", str(play), "-e", json.dumps(variables)]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}")
    return elapsed


def wait_clean(runtime_dir: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while os.listdir(runtime_dir) and time.monotonic() < deadline:
        time.sleep(0.2)


def per_task(image: str, runtime_dir: str, rounds: int, workdir: Path) -> dict:
    full, empty = playbook(workdir / "tasks50.yml", TASKS), playbook(workdir / "tasks0.yml", 0)
    container = f"hpc-nspawn-bench-{uuid.uuid4().hex[:6]}"
    buildah("from", "--pull=never", "--quiet", "--name", container, image)
    sides = {
        "buildah": {"ansible_connection": "containers.podman.buildah", "ansible_host": container},
        "nspawn_booted": {"ansible_connection": "hpc.stateless.nspawn", "ansible_nspawn_image": image,
                          "ansible_nspawn_boot": True, "ansible_nspawn_runtime_dir": runtime_dir},
        "nspawn_directory": {"ansible_connection": "hpc.stateless.nspawn", "ansible_nspawn_image": image,
                             "ansible_nspawn_runtime_dir": runtime_dir},
    }
    times: dict = {name: {"tasks50": [], "tasks0": []} for name in sides}
    try:
        for round_index in range(rounds):
            for name, variables in sides.items():  # interleaved, so drift hits every side alike
                for label, play in (("tasks50", full), ("tasks0", empty)):
                    times[name][label].append(run_play(play, variables))
                    wait_clean(runtime_dir)
                log(f"round {round_index + 1}/{rounds} {name}: {TASKS} tasks {times[name]['tasks50'][-1]:.1f} s, "
                    f"0 tasks {times[name]['tasks0'][-1]:.1f} s")
    finally:
        subprocess.run(["buildah", "rm", container], env=ENV, capture_output=True, check=False)
    result = {}
    for name, runs in times.items():
        per = [(a - b) / TASKS for a, b in zip(runs["tasks50"], runs["tasks0"])]
        result[name] = {**runs, "per_task_seconds": per, "median_per_task_seconds": statistics.median(per)}
    return result


def raw_commands(image: str, runtime_dir: str, count: int = TASKS) -> dict:
    """The argv each connection runs for one command, ``count`` times."""
    container = f"hpc-nspawn-bench-{uuid.uuid4().hex[:6]}"
    buildah("from", "--pull=never", "--quiet", "--name", container, image)
    booted = Session(SessionSpec(host="bench-raw", image=image, boot=True, runtime_dir=runtime_dir))
    directory = Session(SessionSpec(host="bench-raw", image=image, runtime_dir=runtime_dir))
    try:
        booted_state, directory_state = booted.ensure(), directory.ensure()
        commands = {
            "buildah": (["buildah", "run", "--user", "root", container, "/bin/sh", "-c", "true"], ENV),
            "nspawn_booted": booted.command(booted_state, ["/bin/sh", "-c", "true"]),
            "nspawn_directory": directory.command(directory_state, ["/bin/sh", "-c", "true"]),
        }
        result = {}
        for name, (argv, env) in commands.items():
            samples = []
            for _sample in range(count):
                started = time.monotonic()
                subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)
                samples.append(time.monotonic() - started)
            result[name] = {"argv": argv, "samples": samples, "median_seconds": statistics.median(samples)}
            log(f"raw {name}: median {result[name]['median_seconds'] * 1000:.0f} ms per command")
        return result
    finally:
        booted.stop()
        directory.stop()
        subprocess.run(["buildah", "rm", container], env=ENV, capture_output=True, check=False)


def table(result: dict) -> str:
    boot = result["boot_to_ready"]
    rows = [("boot to ready, median (goal <= 10 s)", f"{boot['median_ready_seconds']:.2f} s", "-", "-"),
            ("  systemd-nspawn start to running", f"{boot['median_nspawn_to_running_seconds']:.2f} s", "-", "-"),
            ("  orderly stop", f"{boot['median_stop_seconds']:.2f} s", "-", "-")]
    tasks = result["per_task"]
    buildah_task = tasks["buildah"]["median_per_task_seconds"]
    for name in ("nspawn_booted", "nspawn_directory"):
        value = tasks[name]["median_per_task_seconds"]
        rows.append((f"per task, {name} vs buildah", f"{value * 1000:.0f} ms", f"{buildah_task * 1000:.0f} ms",
                     f"{value / buildah_task:.2f}"))
    raw = result["raw_command"]
    for name in ("nspawn_booted", "nspawn_directory"):
        value = raw[name]["median_seconds"]
        rows.append((f"per command (raw), {name} vs buildah run", f"{value * 1000:.0f} ms",
                     f"{raw['buildah']['median_seconds'] * 1000:.0f} ms", f"{value / raw['buildah']['median_seconds']:.2f}"))
    widths = [max(len(row[i]) for row in rows + [("metric", "nspawn", "buildah", "ratio")]) for i in range(4)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(("metric", "nspawn", "buildah", "ratio"), widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", help="image to boot (default: the base layer of the nspawn tests)")
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks/results/nspawn.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: systemd-nspawn, nsenter and buildah mounts need it")
    image = args.image or default_image()
    runtime_dir = tempfile.mkdtemp(prefix="hpc-nspawn-bench-", dir="/var/tmp")
    workdir = Path(tempfile.mkdtemp(prefix="nspawn-bench-"))
    try:
        result = {
            "benchmark": "nspawn", "image": image, "host_cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "boot_to_ready": boot_to_ready(image, runtime_dir, args.boots),
            "per_task": per_task(image, runtime_dir, args.rounds, workdir),
            "raw_command": raw_commands(image, runtime_dir),
            "load_average_at_end": os.getloadavg(),
        }
    finally:
        stop_sessions(runtime_dir)
        shutil.rmtree(runtime_dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    result["comparisons"] = comparisons.derive("nspawn", result)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print("\n" + comparisons.text_table(result["comparisons"]))
    print(f"\nresults: {args.output}")
    return 0 if result["boot_to_ready"]["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
