"""The rules of the rolling update (plugins/module_utils/_deploy/rollout.py), one by one.

The playbook around them runs against a recording fake scontrol in tests/integration/test_deploy_rolling.py
and against real slurmctld and rebooting nodes in tests/integration/test_cluster_rollout.py. The Slurm
records here are the shapes slurmctld 22.05 printed on that test cluster.
"""

from __future__ import annotations

import base64
import json

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import image_release
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.rollout import (
    NodeState,
    RolloutError,
    canary_report,
    gave_up,
    in_service,
    node_failure,
    node_image,
    node_state,
    reboot_argv,
    reboot_check,
    rebooted,
    release_check,
    release_difference,
    roll_plan,
    served_versions,
    slurm_node_fields,
)

BEFORE = "2026-01-01T00:00:00"
ASKED = "2026-03-04T10:00:00"
AFTER = "2026-03-04T10:02:13"


def slurped(text: str | bytes) -> dict:
    data = text.encode() if isinstance(text, str) else text
    return {"content": base64.b64encode(data).decode(), "encoding": "base64"}


def release_of(image: str, version: str) -> dict:
    return slurped(image_release(image, version, "slurm", "k" * 64, 0))


def show_node(state: str, boot_time: str = AFTER, reason: str | None = None, **extra: str) -> str:
    """A line of ``scontrol show node --oneliner`` as slurmctld prints it."""
    fields = {"NodeName": "node001", "Arch": "x86_64", "CoresPerSocket": "1", "State": state,
              "BootTime": boot_time, "SlurmdStartTime": boot_time, **extra}
    text = " ".join(f"{key}={value}" for key, value in fields.items())
    return text + (f" Reason={reason}" if reason is not None else "")


# --------------------------------------------------------------------------- Slurm's record


def test_fields_are_whole_words_and_the_reason_runs_to_the_end_of_the_line():
    line = show_node("IDLE+DRAIN+REBOOT_REQUESTED", NextState="RESUME",
                     reason="hpc.stateless rolling update to compute v2 : reboot issued [root@2026-03-04T10:00:01]")
    fields = slurm_node_fields(line)
    assert fields["State"] == "IDLE+DRAIN+REBOOT_REQUESTED"  # not NextState's RESUME
    assert fields["NextState"] == "RESUME"
    assert fields["Reason"] == "hpc.stateless rolling update to compute v2 : reboot issued [root@2026-03-04T10:00:01]"


def test_missing_fields_are_absent_and_a_missing_reason_is_empty():
    assert slurm_node_fields("") == {"Reason": ""}
    assert slurm_node_fields("NodeName=n1 State=IDLE") == {"NodeName": "n1", "State": "IDLE", "Reason": ""}


@pytest.mark.parametrize("state", ["IDLE", "MIXED", "ALLOCATED", "IDLE+POWER"])
def test_a_state_without_an_out_of_service_word_is_in_service(state):
    assert in_service(state)


@pytest.mark.parametrize("state", ["IDLE+REBOOT_ISSUED", "IDLE+REBOOT_REQUESTED", "DOWN+REBOOT_REQUESTED",
                                   "DOWN+NOT_RESPONDING", "IDLE+DRAIN", "MIXED+DRAIN", "DRAINED", "IDLE+FAIL",
                                   "IDLE+MAINT", "UNKNOWN", "FUTURE", "IDLE+NOT_RESPONDING", ""])
def test_a_flag_of_a_reboot_a_drain_or_a_fault_is_out_of_service(state):
    assert not in_service(state)


def test_slurm_gave_up_when_its_reason_says_reboot_timed_out():
    assert gave_up("hpc.stateless rolling update to c C : reboot issued : reboot timed out [slurm@2026-03-04T10:01:00]")
    assert gave_up("Reboot Timed Out")
    assert not gave_up("hpc.stateless rolling update to c C : reboot issued")
    assert not gave_up("")


