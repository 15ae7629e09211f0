# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The uniform ``comparisons`` block every benchmark writes into its JSON, and its table.

A comparison has two sides measured side by side in one run (A: the baseline or yardstick,
B: ours) and is judged as a ratio only: ``ratio = A median / B median``, higher is better for
B, and the goal is ``ratio >= goal_min_ratio``. Two kinds:

* ``ratio``  - both sides measured in the same run (the seed pipeline vs pack, a full build vs
  the rebuild after a leaf change, ...);
* ``budget`` - the issue gives an absolute budget (plan <= 2 s, boot to ready <= 10 s, ...):
  side A is the budget, B the measured median, the goal ``ratio >= 1``. These are the only
  figures that depend on the machine; the table says ``budget`` in their goal.
* ``reported`` rows carry ``goal_min_ratio: null`` and ``met: null``: both sides are shown,
  nothing is judged (the issue asks to report them side by side).

A score where more is better (recall, the share of decoys left quiet) is compared the other way
round, ``ratio = B median / A median`` (``higher_is_better``), so that a higher ratio is better
for B in every row.

``also`` holds the extra yes/no conditions of a goal (0 layers built, output no larger, same
verdict on every check); a goal is met when the ratio reaches its minimum and every condition
holds.

Each benchmark builds its rows from its own result dict with :func:`derive` (the definitions
live here, in one place, so that ``run_all.py`` derives the same rows from a result file
written before the block existed) and prints them with :func:`text_table`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

BUDGET = "budget"
RATIO = "ratio"
REPORTED = "reported"
# testinfra's ansible backend costs ~6 s per check (a 100-check suite ~600 s); the suite must take <= 30 s: 20x.
COMPLIANCE_GOAL_SPEEDUP = 600.0 / 30.0


def judge(ratio: Optional[float], goal_min_ratio: Optional[float], also: Optional[dict] = None) -> Optional[bool]:
    """True/False for a judged comparison, None for a reported one."""
    if goal_min_ratio is None:
        return None
    return ratio is not None and ratio >= goal_min_ratio and all((also or {}).values())


def comparison(name: str, a_label: str, a_median: float, b_label: str, b_median: float, goal: str,
               goal_min_ratio: Optional[float], *, kind: str = RATIO, unit: str = "s",
               a_samples: Optional[Iterable[float]] = None, b_samples: Optional[Iterable[float]] = None,
               also: Optional[dict] = None, note: str = "", higher_is_better: bool = False) -> dict[str, Any]:
    """One row of the block; ``ratio`` and ``met`` are computed here, never by hand. ``higher_is_better``:
    the figures are scores (more is better), ``ratio = B / A``."""
    if goal_min_ratio is None:
        kind = REPORTED
    a_median, b_median = float(a_median), float(b_median)
    top, bottom = (b_median, a_median) if higher_is_better else (a_median, b_median)
    ratio = round(top / bottom, 3) if bottom > 0 else None
    row: dict[str, Any] = {
        "name": name, "kind": kind, "unit": unit,
        "a_label": a_label, "a_median": round(a_median, 4),
        "b_label": b_label, "b_median": round(b_median, 4),
        "ratio": ratio, "goal": goal, "goal_min_ratio": goal_min_ratio,
        "also": dict(also or {}), "met": judge(ratio, goal_min_ratio, also), "note": note,
    }
    if higher_is_better:
        row["higher_is_better"] = True
    if a_samples is not None:
        row["a_samples"] = [round(float(s), 4) for s in a_samples]
    if b_samples is not None:
        row["b_samples"] = [round(float(s), 4) for s in b_samples]
    return row


def budget(name: str, budget_value: float, b_label: str, b_median: float, goal: str, **kwargs: Any) -> dict[str, Any]:
    """An absolute budget from the issue against the measured median: met when median <= budget."""
    return comparison(name, "budget", budget_value, b_label, b_median,
                      f"budget: {goal}", 1.0, kind=BUDGET, **kwargs)


