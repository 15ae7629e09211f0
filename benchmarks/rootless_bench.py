# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rootless benchmark: the default DAG built by root and by an unprivileged user, side by side.

One invocation builds the layers of the default inventory (build stage only) under a fresh private
prefix once per side, one after the other, from the same cached bootstrap:

1. as root (root's containers-storage, overlay), roles with the host's ids (``hpc_stateless_build_userns: false``);
2. as root with the roles in a user namespace (``hpc_stateless_build_userns: true``, docs/rootless.md): container
   root is root's subordinate uid, the layer's ids mapped back before each commit (the "mapped" side, under a
   prefix of its own so that nothing of the first is cached for it);
3. as the build user (tests/integration/rootless_support.USER, made with subordinate ids when
   missing) in its own storage with the overlay driver (the kernel's, rootless);
4. as the same user with the vfs driver (a storage of its own, CONTAINERS_STORAGE_CONF), what
   rootless buildah falls back to without a storage.conf.

``--bootstrap-pairs N`` also times the default base layer's bootstrap by the rootfs module, mapped
(``userns: true``: mmdebstrap and the package scripts in a user namespace) and unmapped, in turn, N times each,
each into a fresh directory from the warm package cache, and compares the last two trees entry by entry.

Reported: wall time of each build, the commit time (sum of the ``Commit layer`` tasks, from
ansible.posix.profile_tasks), the disk the user's storage grew by (``du`` of its graph root
before and after), and whether every side built the same content keys. Nothing is judged: the
issue asks for the ratio. The bootstrap image is copied into the user's storages first (not
timed). Every image the benchmark built is removed at the end.

    python benchmarks/rootless_bench.py [--inventory DIR] [--sides overlay,root,vfs,mapped] [--bootstrap-pairs N]
                                        [--lock FILE] [--output FILE]

``--lock FILE`` holds an flock on FILE during each build only (a host shared with test runs).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
import statistics
import uuid
from pathlib import Path

import yaml

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from rootless_support import (BOOTSTRAP_VARYING, USER, as_user, buildah_as, copy_images,  # noqa: E402
                              ensure_storage_conf, ensure_user, playbook_env, tag_root_bootstrap, tags, tree_entries,
                              write_user_file)

COMMIT_TASK = re.compile(r"Commit layer (\S+) -+ ([0-9.]+)s")
SIDES = ("overlay", "root", "vfs", "mapped")  # the rootless side first: it is the one that may fail
#: The sides root builds, each with its hpc_stateless_build_userns.
ROOT_SIDES = {"root": False, "mapped": True}


def log(message: str) -> None:
    print(f"[rootless_bench] {message}", file=sys.stderr, flush=True)


def vfs_env(account: pwd.struct_passwd) -> dict[str, str]:
    """A vfs storage of the user's own, apart from its overlay one (the two drivers cannot share a graph root)."""
    base = Path(account.pw_dir, ".local", "share", "hpc-stateless-bench-vfs")
    conf = Path(account.pw_dir, ".config", "hpc-stateless-bench-vfs", "storage.conf")
    write_user_file(account, conf, f'[storage]\ndriver = "vfs"\ngraphroot = "{base}/graph"\n'
                                   f'runroot = "/var/tmp/hpc-stateless-bench-vfs-{account.pw_uid}"\n')
    return {"CONTAINERS_STORAGE_CONF": str(conf)}


def graph_root(user: str | None, env: dict[str, str]) -> Path:
    info = json.loads(buildah_as(user, "info", env=env))
    return Path(info["store"]["GraphRoot"])


def disk_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sx", "--block-size=1", str(path)], capture_output=True, text=True, check=False).stdout
    return int(out.split()[0]) if out.strip() else 0


