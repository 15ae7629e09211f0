# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build benchmark: full build, no-op re-run, and rebuild after touching the leaf layer's role.

All three runs happen in one invocation, on a private copy of the checkout and under a
private image prefix, so the figures compare like with like and nothing of the user's
is touched. Host package caches (/var/cache/hpc-stateless) stay warm, as on a build host
that has built before; the report says so.

Goals: no-op re-run <= 15 s with zero layers built; leaf-role rebuild <= 20 % of
the full build.

Beside it (issue 27), a second full build of the same DAG whose Debian-style roots bootstrap from the
release suite alone (``updates: false``, ``security: false``, as the build did before the updates and
security suites became the default), under a prefix of its own: the full build's cost of the two suites,
reported side by side (``--no-suites-compare`` leaves it out).

    python benchmarks/build_bench.py [--inventory DIR] [--noop-runs N] [--no-suites-compare] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

import comparisons

REPO = Path(__file__).resolve().parents[1]
PLAN_LINE = re.compile(r"(\d+) layers?,\s+(\d+) to build")
NOOP_GOAL_SECONDS = 15.0
LEAF_GOAL_RATIO = 0.20


def log(message: str) -> None:
    print(f"[build_bench] {message}", file=sys.stderr, flush=True)


def copy_checkout(target: Path) -> None:
    """Tracked and untracked-but-not-ignored files of the checkout, as the user has them."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if not source.is_file():
            continue
        dest = target / os.fsdecode(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest, follow_symlinks=False)
    link = target / ".collections" / "ansible_collections" / "hpc" / "stateless"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)


def run_build(workdir: Path, inventory: Path, prefix: str, label: str) -> dict:
    env = {**os.environ, "ANSIBLE_CONFIG": str(workdir / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
           "PYTHONPATH": str(workdir / ".collections")}
    # The build stage only: the default inventory also packs and deploys, which pack_bench and
    # deploy_bench measure on their own.
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), "site.yml",
            "-e", f"hpc_stateless_image_prefix={prefix}", "-e", '{"hpc_stateless_site_stages": ["build"]}']
    log(f"{label}: ansible-playbook site.yml ...")
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    match = PLAN_LINE.search(proc.stdout.replace("\n", " "))
    if not match:
        raise SystemExit(f"{label}: no plan line in the output; did build.yml change its message?")
    layers, built = int(match.group(1)), int(match.group(2))
    log(f"{label}: {seconds:.1f} s, {built} of {layers} layers built")
    return {"seconds": round(seconds, 2), "layers": layers, "built": built}


def plan(workdir: Path, inventory: Path, prefix: str) -> dict:
    """The plan as JSON, through the plan module (so the leaf is chosen the way the build sees it)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(workdir / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "PYTHONPATH": str(workdir / ".collections")}
    argv = [str(REPO / ".venv" / "bin" / "ansible"), "-i", str(inventory), "localhost", "-m", "hpc.stateless.plan",
            "-a", f"image_prefix={prefix} check_storage=false"]
    proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def release_only_inventory(inventory: Path, target: Path) -> Path:
    """A copy of ``inventory`` whose Debian-style root layers bootstrap from the release suite alone."""
    shutil.copytree(inventory, target, symlinks=True)
    layers_file = target / "group_vars" / "all" / "layers.yml"
    data = yaml.safe_load(layers_file.read_text(encoding="utf-8"))
    roots = [spec["bootstrap"] for spec in data["hpc_stateless_layers"].values()
             if isinstance(spec.get("bootstrap"), dict)]
    if not roots:
        raise SystemExit(f"{layers_file}: no root layer with a bootstrap mapping to compare suites on")
    for bootstrap in roots:
        bootstrap.update(updates=False, security=False)
    layers_file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return target


def role_dir(workdir: Path, role: str) -> Path:
    if role.startswith("hpc.stateless."):
        return workdir / "roles" / role.split(".")[-1]
    for base in ("roles", "tests/roles"):
        if (workdir / base / role).is_dir():
            return workdir / base / role
    raise SystemExit(f"role {role} of the leaf layer is not in this checkout; pass --leaf-layer")


def pick_leaf(result: dict, wanted: str | None) -> tuple[str, str]:
    """(layer, role): the deepest leaf layer that applies a role of its own, or ``wanted``."""
    layers = result["layers"]
    candidates = [wanted] if wanted else sorted(result["leaves"], key=lambda n: (-layers[n]["depth"], n))
    for name in candidates:
        if name not in layers:
            raise SystemExit(f"--leaf-layer {name}: no such layer (layers: {', '.join(result['order'])})")
        if layers[name]["roles"]:
            return name, layers[name]["roles"][-1]
    raise SystemExit("no leaf layer applies a role: nothing to touch for the incremental rebuild")


