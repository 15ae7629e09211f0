# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The compliance suite gates the release, with a real build, boot and suite (nothing doubled).

A site leaf layer over the default base layer (tagged into the test's own prefix: nothing of base is built)
applies tests/roles/compliance_sysctl, which writes a kernel parameter from an inventory variable of the
test's own inventory: net.ipv4.conf.all.accept_redirects = 1, against the base role's 0. site.yml (build,
verify, pack, deploy) builds the leaf, boots it under systemd-nspawn, runs the suite in it and stops at
verify naming the check (base/test_base::test_sysctl); the record lists every check of the suite with
that one failed, the JUnit report beside it says the same, and nothing is packed or deployed.
Lynis is left out (hpc_stateless_verify_lynis: false): it is not what this test is about, and costs ~20 s.

Lynis runs in the background of the boot, beside the other checks, and is waited for last: a Lynis that does
not finish within hpc_stateless_verify_lynis_timeout fails the layer's check `lynis` in words, stops site.yml
at verify and leaves no container behind (the second test, with the suite off and a 2 s timeout).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, default_base_prefix, run_site

FAILING_CHECK = "base/test_base::test_sysctl"


def _inventory(root: Path, **overrides) -> Path:
    default = yaml.safe_load((REPO / "inventory" / "group_vars/all/layers.yml").read_text(encoding="utf-8"))
    inventory = root / "inventory"
    (inventory / "group_vars/all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text((REPO / "inventory" / "hosts.yml").read_text(encoding="utf-8"))
    spec = {
        "hpc_stateless_layers": {
            "base": default["hpc_stateless_layers"]["base"],
            "leaky": {"parent": "base", "roles": ["compliance_sysctl"],
                      "vars": {"compliance_sysctl_values": {"net.ipv4.conf.all.accept_redirects": 1}}},
        },
        "hpc_stateless_images": {"leaky": {"layer": "leaky", "formats": ["cpio.zst"]}},
        "hpc_stateless_site_stages": ["build", "verify", "pack", "deploy"],
        "hpc_stateless_verify_lynis": False,
        # no unit of this layer fails late: the settle time after boot buys nothing here
        "hpc_stateless_verify_settle_seconds": 0,
        "hpc_stateless_verify_record_dir": str(root / "verify"),
        "hpc_stateless_pack_output_dir": str(root / "images"),
        "hpc_stateless_boot_root": str(root / "tftpboot"),
        **overrides,
    }
    (inventory / "group_vars/all/site.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return inventory


@pytest.fixture(scope="module")
def prefix():
    """The tests' own image prefix, with the default base layer in it: the second test finds the leaf the first built."""
    with default_base_prefix("compliance") as name:
        yield name


def test_a_role_change_that_breaks_a_check_stops_site_at_verify_naming_it(tmp_path, prefix):
    inventory = _inventory(tmp_path)
    proc = run_site("-e", f"hpc_stateless_image_prefix={prefix}", inventory=inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"site.yml passed a layer that breaks {FAILING_CHECK}:\n{out[-3000:]}"
    # verify failed the layer, naming the check and what it found
    assert f"1 compliance check(s) failed: {FAILING_CHECK} (failed)" in out, out[-4000:]
    assert "net.ipv4.conf.all.accept_redirects" in out
    assert "leaky: verification failed" in out
    assert "PLAY [Pack the images]" not in out and "PLAY [Deploy packed images" not in out, "site.yml went on past verify"

    records = sorted((tmp_path / "verify").glob("leaky-*.json"))
    assert len(records) == 1, f"one record of the leaf, found {records}"
    record = json.loads(records[0].read_text(encoding="utf-8"))
    assert record["passed"] is False
    checks = {c["name"]: c for c in record["checks"]}
    suite = [c for name, c in checks.items() if "::" in name]
    assert len(suite) >= 50, f"the record lists the suite's checks, found {len(suite)}"
    assert [name for name, c in checks.items() if not c["passed"]] == [FAILING_CHECK, "compliance suite"]
    assert checks[FAILING_CHECK]["result"] == "failed"
    assert "net.ipv4.conf.all.accept_redirects" in checks[FAILING_CHECK]["detail"]
    # the layer's roles are base and compliance_sysctl: checks of roles it does not apply are not run
    assert not [name for name in checks if name.startswith(("hsn/", "compute/", "slurm/"))]
    assert checks["_shared/test_runtime::test_machine_id_generated_at_boot"]["result"] == "passed"
    assert checks["base/test_base::test_live_network_sysctl_as_configured"]["result"] == "passed"

    junit = ET.parse(records[0].with_suffix("").with_suffix(".junit.xml")).getroot().find("testsuite")
    assert junit.get("tests") == str(len(record["checks"]))
    failed = [case.get("name") for case in junit.iter("testcase") if case.find("failure") is not None]
    assert failed == [FAILING_CHECK, "compliance suite"]

    # nothing packed, nothing deployed
    assert not (tmp_path / "images").exists() or not any((tmp_path / "images").rglob("*"))
    assert not (tmp_path / "tftpboot").exists() or not any((tmp_path / "tftpboot").rglob("*"))


def test_lynis_that_does_not_finish_in_time_fails_the_layer_naming_lynis(tmp_path, prefix):
    inventory = _inventory(tmp_path, hpc_stateless_verify_suite=False, hpc_stateless_verify_lynis_timeout=2)
    # Lynis on: an extra variable, as run_site turns it off with one
    proc = run_site("-e", f"hpc_stateless_image_prefix={prefix}", "-e", '{"hpc_stateless_verify_lynis": true}',
                    inventory=inventory)
    left = buildah("containers", "--format", "{{.ImageName}}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"site.yml passed a layer whose Lynis did not finish:\n{out[-3000:]}"
    assert "Lynis ran for 2 s (hpc_stateless_verify_lynis_timeout) and did not finish" in out, out[-4000:]
    assert "PLAY [Pack the images]" not in out, "site.yml went on past verify"
    record = json.loads(next((tmp_path / "verify").glob("leaky-*.json")).read_text(encoding="utf-8"))
    checks = {c["name"]: c for c in record["checks"]}
    # the checks that ran beside Lynis passed and are recorded; the one failed check is Lynis
    assert [name for name, c in checks.items() if not c["passed"]] == ["lynis"], checks
    assert checks["systemd state"]["passed"] and checks["units enabled by roles are active"]["passed"]
    assert "did not finish" in checks["lynis"]["detail"]
    assert prefix not in left, f"a container of the failed verify is left: {left}"
