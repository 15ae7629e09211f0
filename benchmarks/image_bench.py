# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make image` from nothing: the newcomer's first command, timed step by step, then the second `make image`.

What "from nothing" means here, on a host that already has the host packages (they cannot be taken away
from a shared machine):

* **host packages**, measured apart: a fresh Debian 12 root (``mmdebstrap --variant=important``, not timed),
  booted into with ``systemd-nspawn`` (the host's network), where ``apt-get install --no-install-recommends``
  of the ``image_packages`` of scripts/setup.sh (read from that file) is timed: download, then unpack and
  configure.
* **make image**: a fresh ``git clone`` of the checkout's HEAD (uncommitted changes are not measured), run in a
  private mount namespace with an empty containers storage of its own (``CONTAINERS_STORAGE_CONF``), empty
  package and controller caches (``/var/cache/hpc-stateless`` and ``/var/cache/hpc.stateless`` bind-mounted
  over with empty directories), an empty ``XDG_CACHE_HOME`` and ``PIP_NO_CACHE_DIR=1`` (every wheel
  downloaded). The playbook's stages come from ``ansible.posix.profile_tasks``: set-up (the venv and pip), plan,
  the bootstrap, each layer, verify (and its Lynis, suite, OpenSCAP), pack, deploy.
* **the second make image** in the same clone: nothing may be built, packed or published.

Goals (issue budget): host packages + the first ``make image`` <= 300 s; the second <= 10 s and changes
nothing. The figures depend on the machine and its load: the load average is recorded beside them.

    python benchmarks/image_bench.py [--keep] [--no-packages] [--output benchmarks/results/image.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import comparisons  # noqa: E402  pylint: disable=wrong-import-position

GOAL_FIRST_S = 300.0
GOAL_SECOND_S = 10.0
# The host of a task's first result line: "ok: [base]", "changed: [base -> localhost]", "included: x.yml for base".
RESULT_HOST = re.compile(r"^(?:(?:ok|changed|skipping): \[([^\]]+)\]|included: \S+ for (\S+))")
CACHES = ("/var/cache/hpc-stateless", "/var/cache/hpc.stateless")
# profile_tasks' line after every task header: "<date> (<previous task's seconds>) <cumulative> ****"
STAMP = re.compile(r"\((\d+):(\d+):(\d+\.\d+)\)\s+(\d+):(\d+):(\d+\.\d+) \*+\s*$", re.M)


def log(message: str) -> None:
    print(f"[image_bench] {message}", file=sys.stderr, flush=True)


def image_packages(setup: Path = REPO / "scripts" / "setup.sh") -> list[str]:
    """The ``image_packages=( ... )`` array of scripts/setup.sh: the one list of what make image installs."""
    match = re.search(r"^image_packages=\((.*?)^\)", setup.read_text(encoding="utf-8"), re.S | re.M)
    if not match:
        raise SystemExit(f"{setup}: no image_packages=( ... ) array")
    return match.group(1).split()


def host_packages(work: Path, packages: list[str]) -> dict[str, Any]:
    """Download, then unpack and configure, ``packages`` in a fresh Debian 12 root; seconds of each."""
    root = work / "debian12"
    log("host packages: a fresh Debian 12 root (mmdebstrap --variant=important, not timed)")
    subprocess.run(["mmdebstrap", "--quiet", "--variant=important", "bookworm", str(root)], check=True)
    nspawn = ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "-D", str(root),
              "--setenv=DEBIAN_FRONTEND=noninteractive"]
    apt = ["apt-get", "-y", "-q", "-o", "Acquire::Retries=6", "install", "--no-install-recommends"]
    subprocess.run([*nspawn, "apt-get", "-q", "update"], check=True, stdout=subprocess.DEVNULL)
    times = {}
    for step, extra in (("download", ["--download-only"]), ("unpack_configure", [])):
        log(f"host packages: {step} of {len(packages)}")
        start = time.monotonic()
        subprocess.run([*nspawn, *apt, *extra, *packages], check=True, stdout=subprocess.DEVNULL)
        times[step] = round(time.monotonic() - start, 2)
    archives = root / "var/cache/apt/archives"
    debs = list(archives.glob("*.deb"))
    return {"packages": packages, "debs": len(debs), "mb": round(sum(d.stat().st_size for d in debs) / 1e6, 1),
            "seconds": round(sum(times.values()), 2), **{f"{k}_seconds": v for k, v in times.items()}}


def fresh_runs(work: Path) -> dict[str, Any]:
    """Clone HEAD, then ``make image`` twice in a private mount namespace with empty storage and caches."""
    clone = work / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    for name in ("storage", "runroot", "cache-build", "cache-controller", "xdg"):
        (work / name).mkdir()
    conf = work / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{work}/storage"\nrunroot = "{work}/runroot"\n',
                    encoding="utf-8")
    script = "\n".join([
        "set -u", "mount --make-rprivate /",
        f"mount --bind {work}/cache-build {CACHES[0]}", f"mount --bind {work}/cache-controller {CACHES[1]}",
        f"cd {clone}",
        'for run in 1 2; do start=$(date +%s.%N); make image > "$1/image$run.log" 2>&1; rc=$?;',
        '  echo "$run $rc $start $(date +%s.%N)" >> "$1/runs"; [ $rc = 0 ] || exit $rc; done'])
    env = {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf), "XDG_CACHE_HOME": str(work / "xdg"),
           "PIP_NO_CACHE_DIR": "1",
           "ANSIBLE_CALLBACKS_ENABLED": "hpc.stateless.buildah_isolation,ansible.posix.profile_tasks"}
    for name in ("ANSIBLE_CONFIG", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(name, None)
    for cache in CACHES:
        Path(cache).mkdir(parents=True, exist_ok=True)
    log(f"make image from nothing in {clone} (private storage and caches)")
    load_before = os.getloadavg()
    proc = subprocess.run(["unshare", "-m", "bash", "-c", script, "image-bench", str(work)], env=env, check=False)
    runs = {}
    for line in (work / "runs").read_text(encoding="utf-8").splitlines() if (work / "runs").exists() else []:
        number, status, start, end = line.split()
        runs[number] = {"exit_status": int(status), "seconds": round(float(end) - float(start), 2)}
    if proc.returncode or len(runs) != 2:
        tail = (work / f"image{len(runs) or 1}.log").read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"make image failed (exit {proc.returncode}); the end of its log:\n{tail}")
    first_log = (work / "image1.log").read_text(encoding="utf-8")
    second_log = (work / "image2.log").read_text(encoding="utf-8")
    parsed = tasks(first_log)
    stages = stages_of(parsed, first_log)
    stages["set-up (venv, pip, collection link) and make"] = round(runs["1"]["seconds"] - stages.pop("playbook"), 2)
    served = sorted(str(p.relative_to(clone / "build/tftpboot")) for p in (clone / "build/tftpboot").iterdir()
                    if p.is_symlink())
    return {"first": {**runs["1"], "stages": stages, "top_tasks": top_tasks(parsed, 12), "served_links": served},
            "second": {**runs["2"], "nothing_changed": nothing_changed(second_log)},
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "commit": subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True, check=True).stdout.strip()}


