#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: openscap
short_description: One OpenSCAP scan of a verify boot - prepare it, judge its results, keep its reports
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - C(playbooks/verify.yml) runs the build host's C(oscap) (Debian's C(openscap-scanner)) with the SCAP Security Guide's
    content (C(ssg-debian)) inside each booted layer image, bound in read-only under C(/run) of the throw-away boot; the
    image never gains the scanner (docs/verify.md says why the scan runs in the boot and not against the image's tree).
  - With O(state=prepare) (before the boot), checks the settings and makes one private directory on the build host
    (its name ending in C(.verify-openscap)) whose C(out) directory the boot writes the outputs into; returns RV(binds),
    the C(systemd-nspawn) arguments, and RV(argv) with RV(environment), the command the boot runs.
  - With O(state=bundle), does the same for live nodes (C(playbooks/compliance.yml)). The private directory holds
    RV(archive), the scanner (only the libraries it links), its schemas and XSLT, the content, the tailoring and the
    platform dictionary laid out as a verify boot sees them under RV(mount_point); each node unpacks it there (its
    C(/run), a tmpfs), runs the same RV(argv) and is cleaned, and its outputs are fetched into C(<path>/<node>/out).
  - With O(state=judge) (after the scan), reads the XCCDF results (no link followed), judges them (the share of passing
    applicable rules against O(minimum), every failed rule waived) and copies the ARF, the XCCDF results and the HTML
    report into C(<record_dir>/<name>.openscap/) under their final names in one rename.
  - With O(state=absent), removes the private directory; any other path is refused and left alone.
  - The tailoring (C(roles/hpc_stateless/files/openscap/tailoring.xml), XCCDF 1.2) deselects, each with its reason, the
    rules that make no sense on a stateless node; the evaluated profile is the tailored profile that extends
    O(profile), or O(profile) itself when none does. When the build host's content does not know the image's release,
    the collection's CPE dictionary matches it to the newest content's platform, and RV(platform) says so.
  - Runs on the controller, which is the build host (action plugin).
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: The scan reads the boot only; check mode prepares and judges it too.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Each O(state=prepare) run makes a new directory.
options:
  state:
    description: Prepare a scan, judge it, or remove its directory.
    type: str
    choices: [prepare, bundle, judge, absent]
    default: prepare
  profile:
    description: The SSG profile, by its short name (C(anssi_np_nt28_average), C(standard)) or its full id.
    type: str
    default: anssi_np_nt28_average
  content:
    description: The SCAP data stream; default the newest C(ssg-debian<release>-ds.xml) in C(/usr/share/xml/scap/ssg/content).
    type: path
  tailoring:
    description: An XCCDF 1.2 tailoring file; default the collection's.
    type: path
  waivers:
    description: Waiver files of the site (C(waivers, [{rule, reason}])), read after the collection's C(openscap-waivers.yml).
    type: list
    elements: path
    default: []
  minimum:
    description: The lowest share of passing applicable rules, in percent, that passes.
    type: int
    default: 80
  path:
    description: With O(state=judge) or O(state=absent), the directory RV(path) of the O(state=prepare) run.
    type: path
  os_release:
    description: With O(state=judge), the text of the image's C(/etc/os-release), to say how the platform was matched.
    type: str
    default: ""
  record_dir:
    description: With O(state=judge), where the outputs are kept (the verify record's directory).
    type: path
  layer:
    description: With O(state=judge), the layer scanned; the outputs are kept as C(<record_dir>/<layer>-<key>.openscap/).
    type: str
    default: ""
  key:
    description: With O(state=judge), the layer image's content key; without one (a packed tree) nothing is kept.
    type: str
    default: ""
  keep_dir:
    description: With O(state=judge), the directory to keep the outputs in instead of O(record_dir) (a live node's).
    type: path
  report:
    description:
      - With O(state=judge), a live node's compliance report (filter P(hpc.stateless.compliance_drift#filter)); RV(report)
        is that report with one check per rule and the score after its own checks.
      - The collection's C(openscap-live-waivers.yml) is read after O(waivers) then (rules that fail on a node for a
        reason of the serving, such as the System.map pack leaves out of the served image).
    type: dict
  error:
    description:
      - With O(state=judge), the failed task result of a live node's scan that did not run or left nothing to judge;
        no results are read and the one check C(openscap/run) is an error (never a pass).
    type: raw
  failed_task:
    description: With O(error), the name of the task that failed.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Prepare the scan (before the boot)
  hpc.stateless.openscap:
    profile: anssi_np_nt28_average
  register: scan

- name: Scan the booted image
  ansible.builtin.command:
    argv: "{{ scan.argv }}"
  environment: "{{ scan.environment }}"
  register: oscap
  failed_when: oscap.rc not in [0, 2]
  changed_when: false

- name: Judge it and keep the reports
  hpc.stateless.openscap:
    state: judge
    path: "{{ scan.path }}"
    record_dir: /srv/site/build/verify
    layer: compute
    key: 0123abcd
  register: verdict

- name: Prepare the scanner for live nodes (on the controller)
  hpc.stateless.openscap:
    state: bundle
  register: live_scan
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
path:
  description: The scan's private directory on the build host.
  returned: state is prepare or bundle
  type: str
  sample: /tmp/tmpk3x9d2a1.verify-openscap
archive:
  description: The gzip'd tar a live node unpacks into RV(mount_point).
  returned: state is bundle
  type: str
mount_point:
  description: Where the scan's files are on the node.
  returned: state is bundle
  type: str
  sample: /run/hpc-stateless-openscap
binds:
  description: The C(systemd-nspawn) arguments that show the scanner, the content, the tailoring and the outputs' directory in the boot.
  returned: state is prepare or bundle
  type: list
  elements: str
argv:
  description: The command the boot runs.
  returned: state is prepare or bundle
  type: list
  elements: str
environment:
  description: The environment of that command (the scanner's schemas and XSLT in the boot).
  returned: state is prepare or bundle
  type: dict
profile:
  description: The id of the profile evaluated (the tailored one when the tailoring extends O(profile)).
  returned: state is prepare or bundle
  type: str
passed:
  description: Whether the scan reached O(minimum) with every failed rule waived.
  returned: state is judge
  type: bool
score:
  description: The share of passing applicable rules, in percent.
  returned: state is judge
  type: float
checks:
  description: One check per rule (passed, failed, waived with the waiver's or the tailoring's reason, skipped) and the score.
  returned: state is judge
  type: list
  elements: dict
unwaived:
  description: The failed rules no waiver names.
  returned: state is judge
  type: list
  elements: str
tailored_out:
  description: The rules the tailoring deselected, with their reasons.
  returned: state is judge
  type: dict
platform:
  description: Which content was used and how its platform was matched to the image's release.
  returned: state is judge
  type: str
reports:
  description: The kept outputs by kind (arf, results, report).
  returned: state is judge
  type: dict
message:
  description: The verdict in words.
  returned: state is judge
  type: str
report:
  description: O(report) with the checks of this scan after its own; C(passed) only when every check passed.
  returned: state is judge and O(report) is given
  type: dict
"""
