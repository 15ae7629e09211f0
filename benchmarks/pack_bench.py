# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pack benchmark: the seed paper's pipeline and mksquashfs defaults against hpc.stateless.pack.

Side by side in one run, on the same tree (a layer image mounted through a throw-away buildah
working container, page cache warmed first), each pair alternated run by run:

* seed:  ``find . | cpio -o -H newc | gzip``  (the paper's ``cpio -oc``: on RHEL ``-c`` is newc)
  vs ours ``formats: [cpio.zst]`` and ours ``formats: [cpio.gz]`` (pigz);
* ``mksquashfs TREE OUT -noappend`` (its defaults: gzip level 9) vs ours ``formats: [squashfs]``.

The secret scan's cost (pack with and without the content scan) is benchmarks/secret_scan_bench.py's.

"Ours" is the whole module process (``python plugins/modules/pack.py args.json``): the size
preflight walk, the stream, the kernel copy, checksums, manifest and the atomic rename
included. Peak memory is the largest single process of the command tree (``wait4`` rusage).

Goals: cpio.zst >= 8x faster than seed and no larger; cpio.gz >= 2x faster;
squashfs >= 10x faster than mksquashfs defaults; peak memory of pack < 200 MB.

    python benchmarks/pack_bench.py [--image REF | --tree DIR] [--runs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
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
CANDIDATE_IMAGES = ("localhost/hpc-stateless/slurm:latest", "localhost/hpc-stateless-packtest/packkernel:latest",
                    "localhost/hpc-stateless/base:latest")
GOALS = {"cpio.zst": 8.0, "cpio.gz": 2.0, "squashfs": 10.0}
MEMORY_GOAL_MB = 200.0
ENV = {**os.environ, "LANG": "C", "LC_ALL": "C", "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
       "PYTHONPATH": str(REPO / ".collections")}


def log(message: str) -> None:
    print(f"[pack_bench] {message}", file=sys.stderr, flush=True)


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], env=ENV, capture_output=True, text=True, check=True).stdout.strip()


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB of the largest process in the tree) of one command."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    return seconds, usage.ru_maxrss / 1024


def ours(tree: Path, out: Path, fmt: str, args_file: Path) -> list[str]:
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "image": "bench", "source_path": str(tree), "output_dir": str(out), "version": "bench",
        "formats": [fmt], "force": True, "source_date_epoch": 1_700_000_000, "size_ceiling": "64G"}}))
    return [str(REPO / ".venv" / "bin" / "python"), str(REPO / "plugins" / "modules" / "pack.py"), str(args_file)]


def synthetic_tree(base: Path) -> Path:
    """3 GiB (one sparse file) + 100 000 small files in 200 directories: memory must not follow size."""
    root = base / "synthetic"
    (root / "boot").mkdir(parents=True)
    (root / "boot" / "vmlinuz-0").write_bytes(b"kernel")
    (root / "data").mkdir()
    with open(root / "data" / "sparse", "wb") as handle:
        handle.truncate(3 << 30)
    for directory in range(200):
        folder = root / "many" / str(directory)
        folder.mkdir(parents=True)
        for index in range(500):
            (folder / f"f{index}").write_bytes(b"x" * (index % 300))
    return root