def seconds(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def tasks(text: str) -> list[tuple[str, str, str, float]]:
    """(play, task, host, seconds) of every task, from profile_tasks' stamps; a task with no result line of its
    own (a meta task) gets the host of its play's other tasks."""
    out: list[list[Any]] = []
    play, task, number = "", "", 0
    for line in text.splitlines():
        if line.startswith("PLAY ["):
            play, number = line[6:line.index("]")], number + 1
        elif line.startswith("TASK ["):
            task = line[6:line.rindex("]")]
        elif (stamp := STAMP.search(line)) and task:
            if out:
                out[-1][3] = seconds(*stamp.groups()[:3])
            out.append([play, task, "", 0.0, number])
        elif out and not out[-1][2] and (host := RESULT_HOST.match(line)):
            out[-1][2] = (host.group(1) or host.group(2)).split(" -> ")[0]
    hosts = {entry[4]: entry[2] for entry in out if entry[2]}
    return [(p, t, h or hosts.get(n, ""), s) for p, t, h, s, n in out]


def stages_of(parsed: list[tuple[str, str, str, float]], text: str) -> dict[str, float]:
    """Seconds per stage of site.yml's run (``parsed``: :func:`tasks` of its log ``text``): plan, bootstrap, each
    layer, verify, pack, deploy, and the total."""
    stages: dict[str, float] = {}
    for play, task, host, secs in parsed:
        if task.startswith("Bootstrap the root file system"):
            name = "bootstrap"
        elif play.startswith("Build stale layers"):
            name = f"layer {host or '?'}"
        elif "verif" in play.lower():
            name = "verify"
        elif play.startswith("Pack"):
            name = "pack"
        elif "boot server" in play.lower() or play.startswith("Deploy"):
            name = "deploy"
        else:
            name = "plan"
        stages[name] = round(stages.get(name, 0.0) + secs, 2)
    total = [seconds(*m.groups()[3:]) for m in STAMP.finditer(text)]
    stages["playbook"] = round(total[-1], 2) if total else 0.0
    return stages


def top_tasks(parsed: list[tuple[str, str, str, float]], count: int) -> list[dict[str, Any]]:
    ranked = sorted(parsed, key=lambda t: -t[3])[:count]
    return [{"task": task, "seconds": round(secs, 2)} for _play, task, _host, secs in ranked]


def nothing_changed(text: str) -> bool:
    """The second run built, packed and published nothing: every PLAY RECAP line says changed=0."""
    recap = re.findall(r"^\S+\s+: ok=\d+\s+changed=(\d+)", text, re.M)
    return bool(recap) and all(n == "0" for n in recap) and "0 to build" in text


def rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    first, second, packages = data["first"], data["second"], data.get("host_packages")
    total = first["seconds"] + (packages["seconds"] if packages else 0.0)
    stages = ", ".join(f"{k} {comparisons.fmt_value(v)}" for k, v in first["stages"].items())
    label = "host packages + make image" if packages else "make image (host packages not measured)"
    return [
        comparisons.budget("make image from nothing (fresh clone, empty storage and caches)", GOAL_FIRST_S, label,
                           total, f"<= {GOAL_FIRST_S:g} s", also={"packages measured": bool(packages)},
                           note=(f"host packages {comparisons.fmt_value(packages['seconds'])}; " if packages else "")
                           + stages),
        comparisons.budget("the second make image", GOAL_SECOND_S, "make image again", second["seconds"],
                           f"<= {GOAL_SECOND_S:g} s, nothing built, packed or published",
                           also={"nothing changed": second["nothing_changed"]}),
    ]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--no-packages", action="store_true", help="leave out the host packages' step")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (clone, logs, storage)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "image.json")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("run as root: a private mount namespace and the host's caches are bound over")
    work = Path(tempfile.mkdtemp(prefix="image-bench-", dir="/var/tmp"))
    try:
        data: dict[str, Any] = {"benchmark": "image", "cpus": os.cpu_count()}
        if not args.no_packages:
            data["host_packages"] = host_packages(work, image_packages())
        data.update(fresh_runs(work))
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    data["comparisons"] = rows(data)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(comparisons.text_table(data["comparisons"]))
    print(json.dumps({"stages": data["first"]["stages"], "top_tasks": data["first"]["top_tasks"]}, indent=1))
    return 0 if all(row["met"] for row in data["comparisons"]) else 1


if __name__ == "__main__":
    sys.exit(main())
