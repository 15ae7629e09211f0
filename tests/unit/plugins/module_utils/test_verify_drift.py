"""module_utils/_verify/drift.py: the drift of a live node from the version the boot tree serves it, and the
filters of playbooks/compliance.yml (plugins/filter/drift.py). The node's facts are the registered results
Ansible hands the filter; playbooks/compliance.yml against booted nodes: tests/integration/test_compliance_drift.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.filter import drift as drift_filters
from ansible_collections.hpc.stateless.plugins.module_utils._verify import drift
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import Check

KEY = "a" * 64
MANIFEST = {"image": "compute", "version": "v2", "artifacts": [{"file": "initrd.cpio.zst"}], "layer": "slurm",
            "layer_keys": {"slurm": KEY},
            "packages": [{"name": "bash", "version": "5.2-1"}, {"name": "libc6", "version": "2.36-9", "architecture": "amd64"},
                         {"name": "libc6", "version": "2.36-9", "architecture": "i386"}]}
RELEASE = f"IMAGE=compute\nVERSION=v2\nLAYER=slurm\nLAYER_KEY={KEY}\nBUILD_TIME=2026-11-01T00:00:00Z\n"


def slurped(text: str) -> dict:
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "failed": False}


def package_facts(**versions: str) -> dict:
    return {"ansible_facts": {"packages": {name: [{"version": v, "arch": "amd64"}] for name, v in versions.items()}}}


PACKAGES = package_facts(bash="5.2-1", libc6="2.36-9")
SINCE = "since\t1795625405.785859000\n"


def search(*paths: str) -> dict:
    return {"rc": 0, "stdout": SINCE + "".join(f"1795625441.6\t{p}\n" for p in paths), "stderr": ""}


def judge(release=None, packages=None, changed=None, served=..., waivers=(), cap=drift.FINDINGS_CAP):
    served = MANIFEST if served is ... else served
    checks, facts = drift.drift_checks(image="compute", boot_root="/srv/tftp", served=served,
                                       release=slurped(RELEASE) if release is None else release,
                                       packages=PACKAGES if packages is None else packages,
                                       changed=search() if changed is None else changed,
                                       waivers=drift.parse_waivers(list(waivers)), cap=cap)
    return {c.name: c for c in checks}, facts


def test_a_fresh_node_passes_every_check():
    checks, facts = judge()
    assert list(checks) == list(drift.CHECKS)
    assert all(c.result == "passed" and c.passed for c in checks.values()), checks
    assert facts == {"served": "compute v2", "booted": "compute v2", "package_differences": 0,
                     "since": "2026-11-25T16:50:05Z", "changed_files": 0}


def test_a_node_booted_from_another_version_names_both():
    checks, _facts = judge(release=slurped(RELEASE.replace("VERSION=v2", "VERSION=v1")))
    check = checks[drift.RELEASE_CHECK]
    assert check.result == "failed" and not check.passed
    assert "booted from compute v1; the boot tree serves compute v2 (/srv/tftp/compute)" in check.detail


def test_a_republished_version_is_found_by_its_layer_key():
    checks, _facts = judge(release=slurped(RELEASE.replace(KEY, "b" * 64)))
    assert checks[drift.RELEASE_CHECK].result == "failed"
    assert "key bbbbbbbbbbbb" in checks[drift.RELEASE_CHECK].detail


def test_packages_added_removed_and_changed_are_named():
    checks, facts = judge(packages=package_facts(bash="5.2-2", vim="9.0-1"))
    check = checks[drift.PACKAGES_CHECK]
    assert check.result == "failed" and facts["package_differences"] == 3
    assert check.detail.startswith("3 packages differ from the served manifest: ")
    for finding in ("bash 5.2-2 installed, the image has 5.2-1", "libc6 2.36-9 of the image is not installed",
                    "vim 9.0-1 installed, not in the image"):
        assert finding in check.detail


def test_changed_files_are_listed_capped_with_their_count():
    paths = [f"/etc/f{i:02d}" for i in range(5)]
    checks, facts = judge(changed=search(*paths), cap=2)
    check = checks[drift.FILES_CHECK]
    assert check.result == "failed" and facts["changed_files"] == 5
    assert "5 files changed since the boot finished (2026-11-25T16:50:05Z): /etc/f00; /etc/f01; ... and 3 more" \
        == check.detail


def test_waivers_excuse_findings_or_a_whole_check_with_their_reason():
    checks, _facts = judge(changed=search("/etc/motd", "/opt/site/x"),
                           waivers=[{"check": drift.FILES_CHECK, "item": "/opt/site/*", "reason": "site scratch"}])
    assert checks[drift.FILES_CHECK].result == "failed"
    assert checks[drift.FILES_CHECK].detail.endswith("/etc/motd (1 waived)")
    checks, _facts = judge(changed=search("/opt/site/x"),
                           waivers=[{"check": drift.FILES_CHECK, "item": "/opt/site/*", "reason": "site scratch"}])
    assert checks[drift.FILES_CHECK].result == "passed" and "(1 waived)" in checks[drift.FILES_CHECK].detail
    checks, _facts = judge(packages=package_facts(bash="5.2-1", libc6="2.36-9", strace="6.1-1"),
                           waivers=[{"check": drift.PACKAGES_CHECK, "reason": "debugging allowed"}])
    check = checks[drift.PACKAGES_CHECK]
    assert (check.result, check.passed, check.waiver) == ("waived", True, "debugging allowed")
    assert "strace 6.1-1" in check.detail


@pytest.mark.parametrize("waivers, message", [
    ("x", "must be a list"),
    ([{"check": "drift::nope", "reason": "r"}], "'check' must be one of"),
    ([{"check": drift.FILES_CHECK}], "has no reason"),
    ([{"check": drift.FILES_CHECK, "reason": "r", "item": 3}], "'item' must be"),
])
def test_bad_waivers_name_the_entry(waivers, message):
    with pytest.raises(drift.DriftError, match=message) as info:
        drift.parse_waivers(waivers)
    assert "hpc_stateless_compliance_waivers" in str(info.value)


def test_what_could_not_be_read_is_an_error_never_passed_nor_waived():
    unreachable = {"unreachable": True, "msg": "Failed to connect to the host via ssh"}
    checks, _facts = judge(release=unreachable, packages=unreachable, changed=unreachable,
                           waivers=[{"check": c, "reason": "r"} for c in drift.CHECKS])
    for check in checks.values():
        assert (check.result, check.passed) == ("error", False), check
        assert "unreachable" in check.detail and "Failed to connect" in check.detail
    failed = {"rc": 3, "stdout": "", "stderr": "systemd has not finished booting", "failed": False}
    checks, _facts = judge(changed=failed, packages={"failed": True, "msg": "python3-apt is missing"})
    assert checks[drift.FILES_CHECK].result == "error"
    assert "systemd has not finished booting" in checks[drift.FILES_CHECK].detail
    assert checks[drift.PACKAGES_CHECK].result == "error" and "python3-apt" in checks[drift.PACKAGES_CHECK].detail
    checks, _facts = judge(served=None)
    assert checks[drift.RELEASE_CHECK].result == "error" and "not served under /srv/tftp" in checks[drift.RELEASE_CHECK].detail
    assert checks[drift.PACKAGES_CHECK].result == "error"
    checks, _facts = judge(changed={"rc": 0, "stdout": "garbage\n"})
    assert checks[drift.FILES_CHECK].result == "error" and "no 'since' line" in checks[drift.FILES_CHECK].detail
    checks, _facts = judge(release=slurped("NAME=Debian\n"))
    assert checks[drift.RELEASE_CHECK].result == "error" and "names no IMAGE" in checks[drift.RELEASE_CHECK].detail


def test_parse_find_rejects_a_line_that_is_no_change():
    assert drift.parse_find(SINCE + "1.5\t/b\n2.5\t/a\n") == (1795625405.785859, [("/a", 2.5), ("/b", 1.5)])
    with pytest.raises(drift.DriftError, match="bad change time"):
        drift.parse_find(SINCE + "x\t/a\n")
    with pytest.raises(drift.DriftError, match="no '<ctime>"):
        drift.parse_find(SINCE + "/a\n")


def test_find_command_prunes_every_runtime_path_and_is_valid_bash():
    command = drift.find_command()
    for path, why in drift.RUNTIME_PATHS:
        assert f"-path '{path}'" in command and why
    assert subprocess.run(["bash", "-n", "-c", command], check=False).returncode == 0
    with pytest.raises(drift.DriftError, match="absolute path"):
        drift.find_command(["scratch"])
    with pytest.raises(AnsibleFilterError, match="hpc_stateless_compliance_runtime_paths"):
        drift_filters.compliance_find_command(["/scr'atch"])
    assert "-path '/scratch'" in drift_filters.compliance_find_command(["/scratch"])


WATCH_PLANT = r"""
set -e
for place in /run /dev/shm /tmp /var/tmp /var/spool; do mount -t tmpfs drift-test "$place"; done
mkdir -p /run/systemd/system/multi-user.target.wants /run/systemd/system/ssh.service.d /run/systemd/transient \
    /run/lock /var/spool/cron/crontabs /var/spool/cron/atjobs /var/spool/mail /var/spool/slurmd/job00042 \
    /tmp/ansible-tmp-17-42 /tmp/job /var/tmp/kit
