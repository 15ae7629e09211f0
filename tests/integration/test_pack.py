"""pack end to end: playbooks/pack.yml on a real layer image, read back by the real clients.

One pack per session (pack_support.pack_target): the default compute image when it carries a
kernel, else the private packkernel layer. The Linux kernel boots the cpio.zst under qemu;
GNU cpio, unsquashfs and a read-only loop mount read the artifacts; a second pack must be
byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import leftover_pack_containers
from pack_support import (
    MULTI_USER,
    boot_cpio,
    expected_entries,
    loop_mounted,
    mounted_image,
    pack_module,
    pack_target,
    run_pack_playbook,
)

SHARED_MANIFEST_KEYS = {"image", "version", "created", "layer", "layer_keys", "kernel", "artifacts",
                        "uncompressed_size", "packages"}


@pytest.fixture(scope="module")
def target():
    packed = pack_target()
    yield packed
    shutil.rmtree(packed.output, ignore_errors=True)  # hundreds of MB


@pytest.fixture(scope="module")
def repack(target, tmp_path_factory):
    """The same image packed again by the module, cpio.zst + squashfs, into another directory."""
    out = tmp_path_factory.mktemp("repack")
    rc, result = pack_module(image=target.image, source_image=target.source_image, output_dir=str(out),
                             version=target.manifest["version"], formats=["cpio.zst", "squashfs"],
                             kernel_args=target.manifest["kernel_args"])
    assert rc == 0, result.get("msg")
    yield Path(result["version_dir"]), result
    shutil.rmtree(out, ignore_errors=True)


def _cpio_names(archive: Path) -> list[str]:
    decompress = subprocess.Popen(["zstd", "-dc", str(archive)], stdout=subprocess.PIPE)
    listing = subprocess.run(["cpio", "-t", "--quiet"], stdin=decompress.stdout, capture_output=True, check=True)
    assert decompress.wait() == 0
    return [os.fsdecode(n) for n in listing.stdout.split(b"\n") if n]


def _cpio_member(archive: Path, name: str) -> bytes:
    decompress = subprocess.Popen(["zstd", "-dc", str(archive)], stdout=subprocess.PIPE)
    member = subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", name], stdin=decompress.stdout,
                            capture_output=True, check=True)
    decompress.wait()
    return member.stdout


def test_playbook_publishes_a_complete_version_directory(target):
    print(f"pack tests use the {target.why}")
    manifest = target.manifest
    names = sorted(os.listdir(target.version_dir))
    expected = {f"{target.image}.{fmt}" for fmt in (a["format"] for a in manifest["artifacts"])}
    expected |= {"vmlinuz", "SHA256SUMS", "manifest.json", "sbom.cdx.json"} | ({"initrd.img"} if manifest["initrd"] else set())
    assert set(names) == expected
    assert not [n for n in os.listdir(target.version_dir.parent) if n.startswith(".")], "partial directory left"
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=target.version_dir,
                   check=True)
    assert SHARED_MANIFEST_KEYS <= set(manifest)
    assert manifest["image"] == target.image and manifest["version"] == target.version_dir.name
    assert manifest["layer"] in manifest["layer_keys"] and "base" in manifest["layer_keys"]
    for artifact in manifest["artifacts"]:
        path = target.version_dir / artifact["file"]
        assert artifact["size"] == path.stat().st_size
        assert artifact["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest["kernel"]["file"] == "vmlinuz" and manifest["kernel"]["version"]
    names = {p["name"] for p in manifest["packages"]}
    assert {"systemd", "libc6"} <= names and any(n.startswith("linux-image-") for n in names)
    assert manifest["uncompressed_size"] > 100 << 20
    report = manifest["size_report"]
    assert len(report["largest_packages"]) == 20 and len(report["largest_directories"]) == 20
    assert report["largest_packages"][0]["name"].startswith("linux-image-")
    assert "largest packages:" in target.playbook_stdout and "largest directories:" in target.playbook_stdout
    assert not leftover_pack_containers()


def test_second_playbook_run_is_a_no_op(target):
    before = {p.name: p.stat().st_mtime_ns for p in target.version_dir.iterdir()}
    again = run_pack_playbook(target.inventory, target.output, *target.extra,
                              *(("-e", '{"hpc_stateless_pack_images": ["compute"]}') if target.image == "compute"
                                else ()))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "changed=0" in again.stdout and "(up to date)" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in target.version_dir.iterdir()} == before


def test_linux_boots_the_cpio_image_to_multi_user(target):
    version = target.manifest["version"]
    console = boot_cpio(target.version_dir / "vmlinuz", target.artifact("cpio.zst"),
                        [MULTI_USER, re.escape(f"VERSION={version}"), "BUILD_TIME="])
    assert re.search(MULTI_USER, console), console[-3000:]
    assert f"IMAGE={target.image}" in console and f"VERSION={version}" in console, console[-3000:]
    assert f"LAYER_KEY={target.manifest['layer_keys'][target.manifest['layer']]}" in console
    assert "Kernel panic" not in console


def test_gnu_cpio_lists_exactly_the_expected_entries(target):
    names = _cpio_names(target.artifact("cpio.zst"))
    assert names[0] == "." and len(names) == len(set(names))
    with mounted_image(target.source_image) as root:
        overlay = {"etc/image-release", "etc/machine-id"} | ({"init"} if not os.path.lexists(root / "init") else set())
        expected = expected_entries(root, overlay)
        assert not (root / "etc/image-release").exists(), "the cached layer must not carry the release file"
    assert set(names[1:]) == expected
    release = _cpio_member(target.artifact("cpio.zst"), "etc/image-release").decode()
    assert release.splitlines()[:2] == [f"IMAGE={target.image}", f"VERSION={target.manifest['version']}"]
    assert _cpio_member(target.artifact("cpio.zst"), "etc/machine-id") == b""


def test_repack_is_byte_identical(target, repack):
    version_dir, _result = repack
    subprocess.run(["cmp", str(target.artifact("cpio.zst")), str(version_dir / f"{target.image}.cpio.zst")],
                   check=True)
    subprocess.run(["cmp", str(target.version_dir / "vmlinuz"), str(version_dir / "vmlinuz")], check=True)


def test_squashfs_is_reproducible_and_listed_by_unsquashfs(target, repack, tmp_path_factory):
    version_dir, _result = repack
    squashfs = version_dir / f"{target.image}.squashfs"
    out = tmp_path_factory.mktemp("repack-squashfs")
    rc, result = pack_module(image=target.image, source_image=target.source_image, output_dir=str(out),
                             version=target.manifest["version"], formats=["squashfs"])
    assert rc == 0, result.get("msg")
    subprocess.run(["cmp", str(squashfs), str(Path(result["version_dir"]) / squashfs.name)], check=True)
    shutil.rmtree(out, ignore_errors=True)
    listing = subprocess.run(["unsquashfs", "-l", str(squashfs)], capture_output=True, check=True).stdout
    names = {os.fsdecode(line)[len("squashfs-root/"):] for line in listing.split(b"\n")
             if line.startswith(b"squashfs-root/")}
    with mounted_image(target.source_image) as root:
        expected = expected_entries(root, {"etc/image-release", "etc/machine-id"})
    assert names == expected


def _describe(root: Path, rel: str) -> tuple:
    st = os.lstat(root / rel)
    kind = stat.S_IFMT(st.st_mode)
    extra = os.readlink(root / rel) if kind == stat.S_IFLNK else (st.st_size if kind == stat.S_IFREG else None)
    return kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, extra


def test_squashfs_mounts_read_only_with_the_tree(target, repack):
    version_dir, _result = repack
    with mounted_image(target.source_image) as root, loop_mounted(version_dir / f"{target.image}.squashfs") as mnt:
        entries = sorted(expected_entries(root, set()) - {"etc/machine-id", "var/lib/dbus/machine-id"})
        mismatched = [rel for rel in entries if _describe(root, rel) != _describe(mnt, rel)]
        assert not mismatched, mismatched[:20]
        regular = [rel for rel in entries if stat.S_ISREG(os.lstat(root / rel).st_mode)]
        sample = [rel for rel in regular if rel.startswith("etc/")] + regular[::40]
        differ = [rel for rel in sample if (root / rel).read_bytes() != (mnt / rel).read_bytes()]
        assert not differ, differ[:20]
        assert (mnt / "etc/image-release").read_text().startswith(f"IMAGE={target.image}\n")
        with pytest.raises(OSError):
            (mnt / "etc/new-file").write_text("read-only")
    assert json.loads((version_dir / "manifest.json").read_text())["options"]["squashfs_compression"] == "zstd"
