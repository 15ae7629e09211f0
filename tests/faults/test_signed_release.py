"""Deploy with a keyring refuses a release whose signature does not prove it is the site's, before anything
in the boot tree changes.

v1 is packed, signed with the site's key (hpc.stateless.sign) and served by playbooks/deploy.yml with
``hpc_stateless_boot_keyring``. Then v2 is broken one way per case - not signed, signed by another key, a byte
flipped in the signature, SHA256SUMS (and an artifact with it) changed after signing, changed and re-signed with
another key, signed by a key of the keyring that is not a required signer - and deployed, for real and with
``--check --diff``. Each is refused with an error naming v2's SHA256SUMS and the key(s) expected; the boot tree
(every file's bytes, every link, the lock file) is exactly what it was, v1 is still served and verifies.
Keys are throw-away ed25519 keys in temporary GnuPG homes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bootlink_fixtures import tree_snapshot
from faults_site import FAULTS_IMAGE
from faults_support import boot_tree_problems, copy_version, deploy, deploy_site, failure_of, served
from pack_support import run_module
from signing_keys import SIGNATURE, SUMS, SigningKey, gpgv

ARTIFACT = f"{FAULTS_IMAGE}.cpio.zst"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("release-keys")
    made = {name: SigningKey(base, name) for name in ("site", "intruder")}
    both = base / "both.asc"
    both.write_bytes(made["site"].armored.read_bytes() + made["intruder"].armored.read_bytes())
    made["both"] = both
    yield made
    for key in (made["site"], made["intruder"]):
        key.close()


def replace_artifact(version: Path) -> None:
    """What a tampered release looks like: another artifact, and SHA256SUMS updated to match it."""
    (version / ARTIFACT).write_bytes((version / ARTIFACT).read_bytes() + b"tampered")
    digest = hashlib.sha256((version / ARTIFACT).read_bytes()).hexdigest()
    lines = [f"{digest}  {ARTIFACT}" if line.endswith(f"  {ARTIFACT}") else line
             for line in (version / SUMS).read_text().splitlines()]
    (version / SUMS).write_text("\n".join(lines) + "\n")


def flip_signature_byte(version: Path) -> None:
    data = bytearray((version / SIGNATURE).read_bytes())
    body = data.index(b"\n\n") + 2  # the first line of the base64 body
    data[body + 20] = ord("A") if data[body + 20] != ord("A") else ord("B")
    (version / SIGNATURE).write_bytes(bytes(data))


# case: (break v2, keyring ("site" or "both"), signers, what the error says after "signature check of .. failed: ")
CASES = {
    "unsigned": (lambda v2, keys: None, "site", False, "{v2}/SHA256SUMS.asc is missing: the release is not signed"),
    "wrong-key": (lambda v2, keys: keys["intruder"].sign_file(v2 / SUMS), "site", False,
                  "signed by key {intruder}, which is not in the keyring"),
    "flipped-signature-byte": (lambda v2, keys: (keys["site"].sign_file(v2 / SUMS), flip_signature_byte(v2)),
                               "site", False, ""),
    "sums-modified-after-signing": (lambda v2, keys: (keys["site"].sign_file(v2 / SUMS), replace_artifact(v2)),
                                    "site", False, "BAD signature by key "),
    "re-signed-by-another-key": (lambda v2, keys: (keys["site"].sign_file(v2 / SUMS), replace_artifact(v2),
                                                   keys["intruder"].sign_file(v2 / SUMS)),
                                 "site", False, "signed by key {intruder}, which is not in the keyring"),
    "not-a-required-signer": (lambda v2, keys: keys["intruder"].sign_file(v2 / SUMS), "both", True,
                              "signed by {intruder} (intruder release <intruder@example.invalid>), which is in the "
                              "keyring but not a required signer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_signature_is_refused_before_the_tree_changes(case, keys, small_packs, tmp_path):
    breaks, keyring, with_signers, problem = CASES[case]
    site_key = keys["site"]
    keyring_path = site_key.armored if keyring == "site" else keys["both"]
    signers = {"hpc_stateless_boot_signers": [site_key.fingerprint]} if with_signers else {}
    site = deploy_site(tmp_path, hpc_stateless_boot_keyring=str(keyring_path), **signers)
    v1 = copy_version(small_packs, "v1", site["out"])
    v2 = copy_version(small_packs, "v2", site["out"])
    rc, signed = run_module("hpc.stateless.sign", version_dir=str(v1), key=site_key.fingerprint,
                            gnupghome=str(site_key.home))
    assert rc == 0 and signed["changed"], signed.get("msg")
    first = deploy(site, "v1")
    assert first.returncode == 0, first.stdout[-3000:]
    assert served(site["root"]) == "v1"
    before = tree_snapshot(site["root"])
    lock = (site["root"] / ".hpc-stateless.lock").read_bytes()

    breaks(v2, keys)
    expected = (f"signature check of {v2}/SHA256SUMS failed: "
                + problem.format(v2=v2, intruder=keys["intruder"].fingerprint))
    key_expected = (f"expected a signature by {site_key.fingerprint} (keyring {keyring_path})" if with_signers
                    else f"expected a signature by {site_key.fingerprint} (site release <site@example.invalid>) "
                         f"from keyring {keyring_path}")
    for mode in ((), ("--check", "--diff")):
        proc = deploy(site, "v2", *mode)
        assert proc.returncode != 0, f"{case} {mode}: deploy accepted v2"
        failure = " ".join(failure_of(proc.stdout).split())  # the message as one line, however it was wrapped
        assert expected in failure, failure[:3000]
        assert key_expected in failure, failure[:3000]
        assert tree_snapshot(site["root"]) == before, f"{case} {mode}: a refused deploy changed the boot tree"
        assert (site["root"] / ".hpc-stateless.lock").read_bytes() == lock
    assert served(site["root"]) == "v1" and boot_tree_problems(site["root"]) == []
    assert gpgv(site_key.binary, site["root"] / FAULTS_IMAGE).returncode == 0


@pytest.mark.parametrize("how", ["rollback", "re-switch", "deploy-by-version"])
def test_switching_back_to_a_version_altered_after_publishing_is_refused(how, keys, small_packs, tmp_path):
    """Issue 30: v1 and v2 are signed and served in turn; then v1's published copy in the boot tree gets another
    artifact and a SHA256SUMS to match (its signature no longer covers it). A rollback (bootlink state=rollback,
    as the rolling update's failed canary runs it) and a re-switch (bootlink state=switched version=v1) check v1's
    signature again and refuse; deploy.yml with hpc_stateless_deploy_version=v1 refuses too (the published copy
    is no longer the signed pack). Each time the boot tree is unchanged and v2 is still served."""
    site_key = keys["site"]
    site = deploy_site(tmp_path, hpc_stateless_boot_keyring=str(site_key.armored))
    for version in ("v1", "v2"):
        rc, signed = run_module("hpc.stateless.sign", version_dir=str(copy_version(small_packs, version, site["out"])),
                                key=site_key.fingerprint, gnupghome=str(site_key.home))
        assert rc == 0 and signed["changed"], signed.get("msg")
        proc = deploy(site, version)
        assert proc.returncode == 0, proc.stdout[-3000:]
    assert served(site["root"]) == "v2"
    published_v1 = site["root"] / "images" / FAULTS_IMAGE / "v1"
    replace_artifact(published_v1)
    before = tree_snapshot(site["root"])

    if how == "deploy-by-version":
        # Switching back by version is a downgrade, asked for: the altered build is refused all the same.
        proc = deploy(site, "v1", "-e", "hpc_stateless_deploy_downgrade=true")
        assert proc.returncode != 0, "deploy switched back to an altered v1"
        failure = " ".join(failure_of(proc.stdout).split())
        assert f"{published_v1} already holds a different build of version 'v1'" in failure, failure[:3000]
    else:
        state = {"rollback": {"state": "rollback"}, "re-switch": {"state": "switched", "version": "v1"}}[how]
        rc, result = run_module("hpc.stateless.bootlink", boot_root=str(site["root"]), image=FAULTS_IMAGE,
                                lock_timeout=0, keyring=str(site_key.armored), **state)
        assert rc != 0 and not result.get("changed"), result
        assert f"signature check of {published_v1}/SHA256SUMS failed: BAD signature" in result["msg"], result["msg"]
    assert tree_snapshot(site["root"]) == before, f"{how}: a refused switch changed the boot tree"
    assert served(site["root"]) == "v2"
    assert gpgv(site_key.binary, site["root"] / FAULTS_IMAGE).returncode == 0
