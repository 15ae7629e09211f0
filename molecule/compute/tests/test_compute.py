# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.compute role: what the converged image holds."""

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


def unit_enabled(host, unit, target):
    link = host.file(f"/etc/systemd/system/{target}.wants/{unit}")
    return link.is_symlink and link.linked_to.endswith(f"/{unit}")


def test_storage_tools_installed(host, debian):
    wanted = ["fdisk", "util-linux", "e2fsprogs", "kmod"] if debian else ["util-linux", "e2fsprogs", "kmod"]
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"packages not installed: {missing}"
    for tool in ("sfdisk", "blkid", "partx", "mkfs.ext4", "mkswap", "wipefs"):
        assert host.exists(tool), f"{tool} is not in the image"


@pytest.mark.parametrize("name", ["hpc-local-storage", "hpc-cpu-governor"])
def test_helper_scripts_are_the_roles(host, name):
    f = assert_file(host, f"{LIBEXEC}/{name}", 0o755)
    assert f.sha256sum == hashlib.sha256((ROLE / "files" / name).read_bytes()).hexdigest()


def test_local_storage_configuration(host, compute):
    conf = assert_file(host, "/etc/hpc-stateless/local-storage.conf", 0o644).content_string
    settings = dict(line.split("=", 1) for line in conf.splitlines() if line and not line.startswith("#"))
    assert settings["DISKS"] == '"' + " ".join(compute["compute_local_storage_disks"]) + '"'
    assert settings["DISK_WAIT"] == str(compute["compute_local_storage_disk_wait"])
    assert settings["MODULES"] == '"' + " ".join(compute["compute_local_storage_modules"]) + '"'
    assert settings["SWAP_SIZE_MIB"] == str(compute["compute_local_swap_size_mib"])
    assert settings["LOG_SIZE_MIB"] == str(compute["compute_local_log_size_mib"])
    assert settings["SCRATCH_LABEL"] == compute["compute_local_scratch_label"]
    assert settings["CLAIM_NONEMPTY"] == "no"


def test_local_storage_unit_runs_before_local_mounts_and_swap(host):
    unit = assert_file(host, "/etc/systemd/system/hpc-local-storage.service", 0o644).content_string
    lines = unit.splitlines()
    assert "DefaultDependencies=no" in lines
    assert "Before=local-fs-pre.target local-fs.target swap.target shutdown.target" in lines
    assert "Wants=local-fs-pre.target" in lines
    assert "ConditionVirtualization=!container" in lines
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines
    assert f"ExecStart={LIBEXEC}/hpc-local-storage -c /etc/hpc-stateless/local-storage.conf" in lines
    assert "WantedBy=local-fs.target" in lines


def test_local_storage_unit_enabled(host):
    assert unit_enabled(host, "hpc-local-storage.service", "local-fs.target")
    assert host.service("hpc-local-storage").is_enabled


def test_fstab_mounts_by_label_with_nofail(host, compute):
    fstab = host.file("/etc/fstab").content_string.splitlines()
    begin = fstab.index("# BEGIN hpc.stateless.compute local storage")
    end = fstab.index("# END hpc.stateless.compute local storage")
    timeout = f",x-systemd.device-timeout={compute['compute_local_storage_device_timeout']}s"
    scratch_options = ",".join(compute["compute_local_scratch_mount_options"] + ["nofail", "X-mount.mkdir"])
    assert fstab[begin + 1:end] == [
        f"LABEL={compute['compute_local_swap_label']} none swap defaults,nofail{timeout} 0 0",
        f"LABEL={compute['compute_local_log_label']} /var/log ext4 defaults,nofail,X-mount.mkdir{timeout} 0 2",
        f"LABEL={compute['compute_local_scratch_label']} {compute['compute_local_scratch_mountpoint']} ext4 "
        f"{scratch_options}{timeout} 0 2",
    ]


def test_local_storage_script_runs_in_the_image(host):
    """The image's own bash and util-linux run the script: a node without the disk boots on."""
    conf = "/tmp/hpc-local-storage-verify.conf"
    host.run_test(f"printf 'DISKS=/dev/hpc-verify-none\\nDISK_WAIT=0\\nSWAP_SIZE_MIB=64\\n' > {conf}")
    try:
        result = host.run(f"{LIBEXEC}/hpc-local-storage -c {conf}")
    finally:
        host.run(f"rm -f {conf}")
    assert result.rc == 0, result.stderr
    assert "no local disk found among '/dev/hpc-verify-none' after 0s" in result.stdout


def test_nhc_installed(host):
    assert_file(host, "/usr/sbin/nhc", 0o755)
    assert host.file("/etc/nhc/scripts").is_directory
    assert host.file("/usr/lib/tmpfiles.d/nhc.conf").contains("^d /run/nhc 0755 root root -$")
    stamp = host.file("/var/lib/hpc-stateless/nhc-archive").content_string.strip()
    assert stamp.endswith("tests/integration/fixtures/nhc-double"), stamp


def test_nhc_configuration(host, compute):
    conf = assert_file(host, "/etc/nhc/nhc.conf", 0o644).content_string.splitlines()
    rules = [line for line in conf if line and not line.startswith("#")]
    settings = [f"* || export {name}={value}" for name, value in sorted(compute["compute_nhc_settings"].items())]
    checks = [f"{item.get('hosts', '*')} || {item['check']}" for item in compute["compute_nhc_checks"]]
    assert rules == settings + checks
    assert all(re.fullmatch(r"\S+ \|\| \S.*", rule) for rule in rules)


def test_memlock_limits(host, compute):
    lines = [line.split() for line in
             assert_file(host, "/etc/security/limits.d/90-hpc-compute.conf", 0o644).content_string.splitlines()
             if line and not line.startswith("#")]
    limit = compute["compute_memlock_limit"]
    assert ["*", "soft", "memlock", limit] in lines and ["*", "hard", "memlock", limit] in lines
    for extra in compute["compute_limits_extra"]:
        assert [extra["domain"], extra["type"], extra["item"], extra["value"]] in lines


def test_services_get_the_memlock_limit(host):
    conf = assert_file(host, "/etc/systemd/system.conf.d/90-hpc-compute-memlock.conf", 0o644)
    assert conf.content_string.splitlines()[-2:] == ["[Manager]", "DefaultLimitMEMLOCK=infinity"]


def test_cpu_governor_unit(host, compute):
    unit = assert_file(host, "/etc/systemd/system/hpc-cpu-governor.service", 0o644).content_string
    assert f"ExecStart={LIBEXEC}/hpc-cpu-governor {compute['compute_cpu_governor']}" in unit.splitlines()
    assert "ConditionVirtualization=!container" in unit.splitlines()
    assert unit_enabled(host, "hpc-cpu-governor.service", "multi-user.target")


def test_hugepages(host, compute):
    sysctl = assert_file(host, "/etc/sysctl.d/80-hpc-compute-hugepages.conf", 0o644).content_string
    assert f"vm.nr_hugepages = {compute['compute_hugepages']}" in sysctl.splitlines()
    thp = assert_file(host, "/etc/tmpfiles.d/80-hpc-compute-thp.conf", 0o644).content_string
    assert (f"w /sys/kernel/mm/transparent_hugepage/enabled - - - - {compute['compute_transparent_hugepage']}"
            in thp.splitlines())


def test_nothing_is_staged_or_left_behind(host):
    assert not host.file("/var/tmp/hpc-stateless-nhc").exists
    assert not host.file("/local/scratch").exists, "the scratch mount point is made at boot (X-mount.mkdir)"
