# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how systemd-nspawn and nsenter are called.

A *session* is one container root used by one inventory host during one
``ansible-playbook`` run:

- directory mode: every command is its own ``systemd-nspawn --pipe -D <root>``;
- booted mode: ``systemd-nspawn -b`` runs once, and commands enter the namespaces of
  the container's init with ``nsenter``.

Ansible opens and closes a connection for every task, so whatever must outlive a task
(a booted container, a buildah working container of an image, the overlay that keeps a
directory root untouched) is owned by a small *supervisor* process: this file run as
``python -m ansible_collections.hpc.stateless.plugins.module_utils.verify.nspawn supervise
<session dir>``. The supervisor prepares the root, boots, writes ``state.json`` and
tears everything down when it is asked to stop (SIGTERM), when the process that owns
the session (the ``ansible-playbook`` run) exits, or when the container stops by
itself. On every failure it tears down first and reports after, so an error never
leaves a container process or a mount behind.

Everything here is stdlib-only: the supervisor runs outside Ansible.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils.build.buildah import Buildah, BuildahError

# systemd-nspawn -b executes the first of these that exists; /sbin/init alone may be
# sysvinit or busybox, which nspawn would start but which never reports readiness.
SYSTEMD_INIT_PATHS = ("/usr/lib/systemd/systemd", "/lib/systemd/systemd")
SHELL_PATH = "/bin/sh"
READY_STATES = ("running", "degraded")
DEFAULT_RUNTIME_DIR = "/var/tmp/hpc-nspawn"
CONTAINER_PREFIX = "hpc-nspawn-"
NETWORK_HOST = "host"
NETWORK_PRIVATE = "private"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MODULE_NAME = "ansible_collections.hpc.stateless.plugins.module_utils.verify.nspawn"

# ansible_collections/hpc/stateless/plugins/module_utils/verify/nspawn.py -> the dir holding ansible_collections
COLLECTIONS_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 6))

