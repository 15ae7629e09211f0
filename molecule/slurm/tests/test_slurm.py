# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.slurm role: what the converged image holds, per flavour.

The checks follow the values the role was applied with (``role_vars``), so they hold for the
slurm scenario and for the built image of molecule/default alike."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

ROLE = Path(__file__).resolve().parents[3] / "roles" / "slurm"
LIBEXEC = "/usr/libexec/hpc-stateless"
UNITS = "/etc/systemd/system"
NODE_KEYS = {"address": "NodeAddr", "hostname": "NodeHostname", "port": "Port", "cpus": "CPUs", "boards": "Boards",
             "sockets": "Sockets", "cores_per_socket": "CoresPerSocket", "threads_per_core": "ThreadsPerCore",
             "real_memory": "RealMemory", "tmp_disk": "TmpDisk", "features": "Features", "gres": "Gres",
             "weight": "Weight", "state": "State"}


def _csv(value):
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def node_line(node: dict) -> str:
    """The NodeName line slurm.conf must hold for one item of slurm_nodes."""
    words = [f"NodeName={node['name']}"]
    words += [f"{slurm_key}={_csv(node[key])}" for key, slurm_key in NODE_KEYS.items() if node.get(key) is not None]
    if "state" not in node:
        words.append("State=UNKNOWN")
    words += [f"{key}={value}" for key, value in sorted((node.get("options") or {}).items())]
    return " ".join(words)


def partition_line(partition: dict) -> str:
    words = [f"PartitionName={partition['name']}", f"Nodes={_csv(partition.get('nodes', 'ALL'))}"]
    if partition.get("default"):
        words.append("Default=YES")
    words += [f"MaxTime={partition.get('max_time', 'INFINITE')}", f"State={partition.get('state', 'UP')}"]
    words += [f"{key}={value}" for key, value in sorted((partition.get("options") or {}).items())]
    return " ".join(words)


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
def slurm_conf(host, slurm, daemons):
    """slurm.conf as (global settings, NodeName lines, PartitionName lines)."""
    if slurm["slurm_configless"] and "slurmctld" not in daemons:
        assert not host.file("/etc/slurm/slurm.conf").exists, "configless compute images carry no slurm.conf"
        pytest.skip("configless: slurmd fetches slurm.conf from the controllers")
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


def test_munge_key_not_baked(at_rest, slurm):
    key = at_rest.file("/etc/munge/munge.key")
    if slurm["slurm_munge_key_bake"]:
        assert (key.user, key.group, key.mode) == ("munge", "munge", 0o400)
    else:
        assert not key.exists, "the munge key is a secret: it is delivered at boot"
    munge_dir = at_rest.file("/etc/munge")
    assert (munge_dir.user, munge_dir.mode) == ("munge", 0o700)


def test_munge_waits_for_its_key(host, slurm):
    dropin = assert_file(host, f"{UNITS}/munge.service.d/hpc-stateless-key.conf", 0o644).content_string.splitlines()
    sources = "".join(f" -s {path}" for path in slurm["slurm_munge_key_delivery_paths"])
    assert (f"ExecStartPre=+{LIBEXEC}/munge-key-wait -k /etc/munge/munge.key -u munge "
            f"-t {slurm['slurm_munge_key_wait']}{sources}") in dropin
    assert f"TimeoutStartSec={slurm['slurm_munge_key_wait'] + 90}" in dropin
    waiter = assert_file(host, f"{LIBEXEC}/munge-key-wait", 0o755)
    assert waiter.sha256sum == hashlib.sha256((ROLE / "files" / "munge-key-wait").read_bytes()).hexdigest()


def test_munge_key_waiter_reports_a_missing_key(at_rest, slurm):
    if slurm["slurm_munge_key_bake"]:
        pytest.skip("the key is baked into this image")
    result = at_rest.run(f"{LIBEXEC}/munge-key-wait -t 0")
    assert result.rc == 1
    assert "no munge key at /etc/munge/munge.key after 0s" in result.stderr


def test_munge_starts_when_its_key_arrives(host, slurm):
    path_unit = assert_file(host, f"{UNITS}/munge-key.path", 0o644).content_string.splitlines()
    assert "PathExists=/etc/munge/munge.key" in path_unit
    for delivery in slurm["slurm_munge_key_delivery_paths"]:
        assert f"PathExists={delivery}" in path_unit
    assert "Unit=munge.service" in path_unit
    assert enabled(host, "munge-key.path", "paths.target")