@pytest.mark.parametrize("boot_time, before, asked, expected", [
    (AFTER, BEFORE, ASKED, True),                          # booted after the request
    (ASKED, BEFORE, ASKED, True),                          # in the second of the request
    ("2026-03-04T09:59:59", BEFORE, ASKED, False),         # before the request: no reboot (Slurm's rule)
    (BEFORE, BEFORE, "", False),                           # the boot time before the request, unchanged
    ("None", BEFORE, ASKED, False),                        # Slurm knows no boot time
    ("Unknown", "", "", False),
    ("", BEFORE, ASKED, False),                            # no BootTime field at all
    ("2026-03-04T10:02:13.123456789", BEFORE, ASKED, True),  # the fake's sub-second times compare the same way
])
def test_a_node_rebooted_when_its_boot_time_is_new_and_not_before_the_request(boot_time, before, asked, expected):
    assert rebooted(boot_time, before, asked) is expected


def test_back_in_service_with_a_new_boot_is_done_and_ok():
    check = reboot_check(show_node("IDLE", AFTER), boot_time_before=BEFORE, requested_at=ASKED, timeout=1800)
    assert (check.done, check.ok, check.msg) == (True, True, "")
    assert check.as_dict()["boot_time"] == AFTER and check.as_dict()["ok"] is True


@pytest.mark.parametrize("state", ["IDLE+REBOOT_ISSUED", "DOWN+REBOOT_REQUESTED", "IDLE+DRAIN+REBOOT_REQUESTED"])
def test_a_reboot_in_progress_is_not_done(state):
    check = reboot_check(show_node(state, BEFORE, reason="hpc.stateless rolling update to compute v2 : reboot issued"),
                         boot_time_before=BEFORE, requested_at=ASKED, timeout=6)
    assert not check.done and not check.ok
    assert check.msg.startswith(f"not back in service after 6 s: Slurm says State={state} BootTime={BEFORE} "
                                f"(before {BEFORE}) Reason=hpc.stateless rolling update to compute v2 : reboot issued")


def test_a_node_that_never_comes_back_names_state_and_reason():
    check = reboot_check(show_node("DOWN+NOT_RESPONDING", BEFORE, reason="Not responding"),
                         boot_time_before=BEFORE, requested_at=ASKED, timeout=6)
    assert check.msg == (f"not back in service after 6 s: Slurm says State=DOWN+NOT_RESPONDING BootTime={BEFORE} "
                         f"(before {BEFORE}) Reason=Not responding")


def test_back_in_service_without_a_new_boot_is_done_but_fails():
    """ReturnToService=2 after "reboot timed out" gives the node back although it never rebooted."""
    check = reboot_check(show_node("IDLE", BEFORE), boot_time_before=BEFORE, requested_at=ASKED)
    assert check.done and not check.ok
    assert check.msg == (f"back in service without a new boot: Slurm says State=IDLE BootTime={BEFORE}, not after the "
                         f"reboot request at {ASKED}: the node did not reboot, or its slurmd reports an old boot time "
                         "(in a container it reports the host's: start slurmd with -b)")


def test_slurm_giving_up_ends_the_wait_and_says_so():
    reason = "hpc.stateless rolling update to c C : reboot issued : reboot timed out [slurm@2026-03-04T10:01:00]"
    check = reboot_check(show_node("DOWN+REBOOT_ISSUED", BEFORE, reason=reason), boot_time_before=BEFORE,
                         requested_at=ASKED)
    assert check.done and not check.ok
    assert check.msg == (f"Slurm gave up on its reboot after ResumeTimeout: State=DOWN+REBOOT_ISSUED Reason={reason} "
                         f"(BootTime={BEFORE}, reboot asked at {ASKED}): the node did not boot within ResumeTimeout "
                         "or its slurmd never registered")


