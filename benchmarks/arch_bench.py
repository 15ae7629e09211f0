# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Architecture benchmark: the default DAG built for amd64 and for arm64 (docs/arch.md), side by side.

Both builds run in one invocation, on a private copy of the checkout, each under a private image prefix and
from scratch (bootstrap included), with the host's package caches warm: the inventory's root layers get
``arch: amd64`` for one build and ``arch: arm64`` for the other. On an x86_64 host the arm64 build runs every
package script and role through qemu-user's binfmt handler (scripts/setup.sh installs it): the ratio is what
emulation costs a build. Reported, not judged.

    python benchmarks/arch_bench.py [--inventory DIR] [--arches amd64,arm64] [--output FILE] [--keep-images]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

import comparisons
from build_bench import REPO, copy_checkout, remove_images, run_build


def arch_inventory(inventory: Path, target: Path, arch: str) -> Path:
    """A copy of ``inventory`` whose root layers build ``arch``."""
    shutil.copytree(inventory, target, symlinks=True)
    layers_file = target / "group_vars" / "all" / "layers.yml"
    data = yaml.safe_load(layers_file.read_text(encoding="utf-8"))
    roots = [spec for spec in data["hpc_stateless_layers"].values() if spec.get("bootstrap")]
    if not roots:
        raise SystemExit(f"{layers_file}: no root layer")
    for spec in roots:
        spec["arch"] = arch
    layers_file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return target


def rows(data: dict) -> list[dict]:
    """The comparison: the first architecture's build (A) against the second's (B); reported."""
    (a_arch, a), (b_arch, b) = list(data["builds"].items())
    return [comparisons.comparison(
        f"full build of {data['inventory']}: {a_arch} vs {b_arch}" + (" (emulated)" if b.get("emulated") else ""),
        f"{a_arch} ({a['built']} layers)", a["seconds"], f"{b_arch} ({b['built']} layers)", b["seconds"],
        "reported side by side", None, a_samples=[a["seconds"]], b_samples=[b["seconds"]],
        note=f"{b_arch} takes {b['seconds'] / a['seconds']:.1f}x the time of {a_arch} on this {data['host_arch']} host")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--inventory", default="inventory", help="inventory directory, relative to the checkout")
    parser.add_argument("--arches", default="amd64,arm64", help="two architectures, the yardstick first")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "arch.json"))
    parser.add_argument("--keep-images", action="store_true", help="leave the benchmark's images in storage")
    args = parser.parse_args()
    arches = [a.strip() for a in args.arches.split(",") if a.strip()]
    if len(arches) != 2:
        parser.error("--arches: name two architectures, e.g. amd64,arm64")

    sys.path.insert(0, str(REPO / ".collections"))
    from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import (  # pylint: disable=import-outside-toplevel
        host_arch,
    )

    host = host_arch()
    builds = {}
    with tempfile.TemporaryDirectory(prefix="hpc-stateless-bench-arch-") as tmp:
        workdir = Path(tmp)
        copy_checkout(workdir)
        for arch in arches:
            prefix = f"localhost/hpc-stateless-bench-{arch}-{uuid.uuid4().hex[:6]}"
            inventory = arch_inventory(workdir / args.inventory, workdir / f"inventory-{arch}", arch)
            try:
                builds[arch] = {**run_build(workdir, inventory, prefix, f"full build, {arch}"),
                                "emulated": arch != host}
            finally:
                if not args.keep_images:
                    remove_images(prefix)

    result = {"benchmark": "arch", "inventory": args.inventory, "host_arch": host,
              "package_cache": "warm (host /var/cache/hpc-stateless kept across runs)", "builds": builds}
    result["comparisons"] = rows(result)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for arch, build in builds.items():
        print(f"{arch}: {build['seconds']:.1f} s, {build['built']}/{build['layers']} layers"
              + (" (emulated)" if build["emulated"] else ""))
    print("\n" + comparisons.text_table(result["comparisons"]))
    print(f"\nwritten: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
