# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The compliance suite in verify: which tests an image gets, and pytest's JUnit report as record checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.hpc.stateless.plugins.action.compliance_suite import inventory_dir
from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import (
    role_values,
    RUN_CHECK,
    SuiteError,
    bad_checks,
    chain_roles,
    check_id,
    live_config,
    live_environment,
    live_inventory,
    live_target,
    parse_junit,
    pytest_command,
    run_error,
    suite_environment,
    suite_paths,
    summary,
)

LAYERS = {
    "base": {"parent": None, "roles": ["hpc.stateless.base"]},
    "hsn": {"parent": "base", "roles": ["hpc.stateless.hsn"]},
    "slurm": {"parent": "hsn", "roles": ["hpc.stateless.slurm", "site_motd", {"role": "hpc.stateless.base"}]},
}


def test_chain_roles_root_first_each_once():
    assert chain_roles(LAYERS, "slurm") == ["base", "hsn", "slurm", "site_motd"]
    assert chain_roles(LAYERS, "base") == ["base"]


def test_chain_roles_names_a_layer_missing_from_the_plan():
    with pytest.raises(SuiteError, match="layer 'gone' of 'x'"):
        chain_roles({"x": {"parent": "gone", "roles": []}}, "x")
    with pytest.raises(SuiteError, match="layer 'a' of 'a'.*not in the plan"):
        chain_roles({"a": {"parent": "b"}, "b": {"parent": "a"}}, "a")


def test_suite_paths_baseline_first_then_role_tests_that_exist_then_the_sites(tmp_path):
    for role in ("_shared", "base", "slurm"):
        (tmp_path / role / "tests").mkdir(parents=True)
    site = tmp_path / "site_tests.py"
    site.write_text("")
    assert suite_paths(str(tmp_path), ["base", "hsn", "hpc.stateless.slurm"], [str(site)]) == [
        str(tmp_path / "_shared/tests"), str(tmp_path / "base/tests"), str(tmp_path / "slurm/tests"), str(site)]
    with pytest.raises(SuiteError, match="hpc_stateless_verify_suite_paths: /nonexistent does not exist"):
        suite_paths(str(tmp_path), [], ["/nonexistent"])


def test_suite_paths_without_the_suite_say_the_collection_is_incomplete(tmp_path):
    with pytest.raises(SuiteError, match="compliance suite is not at .*install it again"):
        suite_paths(str(tmp_path), ["base"])


def test_check_id_is_role_file_and_test():
    assert check_id("base.tests.test_base", "test_sysctl") == "base/test_base::test_sysctl"
    assert check_id("_shared.tests.test_baseline", "test_x[/etc/passwd]") == "_shared/test_baseline::test_x[/etc/passwd]"
    assert check_id("", "test_y") == "test_y"


REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="base.tests.test_base" name="test_ok" time="0.1"/>
<testcase classname="base.tests.test_base" name="test_bad" time="0.1">
  <failure message="AssertionError: kernel parameters at boot (found, wanted): {'a': ('1', '0')}">long trace</failure>
</testcase>
<testcase classname="_shared.tests.test_runtime" name="test_cannot_run" time="0.1">
  <error message="failed on setup with &quot;RuntimeError: the booted container is no longer running&quot;">trace</error>
</testcase>
<testcase classname="_shared.tests.test_baseline" name="test_waived" time="0">
  <skipped type="pytest.skip" message="waived: scratch image, ticket 12">_shared/tests/test_baseline.py:5: waived: scratch image, ticket 12</skipped>
</testcase>
<testcase classname="hsn.tests.test_hsn" name="test_if[1]" time="0">
  <skipped type="pytest.skip" message="fewer interfaces configured">hsn/tests/test_hsn.py:113: fewer interfaces configured</skipped>
