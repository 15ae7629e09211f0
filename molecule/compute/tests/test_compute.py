# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.compute role: what the converged image holds.

The checks follow the values the role was applied with (``role_vars``), so they hold for the
compute scenario and for the built image of molecule/default alike."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

ROLE = Path(__file__).resolve().parents[3] / "roles" / "compute"
LIBEXEC = "/usr/libexec/hpc-stateless"


@pytest.fixture(scope="module")
def compute(role_vars):
    return role_vars("compute")


@pytest.fixture(scope="module")
def debian(host):
    return host.system_info.distribution in ("debian", "ubuntu")


def assert_file(host, path, mode, user="root", group="root"):
    f = host.file(path)
    assert f.exists, f"{path} is missing"
    assert (f.user, f.group, f.mode) == (user, group, mode), f"{path}: {f.user}:{f.group} {f.mode:o}"
    return f


def skip_unless(condition, reason):
    if not condition:
        pytest.skip(reason)


def rendered(value: str) -> str:
    """The literal tail of a value that may start with a Jinja expression."""
    return value.rsplit("}}", 1)[-1]


def unit_enabled(host, unit, target):
    link = host.file(f"/etc/systemd/system/{target}.wants/{unit}")
    return link.is_symlink and link.linked_to.endswith(f"/{unit}")


def test_storage_tools_installed(host, compute, debian):
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    wanted = ["fdisk", "util-linux", "e2fsprogs", "kmod"] if debian else ["util-linux", "e2fsprogs", "kmod"]
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"packages not installed: {missing}"
    for tool in ("sfdisk", "blkid", "partx", "mkfs.ext4", "mkswap", "wipefs"):
        assert host.exists(tool), f"{tool} is not in the image"


@pytest.mark.parametrize("name", ["hpc-local-storage", "hpc-cpu-governor"])
def test_helper_scripts_are_the_roles(host, compute, name):
    wanted = compute["compute_local_storage_enabled"] if name == "hpc-local-storage" else compute["compute_cpu_governor"]
    skip_unless(wanted, f"{name} is not installed with these values")
    f = assert_file(host, f"{LIBEXEC}/{name}", 0o755)
    assert f.sha256sum == hashlib.sha256((ROLE / "files" / name).read_bytes()).hexdigest()