since=$(date +%s.%N)
sleep 0.02
exe() { printf '#!/bin/sh\n' > "$1"; chmod 0755 "$1"; }
# what runs: reported
exe /tmp/job/miner; exe /dev/shm/.x; exe /var/tmp/kit/run.sh; exe /run/helper; exe /tmp/ansible-tmp-17-42/payload
printf '* * * * * root /dev/shm/.x\n' > /var/spool/cron/crontabs/root
exe /var/spool/cron/atjobs/a0000101a8c2e3
printf '[Service]\nExecStart=/dev/shm/.x\n' > /run/systemd/system/backdoor.service
ln -s ../backdoor.service /run/systemd/system/multi-user.target.wants/backdoor.service
printf '[Service]\nExecStartPre=/dev/shm/.x\n' > /run/systemd/system/ssh.service.d/override.conf
printf '[Service]\nExecStart=/tmp/job/miner\n' > /run/systemd/transient/run-u7.service
# a service's run-time files and the documented exceptions: quiet
echo 42 > /run/sshd.pid; : > /run/lock/node.lck; echo data > /tmp/job/output.dat; echo mail > /var/spool/mail/root
"$PYTHON" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' /run/app.sock
printf '[Scope]\n' > /run/systemd/transient/session-5.scope; printf '[Slice]\n' > /run/systemd/transient/user-0.slice
exe /var/spool/slurmd/job00042/slurm_script; exe /tmp/ansible-tmp-17-42/AnsiballZ_command.py
printf 'since\t%s\n' "$since"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts tmpfs over the run-time places in a mount namespace: root only")
def test_what_runs_from_a_run_time_place_is_reported_and_a_services_files_are_not():
    """The watched places are fresh tmpfs mounts in a private mount namespace of this host (nothing of the host's
    own /run or /tmp is seen or touched); the search is drift.watch_command, as the node runs it after the search
    of the root."""
    command = WATCH_PLANT + drift.watch_command("/tmp")
    # From /, with the interpreter's real file: the tmpfs mounts hide a checkout under /tmp (its venv too), and the
    # shell's working directory with it.
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", command],
                          capture_output=True, text=True, check=False, cwd="/",
                          env={**os.environ, "PYTHON": os.path.realpath(sys.executable)})
    assert proc.returncode == 0, proc.stderr
    _since, found = drift.parse_find(proc.stdout)
    assert [path for path, _ctime in found] == sorted([
        "/dev/shm/.x", "/run/helper", "/run/systemd/system/backdoor.service",
        "/run/systemd/system/multi-user.target.wants/backdoor.service", "/run/systemd/system/ssh.service.d/override.conf",
        "/run/systemd/transient/run-u7.service", "/tmp/ansible-tmp-17-42/payload", "/tmp/job/miner",
        "/var/spool/cron/atjobs/a0000101a8c2e3", "/var/spool/cron/crontabs/root", "/var/tmp/kit/run.sh"])


