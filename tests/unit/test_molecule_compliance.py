# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of molecule/_shared/compliance.py, the helpers of the compliance tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "molecule" / "_shared"))

import compliance  # noqa: E402  pylint: disable=wrong-import-position


# --------------------------------------------------------------------------- waivers


def test_waivers_load_with_reasons(tmp_path):
    path = tmp_path / "waivers.yml"
    path.write_text(
        "waivers:\n"
        "  - {check: test_no_world_writable_files, item: /var/spool/x, reason: vendor tool needs it}\n"
        "  - {check: test_no_unowned_files, reason: scratch image}\n", encoding="utf-8")
    waivers = compliance.load_waivers(path, tmp_path / "missing.yml")
    assert waivers == [
        compliance.Waiver("test_no_world_writable_files", "vendor tool needs it", "/var/spool/x"),
        compliance.Waiver("test_no_unowned_files", "scratch image", None),
    ]
    assert compliance.check_waiver(waivers, "test_no_unowned_files").reason == "scratch image"
    # an item waiver does not switch the whole check off
    assert compliance.check_waiver(waivers, "test_no_world_writable_files") is None
    assert compliance.unwaived(["/var/spool/x", "/etc/bad"], waivers, "test_no_world_writable_files") == ["/etc/bad"]
    assert compliance.unwaived(["/var/spool/x"], waivers, "another_check") == ["/var/spool/x"]