</testcase>
</testsuite></testsuites>
"""


def test_parse_junit_gives_one_check_per_case_with_its_result():
    checks = parse_junit(REPORT)
    assert [(c["name"], c["result"], c["passed"]) for c in checks] == [
        ("base/test_base::test_ok", "passed", True),
        ("base/test_base::test_bad", "failed", False),
        ("_shared/test_runtime::test_cannot_run", "error", False),
        ("_shared/test_baseline::test_waived", "waived", True),
        ("hsn/test_hsn::test_if[1]", "skipped", True),
    ]
    assert checks[1]["detail"].startswith("AssertionError: kernel parameters at boot")
    assert "long trace" in checks[1]["detail"]
    assert "no longer running" in checks[2]["detail"]
    assert (checks[3]["waiver"], checks[3]["detail"]) == ("scratch image, ticket 12", "")
    assert checks[4]["detail"] == "fewer interfaces configured"
    assert summary(checks) == {"passed": 1, "failed": 1, "error": 1, "waived": 1, "skipped": 1}
    assert [c["name"] for c in bad_checks(checks)] == ["base/test_base::test_bad", "_shared/test_runtime::test_cannot_run"]


@pytest.mark.parametrize("text, message", [
    ("not xml", "not a JUnit XML report"),
    ("<testsuites><testsuite/></testsuites>", "ran no check"),
    ("<testsuite><testcase classname='a' name='t'/><testcase classname='a' name='t'/></testsuite>",
     r"checks reported twice: \['a::t'\]"),
])
def test_parse_junit_refuses_what_proves_nothing(text, message):
    with pytest.raises(SuiteError, match=message):
        parse_junit(text, "report.xml")


def test_parse_junit_reads_a_real_pytest_report(tmp_path):
    """pytest's own JUnit writer (no double): one passing, one failing, one waived and one erroring case."""
    (tmp_path / "role" / "tests").mkdir(parents=True)
    (tmp_path / "role" / "tests" / "test_x.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def broken():\n    raise RuntimeError('tool missing')\n"
        "def test_pass():\n    assert True\n"
        "def test_fail():\n    assert 1 == 2, 'one is not two'\n"
        "@pytest.mark.skip(reason='waived: not on this site')\n"
        "def test_waived():\n    pass\n"
        "def test_error(broken):\n    pass\n")
    report = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                    "-c", "/dev/null", f"--junitxml={report}", str(tmp_path / "role" / "tests")],
                   cwd=tmp_path, capture_output=True, check=False)
    checks = {c["name"]: c for c in parse_junit(report.read_bytes())}
    assert {name: c["result"] for name, c in checks.items()} == {
        "role/test_x::test_pass": "passed", "role/test_x::test_fail": "failed",
        "role/test_x::test_waived": "waived", "role/test_x::test_error": "error"}
    assert "one is not two" in checks["role/test_x::test_fail"]["detail"]
    assert "tool missing" in checks["role/test_x::test_error"]["detail"]
    assert checks["role/test_x::test_waived"]["waiver"] == "not on this site"


def test_inventory_dir_is_the_first_directory_or_the_directory_of_a_hosts_file(tmp_path):
    hosts = tmp_path / "inv" / "hosts.yml"
    hosts.parent.mkdir()
    hosts.write_text("all: {}\n")
    assert inventory_dir([str(hosts)]) == str(tmp_path / "inv")
    assert inventory_dir([str(tmp_path / "missing"), str(tmp_path / "inv")]) == str(tmp_path / "inv")
    assert inventory_dir(str(tmp_path / "inv")) == str(tmp_path / "inv")
    assert inventory_dir([]) == ""


def test_suite_environment_points_conftest_at_the_booted_container_and_drops_outer_runs():
    outer = {"PATH": "/bin", "PYTEST_ADDOPTS": "-x", "MOLECULE_SCENARIO_DIRECTORY": "/m", "HPC_STATELESS_TEST_CONTAINER": "c"}
    env = suite_environment(outer, 4242, "/usr/bin/nsenter", "slurm", ["base", "slurm"], image="img:1",
                            waivers=["/a.yml", "/b.yml"], inventory="/inv", chain=["base", "hsn", "slurm"])
    outer_only = {"PYTEST_ADDOPTS", "MOLECULE_SCENARIO_DIRECTORY", "HPC_STATELESS_TEST_CONTAINER"}
    assert env["PATH"] == "/bin" and not outer_only & set(env)
    assert (env["HPC_STATELESS_TEST_TARGET"], env["HPC_STATELESS_TEST_ROLES"], env["HPC_STATELESS_WAIVERS"]) == (
        "nsenter://4242", "base,slurm", "/a.yml:/b.yml")
    assert (env["HPC_STATELESS_EXPECT_FROM_INVENTORY"], env["HPC_STATELESS_MOLECULE_INVENTORY"]) == ("1", "/inv")
    assert env["HPC_STATELESS_TEST_CHAIN"] == "base,hsn,slurm"
    assert "HPC_STATELESS_EXPECT_FROM_INVENTORY" not in suite_environment({}, 1, "nsenter", "x", [])
    assert "HPC_STATELESS_EXPECT_VALUES" not in env
    assert suite_environment({}, 1, "nsenter", "x", [], values="/s/values.json")["HPC_STATELESS_EXPECT_VALUES"] == \
        "/s/values.json"


