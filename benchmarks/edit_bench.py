# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Edit -> served: one leaf layer's role variable changed, the whole site.yml, timed (issue 29).

Goal (issue 29): a change to one leaf layer's role variable is served in <= 15 s - build, verify, pack
and deploy, the whole ``site.yml``.

The default image (``compute``, leaf layer ``slurm``) in a project copy of the embedded inventory: its own
git repository, its own image prefix into which the default build's layers are tagged by content key (so
the committed configuration is cached and verified: its records are copied too), its own build/ tree. A
warm-up run first (the first build of a session fills caches); then each measured run sets
``slurm_cluster_name`` to a value never used before (uncommitted, in the inventory), so every run builds,
boots under verify, packs and deploys a new build under its own version, and the served initrd is
checked to carry it.

The profile of each run comes from Ansible's ``ansible.builtin.json`` callback: the duration of every
play and task. Reported per step: plan (the plan tasks of every stage), leaf build (the build play of the
stale layer), verify, pack, deploy, and the rest (Ansible's start-up, the settings role, fact passing).

    python benchmarks/edit_bench.py [--runs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
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
DEFAULT_PREFIX = "localhost/hpc-stateless"
LAYERS = ("base", "hsn", "compute", "slurm", "bootstrap/base")
GOAL_SECONDS = 15.0
VARS_FILE = "inventory/group_vars/all/zz-edit.yml"
SITE_YML = "---\n- name: The whole chain\n  ansible.builtin.import_playbook: hpc.stateless.site\n"
ENV = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
       "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
# Plays of site.yml by stage (playbooks/build.yml, verify.yml, pack.yml, deploy.yml).
STAGE_OF_PLAY = {"Plan the layer build": "build", "Build stale layers, one at a time in topological order": "build",
                 "Record the plan of this run as built": "build",
                 "Plan the verification": "verify", "Boot and verify each image": "verify",
                 "Stop the chain when a layer failed verification": "verify", "Pack the images": "pack",
                 "Deploy packed images to the boot tree": "deploy"}
PLAN_TASKS = ("Validate the layer DAG", "Add every layer as an inventory host in its groups, so that their variables count",
              "Compute the content keys with each layer host's variables")


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=True).stdout


def images(prefix: str) -> dict[str, str]:
    found = {}
    for image in json.loads(buildah("images", "--json") or "[]") or []:
        for name in image.get("names") or []:
            if name.startswith(prefix + "/"):
                found[name] = image["id"]
    return found


def seconds(duration: dict) -> float:
    def parse(value: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parse(duration["end"]) - parse(duration["start"])).total_seconds()


def profile(report: dict) -> dict[str, float]:
    """Seconds per step of one run from the json callback's report."""
    steps = {"plan": 0.0, "leaf build": 0.0, "verify": 0.0, "pack": 0.0, "deploy": 0.0}
    for play in report.get("plays", []):
        name = play["play"]["name"]
        stage = STAGE_OF_PLAY.get(name, "other")
        plan = sum(seconds(t["task"]["duration"]) for t in play.get("tasks", []) if t["task"]["name"] in PLAN_TASKS)
        steps["plan"] += plan
        total = seconds(play["play"]["duration"]) - plan
        key = "leaf build" if stage == "build" else stage
        steps[key] = steps.get(key, 0.0) + total
    return {k: round(v, 2) for k, v in steps.items()}


def slowest_tasks(report: dict, count: int | None = 8) -> list[list]:
    """The ``count`` slowest tasks of one run (all of them with None): [play, task, seconds], what a step's figure is made of."""
    # A task that reported no result (a skipped meta task: the build's end_host for a layer another run built) has no end.
    tasks = [[play["play"]["name"], task["task"]["name"], round(seconds(task["task"]["duration"]), 2)]
             for play in report.get("plays", []) for task in play.get("tasks", []) if "end" in task["task"]["duration"]]
    return sorted(tasks, key=lambda t: -t[2])[:count]


class Project:
    """A project copy of the embedded inventory under an image prefix of its own."""

    def __init__(self, top: Path) -> None:
        self.root = top / "site"
        self.prefix = f"localhost/hpc-stateless-editbench-{uuid.uuid4().hex[:6]}"
        shutil.copytree(REPO / "inventory", self.root / "inventory")
        layers = self.root / "inventory/group_vars/all/layers.yml"
        layers.write_text(layers.read_text().replace(f"hpc_stateless_image_prefix: {DEFAULT_PREFIX}\n",
                                                     f"hpc_stateless_image_prefix: {self.prefix}\n"))
        (self.root / "site.yml").write_text(SITE_YML)
        (self.root / ".gitignore").write_text("build/\n")
        for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "site"]):
            subprocess.run(["git", "-C", str(self.root), "-c", "user.name=b", "-c", "user.email=b@example.org", *argv],
                           check=True, capture_output=True)
        for ref in images(DEFAULT_PREFIX):
            name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
            if name in LAYERS and re.fullmatch(r"[0-9a-f]{64}", tag):
                buildah("tag", ref, f"{self.prefix}/{name}:{tag}")
        (self.root / "build/verify").mkdir(parents=True)
        for record in (REPO / "build/verify").glob("slurm-*.json"):
            shutil.copy(record, self.root / "build/verify")

    def edit_and_serve(self, value: str) -> dict:
        (self.root / VARS_FILE).write_text(f"---\nslurm_cluster_name: {value}\n")
        argv = [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(self.root / "inventory"), "site.yml"]
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=self.root, env={**ENV, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
                              capture_output=True, text=True, check=False)
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"site.yml failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
        link = (self.root / "build/tftpboot/compute").resolve()
        conf = subprocess.run(f"zstd -dc {link / 'compute.cpio.zst'} | cpio -i --quiet --to-stdout etc/slurm/slurm.conf",
                              shell=True, capture_output=True, text=True, check=True).stdout
        if f"ClusterName={value}" not in conf:
            raise SystemExit(f"the served initrd ({link}) does not carry the edit {value}")
        report = json.loads(proc.stdout)
        return {"seconds": round(elapsed, 2), "version": link.name, "steps": profile(report),
                "slowest_tasks": slowest_tasks(report), "tasks": slowest_tasks(report, count=None)}

    def remove(self) -> None:
        for ref in sorted(images(self.prefix)):
            subprocess.run(["buildah", "rmi", ref], env=ENV, stdin=subprocess.DEVNULL, capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "edit.json"))
    args = parser.parse_args()
    if not any(r.startswith(f"{DEFAULT_PREFIX}/slurm:") for r in images(DEFAULT_PREFIX)):
        print("the default layers are not built: run 'make build' first", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="edit-bench-") as top:
        project = Project(Path(top))
        try:
            warmup = project.edit_and_serve(f"warmup-{uuid.uuid4().hex[:6]}")
            print(f"warm-up: {warmup['seconds']} s {warmup['steps']}")
            runs = []
            for index in range(args.runs):
                run = project.edit_and_serve(f"edit-{index}-{uuid.uuid4().hex[:6]}")
                print(f"run {index + 1}: {run['seconds']} s, served {run['version']}: {run['steps']}")
                runs.append(run)
        finally:
            project.remove()
    samples = [r["seconds"] for r in runs]
    median = statistics.median(samples)
    steps = {step: statistics.median(r["steps"].get(step, 0.0) for r in runs) for step in runs[0]["steps"]}
    report = {
        "benchmark": "edit", "image": "compute (leaf layer slurm), slurm_cluster_name edited",
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "warmup": warmup, "runs": runs, "samples_s": samples, "median_s": median, "steps_median_s": steps,
        "goal": {"max_seconds": GOAL_SECONDS, "met": median <= GOAL_SECONDS},
    }
    report["comparisons"] = comparisons.edit_rows(report)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"edit -> served: median {median:.1f} s (goal <= {GOAL_SECONDS:g} s: {'met' if median <= GOAL_SECONDS else 'MISSED'})")
    print("median per step: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
    slowest = "; ".join(f"{task} ({play}) {sec:.1f} s" for play, task, sec in runs[-1]["slowest_tasks"])
    print(f"slowest tasks of the last run: {slowest}")
    print("\n" + comparisons.text_table(report["comparisons"]))
    print(f"written to {output}")
    return 0 if median <= GOAL_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