@pytest.mark.parametrize("text, message", [
    ("waivers:\n  - {check: test_x}\n", "waivers[0] (test_x) needs a 'reason'"),
    ("waivers:\n  - {check: test_x, reason: '  '}\n", "needs a 'reason'"),
    ("waivers:\n  - {reason: because}\n", "waivers[0] needs a 'check'"),
    ("waivers:\n  - {check: test_x, reason: r, path: /x}\n", "unknown keys ['path']"),
    ("- check: test_x\n", "expected a mapping with a 'waivers' list"),
])
def test_bad_waiver_files_name_the_file_and_entry(tmp_path, text, message):
    path = tmp_path / "waivers.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(compliance.WaiverError) as err:
        compliance.load_waivers(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_empty_waiver_file_is_no_waiver(tmp_path):
    path = tmp_path / "waivers.yml"
    path.write_text("", encoding="utf-8")
    assert not compliance.load_waivers(path)


# --------------------------------------------------------------------------- parsers


def test_parse_sysctl_conf():
    text = ("# comment\n; other comment\n\nkernel.dmesg_restrict = 1\n"
            "net/ipv4/ip_forward=0\n-vm.swappiness = 10\nkernel.dmesg_restrict=0\nnot a setting\n")
    assert compliance.parse_sysctl_conf(text) == {
        "kernel.dmesg_restrict": "0", "net.ipv4.ip_forward": "0", "vm.swappiness": "10"}


def test_sysctl_file_order_follows_sysctl_d():
    order = compliance.sysctl_file_order({
        "/etc/sysctl.d": ["99-site.conf", "50-default.conf", "README"],
        "/usr/lib/sysctl.d": ["50-default.conf", "10-vendor.conf", "99-site.conf"],
        "/run/sysctl.d": ["20-run.conf"],
        "/etc": ["sysctl.conf", "passwd"],
    })
    # /etc overrides same-named files of /usr/lib; sorted by name; only *.conf of sysctl.d dirs
    assert order == ["/usr/lib/sysctl.d/10-vendor.conf", "/run/sysctl.d/20-run.conf",
                     "/etc/sysctl.d/50-default.conf", "/etc/sysctl.d/99-site.conf"]


def test_parse_sshd_t():
    text = "port 22\npermitrootlogin without-password\nhostkey /a\nhostkey /b\n\nallowgroups root hpc\n"
    assert compliance.parse_sshd_t(text) == {
        "port": "22", "permitrootlogin": "without-password", "hostkey": "/a\n/b", "allowgroups": "root hpc"}


def test_accounts_parsers():
    shadow = "root:*:19000:0:99999:7:::\nnopass::19000:0:99999:7:::\nlocked:!:19000::::::\nbroken\n"
    assert compliance.parse_shadow_empty_passwords(shadow) == ["nopass"]
    passwd = "root:x:0:0:root:/root:/bin/bash\ntoor:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/u:/bin/sh\n"
    assert compliance.parse_uid0_accounts(passwd) == ["root", "toor"]
    assert compliance.passwd_field(passwd, 2) == ["0", "0", "1000"]
    assert compliance.duplicates(compliance.passwd_field(passwd, 2)) == ["0"]
    assert compliance.duplicates(["a", "b"]) == []


def test_lines():
    assert compliance.lines("a\n\n  \nb\n") == ["a", "b"]
    assert compliance.lines("") == []


# --------------------------------------------------------------------------- find, for real


def test_find_command_finds_world_writable_files(tmp_path):
    (tmp_path / "etc").mkdir()
    bad = tmp_path / "etc" / "bad"
    bad.write_text("x", encoding="utf-8")
    bad.chmod(0o666)
    good = tmp_path / "etc" / "good"
    good.write_text("x", encoding="utf-8")
    sticky = tmp_path / "etc" / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    open_dir = tmp_path / "etc" / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    cmd = compliance.find_command([str(tmp_path / "etc"), str(tmp_path / "missing")],
                                  r"-perm -0002 ! -type l ! \( -type d -perm -1000 \)")
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    assert sorted(compliance.lines(out)) == sorted([str(open_dir), str(bad)])


def test_find_command_with_action_lists_private_keys(tmp_path):
    (tmp_path / "key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", encoding="utf-8")
    (tmp_path / "pub").write_text("ssh-ed25519 AAAA comment\n", encoding="utf-8")
    cmd = compliance.find_command([str(tmp_path)], "-type f",
                                  action="-exec grep -l -e 'PRIVATE KEY-----' {} +")
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    assert compliance.lines(out) == [str(tmp_path / "key")]


# --------------------------------------------------------------------------- scenario vars


def test_scenario_vars_overlay_defaults_converge_and_instance(tmp_path):
    (tmp_path / "roles" / "demo" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "demo" / "defaults" / "main.yml").write_text(
        "demo_a: 1\ndemo_b: 2\ndemo_c: 3\n", encoding="utf-8")
    scenario = tmp_path / "molecule" / "demo"
    (scenario / "vars").mkdir(parents=True)
    (scenario / "vars" / "converge.yml").write_text("demo_b: 20\ndemo_c: 30\n", encoding="utf-8")
    (scenario / "vars" / "one.yml").write_text("demo_c: 300\n", encoding="utf-8")
    assert compliance.scenario_vars(tmp_path, "demo", scenario, "one") == {"demo_a": 1, "demo_b": 20, "demo_c": 300}
    assert compliance.scenario_vars(tmp_path, "demo", scenario, "two") == {"demo_a": 1, "demo_b": 20, "demo_c": 30}
    assert compliance.scenario_vars(tmp_path, "demo", scenario) == {"demo_a": 1, "demo_b": 20, "demo_c": 30}


def test_chroot_host_refuses_a_missing_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="is the working container mounted"):
        compliance.chroot_host(str(tmp_path / "nothing"))


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot(8) needs root")
def test_chroot_host_runs_commands_inside_the_root(tmp_path):
    """A real chroot into a minimal root: the host's /bin/sh and its libraries, bind-free copies."""
    root = tmp_path / "root"
    sh = Path(os.path.realpath("/bin/sh"))
    needed = [sh] + [Path(p) for p in subprocess.run(
        ["sh", "-c", f"ldd {sh} | grep -o '/[^ ]*'"], capture_output=True, text=True, check=False).stdout.split()]
    for path in needed:
        target = root / str(path).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
        target.chmod(0o755)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "sh").exists():
        (root / "bin" / "sh").symlink_to(sh)
    (root / "marker").write_text("inside\n", encoding="utf-8")
    host = compliance.chroot_host(str(root))
    result = host.run("read line < /marker; echo $line")
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == "inside"


