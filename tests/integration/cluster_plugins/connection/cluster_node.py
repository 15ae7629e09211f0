# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: cluster_node
short_description: Run tasks in a node of the test cluster (tests/integration/cluster_support.py)
author: hpc.stateless developers (!UNKNOWN)
description:
  - Test-only connection. The cluster harness boots each node as a systemd-nspawn container on a
    private network the host is not part of, so there is no SSH path to it; this connection enters the
    node's namespaces with C(nsenter), as an administrator's SSH session would land in it.
  - While the node runs, the harness keeps C(<node dir>/leader) (pid and start time of the container's
    init). Without it, or when that process is gone (the node reboots), the host is unreachable, so
    C(wait_for_connection) waits for the node to come back.
options:
  node_dir:
    description: The node's directory of the harness (C(Cluster.nodes[name].dir)).
    type: str
    required: true
    vars:
      - name: ansible_cluster_node_dir
"""

import os
import shlex
import subprocess

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection import ConnectionBase

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import container_env, nsenter_argv
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import keep_running, process_start


class Connection(ConnectionBase):
    """nsenter into the running container of a test-cluster node."""

    transport = "cluster_node"
    has_pipelining = True

    def _leader(self) -> int:
        path = os.path.join(self.get_option("node_dir"), "leader")
        try:
            with open(path, encoding="utf-8") as handle:
                pid, start = handle.read().split()
        except (OSError, ValueError):
            raise AnsibleConnectionFailure(f"{self._play_context.remote_addr} is not running (no {path})") from None
        if process_start(int(pid)) != start:
            raise AnsibleConnectionFailure(f"{self._play_context.remote_addr} is not running (its init {pid} is gone)")
        return int(pid)

    def _connect(self):
        self._leader()
        self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = nsenter_argv("nsenter", self._leader(), ["/bin/sh", "-c", cmd])
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=container_env())
        keep_running(proc)  # nsenter stops with its child when the container freezes it at shutdown
        out, err = proc.communicate(in_data)
        return proc.returncode, out, err

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        with open(in_path, "rb") as handle:
            data = handle.read()
        rc, _out, err = self.exec_command(f"cat > {shlex.quote(out_path)}", in_data=data)
        if rc != 0:
            raise AnsibleConnectionFailure(f"cannot write {out_path}: {err.decode(errors='replace')}")

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        rc, out, err = self.exec_command(f"cat {shlex.quote(in_path)}")
        if rc != 0:
            raise AnsibleConnectionFailure(f"cannot read {in_path}: {err.decode(errors='replace')}")
        with open(out_path, "wb") as handle:
            handle.write(out)

    def close(self):
        self._connected = False