def test_the_search_of_the_root_is_followed_by_the_watch_with_the_checks_remote_tmp():
    command = drift_filters.compliance_find_command([], remote_tmp="/run/hpc-compliance")
    assert command.endswith(drift.watch_command("/run/hpc-compliance"))
    assert "! -path '/run/hpc-compliance/ansible-tmp-*/AnsiballZ_*.py'" in command
    assert subprocess.run(["bash", "-n", "-c", command], check=False).returncode == 0
    with pytest.raises(drift.DriftError, match="remote_tmp 'tmp'"):
        drift.watch_command("tmp")


def test_filter_report_junit_and_message():
    served = {"compute": json.dumps(MANIFEST)}
    report = drift_filters.compliance_drift("node001", image="compute", boot_root="/srv/tftp", served=served,
                                            release=slurped(RELEASE), packages=PACKAGES, changed=search("/etc/motd"))
    assert (report["node"], report["passed"], report["booted"], report["served"]) == (
        "node001", False, "compute v2", "compute v2")
    assert [c["result"] for c in report["checks"]] == ["passed", "passed", "failed"]
    suite = ET.fromstring(drift_filters.compliance_junit(report)).find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    assert suite.find("testcase[@name='drift::files-changed-since-boot']/failure") is not None
    message = drift_filters.compliance_drift_message([report, {**report, "node": "node002", "checks": []}])
    assert message == "node001: drift::files-changed-since-boot failed: 1 files changed since the boot finished " \
                      "(2026-11-25T16:50:05Z): /etc/motd"
    # a node without an image is an error, not a crash
    report = drift_filters.compliance_drift("node003", image="", boot_root="/srv/tftp", served=served,
                                            release={}, packages={}, changed={})
    assert [c["result"] for c in report["checks"]] == ["error"] and "hpc_stateless_boot_image" in report["checks"][0]["detail"]
    with pytest.raises(AnsibleFilterError, match="manifest.json"):
        drift_filters.compliance_drift("node001", image="compute", boot_root="/srv/tftp", served={"compute": "{"},
                                       release=slurped(RELEASE), packages=PACKAGES, changed=search())
    assert Check.from_dict("x", report["checks"][0]).result == "error"


