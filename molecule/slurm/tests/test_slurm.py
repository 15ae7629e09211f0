# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.slurm role: what the converged image holds, per flavour."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

ROLE = Path(__file__).resolve().parents[3] / "roles" / "slurm"
LIBEXEC = "/usr/libexec/hpc-stateless"
UNITS = "/etc/systemd/system"


@pytest.fixture(scope="module")
def slurm(role_vars):
    return role_vars("slurm")


@pytest.fixture(scope="module")
def debian(host):
    return host.system_info.distribution in ("debian", "ubuntu")


@pytest.fixture(scope="module")
def daemons(slurm):
    return {"compute": ["slurmd"], "controller": ["slurmctld"], "combined": ["slurmd", "slurmctld"]}[slurm["slurm_role"]]


@pytest.fixture(scope="module")
def slurm_conf(host):
    """slurm.conf as (global settings, NodeName lines, PartitionName lines)."""
    settings: dict[str, list[str]] = {}
    nodes, partitions = [], []
    for line in host.file("/etc/slurm/slurm.conf").content_string.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("NodeName="):
            nodes.append(line)
        elif line.startswith("PartitionName="):
            partitions.append(line)
        else:
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return {key: values if key == "SlurmctldHost" else values[-1] for key, values in settings.items()}, nodes, partitions


def assert_file(host, path, mode, user="root", group="root"):
    f = host.file(path)
    assert f.exists, f"{path} is missing"
    assert (f.user, f.group, f.mode) == (user, group, mode), f"{path}: {f.user}:{f.group} {f.mode:o}"
    return f


def enabled(host, unit, target="multi-user.target"):
    link = host.file(f"{UNITS}/{target}.wants/{unit}")
    return link.is_symlink and link.linked_to.endswith(f"/{unit}")


def test_packages_of_the_flavour(host, daemons, debian):
    if debian:
        wanted = {"slurmd": ["slurmd", "slurm-client"], "slurmctld": ["slurmctld", "slurm-client"]}
    else:
        wanted = {"slurmd": ["slurm", "slurm-slurmd"], "slurmctld": ["slurm", "slurm-slurmctld"]}
    packages = ["munge"] + [name for daemon in daemons for name in wanted[daemon]]
    missing = [name for name in packages if not host.package(name).is_installed]
    assert not missing, f"packages not installed: {missing}"
    for daemon in {"slurmd", "slurmctld"} - set(daemons):
        assert not host.package(daemon if debian else f"slurm-{daemon}").is_installed, f"{daemon} is installed"


def test_daemons_run_in_the_image(host, daemons):
    for daemon in daemons:
        assert host.run_test(f"{daemon} -V").stdout.startswith("slurm")
    host.run_test("munged --version")


def test_munge_key_not_baked(host, slurm):
    assert not slurm["slurm_munge_key_bake"]
    assert not host.file("/etc/munge/munge.key").exists, "the munge key is a secret: it is delivered at boot"
    munge_dir = host.file("/etc/munge")
    assert (munge_dir.user, munge_dir.mode) == ("munge", 0o700)


def test_munge_waits_for_its_key(host, slurm):
    dropin = assert_file(host, f"{UNITS}/munge.service.d/hpc-stateless-key.conf", 0o644).content_string.splitlines()
    sources = "".join(f" -s {path}" for path in slurm["slurm_munge_key_delivery_paths"])
    assert (f"ExecStartPre=+{LIBEXEC}/munge-key-wait -k /etc/munge/munge.key -u munge "
            f"-t {slurm['slurm_munge_key_wait']}{sources}") in dropin
    assert f"TimeoutStartSec={slurm['slurm_munge_key_wait'] + 90}" in dropin
    waiter = assert_file(host, f"{LIBEXEC}/munge-key-wait", 0o755)
    assert waiter.sha256sum == hashlib.sha256((ROLE / "files" / "munge-key-wait").read_bytes()).hexdigest()


def test_munge_key_waiter_reports_a_missing_key(host):
    result = host.run(f"{LIBEXEC}/munge-key-wait -t 0")
    assert result.rc == 1
    assert "no munge key at /etc/munge/munge.key after 0s" in result.stderr


def test_munge_starts_when_its_key_arrives(host, slurm):
    path_unit = assert_file(host, f"{UNITS}/munge-key.path", 0o644).content_string.splitlines()
    assert "PathExists=/etc/munge/munge.key" in path_unit
    for delivery in slurm["slurm_munge_key_delivery_paths"]:
        assert f"PathExists={delivery}" in path_unit
    assert "Unit=munge.service" in path_unit
    assert enabled(host, "munge-key.path", "paths.target")


def test_units_enabled_for_the_flavour(host, daemons):
    assert enabled(host, "munge.service")
    for daemon in ("slurmd", "slurmctld"):
        assert enabled(host, f"{daemon}.service") == (daemon in daemons), daemon


def test_slurmd_after_munge_and_unlimited_memlock(host, daemons):
    dropin = host.file(f"{UNITS}/slurmd.service.d/hpc-stateless.conf")
    if "slurmd" not in daemons:
        assert not dropin.exists
        return
    lines = assert_file(host, dropin.path, 0o644).content_string.splitlines()
    assert "Wants=munge.service" in lines and "After=munge.service" in lines
    assert "LimitMEMLOCK=infinity" in lines