def test_inventory_expectations(tmp_path):
    group_vars = tmp_path / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "layers.yml").write_text(
        "hpc_stateless_layers:\n"
        "  base: {roles: [hpc.stateless.base], vars: {base_timezone: Europe/Oslo, hsn_mtu: 1}}\n"
        "  hsn: {parent: base, roles: [hsn]}\n"
        "  empty: {parent: hsn, roles: []}\n"
        "base_locale: de_DE.UTF-8\nunrelated: x\n", encoding="utf-8")
    (group_vars / "site.yaml").write_text("base_timezone: Asia/Tokyo\nhsn_mtu: 2044\n", encoding="utf-8")
    assert compliance.applied_roles(tmp_path) == {"base", "hsn"}
    # layer vars win over group_vars; only the role's own prefix counts; other layers' vars do not leak
    assert compliance.inventory_vars(tmp_path, "base") == {"base_locale": "de_DE.UTF-8", "base_timezone": "Europe/Oslo"}
    assert compliance.inventory_vars(tmp_path, "hsn") == {"hsn_mtu": 2044}
    assert compliance.inventory_vars(tmp_path / "missing", "base") == {}


# --------------------------------------------------------------------------- the booted image (verify.yml)


def test_nsenter_argv_enters_every_namespace_and_the_root_of_the_leader():
    argv = compliance.nsenter_argv(4242, "echo hi", "/usr/bin/nsenter")
    assert argv[:2] == ["/usr/bin/nsenter", "--target=4242"]
    assert {"--mount", "--uts", "--ipc", "--net", "--pid", "--cgroup", "--root", "--wd"} <= set(argv)
    assert argv[-4:] == ["--", "/bin/sh", "-c", "echo hi"]


def test_nsenter_host_refuses_a_leader_that_is_gone():
    # PIDs above pid_max never exist
    with pytest.raises(FileNotFoundError, match="no process 99999999"):
        compliance.nsenter_host(99999999)


def test_nsenter_host_runs_commands_in_the_namespaces_of_a_process():
    """A double of a booted container's leader: this test's own process. nsenter into one's own namespaces is
    allowed as root only; an unprivileged run shows the error result instead (never a passing empty answer)."""
    host = compliance.nsenter_host(os.getpid())
    result = host.run("echo $container; printf '%%s|' %s %s", "a b", "c")
    if os.geteuid() != 0:
        assert result.rc != 0
        return
    assert result.rc == 0
    assert result.stdout == "systemd-nspawn\na b|c|"
    assert host.run("exit 3").rc == 3


def test_fstab_boot_mounts_leave_out_swap_noauto_and_nofail():
    text = ("# comment\n"
            "tmpfs /tmp tmpfs mode=1777,size=50%,nosuid,nodev 0 0\n"
            "LABEL=local-swap none swap defaults,nofail 0 0\n"
            "LABEL=local-scratch /mnt/scratch ext4 defaults,nofail,X-mount.mkdir 0 2\n"
            "/dev/sdb1 /data xfs noauto 0 0\n"
            "proc /proc proc defaults\n")
    assert compliance.fstab_boot_mounts(text) == [
        ("/tmp", "tmpfs", ["mode=1777", "size=50%", "nosuid", "nodev"]), ("/proc", "proc", ["defaults"])]


def test_cgroup_path_prefers_the_unified_hierarchy():
    hybrid = "9:name=systemd:/system.slice/ssh.service\n1:cpu:/\n0::/system.slice/ssh.service\n"
    assert compliance.cgroup_path(hybrid) == "/system.slice/ssh.service"
    assert compliance.cgroup_path("1:name=systemd:/user.slice/x.scope\n") == "/user.slice/x.scope"
    assert compliance.cgroup_path("") == ""


def test_an_image_expects_the_values_its_own_chain_gave_a_role(tmp_path):
    """Two layers apply one role differently (the test cluster's slurm compute node and controller): verify
    of the node's image, or of a child of it, expects the node's values, not whichever layer came last."""
    group_vars = tmp_path / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "layers.yml").write_text(
        "hpc_stateless_layers:\n"
        "  base: {roles: [hpc.stateless.base]}\n"
        "  node: {parent: base, roles: [hpc.stateless.slurm], vars: {slurm_cluster_name: t}}\n"
        "  mpi: {parent: node, roles: [mpi_hello]}\n"
        "  controller: {parent: base, roles: [hpc.stateless.slurm], vars: {slurm_cluster_name: t, slurm_role: controller}}\n"
        "hpc_stateless_images:\n"
        "  compute: {layer: mpi}\n"
        "unrelated: 1\n", encoding="utf-8")
    assert compliance.layer_chain(tmp_path, "mpi") == ["base", "node", "mpi"]
    assert compliance.layer_chain(tmp_path, "compute") == ["base", "node", "mpi"]
    assert compliance.layer_chain(tmp_path, "nowhere") is None
    assert compliance.inventory_vars(tmp_path, "slurm", "mpi") == {"slurm_cluster_name": "t"}
    assert compliance.inventory_vars(tmp_path, "slurm", "compute") == {"slurm_cluster_name": "t"}
    assert compliance.inventory_vars(tmp_path, "slurm", "controller") == {"slurm_cluster_name": "t", "slurm_role": "controller"}
    # no layer named (Molecule's own instances): every layer, as before
    assert compliance.inventory_vars(tmp_path, "slurm")["slurm_role"] == "controller"


