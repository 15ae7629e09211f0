"""OpenSCAP in the verify gate (module_utils/_verify/openscap.py): the XCCDF results, the collection's tailoring and
waivers, the verdict, the binds and command of the boot, the kept outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ansible_collections.hpc.stateless.plugins.module_utils._verify import openscap, record

REPO = Path(__file__).resolve().parents[4]
FILES = REPO / "roles" / "hpc_stateless" / "files"
TAILORING = FILES / "openscap" / "tailoring.xml"
WAIVERS = FILES / "openscap-waivers.yml"
AVERAGE = openscap.SSG_PROFILE + "anssi_np_nt28_average"
R = openscap.SSG_RULE


def results_xml(rules: dict[str, str], profile: str = AVERAGE) -> str:
    """An XCCDF 1.2 results document as oscap writes it (Benchmark with Rules, then a TestResult), trimmed."""
    defs = "".join(f'<Rule id="{R}{rule}" selected="false"><title>Title of {rule}</title></Rule>' for rule in rules)
    results = "".join(f'<rule-result idref="{R}{rule}" severity="medium"><result>{result}</result></rule-result>'
                      for rule, result in rules.items())
    return (f'<?xml version="1.0"?><Benchmark xmlns="{openscap.XCCDF_NS}" id="xccdf_org.ssgproject.content_benchmark_DEBIAN-11">'
            f'<Group id="xccdf_org.ssgproject.content_group_system">{defs}</Group>'
            f'<TestResult id="xccdf_org.open-scap_testresult_x"><profile idref="{profile}"/>'
            f'<platform idref="cpe:/o:debian:debian_linux:11"/>{results}</TestResult></Benchmark>')


def tailoring_xml(selects: str) -> str:
    return (f'<Tailoring xmlns="{openscap.XCCDF_NS}" id="xccdf_t_tailoring_t"><version time="2026-01-01T00:00:00">1</version>'
            f'<Profile id="xccdf_t_profile_avg" extends="{AVERAGE}"><title>t</title>{selects}</Profile></Tailoring>')


@pytest.fixture(name="tailored")
def fixture_tailored():
    return openscap.load_tailoring(tailoring_xml(
        f'<select idref="{R}partition_for_home" selected="false"><remark>no disk on a stateless node</remark></select>'),
        "t.xml")[AVERAGE]


# ---------------------------------------------------------------------------------------------- the tailoring


def test_the_collection_tailoring_tailors_the_default_and_standard_profiles_each_rule_with_a_reason():
    profiles = openscap.read_tailoring(str(TAILORING))
    assert {AVERAGE, openscap.SSG_PROFILE + "standard"} <= set(profiles)
    for profile in profiles.values():
        assert profile.id.startswith("xccdf_hpc.stateless_profile_") and profile.deselected
        assert all(rule.startswith(R) and len(reason) > 40 for rule, reason in profile.deselected.items())
    # The separate mounts a stateless node cannot have are tailored out of both; a rule that applies (sshd) is not.
    for name in (AVERAGE, openscap.SSG_PROFILE + "standard"):
        assert f"{R}partition_for_var_log_audit" in profiles[name].deselected
        assert f"{R}sshd_disable_root_login" not in profiles[name].deselected


def test_a_deselected_rule_without_a_reason_is_refused_naming_it():
    with pytest.raises(openscap.OpenscapError, match="deselects .*partition_for_home without a reason"):
        openscap.load_tailoring(tailoring_xml(f'<select idref="{R}partition_for_home" selected="false"/>'), "t.xml")


def test_a_tailoring_that_selects_a_rule_is_refused():
    with pytest.raises(openscap.OpenscapError, match="only deselects"):
        openscap.load_tailoring(tailoring_xml(f'<select idref="{R}x" selected="true"><remark>r</remark></select>'), "t.xml")


@pytest.mark.parametrize("text, match", [("<nope", "not XML"), ("<Tailoring/>", "expected an XCCDF 1.2 Tailoring"),
                                         (f'<Tailoring xmlns="{openscap.XCCDF_NS}"/>', "has no Profile")])
def test_a_bad_tailoring_file_is_named(text, match):
    with pytest.raises(openscap.OpenscapError, match=match):
        openscap.load_tailoring(text, "site-tailoring.xml")


def test_the_profile_evaluated_is_the_tailored_one_else_the_profile_itself(tailored):
    assert openscap.resolve_profile("anssi_np_nt28_average", {AVERAGE: tailored}) == ("xccdf_t_profile_avg", tailored)
    assert openscap.resolve_profile("standard", {AVERAGE: tailored}) == (openscap.SSG_PROFILE + "standard", None)
    with pytest.raises(openscap.OpenscapError, match="hpc_stateless_verify_openscap_profile"):
        openscap.profile_id("anssi average; rm -rf /")


# ---------------------------------------------------------------------------------------------- waivers


def test_the_collection_waivers_each_have_a_reason():
    waivers = openscap.load_waivers([str(WAIVERS)])
    assert set(waivers) == {"sshd_disable_root_login", "sysctl_fs_protected_symlinks", "sshd_set_keepalive_0",
                            "sshd_set_idle_timeout"}
    assert all(len(reason) > 40 for reason in waivers.values())
    live = openscap.load_waivers([str(WAIVERS.parent / "openscap-live-waivers.yml")])
    assert set(live) == {"file_permissions_systemmap"} and all(len(reason) > 40 for reason in live.values())


@pytest.mark.parametrize("data", [{"waivers": [{"rule": "x"}]}, {"waivers": [{"rule": "x", "reason": " "}]},
                                  {"waiver": []}, {"waivers": [{"rule": "x", "reason": "r", "item": "y"}]}])
def test_a_bad_waiver_is_named_with_its_file(tmp_path, data):
    path = tmp_path / "site.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(openscap.OpenscapError, match=str(path)):
        openscap.load_waivers([str(path)])


# ---------------------------------------------------------------------------------------------- results and verdict


def test_results_are_read_with_titles_profile_and_platform():
    results = openscap.parse_results(results_xml({"sshd_disable_root_login": "fail", "package_rsyslog_installed": "pass"}))
    assert results.profile == AVERAGE and results.platforms == ("cpe:/o:debian:debian_linux:11",)
    assert [(r.rule, r.result, r.title) for r in results.rules] == [
        (f"{R}sshd_disable_root_login", "fail", "Title of sshd_disable_root_login"),
        (f"{R}package_rsyslog_installed", "pass", "Title of package_rsyslog_installed")]


@pytest.mark.parametrize("text", ["", "<x", f'<Benchmark xmlns="{openscap.XCCDF_NS}"/>'])
def test_unfinished_results_are_an_error_never_a_pass(text):
    with pytest.raises(openscap.OpenscapError, match="not XML|did not finish"):
        openscap.parse_results(text)


def test_the_verdict_passes_at_the_minimum_with_failures_waived_and_lists_the_tailored_out_rules(tailored):
    rules = {f"ok{i}": "pass" for i in range(8)}
    rules.update({"sshd_disable_root_login": "fail", "banner": "notapplicable", "partition_for_home": "notselected",
                  "other_unselected": "notselected"})
    verdict = openscap.judge(openscap.parse_results(results_xml(rules)), AVERAGE, 80, tailored,
                             {"sshd_disable_root_login": "keys only", "unused_rule": "r"}, "content x")
    assert verdict.passed and (verdict.passing, verdict.applicable, verdict.score) == (8, 9, 88.9)
    checks = {c["id"]: c for c in verdict.checks}
    assert checks["openscap/sshd_disable_root_login"]["result"] == "waived"
    assert checks["openscap/sshd_disable_root_login"]["waiver"] == "keys only"
    assert checks["openscap/partition_for_home"] == {
        "id": "openscap/partition_for_home", "name": "OpenSCAP rule Title of partition_for_home", "passed": True,
        "result": "waived", "waiver": "no disk on a stateless node", "detail": "tailored out"}
    assert checks["openscap/banner"]["result"] == "skipped"
    assert "openscap/other_unselected" not in checks
    assert checks[openscap.SCORE_CHECK]["passed"] and "8/9" in checks[openscap.SCORE_CHECK]["detail"]
    assert verdict.unused_waivers == ["unused_rule"] and verdict.tailored_out == {"partition_for_home": "no disk on a stateless node"}
    # Every check is one the verify record accepts.
    assert all(record.Check.from_dict("t", check).passed for check in verdict.checks)


def test_a_failed_rule_without_a_waiver_fails_the_gate_naming_it_even_above_the_minimum():
    rules = {f"ok{i}": "pass" for i in range(9)}
    rules["file_permissions_systemmap"] = "fail"
    verdict = openscap.judge(openscap.parse_results(results_xml(rules)), AVERAGE, 80)
    assert not verdict.passed and verdict.score == 90.0
    assert verdict.unwaived == ["file_permissions_systemmap"] and "file_permissions_systemmap" in verdict.message
    failed = [c for c in verdict.checks if not c["passed"]]
    assert [c["id"] for c in failed] == ["openscap/file_permissions_systemmap"]
    assert not record.Check.from_dict("t", failed[0]).passed


def test_below_the_minimum_the_gate_fails_though_every_failure_is_waived():
    rules = {"a": "pass", "b": "fail", "c": "error"}
    verdict = openscap.judge(openscap.parse_results(results_xml(rules)), AVERAGE, 80, None, {"b": "r", "c": "r"})
    assert not verdict.passed and verdict.score == 33.3 and "below the minimum" in verdict.message
    assert [c["id"] for c in verdict.checks if not c["passed"]] == [openscap.SCORE_CHECK]


def test_no_applicable_rule_is_an_error_saying_the_platform_did_not_match():
    verdict = openscap.judge(openscap.parse_results(results_xml({"a": "notapplicable"})), AVERAGE, 0, None, {},
                             "content ssg-debian11-ds.xml")
    assert not verdict.passed and "no rule applies" in verdict.message
    assert verdict.checks[0]["result"] == "error"


@pytest.mark.parametrize("minimum", [101, -1, True, "80"])
def test_a_bad_minimum_is_named(minimum):
    with pytest.raises(openscap.OpenscapError, match="hpc_stateless_verify_openscap_min_pass"):
        openscap.judge(openscap.parse_results(results_xml({"a": "pass"})), AVERAGE, minimum)


def test_the_platform_note_says_when_the_content_does_not_know_the_release():
    note = openscap.platform_note("/c/ssg-debian11-ds.xml", openscap.os_release_version('ID=debian\nVERSION_ID="12"\n'))
    assert "does not know debian 12" in note and "cpe-dictionary.xml" in note
    assert "the image's release" in openscap.platform_note("/c/ssg-debian11-ds.xml", "11")


# ---------------------------------------------------------------------------------------------- the scanner in the boot

LDD = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibopenscap.so.25 => /lib/x86_64-linux-gnu/libopenscap.so.25 (0x00007f)
\tlibopendbx.so.1 => /lib/libopendbx.so.1 (0x00007f)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f)
"""


