# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The secret scan: hpc.stateless's against detect-secrets 1.5.0 on a planted corpus, and what it costs pack.

Side by side in one run (``make bench`` runs it as ``secret_scan``; docs/bench.md):

* **the planted corpus** (tests/faults/secret_corpus.py, the one the fault case packs): every secret
  form of issue 30 and decoys, planted in a fresh directory. hpc.stateless's side is pack's pass 1
  (``scan_tree`` with the default ``SecretRules``: name rules and content scan), detect-secrets'
  side is ``detect-secrets scan --all-files`` (its default plugins and filters) on the same
  directory. A file counts as named when the scanner reports anything in it. Recall is secrets
  named / planted, the false positives are the decoys named; the goal is 100 % recall and no
  false positive for ours, ahead of detect-secrets on both.
* **pack time** of the default image (``--image``, mounted through a throw-away working
  container; or ``--tree``), ``formats: [cpio.zst]``, with and without the content scan,
  alternated run by run: each run is a whole process (``--child``) running hpc.stateless's
  Packer - the size and secret preflight, the stream, the kernel copy, checksums, manifest and
  the rename. The content scan is switched off by building pack's :class:`SecretRules` with
  ``by_content=False`` in that process (the name rules stay; nothing else differs). Goal: with
  the scan <= 1.1x without. Pass 1 alone (``scan_tree``, in this process) with and without the
  scan is reported too, and what the scan found on the image: it must find nothing there.
* **the image's /etc with both scanners** (reported): the files each names among the configuration
  files of a real Debian image (none holds a secret), and how long each took. The whole image is
  out of reach for detect-secrets (more than 15 minutes on the 2-core host).

detect-secrets is installed by the benchmark itself into a private venv,
``build/bench-tools/detect-secrets-1.5.0`` (never into the project's .venv), once.

    python benchmarks/secret_scan_bench.py [--image REF | --tree DIR] [--runs N] [--output FILE]
                                           [--no-image-judge]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "faults"))
sys.path.insert(0, str(REPO / ".collections"))
import secret_corpus  # noqa: E402  pylint: disable=wrong-import-position,import-error

ENV = {**os.environ, "LANG": "C", "LC_ALL": "C", "PYTHONPATH": str(REPO / ".collections")}
DETECT_SECRETS = "detect-secrets"
DETECT_SECRETS_VERSION = "1.5.0"
TOOLS = REPO / "build" / "bench-tools" / f"detect-secrets-{DETECT_SECRETS_VERSION}"
IMAGE_JUDGE_DIR = "etc"
PACK_GOAL = 1.1  # pack with the content scan <= 1.1x the pack without it (issue 30)
DEFAULT_IMAGE = "localhost/hpc-stateless/slurm:latest"


def log(message: str) -> None:
    print(f"[secret_scan_bench] {message}", file=sys.stderr, flush=True)