def test_role_values_are_each_roles_variables_as_the_last_layer_applying_it_saw_them():
    layers = {
        "root": {"parent": None, "roles": ["hpc.stateless.base"]},
        "hpc": {"parent": "root", "roles": ["slurm", {"role": "hpc.stateless.base"}]},
        "leaf": {"parent": "hpc", "roles": []},
        "other": {"parent": None, "roles": ["slurm"]},
    }
    seen = {"root": {"base_x": "root's", "slurm_y": "not applied here"},
            "hpc": {"base_x": "hpc's", "slurm_y": 1, "slurmy": "no prefix", "other_z": 3}}
    asked = []

    def variables_of(name):
        asked.append(name)
        return seen[name]

    assert role_values(layers, "leaf", variables_of) == {"base": {"base_x": "hpc's"}, "slurm": {"slurm_y": 1}}
    assert sorted(asked) == ["hpc"]  # each layer read once; a layer whose roles a later one re-applies not at all
    with pytest.raises(SuiteError, match="'gone'"):
        role_values({"leaf": {"parent": "gone"}}, "leaf", variables_of)


# -- live nodes (playbooks/compliance.yml) ---------------------------------------------------------------------
SSH = {"host": "10.0.0.11", "port": 2222, "remote_user": "root", "private_key_file": "~/keys/root",
       "ssh_args": "-C -o ControlMaster=auto -o ControlPersist=60s",
       "ssh_common_args": '-o ProxyCommand="ip netns exec ns1 socat - TCP:%h:%p"', "ssh_extra_args": "-4",
       "host_key_checking": False, "timeout": 10, "control_path": "/root/.ansible/cp/0123456789", "password": None,
       "become": False, "become_user": None, "become_method": "sudo", "remote_tmp": "/tmp"}


def test_live_inventory_hands_testinfra_the_ssh_settings_ansible_resolved(monkeypatch):
    monkeypatch.setenv("HOME", "/home/admin")
    hostvars = live_inventory("node001", SSH)["all"]["hosts"]["node001"]
    assert {k: v for k, v in hostvars.items() if k != "ansible_ssh_common_args"} == {
        "ansible_connection": "ssh", "ansible_host": "10.0.0.11", "ansible_port": 2222, "ansible_user": "root",
        "ansible_ssh_private_key_file": "/home/admin/keys/root", "ansible_ssh_extra_args": "-4",
        "ansible_remote_tmp": "/tmp"}  # where the play leaves its files (compliance.yml): no drift of /root
    # ssh_args and common args as Ansible passes them, then what Ansible adds itself: the same master socket
    assert hostvars["ansible_ssh_common_args"] == (
        "-C -o ControlMaster=auto -o ControlPersist=60s -o 'ProxyCommand=ip netns exec ns1 socat - TCP:%h:%p' "
        "-o StrictHostKeyChecking=no -o ConnectTimeout=10 -o ControlPath=/root/.ansible/cp/0123456789")


