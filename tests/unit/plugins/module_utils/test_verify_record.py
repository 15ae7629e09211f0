"""Verification records and the gate pack applies: names, atomic writes, verdicts, refusal messages."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract import names
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import Packer, PackError, PackRequest
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import (
    Check,
    Record,
    RecordError,
    UnverifiedError,
    gate,
    judge,
    junit_path,
    junit_xml,
    read_record,
    uncovered_settings,
    record_path,
    verify_command,
    write_record,
)

KEY = "3f2a9c0d1e2f3a4b5c6d7e8f"
IMAGE = f"localhost/hpc-stateless/slurm:{KEY}"
IMAGE_ID = "a" * 64
PASSING = (Check("systemd state", True, "running"), Check("units enabled by roles are active", True, "munge.service"))


def _record(*checks: Check, image_id: str = IMAGE_ID) -> Record:
    return Record("slurm", KEY, IMAGE, image_id, checks or PASSING, verified_at=1_700_000_000)


def test_record_name_and_place_come_from_the_artifact_names(tmp_path):
    assert record_path(str(tmp_path), "slurm", KEY) == str(tmp_path / f"slurm-{KEY}.json")
    assert names.verify_record_file("slurm", KEY) == f"slurm-{KEY}.json"
    with pytest.raises(RecordError, match="layer '../x' is not a valid name"):
        record_path(str(tmp_path), "../x", KEY)


def test_written_record_reads_back_and_leaves_no_temporary_file(tmp_path):
    record_dir = tmp_path / "build" / "verify"
    path = write_record(str(record_dir), _record())
    assert sorted(os.listdir(record_dir)) == [f"slurm-{KEY}.json", f"slurm-{KEY}.junit.xml"]
    data = json.loads((record_dir / f"slurm-{KEY}.json").read_text())
    assert (data["passed"], data["image_id"], data["verified_at"]) == (True, IMAGE_ID, "2023-11-14T22:13:20Z")
    assert [c["name"] for c in data["checks"]] == ["systemd state", "units enabled by roles are active"]
    assert read_record(str(record_dir), "slurm", KEY) == _record()
    assert path == str(record_dir / f"slurm-{KEY}.json")


def test_a_record_without_checks_is_refused_and_not_written(tmp_path):
    with pytest.raises(RecordError, match="without checks proves nothing"):
        write_record(str(tmp_path), Record("slurm", KEY, IMAGE, IMAGE_ID, ()))
    assert os.listdir(tmp_path) == []


def test_passing_record_for_the_same_image_passes_the_gate(tmp_path):
    write_record(str(tmp_path), _record())
    verdict = gate(str(tmp_path), "slurm", KEY, IMAGE_ID)
    assert verdict.passed
    entry = verdict.manifest_entry()
    assert entry["status"] == "passed" and entry["record"] == f"slurm-{KEY}.json"
    assert "override_reason" not in entry


def test_never_verified_is_refused_with_the_command_that_verifies(tmp_path):
    with pytest.raises(UnverifiedError) as caught:
        gate(str(tmp_path), "slurm", KEY, IMAGE_ID)
    message = str(caught.value)
    assert f"layer slurm (content key {KEY[:12]}) was never verified: no record {tmp_path}/slurm-{KEY}.json" in message
    assert verify_command("slurm") in message
    assert "ansible-playbook playbooks/verify.yml -e '{\"hpc_stateless_verify_layers\": [\"slurm\"]}'" in message
    assert "hpc_stateless_unverified_ok" in message


def test_failed_checks_are_named_in_the_refusal(tmp_path):
    write_record(str(tmp_path), _record(Check("systemd state", False, "degraded; failed units: broken.service"),
                                        Check("units enabled by roles are active", True)))
    with pytest.raises(UnverifiedError, match=r"failed verification at 2023-11-14T22:13:20Z: systemd state: "
                                              r"degraded; failed units: broken.service\. Fix the layer"):
        gate(str(tmp_path), "slurm", KEY, IMAGE_ID)


def test_a_record_of_an_image_built_again_is_stale(tmp_path):
    write_record(str(tmp_path), _record(image_id="b" * 64))
    verdict = judge(str(tmp_path), "slurm", KEY, IMAGE_ID)
    assert verdict.status == "stale"
    assert f"verified image {'b' * 12}, but the layer's image is now {'a' * 12}" in verdict.message


def test_an_unreadable_record_counts_as_missing_and_names_the_file(tmp_path):
    (tmp_path / f"slurm-{KEY}.json").write_text("{not json")
    verdict = judge(str(tmp_path), "slurm", KEY, IMAGE_ID)
    assert verdict.status == "missing"
    assert f"slurm-{KEY}.json: unreadable verification record" in verdict.message


def test_a_record_under_another_layers_name_is_refused(tmp_path):
    write_record(str(tmp_path), _record())
    os.rename(tmp_path / f"slurm-{KEY}.json", tmp_path / f"compute-{KEY}.json")
    with pytest.raises(RecordError, match="records layer slurm"):
        read_record(str(tmp_path), "compute", KEY)


def test_override_needs_a_reason_and_is_recorded(tmp_path):
    with pytest.raises(UnverifiedError):
        gate(str(tmp_path), "slurm", KEY, IMAGE_ID, "   ")
    verdict = gate(str(tmp_path), "slurm", KEY, IMAGE_ID, "CVE fix, verify host down")
    entry = verdict.manifest_entry()
    assert (entry["status"], entry["override_reason"]) == ("overridden", "CVE fix, verify host down")
    assert "was never verified" in entry["unverified_because"]


def _packer(tmp_path, **kwargs) -> Packer:
    request = PackRequest(image="compute", output_dir=str(tmp_path / "out"), formats=["cpio.zst"],
                          source_image=IMAGE, verify_dir=str(tmp_path / "verify"), **kwargs)
    return Packer(request)


def test_pack_refuses_an_unverified_layer_image(tmp_path):
    with pytest.raises(PackError, match=rf"image compute \({IMAGE}\): refused: layer slurm .* was never verified"):
        _packer(tmp_path)._verification("slurm", KEY, IMAGE_ID)


def test_pack_override_warns_with_the_reason(tmp_path):
    packer = _packer(tmp_path, unverified_ok="emergency: verify host down")
    entry = packer._verification("slurm", KEY, IMAGE_ID)
    assert entry["status"] == "overridden"
    assert packer.warnings == [f"packing image compute UNVERIFIED on override (hpc_stateless_unverified_ok: "
                               f"'emergency: verify host down'): layer slurm (content key {KEY[:12]}) was never "
                               f"verified: no record {tmp_path}/verify/slurm-{KEY}.json. Run: {verify_command('slurm')}"]


def test_pack_of_a_verified_image_records_the_checks(tmp_path):
    write_record(str(tmp_path / "verify"), _record())
    entry = _packer(tmp_path)._verification("slurm", KEY, IMAGE_ID)
    assert entry["checks"] == [{"name": "systemd state", "passed": True},
                               {"name": "units enabled by roles are active", "passed": True}]


def test_pack_without_the_gate_says_so_in_the_manifest(tmp_path):
    request = PackRequest(image="compute", output_dir=str(tmp_path), formats=["cpio.zst"], source_image=IMAGE)
    assert Packer(request)._verification("slurm", KEY, IMAGE_ID) == {"status": "not-checked"}


def test_pack_refuses_an_image_without_layer_labels_under_the_gate(tmp_path):
    with pytest.raises(PackError, match="carries no layer name and content key"):
        _packer(tmp_path)._verification("", "", IMAGE_ID)


def test_a_record_made_with_other_settings_is_stale_for_verify_only(tmp_path):
    record = Record("slurm", KEY, IMAGE, IMAGE_ID, PASSING, 1_700_000_000, {"allowed_failed_units": ["slurmd.service"]})
    write_record(str(tmp_path), record)
    verdict = judge(str(tmp_path), "slurm", KEY, IMAGE_ID, {"allowed_failed_units": []})
    assert verdict.status == "stale"
    assert "was made with other verify settings (allowed_failed_units)" in verdict.message
    assert judge(str(tmp_path), "slurm", KEY, IMAGE_ID, {"allowed_failed_units": ["slurmd.service"]}).passed
    assert gate(str(tmp_path), "slurm", KEY, IMAGE_ID).passed  # pack does not compare settings


def test_pack_check_mode_warns_instead_of_refusing(tmp_path):
    packer = _packer(tmp_path)
    assert packer._verification("slurm", KEY, IMAGE_ID, check_mode=True)["status"] == "not-checked"
    assert packer.warnings[0].startswith("check mode: image compute would be refused unless verify passes it first: "
                                         "refused: layer slurm")


def test_checks_carry_result_and_waiver_and_read_back(tmp_path):
    checks = (Check("systemd state", True, "running"),
              Check("base/test_base::test_sysctl", False, "kernel parameters (found, wanted): x", "failed"),
              Check("_shared/test_runtime::test_x", False, "fixture failed", "error"),
              Check("_shared/test_baseline::test_y", True, "", "waived", "scratch image, ticket 12"),
              Check("hsn/test_hsn::test_if[1]", True, "fewer interfaces configured", "skipped"))
    write_record(str(tmp_path), _record(*checks))
    back = read_record(str(tmp_path), "slurm", KEY)
    assert back.checks == checks
    assert [c.name for c in back.failed] == ["base/test_base::test_sysctl", "_shared/test_runtime::test_x"]
    data = json.loads((tmp_path / f"slurm-{KEY}.json").read_text())
    assert data["checks"][3] == {"name": "_shared/test_baseline::test_y", "passed": True, "result": "waived",
                                 "detail": "", "waiver": "scratch image, ticket 12"}
    verdict = judge(str(tmp_path), "slurm", KEY, IMAGE_ID)
    assert verdict.status == "failed"
    assert "base/test_base::test_sysctl: kernel parameters (found, wanted): x" in verdict.message
    assert "_shared/test_runtime::test_x: fixture failed" in verdict.message


@pytest.mark.parametrize("check, message", [
    ({"name": "x", "passed": True, "result": "bogus"}, "result 'bogus'; expected one of"),
    ({"name": "x", "passed": True, "result": "failed"}, "result 'failed' but passed True; a failed check fails"),
    ({"name": "x", "passed": False, "result": "waived", "waiver": "r"}, "a waived check passes"),
    ({"name": "x", "passed": True, "result": "waived"}, "waived without a reason"),
])
def test_bad_check_results_are_refused_naming_the_check(check, message):
    with pytest.raises(RecordError, match=message):
        Check.from_dict("checks[0]", check)


def test_a_check_without_result_takes_it_from_passed():
    assert Check.from_dict("c", {"name": "x", "passed": False}).result == "failed"
    assert Check("x", True).result == "passed"


def test_junit_report_beside_the_record_has_every_check(tmp_path):
    import xml.etree.ElementTree as ET

    checks = (Check("systemd state", True, "running"),
              Check("base/test_base::test_sysctl", False, "wrong value\nsecond line", "failed"),
              Check("_shared/test_runtime::test_x", False, "could not run", "error"),
              Check("_shared/test_baseline::test_y", True, "", "waived", "scratch image"),
              Check("hsn/test_hsn::test_if[1]", True, "fewer interfaces", "skipped"))
    path = write_record(str(tmp_path), _record(*checks))
    assert junit_path(path) == str(tmp_path / f"slurm-{KEY}.junit.xml")
    suite = ET.parse(junit_path(path)).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("5", "1", "1", "2")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == [c.name for c in checks]
    assert cases["base/test_base::test_sysctl"].find("failure").get("message") == "wrong value"
    assert cases["base/test_base::test_sysctl"].find("failure").text == "wrong value\nsecond line"
    assert cases["_shared/test_runtime::test_x"].find("error") is not None
    assert cases["_shared/test_baseline::test_y"].find("skipped").get("message") == "waived: scratch image"
    assert len(cases["systemd state"]) == 0
    assert junit_xml(_record(*checks)).startswith("<?xml")


def test_a_check_with_an_id_is_named_by_it_and_keeps_its_words_in_the_detail():
    check = Check.from_dict("c", {"id": "lynis/SSH-7408", "name": "Lynis suggestion SSH-7408: harden sshd",
                                  "passed": True, "result": "waived", "waiver": "sshd is for admins", "detail": "x"})
    assert (check.name, check.detail, check.waiver) == ("lynis/SSH-7408", "Lynis suggestion SSH-7408: harden sshd: x",
                                                        "sshd is for admins")
    assert Check.from_dict("c", {"id": "a", "name": "a", "passed": True}).name == "a"


BASE_SETTINGS = {"allowed_failed_units": ["slurmd.service"], "inactive_units": [], "test_secrets": []}
FULL = {**BASE_SETTINGS, "suite": True, "waivers": ["/w.yml"], "suite_paths": [],
        "lynis": {"enabled": True, "min_score": 80, "waivers": []},
        "openscap": {"enabled": True, "profile": "anssi_np_nt28_average", "min_pass": 80, "content": None}}


@pytest.mark.parametrize("wanted, uncovered", [
    (FULL, []),
    # a request without Lynis, or with a lower minimum and the same waivers, is covered by a Lynis record
    ({**FULL, "lynis": {"enabled": False, "min_score": 80, "waivers": []}}, []),
    ({**FULL, "lynis": {"enabled": True, "min_score": 70, "waivers": []}}, []),
    ({**FULL, "lynis": {"enabled": True, "min_score": 90, "waivers": []}}, ["lynis"]),
    ({**FULL, "lynis": {"enabled": True, "min_score": 80, "waivers": ["/site.yml"]}}, ["lynis"]),
    # the same for OpenSCAP: without it, or the same profile and content at a minimum share no higher
    ({**FULL, "openscap": {"enabled": False}}, []),
    ({**FULL, "openscap": {**FULL["openscap"], "min_pass": 70}}, []),
    ({**FULL, "openscap": {**FULL["openscap"], "min_pass": 90}}, ["openscap"]),
    ({**FULL, "openscap": {**FULL["openscap"], "profile": "standard"}}, ["openscap"]),
    ({**FULL, "openscap": {**FULL["openscap"], "content": "/site/ssg-debian12-ds.xml"}}, ["openscap"]),
    # a request without the suite is covered whatever the suite's waivers and paths were
    ({**FULL, "suite": False, "waivers": [], "suite_paths": ["/x"]}, []),
    ({**FULL, "waivers": []}, ["waivers"]),
    ({**FULL, "suite_paths": ["/site/tests"]}, ["suite_paths"]),
    # the boot's own settings stay exact
    ({**FULL, "allowed_failed_units": []}, ["allowed_failed_units"]),
    ({**FULL, "test_secrets": ["/etc/munge/munge.key"]}, ["test_secrets"]),
])
def test_a_record_made_with_more_checks_covers_a_request_for_fewer(wanted, uncovered):
    assert uncovered_settings(FULL, wanted) == uncovered


def test_a_record_from_before_the_suite_and_lynis_covers_only_requests_without_them():
    assert uncovered_settings(BASE_SETTINGS, {**BASE_SETTINGS, "suite": False, "lynis": {"enabled": False}}) == []
    assert uncovered_settings(BASE_SETTINGS, FULL) == ["lynis", "openscap", "suite", "suite_paths", "waivers"]


def test_judge_reuses_a_lynis_record_for_a_request_without_lynis(tmp_path):
    write_record(str(tmp_path), Record("slurm", KEY, IMAGE, IMAGE_ID, PASSING, settings=FULL))
    without = {**FULL, "lynis": {"enabled": False, "min_score": 80, "waivers": []}}
    assert judge(str(tmp_path), "slurm", KEY, IMAGE_ID, without).status == "passed"
    stricter = {**FULL, "lynis": {"enabled": True, "min_score": 95, "waivers": []}}
    verdict = judge(str(tmp_path), "slurm", KEY, IMAGE_ID, stricter)
    assert verdict.status == "stale" and "other verify settings (lynis)" in verdict.message
