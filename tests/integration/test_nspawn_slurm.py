"""The real client: a Slurm job between two booted containers of images built by our roles.

- compute node: the default ``compute`` image (layer ``slurm`` of the default inventory, slurm
  role with ``slurm_role: compute``), host name ``node001`` (in the default ``slurm_nodes``);
- controller: the slurm role in its controller flavour (``slurm_role: controller``), built as an
  extra layer ``slurm_controller`` on the default ``compute`` layer, host name ``slurmctl`` (the
  default ``slurm_controller_hosts``).

The images hold no munge key: a key made for this test is bind-mounted into both containers
at boot, where the role's munge-key-wait gives it to munge. The containers share one network
namespace made for the test (only loopback), so nothing touches the host's network or ports.
The test asserts that ``srun -N1 hostname`` on the controller prints the compute container's
host name.

One setting differs from a real node, delivered at boot like the key: the default compute image
tracks processes with cgroups (``slurm_process_tracking: cgroup``), which needs writable cgroup
controllers, and systemd-nspawn mounts them read-only (slurmd: "unable to create cgroup
'/sys/fs/cgroup/freezer/slurm_node001': Read-only file system"). The controller layer is built
with the role's container setting (``slurm_process_tracking: linuxproc``, ``config_overrides``),
and the ``slurm.conf`` the role rendered there is bound over the compute image's at boot, so both
daemons read the same file, as Slurm wants.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, read_from_image, run_site
from nspawn_support import connection, leftovers, new_runtime_dir, remove_runtime_dir, run, wait_clean

DEFAULT_INVENTORY = REPO / "inventory"
CONTROLLER, NODE = "slurmctl", "node001"
# Set to build into another prefix while developing; the default prefix is what `make test` built.
PREFIX = os.environ.get("HPC_STATELESS_SLURM_TEST_PREFIX")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Image references of the compute and controller layers, current with the checkout."""
    work = tmp_path_factory.mktemp("slurm-images")
    shutil.copytree(DEFAULT_INVENTORY, work / "inventory")
    layers_file = work / "inventory/group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    layers = spec["hpc_stateless_layers"]
    compute_layer = spec["hpc_stateless_images"]["compute"]["layer"]
    layers["slurm_controller"] = {
        "description": "Slurm controller for the nspawn integration test (slurm role, controller flavour)",
        "parent": layers[compute_layer]["parent"], "roles": ["hpc.stateless.slurm"],
        "vars": {"slurm_role": "controller", "slurm_process_tracking": "linuxproc",
                 "slurm_slurmd_parameters": ["config_overrides"]}}
    layers_file.write_text(yaml.safe_dump(spec))
    plan_file = work / "plan.json"
    # The plan is read in a run of its own: in the run that built a layer, the layer host also
    # holds the variables its roles loaded (include_vars), and the plan then computes other keys.
    (work / "plan.yml").write_text(
        "- name: Record the image of every layer\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Plan\n      hpc.stateless.plan:\n      register: plan\n"
        f"    - name: Write\n      ansible.builtin.copy:\n        content: \"{{{{ plan.layers | to_json }}}}\"\n"
        f"        dest: {plan_file}\n        mode: \"0644\"\n")
    extra = ["-e", f"hpc_stateless_image_prefix={PREFIX}"] if PREFIX else []
    # Only the build: this test boots the two images itself, as a pair (verify's single-node boot
    # cannot start slurmctld under the layer's host name; the cluster tests cover verify + pack).
    stages = ["-e", '{"hpc_stateless_site_stages": ["build"]}']
    for playbook, options in (("site.yml", stages), (str(work / "plan.yml"), [])):
        proc = run_site(*extra, *options, inventory=work / "inventory", playbook=playbook)
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    plan = json.loads(plan_file.read_text())
    return {"compute": plan[compute_layer]["image"], "controller": plan["slurm_controller"]["image"]}