def test_ldd_gives_the_loader_and_each_library_directory_once():
    interpreter, dirs = openscap.parse_ldd(LDD)
    assert interpreter == os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    assert dirs == [os.path.realpath("/lib/x86_64-linux-gnu"), os.path.realpath("/lib")]
    with pytest.raises(openscap.OpenscapError, match="misses a library"):
        openscap.parse_ldd("\tlibx.so.1 => not found\n")


def test_the_boot_sees_the_scanner_read_only_under_run_and_writes_only_its_out_directory():
    scanner = openscap.Scanner("/usr/bin/oscap", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                               ("/usr/lib/x86_64-linux-gnu", "/usr/lib"), "/usr/share/openscap")
    binds = openscap.nspawn_binds(scanner, "/c/ssg-debian11-ds.xml", "/t/tailoring.xml", "/files/openscap", "/s/out")
    writable = [b for b in binds if b.startswith("--bind=")]
    assert writable == [f"--bind=/s/out:{openscap.MOUNT_POINT}/out"]
    assert all(b.split(":", 1)[1].startswith(openscap.MOUNT_POINT + "/") for b in binds)
    argv = openscap.scan_argv(scanner, "/c/ssg-debian11-ds.xml", "/files/openscap", "xccdf_t_profile_avg")
    assert argv[:3] == [f"{openscap.MOUNT_POINT}/lib/0/ld-linux-x86-64.so.2", "--library-path",
                        f"{openscap.MOUNT_POINT}/lib/0:{openscap.MOUNT_POINT}/lib/1"]
    assert argv[3:6] == [f"{openscap.MOUNT_POINT}/bin/oscap", "xccdf", "eval"]
    assert argv[argv.index("--profile") + 1] == "xccdf_t_profile_avg"
    assert argv[argv.index("--cpe") + 1] == f"{openscap.MOUNT_POINT}/platform/openscap/cpe-dictionary.xml"
    assert argv[-1] == f"{openscap.MOUNT_POINT}/content/ssg-debian11-ds.xml"
    with pytest.raises(openscap.OpenscapError, match="cannot be bound"):
        openscap.nspawn_binds(scanner, "/c/a:b.xml", "/t", "/p", "/o")


