"""playbooks/rolling_update.yml: batches, canary, skip-up-to-date, --check and failure handling.

TEST DOUBLE: the nodes here are local directories (their /etc/image-release is a file, reached
over Ansible's local connection) and Slurm is tests/integration/fake_scontrol.py, a recording fake
``scontrol`` that keeps node records like the ones slurmctld printed on the test cluster and
simulates a PXE reboot by reading the boot tree the playbook manages. The playbook, the boot tree
(bootlink/bootconfig) and the rollback are real.

The roll itself, the canary that never registers and the rollback run against real slurmctld and
rebooting nodes in test_cluster_rollout.py. This file keeps the edge cases a real cluster cannot
produce on demand: a node that comes back with the wrong image (a PXE entry or DHCP gone wrong), a
node that never answers again, a node already on the served version or on an older one, Slurm
returning a node to service without a reboot, nothing served, the NHC drain path (its timer fires
every few minutes), and the exact batch plan of five nodes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_site

sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from bootlink_fixtures import make_pack  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import render  # noqa: E402
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state  # noqa: E402

NODES = ["n1", "n2", "n3", "n4", "n5"]
FAKE = Path(__file__).with_name("fake_scontrol.py")


class Cluster:
    """Boot tree with compute v1 and v2 (v2 served), five fake nodes running v1, an inventory."""

    def __init__(self, base: Path, behaviours: dict[str, str] | None = None, running: dict[str, str] | None = None,
                 extra_vars: dict | None = None) -> None:
        self.base = base
        self.boot_root = base / "tftp"
        self.state = base / "slurm"
        for version in ("v1", "v2"):
            apply_state({"boot_root": str(self.boot_root), "image": "compute", "state": "switched",
                         "src": str(make_pack(base / "out", version=version))})
        self.macs = {node: f"52:54:00:00:00:{index:02x}" for index, node in enumerate(NODES, start=1)}
        render({"boot_root": str(self.boot_root), "images": {"compute": {"formats": ["cpio.zst"]}},
                "nodes": [{"name": n, "mac": m} for n, m in self.macs.items()]})
        (self.state / "nodes").mkdir(parents=True)
        (self.state / "boot_root").write_text(str(self.boot_root))
        for node in NODES:
            (self.state / "nodes" / node / "etc").mkdir(parents=True)
            self.set_release(node, (running or {}).get(node, "v1"))
            (self.state / "nodes" / node / "slurm.json").write_text(json.dumps({
                "State": "IDLE", "Reason": "", "BootTime": "2026-01-01T00:00:00", "mac": self.macs[node],
                "image": "compute", "behaviour": (behaviours or {}).get(node, "ok"), "boot_delay": 0.3}))
        scontrol = base / "scontrol"
        scontrol.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} --state {self.state} \"$@\"\n")
        scontrol.chmod(0o755)
        self.inventory = base / "inventory"
        self.inventory.mkdir()
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        group_vars = {
            "hpc_stateless_images": {"compute": {"layer": "base", "formats": ["cpio.zst"]}},
            "hpc_stateless_boot_root": str(self.boot_root),
            "hpc_stateless_roll_scontrol": str(scontrol),
            "hpc_stateless_roll_poll": 1,
            "hpc_stateless_roll_timeout": 15,
            "hpc_stateless_roll_canary_size": 1,
            "hpc_stateless_roll_batch_size": 2,
            **(extra_vars or {}),
        }
        hosts = {"all": {"vars": group_vars, "hosts": {"localhost": local}, "children": {"hpc_stateless_nodes": {
            "hosts": {node: {**local, "hpc_stateless_boot_mac": self.macs[node],
                             "hpc_stateless_roll_release_file": str(self.state / "nodes" / node / "etc/image-release")}
                      for node in NODES}}}}}
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))

    def set_release(self, node: str, version: str) -> None:
        (self.state / "nodes" / node / "etc" / "image-release").write_text(
            f"IMAGE=compute\nVERSION={version}\nLAYER=slurm\nLAYER_KEY=\nBUILD_TIME=2026-01-01T00:00:00Z\n")

    def release(self, node: str) -> str:
        text = (self.state / "nodes" / node / "etc" / "image-release").read_text()
        return dict(line.split("=", 1) for line in text.splitlines())["VERSION"]

    def reboots(self) -> list[str]:
        """Nodes asked to reboot, in call order."""
        path = self.state / "calls.jsonl"
        calls = [json.loads(line)["argv"] for line in path.read_text().splitlines()] if path.exists() else []
        return [argv[-1] for argv in calls if argv[0] == "reboot"]

    def reboot_calls(self) -> list[list[str]]:
        path = self.state / "calls.jsonl"
        return [json.loads(line)["argv"] for line in path.read_text().splitlines()
                if json.loads(line)["argv"][0] == "reboot"] if path.exists() else []

    def served(self) -> str:
        return os.readlink(self.boot_root / "compute")

    def roll(self, *extra: str):
        return run_site(*extra, inventory=self.inventory, playbook="playbooks/rolling_update.yml")


def test_roll_reboots_in_batches_canary_first_then_second_roll_reboots_nothing(tmp_path):
    cluster = Cluster(tmp_path, running={"n3": "v2"})  # n3 already runs the served version

    proc = cluster.roll()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "4 of 5 nodes need a reboot" in proc.stdout
    assert "n1: runs compute v1, served is v2 (canary)" in proc.stdout
    # Order: the canary alone, then batches of two; n3 is never rebooted.
    assert cluster.reboots()[0] == "n1"
    assert sorted(cluster.reboots()[1:3]) == ["n2", "n4"] and cluster.reboots()[3:] == ["n5"]
    call = cluster.reboot_calls()[0]
    assert call[:3] == ["reboot", "ASAP", "nextstate=RESUME"]
    assert call[3] == "reason=hpc.stateless rolling update to compute v2"
    assert all(cluster.release(node) == "v2" for node in NODES)

    again = cluster.roll()
    assert again.returncode == 0, again.stdout[-4000:]
    assert "0 of 5 nodes need a reboot: every reachable node runs the served version" in again.stdout
    assert len(cluster.reboots()) == 4  # no new reboot


def test_check_mode_lists_nodes_and_reasons_and_reboots_nothing(tmp_path):
    cluster = Cluster(tmp_path, running={"n2": "v2", "n4": "v0"})
    proc = cluster.roll("--check")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "4 of 5 nodes need a reboot" in proc.stdout
    for line in ("n1: runs compute v1, served is v2 (canary)", "n3: runs compute v1, served is v2",
                 "n4: runs compute v0, served is v2", "n5: runs compute v1, served is v2"):
        assert line in proc.stdout
    assert "n2:" not in proc.stdout.split("need a reboot", 1)[1].split("TASK", 1)[0]
    assert cluster.reboots() == []
    assert [cluster.release(n) for n in NODES] == ["v1", "v2", "v1", "v0", "v1"]


def test_failed_canary_rolls_links_back_and_stops(tmp_path):
    cluster = Cluster(tmp_path, behaviours={"n1": "fail"}, extra_vars={"hpc_stateless_roll_timeout": 6})
    assert cluster.served() == "images/compute/v2"

    proc = cluster.roll()
    assert proc.returncode != 0
    assert cluster.reboots() == ["n1"]  # nobody after the canary
    assert cluster.served() == "images/compute/v1"  # links went back
    assert os.readlink(cluster.boot_root / "images/compute/previous") == "v2"
    out = proc.stdout
    assert "canary failed - n1: not back in service after 6 s: Slurm says State=DOWN+NOT_RESPONDING" in out
    assert "Reason=Not responding" in out
    assert "boot links rolled back: compute v2 -> v1" in out
    assert [cluster.release(n) for n in NODES] == ["v1"] * 5


def test_failed_canary_without_rollback_leaves_the_links_and_says_so(tmp_path):
    cluster = Cluster(tmp_path, behaviours={"n1": "fail"},
                      extra_vars={"hpc_stateless_roll_timeout": 4, "hpc_stateless_roll_rollback": False})
    proc = cluster.roll()
    assert proc.returncode != 0
    assert cluster.reboots() == ["n1"]
    assert cluster.served() == "images/compute/v2"  # left as they are
    assert "canary failed - n1: not back in service after 4 s" in proc.stdout, proc.stdout[-3000:]
    assert "boot links left as they are (hpc_stateless_roll_rollback is false); roll stopped, no further node " \
        "rebooted" in proc.stdout


def test_failed_later_batch_stops_the_roll_without_rollback(tmp_path):
    cluster = Cluster(tmp_path, behaviours={"n3": "wrong-image"})
    proc = cluster.roll()
    assert proc.returncode != 0
    assert cluster.reboots()[0] == "n1" and sorted(cluster.reboots()[1:]) == ["n2", "n3"]  # n4, n5 untouched
    assert "n3: Check the node runs the served version: came back running compute v1, not compute v2" in proc.stdout
    assert "roll stopped after this batch" in proc.stdout
    assert cluster.served() == "images/compute/v2"  # a later batch does not roll back
    assert [cluster.release(n) for n in NODES] == ["v2", "v2", "v1", "v1", "v1"]


def test_canary_back_in_service_without_a_reboot_fails(tmp_path):
    """Slurm gave the node back (ReturnToService=2 after "reboot timed out") but its BootTime is
    older than the request: the node never rebooted, so it must not count as rolled (how nodes of
    the test cluster looked while slurmd in a container reported the host's boot time)."""
    cluster = Cluster(tmp_path, behaviours={"n1": "no-reboot"})
    proc = cluster.roll()
    assert proc.returncode != 0
    assert cluster.reboots() == ["n1"]
    assert "canary failed - n1: back in service without a new boot: Slurm says State=IDLE BootTime=2026-01-01T00:00:00, " \
        "not after the reboot request at " in proc.stdout
    assert "start slurmd with -b" in proc.stdout
    assert "boot links rolled back: compute v2 -> v1" in proc.stdout


def test_nhc_method_drains_with_the_reboot_reason(tmp_path):
    cluster = Cluster(tmp_path, running={n: "v2" for n in NODES[1:]},
                      extra_vars={"hpc_stateless_roll_method": "nhc"})
    proc = cluster.roll()
    assert proc.returncode == 0, proc.stdout[-4000:]
    calls = [json.loads(line)["argv"] for line in (cluster.state / "calls.jsonl").read_text().splitlines()]
    assert ["update", "NodeName=n1", "State=DRAIN", "Reason=reboot"] in calls
    assert cluster.reboots() == [] and cluster.release("n1") == "v2"


@pytest.mark.parametrize("missing", ["no-served-image"])
def test_nothing_served_is_a_clear_error(tmp_path, missing):
    cluster = Cluster(tmp_path)
    (cluster.boot_root / "compute").unlink()
    proc = cluster.roll()
    assert proc.returncode != 0
    assert f"no image is served under {cluster.boot_root}" in proc.stdout
    assert cluster.reboots() == []
