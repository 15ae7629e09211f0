"""benchmarks/run_all.py: comparisons from each benchmark's JSON, the table, the verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import run_all  # noqa: E402  pylint: disable=wrong-import-position,import-error

PACK = {"tree": {"bytes": 100 * 2**20}, "memory_goal_mb": 200.0, "ours_peak_mb": 250.0,
        "results": {"cpio.zst": {"baseline_median": 80.0, "ours_median": 8.0, "goal_speedup": 8.0},
                    "squashfs": {"baseline_median": 90.0, "ours_median": 10.0, "goal_speedup": 10.0}}}
PLAN = {"goal": {"case": {"layers": 500, "changed_files": 10000}, "max_seconds": 2.0, "measured_full_median_s": 1.0}}


def test_pack_rows_judge_speedups_and_memory_as_ratios():
    rows = {row.name.split(" ")[0]: row for row in run_all.pack_rows(PACK)}
    assert rows["cpio.zst"].ratio == 10.0 and rows["cpio.zst"].met is True
    assert rows["squashfs"].ratio == 9.0 and rows["squashfs"].met is False
    assert rows["peak"].unit == "MB" and rows["peak"].met is False  # 200 MB budget, 250 MB measured


def test_budget_rows_and_reported_rows():
    (plan,) = run_all.plan_rows(PLAN)
    assert (plan.a_label, plan.ratio, plan.met) == ("budget", 2.0, True)
    reported = run_all.Comparison("x", "y", "a", 1.0, "b", 2.0, "reported", None)
    assert reported.met is None and reported.as_dict()["ratio"] == 0.5


def test_markdown_escapes_pipes_and_lists_what_did_not_run():
    table = run_all.render_markdown(run_all.pack_rows(PACK), {"build": "exit status 2"})
    assert "find \\| cpio -o -H newc \\| gzip" in table
    assert "| build | did not run: exit status 2 |" in table
    assert {line.count("|") - line.count("\\|") for line in table.splitlines()} == {10}  # 9 columns everywhere


def test_report_only_writes_both_files_and_fails_on_unmet_goals(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    (results / "pack.json").write_text(json.dumps(PACK))
    (results / "plan.json").write_text(json.dumps(PLAN))
    monkeypatch.setattr(run_all, "RESULTS", results)
    monkeypatch.setattr(run_all, "REPO", tmp_path)
    out = tmp_path / "bench"
    assert run_all.main(["--report-only", "--only", "pack,plan", "--output-dir", str(out)]) == 1
    report = json.loads((out / "results.json").read_text())
    assert [c["benchmark"] for c in report["comparisons"]] == ["pack"] * 3 + ["plan"]
    assert report["did_not_run"] == {}
    assert (out / "results.md").read_text().startswith("# hpc.stateless benchmarks")

    (results / "pack.json").write_text(json.dumps({**PACK, "ours_peak_mb": 50.0,
                                                   "results": {"cpio.zst": PACK["results"]["cpio.zst"]}}))
    assert run_all.main(["--report-only", "--only", "pack,plan", "--output-dir", str(out)]) == 0


def test_missing_or_incomplete_results_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(run_all, "RESULTS", tmp_path)
    monkeypatch.setattr(run_all, "REPO", tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps({"goal": {}}))
    failures: dict[str, str] = {}
    assert run_all.collect(["pack", "plan"], failures) == []
    assert failures["pack"] == "no pack.json (run the benchmark)"
    assert "plan.json lacks what the table needs" in failures["plan"]


def test_unknown_benchmark_is_refused(capsys):
    with pytest.raises(SystemExit):
        run_all.main(["--report-only", "--only", "pakc"])
    assert "unknown benchmark(s) pakc" in capsys.readouterr().err
