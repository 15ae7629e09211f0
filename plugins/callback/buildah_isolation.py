# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
name: buildah_isolation
type: aggregate
short_description: Default BUILDAH_ISOLATION for the buildah connection
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - The C(containers.podman.buildah) connection runs C(buildah run) with the environment of the
    C(ansible-playbook) process. On hosts where the OCI runtime cannot start (hybrid cgroups, nested
    containers), C(buildah run) then fails; chroot isolation works everywhere a layer is built.
  - This callback sets C(BUILDAH_ISOLATION) in the controller's environment when the play starts,
    unless it is already set, so every later connection inherits it.
  - The collection's own modules and its C(hpc.stateless.buildah) connection call buildah through the
    collection's buildah client, which applies the same rule (the environment's value, else C(chroot))
    without this callback; it matters for C(containers.podman.buildah) and other tools.
  - As an unprivileged user (rootless buildah) it also starts the playbook again inside the user
    namespace of C(buildah unshare), once, before any play; there the user is root, container mounts
    work, and every module of the run sees the mounts the others made. It first checks the user's
    subordinate ids (C(/etc/subuid), C(/etc/subgid)) and stops with an error that names the line to add.
  - It loads the collection's connection plugins (C(hpc.stateless.buildah), C(hpc.stateless.nspawn)) in
    the controller before the first task. Ansible runs each task in a fork of the controller, which
    otherwise compiles a connection plugin and its helpers again for every task, even a C(debug)
    (measured on a 2-core host, 50 module tasks in a working container, 0.25 s per task without, 0.17 s with).
  - Enable it with C(callbacks_enabled = hpc.stateless.buildah_isolation) in C(ansible.cfg).
options:
  isolation:
    description: Isolation to use when C(BUILDAH_ISOLATION) is not set.
    type: str
    default: chroot
    choices: [chroot, oci, rootless]
    env:
      - name: HPC_STATELESS_BUILDAH_ISOLATION
    ini:
      - section: hpc_stateless
        key: buildah_isolation
  unshare:
    description:
      - Run the playbook again inside C(buildah unshare) when started by an unprivileged user outside a
        user namespace. Without it, such a run stops at the first container mount with the command to use.
    type: bool
    default: true
    env:
      - name: HPC_STATELESS_BUILDAH_UNSHARE
    ini:
      - section: hpc_stateless
        key: buildah_unshare
"""

import os
import sys

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import connection_loader
from ansible.utils.display import Display

from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless


# Loaded once in the controller, so that no task's worker loads them again.
PRELOADED = ("hpc.stateless.buildah", "hpc.stateless.nspawn")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "hpc.stateless.buildah_isolation"
    CALLBACK_NEEDS_ENABLED = True

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        # Set before any worker forks, so buildah run in every connection inherits it.
        os.environ.setdefault("BUILDAH_ISOLATION", self.get_option("isolation"))
        if self.get_option("unshare") and rootless.is_rootless():
            self._enter_user_namespace()
        for name in PRELOADED:  # after the exec above: each worker is a fork of this process from here on
            try:
                connection_loader.get(name, class_only=True)
            except Exception:  # pylint: disable=broad-exception-caught
                pass  # a plugin that cannot load fails the task that uses it, which says why; no other run

    def _enter_user_namespace(self) -> None:
        """Stop unless the user's subordinate ids are set up; outside a user namespace, start again inside one."""
        try:
            rootless.preflight()
        except rootless.RootlessError as exc:
            # Ansible turns an exception of a callback into a warning and goes on: stop here instead.
            Display().error(str(exc), wrap_text=False)
            raise SystemExit(1)
        if os.geteuid() != 0 and rootless.in_initial_namespace():
            self._run_in_unshare()

    @staticmethod
    def _run_in_unshare() -> None:
        """Replace this process with the same ansible-playbook inside ``buildah unshare``."""
        argv = rootless.unshare_argv([sys.executable, *sys.argv])
        # Inside, the user is uid 0: without USER/LOGNAME (a sanitised CI environment) Ansible would take
        # it for root and put its remote_tmp under ~root, which the user cannot write.
        name = rootless.outer_user()[0]
        os.environ.setdefault("USER", name)
        os.environ.setdefault("LOGNAME", name)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            Display().error(f"cannot start {argv[0]} to run the playbook in its user namespace: {exc}; "
                            "install buildah", wrap_text=False)
            raise SystemExit(1)
