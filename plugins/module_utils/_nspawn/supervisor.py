# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The supervisor of a session: the process that owns what must outlive an Ansible task.

Ansible opens and closes a connection for every task, so whatever must outlive a task
(a booted container, a buildah working container of an image, the overlay that keeps a
directory root untouched) is owned by a small *supervisor* process: this file run as
``python -m ansible_collections.hpc.stateless.plugins.module_utils._nspawn.supervisor supervise
<session dir> <nspawn> <nsenter> <buildah>`` (:func:`launch_command`). The supervisor prepares the root, boots, writes
``state.json`` and tears everything down when it is asked to stop (SIGTERM), when the
process that owns the session (the ``ansible-playbook`` run) exits, or when the container
stops by itself. On every failure it tears down first and reports after, so an error never
leaves a container process or a mount behind.

Everything here is stdlib-only: the supervisor runs outside Ansible.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.cgroups import in_cgroups_argv, session_cgroups
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import (
    NspawnError,
    console_tail,
    container_env,
    host_env,
    nsenter_argv,
    nspawn_boot_argv,
    parse_job_list,
    parse_notify,
    parse_unit_list,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.container import (
    container_name,
    mount_image,
    userns_range,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.overlay import mount_overlay
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import (
    keep_running,
    process_alive,
    process_start,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.root import check_root
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.state import (
    STATUS_FAILED,
    STATUS_READY,
    STATUS_STARTING,
    read_json,
    write_json,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.teardown import teardown

#: What ``python -m`` runs: this file, named as the collection loader names it.
MODULE_NAME = "ansible_collections.hpc.stateless.plugins.module_utils._nspawn.supervisor"

# ansible_collections/hpc/stateless/plugins/module_utils/_nspawn/supervisor.py -> the dir holding ansible_collections
COLLECTIONS_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 6))
READY_STATES = ("running", "degraded")


def launch_command(session_dir: str, programs: Dict[str, str]) -> Tuple[List[str], Dict[str, str]]:
    """argv and environment that start the supervisor of ``session_dir``: this module run by the
    current Python, with the collection importable from wherever it is installed. The session's
    programs go on the command line, in :data:`SessionSpec.PROGRAMS` order (no file names them)."""
    env = host_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (COLLECTIONS_ROOT, os.environ.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", MODULE_NAME, "supervise", session_dir,
            *[programs[name] for name in SessionSpec.PROGRAMS]], env


def in_container(spec: SessionSpec, leader_pid: int, command: List[str], timeout: float = 30.0
                 ) -> Tuple[int, str, str]:
    """Run a short diagnostic command inside a booted container."""
    argv = nsenter_argv(spec.nsenter, leader_pid, command, user_ns=spec.userns)
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


def private_users_of(state: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """``(start, count)`` of the user namespace a session's container runs in (None: the host's ids)."""
    found = state.get("private_users")
    return (int(found[0]), int(found[1])) if found else None


class _Supervisor:
    """Owns one session's root and container until it is asked to stop or its owner exits."""

    def __init__(self, session_dir: str, programs: Dict[str, str]) -> None:
        self.dir = session_dir
        spec = read_json(os.path.join(session_dir, "spec.json"))
        if spec is None:
            raise NspawnError(f"no spec.json in {session_dir}")
        self.spec = SessionSpec.from_dict(spec, programs)
        self.state_path = os.path.join(session_dir, "state.json")
        self.state: Dict[str, Any] = {"status": STATUS_STARTING, "supervisor_pid": os.getpid(),
                                      "supervisor_start": process_start(os.getpid())}
        self.proc: Optional[subprocess.Popen] = None
        self.stop_requested = False

    def save(self) -> None:
        write_json(self.state_path, self.state)

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
            self.state["cgroups"] = session_cgroups(self.spec.id)
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
            name = container_name(spec)
            private_users = userns_range() if spec.userns else None
            self.state["container"] = name  # recorded first: teardown removes it whatever happens next
            if private_users is not None:
                self.state["private_users"] = list(private_users)
            self.save()
            return mount_image(spec, name, private_users)
        check_root(spec.root, boot=spec.boot)
        if not spec.ephemeral:
            return spec.root
        upper, work, merged = (os.path.join(self.dir, d) for d in ("upper", "work", "root"))
        for path in (upper, work, merged):
            os.makedirs(path, mode=0o755, exist_ok=True)
        self.state["overlay"] = merged
        self.save()
        rc, _out, err = mount_overlay(spec.root, upper, work, merged)
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
                                binds_ro=[(hostname_file, "/etc/hostname")],
                                private_users=private_users_of(self.state))
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = f"\0hpc-nspawn-{spec.id}-{os.getpid()}"
        notify.bind(address)
        env = dict(host_env(), NOTIFY_SOCKET="@" + address[1:])
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
        if (read_json(state_path) or {}).get("supervisor_pid") == child:
            os._exit(0)  # pylint: disable=protected-access
        if os.waitpid(child, os.WNOHANG)[0] == child:
            os._exit(1)  # pylint: disable=protected-access
        time.sleep(0.02)
    os._exit(1)  # pylint: disable=protected-access


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 + len(SessionSpec.PROGRAMS) or args[0] != "supervise":
        sys.stderr.write(f"usage: python -m {MODULE_NAME} supervise SESSION_DIR "
                         f"{' '.join(name.upper() for name in SessionSpec.PROGRAMS)}\n")
        return 2
    _daemonize(args[1])
    return _Supervisor(args[1], dict(zip(SessionSpec.PROGRAMS, args[2:]))).run()


if __name__ == "__main__":
    raise SystemExit(main())
