# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot benchmark: the same packed image over TFTP (pxelinux) vs over HTTP (iPXE), under qemu.

deploy.yml publishes the newest pack of the default image (--src to choose a version
directory with a cpio.zst) into build/bench-boot/root and renders its boot files with
``hpc_stateless_boot_url`` set, so one tree holds both paths: pxelinux.cfg/01-<mac> (pxelinux
loads kernel and image over TFTP, qemu's built-in server) and ipxe/nodes/<mac>.ipxe (the NIC's
iPXE ROM loads them over HTTP from lighttpd on 127.0.0.1). Each run boots once each way,
alternating, in a qemu TCG guest, and reads two times off the serial console (seconds after
qemu starts):

* transfer: kernel + image transfer. TFTP: from pxelinux's ``Loading <image>/vmlinuz`` to its
  ``Loading <image>/initrd...ok`` on the console. HTTP: from lighttpd's error log line of the
  request for the node's iPXE script (written as it arrives; the kernel's request follows it) to
  its access log line of the finished initrd (written in batches, up to about a second late: the
  HTTP figure errs on the long side). Polled every 0.2 s; goal: HTTP >= 5x faster.
* load: from qemu's start to the kernel's first line (firmware, DHCP and the loader included).
* multi-user: until a unit ordered after multi-user.target reports the target active.

Needs qemu-system-x86, pxelinux, syslinux-common, ipxe-qemu and lighttpd (scripts/setup.sh).
Writes benchmarks/results/boot.json (with the uniform ``comparisons`` block) and prints a table.

    python benchmarks/boot_bench.py [--src build/images/compute/<version>] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import comparisons
from diff_bench import cpio_artifact, newest_pack, shown

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / ".collections"))

from conftest import run_site  # noqa: E402  pylint: disable=wrong-import-position,import-error
from deploy_support import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    GUEST_HOST_ADDRESS,
    http_server,
    pxe_boot,
    write_inventory,
)
from pack_support import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    IMAGE_RELEASE_TO_CONSOLE,
    MULTI_USER,
    NO_SECRET_DELIVERY,
)

WORK = REPO / "build" / "bench-boot"
NODE_MAC = "52:54:00:12:34:58"
KERNEL_LINE = r"Linux version \d"
TFTP_START, TFTP_END = r"Loading \S+/vmlinuz", r"Loading \S+/initrd\.\.\.\s*ok"
HTTP_START = r"rqst: GET /ipxe/nodes/\S+ HTTP"  # lighttpd's error log, as the request arrives
HTTP_END = r'"GET /\S+/initrd HTTP/[0-9.]+" 200'  # lighttpd's access log, once sent
GOAL_TRANSFER_RATIO = 5.0
MEMORY_MIB = 3072