# systemd-nspawn tries to remove its propagation directory on exit and refuses when /run
# is not a tmpfs (hosts without systemd); the message is noise in every command's stderr.
_PROPAGATE_NOISE = re.compile(
    rb'^Attempted to remove disk file system under "/run/systemd/nspawn/propagate/[^"\n]*",'
    rb" and we can't allow that\.\r?\n?",
    re.M,
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MACHINE_BAD = re.compile(r"[^A-Za-z0-9-]+")
_CONTAINER_GONE = re.compile(r"container not known|no such container|does not exist", re.I)

STATUS_STARTING = "starting"
STATUS_READY = "ready"
STATUS_FAILED = "failed"
STATUS_STOPPED = "stopped"


class NspawnError(Exception):
    """A container could not be prepared, booted, entered or stopped; ``str()`` says why."""


# --------------------------------------------------------------------------- pure helpers
def machine_name(host: str, salt: str = "") -> str:
    """A valid machine/host name from an inventory host name (``[A-Za-z0-9-]``, <= 64 chars).

    ``salt`` (a session id) is appended so two runs that boot the same host at once do not
    share systemd-nspawn's per-machine paths.
    """
    base = _MACHINE_BAD.sub("-", host).strip("-").lower() or "host"
    suffix = f"-{salt[:8]}" if salt else ""
    return base[: 64 - len(suffix)].rstrip("-") + suffix


def hostname_for(host: str) -> str:
    """The host name a container gets by default: the inventory name, made valid."""
    return machine_name(host)


def session_id(identity: Dict[str, Any]) -> str:
    """Stable id of a session from what identifies it (owner process, host, root, mode...)."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def container_stem(runtime_dir: str) -> str:
    """Start of the names of the buildah working containers of sessions under ``runtime_dir``.

    Sessions of different runtime directories (tests, benchmarks, users) never see, or
    clean up, each other's containers.
    """
    tag = hashlib.sha256(os.path.abspath(runtime_dir).encode("utf-8")).hexdigest()[:6]
    return f"{CONTAINER_PREFIX}{tag}-"


def cgroup_dirs(proc_cgroup: str, mountinfo: str, name: str) -> List[str]:
    """Directories of a cgroup ``name`` below the caller's own, in the hierarchies systemd-nspawn
    manages (cgroup v2 and the v1 ``name=systemd`` hierarchy).

    With ``--keep-unit`` systemd-nspawn puts the container into ``<its own cgroup>/payload``:
    containers started from one cgroup would share it and their systemds would remove each
    other's unit cgroups (units then fail with 219/CGROUP). Each session gets a cgroup of its own.
    """
    mounts: Dict[str, Tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if len(fields) < sep + 4:
            continue
        fstype, options = fields[sep + 1], fields[sep + 3].split(",")
        root, mount_point = fields[3], fields[4]
        if fstype == "cgroup2":
            mounts.setdefault("", (mount_point, root))
        elif fstype == "cgroup" and "name=systemd" in options:
            mounts.setdefault("name=systemd", (mount_point, root))
    dirs = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[1] not in mounts:
            continue
        mount_point, root = mounts[parts[1]]
        path = parts[2]
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root):]
        dirs.append(os.path.join(mount_point, path.lstrip("/"), name))
    return dirs


def in_cgroups_argv(dirs: List[str], argv: List[str]) -> List[str]:
    """``argv`` started from inside the cgroups ``dirs`` (a shell moves itself, then execs)."""
    if not dirs:
        return argv
    script = 'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "hpc-nspawn-cgroup", *dirs, "--", *argv]


def network_args(network: str) -> List[str]:
    """systemd-nspawn arguments for ``host``, ``private`` (loopback only) or a netns path."""
    if network == NETWORK_HOST:
        return []
    if network == NETWORK_PRIVATE:
        return ["--private-network"]
    if network.startswith("/"):
        return [f"--network-namespace-path={network}"]
    raise NspawnError(f"network must be 'host', 'private' or the path of a network namespace "
                      f"(for example /run/netns/NAME), not {network!r}")


def escape_overlay_path(path: str) -> str:
    """Escape a path for an overlayfs ``lowerdir=``/``upperdir=`` mount option."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def overlay_options(lower: str, upper: str, work: str) -> str:
    return (f"lowerdir={escape_overlay_path(lower)},upperdir={escape_overlay_path(upper)},"
            f"workdir={escape_overlay_path(work)}")


def nspawn_command_argv(nspawn: str, root: str, machine: str, command: List[str],
                        hostname: Optional[str] = None, network: str = NETWORK_HOST,
                        extra_args: Optional[List[str]] = None, user: Optional[str] = None) -> List[str]:
    """argv that runs one command in ``root`` (directory mode)."""
    argv = [nspawn, "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit",
            f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    argv += network_args(network)
    argv += list(extra_args or [])
    if user and user != "root":
        argv.append(f"--user={user}")
    return argv + ["--", *command]


def nspawn_boot_argv(nspawn: str, root: str, machine: str, hostname: Optional[str] = None,
                     network: str = NETWORK_PRIVATE, extra_args: Optional[List[str]] = None,
                     binds_ro: Optional[List[Tuple[str, str]]] = None) -> List[str]:
    """argv that boots ``root`` with its own systemd (booted mode).

    ``--register=no --keep-unit``: no machined and no host systemd are needed.
    ``--notify-ready=yes``: systemd-nspawn reports READY=1 once the container's systemd
    finished starting up, and X_NSPAWN_LEADER_PID before that.
    """
    argv = [nspawn, "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
            "--console=read-only", f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    for source, target in binds_ro or []:
        argv.append(f"--bind-ro={source}:{target}")
    argv += network_args(network)
    return argv + list(extra_args or [])


def nsenter_argv(nsenter: str, leader_pid: int, command: List[str],
                 uid: Optional[int] = None, gid: Optional[int] = None) -> List[str]:
    """argv that runs ``command`` inside the namespaces and root of a booted container."""
    argv = [nsenter, f"--target={leader_pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
            "--cgroup", "--root", "--wd"]
    if uid is not None:
        argv.append(f"--setuid={uid}")
    if gid is not None:
        argv.append(f"--setgid={gid}")
    return argv + ["--", *command]


def parse_notify(datagram: bytes) -> Dict[str, str]:
    """``KEY=value`` lines of an sd_notify datagram as a dict."""
    fields = {}
    for line in datagram.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value
    return fields


def parse_unit_list(text: str) -> List[str]:
    """Unit names from ``systemctl list-units --plain --no-legend`` (first column)."""
    units = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] not in ("●", "*"):
            units.append(fields[0])
        elif len(fields) > 1:
            units.append(fields[1])
    return units


def parse_job_list(text: str) -> List[str]:
    """``unit (job type, state)`` from ``systemctl list-jobs --no-legend``."""
    jobs = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].isdigit():
            jobs.append(f"{fields[1]} ({fields[2]}, {fields[3]})")
    return jobs


def strip_noise(stderr: bytes) -> bytes:
    return _PROPAGATE_NOISE.sub(b"", stderr)


def console_tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of a console log, without colour codes."""
    text = _PROPAGATE_NOISE.sub(b"", text.encode("utf-8", "replace")).decode("utf-8", "replace")
    clean = [_ANSI.sub("", line).rstrip() for line in text.replace("\r", "").splitlines()]
    clean = [line for line in clean if line.strip()]
    return "\n".join(clean[-lines:])


def lookup_user(passwd_text: str, user: str) -> Optional[Tuple[int, int, str]]:
    """``(uid, gid, home)`` of ``user`` (a name or a number) from passwd file text."""
    for line in passwd_text.splitlines():
        fields = line.split(":")
        if len(fields) < 7:
            continue
        if fields[0] == user or (user.isdigit() and fields[2] == user):
            return int(fields[2]), int(fields[3]), fields[5] or "/"
    return None


def resolve_in_root(root: str, path: str, max_links: int = 40) -> Optional[str]:
    """Host path of ``path`` as the container would resolve it (symlinks stay inside ``root``).

    Returns None when the path does not exist. Absolute link targets are taken relative to
    ``root``, never to the host's ``/``.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: List[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate):
            links += 1
            if links > max_links:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        if not os.path.lexists(candidate):
            return None
        resolved.append(part)
    return os.path.join(root, *resolved)


def find_systemd(root: str) -> Optional[str]:
    """Path (inside the container) of the systemd that ``systemd-nspawn -b`` would start."""
    for path in SYSTEMD_INIT_PATHS:
        host_path = resolve_in_root(root, path)
        if host_path and os.path.isfile(host_path) and os.access(host_path, os.X_OK):
            return path
    return None


def check_root(root: str, boot: bool, label: Optional[str] = None) -> None:
    """Raise NspawnError unless ``root`` is an OS tree systemd-nspawn can run (and boot)."""
    label = label or f"root {root}"
    if not os.path.exists(root):
        raise NspawnError(f"{label} does not exist: build the layer first, or point "
                          f"ansible_nspawn_root at an existing OS tree")
    if not os.path.isdir(root):
        raise NspawnError(f"{label} is not a directory")
    shell = resolve_in_root(root, SHELL_PATH)
    if not shell or not os.access(shell, os.X_OK):
        raise NspawnError(f"{label} has no {SHELL_PATH}: it is not an OS tree Ansible can run in")
    if boot and not find_systemd(root):
        init = resolve_in_root(root, "/sbin/init")
        found = "/" + os.path.relpath(init, root) if init else "missing"
        raise NspawnError(
            f"{label} has no systemd ({' and '.join(SYSTEMD_INIT_PATHS)} are missing, /sbin/init is "
            f"{found}): it cannot be booted. Install systemd in the layer (Debian: the bootstrap "
            f"packages systemd and systemd-sysv) or use directory mode (ansible_nspawn_boot: false)")


def owner_process() -> int:
    """The process whose end ends a session: the ansible-playbook run when called from one of
    its task workers, else the calling process itself."""
    try:
        import multiprocessing

        parent = multiprocessing.parent_process()
    except (ImportError, AttributeError):  # pragma: no cover - Python < 3.8
        parent = None
    return parent.pid if parent is not None and parent.pid else os.getpid()


def process_start(pid: int) -> Optional[str]:
    """Start time of ``pid`` (clock ticks since boot), or None when it is gone or a zombie.

    Used with the pid so a recycled pid is never mistaken for ours.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_stopped(pid: int) -> bool:
    """True when ``pid`` is stopped (state T) by a job-control signal."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] == "T"


def keep_running(proc: subprocess.Popen, interval: float = 0.2) -> threading.Thread:
    """Resume ``proc`` (an nsenter) whenever it is stopped, until it exits.

    When a container shuts down, its systemd freezes every process of the container with
    SIGSTOP before killing it. nsenter, which waits for its child in the host's namespace,
    stops itself when it sees its child stopped, and nobody in the host resumes it: the
    command would never return. Resuming nsenter makes it resume (and then reap) its child.
    """
    def watch() -> None:
        while proc.poll() is None:
            if process_stopped(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name=f"nsenter-{proc.pid}-resume", daemon=True)
    thread.start()
    return thread


def process_alive(pid: Optional[int], start: Optional[str] = None) -> bool:
    if not pid:
        return False
    current = process_start(int(pid))
    return current is not None and (start is None or current == start)


# --------------------------------------------------------------------------- the session spec
class SessionSpec:
    """Everything that defines one session; written to ``spec.json`` for the supervisor."""

    FIELDS = ("host", "root", "image", "boot", "ephemeral", "hostname", "network", "extra_args",
              "boot_timeout", "stop_timeout", "runtime_dir", "owner_pid", "owner_start",
              "nspawn", "nsenter", "buildah")

    def __init__(self, host: str, root: Optional[str] = None, image: Optional[str] = None,
                 boot: bool = False, ephemeral: bool = True, hostname: Optional[str] = None,
                 network: Optional[str] = None, extra_args: Optional[List[str]] = None,
                 boot_timeout: float = 60.0, stop_timeout: float = 10.0,
                 runtime_dir: str = DEFAULT_RUNTIME_DIR, owner_pid: Optional[int] = None,
                 owner_start: Optional[str] = None, nspawn: str = "systemd-nspawn",
                 nsenter: str = "nsenter", buildah: str = "buildah") -> None:
        if bool(root) == bool(image):
            raise NspawnError(f"host {host}: set exactly one of ansible_nspawn_root (a directory) "
                              f"and ansible_nspawn_image (a local image)")
        self.host = host
        self.root = os.path.abspath(root) if root else None
        self.image = image or None
        self.boot = bool(boot)
        self.ephemeral = bool(ephemeral)
        self.hostname = hostname or hostname_for(host)
        self.network = network or (NETWORK_PRIVATE if self.boot else NETWORK_HOST)
        network_args(self.network)  # validate early
        self.extra_args = [str(a) for a in extra_args or []]
        self.boot_timeout = float(boot_timeout)
        self.stop_timeout = float(stop_timeout)
        self.runtime_dir = runtime_dir
        self.owner_pid = int(owner_pid or owner_process())
        self.owner_start = owner_start if owner_start is not None else process_start(self.owner_pid)
        self.nspawn = nspawn
        self.nsenter = nsenter
        self.buildah = buildah

    def to_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SessionSpec":
        return cls(**{name: data.get(name) for name in cls.FIELDS if name in data})

    @property
    def id(self) -> str:
        return session_id({
            "owner": [self.owner_pid, self.owner_start], "host": self.host, "root": self.root,
            "image": self.image, "boot": self.boot, "ephemeral": self.ephemeral,
            "hostname": self.hostname, "network": self.network, "extra": self.extra_args,
        })

    @property
    def machine(self) -> str:
        return machine_name(self.host, self.id)

    @property
    def needs_supervisor(self) -> bool:
        """A plain directory used in place needs nothing that outlives a command."""
        return self.boot or bool(self.image) or self.ephemeral

    @property
    def source(self) -> str:
        return f"image {self.image}" if self.image else f"root {self.root}"


# --------------------------------------------------------------------------- running commands
class _CommandRunner:
    """The two AnsibleModule methods the shared buildah client needs, outside Ansible."""

    def __init__(self, buildah: str) -> None:
        self._buildah = buildah

    def get_bin_path(self, name: str, required: bool = False) -> Optional[str]:
        if name == "buildah" and os.path.isabs(self._buildah):
            return self._buildah if os.access(self._buildah, os.X_OK) else None
        return shutil.which(self._buildah if name == "buildah" else name)

    @staticmethod
    def fail_json(msg: str, **_kwargs: Any) -> None:
        raise NspawnError(msg)

    @staticmethod
    def run_command(argv: List[str], environ_update: Optional[Dict[str, str]] = None,
                    **_kwargs: Any) -> Tuple[int, str, str]:
        env = dict(os.environ, **(environ_update or {}))
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr


def _host_env() -> Dict[str, str]:
    return {"PATH": os.environ.get("PATH", CONTAINER_PATH), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _run(argv: List[str], timeout: float = 30.0) -> Tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=_host_env())
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} timed out after {timeout:.0f}s"
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def container_env(user: str = "root", home: str = "/root") -> Dict[str, str]:
    """Environment of a command entered into a booted container: nothing of the host's."""
    return {"PATH": CONTAINER_PATH, "HOME": home, "USER": user, "LOGNAME": user,
            "LANG": "C.UTF-8", "container": "systemd-nspawn"}