def test_the_chain_verify_passes_wins_over_the_inventory_files(tmp_path):
    """A layer added with extra variables (the rollout test's rollout_c over cluster_mpi) is in no inventory
    file: verify passes the plan's chain, and the slurm values are those of the chain's slurm layer."""
    group_vars = tmp_path / "group_vars" / "all"
    group_vars.mkdir(parents=True)
    (group_vars / "layers.yml").write_text(
        "hpc_stateless_layers:\n"
        "  node: {roles: [hpc.stateless.slurm], vars: {slurm_cluster_name: t}}\n"
        "  controller: {roles: [hpc.stateless.slurm], vars: {slurm_role: controller}}\n", encoding="utf-8")
    assert compliance.inventory_vars(tmp_path, "slurm", "extra_c", ["node", "extra_c"]) == {"slurm_cluster_name": "t"}
    assert compliance.inventory_vars(tmp_path, "slurm", "extra_c")["slurm_role"] == "controller"


def test_a_layers_groups_give_their_group_vars_below_its_own_vars(tmp_path):
    """The build host of a layer is in the groups it names (``groups``): their group_vars are what the role got
    there (the test cluster's cluster_mpi reads root's key from group_vars/cluster_root_ssh.yml)."""
    group_vars = tmp_path / "group_vars"
    (group_vars / "all").mkdir(parents=True)
    (group_vars / "all" / "layers.yml").write_text(
        "hpc_stateless_layers:\n"
        "  base: {roles: [hpc.stateless.base]}\n"
        "  leaf: {parent: base, roles: [hpc.stateless.base], groups: [ssh, gpu],"
        " vars: {base_timezone: Europe/Oslo}}\n", encoding="utf-8")
    (group_vars / "ssh.yml").write_text("base_root_authorized_keys: [ssh-ed25519 AAAA k]\nother_x: 1\n", encoding="utf-8")
    (group_vars / "gpu").mkdir()
    (group_vars / "gpu" / "a.yml").write_text("base_timezone: Asia/Tokyo\nbase_locale: C\n", encoding="utf-8")
    assert compliance.inventory_vars(tmp_path, "base", "leaf") == {
        "base_root_authorized_keys": ["ssh-ed25519 AAAA k"], "base_locale": "C", "base_timezone": "Europe/Oslo"}
    assert compliance.inventory_vars(tmp_path, "base", "base") == {}


def test_inventory_files_with_ansible_tags_are_read_a_vaulted_value_as_the_keys_digest(tmp_path):
    """A site's group_vars may hold !vault and !unsafe values: the Molecule reading of the inventory (no plan)
    gets the string of an unsafe one and the digest the layer keys have for a vaulted one, never the secret."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import VaultLib, VaultSecret

    from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import canonical_value

    secret = VaultSecret(b"unit-test-vault")
    ciphertext = VaultLib([("default", secret)]).encrypt("s3cret").decode()
    text = ("slurm_cluster_name: !unsafe '{{ not templated }}'\nslurm_db_password: !vault |\n"
            + "".join(f"  {line}\n" for line in ciphertext.splitlines()))
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "slurm.yml").write_text(text, encoding="utf-8")
    found = compliance.inventory_vars(tmp_path, "slurm")
    assert found["slurm_cluster_name"] == "{{ not templated }}"
    loader = DataLoader()
    loader.set_vault_secrets([("default", secret)])
    ansibles = loader.load(text)["slurm_db_password"]
    assert found["slurm_db_password"] == canonical_value(ansibles) and "s3cret" not in str(found)
