# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nspawn
short_description: Run tasks inside a systemd-nspawn container of an image or a directory tree
version_added: 0.1.0
author: hpc.stateless developers (!UNKNOWN)
description:
  - Runs Ansible inside a container started by C(systemd-nspawn) on the controller, from a directory
    tree (O(root)) or from an image in local containers-storage (O(image), mounted through a throw-away
    buildah working container).
  - "Directory mode (O(boot=false)): every command is its own C(systemd-nspawn --pipe --directory=<root>);
    no init runs."
  - "Booted mode (O(boot=true)): C(systemd-nspawn --boot --register=no --keep-unit) starts the image's
    own systemd once per host; the connection waits until systemd reports C(running) or C(degraded)
    (else fails with the system state, the failed units and the jobs still queued) and then runs every
    command inside the container's namespaces with C(nsenter)."
  - "Ephemeral by default: an image always runs in its own working container; a directory tree gets an
    overlay whose upper layer is thrown away. Testing never writes into a cached layer."
  - "Ansible opens and closes the connection for every task, so the container (and the mounts it needs)
    belongs to a small supervisor process that outlives tasks. It stops the container and releases
    everything when C(meta: reset_connection) runs, when O(stop_on_close=true) and the connection closes,
    or when the C(ansible-playbook) process that started it exits (also after a failure or Ctrl-C)."
  - Requires root on the controller, C(systemd-nspawn) (Debian/EL package C(systemd-container)),
    C(nsenter) (C(util-linux)) and, for O(image), C(buildah). No host systemd or machined is needed.
  - Commands entered with C(nsenter) run with the controller's root capabilities inside the container's
    namespaces (with O(userns), those of the container's root in its user namespace); that is why booted mode
    gives the container a private network (O(network=private)) by default.
options:
  remote_addr:
    description: Inventory name of the host; the default container host name and machine name derive from it.
    type: str
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_nspawn_host
  remote_user:
    description:
      - User that runs commands inside the container; C(root) when unset.
      - Become (C(sudo), C(su)) works on top of it, including a password prompt.
    type: str
    vars:
      - name: ansible_user
      - name: ansible_nspawn_user
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    keyword:
      - name: remote_user
  executable:
    description: Shell that runs each command inside the container.
    type: str
    default: /bin/sh
    vars:
      - name: ansible_executable
    ini:
      - section: defaults
        key: executable
    env:
      - name: ANSIBLE_EXECUTABLE
  root:
    description:
      - Directory holding the container's root file system (an OS tree, for example an unpacked image).
      - Exactly one of O(root) and O(image) must be set; an empty string counts as unset.
    type: str
    vars:
      - name: ansible_nspawn_root
  image:
    description:
      - Image in local containers-storage, for example C(localhost/hpc-stateless/slurm:latest) or the
        C(layers[name].image) reference returned by M(hpc.stateless.plan).
      - It runs in a buildah working container of its own, removed when the session stops, so the image is never changed.
    type: str
    vars:
      - name: ansible_nspawn_image
  boot:
    description: Boot the container's own systemd (booted mode) instead of running each command in a bare namespace.
    type: bool
    default: false
    vars:
      - name: ansible_nspawn_boot
    env:
      - name: ANSIBLE_NSPAWN_BOOT
    ini:
      - section: nspawn_connection
        key: boot
  ephemeral:
    description:
      - For O(root), run on an overlay whose writes are discarded when the session stops.
      - With V(false) commands write into the directory itself (directory mode only; the tree is locked
        against concurrent use by systemd-nspawn). Images always run in a throw-away working container.
    type: bool
    default: true
    vars:
      - name: ansible_nspawn_ephemeral
    env:
      - name: ANSIBLE_NSPAWN_EPHEMERAL
    ini:
      - section: nspawn_connection
        key: ephemeral
  userns:
    description:
      - "Run the container of O(image) in a user namespace: its ids 0..65535 are host ids of root's subordinate
        range (the line of C(root) in C(/etc/subuid) and C(/etc/subgid), the range a root build maps its containers
        to), so the image's init, its services and every command entered with C(nsenter) are an unprivileged host
        uid. The working container is started with the same mapping (its layers mounted idmapped), so nothing of
        the image is copied or changed; binds (O(extra_args)) are idmapped, so the container sees their host
        owners as they are."
      - "V(false) runs the container as host root (systemd-nspawn without a user namespace is no security
        boundary): only for images whose services are trusted."
      - Needs O(image); a directory tree (O(root)) cannot be mapped here, it needs V(false).
    type: bool
    default: false
    vars:
      - name: ansible_nspawn_userns
    env:
      - name: ANSIBLE_NSPAWN_USERNS
    ini:
      - section: nspawn_connection
        key: userns
  hostname:
    description:
      - Host name inside the container. Booted containers get it bind-mounted over C(/etc/hostname) so
        systemd does not replace it with the image's own.
      - Defaults to O(remote_addr) reduced to letters, digits and dashes.
    type: str
    vars:
      - name: ansible_nspawn_hostname
  network:
    description:
      - V(host) shares the controller's network, V(private) gives the container only a loopback interface,
        a path (for example C(/run/netns/NAME) made by C(ip netns add)) joins that network namespace.
      - Defaults to V(private) in booted mode (services of the image cannot touch the host's network
        or ports) and V(host) in directory mode (package installs reach the mirror).
    type: str
    vars:
      - name: ansible_nspawn_network
    env:
      - name: ANSIBLE_NSPAWN_NETWORK
    ini:
      - section: nspawn_connection
        key: network
  extra_args:
    description:
      - Further C(systemd-nspawn) arguments, one per item, for example C(--bind-ro=/srv/key:/etc/munge/munge.key)
        or C(--set-credential=munge.key:...).
    type: list
    elements: str
    default: []
    vars:
      - name: ansible_nspawn_extra_args
  boot_timeout:
    description: Seconds to wait for the container's systemd to finish starting up before failing.
    type: float
    default: 60
    vars:
      - name: ansible_nspawn_boot_timeout
    env:
      - name: ANSIBLE_NSPAWN_BOOT_TIMEOUT
    ini:
      - section: nspawn_connection
        key: boot_timeout
  stop_timeout:
    description: Seconds an orderly container shutdown may take before it is killed.
    type: float
    default: 10
    vars:
      - name: ansible_nspawn_stop_timeout
    env:
      - name: ANSIBLE_NSPAWN_STOP_TIMEOUT
    ini:
      - section: nspawn_connection
        key: stop_timeout
  stop_on_close:
    description:
      - Stop the container and release its root whenever the connection closes.
      - Ansible closes the connection after every task, so leave this off in playbooks (each task would boot
        afresh); it is meant for code that drives the connection itself.
    type: bool
    default: false
    vars:
      - name: ansible_nspawn_stop_on_close
  runtime_dir:
    description:
      - Directory for session state, console logs and the overlay upper layers of ephemeral roots.
      - Root acts on what its files name (processes, mounts, working containers), so it must be private to the
        controller's user. It is made with mode 0700 when missing; an existing one that is a symbolic link, belongs
        to another user or that another user can write (or below a directory another user can write, sticky ones
        such as C(/tmp) aside) is refused, naming it.
      - Defaults to C(/run/hpc-stateless/nspawn).
    type: path
    vars:
      - name: ansible_nspawn_runtime_dir
    env:
      - name: ANSIBLE_NSPAWN_RUNTIME_DIR
    ini:
      - section: nspawn_connection
        key: runtime_dir
  nspawn_exe:
    description: The systemd-nspawn executable (name looked up in PATH, or an absolute path).
    type: str
    default: systemd-nspawn
    vars:
      - name: ansible_nspawn_exe
    env:
      - name: ANSIBLE_NSPAWN_EXE
    ini:
      - section: nspawn_connection
        key: nspawn_exe
  nsenter_exe:
    description: The nsenter executable.
    type: str
    default: nsenter
    vars:
      - name: ansible_nspawn_nsenter_exe
    env:
      - name: ANSIBLE_NSPAWN_NSENTER_EXE
    ini:
      - section: nspawn_connection
        key: nsenter_exe
  buildah_exe:
    description: The buildah executable, used to mount O(image).
    type: str
    default: buildah
    vars:
      - name: ansible_nspawn_buildah_exe
    env:
      - name: ANSIBLE_NSPAWN_BUILDAH_EXE
    ini:
      - section: nspawn_connection
        key: buildah_exe
