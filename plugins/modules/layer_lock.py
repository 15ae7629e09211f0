#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer_lock
short_description: One build of a layer at a time on the build host - take or release the layer's build lock
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Two runs of one project started together (an admin and a cron job, two CI jobs of one pipeline) plan the same
    stale layer. The build of a layer takes its build lock (a C(flock) on a file per layer and image prefix below the
    host's package-cache root, C(.locks/)) before it cleans up and starts the layer's working container, and
    releases it after the commit or the removal of a failed container.
  - With O(state=held), a build that finds the lock held prints, when its wait begins,
    C(waiting for the build lock of layer <name> (<prefix>), held by pid <n> build of layer <name> (key ..., image prefix ...)
    for ansible-playbook pid <n> since <time>), and fails after O(timeout) seconds with that holder and what to do.
  - Once it has the lock, a layer image of O(key) that another build committed meanwhile is reused - RV(cached) is
    true, the lock is released at once and nothing is built. Otherwise the lock is handed to a holder process that
    keeps it until O(state=released) or the end of the C(ansible-playbook) run; a killed run (its process group,
    SIGKILL included) releases it.
  - Runs on the controller, which is the build host (action plugin).
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Takes no lock in check mode (a check run builds nothing).
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Taking a lock is a change; a cached layer is none.
options:
  name:
    description: The layer.
    type: str
    required: true
  key:
    description: The layer's content key (the plan's); its image C(<image_prefix>/<name>:<key>) existing means cached.
    type: str
    required: true
  image_prefix:
    description: The image prefix of the build; builds of other prefixes (other projects) never wait for each other here.
    type: str
    required: true
  state:
    description: V(held) waits for and takes the lock; V(released) ends the holder process O(holder_pid).
    type: str
    choices: [held, released]
    default: held
  timeout:
    description: Seconds a build waits for another build of the same layer before it fails naming it.
    type: float
    default: 3600
  holder_pid:
    description: With O(state=released), the RV(holder_pid) that O(state=held) returned; V(0) releases nothing.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Take the build lock of the layer
  hpc.stateless.layer_lock:
    name: compute
    key: "{{ hpc_stateless_layer_plan.key }}"
    image_prefix: localhost/hpc-stateless
    timeout: "{{ hpc_stateless_build_lock_timeout }}"
  register: lock

- name: Release it after the commit
  hpc.stateless.layer_lock:
    name: compute
    key: "{{ hpc_stateless_layer_plan.key }}"
    image_prefix: localhost/hpc-stateless
    state: released
    holder_pid: "{{ lock.holder_pid }}"
"""

RETURN = r"""
lock:
  description: The lock file.
  returned: always
  type: str
cached:
  description: With O(state=held), whether the layer image of O(key) exists (committed by another build); nothing to build.
  returned: state is held
  type: bool
image:
  description: The layer image C(<image_prefix>/<name>:<key>).
  returned: state is held
  type: str
holder_pid:
  description: The process that holds the lock for this run; V(0) when none does (cached).
  returned: state is held
  type: int
waited_for:
  description: What the lock file said about the build this one waited for; empty when it did not wait.
  returned: state is held
  type: str
waited:
  description: Seconds waited for the lock.
  returned: state is held
  type: float
"""