def test_the_newest_content_of_the_distribution_is_picked(tmp_path):
    for name in ("ssg-debian10-ds.xml", "ssg-debian11-ds.xml", "ssg-debian9-ds.xml", "ssg-ubuntu2204-ds.xml"):
        (tmp_path / name).write_text("x")
    assert openscap.newest_content(str(tmp_path)) == str(tmp_path / "ssg-debian11-ds.xml")
    with pytest.raises(openscap.OpenscapError, match="apt-get install ssg-debian"):
        openscap.newest_content(str(tmp_path / "none"))


# ---------------------------------------------------------------------------------------------- the kept outputs


def test_outputs_are_kept_beside_the_record_and_links_the_container_planted_are_not_followed(tmp_path):
    scan = tmp_path / ("s" + openscap.SUFFIX)
    (scan / "out").mkdir(parents=True)
    (scan / "out" / "results.xml").write_text(results_xml({"a": "pass"}))
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    (scan / "out" / "report.html").symlink_to(secret)
    final = openscap.kept_path(str(tmp_path / "verify"), "slurm", "abc123")
    assert final == str(tmp_path / "verify" / "slurm-abc123.openscap")
    with pytest.raises(OSError):
        openscap.keep_outputs(str(scan), final)
    assert not os.path.exists(final) and os.listdir(tmp_path / "verify") == []
    (scan / "out" / "report.html").unlink()
    assert openscap.keep_outputs(str(scan), final) == {"results": f"{final}/results.xml"}
    assert openscap.read_results(str(scan)).rules[0].result == "pass"
    assert openscap.remove(str(scan)) and not scan.exists()
    with pytest.raises(openscap.OpenscapError, match="nothing removed"):
        openscap.remove(str(tmp_path / "verify"))