def test_live_inventory_keeps_the_sites_own_choices_and_only_sudo():
    own = dict(SSH, ssh_args="-o ControlPersist=30s -o ControlPath=/run/cp/%C", ssh_common_args="",
               host_key_checking=True, timeout=None, port=None, host=None, become=True, become_user=None)
    hostvars = live_inventory("node002", own)["all"]["hosts"]["node002"]
    assert hostvars["ansible_ssh_common_args"] == "-o ControlPersist=30s -o ControlPath=/run/cp/%C"
    assert hostvars["ansible_host"] == "node002" and "ansible_port" not in hostvars
    assert (hostvars["ansible_become"], hostvars["ansible_become_user"]) == (True, "root")
    with pytest.raises(SuiteError, match="become_method 'su'"):
        live_inventory("node002", dict(own, become_method="su"))
    with pytest.raises(SuiteError, match="SSH keys only"):
        live_inventory("node002", dict(SSH, password="secret", private_key_file=None))


def test_an_ssh_option_of_the_inventory_never_reaches_the_controllers_shell(tmp_path, monkeypatch):
    """testinfra's ssh backend runs ssh through ``sh -c`` on the controller: the options of the inventory reach ssh
    word for word, the way Ansible passes them, and nothing of them runs. Real testinfra, real ssh (to a closed port
    on loopback: the options are refused by ssh itself, or the connection is)."""
    testinfra = pytest.importorskip("testinfra")
    marker = tmp_path / "marker"
    # testinfra's ansible backend runs the controller's ansible-inventory: the one next to this Python.
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "none.cfg"))
    settings = dict(SSH, host="127.0.0.1", port=9, timeout=2, control_path=None,
                    ssh_args=f"-o ControlMaster=no -o ServerAliveInterval=$(touch {marker})",
                    ssh_common_args=f"-o SetEnv=A=`touch {marker}.2`", ssh_extra_args=f"-4 ; touch {marker}.3")
    inventory = tmp_path / "node.json"
    inventory.write_text(json.dumps(live_inventory("node001", settings)))
    host = testinfra.get_host(live_target("node001", str(inventory)))
    try:
        result = host.run("true")
    except RuntimeError as exc:  # ssh's exit status 255
        result = exc.args[0]
    assert sorted(p.name for p in tmp_path.glob("marker*")) == [], "an ssh option ran a command on the controller"
    # ssh itself was handed the word "$(touch ...)" as the interval, and refused it
    assert result.rc == 255 and b"invalid time value" in result.stderr_bytes, result


def test_the_controllers_ansible_cfg_never_reaches_the_controllers_shell(tmp_path, monkeypatch):
    """testinfra's ansible backend reads ``[ssh_connection] ssh_args`` and ``control_path`` of the ansible.cfg it finds
    and pastes them unquoted into its ``sh -c`` ssh line: the live suite's environment names no configuration file
    (the inventory holds those options resolved and quoted). Real testinfra, real ssh to a closed port."""
    testinfra = pytest.importorskip("testinfra")
    marker = tmp_path / "marker"
    (tmp_path / "cp").mkdir()
    config = tmp_path / "ansible.cfg"
    config.write_text(f"[ssh_connection]\nssh_args = -o ServerAliveInterval=$(touch {marker}.args)\n"
                      f"control_path = %(directory)s/$(touch {marker}.cp)\n\n"
                      f"[persistent_connection]\ncontrol_path_dir = {tmp_path / 'cp'}\n")
    inventory = tmp_path / "node.json"
    inventory.write_text(json.dumps(live_inventory("node001", dict(SSH, host="127.0.0.1", port=9, timeout=2,
                                                                   control_path=None))))
    env = live_environment({**os.environ, "ANSIBLE_CONFIG": str(config)}, "node001", str(inventory), "base", ["base"],
                           bindirs=[os.path.dirname(sys.executable)])
    with open(live_config(str(inventory)), "w", encoding="utf-8") as handle:  # as compliance_suite writes it
        handle.write("")
    for name in ("ANSIBLE_CONFIG", "PATH"):  # what the suite's pytest process gets
        monkeypatch.setenv(name, env[name])
    host = testinfra.get_host(env["HPC_STATELESS_TEST_TARGET"])
    try:
        host.run("true")
    except RuntimeError:  # ssh's exit status 255: the port is closed
        pass
    assert sorted(p.name for p in tmp_path.glob("marker*")) == [], "ansible.cfg's ssh options ran on the controller"


def test_ssh_options_with_unbalanced_quotes_are_refused_naming_them():
    with pytest.raises(SuiteError, match=r"node001: ssh_extra_args '-o \"User=a' cannot be split"):
        live_inventory("node001", dict(SSH, ssh_extra_args='-o "User=a'))


