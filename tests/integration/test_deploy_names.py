"""Names through both stages: hpc.stateless.pack writes Debian-style versions, hpc.stateless.bootlink
publishes and serves them; bad names are refused by both modules with the same message and leave
nothing behind.

The pack is of a small directory tree with a stand-in kernel (the names are the point, not the
image), so the whole round trip is a few ansible runs. The PXE boot of such a version over TFTP
and pxelinux is in test_deploy_pxe.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from pack_support import pack_module, run_module, small_root

IMAGE = "names"
VERSIONS = ("1.0~rc1", "2026.11.23+site1")
# (kind, value): a space, a leading '~', a path separator, longer than 128 characters, reserved names.
BAD = (("version", "1.0 rc1"), ("version", "~rc1"), ("version", "1.0/rc1"), ("version", "v" * 129),
       ("version", "previous"), ("image", "pxelinux.cfg"))


def bootlink(root: Path, image: str = IMAGE, **params) -> tuple[int, dict]:
    return run_module("hpc.stateless.bootlink", boot_root=str(root), image=image, lock_timeout=0, **params)


def release_in_initrd(initrd: Path) -> str:
    with open(initrd, "rb") as packed:  # through the served links, as the TFTP server reads it
        unzstd = subprocess.Popen(["zstd", "-dc"], stdin=packed, stdout=subprocess.PIPE)
    member = subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "etc/image-release"], stdin=unzstd.stdout,
                            capture_output=True, check=True)
    assert unzstd.wait() == 0
    return member.stdout.decode()


def test_debian_style_versions_pack_deploy_and_switch(tmp_path):
    source, out, root = small_root(tmp_path), tmp_path / "out", tmp_path / "tftp"
    for version in VERSIONS:
        rc, packed = pack_module(image=IMAGE, source_path=str(source), output_dir=str(out), version=version)
        assert rc == 0, packed.get("msg")
        assert Path(packed["version_dir"]) == out / IMAGE / version
        rc, deployed = bootlink(root, src=packed["version_dir"], state="switched")
        assert rc == 0, deployed.get("msg")
        assert deployed["current"] == version and deployed["published"]
        assert os.readlink(root / IMAGE) == f"images/{IMAGE}/{version}"
        subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=root / IMAGE, check=True)
        assert f"\nVERSION={version}\n" in release_in_initrd(root / IMAGE / "initrd")
    assert deployed["previous"] == VERSIONS[0]
    rc, again = bootlink(root, src=str(out / IMAGE), version=VERSIONS[0], state="switched")
    assert rc == 0 and again["current"] == VERSIONS[0] and not again["published"], again.get("msg")


def test_both_stages_refuse_bad_names_with_the_same_message(tmp_path):
    source, out, root = small_root(tmp_path), tmp_path / "out", tmp_path / "tftp"
    for kind, value in BAD:
        names = {"image": IMAGE, "version": "v1", kind: value}
        rc, packed = pack_module(source_path=str(source), output_dir=str(out), **names)
        assert rc != 0, f"pack accepted {kind} {value!r}"
        rc, deployed = bootlink(root, image=names["image"], src=str(out / names["image"]), version=names["version"],
                                state="switched")
        assert rc != 0, f"bootlink accepted {kind} {value!r}"
        assert deployed["msg"].startswith(f"{kind} {value!r} is not a valid name"), deployed["msg"]
        assert packed["msg"] == f"pack {names['image']}: {deployed['msg']}"
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))
    assert not root.exists(), sorted(str(p) for p in root.rglob("*"))
