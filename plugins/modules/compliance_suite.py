#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: compliance_suite
short_description: Run the compliance suite (pytest-testinfra) against an image booted under systemd-nspawn
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Runs the collection's compliance suite - the security baseline (C(molecule/_shared/tests)) and the tests of
    every role of the layer's chain (C(molecule/<role>/tests)), plus a site's own test files (O(paths)) - in one
    pytest process on the controller against the image the task's host booted over the
    C(hpc.stateless.nspawn) connection (C(ansible_nspawn_boot=true), as C(playbooks/verify.yml) does).
  - Every command of every check runs with C(nsenter) in the running container (its mounts, sockets, live
    C(/proc/sys), the daemons it started). Checks of what the image holds at rest (host keys, machine ID, a
    baked munge key) read a throw-away working container of O(image) instead; checks marked C(booted) run
    only here (Molecule skips them on its unbooted containers).
  - Returns one check per test case (id, result, waiver reason, detail), read from pytest's JUnit report.
    A check that could not run is an C(error), never passed; a check a waiver switched off is C(waived)
    with the waiver's reason.
  - The task fails when the suite cannot run at all (pytest-testinfra missing on the controller, no booted
    container, a waiver file missing); failed checks do not fail it (RV(failed_checks) names them, verify.yml
    records them and then fails the layer).
  - With O(live), the same suite checks a running node over its own ssh connection (C(playbooks/compliance.yml)),
    in one pytest process per node through testinfra's ansible backend, which maps the connection onto testinfra's
    ssh backend with the SSH settings Ansible resolved for the node (host, port, user, key, ssh arguments, the
    connection master). Checks of the image at rest are skipped on a live node, saying so. A node the suite
    cannot check (unreachable, not an ssh connection, pytest failed, its image unknown) gets one C(error) check
    C(suite::run) instead of failing the task.
  - Runs on the controller (action plugin).
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Reads the running container only; runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Reads only.
options:
  layer:
    description: The layer whose image is booted; its chain in O(layers) decides which role tests run.
    type: str
    required: true
  layers:
    description: The plan's layers (C(hpc_stateless_plan.layers)), each with C(parent) and C(roles).
    type: dict
    required: true
  image:
    description:
      - The layer image that was booted (local containers-storage), for the checks of the image at rest.
      - Exactly one of O(image) and O(root).
    type: str
  root:
    description: The packed tree that was booted (a directory), for the checks of the image at rest.
    type: path
  inventory:
    description:
      - The inventory sources of the run (C(ansible_inventory_sources)); the first directory, or the directory of
        the first hosts file, gives in its C(group_vars/all) the roles' values the checks expect
        (C(hpc_stateless_layers.<layer>.vars) included). Without it the checks expect the roles' defaults.
    type: list
    elements: path
    default: []
  waivers:
    description: Waiver files (C(waivers - {check, item, reason})) besides C(molecule/_shared/waivers.yml).
    type: list
    elements: path
    default: []
  paths:
    description: A site's own test files or directories, run in the same pytest process.
    type: list
    elements: path
    default: []
  timeout:
    description: Seconds the whole suite may take before it is stopped (an error).
    type: int
    default: 600
  live:
    description:
      - Check the task's host, a live node reached over C(ssh), instead of an image booted under systemd-nspawn.
        O(layer) is the layer of the node's image (empty when it is unknown, which is an error check); O(image) and
        O(root) are not given.
    type: bool
    default: false
  boot_image:
    description: With O(live), the node's image (C(hpc_stateless_boot_image)), named when it is no known image.
    type: str
  report:
    description: With O(live), the node's drift report; RV(report) is that report with the suite's checks added.
    type: dict
notes:
  - Needs pytest-testinfra in the Python that runs Ansible on the controller (requirements.txt of the collection).
seealso:
  - module: hpc.stateless.verify_record
"""

EXAMPLES = r"""
- name: Run the compliance suite in the booted image
  hpc.stateless.compliance_suite:
    layer: "{{ inventory_hostname }}"
    layers: "{{ hpc_stateless_plan.layers }}"
    image: "{{ hpc_stateless_verify_image }}"
    inventory: "{{ ansible_inventory_sources }}"
  register: suite
"""

RETURN = r"""
checks:
  description: One entry per check, in the suite's order.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The check's id, C(<role or _shared>/<file>::<test>[<parameters>]).
      type: str
    passed:
      description: Whether the gate lets the check through (passed, waived or not applicable).
      type: bool
    result:
      description: C(passed), C(failed), C(error) (could not run), C(waived) or C(skipped) (does not apply).
      type: str
    waiver:
      description: The waiver's reason when RV(checks[].result) is C(waived).
      type: str
    detail:
      description: What failed, or why the check was skipped.
      type: str
counts:
  description: Number of checks per result.
  returned: success
  type: dict
failed_checks:
  description: Ids of the checks that failed or could not run.
  returned: success
  type: list
  elements: str
seconds:
  description: Wall time of the pytest run.
  returned: success
  type: float
roles:
  description: Roles of the layer's chain whose tests ran.
  returned: success
  type: list
  elements: str
paths:
  description: Test directories and files pytest ran.
  returned: success
  type: list
  elements: str
output:
  description: The tail of pytest's output.
  returned: success
  type: str
report:
  description:
    - With O(live) and O(report), the node's report with the suite's checks after the drift checks, C(passed) only
      when every check of both passed, and C(suite) (C(checks), C(counts) per result, C(seconds)).
  returned: when O(live) and O(report) are given
  type: dict
"""
