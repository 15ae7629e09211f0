# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lynis benchmark (issue 28): the hardening index of our default image beside a plain Debian image of the
same package set, both booted under systemd-nspawn, in one run, and the seconds Lynis adds to verify.

  plain  the bootstrap image of the default chain's root layer (``<prefix>/bootstrap/<root>:latest``: the
         bootstrapped Debian with no role applied) plus ``apt-get install`` of every package the default
         image has marked as manually installed (``apt-mark showmanual`` in the image), i.e. the same
         package set with no roles. Built once and kept as ``localhost/hpc-stateless-lynisbench/plain:<key>``,
         the key a hash of the bootstrap image ID and the package list (a rebuilt image gets a new one).
  ours   the default image (``<prefix>/<leaf layer>:latest``, which ``site.yml`` builds).

Both are judged by playbooks/tasks/verify_lynis.yml exactly as verify.yml does (the same bind of the build
host's Lynis, the same profile and waivers); a throw-away munge key is bound in for both boots. Goal: ours
>= hpc_stateless_verify_lynis_min_score (80); the plain image's index is reported beside it.

    python benchmarks/lynis_bench.py [--image REF] [--bootstrap REF] [--runs N] [--output FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import comparisons  # noqa: E402  pylint: disable=wrong-import-position
from booted_play import booted_play, munge_key, run_playbook  # noqa: E402  pylint: disable=wrong-import-position
from run_all import load_defaults  # noqa: E402  pylint: disable=wrong-import-position

MIN_SCORE = 80
PLAIN_REPO = "localhost/hpc-stateless-lynisbench/plain"


def playbook(out: Path) -> str:
    """Lynis on each booted image, as verify.yml runs it: this boot's profile bound in, then verify_lynis.yml."""
    return booted_play(
        "Lynis on each booted image, judged as verify judges it",
        binds="(_boot_files.binds | default([])) + (true | hpc.stateless.lynis_nspawn_args)",
        variables={"hpc_stateless_verify_lynis_waivers": [], "hpc_stateless_verify_lynis_min_score": MIN_SCORE,
                   "hpc_stateless_verify_lynis_timeout": 1800},
        block=[{"name": "This boot's Lynis profile, as verify.yml writes it",
                "hpc.stateless.verify_boot_files": {
                    "files": [{"path": "{{ 'profile' | hpc.stateless.lynis_boot_path }}",
                               "content": "{{ hpc_stateless_verify_lynis_waivers | hpc.stateless.lynis_profile }}"}]},
                "register": "_boot_files"},
               {"name": "The Lynis task file of verify.yml (boots the image, runs Lynis, judges its report)",
                "ansible.builtin.import_tasks": str(REPO / "playbooks/tasks/verify_lynis.yml")}],
        rescue_name="A score below the minimum is a result here, not an error", rescue_that="_lynis_verdict is defined",
        result="{'verdict': _lynis_verdict | default(none), 'seconds': _lynis_run.delta | default(none)}",
        cleanup={"name": "Remove the boot's files", "when": "_boot_files.path is defined",
                 "hpc.stateless.verify_boot_files": {"state": "absent", "path": "{{ _boot_files.path }}"}},
        out=out)


def log(message: str) -> None:
    print(f"[lynis_bench] {message}", file=sys.stderr, flush=True)


def run(argv: list[str], **kwargs: Any) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs).stdout


def manual_packages(image: str) -> list[str]:
    """The packages ``image`` has marked as manually installed (what its roles and bootstrap asked for)."""
    container = run(["buildah", "from", "--pull-never", image]).strip()
    try:
        root = run(["buildah", "mount", container]).strip()
        return sorted(run(["chroot", root, "apt-mark", "showmanual"]).split())
    finally:
        subprocess.run(["buildah", "rm", container], check=False, capture_output=True)


def plain_image(bootstrap: str, packages: list[str]) -> str:
    """The bootstrap image plus ``packages``, no roles: built once per bootstrap image ID and package list."""
    image_id = run(["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", bootstrap]).strip()
    key = hashlib.sha256(json.dumps([image_id, packages]).encode()).hexdigest()[:16]
    ref = f"{PLAIN_REPO}:{key}"
    if subprocess.run(["buildah", "inspect", "--type", "image", ref], capture_output=True, check=False).returncode == 0:
        log(f"plain image {ref} (cached)")
        return ref
    log(f"building plain image {ref}: {bootstrap} + {len(packages)} packages")
    container = run(["buildah", "from", "--pull-never", bootstrap]).strip()
    try:
        env = dict(os.environ, BUILDAH_ISOLATION=os.environ.get("BUILDAH_ISOLATION", "chroot"))
        script = ("export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && "
                  "apt-get install -y -qq --no-install-recommends \"$@\" >/dev/null && apt-get clean")
        subprocess.run(["buildah", "run", "--network", "host", container, "--", "sh", "-c", script, "sh", *packages],
                       check=True, env=env)
        run(["buildah", "commit", "--rm", container, ref])
        container = ""
    finally:
        if container:
            subprocess.run(["buildah", "rm", container], check=False, capture_output=True)
    return ref


def lynis_runs(images: dict[str, str], work: Path, extra_vars: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """One booted Lynis run per image (serially: the machine is small), judged by verify_lynis.yml;
    ``extra_vars`` go into the inventory (e.g. ansible_nspawn_runtime_dir)."""
    inventory = {"all": {"hosts": {name: {"ansible_nspawn_image": ref} for name, ref in images.items()},
                         "vars": {"munge_key": str(munge_key(work)), **(extra_vars or {})}}}
    run_playbook(work, "play", playbook(work), inventory, "lynis_bench")
    results = {}
    for name in images:
        data = json.loads((work / f"{name}.json").read_text(encoding="utf-8"))
        if not data["verdict"]:
            raise SystemExit(f"lynis_bench: Lynis gave no verdict on {images[name]} (see the playbook's output)")
        hours, minutes, seconds = data["seconds"].split(":")
        results[name] = {"image": images[name], "score": data["verdict"]["score"], "passed": data["verdict"]["passed"],
                         "unwaived": data["verdict"]["unwaived"], "checks": data["verdict"]["checks"],
                         "message": data["verdict"]["message"], "lynis_seconds":
                             int(hours) * 3600 + int(minutes) * 60 + float(seconds)}
    return results


def image_arguments(doc: str, output: str) -> argparse.ArgumentParser:
    """The options of a benchmark of our image beside the plain one: --image, --bootstrap, --output (``output``
    under benchmarks/results by default)."""
    defaults = load_defaults()
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--image", default=defaults.image_ref, help="our image (default %(default)s)")
    parser.add_argument("--bootstrap", default=f"{defaults.prefix}/bootstrap/{defaults.root_layer}:latest",
                        help="the bootstrapped root the plain image starts from (default %(default)s)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / output))
    return parser


def main() -> int:
    parser = image_arguments(__doc__, "lynis.json")
    parser.add_argument("--runs", type=int, default=1, help="Lynis runs per image (the index does not vary)")
    args = parser.parse_args()

    packages = manual_packages(args.image)
    plain = plain_image(args.bootstrap, packages)
    samples: dict[str, list[dict[str, Any]]] = {"plain": [], "ours": []}
    with tempfile.TemporaryDirectory(prefix="lynis-bench.") as tmp:
        for index in range(args.runs):
            started = time.monotonic()
            result = lynis_runs({"plain": plain, "ours": args.image}, Path(tmp))
            log(f"run {index + 1}: plain {result['plain']['score']}, ours {result['ours']['score']} "
                f"({time.monotonic() - started:.0f} s for both boots)")
            for side in samples:
                samples[side].append({k: v for k, v in result[side].items() if k != "checks"})
    score = {side: statistics.median(r["score"] for r in runs) for side, runs in samples.items()}
    seconds = {side: statistics.median(r["lynis_seconds"] for r in runs) for side, runs in samples.items()}
    rows = [
        comparisons.comparison(
            "Lynis hardening index, booted (plain Debian of the same packages vs ours)",
            "plain Debian, same packages, no roles", score["plain"], "hpc.stateless default image", score["ours"],
            "reported side by side", None, unit="", higher_is_better=True,
            a_samples=[r["score"] for r in samples["plain"]], b_samples=[r["score"] for r in samples["ours"]]),
        comparisons.comparison(
            f"Lynis hardening index of the default image >= {MIN_SCORE}", "minimum", MIN_SCORE,
            "hpc.stateless default image", score["ours"], f">= {MIN_SCORE}, every finding waived", 1.0,
            kind=comparisons.BUDGET, unit="", higher_is_better=True,
            also={"every finding waived": all(not r["unwaived"] for r in samples["ours"])}),
        comparisons.comparison(
            "seconds Lynis adds to verify (inside the booted image)", "plain image", seconds["plain"],
            "default image", seconds["ours"], "reported", None),
    ]
    output = {"benchmark": "lynis", "packages": packages, "plain": samples["plain"], "ours": samples["ours"],
              "min_score": MIN_SCORE, "comparisons": rows}
    return comparisons.write_results(output, Path(args.output))


if __name__ == "__main__":
    sys.exit(main())
