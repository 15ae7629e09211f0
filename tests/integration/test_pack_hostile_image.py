"""A hostile image's own dracut, run by the real pack module in a real buildah working container, cannot
reach a file of the build host.

The image is tiny and built here in a second (no bootstrap): busybox-static (scripts/setup.sh) as its
shell, a stand-in kernel, dracut's live module directory (so pack chooses the dracut method) and a
``dracut`` script of the test's. The hostile one leaves ``initrd.img`` as a symlink to a 0600 "secret"
of the host and ``manifest.json``, ``SHA256SUMS`` and the SBOM as symlinks to a host file; the
well-behaved one writes a real initrd and plants the same links next to it. The host's files stay as
they were in both cases: pack refuses the symlinked initrd, and copies the real one out of the
directory dracut wrote into, which is not the one it publishes.
"""

from __future__ import annotations

import shutil
import stat
import uuid
from pathlib import Path

import pytest

from conftest import buildah, commit_changed_image, leftover_pack_containers
from pack_support import PACK_PREFIX, pack_module

BUSYBOX = shutil.which("busybox")
SECRET = b"root:$6$host-secret:19000:0:99999:7:::\n"
KERNEL_VERSION = "6.1.0-99-amd64"
PUBLISHED = ("manifest.json", "SHA256SUMS", "sbom.cdx.json")

pytestmark = pytest.mark.skipif(BUSYBOX is None or shutil.which("buildah") is None or shutil.which("mksquashfs") is None,
                                reason="needs busybox-static, buildah and squashfs-tools (scripts/setup.sh)")

# dracut ... --kver <v> <output>: the output's directory is the one the container was given.
HOSTILE_DRACUT = """#!/bin/sh
for out; do :; done
dir=$(dirname "$out")
ln -s {secret} "$dir/initrd.img"
for name in {published}; do ln -s {config} "$dir/$name"; done
"""
WELL_BEHAVED_DRACUT = """#!/bin/sh
for out; do :; done
dir=$(dirname "$out")
printf 'initrd made in the image' > "$out"
for name in {published}; do ln -s {config} "$dir/$name"; done
"""


def build_image(ref: str, dracut: str) -> str:
    def change(mounted: str) -> None:
        root = Path(mounted)
        (root / "bin").mkdir()
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        for applet in ("sh", "ln", "dirname", "printf"):
            (root / "bin" / applet).symlink_to("busybox")
        (root / "usr/bin").mkdir(parents=True)
        (root / "usr/bin/dracut").write_text(dracut)
        (root / "usr/bin/dracut").chmod(0o755)
        (root / "usr/lib/dracut/modules.d/90dmsquash-live").mkdir(parents=True)
        (root / "boot").mkdir()
        (root / "boot" / f"vmlinuz-{KERNEL_VERSION}").write_bytes(b"not really a kernel")
        (root / "etc").mkdir()
        (root / "etc/hostname").write_text("hostile\n")

    return commit_changed_image("scratch", ref, change, f"hpc-stateless-packtest-hostile-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def host(tmp_path):
    base = tmp_path / "host"
    base.mkdir()
    (base / "shadow").write_bytes(SECRET)
    (base / "shadow").chmod(0o600)
    (base / "config").write_bytes(b"host configuration\n")
    return base


def host_untouched(host: Path) -> bool:
    return ((host / "shadow").read_bytes() == SECRET and stat.S_IMODE((host / "shadow").stat().st_mode) == 0o600
            and (host / "config").read_bytes() == b"host configuration\n")


def test_the_images_dracut_cannot_chmod_publish_or_overwrite_host_files(tmp_path, host):
    tag = uuid.uuid4().hex[:8]
    hostile = f"{PACK_PREFIX}/hostile-dracut:{tag}"
    behaved = f"{PACK_PREFIX}/behaved-dracut:{tag}"
    values = {"secret": host / "shadow", "config": host / "config", "published": " ".join(PUBLISHED)}
    build_image(hostile, HOSTILE_DRACUT.format(**values))
    build_image(behaved, WELL_BEHAVED_DRACUT.format(**values))
    try:
        rc, result = pack_module(image="hostile", source_image=hostile, output_dir=str(tmp_path / "out"),
                                 version="v1", formats=["squashfs"])
        assert rc != 0, result
        assert "initrd.img the image's dracut wrote is not a regular file but a symbolic link" in result["msg"], result
        assert host_untouched(host)
        assert not (tmp_path / "out" / "hostile").exists()
        assert not leftover_pack_containers()

        rc, result = pack_module(image="behaved", source_image=behaved, output_dir=str(tmp_path / "out"),
                                 version="v1", formats=["squashfs"])
        assert rc == 0, result.get("msg")
        assert host_untouched(host)
        version_dir = Path(result["version_dir"])
        assert (version_dir / "initrd.img").read_bytes() == b"initrd made in the image"
        assert not [p.name for p in version_dir.iterdir() if p.is_symlink()]
        assert sorted(p.name for p in version_dir.iterdir()) == sorted(
            ["behaved.squashfs", "initrd.img", "vmlinuz", *PUBLISHED])
        manifest = result["manifest"]
        assert manifest["initrd"]["generator"] == "dracut"
        # Packed from the image ID inspected (the one the gate checks), not from the reference.
        assert manifest["source"]["image_id"] == buildah("inspect", "--type", "image", "--format",
                                                         "{{.FromImageID}}", behaved).strip()
    finally:
        buildah("rmi", hostile, behaved, check=False)