def _build(data: dict[str, Any]) -> list[dict[str, Any]]:
    full, noop, leaf = data["full"], data["noop"], data["leaf"]
    noop_samples = [run["seconds"] for run in noop["runs"]]
    built = [run["built"] for run in noop["runs"]]
    goal_ratio = leaf["goal_ratio"]
    return [
        budget(f"no-op re-run of site.yml (median of {len(noop_samples)})",
               noop["goal_seconds"], "no-op re-run", noop["median_seconds"],
               f"<= {noop['goal_seconds']:g} s and 0 layers built", b_samples=noop_samples,
               also={"0 layers built": all(n == 0 for n in built)},
               note=f"full build {fmt_value(full['seconds'])} in the same run ({full['built']}/{full['layers']} layers): "
                    f"{full['seconds'] / noop['median_seconds']:.0f}x the no-op"),
        comparison(f"rebuild after touching role {leaf['role']} of leaf layer {leaf['layer']}",
                   f"full build ({full['built']} layers)", full["seconds"],
                   f"rebuild ({leaf['built']} of {leaf['layers']} layers)", leaf["seconds"],
                   f"<= {goal_ratio:.0%} of the full build (>= {1 / goal_ratio:g}x)", round(1 / goal_ratio, 3),
                   a_samples=[full["seconds"]], b_samples=[leaf["seconds"]]),
    ] + _suites(data.get("suites"))