def measure(pairs: dict[str, tuple[list[str], Path, list[str], Path]], tree: Path, runs: int) -> dict:
    results: dict[str, dict] = {}
    for name, (base_argv, base_out, our_argv, our_out) in pairs.items():
        base, mine = [], []
        for run in range(runs):
            for label, argv, store in (("baseline", base_argv, base), ("ours", our_argv, mine)):
                seconds, peak = timed(argv, cwd=tree if label == "baseline" else None)
                store.append((seconds, peak))
                log(f"{name} {label} run {run + 1}/{runs}: {seconds:.2f} s, peak {peak:.0f} MB")
        base_size = base_out.stat().st_size
        our_size = our_out.stat().st_size
        base_median = statistics.median(seconds for seconds, _peak in base)
        our_median = statistics.median(seconds for seconds, _peak in mine)
        results[name] = {
            "baseline_seconds": [round(seconds, 2) for seconds, _peak in base],
            "ours_seconds": [round(seconds, 2) for seconds, _peak in mine],
            "baseline_median": round(base_median, 2), "ours_median": round(our_median, 2),
            "speedup": round(base_median / our_median, 2),
            "baseline_bytes": base_size, "ours_bytes": our_size,
            "ours_peak_mb": round(max(peak for _seconds, peak in mine), 1),
            "baseline_peak_mb": round(max(peak for _seconds, peak in base), 1),
            "goal_speedup": GOALS[name],
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--image", help="layer image to mount as the tree (default: first present of "
                                        + ", ".join(CANDIDATE_IMAGES) + ")")
    parser.add_argument("--tree", type=Path, help="pack this directory instead of an image")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "pack.json")
    args = parser.parse_args()

    container = None
    work = Path(tempfile.mkdtemp(prefix="pack-bench-"))
    try:
        if args.tree:
            tree, source = args.tree.resolve(), str(args.tree)
        else:
            ref = args.image or next((r for r in CANDIDATE_IMAGES
                                      if subprocess.run(["buildah", "inspect", "--type", "image", r], env=ENV,
                                                        capture_output=True, check=False).returncode == 0), None)
            if not ref:
                raise SystemExit("no image to benchmark: build one (ansible-playbook site.yml) or pass --image/--tree")
            container = f"hpc-stateless-packbench-{uuid.uuid4().hex[:8]}"
            buildah("from", "--pull=never", "--quiet", "--name", container, ref)
            tree, source = Path(buildah("mount", container)), ref
        files = int(subprocess.run(["sh", "-c", "find . | wc -l"], cwd=tree, capture_output=True, text=True,
                                   check=True).stdout)
        tree_bytes = int(subprocess.run(["du", "-sb", "."], cwd=tree, capture_output=True, text=True,
                                        check=True).stdout.split()[0])
        log(f"tree {source}: {tree_bytes / 2**20:.0f} MiB, {files} entries; warming the page cache")
        subprocess.run(["sh", "-c", "find . -type f -print0 | xargs -0 cat > /dev/null"], cwd=tree, check=False)
        out = work / "ours"
        seed_gz, mksq = work / "seed.cpio.gz", work / "defaults.squashfs"
        pairs = {
            "cpio.zst": (["sh", "-c", f"find . | cpio -o -H newc --quiet | gzip > {seed_gz}"], seed_gz,
                         ours(tree, out, "cpio.zst", work / "zst.json"), out / "bench" / "bench" / "bench.cpio.zst"),
            "cpio.gz": (["sh", "-c", f"find . | cpio -o -H newc --quiet | gzip > {seed_gz}"], seed_gz,
                        ours(tree, out, "cpio.gz", work / "gz.json"), out / "bench" / "bench" / "bench.cpio.gz"),
            "squashfs": (["mksquashfs", str(tree), str(mksq), "-noappend", "-quiet", "-no-progress"], mksq,
                         ours(tree, out, "squashfs", work / "sq.json"), out / "bench" / "bench" / "bench.squashfs"),
        }
        floor, _floor_peak = timed(["sh", "-c", "find . | cpio -o -H newc --quiet > /dev/null"], cwd=tree)
        results = measure(pairs, tree, args.runs)
        log("synthetic 3 GiB / 100k-file tree: peak memory of pack (cpio.zst)")
        big = synthetic_tree(work)
        big_seconds, big_peak = timed(ours(big, work / "big-out", "cpio.zst", work / "big.json"))
        log(f"synthetic: {big_seconds:.1f} s, peak {big_peak:.0f} MB")
    finally:
        if container:
            subprocess.run(["buildah", "umount", container], env=ENV, capture_output=True, check=False)
            subprocess.run(["buildah", "rm", container], env=ENV, capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)

    peak = max([r["ours_peak_mb"] for r in results.values()] + [big_peak])
    report = {
        "tree": {"source": source, "bytes": tree_bytes, "entries": files},
        "cpus": os.cpu_count(), "runs": args.runs, "raw_cpio_floor_seconds": round(floor, 2),
        "results": results, "ours_peak_mb": peak, "memory_goal_mb": MEMORY_GOAL_MB,
        "synthetic_tree": {"bytes": 3 << 30, "files": 100_000, "seconds": round(big_seconds, 2),
                           "peak_mb": round(big_peak, 1)},
        "goals_met": {**{name: r["speedup"] >= r["goal_speedup"] for name, r in results.items()},
                      "cpio.zst_no_larger": results["cpio.zst"]["ours_bytes"] <= results["cpio.zst"]["baseline_bytes"],
                      "memory": peak < MEMORY_GOAL_MB},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    report["comparisons"] = comparisons.derive("pack", report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")

    print(f"tree: {source} ({tree_bytes / 2**20:.0f} MiB, {files} entries), {os.cpu_count()} CPUs, "
          f"{args.runs} runs each, medians; raw GNU cpio floor {floor:.2f} s")
    print(f"{'format':<10} {'baseline':<34} {'base s':>7} {'ours s':>7} {'ratio':>6} {'goal':>5} "
          f"{'base MB':>8} {'ours MB':>8} {'peak MB':>8}")
    names = {"cpio.zst": "find|cpio -o -H newc|gzip", "cpio.gz": "find|cpio -o -H newc|gzip",
             "squashfs": "mksquashfs defaults (gzip -9)"}
    for name, r in results.items():
        print(f"{name:<10} {names[name]:<34} {r['baseline_median']:>7.2f} {r['ours_median']:>7.2f} "
              f"{r['speedup']:>5.1f}x {r['goal_speedup']:>4.0f}x {r['baseline_bytes'] / 2**20:>8.1f} "
              f"{r['ours_bytes'] / 2**20:>8.1f} {r['ours_peak_mb']:>8.0f}")
    print(f"peak memory of pack: {peak:.0f} MB (goal < {MEMORY_GOAL_MB:.0f}); on a synthetic 3 GiB / 100k-file tree "
          f"{big_peak:.0f} MB")
    print("goals met: " + ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in report["goals_met"].items()))
    print("\n" + comparisons.text_table(report["comparisons"]))
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
