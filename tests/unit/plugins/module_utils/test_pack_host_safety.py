"""Pack treats the image as hostile: what its dracut and depmod leave, and its links, never reach a build host file.

A stand-in for buildah mounts a directory as the working container and plays the image's own tools:
a dracut and a depmod that plant symlinks to "host" files (files of the test outside the image) in
whatever directory the container was given. Nothing of the host may be chmodded, read into an
artifact or overwritten, and the image packed is the one whose ID was inspected (the gate's).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract import names
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import PackError, Packer, PackRequest
from test_hwprofile import KVER, MODDIR, make_image  # noqa: E402 - sibling test module (rootdir-relative import)

IMAGE_ID = "a" * 64
SECRET = b"root:$6$host-secret:19000:0:99999:7:::\n"
SDE = 1_700_000_000

needs_mksquashfs = pytest.mark.skipif(shutil.which("mksquashfs") is None, reason="needs squashfs-tools")


class FakeBuildah:
    """buildah as pack uses it; ``tools`` plays the image's commands: ``{argv[0]: act(volumes, argv)}``."""

    def __init__(self, root: Path, tools=None) -> None:
        self.root, self.tools = root, tools or {}
        self.from_calls: list[tuple[str, str]] = []
        self.runs: list[tuple[list[str], dict[str, str]]] = []

    def container_names(self):
        return []

    def inspect_image(self, ref):  # pylint: disable=unused-argument
        return {"FromImageID": IMAGE_ID, "OCIv1": {"created": "2023-11-14T22:13:20Z", "config": {"Labels": {}}}}

    def from_image(self, image, name):
        self.from_calls.append((image, name))
        return name

    def mount(self, name):  # pylint: disable=unused-argument
        return str(self.root)

    def remove(self, name):
        pass

    def run_in(self, container, command, volumes=None, environment=None):  # pylint: disable=unused-argument
        self.runs.append((list(command), dict(volumes or {})))
        act = self.tools.get(command[0])
        if act:
            act(dict(volumes or {}), list(command))


@pytest.fixture
def host(tmp_path):
    """A 'host' secret (mode 0600) and a 'host' file that an output name could be pointed at."""
    base = tmp_path / "host"
    base.mkdir()
    (base / "shadow").write_bytes(SECRET)
    (base / "shadow").chmod(0o600)
    (base / "config").write_bytes(b"host configuration\n")
    return base


def host_untouched(host: Path) -> bool:
    return ((host / "shadow").read_bytes() == SECRET and stat.S_IMODE((host / "shadow").stat().st_mode) == 0o600
            and (host / "config").read_bytes() == b"host configuration\n")