# -- detect-secrets ------------------------------------------------------------------------------
def ensure_detect_secrets() -> Path:
    """The detect-secrets executable of the private venv, installed there from PyPI when missing."""
    tool = TOOLS / "bin" / DETECT_SECRETS
    if tool.exists() and _version(tool) == DETECT_SECRETS_VERSION:
        return tool
    log(f"installing {DETECT_SECRETS} {DETECT_SECRETS_VERSION} into {TOOLS}")
    shutil.rmtree(TOOLS, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(TOOLS)], check=True)
    subprocess.run([str(TOOLS / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    f"{DETECT_SECRETS}=={DETECT_SECRETS_VERSION}"], check=True)
    found = _version(tool)
    if found != DETECT_SECRETS_VERSION:
        raise SystemExit(f"{tool}: version {found!r}, not {DETECT_SECRETS_VERSION}")
    return tool


def _version(tool: Path) -> str:
    proc = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def detect_secrets_scan(tool: Path, root: Path) -> tuple[dict[str, list[str]], float]:
    """``detect-secrets scan --all-files`` of ``root``: ({path relative to root: secret types}, seconds)."""
    start = time.monotonic()
    proc = subprocess.run([str(tool), "scan", "--all-files", "."], cwd=root, capture_output=True, text=True,
                          check=False, env={**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"detect-secrets failed ({proc.returncode}): {proc.stderr[-2000:]}")
    results = json.loads(proc.stdout)["results"]
    return {os.path.normpath(path): sorted({item["type"] for item in items}) for path, items in results.items()}, seconds


# -- hpc.stateless ---------------------------------------------------------------------------------
def our_scan(root: Path, excludes: tuple[str, ...] = ()) -> tuple[dict[str, str], float]:
    """Pack's pass 1 on ``root`` with the default secret rules: ({path: what was found}, seconds)."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, SecretRules, scan_tree

    start = time.monotonic()
    scan = scan_tree(str(root), ExcludeRules(excludes), SecretRules())
    return {secret.path: secret.reason for secret in scan.secrets}, time.monotonic() - start


def judge_corpus(tool: Path, work: Path) -> dict[str, Any]:
    """Both scanners on one freshly planted corpus: what each named, missed and named wrongly."""
    corpus = secret_corpus.plant(work / "corpus", work)
    sides = {"ours": our_scan(corpus.root), "detect_secrets": detect_secrets_scan(tool, corpus.root)}
    result: dict[str, Any] = {"planted": len(corpus.secrets), "decoys": len(corpus.decoys),
                              "secrets": sorted(corpus.secrets), "decoy_paths": list(corpus.decoys)}
    for side, (named, seconds) in sides.items():
        found = sorted(set(named) & set(corpus.secrets))
        result[side] = {
            "named": len(found), "missed": sorted(set(corpus.secrets) - set(named)),
            "false_positives": sorted(set(named) & set(corpus.decoys)),
            "recall_percent": round(100 * len(found) / len(corpus.secrets), 1),
            "decoys_quiet_percent": round(100 * (1 - len(set(named) & set(corpus.decoys)) / len(corpus.decoys)), 1),
            "seconds": round(seconds, 3), "findings": {path: named[path] for path in sorted(named)}}
        log(f"corpus, {side}: {len(found)}/{len(corpus.secrets)} secrets named, "
            f"{len(result[side]['false_positives'])}/{len(corpus.decoys)} decoys named, {seconds:.2f} s")
    return result


# -- pack time ---------------------------------------------------------------------------------------
def child(tree: str, out: str, by_content: bool) -> None:
    """One pack of ``tree`` into ``out`` (the process the parent times)."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.hpc.stateless.plugins.module_utils._pack import run, tree as pack_tree

    class Rules(pack_tree.SecretRules):
        """Pack's secret rules with the content scan on or off (the name rules stay)."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs, by_content=by_content)

    run.SecretRules = Rules  # the one difference between the two sides
    request = run.PackRequest(image="bench", output_dir=out, formats=["cpio.zst"], source_path=tree, version="bench",
                              force=True, source_date_epoch=1_700_000_000, size_ceiling=64 << 30)
    run.Packer(request).run(check_mode=False)


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, env=ENV, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr[-2000:]}")
    return seconds


def measure_pack(tree: Path, work: Path, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"names": [], "content": []}
    for number in range(runs):
        for side in ("names", "content"):
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--tree", str(tree),
                    "--child-out", str(work / f"out-{side}")]
            seconds = timed(argv)
            samples[side].append(seconds)
            log(f"pack, {side}: run {number + 1}/{runs}: {seconds:.2f} s")
    return samples


def measure_pass1(tree: Path, runs: int) -> tuple[dict[str, list[float]], dict[str, Any]]:
    # pylint: disable=import-outside-toplevel
    from ansible_collections.hpc.stateless.plugins.module_utils._pack import archives, secrets
    from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import (
        DEFAULT_EXCLUDES, ExcludeRules, SecretRules, scan_tree, walk)

    rules = ExcludeRules(DEFAULT_EXCLUDES)
    samples: dict[str, list[float]] = {"names": [], "content": []}
    for _number in range(max(runs, 5)):
        for side in ("names", "content"):
            start = time.perf_counter()
            scan = scan_tree(str(tree), rules, SecretRules(by_content=side == "content"))
            samples[side].append(time.perf_counter() - start)
    sizes = [entry.size for entry in walk(str(tree), rules) if stat.S_ISREG(entry.mode)]
    facts = {"files": scan.files, "files_opened": sum(1 for size in sizes if 0 < size <= archives.ARCHIVE_MAX_SIZE),
             "head_bytes_read": sum(min(size, secrets.HEAD_BYTES) for size in sizes if size <= secrets.CONTENT_MAX_SIZE),
             "workers": min(os.cpu_count() or 1, secrets.MAX_WORKERS), "findings": [str(s) for s in scan.secrets]}
    return samples, facts


def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {"names_seconds": [round(s, 4) for s in samples["names"]],
            "content_seconds": [round(s, 4) for s in samples["content"]],
            "names_median": round(statistics.median(samples["names"]), 4),
            "content_median": round(statistics.median(samples["content"]), 4),
            "ratio": round(statistics.median(samples["content"]) / statistics.median(samples["names"]), 3)}


def judge_image(tool: Path, tree: Path) -> dict[str, Any]:
    """Both scanners on the image's ``/etc`` (its configuration files, where credentials would be): what
    each names there. detect-secrets on the whole image takes longer than the whole benchmark (it ran out
    of 15 minutes on the 2-core host); /etc takes seconds."""
    named, seconds = detect_secrets_scan(tool, tree / IMAGE_JUDGE_DIR)
    ours, our_seconds = our_scan(tree / IMAGE_JUDGE_DIR)
    files = sum(1 for path in (tree / IMAGE_JUDGE_DIR).rglob("*") if path.is_file() and not path.is_symlink())
    log(f"image /{IMAGE_JUDGE_DIR}: {files} files; detect-secrets named {len(named)} in {seconds:.1f} s, "
        f"ours {len(ours)} in {our_seconds:.2f} s")
    return {"directory": f"/{IMAGE_JUDGE_DIR}", "files": files,
            "detect_secrets": {"named": named, "seconds": round(seconds, 2)},
            "ours": {"named": ours, "seconds": round(our_seconds, 3)}}


# -- the report --------------------------------------------------------------------------------------
def result_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparisons of a result dict (``corpus``, ``pack``, ``pass1``, ``scan``, ``image_judge``)."""
    corpus, pack, pass1, facts = data["corpus"], data["pack"], data["pass1"], data["scan"]
    ours, theirs = corpus["ours"], corpus["detect_secrets"]
    label_ds, label_ours = f"detect-secrets {DETECT_SECRETS_VERSION}", "hpc.stateless pack scan"
    rows = [
        comparisons.comparison(
            f"recall on the planted corpus: secrets named / {corpus['planted']} planted", label_ds,
            theirs["recall_percent"], label_ours, ours["recall_percent"], "ours 100 %, ahead of detect-secrets",
            1.0, unit="%", higher_is_better=True,
            also={"ours 100 %": not ours["missed"], "ahead of detect-secrets": ours["named"] > theirs["named"]},
            note=f"named: detect-secrets {theirs['named']}, ours {ours['named']} of {corpus['planted']}; "
                 f"missed by detect-secrets: {', '.join(theirs['missed']) or 'none'}; "
                 f"missed by ours: {', '.join(ours['missed']) or 'none'}"),
        comparisons.comparison(
            f"decoys left quiet on the planted corpus ({corpus['decoys']} decoys): 100 % = no false positive",
            label_ds, theirs["decoys_quiet_percent"], label_ours, ours["decoys_quiet_percent"],
            "ours 0 false positives, ahead of detect-secrets", 1.0, unit="%", higher_is_better=True,
            also={"ours 0 false positives": not ours["false_positives"],
                  "ahead of detect-secrets": len(ours["false_positives"]) < len(theirs["false_positives"])},
            note=f"false positives: detect-secrets {len(theirs['false_positives'])} "
                 f"({', '.join(theirs['false_positives']) or 'none'}); ours {len(ours['false_positives'])} "
                 f"({', '.join(ours['false_positives']) or 'none'})"),
        comparisons.comparison(
            f"pack cpio.zst of {data['tree']['source']} ({data['tree']['bytes'] / 2**20:.0f} MiB), with the content scan",
            "pack, content scan off (name rules only)", pack["names_median"],
            "pack as it ships (name rules and content scan)", pack["content_median"],
            f"with the scan <= {PACK_GOAL:g}x without", round(1 / PACK_GOAL, 4),
            a_samples=pack["names_seconds"], b_samples=pack["content_seconds"],
            also={"no finding on the image": not facts["findings"]},
            note=f"with/without {pack['ratio']:.3f}x; {facts['files_opened']} of {facts['files']} files opened, "
                 f"{facts['head_bytes_read'] / 2**20:.0f} MiB of first windows read, in {facts['workers']} processes; "
                 f"findings: {len(facts['findings'])}"),
        comparisons.comparison(
            f"pass 1 (scan_tree) of the same tree, {facts['files']} files", "scan_tree, content scan off",
            pass1["names_median"], "scan_tree, name rules and content scan", pass1["content_median"],
            "reported", None, a_samples=pass1["names_seconds"], b_samples=pass1["content_seconds"]),
    ]
    image = data.get("image_judge")
    if image:
        theirs_named, ours_named = image["detect_secrets"]["named"], image["ours"]["named"]
        rows.append(comparisons.comparison(
            f"files named in the image's {image['directory']} ({image['files']} files, no secret among them)", label_ds,
            len(theirs_named), label_ours, len(ours_named), "reported", None, unit="files",
            note=f"detect-secrets: {_listing(theirs_named)} "
                 f"in {image['detect_secrets']['seconds']:g} s; ours: {', '.join(ours_named) or 'none'} "
                 f"in {image['ours']['seconds']:g} s"))
    return rows


def _listing(named: dict[str, list[str]]) -> str:
    """``path (type, type); ...`` of a detect-secrets result, or ``none``."""
    return "; ".join(f"{path} ({', '.join(kinds)})" for path, kinds in named.items()) or "none"


def text(data: dict[str, Any]) -> str:
    """The results for people."""
    corpus, facts = data["corpus"], data["scan"]
    lines = [f"planted corpus: {corpus['planted']} secrets, {corpus['decoys']} decoys"]
    for side, label in (("ours", "hpc.stateless"), ("detect_secrets", f"detect-secrets {DETECT_SECRETS_VERSION}")):
        row = corpus[side]
        lines.append(f"  {label:<22} recall {row['named']}/{corpus['planted']} ({row['recall_percent']:g} %), "
                     f"false positives {len(row['false_positives'])}/{corpus['decoys']}")
        lines += [f"      missed: {path}" for path in row["missed"]]
        lines += [f"      false positive: {path} ({row['findings'][path]})" for path in row["false_positives"]]
    for name in ("pack", "pass1"):
        row = data[name]
        lines.append(f"  {name:<6} scan off {row['names_median']:>8.3f} s   scan on {row['content_median']:>8.3f} s"
                     f"   with/without {row['ratio']:.3f}x")
    lines.append(f"  findings on the image: {len(facts['findings'])}" + "".join(f"\n    {f}" for f in facts["findings"][:20]))
    image = data.get("image_judge")
    if image:
        lines.append(f"  the image's {image['directory']} ({image['files']} files): detect-secrets named "
                     f"{len(image['detect_secrets']['named'])}, ours {len(image['ours']['named'])}")
    return "\n".join(lines)


def mounted(ref: str) -> tuple[str, Path]:
    """A throw-away working container of ``ref`` and its mount point."""
    container = f"hpc-stateless-secretbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["buildah", "from", "--pull=never", "--quiet", "--name", container, ref], env=ENV, check=True,
                   capture_output=True)
    mount = subprocess.run(["buildah", "mount", container], env=ENV, check=True, capture_output=True, text=True)
    return container, Path(mount.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--image", help=f"layer image to mount as the tree (default {DEFAULT_IMAGE})")
    parser.add_argument("--tree", type=Path, help="this directory instead of an image")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-image-judge", action="store_true", help="do not run the scanners on the image's /etc")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "secret_scan.json")
    parser.add_argument("--child", choices=("names", "content"), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(str(args.tree), args.child_out, args.child == "content")
        return 0

    tool = ensure_detect_secrets()
    container = None
    work = Path(tempfile.mkdtemp(prefix="secret-scan-bench-"))
    try:
        corpus = judge_corpus(tool, work)
        if args.tree:
            tree, source = args.tree.resolve(), str(args.tree)
        else:
            source = args.image or DEFAULT_IMAGE
            container, tree = mounted(source)
        tree_bytes = int(subprocess.run(["du", "-sb", "."], cwd=tree, capture_output=True, text=True,
                                        check=True).stdout.split()[0])
        log(f"tree {source}: {tree_bytes / 2**20:.0f} MiB; warming the page cache")
        subprocess.run(["sh", "-c", "find . -type f -print0 | xargs -0 cat > /dev/null"], cwd=tree, check=False)
        pass1, facts = measure_pass1(tree, args.runs)
        log(f"pass 1: {facts['files']} files, {len(facts['findings'])} findings")
        pack = measure_pack(tree, work, args.runs)
        image = None if args.no_image_judge else judge_image(tool, tree)
    finally:
        if container:
            subprocess.run(["buildah", "umount", container], env=ENV, capture_output=True, check=False)
            subprocess.run(["buildah", "rm", container], env=ENV, capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    data: dict[str, Any] = {
        "image": source, "tree": {"source": source, "bytes": tree_bytes}, "cpus": os.cpu_count(), "runs": args.runs,
        "load_average": os.getloadavg()[0], "detect_secrets": DETECT_SECRETS_VERSION, "corpus": corpus,
        "pack": summary(pack), "pass1": summary(pass1), "scan": facts, "image_judge": image,
        "pack_scan_off": "pack's SecretRules built with by_content=False in the pack process (name rules stay)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    data["comparisons"] = result_rows(data)
    print(text(data))
    return comparisons.write_results(data, args.output)


if __name__ == "__main__":
    sys.exit(main())
