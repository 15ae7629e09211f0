"""The freshness rows of the plan benchmark (benchmarks/plan_bench.py -> comparisons._plan): the check on the
default DAG is judged against the 1 s budget, warm and within max_age; the no-op plan is shown beside it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import comparisons  # noqa: E402  pylint: disable=wrong-import-position

PLAN = {"goal": {"case": {"layers": 500, "changed_files": 10000}, "max_seconds": 2.0, "measured_full_median_s": 1.2},
        "cases": [{"layers": 500, "changed_files": 10000, "full_median_s": 1.2, "full_samples_s": [1.2]}]}


def freshness(warm: float, within: float) -> dict:
    return {"layers": ["base", "hsn", "compute", "slurm"], "goal_seconds": 1.0, "runs": 3,
            "cold_seconds": 3.5, "warm_median_seconds": warm, "warm_samples": [warm] * 3,
            "warm_network": {"http://deb.debian.org/debian bookworm": "304"},
            "within_max_age_median_seconds": within, "within_max_age_samples": [within] * 3,
            "noop_plan_median_seconds": 7.3, "noop_plan_samples": [7.3, 7.2, 7.5],
            "updates": {"base": ["openssl 3.0.20 -> 3.0.22"], "hsn": [], "compute": [], "slurm": []}}


def test_without_freshness_the_plan_has_its_one_row():
    assert len(comparisons.derive("plan", PLAN)) == 1


def test_freshness_rows_are_budgets_and_one_reported_row():
    rows = comparisons.derive("plan", {**PLAN, "freshness": freshness(0.17, 0.15)})
    assert [row["kind"] for row in rows] == ["budget", "budget", "budget", "reported"]
    warm, within, side = rows[1:]
    assert warm["name"] == "freshness check of the 4-layer default DAG, warm (conditional GET per source)"
    assert (warm["a_median"], warm["b_median"], warm["met"]) == (1.0, 0.17, True)
    assert within["met"] is True and within["note"] == "1 pending updates found"
    assert (side["a_median"], side["b_median"], side["met"]) == (7.3, 0.17, None)
    assert side["note"] == "cold fetch (empty cache) 3.50 s"


def test_a_slow_check_misses_its_budget():
    rows = comparisons.derive("plan", {**PLAN, "freshness": freshness(1.4, 0.2)})
    assert rows[1]["met"] is False and rows[2]["met"] is True