@contextlib.contextmanager
def held(lock: str | None):
    """An exclusive flock on ``lock`` while the block runs (nothing without one)."""
    if not lock:
        yield
        return
    with open(lock, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(side: str, inventory: Path, prefix: str, project: Path, env: dict[str, str], logs: Path) -> dict:
    """site.yml's build stage as root or as the user; wall time, commit times, layers built."""
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(REPO / "site.yml"),
            "-e", f"hpc_stateless_image_prefix={prefix}", "-e", f"hpc_stateless_project_dir={project}",
            "-e", '{"hpc_stateless_site_stages": ["build"]}']
    if side in ROOT_SIDES:
        argv += ["-e", json.dumps({"hpc_stateless_build_userns": ROOT_SIDES[side]})]
    profile = {"ANSIBLE_CALLBACKS_ENABLED": "hpc.stateless.buildah_isolation,ansible.posix.profile_tasks",
               "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all", "PROFILE_TASKS_SORT_ORDER": "none"}
    started = time.monotonic()
    if side in ROOT_SIDES:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False,
                              env={**os.environ, **playbook_env(profile), "BUILDAH_ISOLATION": "chroot"})
    else:
        proc = as_user(USER, argv, playbook_env({**profile, **env}), cwd=REPO)
    seconds = time.monotonic() - started
    log_file = logs / f"{side}.log"
    log_file.write_text(" ".join(argv) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"the {side} build failed (log {log_file}):\n{proc.stdout[-4000:]}\n{proc.stderr[-1500:]}")
    commits = {layer: float(secs) for layer, secs in COMMIT_TASK.findall(proc.stdout)}
    log(f"{side}: {seconds:.1f} s, commits {sum(commits.values()):.1f} s ({len(commits)} layers)")
    return {"seconds": round(seconds, 2), "commit_seconds": commits, "commit_total_seconds": round(sum(commits.values()), 2)}


def bootstrap_pairs(pairs: int, inventory: Path, work: Path, logs: Path) -> dict:
    """The inventory's base layer bootstrapped by the rootfs module mapped and unmapped in turn (A B A B ...), each
    into a fresh directory: wall seconds of each run, their medians and ratio, and whether the last two trees hold
    the same entries (rootless_support.tree_entries)."""
    layers = yaml.safe_load((inventory / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
    keys = layers["hpc_stateless_layers"]["base"]["bootstrap"]
    seconds: dict[str, list[float]] = {"mapped": [], "unmapped": []}
    trees = {}
    for pair in range(pairs):
        for side in seconds:
            root = work / f"bootstrap-{side}"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            args = work / f"bootstrap-{side}.json"
            args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"path": str(root), "bootstrap": keys,
                                                                "layer": "bench", "userns": side == "mapped"}}))
            started = time.monotonic()
            proc = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m",
                                   "ansible_collections.hpc.stateless.plugins.modules.rootfs", str(args)],
                                  env={**os.environ, "PYTHONPATH": str(REPO / ".collections")},
                                  capture_output=True, text=True, check=False)
            elapsed = time.monotonic() - started
            (logs / f"bootstrap-{side}.json").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                sys.exit(f"the {side} bootstrap failed (log {logs / f'bootstrap-{side}.json'}): {proc.stdout[-3000:]}")
            seconds[side].append(round(elapsed, 2))
            log(f"bootstrap {pair + 1}/{pairs} {side}: {elapsed:.1f} s")
            if pair == pairs - 1:
                trees[side] = tree_entries(root, BOOTSTRAP_VARYING)
            shutil.rmtree(root)
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    return {"pairs": pairs, "seconds": seconds, "median_seconds": medians,
            "ratio": round(medians["mapped"] / medians["unmapped"], 3), "entries": len(trees["mapped"]),
            "same_tree": trees["mapped"] == trees["unmapped"]}


def layer_keys(user: str | None, env: dict[str, str], prefix: str, layers: list[str]) -> dict[str, list[str]]:
    listing = buildah_as(user, "images", "--json", env=env)
    return {layer: sorted(tags(listing, f"{prefix}/{layer}")) for layer in layers}


def remove_prefix(user: str | None, env: dict[str, str], prefix: str) -> None:
    """Every image name under ``prefix`` (the bootstrap tags too): nothing of the benchmark is left."""
    listing = json.loads(buildah_as(user, "images", "--json", env=env) or "[]") or []
    names = sorted({n for image in listing for n in image.get("names") or [] if n.startswith(prefix + "/")})
    if names:
        buildah_as(user, "rmi", *names, env=env)


