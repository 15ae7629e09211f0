# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make bench`: run every benchmark on the default images, then one table of every comparison.

Each benchmarks/<name>_bench.py measures its comparisons side by side in one run and writes
benchmarks/results/<name>.json with a uniform ``comparisons`` block (benchmarks/comparisons.py).
This runner first makes sure the default images are built and packed (``ansible-playbook -i
inventory site.yml``: seconds when they are cached), starts the benchmarks one after another on
those images with a step log (``[n/N] name``, elapsed time, the benchmark's own output as it
comes), then writes bench/results.json and bench/results.md. Figures are judged as ratios only
(A median / B median, or B / A for scores such as recall: higher is better for B); see docs/bench.md.

    python benchmarks/run_all.py [--only pack,plan] [--report-only] [--no-run] [--quick]
                                 [--no-images] [--dry-run] [--output-dir bench]

Exit status: 0 every benchmark ran and every judged goal is met (or --report-only);
1 a goal is not met; 3 a benchmark failed to run or left no usable JSON; 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import comparisons

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
INVENTORY = "inventory"
HEARTBEAT_SECONDS = 60.0
EXIT_GOAL_NOT_MET = 1
EXIT_BENCHMARK_FAILED = 3


@dataclass
class Defaults:
    """The embedded default images the benchmarks run on (from the default inventory)."""

    prefix: str
    image: str  # image name (its pack lands in build/images/<image>/<version>)
    image_layer: str
    root_layer: str

    @property
    def image_ref(self) -> str:
        return f"{self.prefix}/{self.image_layer}:latest"

    @property
    def root_ref(self) -> str:
        return f"{self.prefix}/{self.root_layer}:latest"

    def newest_pack(self) -> Optional[Path]:
        manifests = sorted((REPO / "build" / "images" / self.image).glob("*/manifest.json"),
                           key=lambda path: path.stat().st_mtime)
        return manifests[-1].parent if manifests else None


