# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rolling update on the test cluster: time to roll N nodes with batch sizes 1 and N/2.

For each N (default 2, 4, 8 compute containers) a test cluster of booted images is started
(tests/integration/cluster_support.py: a slurmctld controller and N slurmd nodes, each a
systemd-nspawn container that boots whatever the boot tree serves). Version B of the compute
image is deployed and ``playbooks/rolling_update.yml`` rolls every node onto it (canary of 1,
then batches of 1); then A is deployed again and the play rolls back with batches of N/2. While
the play runs, every node's Slurm record is sampled (``scontrol show node``) to time each
reboot as Slurm sees it: from the reboot issued (REBOOT_ISSUED) to the node back in service
(a state without DOWN/DRAIN/REBOOT and a new BootTime). The harness adds the boot alone (unpack
of the artifact + systemd up).

Reported, nothing judged (the issue gives no goal): per roll the wall time of the play against
the reboots alone (the sum over batches of the slowest reboot of each batch), i.e. the
overhead the playbook adds; per N the speed-up of batch N/2 over batch 1. The JSON also holds
the per-node figures and a linear model (fixed cost + per batch cost + per node in a batch) that
docs/deploy.md uses to extrapolate to 1,000 nodes.

    python benchmarks/rollout_bench.py [--nodes 2,4,8] [--previous FILE] [--output FILE]

Run it through the shared integration lock on a shared machine (it boots containers). To keep
each hold of the lock short, measure the sizes in separate runs: ``--previous`` takes the cases
of an earlier result file for the sizes this run does not measure (each case keeps its date).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
import comparisons  # noqa: E402  pylint: disable=wrong-import-position,import-error
from cluster_support import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    COMPUTE_IMAGE,
    Cluster,
    NodeDown,
    build_cluster_images,
    check_playbook,
    start_cluster,
)

ROLL = "playbooks/rolling_update.yml"
POLL = 1  # hpc_stateless_roll_poll of the play: seconds between its scontrol calls
FLEET = 1000  # the extrapolation in docs/deploy.md
OUT_STATES = re.compile(r"DOWN|DRAIN|REBOOT|NOT_RESPONDING|FAIL|UNKNOWN")


def log(message: str) -> None:
    print(f"[rollout_bench] {message}", file=sys.stderr, flush=True)


def fields(line: str) -> dict[str, str]:
    return dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line))


class Sampler:
    """Samples every compute node's Slurm record while a roll runs; times each reboot."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.names = [node.name for node in cluster.computes]
        self.issued: dict[str, float] = {}
        self.back: dict[str, float] = {}
        self.boot_before = {name: "" for name in self.names}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        for name, record in self._records().items():
            self.boot_before[name] = record.get("BootTime", "")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _records(self) -> dict[str, dict[str, str]]:
        result = self.cluster.controller.run("scontrol show node --oneliner " + ",".join(self.names))
        return {f["NodeName"]: f for f in map(fields, result.stdout.splitlines()) if "NodeName" in f}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self._records()
            except NodeDown:
                records = {}
            now = time.monotonic()
            for name, record in records.items():
                state = record.get("State", "")
                if name not in self.issued and "REBOOT_ISSUED" in state:
                    self.issued[name] = now
                if name in self.issued and name not in self.back and not OUT_STATES.search(state) \
                        and record.get("BootTime", "") != self.boot_before[name]:
                    self.back[name] = now
            self._stop.wait(0.25)

    def reboot_seconds(self) -> dict[str, float]:
        return {name: round(self.back[name] - self.issued[name], 2) for name in self.names
                if name in self.issued and name in self.back}


def batches_of(stdout: str) -> list[list[str]]:
    """Nodes that got the reboot request, one list per batch, from the play's output."""
    found = []
    for block in stdout.split("TASK [Ask Slurm to reboot the node when it is idle and resume it]")[1:]:
        found.append(sorted(re.findall(r"^changed: \[(\S+) -> \S+\]", block.split("\nTASK [", 1)[0], re.M)))
    return found


def roll(cluster: Cluster, version: str, batch: int) -> dict[str, Any]:
    """Deploy ``version`` and roll every compute node onto it with ``batch`` nodes per batch."""
    cluster.deploy(version)
    boots_before = {node.name: len(node.boots) for node in cluster.computes}
    sampler = Sampler(cluster)
    sampler.start()
    started = time.monotonic()
    proc = cluster.playbook(ROLL, "-e", "hpc_stateless_roll_slurm_host=slurmctl",
                            "-e", f"hpc_stateless_roll_poll={POLL}", "-e", "hpc_stateless_roll_canary_size=1", "-e", f"hpc_stateless_roll_batch_size={batch}",
                            "-e", "hpc_stateless_roll_timeout=600")
    wall = time.monotonic() - started
    sampler.stop()
    check_playbook(proc, f"rolling_update.yml to {version}, batch {batch}")
    wrong = {node.name: node.release().get("VERSION") for node in cluster.computes
             if node.release().get("VERSION") != version}
    if wrong:
        raise AssertionError(f"after the roll to {version} these nodes run another version: {wrong}")
    reboots = sampler.reboot_seconds()
    planned = batches_of(proc.stdout)
    if sorted(sum(planned, [])) != sorted(reboots):
        raise AssertionError(f"timed reboots {sorted(reboots)} differ from the play's batches {planned}")
    reboot_path = sum(max(reboots[name] for name in group) for group in planned)
    first_issue = min(sampler.issued.values()) - started
    boots = {node.name: node.boots[boots_before[node.name]].seconds for node in cluster.computes}
    log(f"N={len(cluster.computes)} batch={batch} -> {version}: {wall:.1f}s wall, reboots {reboots}, "
        f"boots {boots}, batches {planned}")
    return {"version": version, "batch_size": batch, "batches": planned, "wall_seconds": round(wall, 2),
            "reboot_seconds": reboots, "boot_seconds": boots, "reboot_path_seconds": round(reboot_path, 2),
            "overhead_seconds": round(wall - reboot_path, 2), "first_reboot_after_seconds": round(first_issue, 2)}