def test_slurm_conf_from_the_inventory(host, slurm, slurm_conf):
    assert_file(host, "/etc/slurm/slurm.conf", 0o644)
    settings, nodes, partitions = slurm_conf
    assert settings["ClusterName"] == slurm["slurm_cluster_name"]
    assert settings["SlurmctldHost"] == ["ctl1(192.0.2.10)", "ctl2"]
    assert settings["AuthType"] == "auth/munge"
    assert settings["SlurmUser"] == "slurm"
    assert settings["SlurmdParameters"] == ",".join(slurm["slurm_slurmd_parameters"])
    assert nodes == [
        "NodeName=node[01-04] CPUs=2 RealMemory=1024 Features=hsn,local-scratch State=UNKNOWN",
        "NodeName=gpu01 NodeAddr=192.0.2.51 Gres=gpu:2 State=UNKNOWN MemSpecLimit=2048",
    ]
    assert partitions == [
        "PartitionName=batch Nodes=node[01-04] Default=YES MaxTime=2-00:00:00 State=UP",
        "PartitionName=gpu Nodes=gpu01 MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE",
    ]


def test_process_tracking(slurm, slurm_conf):
    settings = slurm_conf[0]
    expected = {
        "cgroup": ("proctrack/cgroup", "task/cgroup,task/affinity", "jobacct_gather/cgroup"),
        "linuxproc": ("proctrack/linuxproc", "task/affinity", "jobacct_gather/linux"),
        "pgid": ("proctrack/pgid", "task/none", "jobacct_gather/none"),
    }[slurm["slurm_process_tracking"]]
    assert (settings["ProctrackType"], settings["TaskPlugin"], settings["JobAcctGatherType"]) == expected


def test_cgroup_conf(host, slurm):
    lines = assert_file(host, "/etc/slurm/cgroup.conf", 0o644).content_string.splitlines()
    assert f"CgroupPlugin={slurm['slurm_cgroup_plugin']}" in lines
    assert "ConstrainCores=yes" in lines and "ConstrainRAMSpace=yes" in lines
    assert ("IgnoreSystemd=yes" in lines) == slurm["slurm_cgroup_ignore_systemd"]


def test_spool_and_log_directories(host, daemons):
    assert_file(host, "/var/log/slurm", 0o755, "slurm", "slurm")
    if "slurmd" in daemons:
        assert_file(host, "/var/lib/slurm/slurmd", 0o755, "slurm", "slurm")
    if "slurmctld" in daemons:
        assert_file(host, "/var/lib/slurm/slurmctld", 0o700, "slurm", "slurm")


def test_health_check_and_reboot_programs(host, slurm_conf):
    settings = slurm_conf[0]
    assert settings["RebootProgram"] == f"{LIBEXEC}/slurm-reboot"
    if host.file("/usr/sbin/nhc").exists:
        assert settings["HealthCheckProgram"] == "/usr/sbin/nhc"
        assert settings["HealthCheckInterval"] == "300"
    else:
        assert "HealthCheckProgram" not in settings


def test_reboot_on_drain_installed_on_slurmd_nodes(host, slurm, daemons):
    script = host.file(f"{LIBEXEC}/slurm-reboot-on-drain")
    if "slurmd" not in daemons:
        assert not script.exists
        return
    assert_file(host, script.path, 0o755)
    assert script.sha256sum == hashlib.sha256((ROLE / "files" / "slurm-reboot-on-drain").read_bytes()).hexdigest()
    assert_file(host, f"{LIBEXEC}/slurm-reboot", 0o755)
    conf = assert_file(host, "/etc/hpc-stateless/reboot-on-drain.conf", 0o644).content_string.splitlines()
    assert f"MODE={slurm['slurm_reboot_on_drain_mode']}" in conf
    assert f"TRIGGER_REASON={slurm['slurm_reboot_on_drain_trigger_reason']}" in conf
    assert [line for line in conf if line.startswith(("PRE_COMMAND=", "POST_COMMAND="))] == (
        [f"PRE_COMMAND={c}" for c in slurm["slurm_reboot_on_drain_pre_commands"]]
        + [f"POST_COMMAND={c}" for c in slurm["slurm_reboot_on_drain_post_commands"]])
    service = assert_file(host, f"{UNITS}/hpc-reboot-on-drain.service", 0o644).content_string.splitlines()
    assert f"ExecStart={LIBEXEC}/slurm-reboot-on-drain" in service


def test_reboot_on_drain_runs_from_nhc_or_a_timer(host, daemons):
    if "slurmd" not in daemons:
        pytest.skip("reboot on drain is for nodes that run slurmd")
    if host.file("/etc/nhc/nhc.conf").exists and host.file("/usr/sbin/nhc").exists:
        rules = host.file("/etc/nhc/nhc.conf").content_string.splitlines()
        assert "* || check_hpc_reboot_on_drain" in rules
        module = assert_file(host, "/etc/nhc/scripts/hpc_reboot_on_drain.nhc", 0o644)
        assert "systemctl start --no-block hpc-reboot-on-drain.service" in module.content_string
        assert not enabled(host, "hpc-reboot-on-drain.timer", "timers.target")
    else:
        assert enabled(host, "hpc-reboot-on-drain.timer", "timers.target")


def test_reboot_on_drain_scripts_parse_with_the_images_bash(host, daemons):
    # Only a syntax check: running them would contact the (made-up) controllers of the scenario.
    if "slurmd" not in daemons:
        pytest.skip("reboot on drain is for nodes that run slurmd")
    for script in ("slurm-reboot-on-drain", "slurm-reboot", "munge-key-wait"):
        host.run_test(f"bash -n {LIBEXEC}/{script}")
