"""Multi-node Slurm jobs on the test cluster: a controller and two compute nodes, each a
systemd-nspawn container booted from what the test boot tree serves (cluster_support.py).

The images are ours: the cluster layers of tests/integration/inventory_cluster (slurm role in
its compute and controller flavours, OpenMPI and an MPI hello in a test layer) are built, packed
and deployed; the harness boots each node from its served ``initrd`` like PXE would. The munge
key is one test key, delivered at boot.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cluster_support import COMPUTE_IMAGE, CONTROLLER_IMAGE, Cluster, leftovers, start_cluster

MPI_HELLO = "/usr/local/bin/mpi-hello"


@pytest.fixture(scope="module")
def idle(cluster: Cluster) -> Cluster:
    """The session's cluster once Slurm reports both compute nodes idle."""
    cluster.wait_idle()
    return cluster


def served_version(cluster: Cluster, image: str) -> str:
    return Path(cluster.boot_root, image).resolve().name


def test_every_node_runs_the_version_the_boot_tree_serves(cluster):
    for node in cluster.nodes.values():
        release = node.release()
        assert (release["IMAGE"], release["VERSION"]) == (node.image, node.boots[-1].version), node.name
        assert node.boots[-1].version == served_version(cluster, node.image)
        assert node.boots[-1].system_state == "running", (node.name, node.run("systemctl --failed").stdout)
        assert node.run("hostname").stdout.strip() == node.name


def test_the_munge_key_is_delivered_at_boot_not_in_the_images(cluster):
    for image in (COMPUTE_IMAGE, CONTROLLER_IMAGE):
        with open(Path(cluster.boot_root, image, "initrd"), "rb") as initrd:  # what the nodes booted
            listing = subprocess.run("zstd -dcq | cpio -t --quiet", shell=True, stdin=initrd, capture_output=True,
                                     text=True, check=True).stdout.split()
        assert "etc/munge" in listing and "etc/munge/munge.key" not in listing, image
    for node in cluster.nodes.values():
        assert node.run("stat -c '%U %a' /etc/munge/munge.key").stdout.strip() == "munge 400", node.name
    credential = cluster.computes[0].run("munge -n")
    assert credential.rc == 0, credential.stderr
    decoded = cluster.controller.run("unmunge", input=credential.stdout)
    assert decoded.rc == 0 and "STATUS:          Success (0)" in decoded.stdout, decoded.stderr


def test_srun_runs_on_both_compute_nodes(idle):
    result = idle.controller.run("timeout 120 srun --nodes=2 --ntasks-per-node=1 hostname")
    assert result.rc == 0, result.stderr
    assert sorted(result.stdout.split()) == ["node001", "node002"]


def test_an_mpi_program_runs_across_both_nodes_through_slurm(idle):
    result = idle.controller.run(f"timeout 120 srun --nodes=2 --ntasks=2 --mpi=pmix {MPI_HELLO}")
    assert result.rc == 0, result.stdout + result.stderr
    ranks = dict(re.findall(r"^rank (\d+) of 2 on (\S+)$", result.stdout, re.M))
    assert sorted(ranks) == ["0", "1"], result.stdout
    assert sorted(ranks.values()) == ["node001", "node002"], result.stdout


def test_a_batch_job_writes_its_output_file(idle):
    script = "#!/bin/sh\necho \"batch on $(hostname)\"\nsrun --ntasks-per-node=1 hostname | sort\n"
    submitted = idle.controller.run(
        "cat > /tmp/job.sh && timeout 180 sbatch --wait --parsable --nodes=2 --output=/tmp/job-%j.out /tmp/job.sh",
        input=script)
    assert submitted.rc == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    record = idle.controller.run(f"scontrol show job --oneliner {job}").stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", record))
    assert fields["JobState"] == "COMPLETED" and fields["ExitCode"] == "0:0", record
    batch_host = idle.nodes[fields["BatchHost"]]
    output = batch_host.run(f"cat /tmp/job-{job}.out")  # written where the batch script ran
    assert output.rc == 0, output.stderr
    assert output.stdout.splitlines() == [f"batch on {batch_host.name}", "node001", "node002"]


def test_a_node_rebooted_by_slurm_boots_again_from_the_tree(idle):
    node = idle.computes[-1]
    boots = len(node.boots)
    reboot = idle.controller.run(f"scontrol reboot nextstate=RESUME reason=harness-test {node.name}")
    assert reboot.rc == 0, reboot.stderr
    boot = node.wait_boot(boots + 1)
    assert node.boots[boots - 1].exit_status == 133  # systemd-nspawn's status for a reboot
    assert node.release()["VERSION"] == boot.version == served_version(idle, node.image)
    idle.wait_idle()


def test_playbooks_reach_every_node_through_the_cluster_inventory(cluster, tmp_path):
    """The inventory the rolling update runs with: modules, file transfer both ways."""
    playbook = tmp_path / "reach.yml"
    playbook.write_text(f"""---
- name: Reach every node of the test cluster
  hosts: hpc_stateless_nodes:slurm_controller
  gather_facts: false
  tasks:
    - name: Wait for the node
      ansible.builtin.wait_for_connection:
        timeout: 30
    - name: Run a command
      ansible.builtin.command: hostname
      register: reach_hostname
      changed_when: false
    - name: Send a file (put_file)
      ansible.builtin.copy:
        content: "{{{{ inventory_hostname }}}}\\n"
        dest: /tmp/reach
        mode: "0644"
    - name: Fetch a file (fetch_file)
      ansible.builtin.fetch:
        src: /etc/image-release
        dest: {tmp_path}/fetched/
    - name: Check the node answered as itself
      ansible.builtin.assert:
        that: reach_hostname.stdout == inventory_hostname
""")
    proc = cluster.playbook(str(playbook))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for node in cluster.nodes.values():
        assert node.run("cat /tmp/reach").stdout == f"{node.name}\n"
        fetched = (tmp_path / "fetched" / node.name / "etc/image-release").read_text()
        assert f"IMAGE={node.image}" in fetched.splitlines()


def test_teardown_leaves_nothing_even_when_the_test_fails(cluster):
    with pytest.raises(RuntimeError, match="a failing test"):
        with start_cluster(cluster.release, computes=1, boot_root=cluster.boot_root) as small:
            tag = small.tag
            assert small.computes[0].run("true").rc == 0
            raise RuntimeError("a failing test")
    assert leftovers(tag) == {}
