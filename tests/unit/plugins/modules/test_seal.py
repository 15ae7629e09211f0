"""The seal module on real trees: what a layer carries after its package scripts ran, sealed in one pass.

Each tree is a directory laid out as a layer's root (tmp_path/root); the module runs through its real main()
with ``root`` pointing there, as the build runs it with ``/`` inside the working container.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import seal_tree
from ansible_collections.hpc.stateless.plugins.modules import seal

MODULE = seal  # what the run_module fixture (conftest.py) runs


def layer_tree(root: Path) -> Path:
    """What a layer holds after systemd, dbus, openssh-server and a pam_tmpdir session ran their scripts."""
    for directory in ("etc/ssh", "var/lib/dbus", "tmp/user/0"):
        (root / directory).mkdir(parents=True)
    (root / "etc/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (root / "var/lib/dbus/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key"):
        (root / "etc/ssh" / name).write_text("key\n")
    (root / "etc/ssh/sshd_config").write_text("PermitRootLogin no\n")
    (root / "tmp/user/0/scratch").write_text("x")
    return root


def test_a_layer_is_sealed_in_one_run_and_a_second_run_changes_nothing(run_module, tmp_path):
    root = layer_tree(tmp_path / "root")
    result, code = run_module({"root": str(root)})
    assert code == 0 and result["changed"] is True
    assert result["emptied"] == ["/etc/machine-id"]
    assert result["removed"] == ["/var/lib/dbus/machine-id", "/etc/ssh/ssh_host_ed25519_key",
                                 "/etc/ssh/ssh_host_ed25519_key.pub", "/etc/ssh/ssh_host_rsa_key", "/tmp/user"]
    st = os.lstat(root / "etc/machine-id")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 0 and stat.S_IMODE(st.st_mode) == 0o444
    assert (st.st_uid, st.st_gid) == (0, 0)
    assert sorted(os.listdir(root / "etc/ssh")) == ["sshd_config"]
    assert not (root / "var/lib/dbus/machine-id").exists() and not (root / "tmp/user").exists()
    assert (root / "tmp").is_dir() and (root / "var/lib/dbus").is_dir()
    again, code = run_module({"root": str(root)})
    assert code == 0 and again["changed"] is False and again["removed"] == [] and again["emptied"] == []


def test_check_mode_reports_the_paths_and_changes_nothing(run_module, tmp_path):
    root = layer_tree(tmp_path / "root")
    result, code = run_module({"root": str(root)}, check_mode=True)
    assert code == 0 and result["changed"] is True
    assert "/etc/ssh/ssh_host_rsa_key" in result["removed"] and result["emptied"] == ["/etc/machine-id"]
    assert "/etc/machine-id\n" in result["diff"]["before"] and result["diff"]["after"] == "/etc/machine-id (empty)\n"
    assert (root / "etc/machine-id").read_text().startswith("0123")
    assert (root / "etc/ssh/ssh_host_rsa_key").exists() and (root / "tmp/user/0/scratch").exists()


def test_each_part_runs_only_when_asked(run_module, tmp_path):
    # base_reset_machine_id false and base_sshd_bake_host_keys true: only /tmp/user goes.
    root = layer_tree(tmp_path / "root")
    result, code = run_module({"root": str(root), "machine_id": False, "ssh_host_keys": False})
    assert code == 0 and result["removed"] == ["/tmp/user"] and result["emptied"] == []
    assert (root / "etc/machine-id").read_text().startswith("0123")
    assert (root / "var/lib/dbus/machine-id").exists() and (root / "etc/ssh/ssh_host_rsa_key").exists()


def test_links_in_the_tree_are_removed_or_replaced_never_followed(run_module, tmp_path):
    # An image's links are hostile: a machine-id that links to a host file, an /etc/ssh that links out of the
    # tree, a /tmp/user that links to a host directory. Nothing outside the tree is read, written or removed.
    outside = tmp_path / "host"
    (outside / "ssh").mkdir(parents=True)
    (outside / "ssh/ssh_host_ed25519_key").write_text("host key\n")
    (outside / "machine-id").write_text("host id\n")
    (outside / "user").mkdir()
    (outside / "user/keep").write_text("host file\n")
    root = tmp_path / "root"
    for directory in ("etc", "var/lib/dbus", "tmp"):
        (root / directory).mkdir(parents=True)
    (root / "etc/machine-id").symlink_to(outside / "machine-id")
    (root / "var/lib/dbus/machine-id").symlink_to("/etc/machine-id")
    (root / "etc/ssh").symlink_to(outside / "ssh")  # resolved inside the tree: <root>/<outside>/ssh, absent
    (root / "tmp/user").symlink_to(outside / "user")
    result, code = run_module({"root": str(root)})
    assert code == 0, result
    assert result["emptied"] == ["/etc/machine-id"]
    assert result["removed"] == ["/var/lib/dbus/machine-id", "/tmp/user"]
    st = os.lstat(root / "etc/machine-id")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 0
    assert not os.path.lexists(root / "tmp/user") and not os.path.lexists(root / "var/lib/dbus/machine-id")
    assert (outside / "machine-id").read_text() == "host id\n"
    assert (outside / "ssh/ssh_host_ed25519_key").read_text() == "host key\n"
    assert (outside / "user/keep").read_text() == "host file\n"


def test_a_machine_id_directory_is_an_error_naming_it(run_module, tmp_path):
    root = tmp_path / "root"
    (root / "etc/machine-id").mkdir(parents=True)
    result, code = run_module({"root": str(root)})
    assert code == 1 and result["failed"] is True
    assert "/etc/machine-id is a directory" in result["msg"] and "Remove it in that role" in result["msg"]


def test_a_tree_without_etc_or_no_tree_at_all_is_an_error(run_module, tmp_path):
    (tmp_path / "empty").mkdir()
    result, code = run_module({"root": str(tmp_path / "empty")})
    assert code == 1 and "/etc does not exist in the tree" in result["msg"]
    result, code = run_module({"root": str(tmp_path / "missing")})
    assert code == 1 and "is not a directory" in result["msg"]


def test_an_absent_machine_id_is_created_empty(tmp_path):
    (tmp_path / "etc").mkdir()
    result = seal_tree.seal(str(tmp_path), host_keys=False, session_tmpdirs=False)
    assert result.emptied == ["/etc/machine-id"] and result.removed == []
    assert (tmp_path / "etc/machine-id").read_bytes() == b""


@pytest.mark.parametrize("mode", [0o644, 0o444])
def test_a_machine_id_of_another_mode_or_content_is_made_right(tmp_path, mode):
    (tmp_path / "etc").mkdir()
    machine_id = tmp_path / "etc/machine-id"
    machine_id.write_bytes(b"" if mode == 0o644 else b"uninitialized\n")
    machine_id.chmod(mode)
    assert seal_tree.seal(str(tmp_path), host_keys=False, session_tmpdirs=False).emptied == ["/etc/machine-id"]
    assert stat.S_IMODE(os.lstat(machine_id).st_mode) == 0o444 and machine_id.read_bytes() == b""


def test_the_builds_ansible_tmp_goes_and_the_empty_ansible_dir_stays(tmp_path):
    """/root/.ansible stays: the live nodes' drift check prunes it, and a node booted without it would have its
    /root changed by the first Ansible run against it (a false drift on every node)."""
    root = layer_tree(tmp_path / "root")
    payload = root / "root/.ansible/tmp/ansible-tmp-1795924660.4-77-1"
    payload.mkdir(parents=True)
    (payload / "AnsiballZ_apt.py").write_text("killed mid-run\n")
    assert seal_tree.remove_ansible_tmp(str(root), check_mode=True) == ["/root/.ansible/tmp"]
    assert (root / "root/.ansible/tmp").is_dir()
    assert seal_tree.remove_ansible_tmp(str(root)) == ["/root/.ansible/tmp"]
    assert sorted(os.listdir(root / "root")) == [".ansible"] and os.listdir(root / "root/.ansible") == []
    assert seal_tree.remove_ansible_tmp(str(root)) == []


def test_a_site_s_own_files_in_dot_ansible_stay(tmp_path):
    root = layer_tree(tmp_path / "root")
    (root / "root/.ansible/tmp").mkdir(parents=True)
    (root / "root/.ansible/collections").mkdir()
    assert seal_tree.remove_ansible_tmp(str(root)) == ["/root/.ansible/tmp"]
    assert sorted(os.listdir(root / "root/.ansible")) == ["collections"]


@pytest.mark.parametrize("remote_tmp", ["/tmp", "/var/tmp", "/"])
def test_a_remote_tmp_outside_a_dot_ansible_directory_is_the_image_s_own_and_stays(tmp_path, remote_tmp):
    root = layer_tree(tmp_path / "root")
    (root / "var/tmp").mkdir(parents=True)
    assert seal_tree.remove_ansible_tmp(str(root), remote_tmp) == []
    assert (root / "tmp").is_dir() and (root / "var/tmp").is_dir()


def test_a_link_named_dot_ansible_tmp_is_removed_as_a_link_never_followed(tmp_path):
    root = layer_tree(tmp_path / "root")
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "keep").write_text("host file\n")
    (root / "root/.ansible").mkdir(parents=True)
    (root / "root/.ansible/tmp").symlink_to(outside)
    assert "/root/.ansible/tmp" in seal_tree.remove_ansible_tmp(str(root))
    assert (outside / "keep").read_text() == "host file\n"


def test_a_relative_remote_tmp_is_refused_naming_it(tmp_path):
    root = layer_tree(tmp_path / "root")
    with pytest.raises(seal_tree.SealTreeError, match="'.ansible/tmp' is not an absolute path"):
        seal_tree.remove_ansible_tmp(str(root), ".ansible/tmp")