def test_a_record_without_fields_is_neither_done_nor_ok_and_says_what_is_missing():
    check = reboot_check("", boot_time_before="", requested_at=ASKED, timeout=15)
    assert not check.done and not check.ok
    assert check.msg == "not back in service after 15 s: Slurm says State=? BootTime=? (before ?) Reason=-"


def test_the_reboot_request_asks_for_a_reboot_when_idle_then_resume():
    assert reboot_argv("node001", method="scontrol", scontrol="/usr/bin/scontrol", image="compute", version="v2") == [
        "/usr/bin/scontrol", "reboot", "ASAP", "nextstate=RESUME", "reason=hpc.stateless rolling update to compute v2",
        "node001"]
    assert reboot_argv("n1", method="scontrol", scontrol="scontrol", image="c", version="v2", reason="kernel CVE")[4] \
        == "reason=kernel CVE"


def test_the_nhc_method_drains_with_its_reason_and_another_method_is_an_error():
    assert reboot_argv("n1", method="nhc", scontrol="scontrol", image="c", version="v2", nhc_reason="reboot") == [
        "scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=reboot"]
    with pytest.raises(RolloutError, match=r"^hpc_stateless_roll_method: 'ipmi' is not one of scontrol, nhc$"):
        reboot_argv("n1", method="ipmi", scontrol="scontrol", image="c", version="v2")


# --------------------------------------------------------------------------- what is served, what a node runs


def manifest(image: str, version: str) -> dict:
    data = {"image": image, "version": version, "artifacts": [{"file": f"{image}.cpio.zst"}]}
    return {**slurped(json.dumps(data)), "item": image}


def test_served_versions_come_from_the_manifests_that_could_be_read():
    results = [manifest("compute", "v2"), {"item": "login", "failed": True, "msg": "file not found"},
               manifest("gpu", "1.0~rc1")]
    assert served_versions(results, "/srv/tftp") == {"compute": "v2", "gpu": "1.0~rc1"}
    assert served_versions([], "/srv/tftp") == {}


def test_a_served_manifest_that_is_no_pack_manifest_names_its_file():
    broken = {**slurped("{not json"), "item": "compute"}
    with pytest.raises(RolloutError, match=r"^/srv/tftp/compute/manifest.json: unreadable manifest"):
        served_versions([broken], "/srv/tftp")
    no_version = {**slurped(json.dumps({"image": "compute", "artifacts": []})), "item": "compute"}
    with pytest.raises(RolloutError, match=r"^/srv/tftp/compute/manifest.json: key 'version' is missing"):
        served_versions([no_version], "/srv/tftp")


def test_a_node_boots_its_own_image_else_the_default_else_the_first_by_name():
    images = {"login": {}, "compute": {}}
    assert node_image("login", "compute", images) == "login"
    assert node_image("", "login", images) == "login"
    assert node_image(None, None, images) == "compute"
    assert node_image("", "", {}) == ""


SERVED = {"compute": "v2"}


def state(result: dict, image: str = "compute") -> NodeState:
    return node_state(result, image=image, served=SERVED, boot_root="/srv/tftp", release_file="/etc/image-release")


def test_a_node_on_the_served_version_needs_no_reboot():
    current = state(release_of("compute", "v2"))
    assert (current.reason, current.pending, current.target) == ("", False, "v2")
    assert current.release["VERSION"] == "v2"


@pytest.mark.parametrize("image, version, reason", [
    ("compute", "v1", "runs compute v1, served is v2"),
    ("compute", "v0", "runs compute v0, served is v2"),
    ("login", "v7", "runs image login v7, its entry boots compute v2"),
])
def test_a_node_on_another_version_or_image_is_pending_with_its_reason(image, version, reason):
    other = state(release_of(image, version))
    assert (other.reason, other.pending) == (reason, True)
    assert other.as_dict()["pending"] is True


def test_a_release_without_keys_reads_as_unknown():
    assert state(slurped("# nothing here\n")).reason == "runs image ? ?, its entry boots compute v2"
    assert release_difference({"IMAGE": "compute"}, "compute", "v2") == "runs compute ?, served is v2"


