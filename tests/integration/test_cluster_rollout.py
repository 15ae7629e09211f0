"""playbooks/rolling_update.yml against real slurmctld: the test cluster of booted images.

The cluster (tests/integration/cluster_support.py, the session fixture ``cluster``) is a Slurm
controller and two compute nodes, each a systemd-nspawn container booted from what the test boot
tree serves; a node that Slurm reboots (``scontrol reboot`` -> slurmd runs the slurm role's
RebootProgram -> ``systemctl reboot`` -> systemd-nspawn exits 133) boots again from whatever the
tree serves at that moment, as a PXE node does. The versions (tests/integration/rollout_versions.yml):
A is what the cluster booted, B the same layer packed as version B, C a layer whose slurmd asks
a controller that does not exist.

Nothing here is a test double: real slurmctld/slurmd/munge, real reboots, real boot links. The
edge cases a real cluster cannot produce on demand (a node that comes back with the wrong image,
unreachable nodes, nothing served, the NHC drain path whose timer fires every few minutes) stay in
test_deploy_rolling.py against fake_scontrol.py.

The two tests share the session's cluster and run in order: the roll leaves every node on B,
which the canary test starts from; the canary test brings its canary back to B at the end.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from cluster_support import COMPUTE_IMAGE, INVENTORY, Cluster, check_playbook

VERSIONS = yaml.safe_load(Path(__file__).with_name("rollout_versions.yml").read_text(encoding="utf-8"))
ROLL = "playbooks/rolling_update.yml"
# scontrol runs on the controller (through the harness' connection, as an admin's ssh would);
# Slurm is asked every second. The timeout only bounds a hang: a canary that never registers
# ends the wait when Slurm gives up on its reboot (ResumeTimeout).
ROLL_VARS = ("-e", "hpc_stateless_roll_slurm_host=slurmctl", "-e", "hpc_stateless_roll_poll=1",
             "-e", "hpc_stateless_roll_timeout=300")


def served(cluster: Cluster) -> str:
    return Path(cluster.boot_root, COMPUTE_IMAGE).resolve().name


def boot_id(node) -> str:
    return node.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def broken_version_vars() -> dict:
    """Extra vars that make ``cluster_compute`` the layer of version C (and build it)."""
    spec = yaml.safe_load((INVENTORY / "group_vars" / "all" / "layers.yml").read_text(encoding="utf-8"))
    layers = {**spec["hpc_stateless_layers"], **VERSIONS["rollout_layers"]}
    images = {**spec["hpc_stateless_images"],
              COMPUTE_IMAGE: {**spec["hpc_stateless_images"][COMPUTE_IMAGE], "layer": VERSIONS["rollout_broken_layer"]}}
    # The compliance suite in verify sees C's slurm.conf; its one waiver says why C is broken on purpose.
    return {"hpc_stateless_layers": layers, "hpc_stateless_images": images,
            "hpc_stateless_verify_waivers": [str(Path(__file__).with_name("rollout_c_waivers.yml"))]}


def reboot_batches(stdout: str) -> list[list[str]]:
    """Nodes that got the reboot request, one list per batch, from the play's output."""
    batches = []
    for block in stdout.split("TASK [Ask Slurm to reboot the node when it is idle and resume it]")[1:]:
        batches.append(sorted(re.findall(r"^changed: \[(\S+) -> \S+\]", block.split("\nTASK [", 1)[0], re.M)))
    return batches


def job_records(cluster: Cluster, jobs: list[str]) -> dict[str, dict[str, str]]:
    records = {}
    for job in jobs:
        line = cluster.controller.run(f"scontrol show job --oneliner {job}").stdout
        records[job] = dict(re.findall(r"(\w+)=(\S+)", line))
    return records


def submit(cluster: Cluster, *options: str) -> str:
    """One short batch job; its output names the node and the version it ran on."""
    result = cluster.controller.run(
        f"sbatch --parsable --output=/tmp/roll-%j.out {' '.join(options)} "
        "--wrap 'sleep 4; . /etc/image-release; echo $(hostname) $VERSION'")
    assert result.rc == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def wait_jobs_done(cluster: Cluster, jobs: list[str], timeout: float = 300.0) -> dict[str, dict[str, str]]:
    deadline = time.monotonic() + timeout
    while True:
        records = job_records(cluster, jobs)
        if all(r.get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for r in records.values()):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not done after {timeout:.0f}s: "
                                 f"{ {j: (r.get('JobState'), r.get('Reason')) for j, r in records.items()} }")
        time.sleep(1)