def test_live_environment_targets_testinfras_ansible_backend_without_an_image_at_rest():
    env = live_environment({"PATH": "/usr/bin:/bin", "HPC_STATELESS_TEST_IMAGE": "img"}, "node001",
                           "/tmp/x y/node.json", "cluster_mpi", ["base", "slurm"], waivers=["/w.yml"], inventory="/inv",
                           chain=["base", "cluster_mpi"], bindirs=["/venv/bin", "/usr/bin"])
    assert env["HPC_STATELESS_TEST_TARGET"] == live_target("node001", "/tmp/x y/node.json") == \
        "ansible://node001?ansible_inventory=/tmp/x%20y/node.json"
    assert (env["HPC_STATELESS_TEST_IMAGE"], env["HPC_STATELESS_TEST_ROOT"]) == ("", "")
    assert (env["HPC_STATELESS_TEST_INSTANCE"], env["HPC_STATELESS_TEST_CHAIN"]) == ("cluster_mpi", "base,cluster_mpi")
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert env["HPC_STATELESS_MOLECULE_INVENTORY"] == "/inv" and env["HPC_STATELESS_WAIVERS"] == "/w.yml"


def test_run_error_is_one_error_check_never_passed():
    check = run_error("node003: unreachable " + "x" * 5000)
    assert (check["name"], check["result"], check["passed"]) == (RUN_CHECK, "error", False)
    assert len(check["detail"]) == 2000 and bad_checks([check]) == [check]


def test_pytest_command_is_one_process_with_a_junit_report():
    argv = pytest_command("/py", "/suite", "/tmp/r.xml", ["/suite/_shared/tests", "/suite/base/tests"])
    assert argv[:3] == ["/py", "-m", "pytest"]
    assert "--junitxml=/tmp/r.xml" in argv and argv[-2:] == ["/suite/_shared/tests", "/suite/base/tests"]


# -- the digest of the checks a record is made with ----------------------------------------------------------
def _suite_tree(root):
    (root / "_shared/tests").mkdir(parents=True)
    (root / "_shared/tests/test_baseline.py").write_text("def test_a():\n    pass\n")
    (root / "_shared/waivers.yml").write_text("---\n[]\n")
    return root


def test_the_digest_changes_with_a_check_a_waiver_or_a_site_file_and_nothing_else(tmp_path):
    from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import suite_digest
    root = _suite_tree(tmp_path / "molecule")
    site = tmp_path / "site_waivers.yml"
    site.write_text("---\n[]\n")
    first = suite_digest([str(root), str(site)])
    assert suite_digest([str(root), str(site)]) == first
    # A compiled cache or an unrelated file is not a check.
    (root / "_shared/tests/__pycache__").mkdir()
    (root / "_shared/tests/__pycache__/x.pyc").write_bytes(b"\0")
    (root / "README.md").write_text("notes")
    assert suite_digest([str(root), str(site)]) == first
    (root / "_shared/tests/test_baseline.py").write_text("def test_a():\n    assert False\n")
    changed_check = suite_digest([str(root), str(site)])
    assert changed_check != first
    (root / "_shared/waivers.yml").write_text("---\n- id: x\n  reason: y\n")
    changed_waiver = suite_digest([str(root), str(site)])
    assert changed_waiver != changed_check
    site.write_text("---\n- id: z\n  reason: w\n")
    assert suite_digest([str(root), str(site)]) != changed_waiver


def test_the_digest_does_not_follow_links_and_names_a_missing_path(tmp_path):
    from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import SuiteError, suite_digest
    root = _suite_tree(tmp_path / "molecule")
    outside = tmp_path / "outside.py"
    outside.write_text("secret = 1\n")
    before = suite_digest([str(root)])
    (root / "_shared/tests/linked.py").symlink_to(outside)
    assert suite_digest([str(root)]) == before
    outside.write_text("secret = 2\n")
    assert suite_digest([str(root)]) == before
    with pytest.raises(SuiteError, match="nowhere.yml does not exist"):
        suite_digest([str(root), str(tmp_path / "nowhere.yml")])