def test_an_unreachable_node_is_reported_and_left_out():
    down = state({"unreachable": True, "msg": "Failed to connect to the host via ssh: " + "timed out " * 20})
    assert down.unreachable and not down.pending
    assert down.reason.startswith("unreachable (Failed to connect to the host via ssh: ")
    assert down.reason.endswith("...); it boots compute v2 when it next PXE-boots")
    assert len(down.reason) < 200


def test_a_node_whose_image_is_not_served_or_that_has_no_release_file():
    not_served = state(release_of("login", "v1"), image="login")
    assert (not_served.reason, not_served.pending) == ("its image login is not served under /srv/tftp", False)
    missing = state({"failed": True, "msg": "file not found: /etc/image-release"})
    assert missing.reason == "no readable /etc/image-release (file not found: /etc/image-release)"
    assert missing.pending  # it answers and its image is served: a reboot gives it the file
    assert state({"failed": True}).reason == "no readable /etc/image-release (unknown error)"


def test_the_release_after_the_reboot_must_name_the_served_version():
    assert release_check(release_of("compute", "v2"), image="compute", version="v2")["ok"]
    wrong = release_check(release_of("compute", "v1"), image="compute", version="v2")
    assert not wrong["ok"]
    assert wrong["msg"] == ("came back running compute v1, not compute v2: check its PXE entry "
                            "(pxelinux.cfg/01-<mac>) and DHCP")
    assert release_check({}, image="compute", version="v2")["msg"].startswith("came back running ? ?, not compute v2")


# --------------------------------------------------------------------------- the batches


def states_of(reasons: dict[str, str]) -> dict[str, dict]:
    return {node: {"reason": why, "pending": bool(why) and not why.startswith("unreachable")}
            for node, why in reasons.items()}


def test_the_plan_reboots_the_canary_alone_then_batches_and_lists_why():
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    reasons = {"n1": "runs compute v1, served is v2", "n2": "", "n3": "runs compute v1, served is v2",
               "n4": "unreachable (timeout); it boots compute v2 when it next PXE-boots", "n5": "runs compute v0, served is v2"}
    plan = roll_plan(nodes, states_of(reasons), canary_size=1, batch_size="2", max_fail_percentage=0)
    assert plan["pending"] == ["n1", "n3", "n5"] and plan["canary"] == ["n1"]
    assert plan["serial"] == [1, 2] and plan["max_fail_percentage"] == 0
    assert plan["summary"] == ("3 of 5 nodes need a reboot; n1: runs compute v1, served is v2 (canary); "
                               "n3: runs compute v1, served is v2; n4: unreachable (timeout); it boots compute v2 when it "
                               "next PXE-boots; n5: runs compute v0, served is v2")


def test_the_plan_of_nothing_to_do_says_so_and_a_share_is_a_batch_size():
    plan = roll_plan(["n1", "n2"], states_of({"n1": "", "n2": ""}), canary_size="2", batch_size="20%",
                     max_fail_percentage="10")
    assert plan["summary"] == "0 of 2 nodes need a reboot: every reachable node runs the served version"
    assert plan["serial"] == [2, "20%"] and plan["max_fail_percentage"] == 10 and plan["canary"] == []
    # A node the play never looked at (no state) is counted, not rebooted.
    assert roll_plan(["n1"], {}, canary_size=1, batch_size=1, max_fail_percentage=0)["pending"] == []


