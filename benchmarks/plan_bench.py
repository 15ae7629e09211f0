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

The freshness check (issue 27) on the default DAG, against the real apt sources of the default inventory
(deb.debian.org bookworm, bookworm-updates, bookworm-security): one archive view for every layer's sources,
then each layer's installed packages (its image's hpc.stateless.packages label, or the dpkg status read from
the image when the label is missing) compared with it, as the plan does. Timed in this process:
  cold     - an empty cache: every InRelease and Packages index fetched, verified, parsed (reported only);
  warm     - after max_age: one conditional GET per source (304, or the same bytes on a mirror that sends
             no validators), nothing parsed again (goal: <= 1 s);
  max_age  - within max_age: no request, the cache read (goal: <= 1 s);
side by side with the no-op plan (ansible-playbook of the plan tasks every stage runs, images present).
Not with --quick or --no-freshness (it needs the network and the default images).

    python benchmarks/plan_bench.py [--runs N] [--output FILE] [--quick] [--no-freshness]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
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
FRESHNESS_GOAL_SECONDS = 1.0
INVENTORY = REPO / "inventory"
NOOP_PLAN_PLAYBOOK = """---
- name: The no-op plan of the default DAG (images present)
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The collection's settings
      ansible.builtin.import_role:
        name: hpc.stateless.hpc_stateless
    - name: Plan the layers as every stage does
      ansible.builtin.import_tasks: {tasks}
"""
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


# -- the freshness check on the default DAG ---------------------------------------------------------

def _buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True).stdout


def installed_packages(prefix: str, layers: dict) -> dict[str, dict[str, str]]:
    """What each layer of the default DAG installed: its image's packages label (or the dpkg status of the
    image when the label is missing: images built before the label existed) minus its parent's."""
    from ansible_collections.hpc.stateless.plugins.module_utils._build.records import read_records  # noqa: E402
    from ansible_collections.hpc.stateless.plugins.module_utils._contract import labels  # noqa: E402

    packages: dict[str, dict[str, str]] = {}
    for layer in layers:
        ref = f"{prefix}/{layer}:latest"
        found = json.loads(_buildah("inspect", "--type", "image", ref))["OCIv1"]["config"].get("Labels") or {}
        if labels.has_package_record(found):
            packages[layer] = labels.packages_of(found)
            continue
        container = _buildah("from", "--pull-never", "--name", f"plan-bench-{os.getpid()}-{layer}", ref).strip()
        try:
            root = _buildah("mount", container).strip()
            packages[layer] = labels.packages_of(read_records(root))
        finally:
            subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return {layer: labels.installed_by_layer(packages[layer], packages.get(spec.get("parent"), {}))
            for layer, spec in layers.items()}


def freshness_check(layers: dict, installed: dict[str, dict[str, str]], cache_dir: str, max_age: float) -> dict:
    """One check as the plan makes it: one view over every layer's sources, each layer's updates against it."""
    from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import ArchiveView, pending_updates  # noqa: E402
    from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import layer_sources  # noqa: E402

    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    sources = [source for layer in layers for source in layer_sources(layer, layers)]
    view = ArchiveView.load(sources, arch=arch, cache_dir=cache_dir, max_age=max_age)
    updates = {layer: pending_updates(view.restricted(layer_sources(layer, layers)), installed[layer], "any")
               for layer in layers}
    return {"network": view.network, "states": view.states,
            "updates": {layer: [str(u) for u in found] for layer, found in updates.items()},
            "security_updates": {layer: sum(u.security for u in found) for layer, found in updates.items()}}


def noop_plan_seconds(runs: int, workdir: Path) -> list[float]:
    """Wall seconds of ansible-playbook running the plan tasks of every stage on the default inventory."""
    playbook = workdir / "noop-plan.yml"
    playbook.write_text(NOOP_PLAN_PLAYBOOK.format(tasks=REPO / "playbooks" / "tasks" / "plan_layers.yml"), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "BUILDAH_ISOLATION": "chroot"}
    samples = []
    for _run in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(["ansible-playbook", "-i", str(INVENTORY), str(playbook)], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False)
        samples.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"the no-op plan failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return samples


def measure_freshness(runs: int, workdir: Path) -> dict:
    import yaml  # pylint: disable=import-outside-toplevel

    data = yaml.safe_load((INVENTORY / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
    layers, prefix = data["hpc_stateless_layers"], data.get("hpc_stateless_image_prefix", "localhost/hpc-stateless")
    installed = installed_packages(prefix, layers)
    cache = str(workdir / "archive-cache")
    start = time.perf_counter()
    cold_result = freshness_check(layers, installed, cache, 300)
    cold = time.perf_counter() - start
    print(f"[plan_bench] freshness cold fetch {cold:.3f} s: {cold_result['network']}", file=sys.stderr, flush=True)
    warm, warm_samples, warm_result, _cpu = timed(lambda: freshness_check(layers, installed, cache, 0), runs)
    print(f"[plan_bench] freshness warm (conditional GET) {warm:.3f} s: {warm_result['network']}", file=sys.stderr, flush=True)
    within, within_samples, within_result, _cpu = timed(lambda: freshness_check(layers, installed, cache, 300), runs)
    print(f"[plan_bench] freshness within max_age {within:.3f} s: {within_result['network']}", file=sys.stderr, flush=True)
    noop = noop_plan_seconds(runs, workdir)
    print(f"[plan_bench] no-op plan {statistics.median(noop):.3f} s", file=sys.stderr, flush=True)
    return {
        "layers": list(layers), "goal_seconds": FRESHNESS_GOAL_SECONDS, "runs": runs,
        "installed_by_layer": {layer: len(found) for layer, found in installed.items()},
        "cold_seconds": round(cold, 4), "cold_network": cold_result["network"],
        "warm_median_seconds": round(warm, 4), "warm_samples": [round(x, 4) for x in warm_samples],
        "warm_network": warm_result["network"],
        "within_max_age_median_seconds": round(within, 4), "within_max_age_samples": [round(x, 4) for x in within_samples],
        "within_max_age_network": within_result["network"],
        "noop_plan_median_seconds": round(statistics.median(noop), 4), "noop_plan_samples": [round(x, 4) for x in noop],
        "states": within_result["states"], "updates": within_result["updates"],
        "security_updates": within_result["security_updates"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="only the goal case")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "plan.json"))
    parser.add_argument("--no-freshness", action="store_true",
                        help="leave out the freshness check on the default DAG (left out with --quick too)")
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
        freshness = None if args.quick or args.no_freshness else measure_freshness(args.runs, Path(tmp))
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
    if freshness is not None:
        report["freshness"] = freshness
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
    return 0 if all(row["met"] is not False for row in report["comparisons"]) else 1


if __name__ == "__main__":
    sys.exit(main())
