"""A full disk under pack's output directory and under deploy's boot root.

Each file system is real: a file, ``mkfs.ext4``, ``mount -o loop`` (unmounted in a ``finally``).
The previous version sits on the same file system; it must still be complete (``sha256sum -c``)
and, for deploy, still served, and the failed run must give back the space it took.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bootlink_fixtures import tree_snapshot
from faults_site import FAULTS_IMAGE, buildah, run_site, small_fs
from faults_support import (
    boot_tree_problems,
    copy_version,
    deploy,
    deploy_site,
    failure_of,
    hidden_entries,
    served,
    sha256sum_check,
)
from pack_support import pack_module, small_root


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def containers_of(image_ref_prefix: str) -> list[str]:
    """Working containers made from images whose name starts with ``image_ref_prefix``."""
    listing = json.loads(buildah("containers", "--json") or "[]") or []
    return [c["containername"] for c in listing if (c.get("imagename") or "").startswith(image_ref_prefix)]


def test_disk_full_while_pack_writes_the_layer_image(site, small_packs, tmp_path):
    with small_fs(tmp_path / "images", 64) as out:
        v1 = copy_version(small_packs, "v1", out)
        free = free_bytes(out)
        packed = run_site(*site.extra, "-e", f"hpc_stateless_pack_output_dir={out}", "-e", "hpc_stateless_pack_version=v2",
                          inventory=site.inventory, playbook="playbooks/pack.yml")
        assert packed.returncode != 0
        failure = failure_of(packed.stdout)
        assert "No space left on device" in failure and "nothing was published" in failure, failure[:2000]
        assert str(out / FAULTS_IMAGE) in failure, "the error does not name the output directory"
        images_dir = out / FAULTS_IMAGE
        assert sorted(p.name for p in images_dir.iterdir()) == ["v1"], "a partial pack is left"
        assert sha256sum_check(v1)[0]
        assert free_bytes(out) >= free - 64 * 1024, "the failed pack did not give back the space it took"
        assert containers_of(f"{site.prefix}/") == [], "the pack's working container is left"


def test_disk_full_while_pack_writes_a_squashfs(small_packs, tmp_path):
    with small_fs(tmp_path / "images", 16) as out:
        v1 = copy_version(small_packs, "v1", out)
        free = free_bytes(out)
        root = small_root(tmp_path, extra={f"srv/data/blob{i}": os.urandom(8 << 20) for i in range(3)})
        rc, result = pack_module(image=FAULTS_IMAGE, source_path=str(root), output_dir=str(out), version="v2",
                                 formats=["squashfs"])
        assert rc != 0
        assert "No space left on device" in result["msg"] and "nothing was published" in result["msg"], result["msg"]
        assert sorted(p.name for p in (out / FAULTS_IMAGE).iterdir()) == ["v1"], "a partial pack is left"
        assert sha256sum_check(v1)[0]
        assert free_bytes(out) >= free - 64 * 1024


def test_boot_root_too_small_for_the_new_version(small_packs, layer_pack, tmp_path):
    with small_fs(tmp_path / "tftp", 32) as root:
        site = deploy_site(tmp_path, boot_root=root)
        copy_version(small_packs, "v1", site["out"])
        copy_version(layer_pack, "big", site["out"])
        assert deploy(site, "v1").returncode == 0
        before = tree_snapshot(root)

        proc = deploy(site, "big")
        assert proc.returncode != 0
        assert f"not enough space to publish {FAULTS_IMAGE} big under {root}/images/{FAULTS_IMAGE}" in proc.stdout
        assert "The served version is unchanged" in proc.stdout
        assert tree_snapshot(root) == before
        assert served(root) == "v1" and boot_tree_problems(root) == []


def test_disk_full_in_the_middle_of_publishing(small_packs, tmp_path):
    """The new version fits by file sizes (so it passes the free-space check) but not in whole blocks:
    the copy itself runs out of space. The kernel, taken from a host file, is sized to hit exactly that."""
    with small_fs(tmp_path / "tftp", 32, "-b", "1024") as root:
        site = deploy_site(tmp_path, boot_root=root)
        copy_version(small_packs, "v1", site["out"])
        assert deploy(site, "v1").returncode == 0
        before = tree_snapshot(root)
        free = free_bytes(root / "images" / FAULTS_IMAGE)

        tree = small_root(tmp_path)
        kernel = tmp_path / "bzImage"

        def pack_with_kernel(size: int) -> int:
            """Pack the same tree with a kernel of ``size`` bytes as v3; returns what deploy will copy."""
            kernel.write_bytes(os.urandom(size))
            rc, result = pack_module(image=FAULTS_IMAGE, source_path=str(tree), output_dir=str(site["out"]),
                                     version="v3", kernel=str(kernel), kernel_version="6.1.0-99-amd64")
            assert rc == 0, result.get("msg")
            v3 = site["out"] / FAULTS_IMAGE / "v3"
            # Deploy copies every file SHA256SUMS lists (one format packed) and SHA256SUMS itself.
            listed = [line.split("  ", 1)[1] for line in (v3 / "SHA256SUMS").read_text().splitlines()]
            return sum((v3 / name).stat().st_size for name in [*listed, "SHA256SUMS"])

        first = pack_with_kernel(free // 2)
        payload = pack_with_kernel(free // 2 + (free - first) - 64)  # same digits, same manifest length
        assert free - 1024 < payload <= free, (free, payload)  # fits by sizes, not with one more 1 KiB block

        proc = deploy(site, "v3")
        assert proc.returncode != 0
        assert f"disk full while publishing {FAULTS_IMAGE} v3" in proc.stdout, proc.stdout[-3000:]
        assert "the served version is unchanged" in proc.stdout
        assert tree_snapshot(root) == before
        assert served(root) == "v1" and boot_tree_problems(root) == []
        assert hidden_entries(root / "images" / FAULTS_IMAGE) == []
        assert free_bytes(root / "images" / FAULTS_IMAGE) == free
