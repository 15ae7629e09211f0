"""Several boot servers, one switch (docs/scale.md): deploy.yml stages a release on two boot servers, then switches
both; a server whose disk is too small fails the staging and neither switches; a qemu node boots through iPXE from
the pair while the first server is down.

Each boot server is a network namespace with a real sshd, which Ansible reaches over ssh, and the real nginx that
the role hpc.stateless.boot_server starts there (its standalone mode: there is no systemd on this host);
boot_server_support.py says why. Every check of what a server serves is an HTTP request from inside its namespace.
The node is qemu (TCG) with the NIC's iPXE ROM; qemu's TFTP plays the second server's TFTP service, which serves
only hpc-first.ipxe; everything else comes over HTTP from the servers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from boot_server_support import boot_servers
from conftest import REPO, run_site
from deploy_support import MARKER, find_kernel, pxe_boot, release_of, write_pack

IMAGE = "scaletest"
NODE_MAC = "52:54:00:12:34:41"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/sbin/sshd") or not os.path.exists("/usr/sbin/nginx")
    or not all(shutil.which(tool) for tool in ("qemu-system-x86_64", "curl", "ssh"))
    or not os.path.exists("/usr/lib/ipxe/qemu/pxe-e1000.rom"),
    reason="needs root (network namespaces), openssh-server, nginx, curl, qemu-system-x86 and ipxe-qemu "
           "(scripts/setup.sh)")


def inventory(base, servers, key) -> str:
    common = {"ansible_user": "root", "ansible_ssh_private_key_file": str(key),
              "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
              "ansible_python_interpreter": "/usr/bin/python3", "ansible_pipelining": True}
    hosts = {server.name: {**common, "ansible_host": server.address, "hpc_stateless_boot_root": str(server.root),
                           "hpc_stateless_boot_tftp_root": str(server.tftp),
                           "boot_server_state_dir": str(server.state), "boot_server_listen": f"{server.address}:80"}
             for server in servers}
    data = {"all": {
        "vars": {"hpc_stateless_images": {IMAGE: {"layer": "base", "formats": ["cpio.zst"],
                                                  "kernel_args": "panic=-1 console=ttyS0"}},
                 "hpc_stateless_pack_output_dir": str(base / "out"),
                 "hpc_stateless_boot_servers": "boot_servers",
                 "hpc_stateless_boot_server_map": {"rack1": ["bs1"], "rack2": ["bs2"]},
                 "hpc_stateless_boot_lock_timeout": 0,
                 "hpc_stateless_unverified_ok": "deploy test: marker packs, no layer image to verify",
                 # the servers share the build host's packages: nothing to install, and no systemd to run nginx
                 "boot_server_install": False, "boot_server_tftp": False, "boot_server_service": "standalone"},
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "children": {"boot_servers": {"hosts": hosts},
                     "hpc_stateless_nodes": {"children": {
                         "rack1": {"hosts": {"n1": {"hpc_stateless_boot_mac": NODE_MAC,
                                                    "hpc_stateless_boot_kernel_args": "hpc_node=n1"}}},
                         "rack2": {"hosts": {}}}}}}}
    path = base / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def served(server) -> str:
    """The release line of the image script the server serves now (HTTP from its namespace)."""
    status, body = server.http_get(f"/ipxe/images/{IMAGE}.ipxe")
    assert status == 200, (server.name, status, body[:300])
    return re.search(r"^# hpc.stateless release (.*)$", body.decode(), re.M).group(1)


def deploy(inv, version) -> subprocess.CompletedProcess:
    return run_site("-e", f"hpc_stateless_deploy_version={version}", inventory=inv, playbook="playbooks/deploy.yml")


@pytest.fixture(scope="module")
def cluster():
    # Not under pytest's 0700 tmp: nginx's workers (www-data) read the boot roots. mkdtemp makes it ours alone,
    # then others may read it (nobody else may write).
    base = Path(tempfile.mkdtemp(prefix="hpc-boot-servers-"))
    base.chmod(0o755)
    kernel = find_kernel()
    packs = {v: write_pack(base / "out", IMAGE, v, kernel, created=f"2026-04-0{i}T00:00:00Z")
             for i, v in enumerate(("v1", "v2", "v3"), 1)}
    size = sum(p.stat().st_size for p in packs["v1"].iterdir())
    # bs2's disk holds two published versions and the staging of one, not a second staging: 3.5 releases
    with boot_servers(base, 2, disk_bytes={"bs2": int(size * 3.5) + 2**20}) as (servers, key):
        inv = inventory(base, servers, key)
        proc = run_site(inventory=inv, playbook="playbooks/boot_servers.yml")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        yield {"base": base, "servers": servers, "inventory": inv, "packs": packs, "times": {}}
    shutil.rmtree(base, ignore_errors=True)


def script_hashes(pack) -> set[str]:
    return {hashlib.sha256((pack / name).read_bytes()).hexdigest() for name in ("vmlinuz", f"{IMAGE}.cpio.zst")}


def test_a_release_is_staged_on_both_servers_then_both_switch(cluster):
    servers, times = cluster["servers"], cluster["times"]
    start = time.monotonic()
    proc = deploy(cluster["inventory"], "v1")
    times["deploy v1"] = round(time.monotonic() - start, 1)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    line = served(servers[0])
    assert line.startswith(f"{IMAGE} v1 ") and line == served(servers[1])  # the same release, by the same hashes
    for digest in script_hashes(cluster["packs"]["v1"]):
        assert digest in line
        for server in servers:
            status, body = server.http_get(f"/sha256/{digest}")
            assert status == 200 and hashlib.sha256(body).hexdigest() == digest, server.name
    for server in servers:
        assert not (server.root / ".incoming").exists()  # the staged copy is gone
        assert not (server.root / ".hpc-stateless-switch").exists()  # every server switched: no fence left
        assert server.http_get("/.hpc-stateless.lock")[0] == 404  # dot files are not served


def test_a_server_that_misses_its_switch_refuses_its_scripts_until_a_deploy_levels_it(cluster):
    """bs2 fails between the fence every server gets before the switch and its own switch (its image script's path
    is made a directory, so its render fails: it stands in for a server lost at that moment). bs1 switches to v2;
    bs2 keeps its v1 script but answers 503 for ipxe/, so nodes take their scripts from bs1; the next deploy levels
    bs2."""
    servers, packs = cluster["servers"], cluster["packs"]
    bs1, bs2 = servers
    obstacle = bs2.root / "ipxe" / "images" / f"{IMAGE}.ipxe"
    obstacle.unlink()
    (obstacle / "in-the-way").mkdir(parents=True)
    try:
        proc = deploy(cluster["inventory"], "v2")
        assert proc.returncode != 0 and re.search(r"TASK \[Render pxelinux and iPXE entries\].*fatal: \[bs2\]",
                                                  proc.stdout, re.S), proc.stdout[-5000:]
        assert served(bs1).startswith(f"{IMAGE} v2 ")
        assert not (bs1.root / ".hpc-stateless-switch").exists()
        assert (bs2.root / ".hpc-stateless-switch").exists()
        for path in ("/ipxe/boot.ipxe", f"/ipxe/images/{IMAGE}.ipxe"):
            assert bs2.http_get(path)[0] == 503, path  # fenced: no old script reaches a node
            assert bs1.http_get(path)[0] == 200, path
        for digest in script_hashes(packs["v2"]):  # the release itself is there (published before the fence)
            assert bs2.http_get(f"/sha256/{digest}")[0] == 200
    finally:
        shutil.rmtree(obstacle)
    # room on bs2 to stage the release again (its disk holds 3.5 releases: v1 and v2 are published there now)
    release = sum(p.stat().st_size for p in packs["v1"].iterdir())
    subprocess.run(["mount", "-o", f"remount,size={release * 6}", str(bs2.root)], check=True)
    start = time.monotonic()
    proc = deploy(cluster["inventory"], "v2")
    cluster["times"]["deploy v2"] = round(time.monotonic() - start, 1)
    subprocess.run(["mount", "-o", f"remount,size={int(release * 3.5) + 2**20}", str(bs2.root)], check=True)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    for server in servers:
        assert served(server).startswith(f"{IMAGE} v2 ") and server.http_get("/ipxe/boot.ipxe")[0] == 200
        assert not (server.root / ".hpc-stateless-switch").exists()


def test_a_full_disk_on_one_server_switches_neither(cluster):
    servers = cluster["servers"]
    before = {server.name: (served(server), sorted(os.listdir(server.root / "images" / IMAGE)))
              for server in servers}
    proc = deploy(cluster["inventory"], "v3")
    assert proc.returncode != 0
    assert re.search(r"fatal: \[bs2\].*boot server bs2: not enough space under .* to stage scaletest v3: needs "
                     r"[0-9.]+ MiB.{1,3}\(the copy and the published version\), [0-9.]+ MiB free.*no boot server was switched",
                     proc.stdout, re.S), proc.stdout[-5000:]
    assert "Serve the published versions" not in proc.stdout  # the play ended before any switch
    for server in servers:
        assert (served(server), sorted(os.listdir(server.root / "images" / IMAGE))) == before[server.name]
        assert served(server).startswith(f"{IMAGE} v2 ")
        assert not (server.root / ".incoming").exists()


def test_a_rollback_switches_every_server_back_script_and_link_together(cluster):
    servers, packs = cluster["servers"], cluster["packs"]
    # the second rollback flips back to v2 (what the node test below boots)
    for back, forth in (("v1", "v2"), ("v2", "v1")):
        start = time.monotonic()
        proc = run_site(inventory=cluster["inventory"], playbook="playbooks/rollback.yml")
        cluster["times"][f"rollback to {back}"] = round(time.monotonic() - start, 1)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
        for server in servers:
            # the script nodes read names the kernel and initrd of the version the served link moved to
            line = served(server)
            assert line.startswith(f"{IMAGE} {back} ") and all(h in line for h in script_hashes(packs[back])), \
                (server.name, line)
            assert os.readlink(server.root / IMAGE) == f"images/{IMAGE}/{back}"
            assert os.readlink(server.root / "images" / IMAGE / "previous") == forth
            assert not (server.root / ".hpc-stateless-switch").exists()


def test_bad_server_input_is_refused_before_anything_changes(cluster):
    servers = cluster["servers"]
    before = [served(server) for server in servers]
    proc = run_site("-e", "hpc_stateless_deploy_version=v3", "-e",
                    json.dumps({"hpc_stateless_boot_server_map": {"rack1": ["bs1"], "rack2": []}}),
                    inventory=cluster["inventory"], playbook="playbooks/deploy.yml")
    assert proc.returncode != 0
    assert "server_map.rack2: node group 'rack2' is mapped to no boot server" in proc.stdout, proc.stdout[-3000:]
    proc = run_site("-e", "hpc_stateless_boot_servers=no_such_group", inventory=cluster["inventory"],
                    playbook="playbooks/deploy.yml")
    assert proc.returncode != 0 and "hpc_stateless_boot_servers: no_such_group is not an inventory group" \
        in proc.stdout, proc.stdout[-3000:]
    assert [served(server) for server in servers] == before
    # bs2 unreachable (its sshd stopped; nginx still serves): the play ends on both before anything is staged
    servers[1].stop_sshd()
    proc = deploy(cluster["inventory"], "v3")
    assert proc.returncode != 0 and re.search(r"fatal: \[bs2\]: UNREACHABLE!", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"boot server\(s\) bs2 not reachable .*no boot server was staged or switched\. Bring bs2 back",
                     proc.stdout, re.S), proc.stdout[-3000:]
    assert "Copy each image's release to the server" not in proc.stdout
    # a rollback refuses the same way, before it checks or switches anything
    proc = run_site(inventory=cluster["inventory"], playbook="playbooks/rollback.yml")
    assert proc.returncode != 0 and "boot server(s) bs2 not reachable" in proc.stdout, proc.stdout[-3000:]
    assert [served(server) for server in servers] == before
    assert not any((server.root / ".incoming").exists() for server in servers)


def test_a_node_boots_through_ipxe_from_the_second_server_while_the_first_is_down(cluster):
    servers, base = cluster["servers"], cluster["base"]
    servers[0].stop_nginx()
    assert servers[0].http_get("/ipxe/boot.ipxe")[0] == 0  # refused: bs1 serves nothing
    # qemu's TFTP plays bs2's TFTP service: the first-stage script only
    assert sorted(os.listdir(servers[1].tftp)) == ["hpc-first.ipxe"]
    console, seconds = pxe_boot(servers[1].tftp, NODE_MAC, base / "node.log", bootfile="hpc-first.ipxe", timeout=240)
    cluster["times"]["node boot"] = round(seconds, 1)
    assert f"{MARKER} end" in console, console[-3000:]
    release = release_of(console)
    assert release["IMAGE"] == IMAGE and release["VERSION"] == "v2"
    cmdline = release["CMDLINE"].split()
    initrd = hashlib.sha256((cluster["packs"]["v2"] / f"{IMAGE}.cpio.zst").read_bytes()).hexdigest()
    # n1 is in rack1: its own server bs1 first, then bs2
    assert f"hpc.servers={servers[0].url},{servers[1].url}" in cmdline and f"hpc.image={initrd}" in cmdline
    assert "hpc_node=n1" in cmdline
    log = (servers[1].state / "access.log").read_text()
    assert f"GET /sha256/{initrd} HTTP/1.1\" 200" in log
    (REPO / "build" / "test-logs").mkdir(parents=True, exist_ok=True)
    (REPO / "build" / "test-logs" / "deploy-servers-times.json").write_text(json.dumps(cluster["times"]) + "\n")
