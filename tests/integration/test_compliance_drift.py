"""playbooks/compliance.yml against the live nodes of the test cluster (the session fixture ``cluster``).

The nodes are systemd-nspawn containers booted from what the cluster's boot tree serves, reached over the
``cluster_node`` connection (nsenter; SSH in production). Nothing is faked: the node's own /etc/image-release,
package_facts over its dpkg database, a real file search, the real boot tree and its served manifest.

The test leaves the cluster as it found it: the served link goes back to the version it served, and node001,
whose /etc the test changes, is rebooted into that version (a changed inode's time cannot be undone).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cluster_support import COMPUTE_IMAGE, Cluster

from ansible_collections.hpc.stateless.plugins.module_utils._deploy import bootlink

PLAY = "playbooks/compliance.yml"
CHANGED = "/etc/hpc-stateless-drift-test.conf"
DOWN = "node003"  # in slurm.conf, never booted by the two-node cluster


def served(cluster: Cluster) -> str:
    return Path(cluster.boot_root, COMPUTE_IMAGE).resolve().name


def compliance(cluster: Cluster, out: Path, *args: str):
    # The drift checks alone: the compliance suite reaches nodes over ssh, not the cluster_node connection
    # (test_compliance_live.py runs both over SSH).
    return cluster.playbook(PLAY, "-e", f"hpc_stateless_compliance_dir={out}", "-e", "hpc_stateless_verify_suite=false",
                            *args)


def reports(out: Path, cluster: Cluster) -> dict[str, dict]:
    found = {node.name: json.loads((out / f"{node.name}.json").read_text(encoding="utf-8")) for node in cluster.computes}
    for node in cluster.computes:
        assert (out / f"{node.name}.junit.xml").read_text(encoding="utf-8").startswith("<?xml"), node.name
    return found


def results(report: dict) -> dict[str, str]:
    return {check["name"]: check["result"] for check in report["checks"]}


def serve_another(cluster: Cluster, tree: bootlink.BootTree, version: str) -> None:
    """Point the served link at another version than ``version``: one already published (the rollout tests
    publish B and C), else one already packed (published as deploy's bootlink module does), else pack and
    deploy B (or A) as an admin releases a version."""
    published = [v.name for v in tree.versions(COMPUTE_IMAGE) if v.name != version]
    packs = cluster.pack_dir / COMPUTE_IMAGE
    packed = sorted(d.name for d in packs.iterdir() if d.name != version and (d / "manifest.json").is_file()) \
        if packs.is_dir() else []
    if published or packed:
        bootlink.apply_state({"boot_root": str(cluster.boot_root), "image": COMPUTE_IMAGE, "state": "switched",
                              "version": (published or packed)[0], **({} if published else {"src": str(packs)})})
    else:
        cluster.deploy("B" if version != "B" else "A")


def test_drift_of_live_nodes(cluster, tmp_path):
    started = time.monotonic()
    cluster.wait_idle()
    node, other = cluster.computes[0], cluster.computes[1]
    version = served(cluster)
    assert {n.release()["VERSION"] for n in cluster.computes} == {version}, "the nodes run the served version"
    tree = bootlink.BootTree(str(cluster.boot_root))
    boots = len(node.boots)

    # fresh nodes: nothing drifted
    fresh = compliance(cluster, tmp_path / "fresh")
    assert fresh.returncode == 0, fresh.stdout[-4000:]
    for name, report in reports(tmp_path / "fresh", cluster).items():
        assert report["passed"] and report["booted"] == report["served"] == f"{COMPUTE_IMAGE} {version}", report
        assert set(results(report).values()) == {"passed"}, (name, report)
    fresh_seconds = time.monotonic() - started

    try:
        # a file changed on node001; the tree serves another version than the nodes booted
        assert node.run(f"echo drift > {CHANGED}").rc == 0
        serve_another(cluster, tree, version)
        newer = served(cluster)
        assert newer != version

        # and a node of the group that is not running (an inventory of its own: the cluster has no node003)
        down = tmp_path / "down.json"
        down.write_text(json.dumps({"all": {"children": {"hpc_stateless_nodes": {"hosts": {DOWN: {
            "ansible_connection": "cluster_node", "ansible_cluster_node_dir": str(cluster.work / "nodes" / DOWN),
            "hpc_stateless_boot_image": COMPUTE_IMAGE}}}}}}))
        drift = compliance(cluster, tmp_path / "drift", "-i", str(down))
        assert drift.returncode != 0, drift.stdout[-4000:]
        found = reports(tmp_path / "drift", cluster)
        first, second = found[node.name], found[other.name]
        assert results(first)["drift::files-changed-since-boot"] == "failed"
        files = next(c for c in first["checks"] if c["name"] == "drift::files-changed-since-boot")
        assert CHANGED in files["detail"] and first["changed_files"] >= 1, files
        assert results(second)["drift::files-changed-since-boot"] == "passed", second
        for report in (first, second):
            release = next(c for c in report["checks"] if c["name"] == "drift::image-release")
            assert release["result"] == "failed", report
            assert f"booted from {COMPUTE_IMAGE} {version}; the boot tree serves {COMPUTE_IMAGE} {newer}" \
                in release["detail"], release
        # the failure names the nodes and their findings
        assert f"{node.name}: drift::image-release failed" in drift.stdout
        assert f"{other.name}: drift::image-release failed" in drift.stdout
        assert CHANGED in drift.stdout
        unreachable = json.loads((tmp_path / "drift" / f"{DOWN}.json").read_text(encoding="utf-8"))
        assert set(results(unreachable).values()) == {"error"}, unreachable  # never passed
        assert f"{DOWN}: drift::image-release error: the node is unreachable" in drift.stdout

        # a waiver with its reason excuses the file; the policy can only report
        waived = compliance(cluster, tmp_path / "waived", "-e", json.dumps({
            "hpc_stateless_compliance_fail_on_drift": False,
            # the new file changed its directory too (an entry added; a deletion shows only there)
            "hpc_stateless_compliance_waivers": [{"check": "drift::files-changed-since-boot", "item": item,
                                                  "reason": "the test's file"} for item in ("/etc/hpc-stateless-*",
                                                                                            "/etc")]}))
        assert waived.returncode == 0, waived.stdout[-4000:]
        first = reports(tmp_path / "waived", cluster)[node.name]
        files = next(c for c in first["checks"] if c["name"] == "drift::files-changed-since-boot")
        assert files["result"] == "passed" and "(2 waived)" in files["detail"], files
        assert results(first)["drift::image-release"] == "failed"
    finally:
        bootlink.apply_state({"boot_root": str(cluster.boot_root), "image": COMPUTE_IMAGE, "state": "switched",
                              "version": version})
        node.reboot()
        node.wait_boot(boots + 1)
        cluster.wait_idle()
    assert served(cluster) == version
    assert node.release()["VERSION"] == version
    print(f"compliance.yml on {len(cluster.computes)} fresh nodes: {fresh_seconds:.1f}s; "
          f"whole test: {time.monotonic() - started:.1f}s")
