# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.base role: what the converged image holds."""

from __future__ import annotations

import pytest

import compliance

CAP_SYS_TIME = 25  # capability(7) number


@pytest.fixture(scope="module")
def base(role_vars):
    return role_vars("base")


@pytest.fixture(scope="module")
def debian(host):
    return host.system_info.distribution in ("debian", "ubuntu")


def test_base_packages_installed(host, base):
    wanted = ["chrony", "openssh-server", "tzdata", "ca-certificates"]
    if base["base_log_forward_host"] or base["base_syslog_enabled"]:
        wanted.append("rsyslog")
    if base["base_syslog_enabled"]:
        wanted.append("logrotate")
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"packages not installed: {missing}"


def test_kernel_as_configured(at_rest, base):
    """The image holds the configured kernel (pack serves it beside the artifact: a live node's /boot is empty)."""
    kernels = at_rest.check_output("ls -1 /boot 2>/dev/null | grep '^vmlinuz-' || true")
    if base["base_kernel_packages"] == []:
        assert not kernels, f"base_kernel_packages is [] but the image holds {kernels}"
    else:
        assert kernels, "no kernel (/boot/vmlinuz-*) in the image"


def test_timezone(host, base):
    assert host.file("/etc/localtime").is_symlink
    target = host.check_output("readlink /etc/localtime")
    assert target == f"/usr/share/zoneinfo/{base['base_timezone']}"
    assert host.file(target).is_file


def test_timezone_name_file(host, base, debian):
    if not debian:
        pytest.skip("/etc/timezone is Debian's")
    assert host.file("/etc/timezone").content_string == base["base_timezone"] + "\n"


