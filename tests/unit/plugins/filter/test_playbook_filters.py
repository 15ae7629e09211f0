# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rules the playbooks hand to Python filters: boot nodes from inventory, an image's pack options, verify's
judgement of units and the start image of a Molecule platform."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from jinja2 import Undefined

from ansible_collections.hpc.stateless.plugins.filter.boot_nodes import boot_nodes
from ansible_collections.hpc.stateless.plugins.filter.molecule_instances import molecule_instances
from ansible_collections.hpc.stateless.plugins.filter.pack_options import pack_options
from ansible_collections.hpc.stateless.plugins.filter.unit_report import PROPERTIES as UNIT_PROPERTIES
from ansible_collections.hpc.stateless.plugins.filter.unit_report import unit_report, unit_show_command


# --------------------------------------------------------------------------- boot_nodes
def test_hosts_with_a_mac_are_nodes_with_their_image_and_arguments():
    hostvars = {
        "n1": {"hpc_stateless_boot_mac": "52:54:00:00:00:01", "hpc_stateless_boot_image": "gpu",
               "hpc_stateless_boot_kernel_args": "quiet", "group_names": ["hpc_stateless_nodes", "rack1"]},
        "n2": {"hpc_stateless_boot_mac": ["52:54:00:00:00:02", "52:54:00:00:00:03"]},
        "login": {"hpc_stateless_boot_image": "compute"},
    }
    assert boot_nodes(["n2", "login", "n1"], hostvars) == [
        {"name": "n2", "mac": ["52:54:00:00:00:02", "52:54:00:00:00:03"], "image": "", "kernel_args": "",
         "groups": []},
        {"name": "n1", "mac": "52:54:00:00:00:01", "image": "gpu", "kernel_args": "quiet",
         "groups": ["hpc_stateless_nodes", "rack1"]},
    ]
    assert boot_nodes([], hostvars) == []


def test_boot_nodes_wants_host_names_and_hostvars():
    with pytest.raises(AnsibleFilterError, match="expects a list of host names, got str"):
        boot_nodes("n1", {})
    with pytest.raises(AnsibleFilterError, match="expects hostvars as its argument, got list"):
        boot_nodes(["n1"], [])


# --------------------------------------------------------------------------- pack_options
SITE = {"exclude": ["/var/cache/*"], "secret_patterns": ["*.pem"], "allowed_secrets": [], "size_ceiling": "4G"}


def test_an_image_without_own_keys_gets_the_site_settings_and_the_module_defaults():
    assert pack_options({"layer": "compute", "formats": ["cpio.zst"], "kernel_args": ""}, SITE, "/site") == {
        "formats": ["cpio.zst"], "kernel_args": "", "exclude": ["/var/cache/*"], "secret_patterns": ["*.pem"],
        "allowed_secrets": [], "size_ceiling": "4G"}


def test_an_image_adds_to_the_lists_wins_the_ceiling_and_names_its_profile_file_in_the_project():
    image = {"layer": "compute", "formats": ["squashfs"], "kernel_args": "quiet", "levels": {"squashfs": 9},
             "squashfs_compression": "xz", "exclude": ["/opt/big/*"], "allowed_secrets": ["/etc/ssl/site.pem"],
             "size_ceiling": "8G", "hardware_profile": {"modaliases_file": "files/rack1.modaliases", "force": ["e1000"]}}
    options = pack_options(image, SITE, "/site")
    assert options["exclude"] == ["/var/cache/*", "/opt/big/*"]
    assert options["allowed_secrets"] == ["/etc/ssl/site.pem"]
    assert (options["size_ceiling"], options["levels"], options["squashfs_compression"]) == ("8G", {"squashfs": 9}, "xz")
    assert options["hardware_profile"] == {"modaliases_file": "/site/files/rack1.modaliases", "force": ["e1000"]}
    assert image["hardware_profile"]["modaliases_file"] == "files/rack1.modaliases"  # the plan's result stays as it was


