"""Several boot servers (docs/scale.md): the content store of a boot root and the iPXE scripts that name hashes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from bootlink_fixtures import make_pack

from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import BootConfigError, render
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state

SERVERS = [{"name": "bs1", "url": "http://10.1.0.10"}, {"name": "bs2", "url": "http://10.2.0.10/"}]
IMAGES = {"compute": {"formats": ["cpio.zst"], "kernel_args": "console=ttyS0"}}


def deploy(root: Path, out: Path, version: str, state: str = "switched", **pack) -> dict:
    return apply_state({"boot_root": str(root), "image": "compute", "state": state, "keep": 2,
                        "src": str(make_pack(out, version=version, **pack))})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(root: Path, **params) -> dict:
    base = {"boot_root": str(root), "images": IMAGES, "lock_timeout": 0, "servers": SERVERS,
            "nodes": [{"name": "n1", "mac": "52:54:00:00:00:01", "kernel_args": "hpc_node=n1", "groups": ["rack2"]},
                      {"name": "n2", "mac": "52:54:00:00:00:02", "groups": ["rack1"]}],
            "server_map": {"rack1": ["bs1"], "rack2": ["bs2"]}}
    base.update(params)
    return render(base)


def test_published_boot_files_are_in_the_store_by_hash_as_hard_links_and_pruned_with_their_version(tmp_path):
    root = tmp_path / "www"
    result = deploy(root, tmp_path / "out", "v1")
    version = root / "images/compute/v1"
    kernel, initrd = version / "vmlinuz", version / "initrd"
    assert sorted(result["content"]) == sorted([digest(kernel), digest(initrd)])
    for path in (kernel, initrd.resolve()):
        stored = root / "sha256" / digest(path)
        assert stored.read_bytes() == path.read_bytes() and stored.stat().st_ino == path.stat().st_ino
    deploy(root, tmp_path / "out", "v2")
    result = deploy(root, tmp_path / "out", "v3")  # keep 2: v1 goes, and with it its store entries
    assert result["removed"] == ["v1"]
    names = {p.name for p in (root / "sha256").iterdir()}
    wanted = {digest(root / f"images/compute/{v}/{f}") for v in ("v2", "v3") for f in ("vmlinuz", "initrd")}
    assert names == wanted and len(result["content_removed"]) == 2


def test_image_script_names_hashes_tries_every_server_and_orders_by_group(tmp_path):
    root = tmp_path / "www"
    deploy(root, tmp_path / "out", "v1")
    run(root)
    script = (root / "ipxe/images/compute.ipxe").read_text()
    kernel, initrd = digest(root / "images/compute/v1/vmlinuz"), digest(root / "images/compute/v1/initrd")
    assert f"# hpc.stateless release compute v1 kernel={kernel} initrd={initrd} image={initrd}" in script
    # order 0 is the inventory order, order 1 rack2's (bs2 first); rack1's equals order 0
    assert re.search(r":order-0\nset hpc-s0 http://10.1.0.10\nset hpc-s1 http://10.2.0.10\n", script)
    assert re.search(r":order-1\nset hpc-s0 http://10.2.0.10\nset hpc-s1 http://10.1.0.10\n", script)
    assert ":order-2" not in script
    assert f"kernel ${{hpc-s}}/sha256/{kernel} initrd=initrd " in script
    assert f"hpc.servers=${{hpc-servers}} hpc.image={initrd} ${{hpc-args}} || goto try-1" in script
    assert f"initrd --name initrd ${{hpc-s}}/sha256/{initrd} || goto failed" in script
    n1 = (root / "ipxe/nodes/52-54-00-00-00-01.ipxe").read_text()
    assert "set hpc-order 1\nset hpc-args hpc_node=n1\nchain --autofree /ipxe/images/compute.ipxe\n" in n1
    n2 = (root / "ipxe/nodes/52-54-00-00-00-02.ipxe").read_text()
    assert "hpc-order" not in n2 and "chain --autofree /ipxe/images/compute.ipxe" in n2
    first = (root / "hpc-first.ipxe").read_text()
    assert "chain --autofree http://10.1.0.10/ipxe/boot.ipxe || chain --autofree http://10.2.0.10/ipxe/boot.ipxe" \
        in first


def test_pending_release_is_named_before_the_served_link_moves(tmp_path):
    root = tmp_path / "www"
    deploy(root, tmp_path / "out", "v1")
    published = deploy(root, tmp_path / "out", "v2", state="present")
    run(root, pending_manifests=[published["manifest"]])
    script = (root / "ipxe/images/compute.ipxe").read_text()
    assert "release compute v2 " in script and digest(root / "images/compute/v2/vmlinuz") in script
    assert (root / "compute").readlink().name == "v1"


def test_squashfs_root_comes_from_the_server_of_the_try_by_hash(tmp_path):
    root = tmp_path / "www"
    apply_state({"boot_root": str(root), "image": "compute", "state": "switched", "format": "squashfs",
                 "src": str(make_pack(tmp_path / "out", version="v1", squashfs=True))})
    run(root, images={"compute": {"formats": ["squashfs"], "kernel_args": ""}})  # no boot_url needed
    script = (root / "ipxe/images/compute.ipxe").read_text()
    squashfs = digest(root / "images/compute/v1/rootfs.squashfs")
    assert f"root=live:${{hpc-s}}/sha256/{squashfs}" in script and f"hpc.image={squashfs}" in script


def test_an_initrd_with_the_first_stage_gets_its_arguments_and_fetches_by_hash(tmp_path):
    root = tmp_path / "www"
    apply_state({"boot_root": str(root), "image": "compute", "state": "switched", "format": "squashfs",
                 "src": str(make_pack(tmp_path / "out", version="v1", squashfs=True))})
    manifest = root / "images/compute/v1/manifest.json"
    data = json.loads(manifest.read_text())
    data["initrd"]["first_stage"] = {"module": "hpcfetch", "kernel_args": "root=hpcfetch rd.live.image rd.neednet=1"}
    pending = tmp_path / "pending"
    pending.mkdir()
    for name in ("SHA256SUMS", "vmlinuz", "initrd.img", "compute.squashfs"):
        (pending / name).symlink_to(root / "images/compute/v1" / name)
    (pending / "manifest.json").write_text(json.dumps(data))
    run(root, images={"compute": {"formats": ["squashfs"], "kernel_args": ""}},
        pending_manifests=[str(pending / "manifest.json")])
    script = (root / "ipxe/images/compute.ipxe").read_text()
    squashfs = digest(root / "images/compute/v1/rootfs.squashfs")
    assert "root=hpcfetch rd.live.image rd.neednet=1" in script and "root=live:" not in script
    assert f"hpc.image={squashfs}" in script


@pytest.mark.parametrize("params, message", [
    ({"servers": SERVERS + [{"name": "bs1", "url": "http://10.3.0.10"}]}, r"servers\[2\] \(bs1\): boot server 'bs1' is listed twice"),
    ({"servers": SERVERS + [{"name": "bs3", "url": "http://10.1.0.10"}]}, r"url http://10.1.0.10 is also the URL of boot server 'bs1'"),
    ({"servers": [{"name": "bs1", "url": "10.1.0.10"}]}, r"servers\[0\] \(bs1\): url '10.1.0.10' is not an http"),
    ({"server_map": {"rack3": []}}, r"server_map.rack3: node group 'rack3' is mapped to no boot server"),
    ({"server_map": {"rack3": ["bs9"]}}, r"server_map.rack3: bs9 not a boot server \(boot servers: bs1, bs2\)"),
    ({"servers": [], "server_map": {"rack1": ["bs1"]}}, r"there are no boot servers"),
])
def test_bad_server_input_is_refused_naming_it_and_nothing_is_written(tmp_path, params, message):
    root = tmp_path / "www"
    deploy(root, tmp_path / "out", "v1")
    before = sorted(p.name for p in root.iterdir())
    with pytest.raises(BootConfigError, match=message):
        run(root, **params)
    assert sorted(p.name for p in root.iterdir()) == before
