#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verify_boot_files
short_description: The files of one verify boot on the build host - throw-away test secrets and the Lynis profile
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - C(playbooks/verify.yml) boots each layer image under systemd-nspawn. What a node gets at boot rather than from its
    image (a munge key, C(hpc_stateless_verify_test_secrets)) is made up for that boot only, 1 KiB of random bytes per
    path, and files of the boot itself (this run's Lynis profile) are written beside them.
  - With O(state=present), makes one private directory on the build host (mode C(0700), its name ending in
    C(.verify-boot), each file C(0600)) and returns RV(binds), the C(systemd-nspawn) arguments that bind each file over
    its path inside the image (secrets read-write, as a node's are; files read-only). The image never holds them.
  - With O(state=absent), removes such a directory (the boot's end); any other path is refused and left alone.
  - Runs on the controller, which is the build host (action plugin).
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: >-
      The files are made in check mode too: the boot that check mode still runs needs them, and they live only as long
      as that boot (removed with O(state=absent)).
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each O(state=present) run makes a new directory with new random secrets.
options:
  state:
    description: Make the boot's files, or remove them.
    type: str
    choices: [present, absent]
    default: present
  secrets:
    description:
      - Absolute paths inside the image that get a throw-away secret of 1 KiB of random bytes each.
      - A path may not hold C(:), a newline, C(.) or C(..) (C(systemd-nspawn --bind) could not name it), nor repeat another.
    type: list
    elements: str
    default: []
  files:
    description: Files of the boot, each a mapping of C(path) (absolute, inside the image) and C(content) (text).
    type: list
    elements: dict
    default: []
  path:
    description: With O(state=absent), the directory RV(path) of the O(state=present) run.
    type: str
"""

EXAMPLES = r"""
- name: Make this boot's files
  hpc.stateless.verify_boot_files:
    secrets: [/etc/munge/munge.key]
    files:
      - path: /run/hpc-stateless-lynis.prf
        content: "{{ hpc_stateless_verify_lynis_waivers | hpc.stateless.lynis_profile }}"
  register: boot_files

- name: Boot with them (the nspawn connection)
  ansible.builtin.command: systemctl is-system-running
  vars:
    ansible_connection: hpc.stateless.nspawn
    ansible_nspawn_boot: true
    ansible_nspawn_extra_args: "{{ boot_files.binds }}"
  changed_when: false
  failed_when: false

- name: Remove them when the boot ends
  hpc.stateless.verify_boot_files:
    state: absent
    path: "{{ boot_files.path }}"
"""

RETURN = r"""
path:
  description: The directory of the boot's files on the build host.
  returned: success
  type: str
  sample: /tmp/tmpk3x9d2a1.verify-boot
binds:
  description: The C(systemd-nspawn) arguments, secrets first (C(--bind=<file>:<path>)), then files (C(--bind-ro=)), in the order given.
  returned: state is present
  type: list
  elements: str
  sample: ["--bind=/tmp/tmpk3x9d2a1.verify-boot/secret-1:/etc/munge/munge.key"]
"""
