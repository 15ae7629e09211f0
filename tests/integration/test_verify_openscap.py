# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""OpenSCAP with the SCAP Security Guide in the verify gate, with the real scanner, content, builds and boots.

1. The default image (read from the evidence `make build` leaves, no boot): site.yml verified it with OpenSCAP on
   (the default inventory) and its record build/verify/slurm-<key>.json holds one check per rule of ANSSI-BP-028
   average, the score >= 80 %, every failed rule waived, every tailored-out rule with its reason; the ARF, XCCDF
   results and HTML report are kept beside it (slurm-<key>.openscap/); the image holds nothing of the scanner.
2. A role change that breaks a rule stops site.yml at verify naming the rule: a leaf layer over the default base layer
   (tagged into the test's own prefix: nothing of base is built) applies tests/roles/compliance_sysctl with
   kernel.randomize_va_space = 0 in /etc/sysctl.d (ASLR off), against the base role's 2. Nothing else of the chain
   decides: the compliance suite (which also checks that value) and Lynis are off, OpenSCAP on. verify fails the
   layer naming sysctl_kernel_randomize_va_space, the record lists that rule failed, nothing is packed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, default_base_prefix, run_site

IMAGE = "localhost/hpc-stateless/slurm:latest"
BROKEN_RULE = "sysctl_kernel_randomize_va_space"
SCANNER_PATHS = ("usr/bin/oscap", "usr/share/openscap", "usr/share/xml/scap", "run/hpc-stateless-openscap")


def _default_record() -> dict:
    assert Path("/usr/bin/oscap").exists(), "OpenSCAP is not installed on the build host: run make setup"
    image_id = buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", IMAGE, check=False).strip()
    assert image_id, f"{IMAGE} is not built: run make build"
    for path in sorted((REPO / "build" / "verify").glob("slurm-*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("image_id") == image_id:
            return {**data, "_path": str(path)}
    raise AssertionError(f"no verification record of {IMAGE} ({image_id[:12]}) in build/verify: run make build")


def test_the_default_image_passed_anssi_average_at_80_with_reports_beside_the_record():
    record = _default_record()
    assert record["passed"] is True
    settings = record["settings"]["openscap"]
    assert settings["enabled"] is True and settings["min_pass"] >= 80
    assert settings["profile"] == "anssi_np_nt28_average"
    checks = {c["name"]: c for c in record["checks"] if c["name"].startswith("openscap/")}
    score = checks.pop("openscap/score")
    assert score["result"] == "passed", score
    assert "does not know debian 12" in score["detail"] and "cpe-dictionary.xml" in score["detail"]
    passing, applicable = (int(n) for n in score["detail"].split(": ", 1)[1].split(" ", 1)[0].split("/"))
    assert applicable >= 30 and passing * 100 >= 80 * applicable, score["detail"]
    # Each rule is a check; the failed ones are waived, the tailored-out ones too, each with its reason.
    assert len(checks) >= 40
    assert {c["result"] for c in checks.values()} <= {"passed", "waived", "skipped"}
    assert all(c["waiver"] for c in checks.values() if c["result"] == "waived")
    tailored = {name for name, c in checks.items() if c["result"] == "waived" and "tailored out" in c["detail"]}
    assert {"openscap/partition_for_var_log_audit", "openscap/partition_for_home"} <= tailored
    # The hardening the scanners look for is in place, not waived.
    for rule in ("package_rsyslog_installed", "service_rsyslog_enabled", "rsyslog_files_permissions",
                 "ensure_logrotate_activated", "file_permissions_systemmap", "sshd_disable_empty_passwords",
                 "sysctl_fs_protected_hardlinks"):
        assert checks[f"openscap/{rule}"]["result"] == "passed", checks[f"openscap/{rule}"]
    kept = Path(record["_path"][:-len(".json")] + ".openscap")
    assert {p.name for p in kept.iterdir()} == {"arf.xml", "results.xml", "report.html"}
    assert "anssi_np_nt28_average" in (kept / "results.xml").read_text(encoding="utf-8")[:5_000_000]


def test_the_image_holds_nothing_of_the_scanner():
    name = "hpc-stateless-openscap-look"
    buildah("rm", name, check=False)
    buildah("from", "--pull=never", "--quiet", "--name", name, IMAGE)
    try:
        root = Path(buildah("mount", name).strip())
        assert [p for p in SCANNER_PATHS if (root / p).exists() or (root / p).is_symlink()] == []
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


@pytest.fixture(name="prefix")
def fixture_prefix():
    with default_base_prefix("openscap") as name:
        yield name


def test_a_role_change_that_breaks_a_rule_stops_site_at_verify_naming_the_rule(tmp_path, prefix):
    default = yaml.safe_load((REPO / "inventory" / "group_vars/all/layers.yml").read_text(encoding="utf-8"))
    inventory = tmp_path / "inventory"
    (inventory / "group_vars/all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text((REPO / "inventory" / "hosts.yml").read_text(encoding="utf-8"))
    spec = {
        "hpc_stateless_layers": {
            "base": default["hpc_stateless_layers"]["base"],
            "noaslr": {"parent": "base", "roles": ["compliance_sysctl"],
                       "vars": {"compliance_sysctl_values": {"kernel.randomize_va_space": 0}}},
        },
        "hpc_stateless_images": {"noaslr": {"layer": "noaslr", "formats": ["cpio.zst"]}},
        "hpc_stateless_site_stages": ["build", "verify", "pack", "deploy"],
        # OpenSCAP alone decides: the suite checks the same value (test_verify_compliance.py holds that).
        "hpc_stateless_verify_suite": False,
        "hpc_stateless_verify_settle_seconds": 0,
        "hpc_stateless_verify_record_dir": str(tmp_path / "verify"),
        "hpc_stateless_pack_output_dir": str(tmp_path / "images"),
        "hpc_stateless_boot_root": str(tmp_path / "tftpboot"),
    }
    (inventory / "group_vars/all/site.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    # OpenSCAP on: an extra variable, as run_site turns it off with one
    proc = run_site("-e", f"hpc_stateless_image_prefix={prefix}", "-e", '{"hpc_stateless_verify_openscap": true}',
                    inventory=inventory)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"site.yml passed a layer that breaks {BROKEN_RULE}:\n{out[-3000:]}"
    assert "noaslr: verification failed" in out and f"failed rules not waived: {BROKEN_RULE} " in out, out[-4000:]
    assert "PLAY [Pack the images]" not in out, "site.yml went on past verify"
    record = json.loads(next((tmp_path / "verify").glob("noaslr-*.json")).read_text(encoding="utf-8"))
    failed = [c["name"] for c in record["checks"] if not c["passed"]]
    assert failed == [f"openscap/{BROKEN_RULE}", "openscap"], failed
    assert next((tmp_path / "verify").glob("noaslr-*.openscap/report.html")).stat().st_size > 0
    assert not (tmp_path / "images").exists() or not any((tmp_path / "images").rglob("*"))
    assert prefix not in buildah("containers", "--format", "{{.ImageName}}")
