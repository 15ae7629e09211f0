# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Peer benchmark: our layered build against mkosi 14 and ansible-bender 0.10.1 on their own jobs.

Side by side in one run on this machine, with warm .deb caches for all three:

* job 1, a root file system: Debian bookworm minbase + systemd, systemd-sysv, python3,
  openssh-server, linux-image-amd64, as mkosi's full build (directory output) and as our root
  layer (``bootstrap:`` with that package set);
* job 2, a 3-task leaf role (apt chrony + less, a user, a template) as ansible-bender's playbook
  and as our child layer of that root layer.

Our side is a two-layer DAG in a temporary project (its own inventory, roles/ and a build.yml
that imports hpc.stateless.build), built with the collection as this checkout holds it. Every
scenario edits the shared sources, runs each tool that has a notion of it, and reads the
resulting image back (the template's file, the user, the packages): a stale result is reported
as stale, never as fast. Scenarios: full, no-op, one task changed, variable changed, template
content changed, file touched, comment added to the inventory, base package added (mkosi
``-ff``). ansible-bender builds on our root layer's image, as a user of both would.

The benchmark installs its peers itself, idempotently: mkosi and runc from apt, ansible-bender
in its own venv under /var/cache/hpc-stateless-peer-bench with ansible-core < 2.19 and the
containers.podman collection (its buildah connection). Every image and container it makes is
under a private prefix and removed at the end; nothing else is touched.

Also: the default DAG (base -> hsn -> compute -> slurm) from a cached bootstrap (the bootstrap
image of the default inventory, tagged into the private prefix), full build vs the rebuild
after touching the leaf layer's role (skipped with --quick or --no-default-dag).

Goals: root layer with kernel <= 1.0x mkosi's full build; whole leaf layer <= 0.5x
ansible-bender's cold build; one task changed <= 1.0x ansible-bender; base package added <=
1.0x mkosi -ff; no-op <= 2 s; every scenario correct; default DAG leaf rebuild <= 15 % of the
full build. Where a goal is missed the row's note names the slowest tasks of our build
(ansible.posix.profile_tasks) and the JSON keeps the whole profile.

    python benchmarks/peer_bench.py [--quick] [--no-default-dag] [--keep] [--output FILE]
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import comparisons
from build_bench import PLAN_LINE, copy_checkout, pick_leaf, plan, role_dir, run_build

REPO = Path(__file__).resolve().parents[1]
PEER_HOME = Path(os.environ.get("HPC_STATELESS_PEER_BENCH_HOME", "/var/cache/hpc-stateless-peer-bench"))
BENDER_VENV = PEER_HOME / "bender-venv"
BENDER_COLLECTIONS = PEER_HOME / "collections"
MKOSI_CACHE = PEER_HOME / "mkosi-cache"
BENDER_APT_CACHE = PEER_HOME / "bender-apt"  # bind-mounted at /var/cache/apt/archives: its warm .deb cache
MKOSI_VERSION = "14"
BENDER_VERSION = "0.10.1"
BENDER_CORE = "ansible-core<2.19"
MIRROR = "http://deb.debian.org/debian"
ROOT_PACKAGES = ["systemd", "systemd-sysv", "python3", "openssh-server", "linux-image-amd64"]
ADDED_PACKAGE = "tree"
LEAF_PACKAGES = ["chrony", "less"]
ROOT_LAYER, LEAF_LAYER, ROLE = "peerroot", "peerleaf", "peer_leaf"
USER, UID = "benchuser", 2001
ROLE_PATH = re.compile(r"hpc\.stateless\.\S*/roles/")  # a project role's task as profile_tasks names it
# profile_tasks right-aligns " <seconds>s" in 9 columns after the name: a long task name that took >= 10 s
# is followed by two dashes only ("... Install chrony and less -- 11.66s"), >= 100 s by one.
PROFILE_LINE = re.compile(r"^(?P<task>\S.*?) -+ (?P<seconds>\d+(?:\.\d+)?)s\s*$")
GOALS = {"root": 1.0, "leaf": 2.0, "task": 1.0, "base_package": 1.0, "noop_seconds": 2.0, "dag_leaf": 0.15}
BUILDAH_ENV = {"BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot")}
# ansible-bender's pre-flight `podman run --rm <base> true`: on hosts that refuse raising
# RLIMIT_NPROC/NOFILE (containers, sandboxes) podman's defaults fail; lowered limits always work.
PODMAN_RUN_ARGS = "--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096"