def rows(result: dict) -> list[dict]:
    sides = result["sides"]
    same = {"same content keys": result["same_keys"]}
    out = []
    if "root" in sides and "overlay" in sides:
        out.append(comparisons.comparison(
            "default DAG build: root vs rootless (overlay)", "root", sides["root"]["seconds"],
            "rootless, overlay", sides["overlay"]["seconds"], "reported side by side", None, also=same,
            note=f"commits {sides['root']['commit_total_seconds']} s vs {sides['overlay']['commit_total_seconds']} s"))
    if "mapped" in sides and "root" in sides:
        out.append(comparisons.comparison(
            "default DAG build as root: roles in a user namespace vs the host's ids", "mapped",
            sides["mapped"]["seconds"], "unmapped", sides["root"]["seconds"], "reported side by side", None,
            also=same, note=f"commits {sides['mapped']['commit_total_seconds']} s vs "
                            f"{sides['root']['commit_total_seconds']} s"))
    if "overlay" in sides and "vfs" in sides:
        out.append(comparisons.comparison(
            "rootless commit time: vfs vs overlay", "vfs", sides["vfs"]["commit_total_seconds"],
            "overlay", sides["overlay"]["commit_total_seconds"], "reported side by side", None,
            note=f"whole build {sides['vfs']['seconds']} s vs {sides['overlay']['seconds']} s"))
        out.append(comparisons.comparison(
            "rootless disk use of the DAG: vfs vs overlay", "vfs", sides["vfs"]["disk_bytes"] / 2**20,
            "overlay", sides["overlay"]["disk_bytes"] / 2**20, "reported side by side", None, unit="MiB",
            note="growth of the user's graph root during the build"))
    boot = result.get("bootstrap")
    if boot:
        out.append(comparisons.comparison(
            "base layer bootstrap as root: mmdebstrap in a user namespace vs the host's ids", "mapped",
            boot["median_seconds"]["mapped"], "unmapped", boot["median_seconds"]["unmapped"], "reported side by side",
            None, a_samples=boot["seconds"]["mapped"], b_samples=boot["seconds"]["unmapped"],
            also={"same tree": boot["same_tree"]},
            note=f"median of {boot['pairs']} runs each, alternated; {boot['entries']} entries compared"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--inventory", default="inventory")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--bootstrap-pairs", type=int, default=0,
                        help="also time the base layer's bootstrap mapped and unmapped, this many times each")
    parser.add_argument("--lock", help="flock this file during each build (shared hosts)")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "rootless.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("rootless_bench runs as root: it builds as root and as the build user it makes")
    wanted = [s for s in args.sides.split(",") if s]
    if not set(wanted) <= set(SIDES):
        sys.exit(f"--sides: choose from {', '.join(SIDES)}")
    inventory = (REPO / args.inventory).resolve()
    account = ensure_user(USER)
    ensure_storage_conf(account)
    envs = {"root": {}, "mapped": {}, "overlay": {}, "vfs": vfs_env(account)}
    base_prefix = f"localhost/hpc-stateless-rootlessbench-{uuid.uuid4().hex[:6]}"
    # The two root sides share root's storage: each its own prefix, or the second would find the first's layers.
    prefixes = {side: base_prefix + ("-mapped" if side == "mapped" else "") for side in SIDES}
    work = Path(tempfile.mkdtemp(prefix="hpc-rootless-bench-"))
    logs = Path(args.output).resolve().parent / "rootless-logs"  # each build's output, kept
    logs.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    result: dict = {"image": f"default DAG of {args.inventory}", "inventory": args.inventory, "prefix": base_prefix,
                    "user": USER, "sides": {}}
    try:
        for tagged in sorted({prefixes[side] for side in wanted}):  # root's bootstrap under each prefix
            tag_root_bootstrap(tagged)
        for side in wanted:
            if side not in ROOT_SIDES:
                copied = copy_images(f"{prefixes[side]}/bootstrap/base", USER, work, envs[side])
                log(f"{side}: bootstrap image copied into the user's storage ({len(copied)})")
        for side in wanted:  # one after the other, never at the same time
            project = work / side
            project.mkdir()
            user = None if side in ROOT_SIDES else USER
            if user:
                os.chown(project, account.pw_uid, account.pw_gid)
            root_dir = graph_root(user, envs[side])
            with held(args.lock):
                before = disk_bytes(root_dir) if user else 0
                result["sides"][side] = build(side, inventory, prefixes[side], project, envs[side], logs)
                if user:
                    result["sides"][side]["disk_bytes"] = disk_bytes(root_dir) - before
                    result["sides"][side]["graph_root"] = str(root_dir)
        if args.bootstrap_pairs > 0:
            with held(args.lock):
                result["bootstrap"] = bootstrap_pairs(args.bootstrap_pairs, inventory, work, logs)
        layers = sorted({layer for side in result["sides"].values() for layer in side["commit_seconds"]})
        keys = {side: layer_keys(None if side in ROOT_SIDES else USER, envs[side], prefixes[side], layers)
                for side in result["sides"]}
        result["keys"] = keys
        result["same_keys"] = len({json.dumps(k, sort_keys=True) for k in keys.values()}) == 1 if keys else None
    finally:
        for side in wanted:
            if side not in ROOT_SIDES:
                remove_prefix(USER, envs[side], prefixes[side])
        for tagged in sorted({prefixes[side] for side in wanted}):
            remove_prefix(None, {}, tagged)
        shutil.rmtree(work, ignore_errors=True)
    result["comparisons"] = rows(result)
    return comparisons.write_results(result, Path(args.output))


if __name__ == "__main__":
    sys.exit(main())
