# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hardware-profile benchmark: the full compute image against the same image pruned to the qemu profile.

Side by side in one run, on the same layer image: hpc.stateless.pack (the module process) packs
it twice - without a profile, and with ``hardware_profile`` = the qemu profile
(tests/integration/fixtures/qemu.modaliases + virtio_net, virtio_blk, virtio_pci, e1000) - and
qemu (TCG) boots each cpio.zst, alternating full and pruned boot by boot. On the guest console,
after multi-user.target: /proc/uptime (boot time to multi-user) and MemTotal - MemAvailable (RAM
used after boot; the cpio root lives in RAM).

Goals (issue 18): pruned cpio.zst <= 40 % of the full one (ratio >= 2.5); RAM used after boot
reduced by at least the bytes the profile removed. Uncompressed size and boot time are reported.

    python benchmarks/hwprofile_bench.py [--image REF] [--boots N] [--output FILE]

Run it through the shared integration lock on a shared machine (it boots qemu).
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
from pathlib import Path

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from hwprofile_support import boot_and_probe, qemu_profile  # noqa: E402  pylint: disable=wrong-import-position,import-error

ENV = {**os.environ, "LANG": "C", "LC_ALL": "C", "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"),
       "PYTHONPATH": str(REPO / ".collections")}
SIZE_GOAL = 1 / 0.40  # pruned cpio.zst <= 40 % of the full one


def log(message: str) -> None:
    print(f"[hwprofile_bench] {message}", file=sys.stderr, flush=True)


def pack(image_ref: str, out: Path, profile: dict | None) -> tuple[dict, float]:
    """(manifest, seconds) of one pack by the module process."""
    args = {"image": "compute", "source_image": image_ref, "output_dir": str(out), "version": "bench",
            "formats": ["cpio.zst"], "force": True, "kernel_args": "console=ttyS0"}
    if profile:
        args["hardware_profile"] = profile
    args_file = out / "args.json"
    out.mkdir(parents=True, exist_ok=True)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    start = time.monotonic()
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(REPO / "plugins" / "modules" / "pack.py"),
                           str(args_file)], env=ENV, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    result = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or result.get("failed"):
        raise SystemExit(f"pack failed: {result.get('msg') or proc.stderr[-2000:]}")
    return result["manifest"], seconds


def rows(data: dict) -> list[dict]:
    full, pruned = data["full"], data["pruned"]
    removed = data["removed_bytes"]
    ram_full, ram_pruned = statistics.median(full["ram_used"]), statistics.median(pruned["ram_used"])
    mib = 2 ** 20
    return [
        comparisons.comparison(
            "cpio.zst of the compute image", "full", full["cpio_zst"] / mib, "pruned to the qemu profile",
            pruned["cpio_zst"] / mib, "pruned <= 40 % of full", SIZE_GOAL, unit="MiB",
            note=f"{100 * pruned['cpio_zst'] / full['cpio_zst']:.1f} % of full"),
        comparisons.comparison(
            "uncompressed tree", "full", full["uncompressed"] / mib, "pruned", pruned["uncompressed"] / mib,
            "reported", None, unit="MiB", note=f"profile removed {removed / mib:.0f} MiB of modules and firmware"),
        comparisons.comparison(
            "RAM used after boot (MemTotal - MemAvailable)", "full", ram_full / mib, "pruned", ram_pruned / mib,
            "full - pruned >= removed bytes", 1.0, unit="MiB", a_samples=[r / mib for r in full["ram_used"]],
            b_samples=[r / mib for r in pruned["ram_used"]],
            also={"reduced by at least the removed bytes": ram_full - ram_pruned >= removed},
            note=f"reduced by {(ram_full - ram_pruned) / mib:.0f} MiB, removed {removed / mib:.0f} MiB"),
        comparisons.comparison(
            "boot to multi-user (guest uptime, qemu TCG)", "full", statistics.median(full["boot_seconds"]),
            "pruned", statistics.median(pruned["boot_seconds"]), "reported", None,
            a_samples=full["boot_seconds"], b_samples=pruned["boot_seconds"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="localhost/hpc-stateless/slurm:latest")
    parser.add_argument("--boots", type=int, default=1)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "hwprofile.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hwprofile-bench-"))
    try:
        sides = {}
        for side, profile in (("full", None), ("pruned", qemu_profile())):
            manifest, seconds = pack(args.image, work / side, profile)
            version_dir = work / side / "compute" / "bench"
            sides[side] = {"cpio_zst": manifest["artifacts"][0]["size"], "uncompressed": manifest["uncompressed_size"],
                           "pack_seconds": round(seconds, 2), "ram_used": [], "boot_seconds": [],
                           "kernel": version_dir / "vmlinuz", "initrd": version_dir / "compute.cpio.zst"}
            if profile:
                removed = manifest["hardware_profile"]["removed"]
                kept = manifest["hardware_profile"]["kept_modules"]
            log(f"{side}: cpio.zst {sides[side]['cpio_zst']} bytes, uncompressed {sides[side]['uncompressed']}, "
                f"packed in {seconds:.1f} s")
        for boot in range(args.boots):
            for side in ("full", "pruned") if boot % 2 == 0 else ("pruned", "full"):
                probe = boot_and_probe(sides[side]["kernel"], sides[side]["initrd"])
                sides[side]["ram_used"].append(probe.ram_used)
                sides[side]["boot_seconds"].append(probe.uptime_at_multi_user)
                log(f"boot {boot + 1} {side}: {probe.ram_used / 2**20:.0f} MiB used, multi-user at "
                    f"{probe.uptime_at_multi_user:.1f} s")
        for side in sides.values():
            del side["kernel"], side["initrd"]
        data = {"image": args.image, "profile": {"modules": qemu_profile()["modules"],
                                                 "modaliases_file": "tests/integration/fixtures/qemu.modaliases"},
                "kept_modules": len(kept), "removed": removed,
                "removed_bytes": sum(c["bytes"] for c in removed.values()), **sides}
        data["comparisons"] = rows(data)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(data, indent=2) + "\n")
        print("\n" + comparisons.text_table(data["comparisons"]))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
