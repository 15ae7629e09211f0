# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make bench`: run every benchmark, then one table of every comparison, its ratio and its goal.

Each benchmarks/<name>_bench.py measures its comparisons side by side in one run and writes
benchmarks/results/<name>.json. This runner starts them one after another (a step log says
which one runs and for how long), reads their JSON and writes bench/results.json and
bench/results.md. Figures are judged as ratios only: ``ratio`` is how many times the first
side's time the second side takes less (baseline / ours), or for a budget, budget / measured.

    python benchmarks/run_all.py [--only pack,plan] [--report-only] [--output-dir bench]

Exit status: 0 when every benchmark ran and every goal is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


@dataclass
class Comparison:
    benchmark: str
    name: str
    a_label: str
    a_seconds: float
    b_label: str
    b_seconds: float
    goal: str
    goal_ratio: float | None  # None: reported, not judged
    unit: str = "s"

    @property
    def ratio(self) -> float:
        return self.a_seconds / self.b_seconds if self.b_seconds else float("inf")

    @property
    def met(self) -> bool | None:
        return None if self.goal_ratio is None else self.ratio >= self.goal_ratio

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 2), "met": self.met}


def _median(values: list[float]) -> float:
    return statistics.median(values)


def build_rows(data: dict[str, Any]) -> list[Comparison]:
    full = data["full"]["seconds"]
    leaf = data["leaf"]
    return [
        Comparison("build", "no-op rerun (0 layers built) vs full build", "full build", full,
                   "no-op rerun", data["noop"]["median_seconds"], "no-op >= 20x faster than a full build", 20.0),
        Comparison("build", f"rebuild after a change to {leaf['role']} vs full build", "full build", full,
                   f"rebuild of {leaf['layer']} only", leaf["seconds"],
                   f"incremental <= {leaf['goal_ratio']:g} of full (>= {1 / leaf['goal_ratio']:g}x)",
                   1 / leaf["goal_ratio"]),
    ]


def compliance_rows(data: dict[str, Any]) -> list[Comparison]:
    return [Comparison("compliance", f"{data['suite_checks']}-check suite against one image",
                       data["baseline"]["label"], data["baseline"]["suite_seconds"],
                       data["fast_path"]["label"], data["fast_path"]["suite_seconds"],
                       "suite <= 30 s where the ansible route takes ~600 s (>= 20x)", 20.0)]


def nspawn_rows(data: dict[str, Any]) -> list[Comparison]:
    boot = data["boot_to_ready"]
    per_task = data["per_task"]
    return [
        Comparison("nspawn", "boot to ready (systemd running) vs its budget", "budget", boot["goal_seconds"],
                   "systemd-nspawn -b to ready", boot["median_ready_seconds"],
                   f"ready <= {boot['goal_seconds']:g} s", 1.0),
        Comparison("nspawn", "per-task cost of the same 50 tasks", "containers.podman.buildah",
                   per_task["buildah"]["median_per_task_seconds"], "hpc.stateless.nspawn (booted)",
                   per_task["nspawn_booted"]["median_per_task_seconds"], "reported (the verify connection)", None),
    ]


def pack_rows(data: dict[str, Any]) -> list[Comparison]:
    labels = {"cpio.zst": "find | cpio -o -H newc | gzip", "cpio.gz": "find | cpio -o -H newc | gzip",
              "squashfs": "mksquashfs defaults"}
    rows = [Comparison("pack", f"{fmt} of a {data['tree']['bytes'] / 2**20:.0f} MiB tree", labels.get(fmt, "baseline"),
                       result["baseline_median"], f"hpc.stateless.pack {fmt}", result["ours_median"],
                       f">= {result['goal_speedup']:g}x faster", result["goal_speedup"])
            for fmt, result in data["results"].items()]
    rows.append(Comparison("pack", "peak memory of pack vs its budget", "budget", data["memory_goal_mb"],
                           "largest process of pack", data["ours_peak_mb"], f"< {data['memory_goal_mb']:g} MB", 1.0,
                           unit="MB"))
    return rows


def deploy_rows(data: dict[str, Any]) -> list[Comparison]:
    render = data["render"]
    publish = data["publish"]
    return [
        Comparison("deploy", f"switch + render for {render['nodes']} nodes vs its budget", "budget",
                   render["goal_seconds"], "bootconfig + bootlink", render["switch_and_render_seconds"],
                   f"<= {render['goal_seconds']:g} s", 1.0),
        Comparison("deploy", f"one node changed among {render['nodes']}", "rewrite every file",
                   render["naive_write_all_seconds"], "bootconfig (changed files only)",
                   render["one_node_changed_seconds"], "reported", None),
        Comparison("deploy", f"publish {publish['published_mib']:g} MiB", "cp + sync", publish["cp_sync_seconds"],
                   "bootlink publish (sha256 verified) + switch", publish["bootlink_publish_switch_seconds"],
                   "reported (bootlink also verifies every checksum)", None),
    ]