def test_ldd_names_each_library_as_the_loader_looks_for_it():
    assert openscap.ldd_libraries(LDD) == [
        ("libopenscap.so.25", os.path.realpath("/lib/x86_64-linux-gnu/libopenscap.so.25")),
        ("libopendbx.so.1", os.path.realpath("/lib/libopendbx.so.1")),
        ("libc.so.6", os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6"))]


def _fake_scanner(tmp_path: Path) -> tuple[openscap.Scanner, Path, Path, Path]:
    """A scanner laid out like the host's (files of a few bytes): a library whose file name is not its soname, a
    share directory with a link to a file, content, tailoring and platform dictionary."""
    lib, other = tmp_path / "lib", tmp_path / "usr-lib"
    for directory in (lib, other, tmp_path / "bin", tmp_path / "share/schemas", tmp_path / "files/openscap"):
        directory.mkdir(parents=True)
    (tmp_path / "bin/oscap").write_bytes(b"oscap")
    (tmp_path / "bin/oscap").chmod(0o750)
    (lib / "libopenscap.so.25.0.1").write_bytes(b"libopenscap")
    (lib / "ld-linux-x86-64.so.2").write_bytes(b"loader")
    (lib / "ld-linux-x86-64.so.2").chmod(0o755)
    (other / "libxml2.so.2").write_bytes(b"libxml2")
    (tmp_path / "share/schemas/a.xsd").write_text("<xsd/>")
    (tmp_path / "share/schemas/b.xsd").symlink_to("a.xsd")
    (tmp_path / "files/openscap/cpe-dictionary.xml").write_text("<cpe/>")
    content, tailoring = tmp_path / "ssg-debian11-ds.xml", tmp_path / "tailoring.xml"
    content.write_text("<ds/>")
    tailoring.write_text("<t/>")
    libraries = (("libopenscap.so.25", str(lib / "libopenscap.so.25.0.1")), ("libxml2.so.2", str(other / "libxml2.so.2")))
    scanner = openscap.Scanner(str(tmp_path / "bin/oscap"), str(lib / "ld-linux-x86-64.so.2"), (str(lib), str(other)),
                               str(tmp_path / "share"), libraries)
    return scanner, content, tailoring, tmp_path / "files/openscap"


def test_a_live_node_gets_the_layout_a_verify_boot_sees_with_only_the_linked_libraries(tmp_path):
    import tarfile  # pylint: disable=import-outside-toplevel

    scanner, content, tailoring, platform = _fake_scanner(tmp_path)
    listed = openscap.bundle_members(scanner, str(content), str(tailoring), str(platform))
    members = {name: path for path, name in listed}
    argv = openscap.scan_argv(scanner, str(content), str(platform), "xccdf_t_profile_avg")
    # every file the scan's command names is in the archive at that place under the mount point
    named = [a[len(openscap.MOUNT_POINT) + 1:] for a in argv if a.startswith(openscap.MOUNT_POINT + "/")]
    named = [n for n in named if not n.startswith("out/") and ":" not in n]
    assert set(named) - {"lib/0", "lib/1"} <= set(members), (named, sorted(members))
    assert members["lib/0/libopenscap.so.25"].endswith("libopenscap.so.25.0.1")  # the loader's name, the file's bytes
    assert members["lib/1/libxml2.so.2"].endswith("usr-lib/libxml2.so.2")
    assert members["share/schemas/b.xsd"].endswith("share/schemas/a.xsd")  # a link is packed as the file it names

    archive = tmp_path / "out" / openscap.BUNDLE_NAME
    archive.parent.mkdir()
    openscap.write_bundle(openscap.bundle_members(scanner, str(content), str(tailoring), str(platform)), str(archive))
    assert os.listdir(archive.parent) == [openscap.BUNDLE_NAME]  # nothing staged left beside it
    with tarfile.open(archive) as tar:
        infos = {info.name: info for info in tar.getmembers()}
    assert infos["out"].isdir() and infos["out"].mode == 0o700
    assert all(i.isfile() and i.uid == 0 and i.uname == "root" for n, i in infos.items() if n != "out")
    assert infos["bin/oscap"].mode == 0o755 and infos["platform/openscap/cpe-dictionary.xml"].mode == 0o644


def test_a_library_outside_the_scanner_s_directories_is_refused(tmp_path):
    scanner, content, tailoring, platform = _fake_scanner(tmp_path)
    stray = openscap.Scanner(scanner.oscap, scanner.interpreter, scanner.libdirs[:1], scanner.share, scanner.libraries)
    with pytest.raises(openscap.OpenscapError, match="libxml2.so.2 .* in none of its library directories"):
        openscap.bundle_members(stray, str(content), str(tailoring), str(platform))


@pytest.mark.parametrize("result, text", [
    ({"msg": "non-zero return code", "rc": 1, "stderr": "oscap: no such profile"},
     "Run OpenSCAP on the node: non-zero return code; oscap: no such profile (exit status 1)"),
    ({"unreachable": True, "msg": "ssh: connect to host n1 port 22: No route to host"},
     "Run OpenSCAP on the node: the node is unreachable: ssh: connect to host n1 port 22: No route to host"),
    ({}, "Run OpenSCAP on the node: failed"),
])
def test_a_live_scan_that_failed_is_said_in_a_line(result, text):
    assert openscap.failure_text("Run OpenSCAP on the node", result) == text


def test_a_node_report_takes_the_rules_as_checks_and_fails_with_a_failed_rule():
    from ansible_collections.hpc.stateless.plugins.module_utils._verify import drift  # pylint: disable=import-outside-toplevel

    report = {"node": "n1", "passed": True, "checks": [{"name": "drift::packages", "passed": True, "result": "passed",
                                                       "detail": ""}]}
    rules = [{"id": "openscap/a", "name": "OpenSCAP rule A", "passed": True, "result": "passed", "waiver": "",
              "detail": "pass"},
             {"id": "openscap/b", "name": "OpenSCAP rule B", "passed": False, "result": "failed", "waiver": "",
              "detail": "fail: B"}]
    merged = drift.with_checks(report, rules, "OpenSCAP", "OpenSCAP x: 1/2")
    assert [c["name"] for c in merged["checks"]] == ["drift::packages", "openscap/a", "openscap/b"]
    assert merged["checks"][2]["detail"] == "OpenSCAP rule B: fail: B"
    assert merged["passed"] is False and merged["openscap"] == "OpenSCAP x: 1/2"
    assert report["passed"] is True and len(report["checks"]) == 1  # the given report is left as it was
    assert drift.with_checks(report, rules[:1], "OpenSCAP", "ok")["passed"] is True
