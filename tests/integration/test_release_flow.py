"""The release flow of docs/release.md, end to end, on the default compute image with a real gpg key.

build (cached) -> pack with the SBOM, signed by pack.yml -> deploy checked against the keyring -> a second pack
that differs -> diff.yml against the served version -> deploy of the second one. Every step is the playbook an
admin runs, with the variables docs/release.md shows, into trees under the test's tmp directory (the default
layers are only read). The refusals of deploy are fault cases (tests/faults/test_signed_release.py).
"""

from __future__ import annotations

import json
import re
import sys

from conftest import REPO, run_site

sys.path.insert(0, str(REPO / "tests" / "unit" / "plugins" / "module_utils"))
from signing_keys import SIGNATURE, SUMS, SigningKey, gpgv, sha256sum_check  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT_INVENTORY = REPO / "inventory"
LEFT_OUT = "/usr/lib/x86_64-linux-gnu/perl/*"


def _ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc.stdout


def test_pack_signed_diff_and_deploy_verified(tmp_path):
    key = SigningKey(tmp_path / "keys", "site")
    try:
        images, tftp, diffs = tmp_path / "images", tmp_path / "tftp", tmp_path / "diff"
        release = tmp_path / "release.yml"
        release.write_text(json.dumps({
            "hpc_stateless_pack_output_dir": str(images), "hpc_stateless_boot_root": str(tftp),
            "hpc_stateless_sign_key": key.fingerprint, "hpc_stateless_sign_gnupghome": str(key.home),
            "hpc_stateless_boot_keyring": str(key.armored), "hpc_stateless_boot_signers": [key.fingerprint],
            "hpc_stateless_diff_dir": str(diffs), "hpc_stateless_boot_copy_loader": False}))
        release_vars = ("-e", f"@{release}")

        # site.yml of the embedded inventory: build (a cache hit), pack (signed), deploy (checked).
        out = _ok(run_site(*release_vars, "-e", "hpc_stateless_pack_version=rel1", inventory=DEFAULT_INVENTORY))
        assert "releases are published WITHOUT checking" not in out
        first = images / "compute" / "rel1"
        assert {SUMS, SIGNATURE, "sbom.cdx.json", "manifest.json", "vmlinuz", "compute.cpio.zst"} <= {
            p.name for p in first.iterdir()}
        assert (tftp / "compute").resolve() == (tftp / "images" / "compute" / "rel1").resolve()
        served = tftp / "compute"
        assert gpgv(key.binary, served).returncode == 0
        assert (served / SIGNATURE).read_bytes() == (first / SIGNATURE).read_bytes()
        check = sha256sum_check(served)
        assert check.returncode == 0 and "sbom.cdx.json: OK" in check.stdout, check.stdout + check.stderr

        # A second version that differs from the served one: Perl's architecture-dependent files left out.
        _ok(run_site(*release_vars, "-e", "hpc_stateless_pack_version=rel2",
                     "-e", json.dumps({"hpc_stateless_pack_exclude": [LEFT_OUT]}),
                     inventory=DEFAULT_INVENTORY, playbook="playbooks/pack.yml"))
        second = images / "compute" / "rel2"
        assert gpgv(key.binary, second).returncode == 0

        # What changes for the nodes: only files, only under the excluded path, and the release file.
        _ok(run_site(*release_vars, inventory=DEFAULT_INVENTORY, playbook="playbooks/diff.yml"))
        markdown = (diffs / "compute.md").read_text()
        assert "compute rel1 (served)" in markdown and "compute rel2" in markdown, markdown
        assert re.search(r"^\| packages \| 0 \| 0 \| 0 \| 0 \| 0 \|$", markdown, re.M), markdown
        removed = re.search(r"^\| files \| 0 \| (\d+) \| \| \| 1 \|$", markdown, re.M)
        assert removed and int(removed.group(1)) > 100, markdown
        assert "Layers rebuilt: none" in markdown

        # Deploy the second version: checked, switched, the first kept as the rollback target.
        _ok(run_site(*release_vars, inventory=DEFAULT_INVENTORY, playbook="playbooks/deploy.yml"))
        assert (tftp / "compute").resolve() == (tftp / "images" / "compute" / "rel2").resolve()
        assert (tftp / "images" / "compute" / "previous").resolve() == (tftp / "images" / "compute" / "rel1").resolve()
        assert gpgv(key.binary, tftp / "compute").returncode == 0
    finally:
        key.close()
