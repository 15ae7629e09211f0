# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Security baseline every image layer must meet, in the spirit of the CIS
distribution-independent Linux benchmark. Exceptions go into a scenario's waivers.yml
(``check`` = the test name, ``item`` = the finding, ``reason``), never into this file."""

from __future__ import annotations

import stat

import pytest

import compliance


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc/group"])
def test_account_database_permissions(host, path):
    f = host.file(path)
    assert f.exists, f"{path} is missing"
    assert (f.user, f.group) == ("root", "root"), f"{path} is owned by {f.user}:{f.group}"
    assert f.mode & 0o133 == 0, f"{path} has mode {f.mode:o}, want 0644 or stricter"


@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/gshadow"])
def test_shadow_database_permissions(host, path):
    f = host.file(path)
    assert f.exists, f"{path} is missing"
    assert f.user == "root", f"{path} is owned by {f.user}"
    assert f.group in ("root", "shadow"), f"{path} has group {f.group}"
    assert f.mode & 0o137 == 0, f"{path} has mode {f.mode:o}, want 0640 or stricter"


def test_no_empty_passwords(host, waivers):
    shadow = host.file("/etc/shadow").content_string
    found = compliance.unwaived(compliance.parse_shadow_empty_passwords(shadow), waivers,
                                "test_no_empty_passwords")
    assert not found, f"accounts without a password: {found}"


def test_only_root_has_uid_0(host):
    assert compliance.parse_uid0_accounts(host.file("/etc/passwd").content_string) == ["root"]


def test_no_duplicate_accounts(host):
    passwd = host.file("/etc/passwd").content_string
    assert not compliance.duplicates(compliance.passwd_field(passwd, 0)), "duplicate user names"
    assert not compliance.duplicates(compliance.passwd_field(passwd, 2)), "duplicate UIDs"
    group = host.file("/etc/group").content_string
    assert not compliance.duplicates(compliance.passwd_field(group, 0)), "duplicate group names"


def test_no_world_writable_files(host, waivers):
    cmd = compliance.find_command(compliance.SYSTEM_DIRS, r"-perm -0002 ! -type l ! \( -type d -perm -1000 \)")
    found = compliance.unwaived(compliance.lines(host.check_output(cmd)), waivers, "test_no_world_writable_files")
    assert not found, f"world-writable files or non-sticky directories: {found}"


def test_no_unowned_files(host, waivers):
    out = host.check_output(compliance.find_command(compliance.SYSTEM_DIRS, r"\( -nouser -o -nogroup \)"))
    found = compliance.unwaived(compliance.lines(out), waivers, "test_no_unowned_files")
    assert not found, f"files without a known owner or group: {found}"


@pytest.mark.parametrize("path", ["/tmp", "/var/tmp"])
def test_temporary_directories_are_sticky(host, path):
    f = host.file(path)
    assert f.is_directory
    assert f.mode & stat.S_ISVTX and f.mode & 0o777 == 0o777, f"{path} has mode {f.mode:o}, want 1777"


def test_no_ssh_host_keys(at_rest, waivers):
    out = at_rest.check_output("ls -1d /etc/ssh/ssh_host_* 2>/dev/null; true")
    found = compliance.unwaived(compliance.lines(out), waivers, "test_no_ssh_host_keys")
    assert not found, f"SSH host keys baked into the image (every node would share them): {found}"


def test_machine_id_not_baked(at_rest):
    """Every node must generate its own machine ID (DHCP DUID, journal, D-Bus identity)."""
    machine_id = at_rest.file("/etc/machine-id")
    if machine_id.exists:
        assert machine_id.content_string.strip() in ("", "uninitialized"), \
            "/etc/machine-id holds an ID that every node of the image would share"
    dbus_copy = at_rest.file("/var/lib/dbus/machine-id")
    assert not dbus_copy.exists or dbus_copy.is_symlink, "/var/lib/dbus/machine-id is a baked copy of a machine ID"


def test_no_private_keys(at_rest, waivers):
    cmd = compliance.find_command(compliance.SECRET_SEARCH_DIRS, "-type f -size -64k",
                                  action="-exec grep -l -e 'PRIVATE KEY-----' {} +")
    found = compliance.unwaived(compliance.lines(at_rest.check_output(cmd)), waivers, "test_no_private_keys")
    assert not found, f"private keys baked into the image: {found}"


@pytest.mark.parametrize("path", compliance.SECRET_FILES)
def test_no_secret_files(at_rest, waivers, path):
    if compliance.unwaived([path], waivers, "test_no_secret_files"):
        assert not at_rest.file(path).exists, f"{path} is a secret and must be delivered at boot, not baked"


@pytest.mark.parametrize("package", compliance.UNWANTED_PACKAGES)
def test_no_unneeded_server_installed(host, package):
    assert not host.package(package).is_installed, f"{package} is installed: a compute node does not serve it"


def test_no_rhosts_or_netrc(host):
    out = host.check_output(compliance.find_command(
        ["/root", "/home"], r"-maxdepth 2 \( -name .rhosts -o -name .shosts -o -name .netrc \)"))
    assert not out, f"legacy trust or credential files: {out}"


def test_sshd_forbids_empty_passwords_and_root_password_login(sshd_settings):
    if not sshd_settings:
        pytest.skip("sshd is not installed in this image")
    assert sshd_settings["permitemptypasswords"] == "no"
    assert sshd_settings["permitrootlogin"] != "yes"
    assert sshd_settings["hostbasedauthentication"] == "no"
    assert sshd_settings["ignorerhosts"] == "yes"


def test_no_lynis_in_the_image(at_rest):
    """verify binds the build host's Lynis into the boot only (docs/hardening.md): the image never carries it."""
    left = [p for p in ("/usr/sbin/lynis", "/usr/share/lynis", "/etc/lynis") if at_rest.file(p).exists]
    assert not left, f"Lynis in the image: {left}"