def wait_for_state(cluster: Cluster, node: str, pattern: str, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        line = cluster.controller.run(f"scontrol show node --oneliner {node}").stdout
        state = (re.findall(r"(?:^|\s)State=(\S+)", line) or [""])[0]
        if re.search(pattern, state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{node}: State={state}, waited {timeout:.0f}s for {pattern}")
        time.sleep(0.5)


@pytest.fixture(name="on_a", scope="module")
def fixture_on_a(cluster: Cluster) -> Cluster:
    cluster.wait_idle()
    assert {node.release()["VERSION"] for node in cluster.computes} == {"A"}, "the rollout tests start on A"
    return cluster


def test_roll_b_over_a_canary_then_batches_and_jobs_survive(on_a):
    cluster = on_a
    # Boots so far: other tests of the session cluster may have rebooted a node into A already.
    first = {node.name: len(node.boots) for node in cluster.computes}
    cluster.deploy("B")  # pack.yml + deploy.yml, as an admin releases a version
    assert served(cluster) == "B"

    check = cluster.playbook(ROLL, "--check", *ROLL_VARS)
    assert check.returncode == 0, check.stdout[-4000:]
    names = [node.name for node in cluster.computes]
    assert f"{len(names)} of {len(names)} nodes need a reboot" in check.stdout
    listed = re.findall(r"(node\d+): runs cluster_compute A, served is B", check.stdout)
    assert sorted(listed) == names, check.stdout[-3000:]
    assert f"{names[0]}: runs cluster_compute A, served is B (canary)" in check.stdout
    assert {node.name: len(node.boots) for node in cluster.computes} == first  # --check rebooted nothing

    # A job running on the canary when the roll starts: `reboot ASAP` must wait for it.
    jobs = [submit(cluster, f"--nodelist={names[0]}", "--time=2")]
    wait_for_state(cluster, names[0], r"ALLOCATED|MIXED")
    result: dict = {}
    roll = threading.Thread(target=lambda: result.update(proc=cluster.playbook(ROLL, *ROLL_VARS)))
    started = time.monotonic()
    roll.start()
    # While the canary drains and reboots, users keep submitting.
    wait_for_state(cluster, names[0], r"DRAIN|REBOOT", timeout=120)
    jobs += [submit(cluster, "--time=2") for _attempt in range(3)]
    roll.join(timeout=900)
    assert not roll.is_alive(), "the roll did not end within 15 min"
    proc = result["proc"]
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

    assert reboot_batches(proc.stdout) == [[names[0]], names[1:]]  # the canary alone, then the batch
    for node in cluster.computes:
        assert node.release()["VERSION"] == "B", node.name
        roll_boots = node.boots[first[node.name] - 1:]  # the boot on A the roll ended, then the new ones
        assert [boot.version for boot in roll_boots] == ["A", "B"], node.name
        assert roll_boots[0].exit_status == 133, node.name  # rebooted by Slurm's RebootProgram
    states = cluster.wait_idle(timeout=60)
    assert all(states[name] == "idle" for name in names), states

    records = wait_jobs_done(cluster, jobs)
    assert {job: (r["JobState"], r["ExitCode"]) for job, r in records.items()} == {
        job: ("COMPLETED", "0:0") for job in jobs}, records
    print(f"roll of {len(names)} nodes: {seconds:.0f}s; boots: "
          f"{ {n.name: [b.seconds for b in n.boots] for n in cluster.computes} }")

    again = cluster.playbook(ROLL, *ROLL_VARS)
    assert again.returncode == 0, again.stdout[-4000:]
    assert f"0 of {len(names)} nodes need a reboot: every reachable node runs the served version" in again.stdout


def test_canary_that_never_registers_rolls_the_links_back_and_stops(on_a):
    cluster = on_a
    canary, *others = cluster.computes
    assert {node.release()["VERSION"] for node in cluster.computes} == {"B"}, "runs after the roll to B"
    before = {node.name: (len(node.boots), boot_id(node)) for node in others}
    canary_boots = len(canary.boots)
    broken = broken_version_vars()
    # build and verify: C passes verify (which has no controller for slurmd either; the one check that reads
    # slurm.conf's controller is waived, rollout_c_waivers.yml)
    check_playbook(cluster.playbook("site.yml", "-e", json.dumps({
        **broken, "hpc_stateless_site_stages": ["build", "verify"]})), "building and verifying layer rollout_c")
    cluster.deploy("C", **broken)
    assert served(cluster) == "C"

    proc = cluster.playbook(ROLL, *ROLL_VARS)
    try:
        assert proc.returncode != 0, proc.stdout[-4000:]
        out = proc.stdout
        assert served(cluster) == "B"  # the links went back
        assert Path(cluster.boot_root, "images", COMPUTE_IMAGE, "previous").readlink() == Path("C")
        # The canary booted C and nobody else was touched.
        assert [boot.version for boot in canary.boots[canary_boots:]] == ["C"]
        assert canary.release()["VERSION"] == "C"
        for node in others:
            assert (len(node.boots), boot_id(node)) == before[node.name], f"{node.name} was rebooted"
            assert node.release()["VERSION"] == "B"
        assert reboot_batches(out) == [[canary.name]]
        match = re.search(r"canary failed - (.*?); boot links rolled back: (.*?); roll stopped", out)
        assert match, out[-4000:]
        why, rolled = match.groups()
        assert why.startswith(f"{canary.name}: ")
        assert "reboot timed out" in why and "runs cluster_compute C" in why, why
        # slurmd asks for slurmctl-old, which no host resolves: its last error line is the failed lookup
        # or, once it gave up on it, the registration that could not be sent (which one depends on timing)
        assert "slurmd active" in why, why
        assert re.search(r"slurmd's last error: .*(name resolution|Unable to register)", why), why
        assert rolled == f"{COMPUTE_IMAGE} C -> B"
    finally:
        # Power-cycle the canary into B (what an admin does next) so the session cluster is whole.
        canary.reboot()
        canary.wait_boot(canary_boots + 2)
        cluster.wait_idle(timeout=180)
    assert canary.release()["VERSION"] == "B"
