"""Lynis in the verify gate (module_utils/_verify/lynis.py and the hpc.stateless.lynis_* filters): the report
parser, the waiver files, the verdict, the boot's bind arguments and profile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.filter import lynis as lynis_filter
from ansible_collections.hpc.stateless.plugins.module_utils._verify import lynis

REPO = Path(__file__).resolve().parents[4]
COLLECTION_WAIVERS = REPO / "roles" / "hpc_stateless" / "files" / "lynis-waivers.yml"

# Lines as Lynis 3.0.8 wrote them in the booted default image (trimmed).
REPORT = """\
# Lynis Report
report_version_major=1
lynis_version=3.0.8
tests_executed=BOOT-5264|SSH-7408|NETW-3200|AUTH-9328|
tests_skipped=KRNL-6000|KRNL-5830|MALW-3288|
suggestion[]=LYNIS|This release is more than 4 months old. Check the website or GitHub to see if there is an update available.|-|-|
warning[]=PKGS-7388|Can't find any security repository in /etc/apt/sources.list or sources.list.d directory|-|-|
suggestion[]=SSH-7408|Consider hardening SSH configuration|Port (set 22 to )|-|
suggestion[]=SSH-7408|Consider hardening SSH configuration|MaxSessions (set 10 to 2)|-|
suggestion[]=AUTH-9328|Default umask in /etc/login.defs could be more strict like 027|-|-|
hardening_index=81
report_datetime_end=2026-11-25 16:02:31
"""


def write(tmp_path: Path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def test_the_report_reads_index_findings_and_skipped_tests():
    report = lynis.parse_report(REPORT)
    assert report.hardening_index == 81
    assert report.version == "3.0.8"
    assert report.tests_executed == 4
    assert report.tests_skipped == ("KRNL-6000", "KRNL-5830", "MALW-3288")
    kinds = [(f.kind, f.test, f.details) for f in report.findings]
    # warnings first, then suggestions, each in report order; "-" reads as empty
    assert kinds == [("warning", "PKGS-7388", ""), ("suggestion", "LYNIS", ""),
                     ("suggestion", "SSH-7408", "Port (set 22 to )"),
                     ("suggestion", "SSH-7408", "MaxSessions (set 10 to 2)"), ("suggestion", "AUTH-9328", "")]


@pytest.mark.parametrize("text, said", [
    ("", "the run did not finish"),
    (REPORT.replace("hardening_index=81\n", ""), "the run ended"),
    (REPORT.replace("hardening_index=81", "hardening_index="), "the run ended"),
])
def test_a_report_without_hardening_index_is_an_error_never_a_pass(text, said):
    with pytest.raises(lynis.LynisError, match=f"/run/r.dat: no hardening_index \\({said}"):
        lynis.parse_report(text, "/run/r.dat")


def test_waivers_excuse_findings_by_test_and_item_but_never_raise_the_score(tmp_path):
    path = write(tmp_path, "w.yml", {"waivers": [
        {"check": "LYNIS", "reason": "host package"},
        {"check": "PKGS-7388", "reason": "image sources"},
        {"check": "SSH-7408", "item": "Port", "reason": "port 22 stays"},
        {"check": "AUTH-9328", "reason": "site umask"},
    ]})
    verdict = lynis.judge(lynis.parse_report(REPORT), lynis.load_waivers([path]), 80)
    assert not verdict.passed
    assert verdict.score == 81
    assert verdict.unwaived == ["suggestion SSH-7408: Consider hardening SSH configuration (MaxSessions (set 10 to 2))"]
    by_id = {c["id"]: c for c in verdict.checks}
    assert by_id["lynis/hardening-index"]["passed"] is True
    assert by_id["lynis/SSH-7408/Port (set 22 to )"] == {
        "id": "lynis/SSH-7408/Port (set 22 to )", "name": "Lynis suggestion SSH-7408: Consider hardening SSH "
        "configuration (Port (set 22 to ))", "passed": True, "result": "waived", "waiver": "port 22 stays", "detail": ""}
    assert by_id["lynis/SSH-7408/MaxSessions (set 10 to 2)"]["result"] == "failed"
    assert by_id["lynis/PKGS-7388"]["waiver"] == "image sources"
    assert "MaxSessions" in verdict.message and "not waived" in verdict.message


def test_every_finding_waived_and_the_minimum_reached_passes(tmp_path):
    path = write(tmp_path, "w.yml", {"waivers": [{"check": t, "reason": "r"} for t in
                                                 ("LYNIS", "PKGS-7388", "SSH-7408", "AUTH-9328")]})
    verdict = lynis.judge(lynis.parse_report(REPORT), lynis.load_waivers([path]), 81)
    assert verdict.passed, verdict.message
    assert verdict.message.startswith("Lynis hardening index 81 (minimum 81); 5 finding(s), all waived")
    assert lynis.judge(lynis.parse_report(REPORT), lynis.load_waivers([path]), 82).passed is False


def test_below_the_minimum_fails_naming_the_score_and_the_variable(tmp_path):
    path = write(tmp_path, "w.yml", {"waivers": [{"check": t, "reason": "r"} for t in
                                                 ("LYNIS", "PKGS-7388", "SSH-7408", "AUTH-9328")]})
    verdict = lynis.judge(lynis.parse_report(REPORT), lynis.load_waivers([path]), 90)
    assert not verdict.passed
    assert "hardening index 81 is below the minimum 90 (hpc_stateless_verify_lynis_min_score)" in verdict.message
    assert verdict.checks[0]["result"] == "failed"


def test_skipped_tests_are_recorded_with_their_reason_and_written_to_the_profile(tmp_path):
    path = write(tmp_path, "w.yml", {"skip_tests": [{"test": "KRNL-6000", "reason": "host sysctl"}], "waivers": []})
    waivers = lynis.load_waivers([path])
    assert lynis.profile_text(waivers).splitlines()[1:] == [f"# host sysctl ({path})", "skip-test=KRNL-6000"]
    checks = {c["id"]: c for c in lynis.judge(lynis.parse_report(REPORT), waivers, 0).checks}
    assert checks["lynis/KRNL-6000"]["result"] == "skipped" and checks["lynis/KRNL-6000"]["waiver"] == "host sysctl"
    # a test the profile skips but Lynis ran anyway is a failure, not a silent pass
    ran = lynis.judge(lynis.parse_report(REPORT.replace("KRNL-6000|", "")), waivers, 0)
    assert "skipped test KRNL-6000 ran anyway" in ran.unwaived


@pytest.mark.parametrize("data, message", [
    ({"waivers": [{"check": "SSH-7408"}]}, r"waivers\[0\] \(SSH-7408\) needs a 'reason'"),
    ({"waivers": [{"check": "ssh", "reason": "r"}]}, r"waivers\[0\] needs 'check', a Lynis test id"),
    ({"waivers": [{"check": "SSH-7408", "reason": "r", "items": "Port"}]}, r"unknown keys \['items'\]"),
    ({"waivers": [{"check": "SSH-7408", "reason": "r", "item": " "}]}, r"has an empty 'item'"),
    ({"skip_tests": [{"test": "KRNL-6000", "reason": ""}]}, r"skip_tests\[0\] \(KRNL-6000\) needs a 'reason'"),
    ({"waiver": []}, "expected a mapping with a 'waivers' list"),
    ([], "expected a mapping with a 'waivers' list"),
])
def test_a_bad_waiver_file_names_the_file_entry_and_what_is_missing(tmp_path, data, message):
    path = write(tmp_path, "site-lynis.yml", data)
    with pytest.raises(lynis.LynisError, match=f"site-lynis.yml: .*{message}"):
        lynis.load_waivers([path])


def test_a_missing_waiver_file_is_an_error_naming_the_variable(tmp_path):
    with pytest.raises(lynis.LynisError, match="nope.yml: No such file.*hpc_stateless_verify_lynis_waivers"):
        lynis.load_waivers([str(tmp_path / "nope.yml")])


def test_the_collection_waiver_file_loads_and_gives_every_entry_a_reason():
    waivers = lynis.load_waivers([str(COLLECTION_WAIVERS)])
    assert waivers.waivers and waivers.skips
    assert all(len(w.reason) > 20 for w in waivers.waivers + waivers.skips)
    assert {s.test for s in waivers.skips} == {"KRNL-6000", "KRNL-5830", "FILE-6344", "PKGS-7392"}


def test_binds_show_the_host_lynis_read_only_under_run(tmp_path):
    layout = {name: (str(tmp_path / name.replace("/", "_")),) for name in ("lynis", "include", "db", "default.prf")}
    for (path,) in layout.values():
        Path(path).mkdir()
    install = lynis.host_install(layout, {"plugins": (str(tmp_path / "absent"),)})
    assert lynis.nspawn_binds(install) == [f"--bind-ro={tmp_path}/{n}:/run/hpc-stateless-lynis/{n}"
                                           for n in ("db", "default.prf", "include", "lynis")]


def test_a_build_host_without_lynis_is_told_how_to_install_it(tmp_path):
    with pytest.raises(lynis.LynisError, match=r"not installed on the build host: missing lynis \(.*/nolynis\)"
                       r".*apt-get install lynis.*hpc_stateless_verify_lynis: false"):
        lynis.host_install({"lynis": (str(tmp_path / "nolynis"),)}, {})


def test_the_filter_binds_the_debian_package_and_nothing_when_off():
    assert os.path.exists("/usr/sbin/lynis"), "Lynis is not installed on this host: run make setup"
    args = lynis_filter.lynis_nspawn_args(True)
    assert "--bind-ro=/usr/sbin/lynis:/run/hpc-stateless-lynis/lynis" in args
    assert "--bind-ro=/usr/share/lynis/include:/run/hpc-stateless-lynis/include" in args
    assert lynis_filter.lynis_nspawn_args(False) == []


def test_the_command_runs_from_the_bound_directory_with_the_profile():
    assert lynis_filter.lynis_argv("/run/r.dat", "/run/l.log", "/run/p.prf") == [
        "sh", "/run/hpc-stateless-lynis/lynis", "audit", "system", "--usecwd", "--quick", "--no-colors",
        "--report-file", "/run/r.dat", "--log-file", "/run/l.log", "--profile", "/run/p.prf"]
    with pytest.raises(AnsibleFilterError, match="absolute path of the report file"):
        lynis_filter.lynis_argv("r.dat")


def test_the_boot_paths_are_under_run_and_the_workdir_is_the_bind():
    paths = {name: lynis_filter.lynis_boot_path(name) for name in ("workdir", "profile", "report")}
    assert all(path.startswith("/run/") for path in paths.values()) and len(set(paths.values())) == 3
    assert paths["workdir"] == lynis.MOUNT_POINT
    with pytest.raises(AnsibleFilterError, match="unknown name 'log'.*profile, report, workdir"):
        lynis_filter.lynis_boot_path("log")


FAKE_LYNIS = """\
# Stands in for Lynis (the real one needs a booted system): screen output, then the report at --report-file.
while [ $# -gt 0 ]; do [ "$1" = --report-file ] && report=$2; shift; done
echo "[+] Initializing program"
[ -n "$FAIL" ] && { echo "lynis: broken" >&2; exit "$FAIL"; }
printf 'hardening_index=82\\nwarning[]=SSH-7408|Port|-|-|\\n' > "$report"
"""


@pytest.mark.parametrize("fail", ["", "3"])
def test_print_report_hands_over_the_report_and_keeps_lyniss_exit_status(tmp_path, fail):
    import subprocess  # pylint: disable=import-outside-toplevel
    (tmp_path / "lynis").write_text(FAKE_LYNIS, encoding="utf-8")
    argv = lynis.lynis_argv(str(tmp_path / "r.dat"), "", "", mount_point=str(tmp_path), print_report=True)
    assert lynis_filter.lynis_argv("/run/r.dat", "", "", True)[-len(lynis.lynis_argv("/run/r.dat")):] == \
        lynis.lynis_argv("/run/r.dat")
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False,
                          env=dict(os.environ, FAIL=fail))
    if fail:
        assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", "lynis: broken\n")
    else:
        assert proc.returncode == 0 and proc.stdout == "hardening_index=82\nwarning[]=SSH-7408|Port|-|-|\n"
        assert lynis.parse_report(proc.stdout).hardening_index == 82
    with pytest.raises(AnsibleFilterError, match="print_report expects true or false"):
        lynis_filter.lynis_argv("/run/r.dat", "", "", "yes")


ZOMBIE_LYNIS = """\
# Stands in for Lynis: leaves a real zombie behind (a sleep whose parent, exec'd into a longer sleep, never reaps
# it) and reports PROC-3612 as Lynis does when its ps sees one.
while [ $# -gt 0 ]; do [ "$1" = --report-file ] && report=$2; shift; done
( sleep 0 & exec sleep 30 ) &
echo $! > holder.pid
sleep 1
printf 'hardening_index=82\\nsuggestion[]=PROC-3612|Check the output of ps for dead or zombie processes|-|-|\\n' > "$report"
"""


def test_a_zombie_finding_brings_the_process_table_and_the_verdict_names_the_zombie(tmp_path):
    import signal  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    (tmp_path / "lynis").write_text(ZOMBIE_LYNIS, encoding="utf-8")
    argv = lynis.lynis_argv(str(tmp_path / "r.dat"), "", "", mount_point=str(tmp_path), print_report=True, timeout=60)
    assert argv[:3] == ["timeout", "--kill-after=10", "60"]
    try:
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    finally:
        os.kill(int((tmp_path / "holder.pid").read_text()), signal.SIGKILL)
    assert proc.returncode == 0, proc.stderr
    report, marker, table = proc.stdout.partition(lynis.PROCESS_TABLE_MARKER + "\n")
    header = ["PID", "PPID", "STAT", "COMMAND", "COMMAND"]
    assert marker and report.startswith("hardening_index=82") and table.split()[:5] == header
    parsed = lynis.parse_report(proc.stdout)
    assert [f.test for f in parsed.findings] == ["PROC-3612"] and parsed.hardening_index == 82
    zombies = [row for row in parsed.stuck_processes() if " sleep " in f" {row} " and " Z" in f" {row}"]
    assert zombies, parsed.processes
    verdict = lynis.judge(parsed, lynis.Waivers(), 80)
    assert not verdict.passed and verdict.unwaived[0].startswith("suggestion PROC-3612: Check the output of ps")
    assert "were still in state Z, X or D (pid ppid stat comm args): " in verdict.message
    assert zombies[0] in verdict.message
    assert zombies[0] in next(c for c in verdict.checks if c["id"] == "lynis/PROC-3612")["detail"]


def test_a_zombie_gone_when_lynis_ended_is_named_as_such_and_no_table_without_a_process_finding():
    report = ("hardening_index=82\nsuggestion[]=PROC-3612|Check the output of ps for dead or zombie processes|-|-|\n"
              f"{lynis.PROCESS_TABLE_MARKER}\n  PID  PPID STAT COMMAND  COMMAND\n    1     0 Ss   systemd  /sbin/init\n")
    verdict = lynis.judge(lynis.parse_report(report), lynis.Waivers(), 80)
    assert "no process was in state Z, X or D: Lynis saw one that was gone moments later" in verdict.message
    assert "1 0 Ss systemd /sbin/init" in verdict.message
    plain = lynis.parse_report("hardening_index=82\nwarning[]=SSH-7408|Port|-|-|\n")
    assert plain.processes == () and "process" not in lynis.judge(plain, lynis.Waivers(), 80).message


def test_the_timeout_argument_is_whole_seconds():
    assert lynis_filter.lynis_argv("/run/r.dat", "", "", True, "1800")[:3] == ["timeout", "--kill-after=10", "1800"]
    assert lynis_filter.lynis_argv("/run/r.dat")[0] == "sh"
    for bad in (-1, "soon", True):
        with pytest.raises(AnsibleFilterError, match="timeout expects whole seconds.*hpc_stateless_verify_lynis_timeout"):
            lynis_filter.lynis_argv("/run/r.dat", "", "", True, bad)


def test_the_verdict_filter_reads_the_collection_file_then_the_sites(tmp_path):
    site = write(tmp_path, "site.yml", {"waivers": [{"check": "AUTH-9328", "reason": "site keeps umask 022"}]})
    verdict = lynis_filter.lynis_verdict(REPORT, [site], "80")
    by_id = {c["id"]: c for c in verdict["checks"]}
    assert by_id["lynis/AUTH-9328"]["waiver"] == "site keeps umask 022"
    assert by_id["lynis/SSH-7408/Port (set 22 to )"]["result"] == "waived"      # the collection's file
    assert by_id["lynis/KRNL-6000"]["result"] == "skipped"
    with pytest.raises(AnsibleFilterError, match="hpc_stateless_verify_lynis_waivers: expects a list"):
        lynis_filter.lynis_verdict(REPORT, site)
    with pytest.raises(AnsibleFilterError, match="hpc_stateless_verify_lynis_min_score: expected a whole number"):
        lynis_filter.lynis_verdict(REPORT, [], "eighty")


def test_profile_settings_come_before_the_skips_each_with_its_reason(tmp_path):
    path = write(tmp_path, "w.yml", {"profile": [{"setting": "hostid=ab12", "reason": "no MAC in the boot"}],
                                     "skip_tests": [{"test": "KRNL-6000", "reason": "host sysctl"}]})
    assert lynis.profile_text(lynis.load_waivers([path])).splitlines()[1:] == [
        f"# no MAC in the boot ({path})", "hostid=ab12", f"# host sysctl ({path})", "skip-test=KRNL-6000"]


@pytest.mark.parametrize("entry", [{"setting": "hostid=1"}, {"setting": "no equals sign", "reason": "r"},
                                   {"setting": "skip-test=KRNL-6000", "reason": "r"},
                                   {"setting": "hostid=1", "reason": "r", "why": "x"}])
def test_a_bad_profile_setting_is_named(tmp_path, entry):
    path = write(tmp_path, "w.yml", {"profile": [entry]})
    with pytest.raises(lynis.LynisError, match=r"w.yml: profile\[0\]"):
        lynis.load_waivers([path])
