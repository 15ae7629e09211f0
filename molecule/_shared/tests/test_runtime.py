# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What only the running image answers, for every image: checks marked ``booted`` run in verify.yml,
which boots the image under systemd-nspawn, and are skipped (saying so) on Molecule's unbooted containers.
Whether systemd is running and which units failed is verify.yml's own check ("systemd state"), not repeated here."""

from __future__ import annotations

import re

import pytest

import compliance

pytestmark = pytest.mark.booted


def test_machine_id_generated_at_boot(host):
    """The image carries none (test_machine_id_not_baked); systemd made this node's own at boot."""
    machine_id = host.file("/etc/machine-id").content_string.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", machine_id), f"/etc/machine-id of the booted image is {machine_id!r}"


def test_listening_sockets_belong_to_units(host):
    """Every listening socket is held by a process of a systemd unit (no stray daemon started by hand
    or left behind by the build)."""
    strays = []
    for line in compliance.lines(host.check_output("ss -Hltunp")):
        for pid in re.findall(r"pid=(\d+)", line) or ["?"]:
            cgroup = host.run(f"cat /proc/{pid}/cgroup 2>/dev/null").stdout if pid != "?" else ""
            if not re.search(r"\.(service|socket|scope)$", compliance.cgroup_path(cgroup)):
                strays.append(line.split()[4] + f" (pid {pid}: {compliance.cgroup_path(cgroup) or 'no cgroup'})")
    assert not strays, f"listening sockets of no systemd unit: {strays}"


def test_fstab_mounts_are_mounted_with_their_options(host, at_rest):
    """Each file system /etc/fstab of the image mounts at boot (swap, noauto and nofail entries aside)
    is mounted, with its type and its nosuid/nodev/noexec/ro options."""
    entries = compliance.fstab_boot_mounts(at_rest.file("/etc/fstab").content_string
                                           if at_rest.file("/etc/fstab").exists else "")
    problems = []
    for target, fstype, options in entries:
        found = host.run(f"findmnt -rn -o FSTYPE,OPTIONS --mountpoint {target}")
        if found.rc != 0 or not found.stdout.strip():
            problems.append(f"{target} is not mounted")
            continue
        live_type, live_options = found.stdout.splitlines()[-1].split(" ", 1)
        missing = [o for o in options if o in compliance.SECURITY_MOUNT_OPTIONS and o not in live_options.split(",")]
        if live_type != fstype or missing:
            problems.append(f"{target} is {live_type} {live_options}, fstab asks {fstype} with {missing or options}")
    assert not problems, "; ".join(problems)


def test_journal_records_this_boot(host):
    assert host.service("systemd-journald").is_running
    assert host.run("journalctl -b -q -n 1 --no-pager").stdout.strip(), "the journal holds nothing of this boot"