def log(message: str) -> None:
    print(f"[peer_bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(argv: list[str], *, env: Optional[dict] = None, cwd: Optional[Path] = None, check: bool = True,
        timeout: float = 3600, close_stdin: bool = False) -> subprocess.CompletedProcess:
    """One process with stdin from /dev/null, so that a `buildah run` child cannot leave ours
    non-blocking; ``close_stdin``: no stdin at all (`0<&-`), which ansible-bender needs: its
    pre-flight `podman run` makes the stdin it inherits non-blocking, and its next
    ansible-playbook then refuses to start."""
    proc = subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=cwd,
                          stdin=None if close_stdin else subprocess.DEVNULL,
                          preexec_fn=(lambda: os.close(0)) if close_stdin else None,
                          capture_output=True, text=True, errors="replace", check=False, timeout=timeout)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... failed (rc={proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


# --- the peers, installed idempotently -------------------------------------------------------

def dpkg_version(package: str) -> str:
    proc = run(["dpkg-query", "-W", "-f", "${Status}|${Version}", package], check=False)
    status, _sep, version = proc.stdout.partition("|")
    return version if proc.returncode == 0 and status.endswith(" installed") else ""


def ensure_apt_peers() -> dict[str, str]:
    missing = [p for p in ("mkosi", "runc", "podman", "buildah", "debootstrap") if not dpkg_version(p)]
    if missing:
        log(f"apt-get install {' '.join(missing)}")
        run(["apt-get", "install", "-y", "--no-install-recommends", *missing],
            env={"DEBIAN_FRONTEND": "noninteractive"})
    version = dpkg_version("mkosi")
    if not version.startswith(MKOSI_VERSION + "-"):
        raise SystemExit(f"mkosi {version} is installed, the benchmark compares with mkosi {MKOSI_VERSION} "
                         "(Debian bookworm's package): install that version or run on bookworm")
    return {"mkosi": version, "runc": dpkg_version("runc"), "podman": dpkg_version("podman"),
            "buildah": dpkg_version("buildah"), "debootstrap": dpkg_version("debootstrap")}


def ensure_bender() -> dict[str, str]:
    bender = BENDER_VENV / "bin" / "ansible-bender"
    if not bender.exists() or run([str(bender), "--version"], check=False).stdout.strip() != BENDER_VERSION:
        log(f"installing ansible-bender {BENDER_VERSION} and {BENDER_CORE} into {BENDER_VENV}")
        run([sys.executable, "-m", "venv", "--clear", str(BENDER_VENV)])
        run([str(BENDER_VENV / "bin" / "pip"), "install", "-q", f"ansible-bender=={BENDER_VERSION}", BENDER_CORE])
    podman = BENDER_COLLECTIONS / "ansible_collections" / "containers" / "podman"
    if not podman.is_dir():
        ensure_podman_collection(podman)
    core = run([str(BENDER_VENV / "bin" / "python"), "-c",
                "import ansible.release as r; print(r.__version__)"]).stdout.strip()
    manifest = json.loads((podman / "MANIFEST.json").read_text(encoding="utf-8"))
    return {"ansible-bender": BENDER_VERSION, "ansible-core (bender's venv)": core,
            "containers.podman": manifest["collection_info"]["version"]}


def ensure_podman_collection(target: Path) -> None:
    """ansible-bender runs `ansible-playbook -c buildah`: the containers.podman collection.
    From Galaxy when it is reachable, else the copy in this checkout's venv (the `ansible` package)."""
    galaxy = run([str(BENDER_VENV / "bin" / "ansible-galaxy"), "collection", "install", "containers.podman",
                  "-p", str(BENDER_COLLECTIONS)], check=False, timeout=300)
    if galaxy.returncode == 0 and target.is_dir():
        return
    local = sorted((REPO / ".venv" / "lib").glob("python3*/site-packages/ansible_collections/containers/podman"))
    if not local:
        raise SystemExit("containers.podman is neither on Galaxy (unreachable) nor in .venv: "
                         f"install it into {BENDER_COLLECTIONS} (ansible-galaxy collection install containers.podman)")
    log(f"Galaxy unreachable: containers.podman copied from {local[0]}")
    staging = target.with_name(".podman-staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(local[0], staging, symlinks=True)
    staging.rename(target)


# --- the sources, one state written for all three tools ---------------------------------------

@dataclass(frozen=True)
class State:
    """What the sources say; the expected content of every image follows from it."""

    root_packages: tuple[str, ...] = tuple(ROOT_PACKAGES)
    user_comment: str = "bench user"
    message: str = "hello from the leaf"
    template_line: str = "node motd v1"
    comments: int = 0

    def motd(self) -> str:
        return f"{self.template_line}: {self.message}\n"


def write_sources(proj: Path, state: State, prefix: str) -> None:
    """Our project (inventory, role, build.yml, ansible.cfg), the bender playbook and mkosi.conf."""
    role = proj / "roles" / ROLE
    for sub in ("tasks", "templates", "defaults"):
        (role / sub).mkdir(parents=True, exist_ok=True)
    write_if_changed(role / "tasks" / "main.yml", f"""---
- name: Install chrony and less
  ansible.builtin.apt:
    name: [{', '.join(LEAF_PACKAGES)}]
    state: present
- name: Add the service user
  ansible.builtin.user:
    name: {USER}
    uid: {UID}
    comment: "{state.user_comment}"
    shell: /bin/bash
- name: Write the motd from its template
  ansible.builtin.template:
    src: motd.j2
    dest: /etc/motd
    mode: "0644"
""")
    write_if_changed(role / "defaults" / "main.yml", "---\npeer_leaf_message: unset\n")
    write_if_changed(role / "templates" / "motd.j2", f"{state.template_line}: {{{{ peer_leaf_message }}}}\n")
    comments = "".join(f"# comment {i + 1} added by peer_bench\n" for i in range(state.comments))
    inventory = proj / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    write_if_changed(inventory / "hosts.yml", "---\nall:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                     "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n")
    write_if_changed(inventory / "group_vars" / "all" / "layers.yml", f"""---
{comments}hpc_stateless_image_prefix: {prefix}
hpc_stateless_layers:
  {ROOT_LAYER}:
    bootstrap:
      distro: debian
      release: bookworm
      variant: minbase
      mirror: {MIRROR}
      packages: [{', '.join(state.root_packages)}]
    roles: []
  {LEAF_LAYER}:
    parent: {ROOT_LAYER}
    roles: [{ROLE}]
    vars:
      peer_leaf_message: "{state.message}"
""")
    write_if_changed(proj / "build.yml",
                     "---\n- name: Build the layers\n  ansible.builtin.import_playbook: hpc.stateless.build\n")
    write_if_changed(proj / "bender.yml", f"""---
{comments}- name: The leaf role as ansible-bender builds it
  hosts: all
  vars:
    peer_leaf_message: "{state.message}"
    ansible_bender:
      base_image: {prefix}/bender-base:latest
      target_image:
        name: {prefix}/bender-leaf
  roles: [{ROLE}]
""")
    (proj / "mkosi").mkdir(exist_ok=True)
    write_if_changed(proj / "mkosi" / "mkosi.conf", f"""{comments}[Distribution]
Distribution=debian
Release=bookworm
Mirror={MIRROR}

[Output]
Format=directory
Output=image

[Content]
Packages={','.join(state.root_packages)}
""")
    write_ansible_cfg(proj)


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_ansible_cfg(proj: Path) -> None:
    """The checkout's ansible.cfg (whatever connection/strategy settings main holds), with the
    collection from this checkout, the project's roles and the per-task profile callback."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg", encoding="utf-8")
    defaults = cfg["defaults"]
    defaults["collections_path"] = str(REPO / ".collections")
    defaults["roles_path"] = str(proj / "roles")
    defaults.pop("inventory", None)
    enabled = [c.strip() for c in defaults.get("callbacks_enabled", "").split(",") if c.strip()]
    defaults["callbacks_enabled"] = ", ".join(dict.fromkeys([*enabled, "ansible.posix.profile_tasks"]))
    with open(proj / "ansible.cfg", "w", encoding="utf-8") as handle:
        cfg.write(handle)


# --- the three tools ---------------------------------------------------------------------------

@dataclass
class Run:
    tool: str
    scenario: str
    seconds: float
    rebuilt: str  # layers or tasks rebuilt, as the tool reports them
    rc: int = 0
    correct: Optional[bool] = None
    problems: list[str] = field(default_factory=list)
    profile: list[list[Any]] = field(default_factory=list)
    note: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Run":
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "scenario": self.scenario, "seconds": self.seconds, "rebuilt": self.rebuilt,
                "rc": self.rc, "correct": self.correct, "problems": self.problems, "profile": self.profile,
                "note": self.note}


def settle() -> None:
    """Before each timed run, untimed: write back what the previous run left dirty (a root layer's commit leaves
    some hundred MB), so no tool's time includes another's writeback."""
    os.sync()


def ours(proj: Path, scenario: str, prefix: str) -> Run:
    env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(proj / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PYTHONPATH": str(REPO / ".collections"), "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "40"}
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory", "build.yml"]
    settle()
    start = time.monotonic()
    proc = run(argv, env=env, cwd=proj, check=False)
    seconds = round(time.monotonic() - start, 2)
    if proc.returncode != 0:
        raise SystemExit(f"our build ({scenario}) failed (rc={proc.returncode}):\n{proc.stdout[-4000:]}\n"
                         f"{proc.stderr[-2000:]}")
    match = PLAN_LINE.search(proc.stdout.replace("\n", " "))
    if not match:
        raise SystemExit(f"our build ({scenario}): no plan line in the output; did build.yml change its message?")
    profile = [[ROLE_PATH.sub("", m.group("task").strip()), float(m.group("seconds"))]
               for m in map(PROFILE_LINE.match, proc.stdout.splitlines()) if m]
    built = f"{match.group(2)}/{match.group(1)} layers"
    log(f"ours, {scenario}: {seconds:.1f} s, {built}")
    return Run("ours", scenario, seconds, built, profile=profile)


def bender(proj: Path, scenario: str, home: Path) -> Run:
    env = {**BUILDAH_ENV, "PATH": f"{BENDER_VENV / 'bin'}:{os.environ['PATH']}", "HOME": str(home),
           "ANSIBLE_COLLECTIONS_PATH": str(BENDER_COLLECTIONS), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_ROLES_PATH": str(proj / "roles")}
    argv = [str(BENDER_VENV / "bin" / "ansible-bender"), "--database-dir", str(home), "build",
            f"--extra-podman-run-args={PODMAN_RUN_ARGS}",
            f"--build-volumes={BENDER_APT_CACHE}:/var/cache/apt/archives", "bender.yml"]
    settle()
    start = time.monotonic()
    proc = run(argv, env=env, cwd=proj, check=False, close_stdin=True)
    seconds = round(time.monotonic() - start, 2)
    if proc.returncode != 0:
        raise SystemExit(f"ansible-bender ({scenario}) failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    build = last_bender_build(home)
    layers = build.get("layers") or []
    rebuilt = sum(1 for layer in layers[1:] if not layer.get("cached"))
    log(f"ansible-bender, {scenario}: {seconds:.1f} s, {rebuilt}/{max(len(layers) - 1, 0)} tasks rebuilt")
    return Run("ansible-bender", scenario, seconds, f"{rebuilt}/{max(len(layers) - 1, 0)} tasks")


def bender_db(home: Path) -> dict[str, Any]:
    path = home / "ab" / "db.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def last_bender_build(home: Path) -> dict[str, Any]:
    builds = bender_db(home).get("builds") or {}
    return builds[max(builds, key=int)] if builds else {}


def bender_images(home: Path) -> list[str]:
    """Every image ansible-bender made in this run: its task layers and final images (not the base)."""
    ids = []
    for build in (bender_db(home).get("builds") or {}).values():
        ids += [layer["layer_id"] for layer in build.get("layers") or [] if layer.get("base_image_id")]
        if build.get("final_layer_id"):
            ids.append(build["final_layer_id"])
    return list(dict.fromkeys(i.removeprefix("sha256:") for i in ids))


def mkosi(proj: Path, scenario: str, force: str) -> Run:
    argv = ["mkosi", "--cache", str(MKOSI_CACHE), "--nspawn-keep-unit", *([force] if force else []), "build"]
    settle()
    start = time.monotonic()
    proc = run(argv, cwd=proj / "mkosi", check=False)
    seconds = round(time.monotonic() - start, 2)
    note = ""
    if proc.returncode != 0:
        if force or "exists already" not in proc.stdout + proc.stderr:
            raise SystemExit(f"mkosi ({scenario}) failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
        note = "mkosi refuses to build over its output without -f: the image is left as it was"
    rebuilt = "image" if force else "nothing"
    log(f"mkosi, {scenario}: {seconds:.1f} s, {rebuilt} built (rc={proc.returncode})")
    return Run("mkosi", scenario, seconds, rebuilt, rc=proc.returncode, note=note)


# --- reading the results back ----------------------------------------------------------------

def installed_packages(root: Path) -> set[str]:
    status = (root / "var" / "lib" / "dpkg" / "status").read_text(encoding="utf-8", errors="replace")
    found = set()
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status") == "install ok installed":
            found.add(fields.get("Package", ""))
    return found


def read_tree(root: Path) -> dict[str, Any]:
    motd = root / "etc" / "motd"
    passwd = (root / "etc" / "passwd").read_text(encoding="utf-8", errors="replace").splitlines()
    user = next((line for line in passwd if line.startswith(USER + ":")), "")
    return {"packages": installed_packages(root), "motd": motd.read_text(encoding="utf-8") if motd.is_file() else None,
            "user": user, "kernel": any((root / "boot").glob("vmlinuz-*"))}


def read_image(ref: str) -> dict[str, Any]:
    container = run(["buildah", "from", "--pull-never", "--name", f"peerbench-read-{uuid.uuid4().hex[:8]}", ref],
                    env=BUILDAH_ENV).stdout.strip().splitlines()[-1]
    try:
        mount = run(["buildah", "mount", container], env=BUILDAH_ENV).stdout.strip()
        return read_tree(Path(mount))
    finally:
        run(["buildah", "rm", container], env=BUILDAH_ENV, check=False)


def check_root(content: dict[str, Any], state: State) -> list[str]:
    problems = [f"package {p} missing" for p in state.root_packages if p not in content["packages"]]
    if ADDED_PACKAGE not in state.root_packages and ADDED_PACKAGE in content["packages"]:
        problems.append(f"package {ADDED_PACKAGE} present, not asked for")
    if not content["kernel"]:
        problems.append("no /boot/vmlinuz-*")
    return problems


def check_leaf(content: dict[str, Any], state: State) -> list[str]:
    problems = check_root(content, state)
    problems += [f"package {p} missing" for p in LEAF_PACKAGES if p not in content["packages"]]
    if content["motd"] != state.motd():
        problems.append(f"/etc/motd is {content['motd']!r}, expected {state.motd()!r}")
    fields = content["user"].split(":")
    if len(fields) < 7 or fields[2] != str(UID) or fields[4] != state.user_comment:
        problems.append(f"user {USER} is {content['user']!r}, expected uid {UID} and comment {state.user_comment!r}")
    return problems


def judge(result: Run, problems: list[str]) -> Run:
    result.problems = problems
    result.correct = not problems
    if problems:
        log(f"{result.tool}, {result.scenario}: STALE/WRONG: {'; '.join(problems)}")
    return result


# --- scenarios ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    name: str
    label: str
    edit: Callable[[State, Path], State]
    mkosi: Optional[str]  # None: mkosi has no notion of it; "" plain build; "-f"/"-ff"
    bender: bool = True


def touch(proj: Path) -> None:
    now = time.time() + 5
    for path in (proj / "roles" / ROLE / "templates" / "motd.j2", proj / "roles" / ROLE / "tasks" / "main.yml"):
        os.utime(path, (now, now))


SCENARIOS = [
    Scenario("full", "full build (cold, warm .deb caches)", lambda s, p: s, "-f"),
    Scenario("noop", "no-op re-run", lambda s, p: s, ""),
    Scenario("task", "one task changed (the user's comment)", lambda s, p: replace(s, user_comment="bench user v2"),
             None),
    Scenario("variable", "variable changed (peer_leaf_message in the inventory / playbook vars)",
             lambda s, p: replace(s, message="hello again"), None),
    Scenario("template", "template content changed", lambda s, p: replace(s, template_line="node motd v2"), None),
    Scenario("touched", "file touched (template and tasks, content unchanged)",
             lambda s, p: (touch(p), s)[1], None),
    Scenario("comment", "comment added to the inventory (mkosi.conf, the bender playbook)",
             lambda s, p: replace(s, comments=s.comments + 1), ""),
    Scenario("base_package", f"base package added ({ADDED_PACKAGE}; mkosi -ff)",
             lambda s, p: replace(s, root_packages=(*s.root_packages, ADDED_PACKAGE)), "-ff"),
]


class Bench:
    def __init__(self, work: Path, prefix: str, quick: bool) -> None:
        self.work, self.prefix, self.quick = work, prefix, quick
        self.proj = work / "project"
        self.home = work / "bender-home"
        self.home.mkdir(parents=True)
        self.state = State()
        self.runs: list[Run] = []

    def add(self, result: Run) -> None:
        """Keep a run; a wrong one says since which scenario that tool's image has been wrong (an
        image left stale by one edit stays wrong through the no-op edits that follow)."""
        if not result.correct:
            earlier = [r for r in self.runs if r.tool == result.tool]
            first = None
            for previous in reversed(earlier):
                if previous.correct:
                    break
                first = previous
            if first is not None:
                result.note = " ".join(filter(None, [result.note, f"wrong since scenario {first.scenario}"]))
        self.runs.append(result)

    def leaf_ref(self) -> str:
        return f"{self.prefix}/{LEAF_LAYER}:latest"

    def root_ref(self) -> str:
        return f"{self.prefix}/{ROOT_LAYER}:latest"

    def tag_bender_base(self) -> None:
        """ansible-bender builds on our root layer's image, under the private prefix."""
        run(["buildah", "tag", self.root_ref(), f"{self.prefix}/bender-base:latest"], env=BUILDAH_ENV)

    def warm_caches(self) -> None:
        """One untimed mkosi build fills its .deb cache; our bootstrap cache and apt cache are the
        host's (/var/cache/hpc-stateless), warm from earlier builds of the same packages."""
        if not any(MKOSI_CACHE.rglob("*.deb")):
            log("warming mkosi's package cache (untimed)")
            mkosi(self.proj, "cache warm-up", "-f")
        BENDER_APT_CACHE.mkdir(parents=True, exist_ok=True)

    def scenario(self, scenario: Scenario) -> None:
        log(f"--- scenario {scenario.name}: {scenario.label}")
        self.state = scenario.edit(self.state, self.proj)
        write_sources(self.proj, self.state, self.prefix)
        if scenario.name == "full":
            self.full()
        else:
            ours_run = ours(self.proj, scenario.name, self.prefix)
            self.add(judge(ours_run, check_leaf(read_image(self.leaf_ref()), self.state)))
            if scenario.name == "base_package":
                self.tag_bender_base()
            if scenario.bender:
                self.add(judge(bender(self.proj, scenario.name, self.home),
                               check_leaf(read_image(f"{self.prefix}/bender-leaf:latest"), self.state)))
        if scenario.mkosi is not None:
            self.add(judge(mkosi(self.proj, scenario.name, scenario.mkosi),
                           check_root(read_tree(self.proj / "mkosi" / "image"), self.state)))

    def full(self) -> None:
        """Our root layer alone (the inventory without the child), then the child on it: each
        layer's own wall time, as one playbook run each."""
        layers = self.proj / "inventory" / "group_vars" / "all" / "layers.yml"
        whole = layers.read_text(encoding="utf-8")
        layers.write_text(whole.split(f"  {LEAF_LAYER}:\n")[0], encoding="utf-8")
        root_run = ours(self.proj, "full (root layer)", self.prefix)
        self.add(judge(root_run, check_root(read_image(self.root_ref()), self.state)))
        layers.write_text(whole, encoding="utf-8")
        leaf_run = ours(self.proj, "full (leaf layer)", self.prefix)
        self.add(judge(leaf_run, check_leaf(read_image(self.leaf_ref()), self.state)))
        self.tag_bender_base()
        self.add(judge(bender(self.proj, "full", self.home),
                       check_leaf(read_image(f"{self.prefix}/bender-leaf:latest"), self.state)))

    def cleanup(self) -> None:
        containers = [c for c in json.loads(run(["buildah", "containers", "--json"], env=BUILDAH_ENV,
                                                check=False).stdout or "[]") or []
                      if c.get("containername", "").startswith(bender_container_prefix(self.prefix))]
        for container in containers:
            run(["buildah", "rm", container["id"]], env=BUILDAH_ENV, check=False)
        names = remove_prefix_images(self.prefix)
        layers = bender_images(self.home)
        for image_id in layers:
            run(["buildah", "rmi", image_id], env=BUILDAH_ENV, check=False)
        shutil.rmtree(self.proj / "mkosi" / "image", ignore_errors=True)
        log(f"removed {names} image names under {self.prefix}, {len(layers)} ansible-bender task images, "
            f"{len(containers)} containers")


def bender_container_prefix(prefix: str) -> str:
    return f"{prefix}/bender-leaf".replace(".", "-").replace(":", "-").replace("/", "-")


# --- the default DAG from a cached bootstrap -------------------------------------------------------

def default_dag(prefix: str) -> dict[str, Any]:
    """build_bench's full build and leaf rebuild of the default inventory, with the bootstrap of
    the default prefix tagged into the private one (the bootstrap is cached, as the issue asks)."""
    with tempfile.TemporaryDirectory(prefix="hpc-stateless-peer-dag-") as tmp:
        workdir = Path(tmp)
        copy_checkout(workdir)
        inventory = workdir / "inventory"
        planned = plan(workdir, inventory, prefix)
        default = plan(workdir, inventory, "localhost/hpc-stateless")
        tagged = []
        for name, layer in planned["layers"].items():
            source = default["layers"][name].get("bootstrap_image")
            if source and layer.get("bootstrap_image"):
                if run(["buildah", "tag", source, layer["bootstrap_image"]], env=BUILDAH_ENV, check=False).returncode:
                    log(f"no cached bootstrap {source}: the default DAG's full build bootstraps too")
                else:
                    tagged.append(layer["bootstrap_image"])
        leaf, role = pick_leaf(planned, None)
        full = run_build(workdir, inventory, prefix, "default DAG full build (bootstrap cached)")
        tasks = role_dir(workdir, role) / "tasks" / "main.yml"
        with tasks.open("a", encoding="utf-8") as handle:
            handle.write(f"# touched by peer_bench {uuid.uuid4().hex}\n")
        rebuild = run_build(workdir, inventory, prefix, "default DAG leaf rebuild")
    return {"full": full, "leaf": {**rebuild, "layer": leaf, "role": role}, "bootstrap_cached": bool(tagged),
            "ratio_to_full": round(rebuild["seconds"] / full["seconds"], 3), "goal_ratio": GOALS["dag_leaf"]}


def remove_prefix_images(prefix: str) -> int:
    """Remove the images whose every name is under the private prefix; from an image that also
    has other names (a shared bootstrap tagged in) only our names are taken. Returns the count."""
    images = json.loads(run(["buildah", "images", "--json"], env=BUILDAH_ENV, check=False).stdout or "[]") or []
    count = 0
    for image in images:
        names = image.get("names") or []
        mine = [n for n in names if n.startswith(prefix + "/")]
        if mine and len(mine) == len(names):  # by its names: buildah refuses an ID with several tags
            run(["buildah", "rmi", *mine], env=BUILDAH_ENV, check=False)
        elif mine:
            run(["podman", "untag", image["id"], *mine], env=BUILDAH_ENV, check=False)
        count += len(mine)
    return count


# --- rows ---------------------------------------------------------------------------------------

def pick(runs: list[Run], tool: str, scenario: str) -> Optional[Run]:
    return next((r for r in runs if r.tool == tool and r.scenario == scenario), None)


def label(result: Run, name: str) -> str:
    state = "" if result.correct else ", STALE (wrong content)"
    return f"{name} ({result.rebuilt}{state})"


def slowest(result: Run, count: int = 5) -> str:
    tasks = sorted(result.profile, key=lambda item: -item[1])[:count]
    return "slowest tasks of our build: " + "; ".join(f"{task} {secs:.1f} s" for task, secs in tasks) if tasks else ""


def correctness_note(*results: Optional[Run]) -> str:
    parts = []
    for result in filter(None, results):
        since = result.note[result.note.find("wrong since"):] if "wrong since" in result.note else ""
        wrong = "STALE: " + "; ".join(result.problems) + (f" ({since})" if since else "")
        parts.append(f"{result.tool} " + ("correct" if result.correct else wrong))
    return ", ".join(parts)


def rows(runs: list[Run], versions: dict[str, str], dag: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    mk, ab = f"mkosi {versions.get('mkosi', MKOSI_VERSION)}", f"ansible-bender {BENDER_VERSION}"

    def goal_row(name: str, peer: Run, peer_name: str, mine: Run, goal: str, min_ratio: Optional[float]) -> None:
        row = comparisons.comparison(
            name, label(peer, peer_name), peer.seconds, label(mine, "hpc.stateless"), mine.seconds, goal, min_ratio,
            a_samples=[peer.seconds], b_samples=[mine.seconds],
            also={"ours correct": bool(mine.correct)} if min_ratio is not None else None,
            note=correctness_note(peer, mine))
        if row["met"] is False and mine.profile:
            row["note"] = f"{row['note']}; {slowest(mine)}"
        out.append(row)

    root, leaf = pick(runs, "ours", "full (root layer)"), pick(runs, "ours", "full (leaf layer)")
    mk_full, ab_full = pick(runs, "mkosi", "full"), pick(runs, "ansible-bender", "full")
    goal_row("root layer with kernel, full build (job 1)", mk_full, f"{mk} full build", root,
             "<= 1.0x mkosi's full build", GOALS["root"])
    goal_row("whole leaf layer, cold (job 2)", ab_full, f"{ab} cold build", leaf,
             "<= 0.5x ansible-bender cold (>= 2x)", GOALS["leaf"])
    for scenario in SCENARIOS[1:]:
        mine = pick(runs, "ours", scenario.name)
        if mine is None:  # not run (--quick)
            continue
        peers = [r for r in (pick(runs, "mkosi", scenario.name), pick(runs, "ansible-bender", scenario.name)) if r]
        if scenario.name == "task":
            goal_row(scenario.label, pick(runs, "ansible-bender", "task"), ab, mine, "<= 1.0x ansible-bender",
                     GOALS["task"])
        elif scenario.name == "base_package":
            goal_row(scenario.label + ", whole DAG", pick(runs, "mkosi", "base_package"), f"{mk} -ff", mine,
                     "<= 1.0x mkosi -ff", GOALS["base_package"])
        elif scenario.name == "noop":
            built_none = mine.rebuilt.startswith("0/")
            row = comparisons.budget(scenario.label, GOALS["noop_seconds"], label(mine, "hpc.stateless"), mine.seconds,
                                     f"<= {GOALS['noop_seconds']:g} s, 0 layers built, correct",
                                     b_samples=[mine.seconds], also={"0 layers built": built_none,
                                                                     "ours correct": bool(mine.correct)},
                                     note=correctness_note(*peers, mine) + "; " + "; ".join(
                                         f"{p.tool} {p.seconds:.1f} s" for p in peers))
            if row["met"] is False and mine.profile:
                row["note"] += "; " + slowest(mine)
            out.append(row)
            continue
        else:
            best = min(peers, key=lambda r: (not r.correct, r.seconds))
            name = mk if best.tool == "mkosi" else ab
            goal_row(scenario.label, best, f"best peer: {name}", mine, "reported (correct is judged below)", None)
    ours_runs = [r for r in runs if r.tool == "ours"]
    correct = sum(1 for r in ours_runs if r.correct)
    stale = [f"{r.tool} {r.scenario}" for r in runs if r.tool != "ours" and r.correct is False]
    out.append(comparisons.comparison(
        "every scenario read back correct (hpc.stateless)", "runs with the expected content", correct,
        "runs", len(ours_runs), "every scenario correct (ratio 1)", 1.0, unit="runs",
        note=("peers stale/wrong in: " + ", ".join(stale)) if stale else "every peer run correct too"))
    if dag:
        full, rebuild = dag["full"], dag["leaf"]
        out.append(comparisons.comparison(
            f"default DAG: rebuild after touching role {rebuild['role']} of leaf layer {rebuild['layer']}",
            f"full build ({full['built']} layers, bootstrap {'cached' if dag['bootstrap_cached'] else 'NOT cached'})",
            full["seconds"], f"rebuild ({rebuild['built']} of {rebuild['layers']} layers)", rebuild["seconds"],
            f"<= {GOALS['dag_leaf']:.0%} of the full build (>= {1 / GOALS['dag_leaf']:.3g}x)",
            round(1 / GOALS["dag_leaf"], 3), a_samples=[full["seconds"]], b_samples=[rebuild["seconds"]]))
    return out


def table(runs: list[Run]) -> str:
    lines = [("scenario", "tool", "seconds", "rebuilt", "content")]
    for r in runs:
        lines.append((r.scenario, r.tool, f"{r.seconds:.1f}", r.rebuilt,
                      "correct" if r.correct else "STALE: " + "; ".join(r.problems)))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def load() -> dict[str, Any]:
    with open("/proc/loadavg", encoding="utf-8") as handle:
        one, five, fifteen = handle.read().split()[:3]
    return {"1min": float(one), "5min": float(five), "15min": float(fifteen)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="development run: full, no-op, one task changed and base package added; no default DAG")
    parser.add_argument("--no-default-dag", action="store_true", help="skip the default DAG full/leaf rows")
    parser.add_argument("--keep", action="store_true", help="keep the images and the temporary project")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "peer.json"))
    args = parser.parse_args(argv)

    versions = {**ensure_apt_peers(), **ensure_bender()}
    log("peers: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    prefix = f"localhost/hpc-stateless-peerbench-{uuid.uuid4().hex[:6]}"
    scenarios = [s for s in SCENARIOS if not args.quick or s.name in ("full", "noop", "task", "base_package")]
    load_before = load()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="hpc-stateless-peer-bench-"))
    bench = Bench(work, prefix, args.quick)
    dag = None
    try:
        write_sources(bench.proj, bench.state, prefix)
        bench.warm_caches()
        for scenario in scenarios:
            bench.scenario(scenario)
        if not (args.quick or args.no_default_dag):
            dag_prefix = prefix + "-dag"
            try:
                dag = default_dag(dag_prefix)
            finally:
                if not args.keep:
                    remove_prefix_images(dag_prefix)
    finally:
        if not args.keep:
            bench.cleanup()
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work} and the images under {prefix}")

    result = {
        "benchmark": "peer",
        "image": f"temporary two-layer DAG ({ROOT_LAYER} -> {LEAF_LAYER}) under a private prefix",
        "quick": args.quick,
        "versions": versions,
        "package_cache": "warm for all three: /var/cache/hpc-stateless (ours), "
                         f"{MKOSI_CACHE} (mkosi --cache), {BENDER_APT_CACHE} (ansible-bender --build-volumes)",
        "host": {"cpus": os.cpu_count(), "load_before": load_before, "load_after": load()},
        "seconds": round(time.monotonic() - started, 1),
        "runs": [r.as_dict() for r in bench.runs],
        "default_dag": dag,
    }
    result["comparisons"] = rows(bench.runs, versions, dag)
    print(table(bench.runs))
    return comparisons.write_results(result, Path(args.output))


if __name__ == "__main__":
    sys.exit(main())
