"""The action hpc.stateless.verify_record (controller side): write, query, check mode, and the refusals in words.

Buildah is replaced by a stand-in that knows one image ID: what is tested is the task's result, the record
rules themselves are module_utils/_verify/record.py's (test_verify_record.py)."""

from __future__ import annotations

import os

from ansible_collections.hpc.stateless.plugins.action.verify_record import record_result
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import BuildahError

KEY = "3f2a9c0d1e2f3a4b5c6d7e8f"
IMAGE = f"localhost/hpc-stateless/slurm:{KEY}"
CHECKS = [{"name": "systemd state", "passed": True, "detail": "running"}]


class FakeBuildah:
    def __init__(self, image_id: str = "a" * 64) -> None:
        self.id = image_id

    def image_id(self, ref: str) -> str:
        if ref != IMAGE:
            raise BuildahError(["buildah", "inspect", ref], 125, f"image not known: {ref}")
        return self.id


def args(tmp_path, **extra):
    return {"dir": str(tmp_path), "layer": "slurm", "key": KEY, "image": IMAGE, "state": "query", "checks": [],
            "settings": None, **extra}


def test_query_before_any_verify_is_missing_with_the_command_that_verifies(tmp_path):
    result = record_result(args(tmp_path), False, FakeBuildah())
    assert (result["changed"], result["passed"], result["status"], result["record"]) == (False, False, "missing", {})
    assert "verify" in result["message"] and result["path"] == str(tmp_path / f"slurm-{KEY}.json")


def test_present_writes_and_a_query_of_the_same_image_passes_then_a_rebuilt_one_is_stale(tmp_path):
    written = record_result(args(tmp_path, state="present", checks=CHECKS), False, FakeBuildah())
    assert (written["changed"], written["passed"], written["status"]) == (True, True, "passed")
    assert sorted(os.listdir(tmp_path)) == [f"slurm-{KEY}.json", f"slurm-{KEY}.junit.xml"]
    assert record_result(args(tmp_path), False, FakeBuildah())["passed"] is True
    stale = record_result(args(tmp_path), False, FakeBuildah("b" * 64))
    assert (stale["passed"], stale["status"]) == (False, "stale")


def test_check_mode_writes_nothing_and_a_failed_check_is_named(tmp_path):
    result = record_result(args(tmp_path, state="present", checks=[{"name": "lynis", "passed": False, "detail": "62"}]),
                           True, FakeBuildah())
    assert (result["changed"], result["passed"], result["status"]) == (True, False, "failed")
    assert result["message"].endswith("failed: lynis") and os.listdir(tmp_path) == []


def test_an_unbuilt_image_and_a_bad_layer_name_fail_in_words(tmp_path):
    result = record_result(args(tmp_path, image="localhost/x:1"), False, FakeBuildah())
    assert result["failed"] and "is not in local containers-storage" in result["msg"] and "site.yml" in result["msg"]
    result = record_result(args(tmp_path, layer="../x"), False, FakeBuildah())
    assert result["failed"] and "'../x' is not a valid name" in result["msg"]
    result = record_result(args(tmp_path, state="present", checks=[]), False, FakeBuildah())
    assert result["failed"] and "proves nothing" in result["msg"] and os.listdir(tmp_path) == []