def dracut_image(root: Path) -> Path:
    for rel, data in {"boot/vmlinuz-6.1.0-99-amd64": b"kernel", "usr/bin/dracut": b"#!/bin/sh\n",
                      "etc/hostname": b"node\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "usr/lib/dracut/modules.d/90dmsquash-live").mkdir(parents=True)
    return root


def dracut_output(volumes: dict[str, str], argv: list[str]) -> Path:
    """The host directory that holds what dracut writes as its last argument."""
    inside = os.path.dirname(argv[-1])
    return Path(next(host_dir for host_dir, mount in volumes.items() if mount == inside))


def pack_image(buildah: FakeBuildah, out: Path, **extra):
    request = PackRequest(image="node", output_dir=str(out), version="1.0", source_image="localhost/p/node:k",
                          source_date_epoch=SDE, **{"formats": ["squashfs"], **extra})
    packer = Packer(request, buildah)  # type: ignore[arg-type]
    return packer.run(False)


@needs_mksquashfs
def test_dracut_cannot_make_pack_chmod_or_publish_a_host_file_as_the_initrd(tmp_path, host):
    def dracut(volumes, argv):
        output = dracut_output(volumes, argv)
        (output / names.INITRD_FILE).symlink_to(host / "shadow")
        for name in (names.MANIFEST_FILE, names.SUMS_FILE, names.SBOM_FILE):
            (output / name).symlink_to(host / "config")

    buildah = FakeBuildah(dracut_image(tmp_path / "root"), {"dracut": dracut})
    with pytest.raises(PackError, match="initrd.img the image's dracut wrote is not a regular file but a symbolic link"):
        pack_image(buildah, tmp_path / "out")
    assert host_untouched(host)
    assert not (tmp_path / "out" / "node").exists()  # nothing published, no partial directory left


@needs_mksquashfs
def test_dracut_writes_into_a_directory_of_its_own_and_only_its_initrd_is_copied_out(tmp_path, host):
    def dracut(volumes, argv):
        output = dracut_output(volumes, argv)
        (output / names.INITRD_FILE).write_bytes(b"initrd made by dracut")
        for name in (names.MANIFEST_FILE, names.SUMS_FILE, names.SBOM_FILE, "node.squashfs"):
            if not (output / name).exists():
                (output / name).symlink_to(host / "config")
        (output / "extra-file").write_bytes(b"not an artifact")

    buildah = FakeBuildah(dracut_image(tmp_path / "root"), {"dracut": dracut})
    result = pack_image(buildah, tmp_path / "out")
    version_dir = Path(result["version_dir"])
    assert host_untouched(host)
    assert (version_dir / names.INITRD_FILE).read_bytes() == b"initrd made by dracut"
    assert stat.S_IMODE((version_dir / names.INITRD_FILE).stat().st_mode) == 0o644
    assert sorted(p.name for p in version_dir.iterdir()) == sorted(
        [names.INITRD_FILE, names.KERNEL_FILE, names.MANIFEST_FILE, names.SBOM_FILE, names.SUMS_FILE, "node.squashfs"])
    assert all(not p.is_symlink() for p in version_dir.iterdir())
    assert json.loads((version_dir / names.MANIFEST_FILE).read_text())["initrd"]["generator"] == "dracut"
    # The container saw a directory of its own, not the one whose files are published.
    (_argv, volumes), = [run for run in buildah.runs if run[0][0] == "dracut"]
    assert [os.path.basename(path) for path in volumes] == [".dracut-work"]


def test_the_image_packed_is_the_one_inspected_by_id_not_by_a_reference_that_may_move(tmp_path):
    buildah = FakeBuildah(dracut_image(tmp_path / "root"))
    result = pack_image(buildah, tmp_path / "out", formats=["cpio.zst"])
    assert [image for image, _name in buildah.from_calls] == [IMAGE_ID]
    assert result["manifest"]["source"] == {"image": "localhost/p/node:k", "image_id": IMAGE_ID}


def _link_depmod_data(staged: Path, host: Path) -> None:
    (staged / "modules.dep").unlink(missing_ok=True)
    (staged / "modules.dep").symlink_to(host / "shadow")


def _link_depmod_directory(staged: Path, host: Path) -> None:
    (host / "kver").mkdir()
    (host / "kver" / "modules.dep").write_bytes(SECRET)
    shutil.rmtree(staged)
    staged.symlink_to(host / "kver")


@pytest.mark.parametrize("plant", [_link_depmod_data, _link_depmod_directory])
def test_depmod_output_is_read_without_following_what_the_images_depmod_planted(tmp_path, host, plant):
    def depmod(volumes, argv):
        staging = next(host_dir for host_dir, mount in volumes.items() if mount == argv[2])
        plant(Path(staging) / "lib" / "modules" / argv[3], host)

    buildah = FakeBuildah(make_image(tmp_path / "root"), {"depmod": depmod})
    with pytest.raises(PackError, match="hardware_profile: depmod of the kept modules failed"):
        pack_image(buildah, tmp_path / "out", formats=["cpio.gz"], hardware_profile={"modules": ["e1000"]})
    assert host_untouched(host)
    assert not (tmp_path / "out" / "node").exists()


def test_a_live_boot_initrd_linked_to_a_host_file_is_not_published(tmp_path, host):
    root = make_image(tmp_path / "root")
    (root / "usr/share/initramfs-tools/scripts").mkdir(parents=True)
    (root / "usr/share/initramfs-tools/scripts/live").write_text("")
    (root / f"boot/initrd.img-{KVER}").symlink_to(host / "shadow")
    request = PackRequest(image="node", output_dir=str(tmp_path / "out"), formats=["squashfs"], version="1.0",
                          source_path=str(root), source_date_epoch=SDE,
                          exclude=[f"{MODDIR}/*", "usr/lib/firmware/*"])
    if shutil.which("mksquashfs") is None:
        pytest.skip("needs squashfs-tools")
    packer = Packer(request)
    result = packer.run(False)
    assert not (Path(result["version_dir"]) / names.INITRD_FILE).exists()
    assert "initrd" not in result["manifest"] or not result["manifest"]["initrd"]
    assert any("no initrd.img was made" in w for w in packer.warnings)
    assert host_untouched(host)
    # An absolute link inside the image is the image's own file: that initrd is published.
    (root / f"boot/initrd.img-{KVER}").unlink()
    (root / "boot/initrd.img-real").write_bytes(b"the image's initrd")
    (root / f"boot/initrd.img-{KVER}").symlink_to("/boot/initrd.img-real")
    result = Packer(PackRequest(**{**request.__dict__, "output_dir": str(tmp_path / "out2")})).run(False)
    assert (Path(result["version_dir"]) / names.INITRD_FILE).read_bytes() == b"the image's initrd"
