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
  - The C(containers.podman.buildah) connection, with one change to how commands return their results.
  - On a loaded build host, C(buildah run) with chroot isolation was seen to exit 0 with no output at all,
    so Ansible failed with "No start of json char found" or "failed to resolve remote temporary directory".
  - This connection makes each command write its standard output, standard error and exit status to files in
    the container's C(/tmp), reads them through the container's mount point and removes them. When the status
    file is missing and the shell never opened its output file, the command provably did not run, and
    C(buildah run) is repeated (up to three times), whatever buildah's own exit status.
  - Pipelining is on by default. A module's code travels to the container as a file next to the result files
    and the command reads it as standard input, so a task costs one C(buildah run) instead of one each to
    create a temporary directory, make the module executable, run it and remove it.
  - Containers that cannot be mounted and users other than root fall back to the plain
    C(containers.podman.buildah) behaviour.
  - The build playbooks of this collection use it for every layer.
options:
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

import os
import shlex
import uuid

from ansible.errors import AnsibleConnectionFailure
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ensure_connect
from ansible.utils.display import Display

from ansible_collections.containers.podman.plugins.connection.buildah import Connection as PodmanBuildahConnection

display = Display()

ATTEMPTS = 3


class Connection(PodmanBuildahConnection):
    """containers.podman.buildah with results passed through files in the container."""

    transport = "hpc.stateless.buildah"
    # Standard input travels through a file too (see exec_command), so pipelining is safe here.
    has_pipelining = True

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        if not self._mount_point or (self.user and self.user != "root"):
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # Skip the parent's exec_command but keep the base class bookkeeping (display, become).
        super(PodmanBuildahConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        stem = f"/tmp/.hpc-stateless-exec-{uuid.uuid4().hex}"
        paths = {part: f"{stem}.{part}" for part in ("in", "out", "err", "rc")}
        stdin = paths["in"] if in_data is not None else "/dev/null"
        wrapped = (f"( {to_text(cmd, errors='surrogate_or_strict')} ) <{stdin} "
                   f">{paths['out']} 2>{paths['err']}; echo $? >{paths['rc']}")
        host = {part: to_bytes(self._mount_point, errors="surrogate_or_strict").rstrip(b"/") + to_bytes(path)
                for part, path in paths.items()}
        try:
            if in_data is not None:
                # A pipelined module's code: readable by root only, removed with the results below.
                with open(os.open(host["in"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                    handle.write(to_bytes(in_data))
            for attempt in range(1, ATTEMPTS + 1):
                rc, stdout, stderr = self._buildah("run", ["/bin/sh", "-c", wrapped])
                if os.path.exists(host["rc"]):
                    with open(host["rc"], "rb") as handle:
                        status = handle.read().strip()
                    with open(host["out"], "rb") as handle:
                        stdout = handle.read()
                    with open(host["err"], "rb") as handle:
                        stderr = handle.read()
                    return int(status or b"1"), stdout, stderr
                if os.path.exists(host["out"]):
                    # The shell opened its output, so the command may have run: never run it twice.
                    return rc or 1, stdout, stderr
                # Not started: buildah lost the run or failed before the shell (seen on busy hosts:
                # "Close_Fd sealing memfd copy: Device or resource busy"). Safe to run it again.
                display.vvv(f"buildah run exited {rc} without running {shlex.quote(to_text(cmd))} "
                            f"(attempt {attempt}/{ATTEMPTS}): {to_text(stderr).strip()}; running it again",
                            host=self._container_id)
        finally:
            for path in host.values():
                if os.path.lexists(path):
                    os.unlink(path)
        raise AnsibleConnectionFailure(
            f"buildah run in container {self._container_id} exited without running the command "
            f"{ATTEMPTS} times (last: rc={rc}, {to_text(stderr).strip()!r}); is the container mounted and does "
            f"it have /bin/sh and /tmp?")
