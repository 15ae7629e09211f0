"""The image_diff module through its real main(): pack version directories with real cpio.zst artifacts
(our newc writer, the real zstd), a boot tree published by the real bootlink logic, and the errors
that name the path or version at fault. Layer images need buildah: their run is in
tests/integration/test_image_diff.py; here only the container clean-up on a failed mount is checked,
with buildah replaced by a recording executor (the one thing that cannot run in a unit test)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    KERNEL_FILE,
    MANIFEST_FILE,
    SUMS_FILE,
    artifact_file,
)
from ansible_collections.hpc.stateless.plugins.module_utils._diff.sides import (
    DiffError,
    LayerImages,
    newest_pack,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import sha256_bytes, sums_text
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state
from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import NewcWriter
from ansible_collections.hpc.stateless.plugins.modules import image_diff

MODULE = image_diff  # what the run_module fixture (conftest.py) runs
FILE, DIR = stat.S_IFREG, stat.S_IFDIR


def cpio_zst(files: dict[str, bytes]) -> bytes:
    read, write = os.pipe()
    writer = NewcWriter(write)
    writer.add_header_only(b".", ino=1, mode=DIR | 0o755, uid=0, gid=0, nlink=2, mtime=0)
    for index, (name, data) in enumerate(sorted(files.items()), start=2):
        writer.add_bytes(name.encode(), data, ino=index, mode=FILE | 0o644, uid=0, gid=0, nlink=1, mtime=0)
    writer.finish()
    os.close(write)
    with os.fdopen(read, "rb") as raw:
        return subprocess.run(["zstd", "-q", "-c"], stdin=raw, capture_output=True, check=True).stdout


def make_version(output: Path, version: str, files: dict[str, bytes], packages: list[dict], keys: dict,
                 kernel_args: str = "console=ttyS0", arch: str = "") -> Path:
    """``<output>/compute/<version>/`` as pack writes it (artifact, vmlinuz, manifest.json, SHA256SUMS)."""
    directory = output / "compute" / version
    directory.mkdir(parents=True)
    artifact = artifact_file("compute", "cpio.zst")
    content = {artifact: cpio_zst({"etc/image-release": f"IMAGE=compute\nVERSION={version}\n".encode(), **files}),
               KERNEL_FILE: b"kernel " + version.encode()}
    for name, data in content.items():
        (directory / name).write_bytes(data)
    manifest = pm.build_manifest(
        image="compute", version=version, created=0, layer="compute", layer_keys=keys,
        kernel={"file": KERNEL_FILE, "version": "6.1.0-" + version}, kernel_args=kernel_args,
        artifacts=[{"file": artifact, "format": "cpio.zst", "size": len(content[artifact]),
                    "sha256": sha256_bytes(content[artifact])}],
        uncompressed_size=100, packages=packages, arch=arch)
    content[MANIFEST_FILE] = pm.manifest_bytes(manifest)
    (directory / MANIFEST_FILE).write_bytes(content[MANIFEST_FILE])
    (directory / SUMS_FILE).write_text(sums_text({n: sha256_bytes(d) for n, d in content.items()}))
    return directory


@pytest.fixture
def versions(tmp_path):
    out = tmp_path / "images"
    old = make_version(out, "v1", {"etc/motd": b"hello", "usr/bin/tool": b"1" * 100},
                       [{"name": "bash", "version": "5.2.15-2"}, {"name": "slurm", "version": "22.05.8-4"}],
                       {"base": "a" * 64, "compute": "b" * 64})
    new = make_version(out, "v2", {"etc/motd": b"hello", "usr/bin/tool": b"2" * 300, "etc/new.conf": b"x"},
                       [{"name": "bash", "version": "5.2.15-2"}, {"name": "slurm", "version": "22.05.8-5"},
                        {"name": "htop", "version": "3.2.2-2"}],
                       {"base": "a" * 64, "compute": "c" * 64}, kernel_args="console=ttyS0 quiet")
    os.utime(old / MANIFEST_FILE, (1, 1))  # packed first
    return out, old, new


def test_two_pack_directories(run_module, versions, tmp_path):
    _out, old, new = versions
    dest = tmp_path / "diff.md"
    result, code = run_module({"old_dir": str(old), "new_dir": str(new), "markdown_dest": str(dest)})
    assert code == 0, result
    assert result["changed"] is True and result["differs"] is True
    assert result["packages"]["added"] == [{"name": "htop", "version": "3.2.2-2"}]
    assert result["packages"]["upgraded"] == [{"name": "slurm", "old": "22.05.8-4", "new": "22.05.8-5"}]
    assert result["packages"]["removed"] == [] and result["packages"]["downgraded"] == []
    assert result["files"]["added"] == [{"path": "/etc/new.conf", "type": "file", "size": 1}]
    assert [(c["path"], c["changed"], c["delta"]) for c in result["files"]["changed"]] == [
        ("/etc/image-release", ["content"], 0), ("/usr/bin/tool", ["content"], 200)]
    assert result["layers"]["rebuilt"] == [{"layer": "compute", "old": "b" * 64, "new": "c" * 64}]
    assert result["kernel"] == {"old": "6.1.0-v1", "new": "6.1.0-v2", "changed": True}
    assert result["release"]["changed"] == ["VERSION"]
    assert result["table"][:2] == ["old: compute v1", "new: compute v2"]
    assert dest.read_text() == result["markdown"]
    assert result["markdown_dest"] == str(dest)
    again, _rc = run_module({"old_dir": str(old), "new_dir": str(new), "markdown_dest": str(dest)})
    assert again["changed"] is False


def test_two_architectures_of_an_image_differ_by_their_architecture(run_module, tmp_path):
    """The same files packed for amd64 and arm64: the diff names the architecture, on its own a difference."""
    out = tmp_path / "images"
    files, packages, keys = {"etc/motd": b"hello"}, [{"name": "bash", "version": "5.2.15-2"}], {"base": "a" * 64}
    amd64 = make_version(out, "v1", files, packages, keys, arch="amd64")
    arm64 = make_version(out, "v1-arm", files, packages, keys, arch="arm64")
    result, code = run_module({"old_dir": str(amd64), "new_dir": str(arm64)})
    assert code == 0, result
    assert result["arch"] == {"old": "amd64", "new": "arm64", "changed": True}
    assert result["differs"] is True
    assert "architecture: amd64 -> arm64" in result["table"]
    same, _rc = run_module({"old_dir": str(amd64), "new_dir": str(amd64)})
    assert same["arch"]["changed"] is False and "architecture: amd64" in same["table"]


def test_check_mode_reads_but_writes_nothing(run_module, versions, tmp_path):
    _out, old, new = versions
    dest = tmp_path / "diff.md"
    result, code = run_module({"old_dir": str(old), "new_dir": str(new), "markdown_dest": str(dest)},
                              check_mode=True)
    assert code == 0 and result["changed"] is True and result["summary"]["files_added"] == 1
    assert not dest.exists()


def test_served_version_against_the_newest_pack(run_module, versions, tmp_path):
    out, old, _new = versions
    boot = tmp_path / "tftp"
    apply_state({"boot_root": str(boot), "image": "compute", "state": "switched", "src": str(old), "version": None,
                 "format": None, "keep": 3, "lock_timeout": 5})
    assert newest_pack(str(out), "compute").endswith("/v2")
    result, code = run_module({"boot_root": str(boot), "image": "compute", "output_dir": str(out)})
    assert code == 0, result
    assert result["old"]["label"] == f"compute v1 (served) in {boot}"
    assert result["new"]["version"] == "v2"
    assert result["packages"]["added"] == [{"name": "htop", "version": "3.2.2-2"}]
    same, _rc = run_module({"boot_root": str(boot), "image": "compute", "output_dir": str(out), "new_version": "v1"})
    assert same["differs"] is False and "no difference" in same["table"]


@pytest.mark.parametrize("args,message", [
    ({}, "nothing to compare against: give old_dir, old_image, or boot_root and image"),
    ({"old_dir": "{tmp}/none", "new_dir": "{new}"}, "{tmp}/none is not a directory"),
    ({"old_dir": "{tmp}", "new_dir": "{new}"}, "{tmp}/manifest.json: no manifest.json"),
    ({"old_dir": "{old}"}, "nothing to compare: give new_dir, new_image, output_dir and image"),
    ({"boot_root": "{tmp}/tftp", "image": "compute", "new_dir": "{new}"},
     "{tmp}/tftp/compute: image compute is not served from {tmp}/tftp"),
    ({"boot_root": "{tmp}/tftp", "image": "compute", "old_version": "v9", "new_dir": "{new}"},
     "{tmp}/tftp/images/compute/v9: version v9 of image compute is not published in {tmp}/tftp (published: none)"),
    ({"old_dir": "{old}", "output_dir": "{tmp}/empty", "image": "compute"},
     "{tmp}/empty/compute: no packed version of image compute"),
    ({"old_dir": "{old}", "output_dir": "{tmp}/images", "image": "compute", "new_version": "v7"},
     "{tmp}/images/compute/v7: version v7 of image compute has not been packed into {tmp}/images"),
    ({"old_dir": "{old}", "new_dir": "{new}", "format": "squashfs"},
     "{old}: no squashfs artifact (this version has: cpio.zst)"),
    ({"old_dir": "{old}", "image": "../x", "output_dir": "{tmp}"}, "image '../x' is not a valid"),
    ({"old_dir": "{old}", "new_dir": "{new}", "image": "compute", "output_dir": "{tmp}"},
     "parameters are mutually exclusive: new_dir|new_image|output_dir"),
    ({"old_dir": "{old}", "new_dir": "{new}", "markdown_dest": "{tmp}/no/diff.md"},
     "markdown_dest {tmp}/no/diff.md: directory {tmp}/no does not exist"),
    ({"old_dir": "{old}", "new_dir": "{new}", "top": 0}, "top must be at least 1, got 0"),
])
def test_errors_name_the_path_or_version(run_module, versions, tmp_path, args, message):
    _out, old, new = versions
    fill = {"tmp": str(tmp_path), "old": str(old), "new": str(new)}
    result, code = run_module({k: v.format(**fill) if isinstance(v, str) else v for k, v in args.items()})
    assert code == 1
    assert message.format(**fill) in result["msg"]
    assert not (tmp_path / "no").exists()


def test_a_missing_artifact_is_named(run_module, versions):
    _out, old, new = versions
    os.unlink(old / artifact_file("compute", "cpio.zst"))
    result, code = run_module({"old_dir": str(old), "new_dir": str(new)})
    assert code == 1
    assert result["msg"].startswith(f"{old}/compute.cpio.zst: listed in manifest.json but missing")


def test_layer_images_remove_their_containers_when_the_mount_fails():
    """buildah replaced by a recording executor: from succeeds, mount fails; the container must go."""
    calls: list[list[str]] = []

    def fake(argv, **_kwargs):
        calls.append(list(argv))
        verb = argv[argv.index("--storage-driver") + 2] if "--storage-driver" in argv else argv[1]
        if verb == "inspect":
            return _process.Result(argv, 0, json.dumps({"OCIv1": {"config": {"Labels": {}}}}), "")
        if verb == "mount" and len(argv) > 2:
            return _process.Result(argv, 1, "", "mount: permission denied")
        return _process.Result(argv, 0, "", "")

    old = _process.set_executor(fake)
    try:
        with pytest.raises(DiffError, match=r"new_image localhost/p/compute:k: cannot mount it"):
            with LayerImages(Buildah(executable="/usr/bin/buildah")) as images:
                images.side("localhost/p/compute:k", "new")
    finally:
        _process.set_executor(old)
    verbs = [next(w for w in argv[1:] if not w.startswith("-")) for argv in calls]
    assert verbs[-2:] == ["umount", "rm"]
    assert calls[-1][-1].startswith("hpc-stateless-diff-new-") and calls[-1][-1].endswith(f"-pid{os.getpid()}")
