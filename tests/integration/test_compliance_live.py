"""playbooks/compliance.yml runs the compliance suite over real SSH against the live nodes of the test cluster.

The nodes (the session fixture ``cluster``) are systemd-nspawn containers in network namespaces the host is not
part of; each runs the image's own sshd. The test reaches them with the host's ssh client as root, with the
cluster's key (``Cluster.root_key``: made in the cluster's work directory, its public half delivered at boot to
/root/.ssh/authorized_keys as a site's provisioning does), through a ProxyCommand that enters the node's network
namespace (``ip netns exec <ns> socat``): the only stand-in is that one hop, for the network a real cluster's
nodes share with the admin host. Ansible's ssh connection and testinfra's ssh backend then run as they do in
production.

What it holds: every node runs the suite over SSH (at least MIN_CHECKS checks, all passed, waived or not
applicable) beside the drift checks; a kernel parameter changed live on one node (``sysctl -w``, restored
afterwards) is reported as that check failed and the play fails naming it; a node that does not answer gets an
error, never a pass.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from cluster_support import COMPUTE_IMAGE, CONTROLLER, Cluster

PLAY = "playbooks/compliance.yml"
DOWN = "node003"  # in slurm.conf and /etc/hosts, never booted by the two-node cluster
DOWN_ADDRESS = "10.251.0.13"
#: The base role's live check of per-network-namespace kernel parameters, and one it checks.
BROKEN_CHECK = "base/test_base::test_live_network_sysctl_as_configured"
SYSCTL = "net.ipv4.conf.all.accept_redirects"
#: Fewer checks than this on a node would mean the suite did not really run there.
MIN_CHECKS = 100


def ssh_inventory(cluster: Cluster, path: Path, down: bool = False) -> Path:
    """The compute nodes over ssh as root; with ``down``, node003 too (reached through the controller's
    namespace, where nothing answers for it)."""
    key = cluster.root_key

    def over_ssh(address: str, netns: str) -> dict:
        proxy = f'-o ProxyCommand="ip netns exec {Path(netns).name} socat - TCP:%h:%p"'
        return {"ansible_connection": "ssh", "ansible_host": address, "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": f"{proxy} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                "ansible_python_interpreter": "/usr/bin/python3", "hpc_stateless_boot_image": COMPUTE_IMAGE}

    hosts = {node.name: over_ssh(node.address, node.netns) for node in cluster.computes}
    if down:
        hosts[DOWN] = over_ssh(DOWN_ADDRESS, cluster.nodes[CONTROLLER].netns)
    path.write_text(json.dumps({"all": {"children": {"hpc_stateless_nodes": {"hosts": hosts}}}}), encoding="utf-8")
    return path


def compliance(cluster: Cluster, out: Path, inventory: Path):
    return cluster.playbook(PLAY, "-i", str(inventory), "-e", f"hpc_stateless_compliance_dir={out}")


def report(out: Path, node: str) -> dict:
    assert (out / f"{node}.junit.xml").read_text(encoding="utf-8").startswith("<?xml"), node
    return json.loads((out / f"{node}.json").read_text(encoding="utf-8"))


def suite_checks(found: dict) -> dict[str, dict]:
    return {c["name"]: c for c in found["checks"] if not c["name"].startswith("drift::")}


def test_suite_over_ssh_on_live_nodes(cluster, tmp_path):
    started = time.monotonic()
    cluster.wait_idle()
    node, other = cluster.computes[0], cluster.computes[1]

    # every node: the whole suite over SSH, beside the drift checks, all passed, waived or not applicable
    fresh = compliance(cluster, tmp_path / "fresh", ssh_inventory(cluster, tmp_path / "ssh.json"))
    assert fresh.returncode == 0, fresh.stdout[-6000:]
    fresh_seconds = time.monotonic() - started
    counts = {}
    for name in (node.name, other.name):
        found = report(tmp_path / "fresh", name)
        checks = suite_checks(found)
        ran = [c for c in checks.values() if c["result"] in ("passed", "failed", "waived")]
        assert len(ran) >= MIN_CHECKS, (name, found["suite"])
        assert found["passed"] and all(c["passed"] for c in found["checks"]), found
        assert checks[BROKEN_CHECK]["result"] == "passed", checks[BROKEN_CHECK]
        # checks of the image at rest say why they do not run on a live node
        at_rest = checks["_shared/test_baseline::test_no_ssh_host_keys"]
        assert at_rest["result"] == "skipped" and "image at rest" in at_rest["detail"], at_rest
        counts[name] = found["suite"]

    # one kernel parameter changed live on node001, and a node that does not answer
    before = node.run(f"sysctl -n {SYSCTL}").stdout.strip()
    assert before == "0", before
    try:
        assert node.run(f"sysctl -q -w {SYSCTL}=1").rc == 0
        broken = compliance(cluster, tmp_path / "broken", ssh_inventory(cluster, tmp_path / "down.json", down=True))
    finally:
        assert node.run(f"sysctl -q -w {SYSCTL}={before}").rc == 0
    assert broken.returncode != 0, broken.stdout[-6000:]
    first = suite_checks(report(tmp_path / "broken", node.name))
    assert first[BROKEN_CHECK]["result"] == "failed" and SYSCTL in first[BROKEN_CHECK]["detail"], first[BROKEN_CHECK]
    assert [n for n, c in first.items() if not c["passed"]] == [BROKEN_CHECK]
    assert report(tmp_path / "broken", other.name)["passed"]
    assert f"{node.name}: {BROKEN_CHECK} failed" in broken.stdout, broken.stdout[-6000:]
    down = report(tmp_path / "broken", DOWN)
    assert {c["result"] for c in down["checks"]} == {"error"}, down  # never passed
    run_check = suite_checks(down)["suite::run"]
    assert "unreachable over ssh" in run_check["detail"], run_check
    assert f"{DOWN}: drift::image-release error" in broken.stdout and "suite::run error" in broken.stdout
    print(f"compliance.yml over SSH on {len(counts)} nodes: {fresh_seconds:.1f}s, suite per node {counts}; "
          f"whole test: {time.monotonic() - started:.1f}s")
