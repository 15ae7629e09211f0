"""playbooks/compliance.yml runs the compliance suite over real SSH against the live nodes of the test cluster.

The nodes (the session fixture ``cluster``) are systemd-nspawn containers in network namespaces the host is not
part of; each runs the image's own sshd. The test reaches them with the host's ssh client as root, with the
cluster's key (``Cluster.root_key``: made in the cluster's work directory, its public half delivered at boot to
/root/.ssh/authorized_keys as a site's provisioning does), through a ProxyCommand that enters the node's network
namespace (``ip netns exec <ns> socat``): the only stand-in is that one hop, for the network a real cluster's
nodes share with the admin host. Ansible's ssh connection and testinfra's ssh backend then run as they do in
production.

What it holds, in one play: a node as booted runs the suite over SSH (at least MIN_CHECKS checks, all passed,
waived or not applicable) beside the drift checks; on a node with a kernel parameter changed live (``sysctl -w``,
restored afterwards) the same checks run and exactly the one that reads it fails, and the play fails naming it;
a node that does not answer gets errors, never a pass.
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
    """One play (the suite takes about 20 s per node): node002 as booted, node001 with one kernel parameter
    changed live, node003 down."""
    started = time.monotonic()
    cluster.wait_idle()
    node, other = cluster.computes[0], cluster.computes[1]
    before = node.run(f"sysctl -n {SYSCTL}").stdout.strip()
    assert before == "0" and other.run(f"sysctl -n {SYSCTL}").stdout.strip() == "0", before
    try:
        assert node.run(f"sysctl -q -w {SYSCTL}=1").rc == 0
        proc = compliance(cluster, tmp_path, ssh_inventory(cluster, tmp_path / "ssh.json", down=True))
    finally:
        assert node.run(f"sysctl -q -w {SYSCTL}={before}").rc == 0
    play_seconds = time.monotonic() - started
    assert proc.returncode != 0, proc.stdout[-6000:]

    # node002: the whole suite over SSH beside the drift checks, all passed, waived or not applicable
    found = report(tmp_path, other.name)
    checks = suite_checks(found)
    ran = [c for c in checks.values() if c["result"] in ("passed", "failed", "waived")]
    assert len(ran) >= MIN_CHECKS, found["suite"]
    assert found["passed"] and all(c["passed"] for c in found["checks"]), found
    assert checks[BROKEN_CHECK]["result"] == "passed", checks[BROKEN_CHECK]
    # checks of the image at rest say why they do not run on a live node
    at_rest = checks["_shared/test_baseline::test_no_ssh_host_keys"]
    assert at_rest["result"] == "skipped" and "image at rest" in at_rest["detail"], at_rest

    # node001: the same checks; the one that reads the changed parameter failed, and the play names it
    first = report(tmp_path, node.name)
    broken = suite_checks(first)
    assert len([c for c in broken.values() if c["result"] in ("passed", "failed", "waived")]) == len(ran)
    assert broken[BROKEN_CHECK]["result"] == "failed" and SYSCTL in broken[BROKEN_CHECK]["detail"], broken[BROKEN_CHECK]
    assert [c["name"] for c in first["checks"] if not c["passed"]] == [BROKEN_CHECK], first
    assert f"{node.name}: {BROKEN_CHECK} failed" in proc.stdout, proc.stdout[-6000:]

    # node003: nothing answers - errors, never passed
    down = report(tmp_path, DOWN)
    assert {c["result"] for c in down["checks"]} == {"error"}, down
    run_check = suite_checks(down)["suite::run"]
    assert "unreachable over ssh" in run_check["detail"], run_check
    assert f"{DOWN}: drift::image-release error" in proc.stdout and "suite::run error" in proc.stdout
    print(f"compliance.yml over SSH, 3 nodes: {play_seconds:.1f}s; suite per node "
          f"{ {n: report(tmp_path, n)['suite'] for n in (node.name, other.name, DOWN)} }; "
          f"whole test: {time.monotonic() - started:.1f}s")