def test_locale(host, base, debian):
    if not base["base_locale_enabled"]:
        pytest.skip("base_locale_enabled is false")
    conf = host.file("/etc/default/locale" if debian else "/etc/locale.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    assert f"LANG={base['base_locale']}" in conf.content_string.splitlines()
    available = host.check_output("locale -a").lower().replace("-", "").split()
    for name in base["base_locales"]:
        assert name.lower().replace("-", "") in available, f"locale {name} is not available"


def test_chrony_configuration(host, base, debian):
    conf = host.file("/etc/chrony/chrony.conf" if debian else "/etc/chrony.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    lines = conf.content_string.splitlines()
    opts = base["base_chrony_source_options"]
    for server in base["base_chrony_servers"]:
        assert f"server {server} {opts}" in lines
    assert [line for line in lines if line.startswith("pool ")] == \
        [f"pool {pool} {opts}" for pool in base["base_chrony_pools"]]
    assert f"makestep {base['base_chrony_makestep']}" in lines


def test_chrony_config_parses(host, debian):
    host.run_test("chronyd -p -f %s", "/etc/chrony/chrony.conf" if debian else "/etc/chrony.conf")


@pytest.mark.parametrize("unit", ["chrony", "ssh"])
def test_services_enabled(host, unit, debian):
    name = {"chrony": "chrony" if debian else "chronyd", "ssh": "ssh" if debian else "sshd"}[unit]
    assert host.service(name).is_enabled


def test_journald(host, base):
    conf = host.file("/etc/systemd/journald.conf.d/10-hpc-stateless.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    lines = conf.content_string.splitlines()
    assert f"Storage={base['base_journald_storage']}" in lines
    assert f"RuntimeMaxUse={base['base_journald_runtime_max_use']}" in lines
    syslog = base["base_log_forward_host"] or base["base_syslog_enabled"]
    assert ("ForwardToSyslog=yes" if syslog else "ForwardToSyslog=no") in lines


def test_syslog_daemon_and_daily_rotation(host, base):
    """rsyslog runs as the node's syslog daemon, and logrotate.conf rotates daily with no other period: where the
    SCAP Security Guide looks (package_rsyslog_installed, service_rsyslog_enabled, ensure_logrotate_activated)."""
    if not base["base_syslog_enabled"]:
        pytest.skip("base_syslog_enabled is false")
    assert host.service("rsyslog").is_enabled
    periods = [line.split()[0] for line in host.file("/etc/logrotate.conf").content_string.splitlines()
               if line.split() and line.split()[0] in ("daily", "weekly", "monthly", "yearly")]
    assert periods == ["daily"], periods


def test_log_forwarding(host, base):
    rule = host.file("/etc/rsyslog.d/90-hpc-stateless-forward.conf")
    if not base["base_log_forward_host"]:
        assert not rule.exists
        return
    text = rule.content_string
    assert f'target="{base["base_log_forward_host"]}"' in text
    assert f'port="{base["base_log_forward_port"]}"' in text
    assert f'protocol="{base["base_log_forward_protocol"]}"' in text
    assert host.service("rsyslog").is_enabled
    host.run_test("rsyslogd -N1 -f %s", rule.path)


def test_sshd_dropin(host):
    dropin = host.file("/etc/ssh/sshd_config.d/10-hpc-stateless.conf")
    assert (dropin.user, dropin.group, dropin.mode) == ("root", "root", 0o600)
    assert "Include /etc/ssh/sshd_config.d/*.conf" in host.file("/etc/ssh/sshd_config").content_string


def test_sshd_main_file_repeats_the_dropins(host, base):
    """/etc/ssh/sshd_config holds the drop-ins' settings after its Include line, for audits that read it only."""
    if not (base["base_hardening_sshd_enabled"] and base["base_hardening_sshd_main_file"]):
        pytest.skip("base_hardening_sshd_main_file is off")
    main = [line.split(None, 1) for line in host.file("/etc/ssh/sshd_config").content_string.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    first = {}
    for key, *value in main:
        first.setdefault(key.lower(), " ".join(value).strip())
    assert first["permitrootlogin"] == base["base_sshd_permit_root_login"]
    assert first["permitemptypasswords"] == "no"
    assert first["x11forwarding"] == ("yes" if base["base_sshd_x11_forwarding"] else "no")
    for key, value in base["base_hardening_sshd_options"].items():
        if key not in base["base_sshd_options"]:
            assert first[key.lower()] == str(value), key


def test_system_map_readable_by_root_only(at_rest, base):
    if not base["base_hardening_system_map_mode"]:
        pytest.skip("base_hardening_system_map_mode is empty")
    maps = at_rest.check_output("find /boot -maxdepth 1 -name 'System.map*' -type f -printf '%m %u %p\\n'")
    for line in maps.splitlines():
        mode, user, path = line.split(" ", 2)
        assert (mode, user) == (base["base_hardening_system_map_mode"].lstrip("0") or "0", "root"), line


def test_sshd_effective_settings(sshd_settings, base):
    assert_sshd_settings(sshd_settings, base)


def assert_sshd_settings(sshd_settings, base):
    """The role's sshd settings in ``sshd -T`` output (of the image, or of the booted system)."""
    permit_root = {"prohibit-password": ("prohibit-password", "without-password")}
    expected_root = permit_root.get(base["base_sshd_permit_root_login"], (base["base_sshd_permit_root_login"],))
    assert sshd_settings["permitrootlogin"] in expected_root
    yes_no = {True: "yes", False: "no"}
    assert sshd_settings["passwordauthentication"] == yes_no[base["base_sshd_password_authentication"]]
    assert sshd_settings["kbdinteractiveauthentication"] == yes_no[base["base_sshd_kbd_interactive_authentication"]]
    assert sshd_settings["x11forwarding"] == yes_no[base["base_sshd_x11_forwarding"]]
    assert sshd_settings["pubkeyauthentication"] == "yes"
    assert sshd_settings["maxauthtries"] == str(base["base_sshd_max_auth_tries"])
    if base["base_sshd_allow_groups"]:
        assert sshd_settings["allowgroups"].split() == base["base_sshd_allow_groups"]
    for option, value in base["base_sshd_options"].items():
        assert sshd_settings[option.lower()] == str(value)


def test_ssh_host_keys_generated_at_boot(host, debian):
    if not debian:
        assert host.file("/usr/lib/systemd/system/sshd-keygen@.service").exists
        return
    unit = host.file("/etc/systemd/system/hpc-stateless-ssh-hostkeys.service")
    assert (unit.user, unit.group, unit.mode) == ("root", "root", 0o644)
    assert "ExecStart=/usr/bin/ssh-keygen -A" in unit.content_string
    assert "Before=ssh.service" in unit.content_string
    assert host.service("hpc-stateless-ssh-hostkeys").is_enabled
    assert host.file("/etc/systemd/system/ssh.service.requires/hpc-stateless-ssh-hostkeys.service").is_symlink


def test_sysctl(sysctl_settings, base):
    wanted = {**base["base_sysctl"], **base["base_sysctl_extra"]}
    wrong = {k: (sysctl_settings.get(k), str(v)) for k, v in wanted.items() if sysctl_settings.get(k) != str(v)}
    assert not wrong, f"kernel parameters at boot (found, wanted): {wrong}"


def test_sysctl_file(host):
    conf = host.file("/etc/sysctl.d/90-hpc-stateless.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)


def test_limits(host, base):
    conf = host.file("/etc/security/limits.d/90-hpc-stateless.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    rows = [line.split() for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert rows == [[lim["domain"], lim["type"], lim["item"], str(lim["value"])] for lim in base["base_limits"]]


def test_init_link(host):
    assert host.file("/init").is_symlink
    assert host.check_output("readlink /init") == "/sbin/init"
    assert host.file("/sbin/init").exists, "/init points at a missing /sbin/init"


def test_tmpfs_mounts(host, base):
    fstab = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()
             if line.strip() and not line.startswith("#")]
    by_path = {fields[1]: fields for fields in fstab if len(fields) >= 4}
    for mount in base["base_tmpfs_mounts"]:
        fields = by_path.get(mount["path"])
        assert fields, f"no fstab entry for {mount['path']}"
        assert fields[0] == "tmpfs" and fields[2] == "tmpfs"
        opts = fields[3].split(",")
        assert f"size={mount.get('size', '50%')}" in opts
        assert f"mode={mount.get('mode', '1777')}" in opts
        missing = set(mount.get("options", ["nosuid", "nodev"])) - set(opts)
        assert not missing, f"fstab options of {mount['path']} lack {sorted(missing)}: {fields[3]}"


def test_stateless_units_masked(host, debian):
    # Units of the distribution default list that are installed in this image.
    candidates = ["apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
                  "fstrim.timer"] if debian else ["dnf-makecache.timer", "fstrim.timer"]
    installed = [u for u in candidates if host.file(f"/usr/lib/systemd/system/{u}").exists
                 or host.file(f"/lib/systemd/system/{u}").exists]
    assert installed, "none of the units to mask is installed: the check would prove nothing"
    not_masked = [u for u in installed if host.run(f"systemctl is-enabled {u}").stdout.strip() != "masked"]
    assert not not_masked, f"units not masked: {not_masked}"


def test_docs_stripped(host, base):
    if not base["base_strip_docs"]:
        pytest.skip("base_strip_docs is off")
    # Regular files only: dpkg's path-exclude keeps a package's documentation symlinks (for example
    # /usr/share/doc/perl/Changes.gz -> changelog.gz), which dangle and weigh nothing.
    left = compliance.lines(host.check_output(
        "find /usr/share/doc /usr/share/man /usr/share/info -type f ! -name copyright 2>/dev/null; true"))
    assert not left, f"documentation left: {left[:10]}"


def test_locales_stripped(host, base):
    if not base["base_strip_locales"]:
        pytest.skip("base_strip_locales is off")
    present = set(compliance.lines(host.check_output("ls -1A /usr/share/locale")))
    assert present <= set(base["base_locales_keep"]), f"unexpected: {sorted(present - set(base['base_locales_keep']))}"


def test_package_manager_keeps_docs_out(host, debian):
    if debian:
        text = host.file("/etc/dpkg/dpkg.cfg.d/90-hpc-stateless-nodoc").content_string
        assert "path-exclude=/usr/share/doc/*" in text
        assert "path-include=/usr/share/doc/*/copyright" in text
    else:
        assert "tsflags=nodocs" in host.file("/etc/dnf/dnf.conf").content_string


# --------------------------------------------------------------------------- the booted image (verify.yml)


@pytest.mark.booted
def test_running_sshd_uses_the_image_configuration(host, base):
    """The sshd that runs is the one the role configured: its unit is active, the listener was started
    without command-line overrides, its configuration (with the host keys made at this boot) parses and
    has the role's settings, and it listens on exactly the configured ports."""
    if not base["base_sshd_enabled"]:
        pytest.skip("base_sshd_enabled is false")
    assert host.service("ssh").is_running, "ssh.service is not running in the booted image"
    listener = host.check_output("pgrep -o -a -x sshd")
    assert " -o " not in f"{listener} " and " -f " not in f"{listener} ", f"sshd runs with overrides: {listener}"
    host.run_test("sshd -t")
    settings = compliance.parse_sshd_t(host.check_output("sshd -T -C user=root,host=node,addr=192.0.2.1"))
    assert_sshd_settings(settings, base)
    ports = {line.split()[3].rsplit(":", 1)[1] for line in compliance.lines(host.check_output("ss -Hltnp"))
             if '"sshd"' in line}
    assert ports == set(settings["port"].split("\n")), f"sshd listens on {ports}, configured {settings['port']}"


@pytest.mark.booted
def test_ssh_host_keys_made_at_this_boot(host, base):
    if not base["base_sshd_enabled"] or base["base_sshd_bake_host_keys"]:
        pytest.skip("sshd is off or its host keys are baked")
    key = host.file("/etc/ssh/ssh_host_ed25519_key")
    assert key.exists, "no host key after boot: hpc-stateless-ssh-hostkeys.service did not make them"
    assert (key.user, key.mode) == ("root", 0o600)


def test_root_authorized_keys(host, base):
    """Root's authorized_keys holds exactly the configured public keys (base_root_authorized_keys), root's own,
    not readable by others, and no private key."""
    keys = base["base_root_authorized_keys"]
    if not isinstance(keys, list):
        pytest.skip(f"base_root_authorized_keys is {keys!r} as written in the inventory (a template the suite does "
                    "not render): the configured keys are unknown here")
    if not keys:
        pytest.skip("base_root_authorized_keys is empty: the role leaves root's keys alone")
    directory, found = host.file("/root/.ssh"), host.file("/root/.ssh/authorized_keys")
    assert (directory.user, directory.mode) == ("root", 0o700), f"/root/.ssh is {directory.user} {directory.mode:o}"
    assert found.exists, "/root/.ssh/authorized_keys is missing"
    assert (found.user, found.mode) == ("root", 0o600), f"authorized_keys is {found.user} {found.mode:o}"
    text = found.content_string
    assert "PRIVATE KEY" not in text, "a private key in /root/.ssh/authorized_keys"
    assert set(compliance.lines(text)) == {k.strip() for k in keys}, "root's keys differ from base_root_authorized_keys"


@pytest.mark.booted
def test_live_network_sysctl_as_configured(host, sysctl_settings):
    """systemd-sysctl applied the image's per-network-namespace parameters (net.ipv4.*, net.ipv6.*) in the
    booted container. Others (kernel.*, fs.*, vm.*) belong to the build host's kernel in a container; their
    configuration is test_sysctl's."""
    wanted = {k: v for k, v in sysctl_settings.items() if k.startswith(("net.ipv4.", "net.ipv6."))}
    live = {k: host.run(f"cat /proc/sys/{k.replace('.', '/')}").stdout.strip() for k in wanted}
    wrong = {k: (live[k], v) for k, v in wanted.items() if live[k].split() != v.split()}
    assert not wrong, f"live kernel parameters of the booted image (live, configured): {wrong}"


@pytest.mark.booted
def test_tmpfs_mounted(host, base):
    if not base["base_tmpfs_enabled"]:
        pytest.skip("base_tmpfs_enabled is false")
    for mount in base["base_tmpfs_mounts"]:
        assert host.mount_point(mount["path"]).exists, f"{mount['path']} is not mounted"
        assert host.mount_point(mount["path"]).filesystem == "tmpfs"
        assert {"nosuid", "nodev"} <= set(host.mount_point(mount["path"]).options), mount["path"]


@pytest.mark.booted
def test_time_sync_runs_or_is_kept_out_of_the_container_only(host, base):
    """chrony runs on a node; under systemd-nspawn it may only be skipped for lack of CAP_SYS_TIME (its
    ConditionCapability), never fail or be left stopped."""
    if not base["base_chrony_enabled"]:
        pytest.skip("base_chrony_enabled is false")
    show = dict(line.split("=", 1) for line in host.check_output(
        "systemctl show chrony.service -p ActiveState -p ConditionResult -p UnitFileState").splitlines())
    assert show["UnitFileState"] == "enabled", show
    if show["ActiveState"] != "active":
        assert show["ConditionResult"] == "no", f"chrony is {show['ActiveState']} although its conditions are met"
        status = host.run("systemctl status --no-pager chrony.service").stdout
        assert "ConditionCapability=CAP_SYS_TIME" in status, f"chrony was kept from starting by another condition: {status}"
        bounding = host.check_output("sed -n 's/^CapBnd:[[:space:]]*//p' /proc/1/status")
        assert not int(bounding, 16) & (1 << CAP_SYS_TIME), "chrony was skipped although PID 1 has CAP_SYS_TIME"


# --------------------------------------------------------------------------- hardening (docs/hardening.md)


def _enabled(base, concern):
    if not base.get(f"base_hardening_{concern}_enabled"):
        pytest.skip(f"base_hardening_{concern}_enabled is false")


def test_hardening_login_defs(host, base):
    _enabled(base, "login_defs")
    settings = dict(line.split(None, 1) for line in host.file("/etc/login.defs").content_string.splitlines()
                    if line.strip() and not line.lstrip().startswith("#") and len(line.split(None, 1)) == 2)
    wrong = {k: (settings.get(k, "").strip(), str(v)) for k, v in base["base_hardening_login_defs"].items()
             if settings.get(k, "").strip() != str(v)}
    assert not wrong, f"/etc/login.defs (found, wanted): {wrong}"


def test_hardening_shell_timeout(host, base):
    _enabled(base, "login_defs")
    script = host.file("/etc/profile.d/hpc-stateless-tmout.sh")
    if int(base["base_hardening_shell_timeout"]) == 0:
        assert not script.exists
        return
    text = script.content_string
    assert f"TMOUT={base['base_hardening_shell_timeout']}" in text and "readonly TMOUT" in text


def test_hardening_core_dumps_off(host, base):
    _enabled(base, "coredump")
    conf = host.file("/etc/systemd/coredump.conf.d/50-hpc-stateless-hardening.conf").content_string.split()
    assert "Storage=none" in conf and "ProcessSizeMax=0" in conf
    assert "ulimit -c 0" in host.file("/etc/profile.d/hpc-stateless-coredump.sh").content_string


def test_hardening_modules_cannot_load(host, base):
    _enabled(base, "modules")
    lines = {line.strip() for line in host.file("/etc/modprobe.d/hpc-stateless-hardening.conf").content_string.splitlines()}
    command = base["base_hardening_modules_install_command"]
    missing = [m for m in base["base_hardening_disabled_modules"]
               if f"install {m} {command}" not in lines or f"blacklist {m}" not in lines]
    assert not missing, f"modules that can still be loaded: {missing}"


def test_hardening_banner(host, base, sshd_settings):
    _enabled(base, "banner")
    for path in ("/etc/issue", "/etc/issue.net"):
        assert host.file(path).content_string.strip() == base["base_hardening_banner"].strip(), path
    if sshd_settings and base.get("base_hardening_sshd_enabled"):
        assert sshd_settings.get("banner") == "/etc/issue.net"


def test_hardening_usbguard(host, base):
    _enabled(base, "usbguard")
    rules = host.file("/etc/usbguard/rules.conf")
    assert rules.exists, "/etc/usbguard/rules.conf is missing: USBGuard is not installed"
    assert rules.user == "root" and rules.mode == 0o600, (rules.user, oct(rules.mode))
    lines = [line.strip() for line in rules.content_string.splitlines() if line.strip() and not line.startswith("#")]
    assert lines == base["base_hardening_usbguard_rules"], "rules.conf holds other rules than the role's (the package's "\
        f"first policy names the build host's devices): {lines}"
    conf = {k.strip(): v.strip() for k, _sep, v in (line.partition("=") for line in
            host.file("/etc/usbguard/usbguard-daemon.conf").content_string.splitlines())
            if _sep and not k.lstrip().startswith("#")}
    wrong = {k: (conf.get(k), str(v)) for k, v in base["base_hardening_usbguard_settings"].items() if conf.get(k) != str(v)}
    assert not wrong, f"usbguard-daemon.conf (found, wanted): {wrong}"
    assert "ConditionVirtualization=!container" in \
        host.file("/etc/systemd/system/usbguard.service.d/50-hpc-stateless.conf").content_string.split()
    assert host.service("usbguard").is_enabled
    if any(host.file(f"{d}/usbguard-dbus.service").exists for d in ("/usr/lib/systemd/system", "/lib/systemd/system")):
        dbus = host.file("/etc/systemd/system/usbguard-dbus.service")
        assert dbus.is_symlink and dbus.linked_to == "/dev/null", "usbguard-dbus.service is not masked"


def test_hardening_file_modes(host, base):
    """The main sshd configuration and the cron directories are readable by root only (Lynis FILE-7524, CIS)."""
    wrong = {}
    if base.get("base_sshd_enabled") and host.file("/etc/ssh/sshd_config").exists:
        sshd_config = host.file("/etc/ssh/sshd_config")
        if sshd_config.mode != 0o600:
            wrong["/etc/ssh/sshd_config"] = oct(sshd_config.mode)
    if base.get("base_hardening_cron_dirs_mode"):
        want = int(base["base_hardening_cron_dirs_mode"], 8)
        for path in ("/etc/cron.d", "/etc/cron.hourly", "/etc/cron.daily", "/etc/cron.weekly", "/etc/cron.monthly"):
            directory = host.file(path)
            if directory.is_directory and directory.mode != want:
                wrong[path] = oct(directory.mode)
    assert not wrong, f"modes readable beyond root (path: mode): {wrong}"


def test_hardening_sshd_settings(sshd_settings, base):
    _enabled(base, "sshd")
    if not sshd_settings:
        pytest.skip("sshd is not installed in this image")
    wrong = {k: (sshd_settings.get(k.lower()), str(v)) for k, v in base["base_hardening_sshd_options"].items()
             if str(sshd_settings.get(k.lower(), "")).lower() != str(v).lower()}
    assert not wrong, f"effective sshd settings (found, wanted): {wrong}"


def test_hardening_pam_and_integrity_packages(host, base, debian):
    if not debian:
        pytest.skip("the package names are Debian's")
    wanted = []
    if base.get("base_hardening_pam_enabled"):
        wanted += base["base_hardening_pam_packages"] or ["libpam-pwquality", "libpam-tmpdir"]
    if base.get("base_hardening_integrity_enabled"):
        wanted += base["base_hardening_integrity_packages"] or ["debsums"]
    if not wanted:
        pytest.skip("PAM and integrity hardening are off")
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"hardening packages not installed: {missing}"
    if base.get("base_hardening_pam_enabled"):
        quality = host.file("/etc/security/pwquality.conf.d/50-hpc-stateless-hardening.conf").content_string
        assert f"minlen = {base['base_hardening_pwquality']['minlen']}" in quality or \
            f"minlen={base['base_hardening_pwquality']['minlen']}" in quality, quality