notes:
  - Sessions are per C(ansible-playbook) run and per host; two runs that verify the same image at once get
    two containers.
  - "Switching one inventory host from the buildah connection (build) to this one (verify) without editing
    the inventory: set C(ansible_connection) and the C(ansible_nspawn_*) variables as play vars, which rank
    above inventory and C(add_host) variables. See C(docs/nspawn.md) and C(playbooks/verify.yml)."
"""

EXAMPLES = r"""
- name: Run tasks in a directory tree (each command is one systemd-nspawn --pipe)
  hosts: tree
  connection: hpc.stateless.nspawn
  vars:
    ansible_nspawn_root: /srv/images/compute/rootfs
  tasks:
    - name: Read the release file
      ansible.builtin.command: cat /etc/os-release
      changed_when: false

- name: Boot a layer image and check that systemd came up
  hosts: slurm
  gather_facts: false
  vars:
    ansible_connection: hpc.stateless.nspawn
    ansible_nspawn_image: localhost/hpc-stateless/slurm:latest
    ansible_nspawn_boot: true
  tasks:
    - name: Ask systemd
      ansible.builtin.command: systemctl is-system-running  # noqa: command-instead-of-module
      register: state
      changed_when: false
      failed_when: state.stdout not in ['running', 'degraded']

    - name: Stop the container now rather than at the end of the run
      ansible.builtin.meta: reset_connection