def test_local_storage_configuration(host, compute):
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    conf = assert_file(host, "/etc/hpc-stateless/local-storage.conf", 0o644).content_string
    settings = dict(line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#"))
    assert settings["DISKS"] == '"' + " ".join(compute["compute_local_storage_disks"]) + '"'
    assert settings["DISK_WAIT"] == str(compute["compute_local_storage_disk_wait"])
    assert settings["MODULES"] == '"' + " ".join(compute["compute_local_storage_modules"]) + '"'
    assert settings["SWAP_SIZE_MIB"] == str(compute["compute_local_swap_size_mib"])
    assert settings["LOG_SIZE_MIB"] == str(compute["compute_local_log_size_mib"])
    assert settings["SCRATCH_LABEL"] == compute["compute_local_scratch_label"]
    assert settings["CLAIM_NONEMPTY"] == "no"


def test_local_storage_unit_runs_before_local_mounts_and_swap(host, compute):
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    unit = assert_file(host, "/etc/systemd/system/hpc-local-storage.service", 0o644).content_string
    lines = unit.splitlines()
    assert "DefaultDependencies=no" in lines
    assert "Before=local-fs-pre.target local-fs.target swap.target shutdown.target" in lines
    assert "Wants=local-fs-pre.target" in lines
    assert "ConditionVirtualization=!container" in lines
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines
    assert f"ExecStart={LIBEXEC}/hpc-local-storage -c /etc/hpc-stateless/local-storage.conf" in lines
    assert "WantedBy=local-fs.target" in lines


def test_local_storage_unit_enabled(host, compute):
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    assert unit_enabled(host, "hpc-local-storage.service", "local-fs.target")
    assert host.service("hpc-local-storage").is_enabled


def test_fstab_mounts_by_label_with_nofail(host, compute):
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    fstab = host.file("/etc/fstab").content_string.splitlines()
    begin = fstab.index("# BEGIN hpc.stateless.compute local storage")
    end = fstab.index("# END hpc.stateless.compute local storage")
    seconds = compute["compute_local_storage_device_timeout"]
    timeout = f",x-systemd.device-timeout={seconds}s" if seconds > 0 else ""
    expected = []
    if compute["compute_local_swap_size_mib"] > 0:
        expected.append(f"LABEL={compute['compute_local_swap_label']} none swap defaults,nofail{timeout} 0 0")
    for kind in ("log", "scratch"):
        if kind == "log" and compute["compute_local_log_size_mib"] == 0:
            continue
        options = ",".join(dict.fromkeys(compute[f"compute_local_{kind}_mount_options"] + ["nofail", "X-mount.mkdir"]))
        expected.append(f"LABEL={compute[f'compute_local_{kind}_label']} {compute[f'compute_local_{kind}_mountpoint']} "
                        f"{compute[f'compute_local_{kind}_fstype']} {options}{timeout} 0 2")
    assert fstab[begin + 1:end] == expected
    assert all(",nofail" in line for line in expected)


def test_local_storage_script_runs_in_the_image(host, compute):
    """The image's own bash and util-linux run the script: a node without the disk boots on."""
    skip_unless(compute["compute_local_storage_enabled"], "compute_local_storage_enabled is false")
    conf = "/tmp/hpc-local-storage-verify.conf"
    host.run_test(f"printf 'DISKS=/dev/hpc-verify-none\\nDISK_WAIT=0\\nSWAP_SIZE_MIB=64\\n' > {conf}")
    try:
        result = host.run(f"{LIBEXEC}/hpc-local-storage -c {conf}")
    finally:
        host.run(f"rm -f {conf}")
    assert result.rc == 0, result.stderr
    assert "no local disk found among '/dev/hpc-verify-none' after 0s" in result.stdout


def test_nhc_installed(host, compute):
    if not compute["compute_nhc_enabled"] or compute["compute_nhc_install_method"] == "none":
        # NHC comes from elsewhere (or not at all): the role installed nothing of its own.
        assert not host.file("/var/lib/hpc-stateless/nhc-archive").exists
        assert not host.file("/usr/lib/tmpfiles.d/nhc.conf").exists
        return
    assert_file(host, "/usr/sbin/nhc", 0o755)
    assert host.file("/etc/nhc/scripts").is_directory
    if compute["compute_nhc_install_method"] == "archive":
        assert host.file("/usr/lib/tmpfiles.d/nhc.conf").contains("^d /run/nhc 0755 root root -$")
        stamp = host.file("/var/lib/hpc-stateless/nhc-archive").content_string.strip()
        assert stamp.endswith(rendered(compute["compute_nhc_archive"])), stamp


def test_nhc_configuration(host, compute):
    skip_unless(compute["compute_nhc_enabled"], "compute_nhc_enabled is false")
    conf = assert_file(host, "/etc/nhc/nhc.conf", 0o644).content_string.splitlines()
    rules = [line for line in conf if line and not line.startswith("#")]
    settings = [f"* || export {name}={value}" for name, value in sorted(compute["compute_nhc_settings"].items())]
    checks = [f"{item.get('hosts', '*')} || {item['check']}" for item in compute["compute_nhc_checks"]]
    # The slurm role appends its own marked block; the compute role's rules come first.
    assert rules[:len(settings) + len(checks)] == settings + checks
    assert all(re.fullmatch(r"\S+ \|\| \S.*", rule) for rule in rules)


def test_memlock_limits(host, compute):
    skip_unless(compute["compute_limits_enabled"], "compute_limits_enabled is false")
    lines = [line.split() for line in
             assert_file(host, "/etc/security/limits.d/90-hpc-compute.conf", 0o644).content_string.splitlines()
             if line and not line.startswith("#")]
    limit = compute["compute_memlock_limit"]
    assert ["*", "soft", "memlock", limit] in lines and ["*", "hard", "memlock", limit] in lines
    for extra in compute["compute_limits_extra"]:
        assert [extra["domain"], extra["type"], extra["item"], extra["value"]] in lines


def test_services_get_the_memlock_limit(host, compute):
    skip_unless(compute["compute_limits_enabled"] and compute["compute_memlock_systemd_default"],
                "no systemd memlock default with these values")
    conf = assert_file(host, "/etc/systemd/system.conf.d/90-hpc-compute-memlock.conf", 0o644)
    limit = compute["compute_memlock_limit"]
    value = "infinity" if limit in ("unlimited", "infinity") else f"{limit}K"
    assert conf.content_string.splitlines()[-2:] == ["[Manager]", f"DefaultLimitMEMLOCK={value}"]


def test_cpu_governor_unit(host, compute):
    skip_unless(compute["compute_cpu_governor"], "compute_cpu_governor is empty")
    unit = assert_file(host, "/etc/systemd/system/hpc-cpu-governor.service", 0o644).content_string
    assert f"ExecStart={LIBEXEC}/hpc-cpu-governor {compute['compute_cpu_governor']}" in unit.splitlines()
    assert "ConditionVirtualization=!container" in unit.splitlines()
    assert unit_enabled(host, "hpc-cpu-governor.service", "multi-user.target")


def test_hugepages(host, compute):
    sysctl = host.file("/etc/sysctl.d/80-hpc-compute-hugepages.conf")
    if compute["compute_hugepages"] or compute["compute_hugepages_overcommit"]:
        assert_file(host, sysctl.path, 0o644)
        assert f"vm.nr_hugepages = {compute['compute_hugepages']}" in sysctl.content_string.splitlines()
    else:
        assert not sysctl.exists
    thp = host.file("/etc/tmpfiles.d/80-hpc-compute-thp.conf")
    if compute["compute_transparent_hugepage"]:
        assert_file(host, thp.path, 0o644)
        assert (f"w /sys/kernel/mm/transparent_hugepage/enabled - - - - {compute['compute_transparent_hugepage']}"
                in thp.content_string.splitlines())
    else:
        assert not thp.exists


def test_nothing_is_staged_or_left_behind(host, compute):
    assert not host.file("/var/tmp/hpc-stateless-nhc").exists
    mountpoint = compute["compute_local_scratch_mountpoint"]
    assert not host.file(mountpoint).exists, f"{mountpoint} is made at boot (X-mount.mkdir), not in the image"