def plan_rows(data: dict[str, Any]) -> list[Comparison]:
    goal = data["goal"]
    case = goal["case"]
    return [Comparison("plan", f"plan {case['layers']} layers x {case['changed_files']} changed files vs its budget",
                       "budget", goal["max_seconds"], "hpc.stateless.plan", goal["measured_full_median_s"],
                       f"<= {goal['max_seconds']:g} s", 1.0)]


EXTRACTORS: dict[str, Callable[[dict[str, Any]], list[Comparison]]] = {
    "build": build_rows, "compliance": compliance_rows, "nspawn": nspawn_rows,
    "pack": pack_rows, "deploy": deploy_rows, "plan": plan_rows,
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(rows: list[Comparison], failures: dict[str, str]) -> str:
    lines = ["| benchmark | comparison | A | A median | B | B median | ratio A/B | goal | met |",
             "|---|---|---|---:|---|---:|---:|---|---|"]
    for row in rows:
        met = {True: "yes", False: "**NO**", None: "-"}[row.met]
        cells = [row.benchmark, row.name, row.a_label, f"{row.a_seconds:.3g} {row.unit}", row.b_label,
                 f"{row.b_seconds:.3g} {row.unit}", f"{row.ratio:.2f}", row.goal, met]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    for name, reason in sorted(failures.items()):
        lines.append(f"| {name} | did not run: {_cell(reason)} | | | | | | | **NO** |")
    return "\n".join(lines) + "\n"


def run_benchmark(name: str, step: str) -> str | None:
    """Run benchmarks/<name>_bench.py, streaming its output; the failure reason, or None."""
    result = RESULTS / f"{name}.json"
    started = time.time()
    print(f"==> {step} {name}: python benchmarks/{name}_bench.py", flush=True)
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{name}_bench.py")], cwd=REPO, check=False)
    print(f"==> {step} {name}: {'done' if proc.returncode == 0 else f'exit {proc.returncode}'} "
          f"after {time.time() - started:.0f} s", flush=True)
    if proc.returncode != 0:
        return f"exit status {proc.returncode}"
    if not result.exists() or result.stat().st_mtime < started:
        return f"{result.relative_to(REPO)} was not written"
    return None


def collect(names: list[str], failures: dict[str, str]) -> list[Comparison]:
    rows: list[Comparison] = []
    for name in names:
        if name in failures:
            continue
        path = RESULTS / f"{name}.json"
        try:
            rows += EXTRACTORS[name](json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            failures[name] = f"no {path.relative_to(REPO)} (run the benchmark)"
        except (KeyError, TypeError, ValueError) as exc:
            failures[name] = f"{path.relative_to(REPO)} lacks what the table needs ({exc!r})"
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--only", default="", help="comma-separated benchmarks (default: all of "
                        + ", ".join(EXTRACTORS) + ")")
    parser.add_argument("--report-only", action="store_true", help="run nothing; tabulate the existing results")
    parser.add_argument("--output-dir", type=Path, default=REPO / "bench")
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(EXTRACTORS)
    unknown = sorted(set(names) - set(EXTRACTORS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(EXTRACTORS)}")

    failures: dict[str, str] = {}
    if not args.report_only:
        for index, name in enumerate(names, 1):
            reason = run_benchmark(name, f"[{index}/{len(names)}]")
            if reason:
                failures[name] = reason
    rows = collect(names, failures)

    args.output_dir.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "benchmarks": names,
              "comparisons": [row.as_dict() for row in rows], "did_not_run": failures}
    (args.output_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    table = render_markdown(rows, failures)
    (args.output_dir / "results.md").write_text("# hpc.stateless benchmarks\n\n" + table, encoding="utf-8")
    print("\n" + table)
    unmet = [row for row in rows if row.met is False]
    print(f"{len(rows)} comparisons, {sum(row.met is True for row in rows)} goals met, {len(unmet)} not met, "
          f"{len(failures)} benchmark(s) did not run; written to {args.output_dir}/results.json and results.md")
    return 1 if unmet or failures else 0


if __name__ == "__main__":
    sys.exit(main())