@pytest.fixture(scope="module")
def netns():
    """A network namespace of our own with loopback up: the containers' only network.

    Besides 127.0.0.1 its loopback gets 127.0.0.2: glibc's getaddrinfo(AI_ADDRCONFIG), which
    Slurm uses, returns no IPv4 address at all while 127.0.0.1 is the only one configured.
    """
    name = f"hpc-nspawn-slurm-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", name, "ip", "address", "add", "127.0.0.2/8", "dev", "lo"],
                       check=True)
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@pytest.fixture(scope="module")
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


@pytest.fixture(scope="module")
def cluster(images, netns, runtime_dir, tmp_path_factory):
    """Boot the controller and the compute node, each with the test's munge key bound in at boot."""
    files = tmp_path_factory.mktemp("slurm-boot")
    key = os.urandom(1024)
    hosts = files / "hosts"
    hosts.write_text(f"127.0.0.1 localhost {CONTROLLER} {NODE}\n::1 localhost ip6-localhost\n")
    slurm_conf = files / "slurm.conf"
    slurm_conf.write_text(read_from_image(images["controller"], "/etc/slurm/slurm.conf"))
    binds = {CONTROLLER: [], NODE: [f"--bind-ro={slurm_conf}:/etc/slurm/slurm.conf"]}
    booted = {}
    try:
        for name, image in ((CONTROLLER, images["controller"]), (NODE, images["compute"])):
            # each container gets its own copy: munge-key-wait gives it owner munge and mode 0400
            copy = files / f"{name}.munge.key"
            copy.write_bytes(key)
            copy.chmod(0o600)
            conn = connection(runtime_dir, host=name, image=image, boot=True, network=netns,
                              boot_timeout=120,
                              extra_args=[f"--bind={copy}:/etc/munge/munge.key", f"--bind-ro={hosts}:/etc/hosts",
                                          *binds[name]])
            conn._connect()
            booted[name] = conn
        yield booted
    finally:
        for conn in booted.values():
            conn.reset()


def wait_for(conn, command: str, expected: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        rc, out, err = run(conn, command)
        if rc == 0 and out.strip() == expected:
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"{command!r} gave rc={rc} {out!r} {err!r}, waited {timeout:.0f}s for {expected!r}")
        time.sleep(1)


def test_the_images_carry_no_munge_key(images):
    for image in images.values():
        name = f"hpc-nspawn-test-keycheck-{uuid.uuid4().hex[:6]}"
        buildah("from", "--pull=never", "--quiet", "--name", name, image)
        try:
            root = Path(buildah("mount", name).strip())
            assert not (root / "etc/munge/munge.key").exists(), f"{image} has a baked munge key"
        finally:
            buildah("umount", name, check=False)
            buildah("rm", name, check=False)


def test_both_containers_booted_with_munge_and_their_slurm_daemon(cluster):
    for name, daemon in ((CONTROLLER, "slurmctld"), (NODE, "slurmd")):
        conn = cluster[name]
        assert conn._state["system_state"] in ("running", "degraded"), conn._state
        wait_for(conn, f"systemctl is-active munge.service {daemon}.service | sort -u", "active")
        rc, out, _err = run(conn, "hostname; stat -c '%U %a' /etc/munge/munge.key")
        assert (rc, out.split("\n")[:2]) == (0, [name, "munge 400"])


def test_the_key_delivered_at_boot_is_shared(cluster):
    rc, credential, err = run(cluster[NODE], "munge -n")
    assert rc == 0, err
    rc, out, err = run(cluster[CONTROLLER], "unmunge", in_data=credential.encode())
    assert rc == 0, err
    assert "STATUS:          Success (0)" in out


def test_srun_runs_on_the_compute_container(cluster):
    controller = cluster[CONTROLLER]
    wait_for(controller, f"sinfo --noheader --nodes={NODE} --format=%T | tr -d '*'", "idle", timeout=120)
    rc, out, err = run(controller, "timeout 120 srun -N1 hostname")
    assert (rc, out.strip()) == (0, NODE), err


def test_nothing_is_left_after_the_cluster_stops(cluster, runtime_dir):
    for conn in cluster.values():
        conn.reset()
    assert wait_clean(runtime_dir) == {}, leftovers(runtime_dir)