def _suites(suites: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The full build from the release suite alone beside the default three suites (issue 27): reported."""
    if not suites:
        return []
    before, now = suites["release_only"], suites["all_suites"]
    return [comparison("full build of the DAG: roots from <release> only vs <release>, -updates, -security",
                       f"release suite only ({before['built']} layers)", before["seconds"],
                       f"three suites ({now['built']} layers)", now["seconds"], "reported", None,
                       a_samples=[before["seconds"]], b_samples=[now["seconds"]], note=suites.get("note", ""))]


def _compliance(data: dict[str, Any]) -> list[dict[str, Any]]:
    base, fast = data["baseline"], data["fast_path"]
    checks = data["suite_checks"]
    extrapolated = " (baseline extrapolated from fewer checks)" if base.get("extrapolated") else ""
    return [comparison(
        f"{checks}-check testinfra suite against one image",
        base["label"], base["suite_seconds"], fast["label"], fast["suite_seconds"],
        f">= {COMPLIANCE_GOAL_SPEEDUP:g}x (~600 s -> <= {data.get('goal_seconds', 30):g} s), same verdicts",
        COMPLIANCE_GOAL_SPEEDUP, a_samples=base["runs"], b_samples=fast["runs"],
        also={"same verdict on every check": not data.get("verdict_mismatches")},
        note=f"fast path {fast['suite_seconds']:g} s for {checks} checks{extrapolated}")] + _compliance_booted(data)


def _compliance_booted(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 28: the suite in the image booted under nspawn, and what it adds to verify.yml."""
    rows = []
    booted = data.get("booted")
    if booted:
        nsenter, local, suite = booted["nsenter"], booted["local"], booted["suite"]
        rows.append(comparison(
            "100 checks on the booted image: backend per command", nsenter["label"], nsenter["median_seconds"],
            local["label"], local["median_seconds"], "reported side by side", None,
            a_samples=nsenter["runs"], b_samples=local["runs"],
            also={"same verdict on every check": not booted.get("verdict_mismatches")}))
        rows.append(budget(f"compliance suite in the booted image ({suite['checks']} checks, one pytest process)",
                           suite["goal_seconds"], suite["label"], suite["median_seconds"],
                           f"<= {suite['goal_seconds']:g} s", b_samples=suite["runs"]))
    verify = data.get("verify")
    if verify:
        rows.append(comparison(
            "verify.yml on the default image (forced boot)", "without the suite", verify["without"]["median_seconds"],
            "with the suite", verify["with"]["median_seconds"], "reported side by side", None,
            a_samples=verify["without"]["runs"], b_samples=verify["with"]["runs"],
            note=f"the suite adds {verify['added_seconds']:g} s to every verify boot"))
    return rows


def _nspawn(data: dict[str, Any]) -> list[dict[str, Any]]:
    boot, per_task = data["boot_to_ready"], data["per_task"]
    buildah = per_task["buildah"]
    rows = [budget("boot to ready of a booted container", boot["goal_seconds"],
                   "hpc.stateless.nspawn session, start to running", boot["median_ready_seconds"],
                   f"<= {boot['goal_seconds']:g} s", b_samples=boot["ready_seconds"])]
    for side, label in (("nspawn_booted", "hpc.stateless.nspawn booted"),
                        ("nspawn_directory", "hpc.stateless.nspawn directory")):
        if side in per_task:
            rows.append(comparison(
                f"per-task cost, same 50 tasks ({label.split()[-1]} mode)",
                "containers.podman.buildah", buildah["median_per_task_seconds"],
                label, per_task[side]["median_per_task_seconds"], "reported side by side", None,
                a_samples=buildah["per_task_seconds"], b_samples=per_task[side]["per_task_seconds"]))
    return rows


PACK_BASELINES = {"cpio.zst": "find | cpio -o -H newc | gzip", "cpio.gz": "find | cpio -o -H newc | gzip",
                  "squashfs": "mksquashfs defaults"}


def _pack(data: dict[str, Any]) -> list[dict[str, Any]]:
    tree = data["tree"]
    size = f"{tree['bytes'] / 2**20:.0f} MiB"
    rows = []
    for fmt, result in data["results"].items():
        also = {"output no larger": result["ours_bytes"] <= result["baseline_bytes"]} if fmt == "cpio.zst" else {}
        rows.append(comparison(
            f"{fmt} of a {size} tree", PACK_BASELINES.get(fmt, "baseline"),
            result["baseline_median"], f"hpc.stateless.pack {fmt}", result["ours_median"],
            f">= {result['goal_speedup']:g}x" + (" and output no larger" if also else ""), result["goal_speedup"],
            a_samples=result["baseline_seconds"], b_samples=result["ours_seconds"], also=also,
            note=f"{result['baseline_bytes'] / 2**20:.0f} MiB vs {result['ours_bytes'] / 2**20:.0f} MiB"))
    synthetic = data.get("synthetic_tree") or {}
    rows.append(budget("peak memory of pack, largest process", data["memory_goal_mb"], "hpc.stateless.pack",
                       data["ours_peak_mb"], f"< {data['memory_goal_mb']:g} MB whatever the image size", unit="MB",
                       note=f"{synthetic['peak_mb']:g} MB on a synthetic {synthetic['bytes'] / 2**30:g} GiB / "
                            f"{synthetic['files']} file tree" if synthetic else ""))
    return rows


def _deploy(data: dict[str, Any]) -> list[dict[str, Any]]:
    render, publish = data["render"], data["publish"]
    samples = render.get("samples", {})
    mib = publish["published_mib"]
    return [
        budget(f"switch + render boot config for {render['nodes']} nodes ({render['files']} files)",
               render["goal_seconds"], "bootlink switch + bootconfig", render["switch_and_render_seconds"],
               f"<= {render['goal_seconds']:g} s", b_samples=samples.get("switch_and_render")),
        comparison(f"re-render after one node changed, {render['nodes']} nodes", "naive write of every file",
                   render["naive_write_all_seconds"], "bootconfig (writes changed files only)",
                   render["one_node_changed_seconds"], "reported", None,
                   a_samples=samples.get("naive_write_all"), b_samples=samples.get("one_node_changed")),
        comparison(f"publish + switch of {mib:g} MiB", "cp",
                   publish["cp_seconds"], "bootlink publish (fsync, sha256 verified) + switch",
                   publish["bootlink_publish_switch_seconds"], "reported: MB/s against cp", None,
                   a_samples=publish.get("samples", {}).get("cp"), b_samples=publish.get("samples", {}).get("bootlink"),
                   note=f"{publish['bootlink_mib_per_s']:g} MiB/s vs cp {publish['cp_mib_per_s']:g} MiB/s"),
        comparison(f"publish + switch of {mib:g} MiB, cp made durable", "cp + sync -f",
                   publish["cp_sync_seconds"], "bootlink publish + switch",
                   publish["bootlink_publish_switch_seconds"], "reported", None,
                   a_samples=publish.get("samples", {}).get("cp_sync"),
                   b_samples=publish.get("samples", {}).get("bootlink"),
                   note=f"{publish['bootlink_mib_per_s']:g} MiB/s vs cp + sync {publish['cp_sync_mib_per_s']:g} MiB/s"),
    ]


def _plan(data: dict[str, Any]) -> list[dict[str, Any]]:
    goal = data["goal"]
    case = goal["case"]
    row = next((c for c in data.get("cases", [])
                if (c["layers"], c["changed_files"]) == (case["layers"], case["changed_files"])), {})
    largest = max(data.get("cases", []), key=lambda c: (c["layers"], c["changed_files"]), default=None)
    note = ""
    if largest and (largest["layers"], largest["changed_files"]) != (case["layers"], case["changed_files"]):
        note = (f"{largest['layers']} layers x {largest['changed_files']} files: "
                f"{fmt_value(largest['full_median_s'])}")
    return [budget(f"plan {case['layers']} layers x {case['changed_files']} changed files", goal["max_seconds"],
                   "hpc.stateless.plan (keys + change mapping)", goal["measured_full_median_s"],
                   f"<= {goal['max_seconds']:g} s", b_samples=row.get("full_samples_s"), note=note)] \
        + (_freshness(data["freshness"]) if "freshness" in data else [])


def _freshness(fresh: dict[str, Any]) -> list[dict[str, Any]]:
    """The freshness check on the default DAG (issue 27): on top of the no-op plan, <= 1 s warm."""
    dag = f"{len(fresh['layers'])}-layer default DAG"
    noop = fresh["noop_plan_median_seconds"]
    pending = sum(len(found) for found in fresh["updates"].values())
    return [
        budget(f"freshness check of the {dag}, warm (conditional GET per source)", fresh["goal_seconds"],
               "archive view + pending updates", fresh["warm_median_seconds"], f"<= {fresh['goal_seconds']:g} s",
               b_samples=fresh["warm_samples"],
               note=f"answers: {', '.join(sorted(set(fresh['warm_network'].values())))}; no-op plan {fmt_value(noop)}"),
        budget(f"freshness check of the {dag}, within max_age (no request)", fresh["goal_seconds"],
               "archive view + pending updates", fresh["within_max_age_median_seconds"],
               f"<= {fresh['goal_seconds']:g} s", b_samples=fresh["within_max_age_samples"],
               note=f"{pending} pending updates found"),
        comparison(f"no-op plan of the {dag} and the freshness check on top of it", "no-op plan (ansible-playbook)",
                   noop, "freshness check, warm", fresh["warm_median_seconds"], "reported side by side", None,
                   a_samples=fresh["noop_plan_samples"], b_samples=fresh["warm_samples"],
                   note=f"cold fetch (empty cache) {fmt_value(fresh['cold_seconds'])}"),
    ]


def edit_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The row of benchmarks/edit_bench.py (written into its result file, like the newer benchmarks' rows)."""
    steps = data.get("steps_median_s", {})
    note = "median per step: " + ", ".join(f"{k} {fmt_value(v)}" for k, v in steps.items())
    return [budget("edit -> served (leaf variable, whole site.yml)", data["goal"]["max_seconds"], "site.yml",
                   data["median_s"], f"<= {data['goal']['max_seconds']:g} s", b_samples=data.get("samples_s"), note=note)]


def subject(benchmark: str, data: dict[str, Any]) -> str:
    """What a result file measured on (image, tree, inventory), for the report."""
    if benchmark == "build":
        return f"inventory {data.get('inventory', '?')}, built from scratch under a private prefix"
    if benchmark == "arch":
        return (f"inventory {data.get('inventory', '?')}, built for {', '.join(data.get('builds', {})) or '?'} from "
                f"scratch on a {data.get('host_arch', '?')} host")
    if benchmark == "pack":
        tree = data.get("tree", {})
        return f"{tree.get('source', '?')} ({tree.get('bytes', 0) / 2**20:.0f} MiB, {tree.get('entries', '?')} entries)"
    if benchmark == "deploy":
        return f"{data.get('render', {}).get('nodes', '?')} synthetic nodes; published {data.get('publish', {}).get('source', '?')}"
    if benchmark == "plan":
        return "synthetic DAGs and changed-file lists"
    return str(data.get("image", "?"))


DERIVERS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "build": _build, "compliance": _compliance, "nspawn": _nspawn,
    "pack": _pack, "deploy": _deploy, "plan": _plan,
}


def derive(benchmark: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparisons of ``benchmark`` from its result dict (KeyError: a field the table needs is missing)."""
    return DERIVERS[benchmark](data)


def fmt_value(value: Optional[float], unit: str = "s") -> str:
    """A median for people: 3 significant digits, no exponent."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}"


def fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.0f}x" if ratio >= 100 else f"{ratio:.1f}x" if ratio >= 10 else f"{ratio:.2f}x"


def fmt_met(met: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "-"}[met]


def text_table(rows: list[dict[str, Any]]) -> str:
    """The block as plain text, the way each benchmark ends its output."""
    lines = [("comparison", "A (median)", "B (median)", "A/B", "goal", "met")]
    for row in rows:
        lines.append((row["name"], f"{row['a_label']}: {fmt_value(row['a_median'], row['unit'])}",
                      f"{row['b_label']}: {fmt_value(row['b_median'], row['unit'])}", fmt_ratio(row["ratio"]),
                      row["goal"], fmt_met(row["met"])))
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * width for width in widths))
    return "comparisons (ratio = A/B, judged against the goal):\n" + "\n".join(out)


def write_results(results: dict[str, Any], output: Path) -> int:
    """Write a benchmark's ``results`` (with its ``comparisons`` block) to ``output``, print the
    table, and return the benchmark's exit status: 0 when no judged goal is missed, else 1."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    print("\n" + text_table(results["comparisons"]))
    print(f"\nJSON: {output}")
    return 0 if all(row["met"] is not False for row in results["comparisons"]) else 1