def remove_images(prefix: str) -> None:
    env = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot")}
    out = subprocess.run(["buildah", "images", "--json"], env=env, capture_output=True, text=True, check=False)
    refs = [n for image in json.loads(out.stdout or "[]") or [] for n in image.get("names") or []
            if n.startswith(prefix + "/")]
    if refs:
        subprocess.run(["buildah", "rmi", "--force", *refs], env=env, capture_output=True, check=False)


def table(rows: list[tuple[str, str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--inventory", default="inventory", help="inventory directory, relative to the checkout")
    parser.add_argument("--leaf-layer", help="layer whose last role is touched (default: deepest leaf with a role)")
    parser.add_argument("--noop-runs", type=int, default=3, help="no-op re-runs; the median is reported")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "build.json"))
    parser.add_argument("--keep-images", action="store_true", help="leave the benchmark's images in storage")
    parser.add_argument("--no-suites-compare", action="store_true",
                        help="leave out the second full build from the release suite alone")
    args = parser.parse_args()

    prefix = f"localhost/hpc-stateless-bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="hpc-stateless-bench-") as tmp:
        workdir = Path(tmp)
        copy_checkout(workdir)
        inventory = workdir / args.inventory
        try:
            leaf, role = pick_leaf(plan(workdir, inventory, prefix), args.leaf_layer)
            full = run_build(workdir, inventory, prefix, "full build")
            noops = [run_build(workdir, inventory, prefix, f"no-op re-run {i + 1}/{args.noop_runs}")
                     for i in range(args.noop_runs)]
            tasks = role_dir(workdir, role) / "tasks" / "main.yml"
            with tasks.open("a", encoding="utf-8") as handle:
                handle.write(f"# touched by build_bench {uuid.uuid4().hex}\n")
            log(f"touched {tasks.relative_to(workdir)} (role {role} of leaf layer {leaf})")
            leaf_run = run_build(workdir, inventory, prefix, "leaf-role rebuild")
            release_only = None
            if not args.no_suites_compare:
                release_prefix = f"{prefix}-release"
                try:
                    release_only = run_build(workdir, release_only_inventory(inventory, workdir / "inventory-release-only"),
                                             release_prefix, "full build, release suite only")
                finally:
                    if not args.keep_images:
                        remove_images(release_prefix)
        finally:
            if not args.keep_images:
                remove_images(prefix)

    noop_seconds = statistics.median(r["seconds"] for r in noops)
    ratio = leaf_run["seconds"] / full["seconds"]
    result = {
        "benchmark": "build",
        "inventory": args.inventory,
        "package_cache": "warm (host /var/cache/hpc-stateless kept across runs)",
        "full": full,
        "noop": {"runs": noops, "median_seconds": noop_seconds,
                 "goal_seconds": NOOP_GOAL_SECONDS,
                 "met": noop_seconds <= NOOP_GOAL_SECONDS and all(r["built"] == 0 for r in noops)},
        "leaf": {**leaf_run, "layer": leaf, "role": role, "ratio_to_full": round(ratio, 3),
                 "goal_ratio": LEAF_GOAL_RATIO, "met": ratio <= LEAF_GOAL_RATIO},
    }
    if release_only is not None:
        result["suites"] = {"release_only": release_only, "all_suites": full,
                            "note": "roots bootstrap from <release> only vs <release>, -updates and -security; "
                                    "package caches warm for both"}
    result["comparisons"] = comparisons.derive("build", result)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print(table([
        ("run", "seconds", "layers built", "goal"),
        ("full build", f"{full['seconds']:.1f}", f"{full['built']}/{full['layers']}", "-"),
        (f"no-op re-run (median of {len(noops)})", f"{noop_seconds:.1f}",
         "/".join(str(r["built"]) for r in noops), f"<= {NOOP_GOAL_SECONDS:.0f} s, 0 built: "
         + ("met" if result["noop"]["met"] else "MISSED")),
        (f"touch role {role} of leaf {leaf}", f"{leaf_run['seconds']:.1f}",
         f"{leaf_run['built']}/{leaf_run['layers']}",
         f"ratio {ratio:.2f} <= {LEAF_GOAL_RATIO:.2f}: " + ("met" if result["leaf"]["met"] else "MISSED")),
    ] + ([("full build, release suite only", f"{release_only['seconds']:.1f}",
           f"{release_only['built']}/{release_only['layers']}", "reported")] if release_only else [])))
    print("\n" + comparisons.text_table(result["comparisons"]))
    print(f"\nwritten: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
