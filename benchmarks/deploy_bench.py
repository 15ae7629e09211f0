# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Deploy benchmark: boot configuration for 10,000 nodes, and publish + switch against cp.

1. Render + switch for N nodes (default 10,000; 2 files each: pxelinux.cfg/01-<mac> and
   ipxe/nodes/<mac>.ipxe). Goal (issue 7): switch + render <= 2 s. Also measured: the first
   render into an empty tree, a re-render after one node changed, a re-render where every
   file changes, and - as the yardstick - writing the same files naively (open/write, no
   comparison, no atomic rename).
2. Publish + switch of one version (copy into a temp dir, fsync, verify SHA256SUMS, rename,
   switch the link) in MB/s, against `cp` of the same files, and `cp` + `sync -f`, in the
   same run, alternating. The source is the newest pack under build/images when there is one
   (--src to choose), else generated files of --size MiB.

All work happens under build/bench-deploy (same file system as the checkout). Both sides
read their source from the page cache. Writes JSON to benchmarks/results/deploy.json and
prints a table with medians.

    python benchmarks/deploy_bench.py [--nodes 10000] [--runs 5] [--size 512] [--src DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".collections"))

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (  # noqa: E402
    KERNEL_FILE,
    MANIFEST_FILE,
    SUMS_FILE,
    artifact_file,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import sums_text  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import (  # noqa: E402
    BootOptions,
    image_boot,
    parse_nodes,
    plan_files,
    render,
)
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state  # noqa: E402

GOAL_SECONDS = 2.0
WORK = REPO / "build" / "bench-deploy"


def log(message: str) -> None:
    print(f"[deploy_bench] {message}", file=sys.stderr, flush=True)


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def make_version(out: Path, image: str, version: str, sizes: dict[str, int], uncompressed: int) -> Path:
    """A pack-format version directory with files of the given sizes (pseudo-random content)."""
    directory = out / image / version
    directory.mkdir(parents=True)
    sums = {}
    for name, size in sizes.items():
        digest = hashlib.sha256()
        with open(directory / name, "wb") as handle:
            block = hashlib.sha512(f"{version}{name}".encode()).digest() * 16384  # 1 MiB
            left = size
            while left > 0:
                chunk = block[:min(left, len(block))]
                handle.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        sums[name] = digest.hexdigest()
    artifact = next(name for name in sizes if name != KERNEL_FILE)
    (directory / SUMS_FILE).write_text(sums_text(sums))
    manifest = pm.build_manifest(
        image=image, version=version, created=pm.parse_iso_utc("2026-01-01T00:00:00Z"), layer=image, layer_keys={},
        kernel={"file": KERNEL_FILE, "version": "bench"},
        artifacts=[{"file": artifact, "format": "cpio.zst", "size": sizes[artifact], "sha256": sums[artifact]}],
        uncompressed_size=uncompressed, packages=[])
    (directory / MANIFEST_FILE).write_bytes(pm.manifest_bytes(manifest))
    return directory


def node_list(count: int, extra: str = "") -> list[dict]:
    return [{"name": f"node{i:05d}", "mac": f"52:54:{i >> 24 & 255:02x}:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
             "kernel_args": extra} for i in range(1, count + 1)]


def bench_render(nodes: int, runs: int) -> dict:
    root = WORK / "render" / "tftp"
    out = WORK / "render" / "out"
    shutil.rmtree(WORK / "render", ignore_errors=True)
    images = {"compute": {"formats": ["cpio.zst"], "kernel_args": "quiet"}}
    small = {KERNEL_FILE: 4096, artifact_file("compute", "cpio.zst"): 8192}
    for version, size in (("v1", 900 * 2**20), ("v2", 910 * 2**20)):
        src = make_version(out, "compute", version, small, size)
        apply_state({"boot_root": str(root), "image": "compute", "state": "present", "src": str(src)})
    apply_state({"boot_root": str(root), "image": "compute", "state": "switched", "version": "v1"})
    the_nodes = node_list(nodes)
    params = {"boot_root": str(root), "images": images, "nodes": the_nodes, "lock_timeout": 0}

    def clear() -> None:
        for sub in ("pxelinux.cfg", "ipxe"):
            shutil.rmtree(root / sub, ignore_errors=True)

    first, switch_render, one_node, all_change, naive, files = [], [], [], [], [], 0
    for run in range(runs):
        clear()
        first.append(timed(lambda: render(params)))
        target = "v2" if run % 2 == 0 else "v1"

        def switch_and_render(version=target) -> None:
            apply_state({"boot_root": str(root), "image": "compute", "state": "switched", "version": version,
                         "lock_timeout": 0})
            result = render(params)
            assert not result["changed"], "a switch should change no config file"

        switch_render.append(timed(switch_and_render))
        changed = [dict(node) for node in the_nodes]
        changed[nodes // 2]["kernel_args"] = f"debug{run}"
        one_node.append(timed(lambda: render({**params, "nodes": changed})))
        everything = {**params, "nodes": the_nodes, "serial_console": f"ttyS{run % 2 + 1},115200n8"}
        all_change.append(timed(lambda: render(everything)))
        render(params)
        # Yardstick: the same content written naively (no compare, no temp + rename).
        boots = {"compute": image_boot("compute", images["compute"], [{"uncompressed_size": 900 * 2**20}], BootOptions())}
        contents = plan_files(parse_nodes(the_nodes, images, "compute"), boots, "compute", BootOptions())
        files = len(contents)
        naive_root = WORK / "render" / "naive"
        shutil.rmtree(naive_root, ignore_errors=True)
        for sub in ("pxelinux.cfg", "ipxe/nodes", "ipxe/images"):
            (naive_root / sub).mkdir(parents=True)

        def write_naive() -> None:
            for rel, content in contents.items():
                with open(naive_root / rel, "w", encoding="utf-8") as handle:
                    handle.write(content)

        naive.append(timed(write_naive))
        log(f"render run {run + 1}/{runs}: first {first[-1]:.2f} s, switch+render {switch_render[-1]:.2f} s, "
            f"one node {one_node[-1]:.2f} s, all files {all_change[-1]:.2f} s, naive write {naive[-1]:.2f} s")
    return {
        "nodes": nodes, "files": files, "runs": runs, "goal_seconds": GOAL_SECONDS,
        "switch_and_render_seconds": median(switch_render),
        "first_render_seconds": median(first),
        "one_node_changed_seconds": median(one_node),
        "all_files_changed_seconds": median(all_change),
        "naive_write_all_seconds": median(naive),
        "goal_met": median(switch_render) <= GOAL_SECONDS,
        "samples": {"switch_and_render": switch_render, "first_render": first, "one_node_changed": one_node,
                    "all_files_changed": all_change, "naive_write_all": naive},
    }


def newest_pack() -> Path | None:
    manifests = sorted((REPO / "build" / "images").glob(f"*/*/{MANIFEST_FILE}"), key=lambda p: p.stat().st_mtime)
    return manifests[-1].parent if manifests else None


def bench_publish(src: Path | None, size_mib: int, runs: int) -> dict:
    area = WORK / "publish"
    shutil.rmtree(area, ignore_errors=True)
    area.mkdir(parents=True)
    if src is None:
        src = make_version(area / "out", "bench", "b1",
                           {KERNEL_FILE: 8 * 2**20, artifact_file("bench", "cpio.zst"): (size_mib - 8) * 2**20},
                           2 * size_mib * 2**20)
        origin = f"generated ({size_mib} MiB)"
    else:
        origin = str(src)
    manifest = pm.read_manifest(str(src / MANIFEST_FILE))
    image = manifest["image"]
    names = [name for name in os.listdir(src) if (src / name).is_file()]
    published_bytes = None
    ours, cp_only, cp_sync = [], [], []
    for run in range(runs):
        for path in list(area.glob("root*")) + list(area.glob("cp*")):
            shutil.rmtree(path)
        root = area / f"root{run}"

        def publish() -> None:
            apply_state({"boot_root": str(root), "image": image, "state": "switched", "src": str(src), "lock_timeout": 0})

        ours.append(timed(publish))
        published_bytes = sum(p.stat().st_size for p in (root / "images" / image / manifest["version"]).iterdir()
                              if p.is_file() and not p.is_symlink())
        dest = area / f"cp{run}"
        dest.mkdir()
        cp_only.append(timed(lambda: subprocess.run(["cp", *[str(src / n) for n in names], str(dest)], check=True)))
        shutil.rmtree(dest)
        dest.mkdir()
        cp_sync.append(timed(lambda: (subprocess.run(["cp", *[str(src / n) for n in names], str(dest)], check=True),
                                      subprocess.run(["sync", "-f", str(dest)], check=True))))
        log(f"publish run {run + 1}/{runs}: bootlink {ours[-1]:.2f} s, cp {cp_only[-1]:.2f} s, "
            f"cp+sync {cp_sync[-1]:.2f} s")
    source_bytes = sum((src / n).stat().st_size for n in names)
    mib = (published_bytes or 0) / 2**20
    return {
        "source": origin, "published_mib": round(mib, 1), "cp_mib": round(source_bytes / 2**20, 1), "runs": runs,
        "bootlink_publish_switch_seconds": median(ours),
        "cp_seconds": median(cp_only),
        "cp_sync_seconds": median(cp_sync),
        "bootlink_mib_per_s": round(mib / median(ours), 1),
        "cp_mib_per_s": round(source_bytes / 2**20 / median(cp_only), 1),
        "cp_sync_mib_per_s": round(source_bytes / 2**20 / median(cp_sync), 1),
        "ratio_bootlink_vs_cp": round(median(ours) / median(cp_only), 2),
        "ratio_bootlink_vs_cp_sync": round(median(ours) / median(cp_sync), 2),
        "samples": {"bootlink": ours, "cp": cp_only, "cp_sync": cp_sync},
    }


def table(results: dict) -> str:
    r, p = results["render"], results["publish"]
    rows = [
        ("what", "ours (median)", "other side (median)", "ratio"),
        (f"switch + render, {r['nodes']} nodes ({r['files']} files)", f"{r['switch_and_render_seconds']:.3f} s",
         f"goal {r['goal_seconds']:.1f} s", f"{r['switch_and_render_seconds'] / r['goal_seconds']:.2f} of goal"),
        ("first render into an empty tree", f"{r['first_render_seconds']:.3f} s",
         f"naive write {r['naive_write_all_seconds']:.3f} s",
         f"{r['first_render_seconds'] / r['naive_write_all_seconds']:.2f}x"),
        ("re-render, one node changed", f"{r['one_node_changed_seconds']:.3f} s", "-", "-"),
        ("re-render, every file changed", f"{r['all_files_changed_seconds']:.3f} s",
         f"naive write {r['naive_write_all_seconds']:.3f} s",
         f"{r['all_files_changed_seconds'] / r['naive_write_all_seconds']:.2f}x"),
        (f"publish + switch {p['published_mib']} MiB", f"{p['bootlink_publish_switch_seconds']:.3f} s "
         f"({p['bootlink_mib_per_s']} MiB/s)", f"cp {p['cp_seconds']:.3f} s ({p['cp_mib_per_s']} MiB/s)",
         f"{p['ratio_bootlink_vs_cp']:.2f}x"),
        ("", "", f"cp+sync {p['cp_sync_seconds']:.3f} s ({p['cp_sync_mib_per_s']} MiB/s)",
         f"{p['ratio_bootlink_vs_cp_sync']:.2f}x"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=512, help="MiB of generated files when no pack exists")
    parser.add_argument("--src", type=Path, help="pack version directory to publish (default: newest in build/images)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "deploy.json")
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    try:
        results = {"render": bench_render(args.nodes, args.runs),
                   "publish": bench_publish(args.src or newest_pack(), args.size, max(3, args.runs // 2 + 1)),
                   "host": {"cpus": os.cpu_count(), "filesystem": subprocess.run(
                       ["stat", "-f", "-c", "%T", str(REPO / "build")], capture_output=True, text=True, check=False).stdout.strip()}}
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    results["comparisons"] = comparisons.derive("deploy", results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print("\n" + comparisons.text_table(results["comparisons"]))
    print(f"\nJSON: {args.output}")
    return 0 if results["render"]["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
