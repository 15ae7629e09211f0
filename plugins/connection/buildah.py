# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: buildah
short_description: Run Ansible inside a buildah working container, with results that survive a busy host
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Runs tasks in a buildah working container like C(containers.podman.buildah), with one change to how
    commands return their results. It calls buildah through the collection's buildah client, so it uses the
    same executable and C(BUILDAH_ISOLATION) (the environment's, else C(chroot)) as the modules.
  - On a loaded build host, C(buildah run) with chroot isolation was seen to exit 0 with no output at all,
    so Ansible failed with "No start of json char found" or "failed to resolve remote temporary directory".
  - This connection makes each command write its standard output, standard error and exit status to files in
    the container's C(/tmp), reads them through the container's mount point and removes them. When the status
    file is missing and the shell never opened its output file, the command provably did not run, and
    C(buildah run) is repeated (up to three times), whatever buildah's own exit status.
  - Paths in the mounted container are resolved the way the container sees them (its symlinks lead to its own
    files, never to the build host's), and only regular files are read; a file is written under a temporary name
    next to its target and renamed over it when complete. Files fetched to the controller are replaced the same way.
  - Pipelining is on by default. A module's code travels to the container as a file next to the result files
    and the command reads it as standard input, so a task costs one C(buildah run) instead of one each to
    create a temporary directory, make the module executable, run it and remove it.
  - Containers that cannot be mounted and users other than root fall back to plain C(buildah run) (the
    command's own streams, no retry), C(buildah copy) and C(buildah run cat) for files.
  - The build playbooks of this collection use it for every layer.
  - By default (O(persistent)) one agent runs in the container for as long as the play needs it. The first
    task starts a small holder process on the host that runs C(buildah run <container> -- python3 -c <agent>)
    once, and every later task of the same C(ansible-playbook) run sends its commands and files to that agent
    over a Unix socket private to the user. A task then costs no C(buildah run) at all. Each command runs
    exactly once with C(/bin/sh -c); when the agent goes away before it answered, the task fails saying so
    and the command is not run again. A start of the agent that never answered is repeated (it ran nothing).
    Files travel through the agent in chunks, so no mount of the container is needed.
  - The agent writes nothing into the container (its code is passed on the command line and writes no
    bytecode). The holder stops the agent when the connection is reset (C(ansible.builtin.meta) V(reset_connection),
    which the collection's build runs before each commit), when C(ansible-playbook) is gone (also when it was
    killed), when the container is gone, or after O(persistent_idle_timeout) seconds without a task.
  - Pipelined Python modules run in a warm python the agent keeps (a fork of the agent that imported
    C(ansible.module_utils.basic) once, forked again for each module), so a module costs neither an interpreter
    start nor that import. Each module still runs in a fresh process and imports everything else from its own
    payload. A module the warm python cannot run exactly as C(/bin/sh) would (C(become), another interpreter,
    C(PYTHON*) or locale variables that differ) runs through C(/bin/sh); see docs/connection.md.
  - A container without C(python3) falls back to one C(buildah run) per task, as does O(persistent=false).
options:
  persistent:
    description:
      - Keep one agent per container and play (see above). V(false) runs one C(buildah run) per task with
        results through files, as before the agent existed.
    type: boolean
    default: true
    env:
      - name: HPC_STATELESS_BUILDAH_PERSISTENT
    vars:
      - name: ansible_hpc_stateless_buildah_persistent
  persistent_idle_timeout:
    description: Seconds without a task after which the agent and its holder stop (the next task starts them again).
    type: integer
    default: 600
    env:
      - name: HPC_STATELESS_BUILDAH_IDLE_TIMEOUT
    vars:
      - name: ansible_hpc_stateless_buildah_idle_timeout
  pipelining:
    description:
      - Run modules pipelined (one C(buildah run) per task). Only this connection's setting; other connections
        keep the global C(ANSIBLE_PIPELINING) default.
    type: boolean
    default: true
    vars:
      - name: ansible_hpc_stateless_buildah_pipelining
  remote_addr:
    description: Name or ID of the buildah working container.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
  remote_user:
    description: User to run commands as inside the container.
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
"""

import errno
import io
import os
import posixpath
import shlex
import shutil
import uuid

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.utils.display import Display

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._process import ToolMissing
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent.agent import Replacement
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent.holder import AgentLost, AgentUnavailable, Session

display = Display()

ATTEMPTS = 3
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def replace_file(path, source, dir_fd=None):
    """Write the file object ``source`` to ``path`` (bytes; relative to ``dir_fd``) through a :class:`Replacement`."""
    target = Replacement(path, dir_fd=dir_fd)
    try:
        shutil.copyfileobj(source, target)
        target.commit()
    finally:
        target.discard()


class Connection(ConnectionBase):
    """A buildah working container, reached through its mount point and ``buildah run``."""

    transport = "hpc.stateless.buildah"
    # Standard input travels through a file too (see exec_command), so pipelining is safe here.
    has_pipelining = True

    def __init__(self, play_context, new_stdin, *args, **kwargs):
        super().__init__(play_context, new_stdin, *args, **kwargs)
        self._container_id = self._play_context.remote_addr
        self._mount_point = None  # the container's root on the host while connected, None when it cannot be mounted
        self.user = self._play_context.remote_user
        self._client = Buildah()  # buildah's executable and isolation, as every other caller of buildah
        self._session = None  # the agent's holder while persistent, None for one buildah run per task

    def _buildah(self, verb, args=(), in_data=None):
        """``buildah <verb> [--user|--chown] <container> <args>``; returns (rc, stdout bytes, stderr bytes)."""
        options = []
        if self.user and self.user != "root":
            options = {"run": ["--user", self.user], "copy": ["--chown", self.user]}.get(verb, [])
        argv = [verb, *options, self._container_id, *(to_text(a, errors="surrogate_or_strict") for a in args)]
        try:
            display.vvv(f"RUN {self._client.argv(*argv)}", host=self._container_id)
            result = self._client.run(*argv, check=False, input=in_data, text=False)
        except ToolMissing as exc:
            raise AnsibleConnectionFailure(str(exc)) from None
        display.vvvv(f"RC {result.rc} STDERR {to_text(result.stderr)!r}", host=self._container_id)
        return result.rc, result.stdout, result.stderr

    def _connect(self):
        if not self._connected and self._persistent():
            self._session = self._new_session()
            try:
                self._session.connect()
                self._connected = True
                return self
            except ToolMissing as exc:
                raise AnsibleConnectionFailure(str(exc)) from None
            except AgentUnavailable as exc:
                display.warning(f"{exc}; using one buildah run per task for this task")
                self._session = None
        if not self._connected:
            rc, out, err = self._buildah("mount")
            if rc != 0:
                display.v(f"Failed to mount container {self._container_id}: {to_text(err).strip()}")
                self._mount_point = None
            else:
                self._mount_point = to_text(out, errors="surrogate_or_strict").strip()
            self._connected = True
        return self

    def _persistent(self):
        return bool(self.get_option("persistent"))

    def _new_session(self):
        return Session(self._container_id, self.user if self.user != "root" else None, self._client,
                       idle_timeout=self.get_option("persistent_idle_timeout"),
                       log=lambda msg: display.vvv(msg, host=self._container_id))

    def _agent(self, what, call, *args):
        """``call(*args)`` on the agent's session; a lost answer fails the task (never run again)."""
        try:
            return self._files(what, call, *args)
        except AgentLost as exc:
            self._session = None
            self._connected = False
            raise AnsibleConnectionFailure(str(exc)) from None

    def _files(self, what, call, *args):
        """``call(*args)``; a file error fails the task saying what could not be done."""
        try:
            return call(*args)
        except OSError as exc:
            raise AnsibleError(f"cannot {what} container {self._container_id}: {exc}") from None

    def _root(self):
        """The container's root on the host while mounted, for files as root; None when they go through buildah."""
        if not self._mount_point or (self.user and self.user != "root"):
            return None
        return to_text(self._mount_point, errors="surrogate_or_strict")

    def _result(self, root, path):
        """The bytes of the result file ``path``: a regular file in the container, never what a link there names."""
        try:
            data = _imagepath.read_file(root, path, follow_last=False)
        except OSError as exc:
            raise AnsibleConnectionFailure(f"cannot read the command's result {path} in container "
                                           f"{self._container_id}: {exc}") from None
        if data is None:
            raise AnsibleConnectionFailure(f"the command's result {path} in container {self._container_id} is gone")
        return data

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if self._session is not None:
            display.vvv(f"EXEC (agent) {to_text(cmd)}", host=self._container_id)
            result = self._agent("run a command in", self._session.exec, to_bytes(cmd, errors="surrogate_or_strict"),
                                 None if in_data is None else to_bytes(in_data))
            if self._session is not None and self._session.warm:
                display.vvv("the module ran in the agent's warm python", host=self._container_id)
            return result
        root = self._root()
        if root is None:
            # Not mounted, or another user: the command's own streams and status, no retry.
            return self._buildah("run", shlex.split(to_text(cmd, errors="surrogate_or_strict")), in_data)
        names = {part: f".hpc-stateless-exec-{uuid.uuid4().hex}.{part}" for part in ("in", "out", "err", "rc")}
        paths = {part: f"/tmp/{name}" for part, name in names.items()}
        stdin = paths["in"] if in_data is not None else "/dev/null"
        wrapped = (f"( {to_text(cmd, errors='surrogate_or_strict')} ) <{stdin} "
                   f">{paths['out']} 2>{paths['err']}; echo $? >{paths['rc']}")
        try:
            tmp = _imagepath.open_dir(root, "/tmp")  # the container's /tmp, wherever its links lead inside the container
        except OSError as exc:
            raise AnsibleConnectionFailure(f"container {self._container_id} has no /tmp for the command's results: "
                                           f"{exc}") from None
        try:
            if in_data is not None:
                # A pipelined module's code: readable by root only, removed with the results below.
                with open(os.open(names["in"], _NEW_FILE, 0o600, dir_fd=tmp), "wb") as handle:
                    handle.write(to_bytes(in_data))
            for attempt in range(1, ATTEMPTS + 1):
                rc, stdout, stderr = self._buildah("run", ["/bin/sh", "-c", wrapped])
                if _imagepath.lstat(root, paths["rc"], follow_last=False) is not None:
                    status, stdout, stderr = (self._result(root, paths[part]) for part in ("rc", "out", "err"))
                    return int(status.strip() or b"1"), stdout, stderr
                if _imagepath.lstat(root, paths["out"], follow_last=False) is not None:
                    # The shell opened its output, so the command may have run: never run it twice.
                    return rc or 1, stdout, stderr
                # Not started: buildah lost the run or failed before the shell (seen on busy hosts:
                # "Close_Fd sealing memfd copy: Device or resource busy"). Safe to run it again.
                display.vvv(f"buildah run exited {rc} without running {shlex.quote(to_text(cmd))} "
                            f"(attempt {attempt}/{ATTEMPTS}): {to_text(stderr).strip()}; running it again",
                            host=self._container_id)
        finally:
            for name in names.values():
                try:
                    os.unlink(name, dir_fd=tmp)  # the name itself, a link planted there included
                except FileNotFoundError:
                    pass
            os.close(tmp)
        raise AnsibleConnectionFailure(
            f"buildah run in container {self._container_id} exited without running the command "
            f"{ATTEMPTS} times (last: rc={rc}, {to_text(stderr).strip()!r}); is the container mounted and does "
            f"it have /bin/sh and /tmp?")

    def _or_fail(self, what, verb, args):
        """stdout of ``buildah <verb>``; AnsibleError saying what could not be done otherwise."""
        rc, out, err = self._buildah(verb, args)
        if rc != 0:
            raise AnsibleError(f"cannot {what} container {self._container_id}: {to_text(err).strip()}")
        return out

    @ensure_connect
    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._container_id)
        if self._session is not None:
            self._agent(f"copy {in_path} to {out_path} in", self._session.put,
                        to_bytes(in_path, errors="surrogate_or_strict"), to_text(out_path, errors="surrogate_or_strict"))
            return
        root = self._root()
        if root is None:
            self._or_fail(f"copy {in_path} to {out_path} in", "copy", [in_path, out_path])
        else:
            self._files(f"copy {in_path} to {out_path} in", self._put_in_tree, root, to_bytes(in_path, errors="surrogate_or_strict"),
                        to_text(out_path, errors="surrogate_or_strict"))

    @staticmethod
    def _put_in_tree(root, local, path):
        """Replace ``path`` of the mounted container (through its links, resolved inside it) with the file ``local``."""
        rel = _imagepath.resolve_rel(root, path)  # the file a link at ``path`` leads to, when there is one
        parent, name = posixpath.split(rel if rel is not None else path)
        if not name:
            raise IsADirectoryError(errno.EISDIR, "a directory", path)
        directory = _imagepath.open_dir(root, parent or "/")
        try:
            with open(local, "rb") as source:
                replace_file(os.fsencode(name), source, dir_fd=directory)
        finally:
            os.close(directory)

    @ensure_connect
    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._container_id)
        if self._session is not None:
            self._agent(f"fetch {in_path} from", self._session.fetch, to_text(in_path, errors="surrogate_or_strict"),
                        to_bytes(out_path, errors="surrogate_or_strict"))
            return
        root = self._root()
        # Through a symlink at the local path, as writing to it did.
        local = os.path.realpath(to_bytes(out_path, errors="surrogate_or_strict"))
        if root is None:
            data = self._or_fail(f"fetch {in_path} from", "run", ["cat", in_path])
            self._files(f"fetch {in_path} from", replace_file, local, io.BytesIO(data))
        else:
            self._files(f"fetch {in_path} from", self._fetch_from_tree, root, to_text(in_path, errors="surrogate_or_strict"),
                        local)

    @staticmethod
    def _fetch_from_tree(root, path, local):
        """Copy the regular file ``path`` of the mounted container (links resolved inside it) to ``local``."""
        with os.fdopen(_imagepath.open_file(root, path), "rb") as source:
            replace_file(local, source)

    def close(self):
        super().close()
        if self._session is not None:
            self._session.close()  # the agent stays for the next task; reset() stops it
        elif self._connected:
            self._buildah("umount")
        self._session = None
        self._mount_point = None
        self._connected = False

    def reset(self):
        """Stop this play's agent of the container (before a commit or removal), then close."""
        if self._persistent():
            stopped = self._new_session().stop()
            display.vvv(f"agent {'stopped' if stopped else 'was not running'}", host=self._container_id)
        self.close()