def test_with_suite_adds_the_suites_checks_and_fails_the_node_on_one():
    checks, facts = judge()
    report = drift.node_report("node001", "compute", "/srv/tftp", list(checks.values()), facts, 0)
    good = [{"name": "base/test_base::test_sysctl", "passed": True, "result": "passed", "waiver": "", "detail": ""},
            {"name": "_shared/test_baseline::test_no_ssh_host_keys", "passed": True, "result": "skipped",
             "waiver": "", "detail": "needs the image at rest"}]
    merged = drift.with_suite(report, good, 3.5)
    assert merged["passed"] and [c["name"] for c in merged["checks"]][:3] == list(drift.CHECKS)
    assert merged["suite"] == {"checks": 2, "seconds": 3.5, "counts": {"passed": 1, "failed": 0, "error": 0,
                                                                       "waived": 0, "skipped": 1}}
    assert report["passed"] and len(report["checks"]) == 3  # the drift report itself is left as it was
    bad = dict(good[0], passed=False, result="failed", detail="assert '1' == '0'\nTraceback ...")
    failed = drift.with_suite(report, [bad, good[1]])
    assert not failed["passed"]
    assert drift.findings_message([failed]) == "node001: base/test_base::test_sysctl failed: assert '1' == '0'"
    # a suite that ran nothing proves nothing
    empty = drift.with_suite(report, [])
    assert not empty["passed"] and empty["checks"][-1]["name"] == "suite::run" and empty["suite"]["counts"]["error"] == 1


def test_a_report_in_one_line():
    """What compliance.yml prints per node: the failed checks, the suite's counts and time, booted and served."""
    report = drift.node_report("node001", "compute", "/srv/tftp", [Check("release", True, ""), Check(
        "packages", False, "2 packages differ", "failed")], {"booted": "v1", "served": "v2"}, 0)
    assert drift_filters.compliance_report_line(report) == \
        "FAILED (packages; suite not run in 0s) (booted v1, served v2)"
    suite = drift.with_suite(drift.node_report("node002", "compute", "/srv/tftp", [], {"served": ""}, 0),
                             [{"name": "t", "passed": True, "result": "passed"}], 1.5)
    assert drift.report_line(suite) == (f"passed (no drift, every check passed or waived; suite "
                                        f"{suite['suite']['counts']} in 1.5s) (booted ?, served nothing)")
    with pytest.raises(AnsibleFilterError, match="compliance_report_line: expects a report"):
        drift_filters.compliance_report_line(["not", "a", "report"])
