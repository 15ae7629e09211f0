# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sessions seen from an Ansible task: the one place that knows how systemd-nspawn and nsenter
are called for a host.

A *session* is one container root used by one inventory host during one
``ansible-playbook`` run:

- directory mode: every command is its own ``systemd-nspawn --pipe -D <root>``;
- booted mode: ``systemd-nspawn -b`` runs once, and commands enter the namespaces of
  the container's init with ``nsenter``.

A session that needs something to outlive a task (a booted container, an image's working
container, an overlay) has a supervisor process (``_nspawn/supervisor.py``); :class:`Session`
starts it, waits until it is ready, builds each command's argv and stops it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.cgroups import (
    cgroup_dirs_of,
    in_cgroups_argv,
    remove_cgroups,
    session_cgroups,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import (
    NspawnError,
    console_tail,
    container_env,
    host_env,
    nsenter_argv,
    nspawn_command_argv,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import process_alive, wait_gone
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.root import check_root, lookup_user
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.state import (
    STATUS_FAILED,
    STATUS_READY,
    STATUS_STARTING,
    checked_runtime_dir,
    default_runtime_dir,
    locked,
    read_json,
    write_json,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.supervisor import launch_command, private_users_of
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.teardown import teardown


class Session:
    """A container root for one host, seen from an Ansible task (or a test)."""

    def __init__(self, spec: SessionSpec, on_wait: Optional[Callable[[str], None]] = None) -> None:
        self.spec = spec
        # Told once when the runtime directory's lock is held by another process (module_utils/_nspawn/state.locked).
        self.on_wait = on_wait
        self.dir = os.path.join(spec.runtime_dir, spec.id)
        self.state_path = os.path.join(self.dir, "state.json")

    def read_state(self) -> Optional[Dict[str, Any]]:
        return read_json(self.state_path)

    def _runtime_dir(self) -> str:
        return checked_runtime_dir(self.spec.runtime_dir)

    def _wait_note(self, _holder: str) -> None:
        if self.on_wait is not None:
            self.on_wait(f"host {self.spec.host}: waiting for the nspawn runtime directory {self.spec.runtime_dir}, "
                         "locked by another run that starts or stops a container there (a stop waits for its "
                         f"container to end, up to {2 * self.spec.stop_timeout + 30:g} s)")

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
        with locked(runtime, self._wait_note):
            collect_garbage(runtime, keep=self.spec.id, programs=self.spec.programs)
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
        write_json(os.path.join(self.dir, "spec.json"), self.spec.to_dict())
        write_json(self.state_path, {"status": STATUS_STARTING})
        argv, env = launch_command(self.dir, self.spec.programs)
        with open(os.path.join(self.dir, "supervisor.log"), "ab") as log:
            launcher = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
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
                wait_gone(state.get("supervisor_pid"), state.get("supervisor_start"), 10)
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
        if not os.path.lexists(self.spec.runtime_dir):
            return []
        with locked(self._runtime_dir(), self._wait_note):
            state = self.read_state()
            if state is None and not os.path.isdir(self.dir):
                return []
            pid, start = (state or {}).get("supervisor_pid"), (state or {}).get("supervisor_start")
            if process_alive(pid, start):
                os.kill(pid, signal.SIGTERM)
                if not wait_gone(pid, start, 2 * self.spec.stop_timeout + 30):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    wait_gone(pid, start, 5)
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
                                       extra_args=spec.extra_args, user=user,
                                       private_users=private_users_of(state))
            cgroups = state.get("cgroups")
            if cgroups is None:  # no supervisor: the cgroups live as long as the command
                cgroups = session_cgroups(spec.id)
            return in_cgroups_argv(cgroups, argv), host_env()
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
        return (nsenter_argv(spec.nsenter, leader, command, uid=uid, gid=gid, user_ns=spec.userns),
                container_env(name, home))

    def after_command(self, state: Dict[str, Any]) -> None:
        """Release what a command of a session without supervisor left (its cgroups)."""
        if not self.spec.boot and "cgroups" not in state:
            remove_cgroups(cgroup_dirs_of(self.spec.id), timeout=1.0)

    def container_running(self, state: Dict[str, Any]) -> bool:
        return process_alive(state.get("leader_pid"), state.get("leader_start"))


def collect_garbage(runtime_dir: str, keep: str = "", programs: Optional[Mapping[str, str]] = None) -> List[str]:
    """Tear down and remove sessions whose supervisor and owner are both gone (killed runs,
    failed teardowns nobody read), with the caller's ``programs``. Call with the runtime dir
    checked (:func:`checked_runtime_dir`) and locked. Returns what is left."""
    problems: List[str] = []
    for name in os.listdir(runtime_dir):
        path = os.path.join(runtime_dir, name)
        spec_data = read_json(os.path.join(path, "spec.json"))
        if name == keep or spec_data is None or not os.path.isdir(path):
            continue
        state = read_json(os.path.join(path, "state.json")) or {}
        if process_alive(state.get("supervisor_pid"), state.get("supervisor_start")):
            continue
        if process_alive(spec_data.get("owner_pid"), spec_data.get("owner_start")):
            continue  # its owner reads (and removes) it itself
        left = teardown(state, SessionSpec.from_dict(spec_data, programs))
        if left:
            problems += left
            continue
        shutil.rmtree(path, ignore_errors=True)
    return problems


def owner_sessions(runtime_dir: Optional[str] = None, owner_pid: Optional[int] = None) -> List[str]:
    """Session directories of ``owner_pid`` (default: all of them) under ``runtime_dir`` (default: the default one),
    once it is checked private (:func:`checked_runtime_dir`)."""
    found: List[str] = []
    runtime_dir = runtime_dir or default_runtime_dir()
    if not os.path.lexists(runtime_dir):
        return found
    checked_runtime_dir(runtime_dir)
    for name in sorted(os.listdir(runtime_dir)):
        spec = read_json(os.path.join(runtime_dir, name, "spec.json"))
        if spec and (owner_pid is None or spec.get("owner_pid") == owner_pid):
            found.append(os.path.join(runtime_dir, name))
    return found


def stop_sessions(runtime_dir: Optional[str] = None, owner_pid: Optional[int] = None,
                  programs: Optional[Mapping[str, str]] = None) -> List[str]:
    """Stop every session of ``owner_pid`` (default: every session) with ``programs`` (default: those in PATH);
    returns leftovers."""
    problems = []
    for path in owner_sessions(runtime_dir, owner_pid):
        spec = read_json(os.path.join(path, "spec.json"))
        if spec:
            problems += Session(SessionSpec.from_dict(spec, programs)).stop()
    return problems
