# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Change-plan benchmark: map many changed files to the layers of a large synthetic DAG.

Goal (issue 8): a synthetic DAG of 500 layers and 10,000 changed files plans in <= 2 s.

Two figures per case, medians of several runs in this process:
  full     - what the plan action does for a change: validate the DAG, resolve every layer's
             role closure and compute every content key from role files on disk (RoleIndex,
             compute_keys), build the layer facts, then map the changed files (plan_changes),
             variable files compared by value between two revisions;
  mapping  - plan_changes alone, with the layer facts already known.
Git is not timed: the changed-file list and both revisions' variable files come from memory
(a DictReader), the way the plan receives them from git diff / git show.

The synthetic site: layer i builds on a random earlier layer (seeded), applies two of
``layers/2`` roles (every fifth role depends on the one before through meta/main.yml); each
role reads two variables. Changed files: 80 % files of roles, 15 % files of no layer,
5 % group_vars files (some values changed, some comment-only).

    python benchmarks/plan_bench.py [--runs N] [--output FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import (  # noqa: E402
    DictReader,
    layer_facts,
    plan_changes,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import RoleIndex, compute_keys  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph  # noqa: E402

GOAL_SECONDS = 2.0
GOAL_CASE = (500, 10_000)
GROUPS = 20


class SyntheticSite:
    """Roles on disk plus layer specs and inventory variable files in memory."""

    def __init__(self, root: Path, layers: int, seed: int = 8) -> None:
        rng = random.Random(seed)
        self.root = root
        self.roles = max(2, layers // 2)
        if not root.exists():
            self._write_roles()
        self.specs = {"l0000": {"bootstrap": {"distro": "debian", "release": "bookworm"},
                                "roles": [f"role{rng.randrange(self.roles):04d}"]}}
        for i in range(1, layers):
            roles = sorted({f"role{rng.randrange(self.roles):04d}" for _pick in range(2)})
            self.specs[f"l{i:04d}"] = {"parent": f"l{rng.randrange(i):04d}", "roles": roles,
                                       "groups": [f"g{rng.randrange(GROUPS):02d}"]}
        self.variables = {f"v{j:04d}_value": j for j in range(self.roles)}

    def _write_roles(self) -> None:
        root = self.root
        for j in range(self.roles):
            role = root / "roles" / f"role{j:04d}"
            (role / "tasks").mkdir(parents=True)
            (role / "defaults").mkdir()
            (role / "templates").mkdir()
            (role / "meta").mkdir()
            (role / "tasks" / "main.yml").write_text(
                f"- name: Configure {j}\n  ansible.builtin.template:\n    src: conf.j2\n    dest: /etc/r{j}.conf\n"
                f"    mode: \"0644\"\n  when: v{j:04d}_enabled | bool\n")
            (role / "templates" / "conf.j2").write_text(f"value={{{{ v{j:04d}_value }}}}\n")
            (role / "defaults" / "main.yml").write_text(f"v{j:04d}_enabled: true\n")
            deps = f"  - role: role{j - 1:04d}\n" if j % 5 == 4 else ""
            (role / "meta" / "main.yml").write_text("dependencies:" + ("\n" + deps if deps else " []\n"))

    def changed_files(self, count: int) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """``count`` changed paths plus the variable files at the base revision and in the work tree."""
        rng = random.Random(count)
        files, base, head = [], {}, {}
        n_vars = max(GROUPS, count // 20)
        n_other = count * 15 // 100
        for k in range(n_vars):
            group = f"g{k % GROUPS:02d}"
            path = f"inventory/group_vars/{group}/part{k:05d}.yml"
            names = [f"v{rng.randrange(self.roles):04d}_value" for _pick in range(3)]
            base[path] = "".join(f"{n}: {self.variables[n]}\n" for n in names)
            if k % 3 == 0:  # comment-only edit
                head[path] = "# reviewed\n" + base[path]
            else:
                head[path] = base[path].replace(": ", ": 1", 1)
            files.append(path)
        for k in range(n_other):
            files.append(f"docs/page{k:05d}.md")
        k = 0
        while len(files) < count:
            files.append(f"roles/role{rng.randrange(self.roles):04d}/files/f{k:05d}.txt")
            k += 1
        return files, base, head

    def plan_full(self, files: list[str], reader: DictReader):
        role_index = RoleIndex([str(self.root / "roles")], [])
        graph = LayerGraph.from_spec(self.specs, role_exists=role_index.exists)
        keys = compute_keys(graph, role_index, lambda name: self.variables)
        facts = layer_facts(graph, keys, role_index.path, str(self.root))
        return plan_changes(graph, facts, files, reader), (graph, facts)


def timed(function, runs: int) -> tuple[float, list[float], object, float]:
    """Median wall seconds, the samples, the last result, and median CPU seconds of this process
    (the CPU figure stays honest on a machine other work keeps busy)."""
    samples, cpu, result = [], [], None
    for _run in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = function()
        samples.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(samples), samples, result, statistics.median(cpu)


def measure(workdir: Path, layers: int, files: int, runs: int) -> dict:
    site = SyntheticSite(workdir / f"site-{layers}", layers)
    changed, base, head = site.changed_files(files)
    reader = DictReader(head, base, base_label="base")
    full, full_samples, (plan, (graph, facts)), full_cpu = timed(lambda: site.plan_full(changed, reader), runs)
    mapping, map_samples, _plan, map_cpu = timed(lambda: plan_changes(graph, facts, changed, reader), runs)
    return {
        "layers": layers, "changed_files": len(changed), "runs": runs,
        "full_median_s": round(full, 4), "full_samples_s": [round(s, 4) for s in full_samples],
        "full_cpu_median_s": round(full_cpu, 4),
        "mapping_median_s": round(mapping, 4), "mapping_samples_s": [round(s, 4) for s in map_samples],
        "mapping_cpu_median_s": round(map_cpu, 4),
        "rebuild": len(plan.rebuild), "role_dirs": site.roles,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="only the goal case")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "plan.json"))
    args = parser.parse_args()
    layer_steps = [GOAL_CASE[0]] if args.quick else [100, 250, 500, 1000]
    file_steps = [GOAL_CASE[1]] if args.quick else [1000, 2500, 5000, 10_000, 20_000]
    cases = sorted({(n, GOAL_CASE[1]) for n in layer_steps} | {(GOAL_CASE[0], f) for f in file_steps})
    results = []
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        for layers, files in cases:
            row = measure(Path(tmp), layers, files, args.runs)
            results.append(row)
            print(f"[plan_bench] {layers} layers, {files} files: full {row['full_median_s']:.3f} s, "
                  f"mapping {row['mapping_median_s']:.3f} s", file=sys.stderr, flush=True)
    goal = next(r for r in results if (r["layers"], r["changed_files"]) == GOAL_CASE)
    report = {
        "benchmark": "plan",
        "goal": {"case": {"layers": GOAL_CASE[0], "changed_files": GOAL_CASE[1]}, "max_seconds": GOAL_SECONDS,
                 "measured_full_median_s": goal["full_median_s"],
                 "ratio": round(goal["full_median_s"] / GOAL_SECONDS, 3),
                 "met": goal["full_median_s"] <= GOAL_SECONDS},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "load_average": list(os.getloadavg())},
        "cases": results,
    }
    report["comparisons"] = comparisons.derive("plan", report)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    print(f"{'layers':>7} {'files':>7} {'full median s':>14} {'(cpu s)':>8} {'mapping median s':>17} "
          f"{'(cpu s)':>8} {'rebuild':>8}")
    for row in results:
        print(f"{row['layers']:>7} {row['changed_files']:>7} {row['full_median_s']:>14.3f} "
              f"{row['full_cpu_median_s']:>8.3f} {row['mapping_median_s']:>17.3f} {row['mapping_cpu_median_s']:>8.3f} "
              f"{row['rebuild']:>8}")
    print()
    print(f"{'case':<28} {'goal s':>7} {'measured median s':>18} {'ratio':>6}  met")
    print(f"{'500 layers, 10000 files':<28} {GOAL_SECONDS:>7.2f} {goal['full_median_s']:>18.3f} "
          f"{report['goal']['ratio']:>6.2f}  {'yes' if report['goal']['met'] else 'NO'}")
    print(f"load average while measuring: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("\n" + comparisons.text_table(report["comparisons"]))
    print(f"written to {output}")
    return 0 if report["goal"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