def test_an_absolute_profile_file_and_a_profile_without_one_stay_as_they_are():
    absolute = pack_options({"hardware_profile": {"modaliases_file": "/etc/rack.modaliases"}}, SITE, "/site")
    assert absolute["hardware_profile"] == {"modaliases_file": "/etc/rack.modaliases"}
    assert pack_options({"hardware_profile": {"modules": ["e1000"]}}, SITE, "/site")["hardware_profile"] == {
        "modules": ["e1000"]}
    assert "hardware_profile" not in pack_options({"hardware_profile": {}}, SITE, "/site")


def test_pack_options_names_a_key_that_is_not_a_list():
    with pytest.raises(AnsibleFilterError, match="the image's exclude must be a list, got str"):
        pack_options({"exclude": "/opt/*"}, SITE, "/site")


# --------------------------------------------------------------------------- unit_report
def _show(**units):
    """What ``systemctl show --property=...`` prints for ``units`` (name -> properties), in their order."""
    return "\n".join("\n".join(f"{key}={value}" for key, value in {"Id": name, **props}.items()) + "\n"
                     for name, props in units.items())


def test_units_are_fine_when_active_ran_once_skipped_by_a_condition_or_allowed():
    units = {
        "chrony.service": {"ActiveState": "active", "SubState": "running", "Result": "success"},
        "setup.service": {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "Type": "oneshot",
                          "ExecMainStartTimestampMonotonic": "1234"},
        "gpu.service": {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "ConditionResult": "no"},
        "ib.service": {"ActiveState": "inactive", "SubState": "dead", "Result": "success"},
        "munge.service": {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"},
        "never.service": {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "Type": "oneshot",
                          "ExecMainStartTimestampMonotonic": "0"},
    }
    names = list(units)
    report = unit_report(_show(**units), names, ["ib.service"])
    assert [(row["unit"], row["ok"], row["skipped"]) for row in report] == [
        ("chrony.service", True, False), ("setup.service", True, False), ("gpu.service", True, True),
        ("ib.service", True, False), ("munge.service", False, False), ("never.service", False, False)]
    assert report[4]["state"] == "failed (failed, result exit-code)"
    one = unit_report(_show(**{"x.service": {"ActiveState": "active"}}), ["x.service"])
    assert one[0]["state"] == "active (?, result -)"
    # An alias asked for is answered under the unit's own Id: the rows keep the names asked, by order.
    alias = unit_report(_show(**{"ssh.service": {"ActiveState": "active"}}), ["sshd.service"])
    assert alias == [{"unit": "sshd.service", "state": "active (?, result -)", "skipped": False, "ok": True,
                      "settled": True, "since": "the boot"}]
    assert unit_report("", []) == []


def test_a_unit_has_settled_when_it_is_not_changing_and_kept_its_state_for_the_settle_seconds():
    def at(state, changed_us, sub="running"):
        return {"ActiveState": state, "SubState": sub, "StateChangeTimestampMonotonic": str(changed_us)}
    units = {
        "munge.service": at("active", 97_000_000),              # active for 3 s
        "ssh.service": at("active", 90_000_000),                # active for 10 s
        "slurmd.service": at("activating", 50_000_000, "auto-restart"),  # a restart pending, however long
        "late.service": at("failed", 99_500_000, "failed"),     # failed half a second ago
        "gpu.service": at("inactive", 0, "dead"),               # never changed since the boot
        "stop.service": at("deactivating", 10_000_000, "stop-sigterm"),
    }
    rows = unit_report(_show(**units), list(units), [], 5, 100.0)
    assert [(row["unit"], row["settled"], row["since"]) for row in rows] == [
        ("munge.service", False, "3.0 s"), ("ssh.service", True, "10.0 s"), ("slurmd.service", False, "50.0 s"),
        ("late.service", False, "0.5 s"), ("gpu.service", True, "the boot"), ("stop.service", False, "90.0 s")]
    # Five seconds later the active and the failed unit have settled (the failed one is then judged not ok);
    # the units on their way somewhere else have not.
    later = {row["unit"]: row for row in unit_report(_show(**units), list(units), [], "5", 105.0)}
    assert [u for u, row in later.items() if not row["settled"]] == ["slurmd.service", "stop.service"]
    assert later["late.service"]["ok"] is False and later["munge.service"]["ok"] is True
    # Without settle seconds only the changing states count; by default the clock is this host's monotonic one.
    assert [row["settled"] for row in unit_report(_show(**units), list(units))] == [True, True, False, True, True, False]
    with pytest.raises(AnsibleFilterError, match="settle_seconds expects seconds .hpc_stateless_verify_settle_seconds"):
        unit_report(_show(**units), list(units), [], "soon")


def test_unit_show_command_reads_what_the_report_judges_and_refuses_no_unit():
    argv = unit_show_command(["munge.service", "-weird.service"])
    assert argv[:3] == ["systemctl", "show", "--no-pager"] and argv[-3:] == ["--", "munge.service", "-weird.service"]
    assert set(argv[3].removeprefix("--property=").split(",")) == set(UNIT_PROPERTIES)
    with pytest.raises(AnsibleFilterError, match="expects a non-empty list of unit names"):
        unit_show_command([])


def test_unit_report_wants_the_output_of_systemctl_show_over_the_units():
    with pytest.raises(AnsibleFilterError, match="expects the standard output of systemctl show, got dict"):
        unit_report({"results": []}, ["x.service"])
    with pytest.raises(AnsibleFilterError, match="expects the list of unit names systemctl show was asked for"):
        unit_report("Id=x.service\n", "x.service")
    with pytest.raises(AnsibleFilterError, match=r"answered 1 units for the 2 asked \(a.service, b.service\)"):
        unit_report(_show(**{"a.service": {}}), ["a.service", "b.service"])
    with pytest.raises(AnsibleFilterError, match="not a property line of systemctl show: 'garbage'"):
        unit_report("garbage\n", ["a.service"])


# --------------------------------------------------------------------------- molecule_instances
PLAN = {
    "images": {"compute": {"layer": "compute"}},
    "layers": {
        "base": {"parent": None, "key": "k0", "image": "p/base:k0", "parent_image": "p/bootstrap/base:b0",
                 "cached": True, "bootstrap_cached": False},
        "compute": {"parent": "base", "key": "k1", "image": "p/compute:k1", "parent_image": "p/base:k0",
                    "cached": False},
    },
}


def test_platforms_start_from_the_parent_or_the_layer_image():
    platforms = [
        {"name": "base-fresh", "hpc_stateless_layer": "base"},
        {"name": "compute", "hpc_stateless_image": "compute"},
        {"name": "compute-as-built", "hpc_stateless_layer": "compute", "hpc_stateless_start": "layer"},
        {"name": "stray", "hpc_stateless_layer": "nope"},
        {"name": "nothing"},
    ]
    assert molecule_instances(platforms, PLAN) == [
        {"name": "base-fresh", "layer": "base", "key": "k0", "image": "p/bootstrap/base:b0", "cached": False},
        {"name": "compute", "layer": "compute", "key": "k1", "image": "p/base:k0", "cached": True},
        {"name": "compute-as-built", "layer": "compute", "key": "k1", "image": "p/compute:k1", "cached": False},
    ]


def test_a_bad_start_is_named():
    with pytest.raises(AnsibleFilterError, match="platform c1: hpc_stateless_start must be one of parent, layer, got 'own'"):
        molecule_instances([{"name": "c1", "hpc_stateless_layer": "base", "hpc_stateless_start": "own"}], PLAN)


# --------------------------------------------------------------------------- undefined input
def test_an_undefined_input_stays_undefined_so_the_error_names_the_variable():
    undefined = Undefined(name="hpc_stateless_plan")
    assert pack_options(undefined, SITE, "/site") is undefined
    assert boot_nodes(undefined, {}) is undefined
    assert unit_report(undefined, []) is undefined
    assert unit_show_command(undefined) is undefined
    assert molecule_instances([], undefined) is undefined