@pytest.mark.parametrize("setting, value, message", [
    ("canary_size", 0, "hpc_stateless_roll_canary_size: 0 is not a node count"),
    ("canary_size", "20%", "hpc_stateless_roll_canary_size: '20%' is not a node count"),
    ("batch_size", "0%", "hpc_stateless_roll_batch_size: '0%' is not a node count (1 or more) or a share"),
    ("batch_size", True, "hpc_stateless_roll_batch_size: True is not a node count"),
    ("max_fail_percentage", 101, "hpc_stateless_roll_max_fail_percentage: 101 is not a percentage"),
])
def test_bad_batch_settings_name_the_variable(setting, value, message):
    settings = {"canary_size": 1, "batch_size": 10, "max_fail_percentage": 0, setting: value}
    with pytest.raises(RolloutError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        roll_plan(["n1"], {}, **settings)


# --------------------------------------------------------------------------- failures


def test_a_failed_slurm_check_adds_what_the_node_says():
    probe = {"stdout_lines": ["release=compute C", "slurmd=active",
                              "error=Unable to register: Unable to contact slurm controller (connect failure)"]}
    why = node_failure("Check that Slurm rebooted the node and took it back", {"msg": "Slurm gave up ... "}, probe)
    assert why == ("Slurm gave up ...; on the node: runs compute C, slurmd active, slurmd's last error: "
                   "Unable to register: Unable to contact slurm controller (connect failure)")
    silent = node_failure("Check that Slurm rebooted the node and took it back", {"msg": "x"},
                          {"stdout_lines": ["release=? ?", "slurmd=", "error="]})
    assert silent == "x; on the node: runs ? ?, slurmd not found"
    gone = node_failure("Check that Slurm rebooted the node and took it back", {"msg": "x"},
                        {"unreachable": True, "msg": "ssh: connect to host n1 port 22: No route to host\n"})
    assert gone == "x; the node does not answer (ssh: connect to host n1 port 22: No route to host)"


def test_another_failed_task_is_named_with_its_message_or_stderr():
    assert node_failure("Check the node runs the served version", {"msg": "came back running compute v1, ..."},
                        {"skipped": True}) == "Check the node runs the served version: came back running compute v1, ..."
    assert node_failure("Ask Slurm to reboot the node when it is idle and resume it",
                        {"msg": "", "stderr": "scontrol: error: Invalid node name specified\n"}) == \
        "Ask Slurm to reboot the node when it is idle and resume it: scontrol: error: Invalid node name specified"
    assert node_failure("Wait until the node answers", {}) == "Wait until the node answers: failed"


def test_a_failed_canary_stops_the_roll_and_says_what_the_links_did():
    failures = {"n1": "not back in service after 6 s: ..."}
    rolled = [{"item": "compute", "old_current": "v2", "current": "v1", "changed": True}]
    assert canary_report(["n1"], failures, rolled) == (
        "canary failed - n1: not back in service after 6 s: ...; boot links rolled back: compute v2 -> v1; "
        "roll stopped, no further node rebooted")
    refused = [{"item": "compute", "failed": True, "msg": "no previous version"},
               {"item": "login", "old_current": "3", "current": "2"}]
    assert "boot links rolled back: compute ROLLBACK FAILED (no previous version), login 3 -> 2;" in \
        canary_report(["n1", "n2"], {"n1": "a", "n2": "b"}, refused)
    assert "canary failed - n1: a; n2: b; " in canary_report(["n1", "n2"], {"n1": "a", "n2": "b"}, refused)


def test_a_rollback_of_several_servers_names_them_and_says_the_change_once():
    rolled = [{"rollback_image": "compute", "image": "compute", "old_current": "v2", "current": "v1"}] * 2
    assert "; boot links rolled back on bs1, bs2: compute v2 -> v1; roll stopped" in \
        canary_report(["n1"], {"n1": "x"}, rolled, ["bs1", "bs2"])


def test_links_left_alone_are_said_so_and_a_canary_without_failures_says_nothing():
    skipped = [{"item": "compute", "skipped": True, "changed": False}]
    for results in (None, [], skipped):
        assert "; boot links left as they are (hpc_stateless_roll_rollback is false); roll stopped" in \
            canary_report(["n1"], {"n1": "x"}, results)
    assert canary_report(["n1", "n2"], {}, None) == ""