def in_container(spec: SessionSpec, leader_pid: int, command: List[str], timeout: float = 30.0
                 ) -> Tuple[int, str, str]:
    """Run a short diagnostic command inside a booted container."""
    argv = nsenter_argv(spec.nsenter, leader_pid, command)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=container_env(), text=True)
    keep_running(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return 124, "", "timed out"
    return proc.returncode, out, err


def system_report(spec: SessionSpec, leader_pid: int) -> Dict[str, Any]:
    """The container's systemd state, failed units and queued jobs."""
    _rc, state, err = in_container(spec, leader_pid, ["systemctl", "is-system-running"])
    _rc, failed, _err = in_container(spec, leader_pid, [
        "systemctl", "list-units", "--failed", "--plain", "--no-legend", "--no-pager", "--all"])
    _rc, jobs, _err = in_container(spec, leader_pid, ["systemctl", "list-jobs", "--no-legend", "--no-pager"])
    return {"system_state": state.strip() or f"unknown ({err.strip()})",
            "failed_units": parse_unit_list(failed), "jobs": parse_job_list(jobs)}


# --------------------------------------------------------------------------- state files
def _write_json(path: str, data: Dict[str, Any]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _wait_gone(pid: Optional[int], start: Optional[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid, start):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _is_mounted(path: str) -> bool:
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return any(line.split()[4] == real for line in handle if len(line.split()) > 4)
    except OSError:
        return False


def session_cgroups(spec: "SessionSpec") -> List[str]:
    """The cgroups of a session, created, below the caller's cgroup."""
    dirs = cgroup_dirs_of(spec)
    for path in dirs:
        os.makedirs(path, exist_ok=True)
    return dirs


def cgroup_dirs_of(spec: "SessionSpec") -> List[str]:
    """The session's cgroup directories (not created)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = handle.read()
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            return cgroup_dirs(own, handle.read(), f"hpc-nspawn-{spec.id}")
    except OSError:
        return []


def remove_cgroups(dirs: List[str], timeout: float = 5.0) -> List[str]:
    """Remove session cgroups bottom-up; returns those still busy after ``timeout``."""
    deadline = time.monotonic() + timeout
    left = []
    for top in dirs:
        while os.path.isdir(top):
            for current, _subdirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(current)
            if not os.path.isdir(top) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if os.path.isdir(top):
            left.append(top)
    return left


def teardown(state: Dict[str, Any], spec: SessionSpec, proc: Optional[subprocess.Popen] = None) -> List[str]:
    """Stop the container, unmount the overlay, remove the working container.

    Works from the supervisor (``proc`` is its child) and from any other process that finds
    a session whose supervisor died (pids checked with their start times). Returns what
    could not be cleaned, for the error message.
    """
    problems = []
    pid, start = state.get("nspawn_pid"), state.get("nspawn_start")
    if process_alive(pid, start):
        # SIGTERM makes systemd-nspawn shut the container down in order (SIGRTMIN+3 to its init).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        stopped = _reap(proc, spec.stop_timeout) if proc else _wait_gone(pid, start, spec.stop_timeout)
        if not stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not (_reap(proc, 10) if proc else _wait_gone(pid, start, 10)):
                problems.append(f"systemd-nspawn pid {pid} did not exit")
    elif proc is not None:
        _reap(proc, 1)
    busy = remove_cgroups(state.get("cgroups") or [])
    if busy:
        problems.append(f"cgroups still in use: {', '.join(busy)}")
    overlay = state.get("overlay")
    if overlay and _is_mounted(overlay):
        for attempt in range(20):
            rc, _out, err = _run(["umount", overlay])
            if rc == 0 or not _is_mounted(overlay):
                break
            time.sleep(0.1 * (attempt + 1))
        else:
            _run(["umount", "--lazy", overlay])
            problems.append(f"overlay {overlay} was busy and was detached lazily: {err.strip()}")
    container = state.get("container")
    if container:
        problem = remove_container(spec, container)
        if problem:
            problems.append(problem)
    return problems


def remove_container(spec: "SessionSpec", name: str, attempts: int = 5) -> Optional[str]:
    """Remove a buildah working container (``buildah rm`` unmounts it first).

    Works by name, without listing containers: listing fails now and then while other
    builds remove containers at the same time ("reading build containers: container not known").
    """
    try:
        client = Buildah(_CommandRunner(spec.buildah))
    except NspawnError as exc:
        return f"buildah working container {name}: {exc}"
    err = ""
    for attempt in range(attempts):
        rc, _out, err = client.run("rm", name, check=False)
        if rc == 0 or _CONTAINER_GONE.search(err):
            return None
        time.sleep(0.5 * (attempt + 1))
    return f"buildah working container {name} could not be removed: {err.strip()}"


def _reap(proc: subprocess.Popen, timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


# --------------------------------------------------------------------------- the worker side
class Session:
    """A container root for one host, seen from an Ansible task (or a test)."""

    def __init__(self, spec: SessionSpec) -> None:
        self.spec = spec
        self.dir = os.path.join(spec.runtime_dir, spec.id)
        self.state_path = os.path.join(self.dir, "state.json")

    def read_state(self) -> Optional[Dict[str, Any]]:
        return _read_json(self.state_path)

    def _runtime_dir(self) -> str:
        os.makedirs(self.spec.runtime_dir, mode=0o700, exist_ok=True)
        return self.spec.runtime_dir

    def alive(self, state: Optional[Dict[str, Any]]) -> bool:
        if not state or state.get("status") != STATUS_READY:
            return False
        if not process_alive(state.get("supervisor_pid"), state.get("supervisor_start")):
            return False
        return not self.spec.boot or process_alive(state.get("leader_pid"), state.get("leader_start"))

    def ensure(self) -> Dict[str, Any]:
        """Return the state of a ready session, starting (and booting) it if needed."""
        if not self.spec.needs_supervisor:
            check_root(self.spec.root, boot=False)
            return {"status": STATUS_READY, "root": self.spec.root}
        runtime = self._runtime_dir()
        with _locked(runtime):
            collect_garbage(runtime, keep=self.spec.id)
            state = self.read_state()
            if self.alive(state):
                return state
            if state is None or state.get("status") != STATUS_STARTING or not process_alive(
                    state.get("supervisor_pid"), state.get("supervisor_start")):
                self._discard(state)
                self._launch()
        return self._wait_ready()

    def _launch(self) -> None:
        os.makedirs(self.dir, mode=0o700)
        _write_json(os.path.join(self.dir, "spec.json"), self.spec.to_dict())
        _write_json(self.state_path, {"status": STATUS_STARTING})
        env = dict(_host_env())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (COLLECTIONS_ROOT, os.environ.get("PYTHONPATH")) if p)
        with open(os.path.join(self.dir, "supervisor.log"), "ab") as log:
            launcher = subprocess.Popen(
                [sys.executable, "-m", MODULE_NAME, "supervise", self.dir],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
                start_new_session=True, close_fds=True)
        # The supervisor forks away at once, so it is never our child (no zombie to reap).
        launcher.wait(timeout=60)

    def _wait_ready(self) -> Dict[str, Any]:
        deadline = time.monotonic() + self.spec.boot_timeout + 2 * self.spec.stop_timeout + 60
        seen_supervisor = False
        while True:
            state = self.read_state() or {}
            status = state.get("status")
            if status == STATUS_READY:
                return state
            if status == STATUS_FAILED:
                # the supervisor reports after its teardown; let it exit before we return
                _wait_gone(state.get("supervisor_pid"), state.get("supervisor_start"), 10)
                self._discard(state)
                raise NspawnError(state.get("error") or f"{self.spec.source}: session failed")
            supervisor = state.get("supervisor_pid")
            if supervisor:
                seen_supervisor = True
                if not process_alive(supervisor, state.get("supervisor_start")):
                    log = self._log_tail("supervisor.log")
                    self._discard(self.read_state() or state)
                    raise NspawnError(f"the nspawn supervisor of host {self.spec.host} died while "
                                      f"preparing {self.spec.source}: {log}")
            elif not seen_supervisor and not os.path.isdir(self.dir):
                raise NspawnError(f"session directory {self.dir} vanished while starting")
            if time.monotonic() > deadline:
                self.stop()
                raise NspawnError(f"{self.spec.source} was not ready after "
                                  f"{self.spec.boot_timeout:.0f}s and was stopped")
            time.sleep(0.05)

    def _log_tail(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, name), encoding="utf-8", errors="replace") as handle:
                return console_tail(handle.read(), 10) or "(no output)"
        except OSError:
            return "(no log)"

    def stop(self) -> List[str]:
        """Stop the container and release everything of this session. Safe to call twice."""
        if not os.path.isdir(self.spec.runtime_dir):
            return []
        with _locked(self.spec.runtime_dir):
            state = self.read_state()
            if state is None and not os.path.isdir(self.dir):
                return []
            pid, start = (state or {}).get("supervisor_pid"), (state or {}).get("supervisor_start")
            if process_alive(pid, start):
                os.kill(pid, signal.SIGTERM)
                if not _wait_gone(pid, start, 2 * self.spec.stop_timeout + 30):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    _wait_gone(pid, start, 5)
            return self._discard(self.read_state() or state)

    def _discard(self, state: Optional[Dict[str, Any]]) -> List[str]:
        """Clean what a dead supervisor left (if anything), then remove the session directory."""
        problems: List[str] = []
        if state and not process_alive(state.get("supervisor_pid"), state.get("supervisor_start")):
            problems = teardown(state, self.spec)
        shutil.rmtree(self.dir, ignore_errors=True)
        return problems

    # -- commands ------------------------------------------------------------------------
    def command(self, state: Dict[str, Any], command: List[str], user: Optional[str] = None
                ) -> Tuple[List[str], Dict[str, str]]:
        """argv and environment that run ``command`` in the session as ``user``."""
        spec = self.spec
        if not spec.boot:
            argv = nspawn_command_argv(spec.nspawn, state["root"], spec.machine, command,
                                       hostname=spec.hostname, network=spec.network,
                                       extra_args=spec.extra_args, user=user)
            cgroups = state.get("cgroups")
            if cgroups is None:  # no supervisor: the cgroups live as long as the command
                cgroups = session_cgroups(spec)
            return in_cgroups_argv(cgroups, argv), _host_env()
        leader = int(state["leader_pid"])
        uid = gid = None
        home = "/root"
        name = user or "root"
        if name != "root":
            try:
                with open(f"/proc/{leader}/root/etc/passwd", encoding="utf-8") as handle:
                    found = lookup_user(handle.read(), name)
            except OSError as exc:
                raise NspawnError(f"cannot read /etc/passwd of the container of {spec.host}: {exc}") from exc
            if found is None:
                raise NspawnError(f"user {name!r} does not exist in the container of {spec.host} "
                                  f"(ansible_user / remote_user)")
            uid, gid, home = found
        return nsenter_argv(spec.nsenter, leader, command, uid=uid, gid=gid), container_env(name, home)

    def after_command(self, state: Dict[str, Any]) -> None:
        """Release what a command of a session without supervisor left (its cgroups)."""
        if not self.spec.boot and "cgroups" not in state:
            remove_cgroups(cgroup_dirs_of(self.spec), timeout=1.0)

    def container_running(self, state: Dict[str, Any]) -> bool:
        return process_alive(state.get("leader_pid"), state.get("leader_start"))


def collect_garbage(runtime_dir: str, keep: str = "") -> List[str]:
    """Tear down and remove sessions whose supervisor and owner are both gone (killed runs,
    failed teardowns nobody read). Call with the runtime dir locked. Returns what is left."""
    problems: List[str] = []
    for name in os.listdir(runtime_dir):
        path = os.path.join(runtime_dir, name)
        spec_data = _read_json(os.path.join(path, "spec.json"))
        if name == keep or spec_data is None or not os.path.isdir(path):
            continue
        state = _read_json(os.path.join(path, "state.json")) or {}
        if process_alive(state.get("supervisor_pid"), state.get("supervisor_start")):
            continue
        if process_alive(spec_data.get("owner_pid"), spec_data.get("owner_start")):
            continue  # its owner reads (and removes) it itself
        left = teardown(state, SessionSpec.from_dict(spec_data))
        if left:
            problems += left
            continue
        shutil.rmtree(path, ignore_errors=True)
    return problems


def owner_sessions(runtime_dir: str = DEFAULT_RUNTIME_DIR, owner_pid: Optional[int] = None) -> List[str]:
    """Session directories of ``owner_pid`` (default: all of them) under ``runtime_dir``."""
    found = []
    if not os.path.isdir(runtime_dir):
        return found
    for name in sorted(os.listdir(runtime_dir)):
        spec = _read_json(os.path.join(runtime_dir, name, "spec.json"))
        if spec and (owner_pid is None or spec.get("owner_pid") == owner_pid):
            found.append(os.path.join(runtime_dir, name))
    return found


def stop_sessions(runtime_dir: str = DEFAULT_RUNTIME_DIR, owner_pid: Optional[int] = None) -> List[str]:
    """Stop every session of ``owner_pid`` (default: every session); returns leftovers."""
    problems = []
    for path in owner_sessions(runtime_dir, owner_pid):
        spec = _read_json(os.path.join(path, "spec.json"))
        if spec:
            problems += Session(SessionSpec.from_dict(spec)).stop()
    return problems


# --------------------------------------------------------------------------- the supervisor
class _Supervisor:
    """Owns one session's root and container until it is asked to stop or its owner exits."""

    def __init__(self, session_dir: str) -> None:
        self.dir = session_dir
        spec = _read_json(os.path.join(session_dir, "spec.json"))
        if spec is None:
            raise NspawnError(f"no spec.json in {session_dir}")
        self.spec = SessionSpec.from_dict(spec)
        self.state_path = os.path.join(session_dir, "state.json")
        self.state: Dict[str, Any] = {"status": STATUS_STARTING, "supervisor_pid": os.getpid(),
                                      "supervisor_start": process_start(os.getpid())}
        self.proc: Optional[subprocess.Popen] = None
        self.stop_requested = False

    def save(self) -> None:
        _write_json(self.state_path, self.state)

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        self.stop_requested = True

    def owner_alive(self) -> bool:
        return process_alive(self.spec.owner_pid, self.spec.owner_start)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self.save()
        error = None
        try:
            self.state["cgroups"] = session_cgroups(self.spec)
            self.save()
            root = self.prepare_root()
            label = f"image {self.spec.image} (mounted at {root})" if self.spec.image else None
            check_root(root, self.spec.boot, label)
            self.state["root"] = root
            if self.spec.boot:
                self.boot(root)
            self.state["status"] = STATUS_READY
            self.save()
            self.wait()
        except NspawnError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - whatever happens, tear down before exiting
            error = f"internal error in the nspawn supervisor: {exc!r}"
        problems = teardown(self.state, self.spec, self.proc)
        if error is None and not problems:
            shutil.rmtree(self.dir, ignore_errors=True)
            return 0
        if problems:
            error = (error or "stopping failed") + "; not cleaned up: " + "; ".join(problems)
        self.state.update(status=STATUS_FAILED, error=error)
        self.save()
        return 1

    # -- root ------------------------------------------------------------------------------
    def prepare_root(self) -> str:
        spec = self.spec
        if spec.image:
            name = container_stem(spec.runtime_dir) + spec.id
            self.state["container"] = name
            self.save()
            client = Buildah(_CommandRunner(spec.buildah))
            try:
                client.run("rm", name, check=False)  # a leftover of a killed session with this id
                client.from_image(spec.image, name)
                return client.mount(name)
            except BuildahError as exc:
                if "image not known" in exc.stderr or "does not exist" in exc.stderr or "not found" in exc.stderr:
                    raise NspawnError(f"image {spec.image} is not in local containers-storage: build it "
                                      f"first (ansible-playbook site.yml) or fix ansible_nspawn_image") from exc
                raise NspawnError(f"cannot start a working container from image {spec.image}: {exc}") from exc
        check_root(spec.root, boot=spec.boot)
        if not spec.ephemeral:
            return spec.root
        upper, work, merged = (os.path.join(self.dir, d) for d in ("upper", "work", "root"))
        for path in (upper, work, merged):
            os.makedirs(path, mode=0o755, exist_ok=True)
        self.state["overlay"] = merged
        self.save()
        rc, _out, err = _run(["mount", "-t", "overlay", "overlay", "-o",
                              overlay_options(spec.root, upper, work), merged])
        if rc != 0:
            raise NspawnError(f"cannot mount an overlay over root {spec.root} (ephemeral mode): {err.strip()}; "
                              f"set ansible_nspawn_ephemeral: false to run in the tree itself")
        return merged

    # -- boot ------------------------------------------------------------------------------
    def boot(self, root: str) -> None:
        spec = self.spec
        hostname_file = os.path.join(self.dir, "hostname")
        with open(hostname_file, "w", encoding="utf-8") as handle:
            handle.write(spec.hostname + "\n")
        # The image's own /etc/hostname would win over --hostname once systemd starts.
        argv = nspawn_boot_argv(spec.nspawn, root, spec.machine, hostname=spec.hostname,
                                network=spec.network, extra_args=spec.extra_args,
                                binds_ro=[(hostname_file, "/etc/hostname")])
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = f"\0hpc-nspawn-{spec.id}-{os.getpid()}"
        notify.bind(address)
        env = dict(_host_env(), NOTIFY_SOCKET="@" + address[1:])
        started = time.monotonic()
        console_path = os.path.join(self.dir, "console.log")
        try:
            with open(console_path, "wb") as console:
                self.proc = subprocess.Popen(in_cgroups_argv(self.state["cgroups"], argv),
                                             stdin=subprocess.DEVNULL, stdout=console,
                                             stderr=subprocess.STDOUT, env=env, cwd="/")
            self.state.update(nspawn_pid=self.proc.pid, nspawn_start=process_start(self.proc.pid),
                              nspawn_argv=argv)
            self.save()
            self._wait_for_ready(notify, started, console_path)
        finally:
            notify.close()
        report = system_report(spec, self.state["leader_pid"])
        self.state.update(boot_seconds=round(time.monotonic() - started, 3), **report)
        if report["system_state"] not in READY_STATES:
            raise NspawnError(self._boot_failure(f"finished starting in state '{report['system_state']}'",
                                                 report, console_path))

    def _wait_for_ready(self, notify: socket.socket, started: float, console_path: str) -> None:
        spec = self.spec
        deadline = started + spec.boot_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                report = system_report(spec, self.state["leader_pid"]) if self.state.get("leader_pid") else {}
                raise NspawnError(self._boot_failure(
                    f"did not finish booting within {spec.boot_timeout:g}s (ansible_nspawn_boot_timeout)",
                    report, console_path))
            readable, _w, _x = select.select([notify], [], [], min(0.2, remaining))
            if readable:
                fields = parse_notify(notify.recv(4096))
                if "X_NSPAWN_LEADER_PID" in fields:
                    leader = int(fields["X_NSPAWN_LEADER_PID"])
                    self.state.update(leader_pid=leader, leader_start=process_start(leader))
                    self.save()
                if fields.get("READY") == "1" and self.state.get("leader_pid"):
                    return
            rc = self.proc.poll()
            if rc is not None:
                raise NspawnError(f"systemd-nspawn exited with rc={rc} before {spec.source} finished "
                                  f"booting. Last console lines:\n{self._console(console_path)}")
            if self.stop_requested or not self.owner_alive():
                raise NspawnError(f"boot of {spec.source} was interrupted (stop requested or "
                                  f"the owning process {spec.owner_pid} exited)")

    def _boot_failure(self, what: str, report: Dict[str, Any], console_path: str) -> str:
        failed = ", ".join(report.get("failed_units") or []) or "none"
        jobs = ", ".join(report.get("jobs") or []) or "none"
        return (f"container of host {self.spec.host} ({self.spec.source}) {what}: "
                f"system state '{report.get('system_state', 'unknown')}'; failed units: {failed}; "
                f"jobs still queued: {jobs}. Last console lines:\n{self._console(console_path)}")

    @staticmethod
    def _console(path: str) -> str:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return console_tail(handle.read()) or "(no console output)"
        except OSError:
            return "(no console log)"

    # -- running ---------------------------------------------------------------------------
    def wait(self) -> None:
        while not self.stop_requested:
            if not self.owner_alive():
                return
            if self.proc is not None and self.proc.poll() is not None:
                self.state["exit"] = f"the container stopped by itself (systemd-nspawn rc={self.proc.returncode})"
                return
            time.sleep(0.2)


def _daemonize(session_dir: str, timeout: float = 30.0) -> None:
    """Fork once more so the supervisor is not a child of the Ansible worker that launched it.

    The first process returns (exits) only once the supervisor recorded its pid, so whoever
    launched it can rely on ``state.json`` naming the supervisor.
    """
    child = os.fork()
    if child == 0:
        return
    state_path = os.path.join(session_dir, "state.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (_read_json(state_path) or {}).get("supervisor_pid") == child:
            os._exit(0)  # pylint: disable=protected-access
        if os.waitpid(child, os.WNOHANG)[0] == child:
            os._exit(1)  # pylint: disable=protected-access
        time.sleep(0.02)
    os._exit(1)  # pylint: disable=protected-access


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "supervise":
        sys.stderr.write(f"usage: python -m {MODULE_NAME} supervise SESSION_DIR\n")
        return 2
    _daemonize(args[1])
    return _Supervisor(args[1]).run()


if __name__ == "__main__":
    raise SystemExit(main())
