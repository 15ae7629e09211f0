"""SIGKILL of the whole process group in the middle of a layer build, a pack and a deploy.

As an OOM killer, a CI job timeout or a lost runner would: nothing of ours gets to run a
rescue or a ``finally``. Each case checks what the kill left (nothing under a final name,
the previous version still complete and served), then that the next ordinary run cleans up
what the killed one left and finishes the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    container_name,
    container_stem,
    owner_instance,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import commit_tmpdir
from faults_site import (
    FAULTS_IMAGE,
    REPO,
    buildah,
    layer_images,
    our_containers,
    our_mounts,
    run_site,
    start_playbook,
)
from faults_support import (
    DEPLOY_PLAYBOOK,
    boot_tree_problems,
    copy_version,
    deploy,
    deploy_site,
    files_open_for_writing,
    group_processes,
    hidden_entries,
    kill_group,
    leftovers,
    mounts_below,
    pack_dir,
    processes_rooted_in,
    served,
    sha256sum_check,
    stop_group_when,
)

HOLD_SECONDS = "937"  # how long the faults_layer role sleeps in a killed build; an odd number, so it is ours


def faulty_layer_images() -> set[str]:
    """IDs of every image (named or not) that carries the layer label ``faulty``."""
    out = buildah("images", "--all", "--json", "--filter", "label=hpc.stateless.layer=faulty")
    return {image["id"] for image in json.loads(out or "[]") or []}


def buildah_mounts() -> dict[str, str]:
    """``{working container: mount point}`` of every mounted container."""
    return {name: path.strip() for name, path in
            (line.split(None, 1) for line in buildah("mount").splitlines() if " " in line)}


def kill_a_build(site, tmp_path: Path, condition, what: str, hold: bool) -> dict:
    """Build a new key of layer faulty (its role held in a ``sleep`` when ``hold``), SIGKILL the run at
    ``condition``; check what the kill left."""
    run = ("-e", f"faults_layer_run={uuid.uuid4().hex[:8]}")
    images_before, labelled_before = layer_images(site.prefix), faulty_layer_images()
    stem = container_stem(site.prefix, "faulty")
    proc = start_playbook(*site.extra, *run, inventory=site.inventory, log=tmp_path / "killed.log",
                          env={"HPC_STATELESS_FAULTS_HOLD": HOLD_SECONDS if hold else "0",
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")})
    try:
        seen = stop_group_when(proc, condition, what)
    finally:
        kill_group(proc)
    # Asked only now: a frozen ``buildah commit`` holds the storage lock that ``buildah containers``
    # waits for. The kill releases it and changes nothing else: nobody removes or unmounts anything.
    containers = [n for n in our_containers(site.prefix) if n.startswith(stem)]
    mounts = buildah_mounts()

    assert len(containers) == 1, f"expected the killed build's working container, found {containers}"
    container = containers[0]
    mountpoint = mounts.get(container, "")
    assert mountpoint, f"the working container {container} was not mounted when the build was killed"
    assert layer_images(site.prefix) == images_before, "the killed build tagged an image"
    assert faulty_layer_images() == labelled_before, "the killed build left an image with the layer's label"
    assert processes_rooted_in(mountpoint) == [], "processes of the killed build still run in the container"
    return {"run": run, "seen": seen, "container": container, "mountpoint": mountpoint,
            "key12": container.rsplit("-", 1)[-1]}


def rebuild_after_kill(site, killed: dict) -> None:
    """The next ordinary run removes the leftover container, builds the same key and leaves nothing behind."""
    again = run_site(*site.extra, *killed["run"], inventory=site.inventory)
    assert again.returncode == 0, again.stdout[-4000:]
    assert "1 to build: faulty" in again.stdout.replace("\n", " ")
    assert any(ref.startswith(f"{site.prefix}/faulty:{killed['key12']}") for ref in layer_images(site.prefix)), \
        "the next run did not tag the layer's key"
    assert our_containers(site.prefix) == [], "working containers left after the next run"
    assert mounts_below(killed["mountpoint"]) == [], "the killed container's mounts are still there"
    assert our_mounts() == [], "package-cache or container mounts leaked"


def test_sigkill_while_a_role_runs_in_the_layer(site, tmp_path):
    def role_sleeping(pgid: int) -> list[int]:
        return [pid for pid, argv in group_processes(pgid).items() if argv == ["sleep", HOLD_SECONDS]]

    killed = kill_a_build(site, tmp_path, role_sleeping, "the layer's role running inside the working container",
                          hold=True)
    rebuild_after_kill(site, killed)


def test_sigkill_during_the_layer_commit(site, tmp_path):
    tmp_root = Path(commit_tmpdir(container_stem(site.prefix, "faulty"))).parent

    def committing(pgid: int) -> list[str]:
        """``buildah commit`` of the group at work: its temporary files are there."""
        if not any(argv[1:2] == ["commit"] and "buildah" in argv[0] for argv in group_processes(pgid).values()):
            return []
        stem = container_stem(site.prefix, "faulty")
        return [str(p) for p in tmp_root.glob(f"{stem}*/*")] if tmp_root.is_dir() else []

    killed = kill_a_build(site, tmp_path, committing, "buildah commit of the layer at work", hold=False)
    # buildah's temporary copy of the layer diff (its TMPDIR, one directory per working container) stays ...
    tmpdir = Path(commit_tmpdir(killed["container"]))
    assert tmpdir.is_dir() and any(tmpdir.iterdir()), f"no temp files in {tmpdir}: was the commit killed?"
    rebuild_after_kill(site, killed)
    # ... until the next run removes the leftover container, and its temp files with it.
    assert not tmpdir.exists(), f"the killed commit's temp files are left: {sorted(os.listdir(tmpdir))}"


def test_sigkill_while_pack_writes_the_artifact(site, small_packs, tmp_path):
    out = tmp_path / "out"
    v1 = copy_version(small_packs, "v1", out)  # the previous, complete version
    images_dir = out / FAULTS_IMAGE
    pack = ("-e", f"hpc_stateless_pack_output_dir={out}", "-e", "hpc_stateless_pack_version=v2")

    def artifact_being_written(pgid: int) -> dict[str, int]:
        open_files = files_open_for_writing(pgid, images_dir)
        return {path: size for path, size in open_files.items()
                if "/.v2.partial-" in path and path.endswith(".cpio.zst") and size >= 1 << 20}

    proc = start_playbook(*site.extra, *pack, inventory=site.inventory, playbook="playbooks/pack.yml",
                          log=tmp_path / "killed.log", env={"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")})
    try:
        writing = stop_group_when(proc, artifact_being_written, "pack writing faults.cpio.zst")
        mounts = buildah_mounts()
    finally:
        kill_group(proc)

    # Killed mid-write: the partial file stays under its temporary name, nothing has the final one.
    partial = Path(next(iter(writing))).parent
    assert partial.is_dir() and not (images_dir / "v2").exists()
    assert sorted(p.name for p in images_dir.iterdir() if not p.name.startswith(".")) == ["v1"]
    assert sha256sum_check(v1)[0]
    pack_pid = partial.name.rsplit("-", 1)[-1]
    pack_container = [name for name in mounts
                      if name == container_name(site.prefix, "pack", owner_instance(int(pack_pid)))]
    assert len(pack_container) == 1, f"the killed pack's working container: {pack_container}"
    pack_mount = mounts[pack_container[0]]

    # The next run removes the killed run's partial directory and working container, then packs v2.
    again = run_site(*site.extra, *pack, inventory=site.inventory, playbook="playbooks/pack.yml")
    assert again.returncode == 0, again.stdout[-4000:]
    assert hidden_entries(images_dir) == [], "temp files of the killed pack are left"
    assert sorted(p.name for p in images_dir.iterdir()) == ["v1", "v2"]
    assert sha256sum_check(images_dir / "v2")[0] and sha256sum_check(v1)[0]
    assert pack_container[0] not in {c for c in our_containers() if c.startswith("hpc-stateless-pack-")}
    assert mounts_below(pack_mount) == [], "the killed pack's container mount is still there"


def test_sigkill_while_deploy_copies_into_the_boot_tree(small_packs, layer_pack, tmp_path):
    site = deploy_site(tmp_path)
    copy_version(small_packs, "v1", site["out"])
    copy_version(layer_pack, "big", site["out"])
    first = deploy(site, "v1")
    assert first.returncode == 0, first.stdout[-4000:]
    v1_kernel = (site["root"] / FAULTS_IMAGE / "vmlinuz").read_bytes()
    images_dir = site["root"] / "images" / FAULTS_IMAGE

    def copying(pgid: int) -> dict[str, int]:
        return {path: size for path, size in files_open_for_writing(pgid, images_dir).items() if "/.publish-" in path}

    proc = start_playbook("-e", "hpc_stateless_deploy_version=big", inventory=site["inventory"],
                          playbook=DEPLOY_PLAYBOOK, log=tmp_path / "killed.log",
                          env={"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")})
    try:
        copying_now = stop_group_when(proc, copying, "bootlink copying into .publish-*", interval=0.002)
    finally:
        kill_group(proc)

    # Killed mid-copy: v1 is still served, complete and verified; nothing is named big.
    assert served(site["root"]) == "v1"
    assert (site["root"] / FAULTS_IMAGE / "vmlinuz").read_bytes() == v1_kernel
    assert not (images_dir / "big").exists()
    assert sha256sum_check(images_dir / "v1")[0]
    leftovers = hidden_entries(images_dir)
    assert [name for name in leftovers if name.startswith(".publish-big-")], (leftovers, copying_now)

    # The next deploy removes the killed one's temp directory, publishes big and serves it.
    again = deploy(site, "big")
    assert again.returncode == 0, again.stdout[-4000:]
    assert served(site["root"]) == "big"
    assert os.readlink(images_dir / "previous") == "v1"
    assert boot_tree_problems(site["root"]) == []


def test_sigkill_while_deploy_renders_boot_entries(small_packs, tmp_path):
    """3000 nodes: the render of their pxelinux/iPXE entries is caught with a file half-way to its final name."""
    macs = ["52:54:%02x:%02x:%02x:%02x" % (0xfa, i >> 16 & 255, i >> 8 & 255, i & 255) for i in range(3000)]
    nodes = [{"name": f"n{i:04d}", "mac": mac, "image": ""} for i, mac in enumerate(macs)]
    site = deploy_site(tmp_path, nodes={}, hpc_stateless_boot_nodes=nodes[:10])
    copy_version(small_packs, "v1", site["out"])
    copy_version(small_packs, "v2", site["out"])
    assert deploy(site, "v1").returncode == 0
    site = deploy_site(tmp_path, nodes={}, hpc_stateless_boot_nodes=nodes)
    pxe_dir = site["root"] / "pxelinux.cfg"

    def writing_an_entry(_pgid: int) -> list[str]:
        return [name for name in os.listdir(pxe_dir) if name.startswith(".")]

    proc = start_playbook("-e", "hpc_stateless_deploy_version=v2", inventory=site["inventory"],
                          playbook=DEPLOY_PLAYBOOK, log=tmp_path / "killed.log",
                          env={"ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")})
    try:
        stop_group_when(proc, writing_an_entry, "a boot entry being written", interval=0.001)
    finally:
        kill_group(proc)

    # Killed mid-render: v1 is still served (the switch comes after the render); every entry under its
    # final name is whole - the next run renders each of them byte for byte the same.
    assert served(site["root"]) == "v1"
    assert sha256sum_check(site["root"] / "images" / FAULTS_IMAGE / "v1")[0]
    written = {p.name: p.read_bytes() for p in pxe_dir.iterdir() if not p.name.startswith(".")}
    assert [p.name for p in leftovers(site["root"])], "no temp file left: the kill did not hit a write"

    again = deploy(site, "v2")
    assert again.returncode == 0, again.stdout[-4000:]
    assert served(site["root"]) == "v2"
    assert {name: (pxe_dir / name).read_bytes() for name in written} == written, "a killed entry was incomplete"
    assert len([p for p in pxe_dir.iterdir() if p.name.startswith("01-")]) == len(macs)
    assert boot_tree_problems(site["root"]) == [], "temp files of the killed render are left"


def test_sigkill_between_the_two_renames_of_a_repack(tmp_path):
    """Packing a version that exists renames the old directory away, then the new one into place. strace
    holds the pack for 60 s right after the first rename, so the kill lands where no v1 exists at all
    (scripts/setup.sh installs strace)."""
    out = tmp_path / "out"
    rc, result = pack_dir(out, "v1", tmp_path / "trees")
    assert rc == 0, result.get("msg")
    images_dir = out / FAULTS_IMAGE
    old_manifest = (images_dir / "v1" / "manifest.json").read_bytes()
    tree = Path(result["manifest"]["source"]["path"])
    (tree / "etc" / "faults-version").write_text("v1, packed again\n")

    args = json.dumps({"image": FAULTS_IMAGE, "source_path": str(tree), "output_dir": str(out), "version": "v1"})
    renames = "rename,renameat,renameat2"
    argv = ["strace", "-f", "-qq", "--seccomp-bpf", "-o", str(tmp_path / "strace.log"), "-P", str(images_dir / "v1"),
            "-e", f"trace={renames}", "-e", f"inject={renames}:delay_exit=60000000:when=1",
            str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-i", str(REPO / "inventory"),
            "-m", "hpc.stateless.pack", "-a", args]
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": str(REPO / ".collections"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local")}
    with open(tmp_path / "killed.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def between_the_renames(_pgid: int) -> list[str]:
        names = hidden_entries(images_dir)
        return names if any(".v1.old-" in n for n in names) and not (images_dir / "v1").exists() else []

    try:
        seen = stop_group_when(proc, between_the_renames, "the old v1 renamed away, the new one not yet in place",
                               timeout=120)
    finally:
        kill_group(proc)

    # What the kill left: no v1 at all, the old one complete under .v1.old-<pid>, the new one under .v1.partial-<pid>.
    old = images_dir / next(n for n in seen if ".v1.old-" in n)
    assert sha256sum_check(old)[0] and (old / "manifest.json").read_bytes() == old_manifest

    # The next pack, of another version, puts the old v1 back instead of deleting it as a leftover.
    rc, result = pack_dir(out, "v2", tmp_path / "trees")
    assert rc == 0, result.get("msg")
    assert hidden_entries(images_dir) == [], "temp directories of the killed pack are left"
    assert sorted(p.name for p in images_dir.iterdir()) == ["v1", "v2"], "the killed re-pack lost v1"
    assert (images_dir / "v1" / "manifest.json").read_bytes() == old_manifest
    assert sha256sum_check(images_dir / "v1")[0] and sha256sum_check(images_dir / "v2")[0]
