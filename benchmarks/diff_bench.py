# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Image diff benchmark: hpc.stateless.image_diff against a naive diff of extracted trees.

The old version is a real pack (the newest pack of the default image under build/images, or
--src). The new version is made from it as an image changes between releases: the old
artifact is extracted, files are added (one large, many small), changed, removed and chmod'ed,
and the tree is packed again with hpc.stateless.pack (the old kernel, one layer key changed).

Side by side, alternating, from the same page-cached artifacts:

* A, the naive way: extract both artifacts (``zstd -dc | cpio -idm``) and ``diff -rq`` the trees;
  also reported: ``diff -rq`` alone on trees already extracted (content only: it does not see
  mode, owner or link-target changes, which image_diff does);
* B, ours: the image_diff comparison of the two version directories (stream each artifact
  once, hash file data on the way, compare; table and Markdown rendered).

Writes benchmarks/results/diff.json (with the uniform ``comparisons`` block) and prints a table.

    python benchmarks/diff_bench.py [--src build/images/compute/<version>] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import comparisons
from deploy_bench import median, timed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.hpc.stateless.plugins.module_utils._diff.diff import (  # noqa: E402
    render_markdown,
    render_table,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import read_manifest  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import MANIFEST_FILE  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._diff.sides import compare  # noqa: E402

WORK = REPO / "build" / "bench-diff"
BUDGET_SECONDS = 10.0  # "two 850 MiB images diffed in seconds": read as at most 10 s
NEW_VERSION = "bench-new"


def log(message: str) -> None:
    print(f"[diff_bench] {message}", file=sys.stderr, flush=True)


def newest_pack(image: str = "compute") -> Path:
    manifests = sorted((REPO / "build" / "images" / image).glob("*/manifest.json"), key=lambda p: p.stat().st_mtime)
    if not manifests:
        raise SystemExit(f"no pack of {image} under build/images: run ansible-playbook -i inventory site.yml first")
    return manifests[-1].parent


def cpio_artifact(version_dir: Path) -> Path:
    manifest = read_manifest(str(version_dir / MANIFEST_FILE))
    found = [a["file"] for a in manifest["artifacts"] if a.get("format") == "cpio.zst"]
    if not found:
        raise SystemExit(f"{version_dir}: no cpio.zst artifact to benchmark with")
    return version_dir / found[0]


def extract(artifact: Path, dest: Path) -> None:
    """The naive way to look inside a pack: zstd -dc | cpio -idm into ``dest``."""
    dest.mkdir(parents=True)
    with open(artifact, "rb") as packed:
        unzstd = subprocess.Popen(["zstd", "-dc"], stdin=packed, stdout=subprocess.PIPE)
        subprocess.run(["cpio", "-idm", "--quiet", "--no-absolute-filenames"], stdin=unzstd.stdout, cwd=dest,
                       check=True)
        unzstd.stdout.close()
        if unzstd.wait() != 0:
            raise SystemExit(f"zstd -dc {artifact} failed")


def change_tree(root: Path) -> dict[str, int]:
    """Changes of a release: 32 MiB added in one file, 500 small files added, 200 changed, three
    directories below /usr/share removed, 50 files chmod'ed."""
    counts = {"added": 0, "changed": 0, "removed": 0, "chmod": 0}
    new_dir = root / "opt" / "bench-new"
    new_dir.mkdir(parents=True)
    (new_dir / "large.bin").write_bytes(os.urandom(32 * 2**20))
    for index in range(500):
        (new_dir / f"small-{index:03d}.conf").write_text(f"setting={index}\n")
    counts["added"] = 501
    candidates = sorted(p for p in (root / "usr" / "share").rglob("*") if p.is_file() and not p.is_symlink())
    for path in candidates[::max(1, len(candidates) // 200)][:200]:
        with open(path, "ab") as handle:
            handle.write(b"\n# changed\n")
        counts["changed"] += 1
    for path in candidates[7::max(1, len(candidates) // 50)][:50]:
        path.chmod(0o600)
        counts["chmod"] += 1
    share = root / "usr" / "share"
    victims = sorted(p for p in share.glob("*/*") if p.is_dir() and not p.is_symlink())[:3]
    for victim in victims:
        counts["removed"] += len(list(victim.rglob("*"))) + 1
        shutil.rmtree(victim)
    return counts


def make_new_version(old: Path, out: Path) -> tuple[Path, dict[str, int]]:
    tree = WORK / "new-tree"
    extract(cpio_artifact(old), tree)
    counts = change_tree(tree)
    manifest = read_manifest(str(old / MANIFEST_FILE))
    keys = dict(manifest.get("layer_keys") or {})
    if keys:
        last = sorted(keys)[-1]
        keys[last] = "f" * 64
    params = {"image": manifest["image"], "source_path": str(tree), "output_dir": str(out), "version": NEW_VERSION,
              "layer": manifest.get("layer") or manifest["image"], "layer_keys": keys,
              "kernel": str(old / (manifest.get("kernel") or {}).get("file", "vmlinuz")),
              "kernel_args": manifest.get("kernel_args") or "", "formats": ["cpio.zst"]}
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": str(REPO / ".collections"),
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-i", str(REPO / "inventory"),
                           "-m", "hpc.stateless.pack", "-a", json.dumps(params)], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"packing the new version failed: {proc.stdout[-2000:]} {proc.stderr[-1000:]}")
    shutil.rmtree(tree)
    return out / manifest["image"] / NEW_VERSION, counts


def naive_extract_and_diff(old: Path, new: Path) -> int:
    """Extract both, diff -rq; returns the number of lines diff printed."""
    trees = WORK / "naive"
    shutil.rmtree(trees, ignore_errors=True)
    extract(cpio_artifact(old), trees / "old")
    extract(cpio_artifact(new), trees / "new")
    return naive_diff(trees)


def naive_diff(trees: Path) -> int:
    proc = subprocess.run(["diff", "-rq", "--no-dereference", "old", "new"], cwd=trees, capture_output=True,
                          text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"diff -rq failed: {proc.stderr[-500:]}")
    return len(proc.stdout.splitlines())


def ours(old: Path, new: Path) -> dict:
    result = compare({"old_dir": str(old), "new_dir": str(new)})
    render_table(result)
    render_markdown(result)
    return result


def run(old: Path, new: Path, runs: int) -> dict:
    naive, naive_diff_only, image_diff = [], [], []
    lines = 0
    result: dict = {}
    log("warm-up (page cache)")
    ours(old, new)
    for index in range(runs):
        log(f"run {index + 1}/{runs}: naive extract + diff -rq")
        start = time.perf_counter()
        lines = naive_extract_and_diff(old, new)
        naive.append(time.perf_counter() - start)
        naive_diff_only.append(timed(lambda: naive_diff(WORK / "naive")))
        log(f"run {index + 1}/{runs}: image_diff")
        start = time.perf_counter()
        result = ours(old, new)
        image_diff.append(time.perf_counter() - start)
    shutil.rmtree(WORK / "naive", ignore_errors=True)
    return {
        "naive_extract_diff_seconds": median(naive), "naive_diff_only_seconds": median(naive_diff_only),
        "image_diff_seconds": median(image_diff), "naive_diff_lines": lines, "summary": result["summary"],
        "old_bytes": result["files"]["old"]["bytes"], "new_bytes": result["files"]["new"]["bytes"],
        "old_entries": result["files"]["old"]["entries"], "new_entries": result["files"]["new"]["entries"],
        "samples": {"naive_extract_diff": naive, "naive_diff_only": naive_diff_only, "image_diff": image_diff},
    }


def derive(results: dict) -> list[dict]:
    r = results["diff"]
    mib = round(max(r["old_bytes"], r["new_bytes"]) / 2**20)
    samples = r["samples"]
    return [
        comparisons.comparison(
            f"diff of two packed versions (~{mib} MiB each, from the artifacts)", "extract both + diff -rq",
            r["naive_extract_diff_seconds"], "image_diff (one stream each, hashed, no extraction)",
            r["image_diff_seconds"], ">= 1x (faster than extracting)", 1.0,
            a_samples=samples["naive_extract_diff"], b_samples=samples["image_diff"]),
        comparisons.comparison(
            f"diff of two versions (~{mib} MiB each), trees already extracted", "diff -rq of extracted trees",
            r["naive_diff_only_seconds"], "image_diff from the artifacts", r["image_diff_seconds"], "reported", None,
            a_samples=samples["naive_diff_only"], b_samples=samples["image_diff"],
            note="diff -rq compares content only (no mode, owner or link target)"),
        comparisons.budget(
            f"two ~{mib} MiB versions diffed in seconds", BUDGET_SECONDS, "image_diff", r["image_diff_seconds"],
            f"<= {BUDGET_SECONDS:g} s", b_samples=samples["image_diff"]),
    ]


def table(results: dict) -> str:
    r = results["diff"]
    return "\n".join([
        f"old: {results['old']}  ({r['old_bytes'] / 2**20:.0f} MiB, {r['old_entries']} entries)",
        f"new: {results['new']}  ({r['new_bytes'] / 2**20:.0f} MiB, {r['new_entries']} entries)",
        f"changes made: {results['changes_made']}; image_diff found: {r['summary']}",
        f"extract both + diff -rq: {r['naive_extract_diff_seconds']:.2f} s ({r['naive_diff_lines']} lines)",
        f"diff -rq only (extracted): {r['naive_diff_only_seconds']:.2f} s",
        f"image_diff:                {r['image_diff_seconds']:.2f} s",
    ])


def shown(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it (result files travel between hosts)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--src", type=Path, help="old version directory (default: newest pack of compute)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep build/bench-diff (the new version) afterwards")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "diff.json")
    args = parser.parse_args()
    old = (args.src or newest_pack()).resolve()
    shutil.rmtree(WORK, ignore_errors=True)
    try:
        log(f"making the new version from {old}")
        new, changes = make_new_version(old, WORK / "images")
        results = {"image": shown(old), "old": shown(old), "new": shown(new), "changes_made": changes,
                   "runs": args.runs, "host": {"cpus": os.cpu_count()}, "diff": run(old, new, args.runs)}
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    results["comparisons"] = derive(results)
    print(table(results))
    return comparisons.write_results(results, args.output)


if __name__ == "__main__":
    sys.exit(main())
