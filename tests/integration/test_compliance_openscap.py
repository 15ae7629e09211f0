"""playbooks/compliance.yml scans the live nodes of the test cluster with OpenSCAP, as verify scans the image.

The nodes (the session fixture ``cluster``) are systemd-nspawn containers booted from what the cluster's boot tree
serves, reached over the ``cluster_node`` connection (nsenter; SSH in production) as in test_compliance_drift. The
scanner is the controller's real oscap with Debian's SCAP Security Guide content, the collection's tailoring, platform
dictionary and waivers: verify's settings. Nothing is faked.

One play (the suite off: test_compliance_live runs it): node002 as booted; node001 with a sysctl drop-in in
/run/sysctl.d that sets ``fs.suid_dumpable = 2`` (a run-time file: no reboot, no drift; removed afterwards), which the
rule sysctl_fs_suid_dumpable reads. Each node's report gets one check per rule and the score, its ARF, XCCDF results
and HTML report are kept beside it and name the node scanned; node001 fails exactly that rule more than node002, and
the play fails naming it; node002 passes (the System.map the served image leaves out is waived for live nodes); neither
node keeps anything of the scanner.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from cluster_support import Cluster

PLAY = "playbooks/compliance.yml"
RULE = "openscap/sysctl_fs_suid_dumpable"
DROP_IN = "/run/sysctl.d/zz-hpc-stateless-openscap-test.conf"
MOUNT_POINT = "/run/hpc-stateless-openscap"


def openscap_checks(out: Path, node: str) -> dict[str, dict]:
    report = json.loads((out / f"{node}.json").read_text(encoding="utf-8"))
    return {c["name"]: c for c in report["checks"] if c["name"].startswith("openscap/")}


def failed_rules(checks: dict[str, dict]) -> set[str]:
    return {name for name, c in checks.items() if not c["passed"] and name != "openscap/score"}


def test_openscap_on_live_nodes(cluster: Cluster, tmp_path):
    started = time.monotonic()
    cluster.wait_idle()
    node, other = cluster.computes[0], cluster.computes[1]
    try:
        assert node.run(f"mkdir -p /run/sysctl.d && echo 'fs.suid_dumpable = 2' > {DROP_IN}").rc == 0
        proc = cluster.playbook(PLAY, "-e", f"hpc_stateless_compliance_dir={tmp_path}",
                                "-e", "hpc_stateless_verify_suite=false", "-e", "hpc_stateless_compliance_openscap=true")
    finally:
        assert node.run(f"rm -f {DROP_IN}").rc == 0
    seconds = time.monotonic() - started
    assert proc.returncode != 0, proc.stdout[-6000:]

    as_booted, broken = openscap_checks(tmp_path, other.name), openscap_checks(tmp_path, node.name)
    for name, checks in ((other.name, as_booted), (node.name, broken)):
        assert "openscap/run" not in checks, checks.get("openscap/run")
        assert len(checks) >= 40 and "openscap/score" in checks, (name, sorted(checks))
        assert "does not know debian 12" in checks["openscap/score"]["detail"], checks["openscap/score"]
        kept = tmp_path / f"{name}.openscap"
        assert {p.name for p in kept.iterdir()} == {"arf.xml", "results.xml", "report.html"}, name
        # the scan ran on that node: the ARF's target is the node's host name
        assert re.search(rf"<(?:\w+:)?target>{name}</", (kept / "arf.xml").read_text(encoding="utf-8")), name
    assert as_booted[RULE]["result"] == "passed", as_booted[RULE]
    assert broken[RULE]["result"] == "failed", broken[RULE]
    assert failed_rules(broken) == failed_rules(as_booted) | {RULE}, (failed_rules(broken), failed_rules(as_booted))
    # the play fails naming node001 and the rule (its message joins the nodes' lines with an escaped newline)
    assert re.search(rf"{node.name}: [^\\]*{RULE} failed", proc.stdout), proc.stdout[-6000:]
    # node002 as booted passes the gate verify applies: the served image leaves /boot empty, which the live waivers
    # excuse with their reason; the tailored-out rules are listed with theirs, as in verify's record
    assert failed_rules(as_booted) == set() and as_booted["openscap/score"]["result"] == "passed", as_booted
    assert as_booted["openscap/file_permissions_systemmap"]["result"] == "waived"
    assert as_booted["openscap/partition_for_var_log_audit"]["result"] == "waived"
    assert f"{other.name}: " not in proc.stdout.split("could not be checked: ", 1)[-1], proc.stdout[-3000:]

    for each in (node, other):
        assert each.run(f"test ! -e {MOUNT_POINT}").rc == 0, f"{each.name} keeps {MOUNT_POINT}"
    print(f"compliance.yml with OpenSCAP, 2 nodes: {seconds:.1f}s; scores "
          f"{ {n: openscap_checks(tmp_path, n)['openscap/score']['detail'].split(';')[0] for n in (node.name, other.name)} }")