def log(message: str) -> None:
    print(f"[boot_bench] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:  # another file system
        shutil.copy2(source, dest)


def publish(src: Path, url: str) -> tuple[str, Path]:
    """deploy.yml publishes ``src`` (hard links of it, as the only version) into WORK/root; returns (image, root)."""
    image, version = src.parent.name, src.name
    out = WORK / "out"
    shutil.copytree(src, out / image / version, copy_function=link_or_copy)
    inventory = write_inventory(
        WORK / "inventory",
        images={image: {"layer": image, "formats": ["cpio.zst"],
                        "kernel_args": f"panic=-1 {NO_SECRET_DELIVERY} {IMAGE_RELEASE_TO_CONSOLE}"}},
        nodes={"n1": {"hpc_stateless_boot_mac": NODE_MAC}},
        hpc_stateless_boot_root=str(WORK / "root"), hpc_stateless_boot_url=url,
        hpc_stateless_pack_output_dir=str(out), hpc_stateless_boot_lock_timeout=0)
    proc = run_site(inventory=inventory, playbook="playbooks/deploy.yml")
    if proc.returncode != 0:
        raise SystemExit(f"deploy.yml failed for {src}:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return image, WORK / "root"


def one_boot(name: str, tftp_root: Path, bootfile: str, timeout: float, transfer: tuple[str, str],
             server_logs: tuple[Path, ...] = ()) -> dict[str, float]:
    stamps = {transfer[0]: 0.0, transfer[1]: 0.0, KERNEL_LINE: 0.0, MULTI_USER: 0.0}
    for server_log in server_logs:
        server_log.write_text("")  # lighttpd appends (O_APPEND): only this boot's requests are in it
    console, seconds = pxe_boot(tftp_root, NODE_MAC, WORK / f"{name}.log", bootfile=bootfile, timeout=timeout,
                                memory_mib=MEMORY_MIB, until=MULTI_USER, stamps=stamps, stamp_files=server_logs)
    if min(stamps.values()) < 0:
        raise SystemExit(f"{name}: not seen within {seconds:.0f} s: {[r for r, t in stamps.items() if t < 0]}; "
                         f"console {WORK / (name + '.log')}:\n{console[-2000:]}")
    result = {"transfer": round(stamps[transfer[1]] - stamps[transfer[0]], 2), "load": stamps[KERNEL_LINE],
              "multi_user": stamps[MULTI_USER]}
    log(f"{name}: transfer {result['transfer']:.1f} s, load {result['load']:.1f} s, "
        f"multi-user {result['multi_user']:.1f} s")
    return result


def run(src: Path, runs: int, timeout: float) -> dict:
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "root").mkdir(parents=True)
    (WORK / "no-tftp").mkdir()
    samples: dict[str, list[dict[str, float]]] = {"tftp": [], "http": []}
    with http_server(WORK / "root", WORK / "lighttpd") as port:
        url = f"http://{GUEST_HOST_ADDRESS}:{port}"
        image, root = publish(src, url)
        logs = (WORK / "lighttpd" / "lighttpd-error.log", WORK / "lighttpd" / "lighttpd-access.log")
        for index in range(runs):
            samples["tftp"].append(one_boot(f"tftp-{index}", root, "pxelinux.0", timeout, (TFTP_START, TFTP_END)))
            samples["http"].append(one_boot(f"http-{index}", WORK / "no-tftp", f"{url}/ipxe/boot.ipxe", timeout,
                                            (HTTP_START, HTTP_END), logs))
    artifact = cpio_artifact(src)
    return {"image": image, "artifact_bytes": artifact.stat().st_size,
            "kernel_bytes": (src / "vmlinuz").stat().st_size, "samples": samples,
            **{f"{side}_{what}_seconds": median([s[what] for s in samples[side]])
               for side in ("tftp", "http") for what in ("transfer", "load", "multi_user")}}


def derive(results: dict) -> list[dict]:
    r = results["boot"]
    mib = round((r["artifact_bytes"] + r["kernel_bytes"]) / 2**20)
    tftp, http = r["samples"]["tftp"], r["samples"]["http"]
    return [
        comparisons.comparison(
            f"kernel + image transfer ({mib} MiB), first request to the image loaded",
            "pxelinux over TFTP", r["tftp_transfer_seconds"], "iPXE over HTTP (lighttpd)", r["http_transfer_seconds"],
            f">= {GOAL_TRANSFER_RATIO:g}x", GOAL_TRANSFER_RATIO,
            a_samples=[s["transfer"] for s in tftp], b_samples=[s["transfer"] for s in http]),
        comparisons.comparison(
            f"qemu start to the kernel's first line ({mib} MiB; firmware, DHCP, loader, transfer)",
            "pxelinux over TFTP", r["tftp_load_seconds"], "iPXE over HTTP (lighttpd)", r["http_load_seconds"],
            "reported", None, a_samples=[s["load"] for s in tftp], b_samples=[s["load"] for s in http]),
        comparisons.comparison(
            f"boot to multi-user.target ({mib} MiB cpio image)", "pxelinux over TFTP", r["tftp_multi_user_seconds"],
            "iPXE over HTTP (lighttpd)", r["http_multi_user_seconds"], "reported", None,
            a_samples=[s["multi_user"] for s in tftp], b_samples=[s["multi_user"] for s in http],
            note="qemu TCG guest: the boot after the load is CPU-bound and the same on both sides"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--src", type=Path, help="version directory of a cpio pack (default: newest pack of compute)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per boot")
    parser.add_argument("--keep", action="store_true", help="keep build/bench-boot (tree, consoles) afterwards")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "boot.json")
    args = parser.parse_args()
    src = (args.src or newest_pack()).resolve()
    try:
        results = {"image": shown(src), "runs": args.runs, "host": {"cpus": os.cpu_count()},
                   "boot": run(src, args.runs, args.timeout)}
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    results["comparisons"] = derive(results)
    return comparisons.write_results(results, args.output)


if __name__ == "__main__":
    sys.exit(main())
