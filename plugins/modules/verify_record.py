#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: verify_record
short_description: Write or read the verification record of a layer image
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - "Verification records are what C(playbooks/verify.yml) found when it booted a layer image under
    systemd-nspawn: one file C(<dir>/<layer>-<key>.json) per layer and content key, holding the image
    reference, the image ID booted, the time and every check with its result (and the waiver that excused it),
    and beside it the same checks as a JUnit XML report C(<dir>/<layer>-<key>.junit.xml) (GitLab's test report)."
  - With O(state=present) the record and its JUnit report are written (atomically, under their final names only
    once complete).
  - With O(state=query) the record is read and judged against the image's current ID, the same verdict
    M(hpc.stateless.pack) applies before it packs.
  - Runs on the controller, which is the build host (action plugin), where the records and containers-storage are.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: With O(state=present), reports the record it would write and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each O(state=present) run records a new verification time.
options:
  dir:
    description: Directory of the records, by default C(<project>/build/verify) in the playbooks.
    type: path
    required: true
  layer:
    description: Layer name.
    type: str
    required: true
  key:
    description: Content key of the layer.
    type: str
    required: true
  image:
    description: Layer image in local containers-storage that was booted; its image ID goes into the record.
    type: str
    required: true
  state:
    description: Write the record (V(present)) or read and judge it (V(query)).
    type: str
    choices: [present, query]
    default: query
  checks:
    description:
      - With O(state=present), the checks verify ran, each C({name, passed, detail, result, waiver}); a check
        may give an C(id), which then names it in the record (its C(name) leads the detail).
      - C(result) is C(passed), C(failed), C(error) (the check could not run), C(waived) (C(waiver) gives the
        reason, required) or C(skipped) (does not apply to the image); without it, C(passed) decides.
        C(passed) must agree with it (failed and error never pass).
    type: list
    elements: dict
    default: []
  settings:
    description:
      - What verify was told to accept and run (units allowed to fail or to be inactive, test secrets, the
        compliance suite with its waivers and paths, Lynis with its minimum and waivers), recorded with
        O(state=present).
      - With O(state=query), a record whose settings do not cover these is C(stale) (verify boots the image
        again). It needs the same units and secrets; a record made with the suite or Lynis also covers a request without
        them, and one made with Lynis a request with the same waivers and a minimum no higher. Without O(settings)
        they are not compared (the gate of M(hpc.stateless.pack)).
    type: dict
notes:
  - Runs on the build host, which holds the layer images (buildah inspects the image ID).
seealso:
  - module: hpc.stateless.pack
"""

EXAMPLES = r"""
- name: Record that the slurm layer booted and its units are active
  hpc.stateless.verify_record:
    dir: build/verify
    layer: slurm
    key: "{{ plan.layers.slurm.key }}"
    image: "{{ plan.layers.slurm.image }}"
    state: present
    checks:
      - {name: systemd state, passed: true, detail: running}
      - {name: units enabled by roles are active, passed: true, detail: munge.service active (running)}

- name: Is the slurm layer verified for its current image?
  hpc.stateless.verify_record:
    dir: build/verify
    layer: slurm
    key: "{{ plan.layers.slurm.key }}"
    image: "{{ plan.layers.slurm.image }}"
  register: verified
"""

RETURN = r"""
path:
  description: The record file.
  returned: always
  type: str
  sample: /srv/site/build/verify/slurm-3f2a9c.json
passed:
  description: The image's current ID has a record whose checks all passed.
  returned: always
  type: bool
status:
  description: C(passed), C(failed), C(missing) (verify never ran) or C(stale) (the image was built again
    since, or with O(settings) the record was made with other settings).
  returned: always
  type: str
message:
  description: The verdict in words; when not passed, the checks that failed or the command that runs verify.
  returned: always
  type: str
junit:
  description: The JUnit XML report beside the record.
  returned: always
  type: str
  sample: /srv/site/build/verify/slurm-3f2a9c.junit.xml
record:
  description: The record's content (written, or read; empty when there is none).
  returned: always
  type: dict
"""