"""

import fcntl
import os
import selectors
import shlex
import subprocess
from typing import Any, List, Optional, Tuple

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.process import get_bin_path
from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text
from ansible.plugins.connection import BUFSIZE, ConnectionBase
from ansible.utils.display import Display

from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import NspawnError, strip_noise
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import keep_running
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec

display = Display()

# What a missing executable is called in the distributions' package managers.
_PACKAGES = {
    "systemd-nspawn": "systemd-container (Debian/Ubuntu and EL)",
    "nsenter": "util-linux",
    "buildah": "buildah",
}


class Connection(ConnectionBase):
    """Commands in a systemd-nspawn container: directory mode or booted mode."""

    transport = "hpc.stateless.nspawn"
    has_pipelining = True
    has_tty = False
    default_user = "root"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._session: Optional[Session] = None
        self._state: Optional[dict] = None

    # -- setup ---------------------------------------------------------------------------
    def _executable(self, option: str) -> str:
        name = self.get_option(option)
        if os.path.isabs(name):
            if os.access(name, os.X_OK):
                return name
        else:
            try:
                return get_bin_path(name)
            except ValueError:
                pass
        package = _PACKAGES.get(os.path.basename(name), os.path.basename(name))
        raise AnsibleConnectionFailure(
            f"{name} is not installed on the controller (option {option}): the nspawn connection needs it; "
            f"install the package {package}")

    def _spec(self) -> SessionSpec:
        if rootless.is_rootless():
            # Inside buildah unshare the user is uid 0 of a user namespace: not enough for systemd-nspawn.
            raise AnsibleConnectionFailure(
                "the nspawn connection must run as root on the controller (systemd-nspawn, nsenter and mounts "
                "need it); an unprivileged (rootless) build cannot boot its images: verify as root, or leave the "
                "stage out (hpc_stateless_site_stages without verify) and pack with the gate's override "
                "(-e hpc_stateless_unverified_ok='<why>'; docs/rootless.md)")
        host = self.get_option("remote_addr")
        image = self.get_option("image")
        try:
            return SessionSpec(
                host=host,
                root=self.get_option("root"),
                image=image,
                boot=self.get_option("boot"),
                ephemeral=self.get_option("ephemeral"),
                hostname=self.get_option("hostname"),
                network=self.get_option("network"),
                extra_args=self.get_option("extra_args"),
                boot_timeout=self.get_option("boot_timeout"),
                stop_timeout=self.get_option("stop_timeout"),
                runtime_dir=self.get_option("runtime_dir"),
                userns=self.get_option("userns"),
                nspawn=self._executable("nspawn_exe"),
                nsenter=self._executable("nsenter_exe") if self.get_option("boot") else self.get_option("nsenter_exe"),
                buildah=self._executable("buildah_exe") if image else self.get_option("buildah_exe"),
            )
        except NspawnError as exc:
            raise AnsibleConnectionFailure(str(exc)) from exc

    def _connect(self) -> "Connection":
        super()._connect()
        if not self._connected:
            spec = self._spec()
            self._session = Session(spec, on_wait=display.warning)
            try:
                self._state = self._session.ensure()
            except NspawnError as exc:
                raise AnsibleConnectionFailure(f"nspawn: {exc}") from exc
            mode = "booted" if spec.boot else "directory"
            display.vvv(f"ESTABLISH NSPAWN CONNECTION ({mode} mode, {spec.source}, root "
                        f"{self._state.get('root')}, session {spec.id})", host=spec.host)
            if spec.boot and self._state.get("failed_units"):
                display.vvv(f"container is {self._state.get('system_state')}; failed units: "
                            f"{', '.join(self._state['failed_units'])}", host=spec.host)
            self._connected = True
        return self

    # -- commands ------------------------------------------------------------------------
    def _require_session(self) -> Tuple[Session, dict]:
        if self._session is None or self._state is None:
            raise AnsibleConnectionFailure("the nspawn connection is not established")
        return self._session, self._state

    def _popen(self, command: str, stdin: Any = subprocess.PIPE) -> Tuple[subprocess.Popen, List[str]]:
        session, state = self._require_session()
        shell = self.get_option("executable") or "/bin/sh"
        try:
            argv, env = session.command(state, [shell, "-c", command], user=self.get_option("remote_user"))
        except NspawnError as exc:
            raise AnsibleConnectionFailure(str(exc)) from exc
        display.vvv(f"EXEC {shlex.join(argv)}", host=session.spec.host)
        proc = subprocess.Popen([to_bytes(a, errors="surrogate_or_strict") for a in argv], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
        if session.spec.boot:
            keep_running(proc)
        return proc, argv

    def _check_alive(self, rc: int, stderr: bytes) -> None:
        """After a failed command, tell a dead container apart from a failing command."""
        session, state = self._require_session()
        if rc != 0 and session.spec.boot and not session.container_running(state):
            raise AnsibleConnectionFailure(
                f"the container of host {session.spec.host} is no longer running (it was stopped "
                f"or shut itself down): {to_native(stderr).strip()}")

    def exec_command(self, cmd: str, in_data: Optional[bytes] = None, sudoable: bool = True
                     ) -> Tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        proc, _argv = self._popen(cmd)
        if self.become and self.become.expect_prompt() and sudoable:
            self._answer_become_prompt(proc)
        stdout, stderr = proc.communicate(in_data)
        self._after(proc)
        stderr = strip_noise(stderr)
        self._check_alive(proc.returncode, stderr)
        return proc.returncode, stdout, stderr

    def _after(self, _proc: subprocess.Popen) -> None:
        session, state = self._require_session()
        session.after_command(state)

    def _answer_become_prompt(self, proc: subprocess.Popen) -> None:
        """Read until the become plugin reports success or a password prompt; answer the prompt."""
        timeout = self._play_context.timeout or 10
        for stream in (proc.stdout, proc.stderr):
            fcntl.fcntl(stream, fcntl.F_SETFL, fcntl.fcntl(stream, fcntl.F_GETFL) | os.O_NONBLOCK)
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        output = b""
        try:
            while not self.become.check_success(output) and not self.become.check_password_prompt(output):
                events = selector.select(timeout)
                if not events:
                    proc.kill()
                    proc.communicate()
                    raise AnsibleError(f"timeout ({timeout}s) waiting for the privilege escalation "
                                       f"password prompt:\n{to_native(output)}")
                for key, _event in events:
                    chunk = key.fileobj.read()
                    if not chunk:
                        proc.communicate()
                        raise AnsibleError(f"privilege escalation output closed while waiting for the "
                                           f"password prompt:\n{to_native(output)}")
                    output += chunk
        finally:
            selector.close()
        if not self.become.check_success(output):
            password = self.become.get_option("become_pass", playcontext=self._play_context) or ""
            proc.stdin.write(to_bytes(password, errors="surrogate_or_strict") + b"\n")
            proc.stdin.flush()
        for stream in (proc.stdout, proc.stderr):
            fcntl.fcntl(stream, fcntl.F_SETFL, fcntl.fcntl(stream, fcntl.F_GETFL) & ~os.O_NONBLOCK)

    @staticmethod
    def _container_path(remote_path: str) -> str:
        """Relative paths are taken from / (there is no login directory to start from)."""
        return os.path.normpath(remote_path if remote_path.startswith("/") else "/" + remote_path)

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        out_path = self._container_path(out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._session.spec.host)
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound(f"file or module does not exist: {in_path}")
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            # dd streams the file: it never sits in memory, whatever its size.
            proc, _argv = self._popen(f"dd of={shlex.quote(out_path)} bs={BUFSIZE} status=none", stdin=source)
            _stdout, stderr = proc.communicate()
        self._after(proc)
        stderr = strip_noise(stderr)
        self._check_alive(proc.returncode, stderr)
        if proc.returncode != 0:
            raise AnsibleError(f"failed to transfer {in_path} to {out_path} in host "
                               f"{self._session.spec.host}: {to_native(stderr).strip()}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        in_path = self._container_path(in_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._session.spec.host)
        proc, _argv = self._popen(f"dd if={shlex.quote(in_path)} bs={BUFSIZE} status=none",
                                  stdin=subprocess.DEVNULL)
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            chunk = proc.stdout.read(BUFSIZE)
            while chunk:
                target.write(chunk)
                chunk = proc.stdout.read(BUFSIZE)
        stderr = strip_noise(proc.stderr.read())
        proc.wait()
        self._after(proc)
        self._check_alive(proc.returncode, stderr)
        if proc.returncode != 0:
            raise AnsibleError(f"failed to fetch {in_path} from host {self._session.spec.host} to "
                               f"{out_path}: {to_text(stderr).strip()}")

    # -- lifetime ------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the container and release its root (mounts, working container, overlay)."""
        session = self._session or Session(self._spec(), on_wait=display.warning)
        problems = session.stop()
        self._connected = False
        self._state = None
        if problems:
            raise AnsibleError(f"nspawn: stopping host {session.spec.host} left: {'; '.join(problems)}")

    def reset(self) -> None:
        """``meta: reset_connection`` stops the container; the next task starts a fresh one."""
        display.vvv("RESET NSPAWN CONNECTION (stopping the container)", host=self.get_option("remote_addr"))
        self.stop()

    def close(self) -> None:
        if self._connected and self.get_option("stop_on_close"):
            self.stop()
        self._connected = False
