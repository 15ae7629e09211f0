"""The release says how fresh it is (issue 27), end to end with a local signed apt repository.

The repository (apt_repo_support.py) is built in the test with dpkg-deb and apt-ftparchive, signed with a
throw-away key and served on 127.0.0.1: apt, gpgv and the collection's archive reader read it as they read
deb.debian.org.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apt_repo_support import AptRepo, apt_policy
from pack_support import pack_module, run_module, small_root

PACKAGE = "hpc-fresh-probe"


@pytest.fixture(name="repo")
def fixture_repo(tmp_path):
    repo = AptRepo(tmp_path / "repo")
    yield repo
    repo.close()


def test_apt_reads_the_local_repository_with_signed_by(repo, tmp_path):
    """The fixture is a real signed repository: apt accepts it with its key as Signed-By, sees a newer version
    published a moment later, and refuses it signed by another key."""
    repo.add_package(PACKAGE, "1.0")
    repo.publish()
    with repo.serve():
        first = apt_policy(tmp_path / "apt", repo.source_line(str(repo.keyring)), PACKAGE)
        assert first.returncode == 0, first.stderr
        assert "Candidate: 1.0" in first.stdout
        repo.add_package(PACKAGE, "1.1")
        repo.publish()
        second = apt_policy(tmp_path / "apt", repo.source_line(str(repo.keyring)), PACKAGE)
        assert second.returncode == 0, second.stderr
        assert "Candidate: 1.1" in second.stdout
        stranger = AptRepo(tmp_path / "stranger")
        try:
            refused = apt_policy(tmp_path / "apt-stranger", repo.source_line(str(stranger.keyring)), PACKAGE)
        finally:
            stranger.close()
        assert refused.returncode != 0
        assert "NO_PUBKEY" in refused.stderr and "is not signed" in refused.stderr


# -- the freshness gate at pack, on a tiny tree (no container): the module against the archive's three suites -----
SUITES = ("bookworm", "bookworm-updates", "bookworm-security")


def dpkg_status(packages: dict[str, str]) -> bytes:
    return "".join(f"Package: {name}\nStatus: install ok installed\nArchitecture: all\nVersion: {version}\n\n"
                   for name, version in sorted(packages.items())).encode()


def layers_of(uri: str, keyring: Path) -> dict:
    """A root layer bootstrapping 'Debian bookworm' from the local repository, which serves all three suites."""
    return {"base": {"bootstrap": {"distro": "debian", "release": "bookworm", "mirror": uri.rstrip("/"),
                                   "security_mirror": uri.rstrip("/"), "keyring": str(keyring)},
                     "roles": []}}


def pack(tmp_path: Path, root: Path, version: str, layers: dict, gate: str, cache: str) -> tuple[int, dict]:
    return pack_module(image="fresh", source_path=str(root), output_dir=str(tmp_path / "out"), version=version,
                       layer="base", layers=layers, freshness_gate=gate, archive_cache_dir=str(tmp_path / cache))


def test_pack_records_freshness_and_refuses_pending_security_updates(tmp_path):
    """The manifest and SBOM say where each package comes from and what is pending; a security update published
    after the build refuses the pack (naming it and what to run) unless the gate warns; image_diff shows the update
    as a security update. The archive is read through the module's own view (gpgv, signed indexes, cache)."""
    repo = AptRepo(tmp_path / "debian", suites=SUITES)
    try:
        repo.add_package(PACKAGE, "1.0", "bookworm")
        repo.add_package("hpc-base-tool", "2.0", "bookworm")
        repo.add_package("hpc-base-tool", "2.1", "bookworm-updates")
        repo.publish()
        installed = {PACKAGE: "1.0", "hpc-base-tool": "2.0", "local-only": "0.1"}
        root = small_root(tmp_path, extra={"var/lib/dpkg/status": dpkg_status(installed)})
        with repo.serve() as uri:
            layers = layers_of(uri, repo.keyring)
            rc, first = pack(tmp_path, root, "1", layers, "refuse", "cache-1")
            assert rc == 0, first.get("msg")
            fresh = first["freshness"]
            assert fresh["pending_security_updates"] == 0
            assert fresh["pending_updates"] == [{"package": "hpc-base-tool", "installed": "2.0", "candidate": "2.1",
                                                 "suite": "bookworm-updates", "security": False}]
            assert {s["suite"] for s in fresh["archive"]} == set(SUITES)
            assert all(len(s["sha256"]) == 64 and s["date"] for s in fresh["archive"])
            by_name = {p["name"]: p for p in first["manifest"]["packages"]}
            assert by_name[PACKAGE]["origin"] == "bookworm" and by_name[PACKAGE]["security"] is False
            assert "origin" not in by_name["local-only"]
            bom = json.loads(Path(first["sbom"]).read_text())
            properties = {(p["name"], p["value"]) for p in bom["metadata"]["component"]["properties"]}
            assert ("hpc.stateless:pending_update", "hpc-base-tool 2.0 -> 2.1 bookworm-updates") in properties

            repo.add_package(PACKAGE, "1.1", "bookworm-security")
            repo.publish()
            rc, refused = pack(tmp_path, root, "2", layers, "refuse", "cache-2")
            assert rc != 0
            assert (f"image fresh: 1 security update ({PACKAGE} 1.0 -> 1.1) pending; run ansible-playbook site.yml "
                    "to rebuild") in refused["msg"]
            assert not (tmp_path / "out/fresh/2").exists()
            rc, warned = pack(tmp_path, root, "2", layers, "warn", "cache-2")
            assert rc == 0, warned.get("msg")
            assert any(f"{PACKAGE} 1.0 -> 1.1" in w and "packed anyway" in w for w in warned.get("warnings", []))
            assert warned["freshness"]["pending_security_updates"] == 1

            rebuilt = small_root(tmp_path, extra={"var/lib/dpkg/status": dpkg_status({**installed, PACKAGE: "1.1"})})
            rc, third = pack(tmp_path, rebuilt, "3", layers, "refuse", "cache-2")
            assert rc == 0, third.get("msg")
        rc, diff = run_module("hpc.stateless.image_diff", old_dir=str(tmp_path / "out/fresh/1"),
                              new_dir=str(tmp_path / "out/fresh/3"))
        assert rc == 0, diff.get("msg")
        assert diff["packages"]["security"] == [{"name": PACKAGE, "old": "1.0", "new": "1.1",
                                                 "origin": "bookworm-security"}]
        assert f"  ! {PACKAGE} 1.0 -> 1.1 (bookworm-security)" in diff["table"]
        assert "**Security updates (1)**" in diff["markdown"]
    finally:
        repo.close()