def fit(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares of the play's overhead = fixed + per_batch * batches + per_node * nodes."""
    rows = [(1.0, len(r["batches"]), sum(len(b) for b in r["batches"]), r["overhead_seconds"]) for r in runs]
    # normal equations for three unknowns, solved by Cramer's rule (no numpy in the benchmark)
    sums = [[sum(a[i] * a[j] for a in rows) for j in range(3)] for i in range(3)]
    rhs = [sum(a[i] * a[3] for a in rows) for i in range(3)]

    def det(m: list[list[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))

    base = det(sums)
    if abs(base) < 1e-9:  # too few distinct runs (--nodes 2): all overhead per batch
        per_batch = statistics.mean(r["overhead_seconds"] / len(r["batches"]) for r in runs)
        return {"fixed_seconds": 0.0, "per_batch_seconds": round(per_batch, 2), "per_node_seconds": 0.0}
    solution = []
    for col in range(3):
        m = [row[:] for row in sums]
        for i in range(3):
            m[i][col] = rhs[i]
        solution.append(det(m) / base)
    return {"fixed_seconds": round(solution[0], 2), "per_batch_seconds": round(solution[1], 2),
            "per_node_seconds": round(solution[2], 2)}


def extrapolate(reboot: float, model: dict[str, float], nodes: int = FLEET) -> list[dict[str, Any]]:
    """Estimated roll of ``nodes`` nodes (canary of 1) per batch size, from the measured figures."""
    rows = []
    for batch in (1, 10, 50, 100, nodes // 2):
        batches = 1 + math.ceil((nodes - 1) / batch)
        seconds = (model["fixed_seconds"] + batches * (reboot + model["per_batch_seconds"])
                   + nodes * model["per_node_seconds"])
        rows.append({"nodes": nodes, "batch_size": batch, "batches": batches, "seconds": round(seconds)})
    return rows


def build_comparisons(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for case in results["cases"]:
        n = case["nodes"]
        for run in case["runs"]:
            rows.append(comparisons.comparison(
                f"roll {n} nodes, canary 1 then batches of {run['batch_size']}",
                "reboots alone (slowest per batch, summed)", run["reboot_path_seconds"],
                "rolling_update.yml wall time", run["wall_seconds"], "reported: overhead of the play", None,
                note=f"{len(run['batches'])} batches; overhead {run['overhead_seconds']:g} s; "
                     f"median reboot {statistics.median(run['reboot_seconds'].values()):g} s"))
        by_batch = {run["batch_size"]: run for run in case["runs"]}
        if len(by_batch) > 1:
            small, large = by_batch[1], by_batch[max(by_batch)]
            rows.append(comparisons.comparison(
                f"roll {n} nodes: batches of 1 vs {large['batch_size']}", "batches of 1", small["wall_seconds"],
                f"batches of {large['batch_size']}", large["wall_seconds"], "reported: speed-up of larger batches",
                None))
    per_node = results["per_node"]
    rows.append(comparisons.comparison(
        "one node's reboot under nspawn, as Slurm sees it (issued -> back in service)",
        "boot alone (unpack + systemd up)", per_node["boot_median_seconds"],
        "reboot issued -> in service", per_node["reboot_median_seconds"], "reported", None,
        a_samples=per_node["boot_samples"], b_samples=per_node["reboot_samples"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--nodes", default="2,4,8", help="cluster sizes (compute nodes, at most 8)")
    parser.add_argument("--previous", type=Path, help="result file whose cases of other sizes are kept")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "rollout.json")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    kept = []
    if args.previous:
        kept = [case for case in json.loads(args.previous.read_text(encoding="utf-8"))["cases"]
                if case["nodes"] not in sizes]
    release = build_cluster_images()
    results: dict[str, Any] = {"benchmark": "rollout", "image": COMPUTE_IMAGE, "poll_seconds": POLL,
                               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cases": []}
    for n in sizes:
        with start_cluster(release, computes=n, name=f"bench{n}") as cluster:
            cluster.wait_idle(timeout=300)
            runs = [roll(cluster, "B", 1)]
            if n // 2 > 1:
                runs.append(roll(cluster, "A", n // 2))
            results["cases"].append({"nodes": n, "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "runs": runs})
    results["cases"] = sorted(results["cases"] + kept, key=lambda case: case["nodes"])
    all_runs = [run for case in results["cases"] for run in case["runs"]]
    single = [s for run in all_runs if run["batch_size"] == 1 for s in run["reboot_seconds"].values()]
    boots = [s for run in all_runs if run["batch_size"] == 1 for s in run["boot_seconds"].values()]
    results["per_node"] = {"reboot_samples": single, "reboot_median_seconds": statistics.median(single),
                           "boot_samples": boots, "boot_median_seconds": statistics.median(boots)}
    results["overhead_model"] = fit(all_runs)
    results["extrapolation"] = extrapolate(results["per_node"]["reboot_median_seconds"], results["overhead_model"])
    results["comparisons"] = build_comparisons(results)
    log(f"overhead model {results['overhead_model']}; {FLEET} nodes: {results['extrapolation']}")
    return comparisons.write_results(results, args.output)


if __name__ == "__main__":
    sys.exit(main())