def load_defaults(inventory: Path = REPO / INVENTORY) -> Defaults:
    import yaml  # pylint: disable=import-outside-toplevel

    data = yaml.safe_load((inventory / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
    layers, images = data["hpc_stateless_layers"], data["hpc_stateless_images"]
    image = "compute" if "compute" in images else sorted(images)[0]
    layer = images[image]["layer"]
    root = layer
    while "parent" in layers[root]:
        root = layers[root]["parent"]
    return Defaults(data.get("hpc_stateless_image_prefix", "localhost/hpc-stateless").rstrip("/"), image, layer, root)


@dataclass
class Benchmark:
    name: str
    typical: str  # duration of a full run on the 2-core development host
    args: Callable[[Defaults], list[str]]
    quick_args: list[str]
    on_default_images: bool = False  # runs on what `site.yml` builds and packs: the images step goes first
    needs: Callable[[Defaults], list[str]] = lambda _d: []  # image refs that must exist

    @property
    def script(self) -> Path:
        return REPO / "benchmarks" / f"{self.name}_bench.py"


def bench_argv(bench: Benchmark, defaults: Defaults, quick: bool, output: Path) -> list[str]:
    """The benchmark's command line; with ``quick`` its quick options replace the same options."""
    argv, base = [], bench.args(defaults)
    while base:
        option, value = base[0], base[1:2]
        if not (quick and option in bench.quick_args):
            argv += [option, *value]
        base = base[1 + len(value):]
    return [sys.executable, rel(bench.script), *argv, *(bench.quick_args if quick else []), "--output", rel(output)]


def _deploy_args(defaults: Defaults) -> list[str]:
    pack = defaults.newest_pack()
    return ["--src", rel(pack)] if pack else []


# Table order (the issue's); the run order is cheapest first.
BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("build", "~15 min", lambda d: ["--inventory", INVENTORY],
              ["--inventory", "tests/integration/inventory", "--noop-runs", "1"]),
    Benchmark("compliance", "~17 min", lambda d: ["--image", d.image_ref],
              ["--fast-runs", "2", "--ansible-checks", "5"], True, lambda d: [d.image_ref]),
    Benchmark("nspawn", "~10 min", lambda d: ["--image", d.root_ref],
              ["--boots", "2", "--rounds", "1"], True, lambda d: [d.root_ref]),
    Benchmark("pack", "~26 min", lambda d: ["--image", d.image_ref], ["--runs", "1"], True, lambda d: [d.image_ref]),
    Benchmark("secret_scan", "~3 min", lambda d: ["--image", d.image_ref], ["--runs", "1"], True,
              lambda d: [d.image_ref]),
    Benchmark("deploy", "~3 min", _deploy_args, ["--runs", "1"], True),
    Benchmark("plan", "~30 s", lambda d: [], ["--quick", "--runs", "3"]),
    Benchmark("diff", "~2 min", _deploy_args, ["--runs", "1"], True),
    Benchmark("boot", "~15 min", _deploy_args, ["--runs", "1"], True),
    Benchmark("hwprofile", "~10 min", lambda d: ["--image", d.image_ref], ["--boots", "1"], True,
              lambda d: [d.image_ref]),
    Benchmark("peer", "~8 min", lambda d: [], ["--quick"]),
    Benchmark("storm", "~10 min", lambda d: ["--plot", "docs/images/storm.svg"],
              ["--quick", "--plot", "build/storm-quick.svg"]),
    Benchmark("connection", "~10 min", lambda d: ["--image", d.root_ref], ["--rounds", "1"], True,
              lambda d: [d.root_ref]),
    Benchmark("rootless", "~8 min", lambda d: ["--inventory", INVENTORY, "--bootstrap-pairs", "3"],
              ["--inventory", "tests/integration/rootless_inventory"]),
    Benchmark("rollout", "~8 min", lambda d: ["--nodes", "2,4,8"], ["--nodes", "2"]),
    Benchmark("edit", "~4 min", lambda d: [], ["--runs", "1"], True, lambda d: [d.image_ref]),
    Benchmark("lynis", "~3 min (+5 min once for the plain image)", lambda d: ["--image", d.image_ref], ["--runs", "1"],
              True, lambda d: [d.image_ref]),
    Benchmark("verify_stress", "~20 min (20 verify boots with every CPU busy)", lambda d: [], ["--quick"], True,
              lambda d: [d.image_ref]),
    Benchmark("openscap", "~6 min (+5 min once for the plain image, shared with lynis)", lambda d: ["--image", d.image_ref],
              [], True, lambda d: [d.image_ref]),
    Benchmark("image", "~4 min on a quiet host (make image in a fresh clone, from nothing)", lambda d: [],
              ["--no-packages"]),
    Benchmark("arch", "the amd64 build (~15 min) + the arm64 one under emulation", lambda d: ["--inventory", INVENTORY],
              ["--inventory", "tests/integration/inventory"]),
)}
RUN_ORDER = ["plan", "secret_scan", "deploy", "diff", "boot", "hwprofile", "nspawn", "connection", "rollout", "compliance",
             "peer", "storm", "rootless", "edit", "lynis", "verify_stress", "openscap", "build", "image", "arch", "pack"]


@dataclass
class Outcome:
    name: str
    status: str = "not run"  # ok | failed | recorded (tabulated without running)
    command: list[str] = field(default_factory=list)
    exit_status: Optional[int] = None
    seconds: Optional[float] = None
    results_file: str = ""
    results_written: Optional[str] = None
    reason: str = ""
    derived: bool = False  # rows derived from a result file written before the comparisons block
    subject: str = ""  # what it measured on: image, tree, inventory


def log(message: str) -> None:
    print(message, flush=True)


def fmt_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def stream(argv: list[str], tag: str, log_file: Path) -> int:
    """Run ``argv``, printing each line of its output (both streams) prefixed with the step and
    its elapsed time, a heartbeat when it is silent for a minute, and a copy in ``log_file``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    lines: queue.Queue = queue.Queue()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w", encoding="utf-8") as copy, \
            subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1) as proc:
        def pump() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        last = time.monotonic()
        while True:
            try:
                line = lines.get(timeout=5)
            except queue.Empty:
                if time.monotonic() - last >= HEARTBEAT_SECONDS:
                    log(f"{tag} {fmt_elapsed(time.monotonic() - started)}] ... still running")
                    last = time.monotonic()
                continue
            if line is None:
                break
            copy.write(line)
            log(f"{tag} {fmt_elapsed(time.monotonic() - started)}] {line.rstrip()}")
            last = time.monotonic()
        return proc.wait()


def mtime_iso(path: Path) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))


def rows_of(name: str, data: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """(rows, derived): the file's ``comparisons`` block, or rows derived from its fields."""
    block = data.get("comparisons")
    derived = block is None
    rows = comparisons.derive(name, data) if derived else [dict(row) for row in block]
    for row in rows:
        for key in ("name", "a_label", "a_median", "b_label", "b_median", "goal", "goal_min_ratio"):
            if key not in row:
                raise KeyError(f"comparison {row.get('name', '?')!r} has no {key!r}")
        # The verdict follows from the figures alone, whoever wrote the block.
        row["met"] = comparisons.judge(row.get("ratio"), row["goal_min_ratio"], row.get("also"))
    return rows, derived