@pytest.mark.booted
def test_munge_waits_for_its_key_or_runs_with_it(host, slurm):
    """In the booted image munge either waits for its key (munge-key.path active, munge not started) or,
    once the key was delivered (verify binds a throw-away one: hpc_stateless_verify_test_secrets), runs and
    makes credentials that decode."""
    key = host.file("/etc/munge/munge.key")
    if not key.exists:
        assert host.service("munge-key.path").is_running, "munge-key.path does not wait for the key"
        assert not host.service("munge").is_running, "munge runs without a key"
        return
    assert host.service("munge").is_running, "the key is there but munge does not run"
    host.run_test("munge -n | unmunge")


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
    assert settings["SlurmctldHost"] == [
        host_["name"] + (f"({host_['address']})" if host_.get("address") else "") for host_ in slurm["slurm_controller_hosts"]]
    assert settings["AuthType"] == "auth/munge"
    assert settings["SlurmUser"] == "slurm"
    assert settings.get("SlurmdParameters", "") == ",".join(slurm["slurm_slurmd_parameters"])
    assert nodes == [node_line(node) for node in slurm["slurm_nodes"]]
    assert partitions == [partition_line(partition) for partition in slurm["slurm_partitions"]]
    for key, value in slurm["slurm_conf_extra"].items():
        assert settings[key] == str(value)


def test_slurm_conf_lines_are_rendered_as_expected():
    """The expectations above against hand-written lines, so they cannot drift with the template."""
    assert node_line({"name": "node[01-04]", "cpus": 2, "features": ["hsn", "ib"], "options": {"MemSpecLimit": 2048}}) == \
        "NodeName=node[01-04] CPUs=2 Features=hsn,ib State=UNKNOWN MemSpecLimit=2048"
    assert partition_line({"name": "gpu", "nodes": ["gpu01", "gpu02"], "default": True}) == \
        "PartitionName=gpu Nodes=gpu01,gpu02 Default=YES MaxTime=INFINITE State=UP"


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
    yes_no = {True: "yes", False: "no"}
    assert f"ConstrainCores={yes_no[slurm['slurm_cgroup_constrain_cores']]}" in lines
    assert f"ConstrainRAMSpace={yes_no[slurm['slurm_cgroup_constrain_ram_space']]}" in lines
    assert ("IgnoreSystemd=yes" in lines) == slurm["slurm_cgroup_ignore_systemd"]


def test_spool_and_log_directories(host, daemons, debian):
    assert_file(host, "/var/log/slurm", 0o755, "slurm", "slurm")
    if "slurmd" in daemons:
        assert_file(host, "/var/lib/slurm/slurmd" if debian else "/var/spool/slurm/d", 0o755, "slurm", "slurm")
    if "slurmctld" in daemons:
        assert_file(host, "/var/lib/slurm/slurmctld" if debian else "/var/spool/slurm/ctld", 0o700, "slurm", "slurm")


def test_health_check_and_reboot_programs(host, slurm, slurm_conf):
    settings = slurm_conf[0]
    if slurm["slurm_reboot_program"] != "auto":
        assert settings["RebootProgram"] == slurm["slurm_reboot_program"]
    elif slurm["slurm_reboot_on_drain_enabled"]:
        assert settings["RebootProgram"] == f"{LIBEXEC}/slurm-reboot"
    else:
        assert settings["RebootProgram"] == "/usr/sbin/reboot"
    program = slurm["slurm_health_check_program"]
    if program == "auto":
        program = "/usr/sbin/nhc" if host.file("/usr/sbin/nhc").exists else ""
    if program:
        assert settings["HealthCheckProgram"] == program
        assert settings["HealthCheckInterval"] == str(slurm["slurm_health_check_interval"])
    else:
        assert "HealthCheckProgram" not in settings


def test_reboot_on_drain_installed_on_slurmd_nodes(host, slurm, daemons):
    script = host.file(f"{LIBEXEC}/slurm-reboot-on-drain")
    if "slurmd" not in daemons or not slurm["slurm_reboot_on_drain_enabled"]:
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


def test_reboot_on_drain_runs_from_nhc_or_a_timer(host, slurm, daemons):
    if "slurmd" not in daemons or not slurm["slurm_reboot_on_drain_enabled"]:
        pytest.skip("reboot on drain is for nodes that run slurmd")
    if slurm["slurm_reboot_on_drain_runner"] == "timer":
        assert enabled(host, "hpc-reboot-on-drain.timer", "timers.target")
        return
    if host.file("/etc/nhc/nhc.conf").exists and host.file("/usr/sbin/nhc").exists:
        rules = host.file("/etc/nhc/nhc.conf").content_string.splitlines()
        assert "* || check_hpc_reboot_on_drain" in rules
        module = assert_file(host, "/etc/nhc/scripts/hpc_reboot_on_drain.nhc", 0o644)
        assert "systemctl start --no-block hpc-reboot-on-drain.service" in module.content_string
        assert not enabled(host, "hpc-reboot-on-drain.timer", "timers.target")
    else:
        assert enabled(host, "hpc-reboot-on-drain.timer", "timers.target")


def test_reboot_on_drain_scripts_parse_with_the_images_bash(host, slurm, daemons):
    # Only a syntax check: running them would contact the (made-up) controllers of the scenario.
    if "slurmd" not in daemons or not slurm["slurm_reboot_on_drain_enabled"]:
        pytest.skip("reboot on drain is for nodes that run slurmd")
    for script in ("slurm-reboot-on-drain", "slurm-reboot", "munge-key-wait"):
        host.run_test(f"bash -n {LIBEXEC}/{script}")
