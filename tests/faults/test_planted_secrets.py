"""Secrets planted in a layer image: pack refuses, names every one of them, and writes nothing.

The keys are real (ssh-keygen, openssl), planted in an image committed from the session's layer
``faulty``; the pack is the real module on that image (a throw-away working container). Keys at
the paths the name rules know, and keys under names and in directories no rule looks at (found
by what they hold).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from faults_site import FAULTS_IMAGE, buildah, commit_changed_image
from pack_support import pack_module

# path in the image -> how pack's refusal must describe it
SECRETS = {
    "etc/ssh/ssh_host_ed25519_key": "SSH host private key",
    "etc/ssh/ssh_host_rsa_key": "SSH host private key",
    "root/.ssh/id_ed25519": "SSH private key",
    "home/alice/.ssh/deploy": "OpenSSH private key block at byte 0",
    "etc/munge/munge.key": "MUNGE key",
    "etc/ssl/private/node.key": "PEM private key block at byte 0",
}
# Under innocent names in innocent directories of the layer: found by content only.
HIDDEN = {
    "usr/share/misc/palette.dat": "PEM RSA private key block at byte 0",
    "var/lib/misc/state.bin": "128 random bytes with no file format, as in a MUNGE key, at byte 0",
}


def plant(root: Path, scratch: Path) -> None:
    """Real key material at every path of SECRETS (public halves next to the SSH keys)."""
    for rel in SECRETS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
    for rel, kind in (("etc/ssh/ssh_host_ed25519_key", "ed25519"), ("etc/ssh/ssh_host_rsa_key", "rsa"),
                      ("root/.ssh/id_ed25519", "ed25519"), ("home/alice/.ssh/deploy", "ed25519")):
        key = scratch / f"key-{uuid.uuid4().hex[:6]}"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "planted", "-f", str(key)], check=True)
        (root / rel).write_bytes(key.read_bytes())
        (root / (rel + ".pub")).write_bytes(key.with_suffix(".pub").read_bytes())
    (root / "etc/munge/munge.key").write_bytes(os.urandom(1024))
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(root / "etc/ssl/private/node.key")],
                   check=True, capture_output=True)


def test_pack_refuses_an_image_with_planted_secrets_and_names_each(site, tmp_path):
    ref = f"{site.prefix}/planted:secrets"
    commit_changed_image(f"{site.prefix}/faulty:latest", ref, lambda root: plant(Path(root), tmp_path),
                         f"hpc-stateless-faults-plant-{uuid.uuid4().hex[:8]}")

    out = tmp_path / "out"
    rc, result = pack_module(image=FAULTS_IMAGE, source_image=ref, output_dir=str(out), version="v1")
    assert rc != 0
    assert "refusing to pack secrets" in result["msg"]
    for rel, kind in SECRETS.items():
        assert f"/{rel} ({kind})" in result["msg"], f"/{rel} ({kind}) not named in: {result['msg']}"
    assert ".pub" not in result["msg"], "a public key was called a secret"
    image_dir = out / FAULTS_IMAGE
    assert not image_dir.exists(), f"the refused pack left {image_dir}: {list(image_dir.iterdir())}"
    listing = json.loads(buildah("containers", "--json") or "[]") or []
    assert [c["containername"] for c in listing if c.get("imagename") == ref] == [], \
        "the refused pack left its working container"


def plant_hidden(root: Path, scratch: Path) -> None:
    """An RSA key (PEM) and a MUNGE key renamed into directories the layer already has."""
    key = scratch / f"key-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-f", str(key)], check=True)
    for rel in HIDDEN:
        assert (root / rel).parent.is_dir(), f"/{rel}: the layer has no such directory"
    (root / "usr/share/misc/palette.dat").write_bytes(key.read_bytes())
    (root / "var/lib/misc/state.bin").write_bytes(os.urandom(128))  # what mungekey writes by default


def test_pack_finds_keys_under_innocent_names_by_content_and_leaves_no_image_directory(site, tmp_path):
    ref = f"{site.prefix}/planted:hidden"
    commit_changed_image(f"{site.prefix}/faulty:latest", ref, lambda root: plant_hidden(Path(root), tmp_path),
                         f"hpc-stateless-faults-hide-{uuid.uuid4().hex[:8]}")
    out = tmp_path / "out"
    (out / FAULTS_IMAGE).mkdir(parents=True)  # left empty by an earlier refused pack

    rc, result = pack_module(image=FAULTS_IMAGE, source_image=ref, output_dir=str(out), version="v1")
    assert rc != 0
    assert "refusing to pack secrets" in result["msg"]
    for rel, kind in HIDDEN.items():
        assert f"/{rel} ({kind})" in result["msg"], f"/{rel} ({kind}) not named in: {result['msg']}"
    assert not (out / FAULTS_IMAGE).exists(), "the refused pack left an empty image directory"
    assert list(out.iterdir()) == []

    # The same findings, allowed by path, are packed with a warning (check mode: nothing written).
    rc, result = pack_module(image=FAULTS_IMAGE, source_image=ref, output_dir=str(out), version="v1",
                             allowed_secrets=list(HIDDEN), check_mode=True)
    assert rc == 0, result.get("msg")
    assert sorted(result["allowed_secrets"]) == sorted(f"/{rel} ({kind})" for rel, kind in HIDDEN.items())
