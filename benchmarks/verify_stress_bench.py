# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Verify under load: the gate's verdict on the default image must not depend on timing.

Boots the default image N times with ``playbooks/verify.yml`` (``hpc_stateless_verify_force=true``, the records in a
temporary directory, the default inventory), each time with every CPU of the host kept busy by other work (one
``yes > /dev/null`` per CPU, started before the boot and stopped after it, as ``make test``'s parallel stage keeps
the cores busy). Each boot's verdict is read from its verification record: passed or not, and the names of the
checks that failed. Goal: the same verdict in every boot (the default image passes: every boot passed).
Lynis's process tests (PROC-3612 zombies, PROC-3614 processes in I/O wait) and the checks of running services are
what a race would flip; a failed boot's record names the check and, for those tests, the process table.

    python benchmarks/verify_stress_bench.py [--boots 20] [--busy N] [--repo DIR] [--output FILE]
    python benchmarks/verify_stress_bench.py --quick     # 3 boots

``--repo`` times the verify.yml of another checkout of the collection (with its .venv and .collections), for a
before/after figure on the same host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import comparisons  # noqa: E402  pylint: disable=wrong-import-position


def log(message: str) -> None:
    print(f"[verify_stress] {message}", flush=True)


def busy(count: int) -> list[subprocess.Popen]:
    """``count`` processes that keep one CPU each busy until stopped."""
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _index in range(count)]


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def verdict(records: Path) -> dict[str, Any]:
    """What the boot's verification record says: passed, the failed checks by name, their details."""
    files = sorted(path for path in records.glob("*.json"))
    if len(files) != 1:
        return {"passed": False, "failed": [f"{len(files)} records in {records} (expected one)"], "details": {}}
    record = json.loads(files[0].read_text(encoding="utf-8"))
    failed = [c for c in record.get("checks", []) if not c.get("passed")]
    return {"passed": bool(record.get("passed")), "failed": sorted(c["name"] for c in failed),
            "details": {c["name"]: str(c.get("detail", ""))[:2000] for c in failed}}


def verify_once(repo: Path, records: Path, busy_count: int, log_file: Path) -> dict[str, Any]:
    """One forced verify of the default image with ``busy_count`` CPUs kept busy; its seconds and verdict."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), PYTHONPATH=str(repo / ".collections"),
               PATH=f"{repo / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", ANSIBLE_FORCE_COLOR="0")
    argv = [str(repo / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory", "playbooks/verify.yml",
            "-e", "hpc_stateless_verify_force=true", "-e", f"hpc_stateless_verify_record_dir={records}"]
    burners = busy(busy_count)
    try:
        started = time.monotonic()
        with log_file.open("w", encoding="utf-8") as out:
            proc = subprocess.run(argv, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
        seconds = time.monotonic() - started
    finally:
        stop(burners)
    return {"seconds": round(seconds, 2), "rc": proc.returncode, **verdict(records)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--boots", type=int, default=20, help="verify boots (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="3 boots")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2,
                        help="CPUs kept busy during each boot (default: all, %(default)s)")
    parser.add_argument("--repo", default=str(REPO), help="the checkout whose verify.yml runs (default this one)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "verify_stress.json"))
    args = parser.parse_args()
    boots = 3 if args.quick else args.boots
    if boots < 1 or args.busy < 0:
        parser.error("--boots must be at least 1 and --busy at least 0")
    repo = Path(args.repo).resolve()
    if not (repo / "playbooks" / "verify.yml").is_file():
        parser.error(f"--repo {repo}: no playbooks/verify.yml there")

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="verify-stress.") as tmp:
        for index in range(boots):
            records = Path(tmp) / f"boot-{index + 1}"
            records.mkdir()
            run = verify_once(repo, records, args.busy, Path(tmp) / f"boot-{index + 1}.log")
            if not run["passed"]:
                run["log_tail"] = (Path(tmp) / f"boot-{index + 1}.log").read_text(encoding="utf-8")[-4000:]
            runs.append(run)
            log(f"boot {index + 1}/{boots}: {'passed' if run['passed'] else 'FAILED ' + ', '.join(run['failed'])} "
                f"in {run['seconds']:.1f} s")
    verdicts = [(run["passed"], tuple(run["failed"])) for run in runs]
    first = verdicts[0]
    same = sum(1 for v in verdicts if v == first)
    seconds = [run["seconds"] for run in runs]
    rows = [
        comparisons.comparison(
            f"verify of the default image under load ({args.busy} CPUs busy): boots with the same verdict",
            "boots", boots, "same verdict", same, f"{boots} of {boots}, every one passed", 1.0,
            kind=comparisons.BUDGET, unit="", higher_is_better=True,
            also={"every boot passed": all(run["passed"] for run in runs)}),
        comparisons.comparison(
            "seconds per verify under load (median)", "boots", boots, "verify.yml", statistics.median(seconds),
            "reported", None, b_samples=seconds),
    ]
    output = {"benchmark": "verify_stress", "image": "the default inventory's leaf layer", "repo": str(repo),
              "boots": boots, "busy_cpus": args.busy, "same_verdict": same, "runs": runs,
              "median_seconds": statistics.median(seconds), "comparisons": rows}
    return comparisons.write_results(output, Path(args.output))


if __name__ == "__main__":
    sys.exit(main())