def collect(outcome: Outcome, path: Path) -> list[dict[str, Any]]:
    """The rows of one result file; on a problem the outcome is failed and says why."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows, outcome.derived = rows_of(outcome.name, data)
        outcome.subject = comparisons.subject(outcome.name, data)
    except FileNotFoundError:
        outcome.status, outcome.reason = "failed", f"no {rel(path)}: run the benchmark"
        return []
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        outcome.status, outcome.reason = "failed", f"{rel(path)} lacks what the table needs ({exc})"
        return []
    outcome.results_file, outcome.results_written = rel(path), mtime_iso(path)
    return [{"benchmark": outcome.name, **row, "results_written": outcome.results_written} for row in rows]


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def run_one(bench: Benchmark, defaults: Defaults, args: argparse.Namespace, tag: str,
            results_dir: Path) -> tuple[Outcome, list[dict[str, Any]]]:
    path = results_dir / f"{bench.name}.json"
    argv = bench_argv(bench, defaults, args.quick, path)
    outcome = Outcome(bench.name, command=argv)
    missing = [ref for ref in bench.needs(defaults) if not image_exists(ref)]
    if missing:
        outcome.status = "failed"
        outcome.reason = f"image {', '.join(missing)} not found: build it (make image) or drop --no-images"
        log(f"{tag}] {bench.name}: {outcome.reason}")
        return outcome, []
    before = path.stat().st_mtime_ns if path.exists() else None
    log(f"{tag}] {bench.name}: python {shlex.join(argv[1:])}  (a full run takes {bench.typical} here)")
    started = time.monotonic()
    outcome.exit_status = stream(argv, f"{tag} {bench.name}", args.output_dir / "logs" / f"{bench.name}.log")
    outcome.seconds = round(time.monotonic() - started, 1)
    fresh = path.exists() and path.stat().st_mtime_ns != before
    if not fresh:
        outcome.status = "failed"
        outcome.reason = f"exit status {outcome.exit_status}, {rel(path)} not written"
        rows: list[dict[str, Any]] = []
    else:
        outcome.status = "ok"
        rows = collect(outcome, path)
        if outcome.status == "ok" and outcome.exit_status != 0:
            if any(row["met"] is False for row in rows):
                outcome.reason = f"exit status {outcome.exit_status}: its own goal check"
            else:
                outcome.status = "failed"
                outcome.reason = (f"exit status {outcome.exit_status} with every goal met: see "
                                  f"{rel(args.output_dir / 'logs' / (bench.name + '.log'))}")
    log(f"{tag}] {bench.name}: {outcome.status} after {fmt_elapsed(outcome.seconds)}"
        + (f" ({outcome.reason})" if outcome.reason else ""))
    return outcome, rows


def image_exists(ref: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", ref], capture_output=True,
                          check=False).returncode == 0


def ensure_images(args: argparse.Namespace, tag: str) -> Optional[str]:
    """Build (or find cached) and pack the default images; the failure reason, or None."""
    argv = [shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook"),
            "-i", INVENTORY, "site.yml"]
    log(f"{tag}] default images: {shlex.join(['ansible-playbook', *argv[1:]])}  "
        "(seconds when cached; a cold host builds the default DAG, ~12 min)")
    started = time.monotonic()
    status = stream(argv, f"{tag} images", args.output_dir / "logs" / "images.log")
    log(f"{tag}] default images: {'ok' if status == 0 else f'exit status {status}'} after "
        f"{fmt_elapsed(time.monotonic() - started)}")
    return None if status == 0 else f"default images step (ansible-playbook site.yml) exit status {status}"


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    rows, outcomes = report["comparisons"], report["benchmarks"]
    title = "# hpc.stateless benchmarks" + (" (QUICK smoke run: figures not comparable)" if report["quick"] else "")
    host = report["host"]
    lines = [title, "",
             (f"{report['created']}, {host['cpus']} CPUs, load {host['loadavg_start']:.1f} at start. " if report["ran"]
              else f"{report['created']}: tabulated from recorded results (nothing run; see when each was written). ")
             + "A is the baseline or budget, B ours; ratio = A median / B median, B / A for scores such as recall "
             "(higher is better for B), "
             "judged against the goal's minimum ratio. `budget` goals are the issues' absolute limits "
             "(A = the budget). See docs/bench.md.", "",
             "| benchmark | comparison | A median | B median | ratio | goal | met |",
             "|---|---|---:|---:|---:|---|---|"]
    for row in rows:
        unit = row.get("unit", "s")
        lines.append("| " + " | ".join(cell(c) for c in (
            row["benchmark"], row["name"],
            f"{row['a_label']}: {comparisons.fmt_value(row['a_median'], unit)}",
            f"{row['b_label']}: {comparisons.fmt_value(row['b_median'], unit)}",
            comparisons.fmt_ratio(row.get("ratio")), row["goal"],
            {True: "yes", False: "**NO**", None: "-"}[row["met"]])) + " |")
    for outcome in outcomes:
        if outcome["status"] == "failed":
            lines.append(f"| {outcome['name']} | failed: {cell(outcome['reason'])} | | | | | **NO** |")
    notes = []
    for row in rows:
        details = [row["note"]] if row.get("note") else []
        details += [f"{key}: {'yes' if value else 'NO'}" for key, value in (row.get("also") or {}).items()]
        if details:
            notes.append(f"- {row['benchmark']}, {row['name']}: {'; '.join(details)}")
    if notes:
        lines += ["", "Details:", "", *notes]
    lines += ["", "| benchmark | measured on | status | ran for | results written | command |",
              "|---|---|---|---:|---|---|"]
    for outcome in outcomes:
        lines.append("| " + " | ".join(cell(c) for c in (
            outcome["name"], outcome["subject"] or "-",
            outcome["status"] + (f": {outcome['reason']}" if outcome["reason"] else ""),
            fmt_elapsed(outcome["seconds"]) if outcome["seconds"] is not None else "-",
            (outcome["results_written"] or "-") + (" (fields, no comparisons block)" if outcome["derived"] else ""),
            f"`{shlex.join(outcome['command'][1:])}`" if outcome["command"] else "-")) + " |")
    lines += ["", summary_line(report)]
    return "\n".join(lines) + "\n"


def summary_line(report: dict[str, Any]) -> str:
    summary = report["summary"]
    failed = summary["benchmarks_failed"]
    return (f"{summary['comparisons']} comparisons, {summary['judged']} judged: {summary['met']} goals met, "
            f"{summary['not_met']} not met" + (f" ({', '.join(summary['not_met_names'])})" if summary['not_met'] else "")
            + f"; {len(failed)} benchmark(s) failed" + (f" ({', '.join(failed)})" if failed else ""))


def build_report(names: list[str], outcomes: dict[str, Outcome], rows: list[dict[str, Any]],
                 args: argparse.Namespace, defaults: Optional[Defaults], load_start: float) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda row: list(BENCHMARKS).index(row["benchmark"]))
    judged = [row for row in ordered if row["met"] is not None]
    not_met = [row for row in judged if row["met"] is False]
    failed = [name for name in names if outcomes[name].status == "failed"]
    status = (EXIT_BENCHMARK_FAILED if failed else
              EXIT_GOAL_NOT_MET if not_met and not args.report_only else 0)
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": ["benchmarks/run_all.py", *(args.argv or [])],
        "quick": args.quick, "ran": not args.no_run, "report_only": args.report_only,
        "host": {"cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()[0]},
        "default_images": None if defaults is None else {
            "prefix": defaults.prefix, "image": defaults.image, "image_ref": defaults.image_ref,
            "root_ref": defaults.root_ref},
        "benchmarks": [vars(outcomes[name]) for name in sorted(names, key=list(BENCHMARKS).index)],
        "comparisons": ordered,
        "summary": {"comparisons": len(ordered), "judged": len(judged), "met": len(judged) - len(not_met),
                    "not_met": len(not_met), "not_met_names": [f"{r['benchmark']}: {r['name']}" for r in not_met],
                    "benchmarks_failed": failed, "exit_status": status},
    }


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0],
                                     epilog="Benchmarks: " + ", ".join(BENCHMARKS) + ". See docs/bench.md.")
    parser.add_argument("--only", default="", help="comma-separated benchmarks to run (default: all)")
    parser.add_argument("--report-only", action="store_true",
                        help="a goal not met is reported in the table but does not fail the exit status")
    parser.add_argument("--no-run", action="store_true",
                        help="run nothing: tabulate the result files already in --results-dir")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run with few repetitions (build on the small test inventory); results "
                             "go to <output-dir>/raw, never over benchmarks/results; figures not comparable")
    parser.add_argument("--no-images", action="store_true",
                        help="do not run site.yml first; use the default images as they are")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and commands, run nothing")
    parser.add_argument("--output-dir", type=Path, help="where results.json/.md and logs go "
                        "(default: bench, or bench/quick with --quick)")
    parser.add_argument("--results-dir", type=Path, help="where the benchmarks write their JSON "
                        "(default: benchmarks/results, or <output-dir>/raw with --quick)")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    args.names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    args.output_dir = (args.output_dir or REPO / "bench" / ("quick" if args.quick else "")).resolve()
    args.results_dir = (args.results_dir or (args.output_dir / "raw" if args.quick else RESULTS)).resolve()
    return args


def tabulate(args: argparse.Namespace) -> tuple[dict[str, Outcome], list[dict[str, Any]]]:
    """--no-run: the rows of the result files already in the results directory."""
    log(f"bench: tabulating {', '.join(args.names)} from {rel(args.results_dir)} (nothing is run)")
    outcomes, rows = {}, []
    for name in args.names:
        outcomes[name] = Outcome(name, status="recorded")
        rows += collect(outcomes[name], args.results_dir / f"{name}.json")
    return outcomes, rows


def plan_steps(args: argparse.Namespace, defaults: Defaults) -> tuple[bool, list[str]]:
    """(images step first?, benchmarks in run order)."""
    order = [name for name in RUN_ORDER if name in args.names]
    return not args.no_images and any(BENCHMARKS[name].on_default_images for name in order), order


def run(args: argparse.Namespace, defaults: Defaults) -> tuple[dict[str, Outcome], list[dict[str, Any]], bool]:
    """Run the images step and the benchmarks: (outcomes, rows, interrupted)."""
    images, order = plan_steps(args, defaults)
    total = len(order) + images
    outcomes = {name: Outcome(name) for name in args.names}
    rows: list[dict[str, Any]] = []
    step, image_failure = 0, None
    try:
        if images:
            step += 1
            image_failure = ensure_images(args, f"[{step}/{total}")
        for name in order:
            step += 1
            bench = BENCHMARKS[name]
            if image_failure and bench.on_default_images:
                outcomes[name].status, outcomes[name].reason = "failed", image_failure
                log(f"[{step}/{total}] {name}: not run: {image_failure}")
                continue
            outcomes[name], got = run_one(bench, defaults, args, f"[{step}/{total}", args.results_dir)
            rows += got
    except KeyboardInterrupt:
        current = order[step - 1 - images] if step > images else None
        if current:
            outcomes[current].status, outcomes[current].reason = "failed", "interrupted"
        log(f"[{step}/{total}] interrupted: writing the report of what finished")
        return outcomes, rows, True
    return outcomes, rows, False


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    defaults, interrupted = None, False
    if args.no_run:
        outcomes, rows = tabulate(args)
    else:
        defaults = load_defaults()
        images, order = plan_steps(args, defaults)
        log(f"bench: {len(order)} benchmark(s) in this order: {', '.join(order)}"
            f"{' (quick smoke run)' if args.quick else ''}; default images {defaults.prefix} "
            f"(image {defaults.image} = layer {defaults.image_layer}); results in {rel(args.results_dir)}, "
            f"report in {rel(args.output_dir)}")
        if args.dry_run:
            steps = ([f"images: ansible-playbook -i {INVENTORY} site.yml"] if images else []) + [
                f"{name}: python " + shlex.join(bench_argv(BENCHMARKS[name], defaults, args.quick,
                                                           args.results_dir / f"{name}.json")[1:])
                for name in order]
            for index, text in enumerate(steps, 1):
                log(f"[{index}/{len(steps)}] {text}")
            return 0
        outcomes, rows, interrupted = run(args, defaults)

    report = build_report(args.names, outcomes, rows, args, defaults, load_start)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "results.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    markdown = render_markdown(report)
    (args.output_dir / "results.md").write_text(markdown, encoding="utf-8")
    log("\n" + markdown)
    log(f"written: {rel(args.output_dir / 'results.json')}, {rel(args.output_dir / 'results.md')}; "
        f"exit status {report['summary']['exit_status']}")
    return 128 + signal.SIGINT if interrupted else report["summary"]["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
