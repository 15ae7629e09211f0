"""The release says how fresh it is (issue 27), end to end with a local signed apt repository.

The repository (apt_repo_support.py) is built in the test with dpkg-deb and apt-ftparchive, signed with a
throw-away key and served on 127.0.0.1: apt, gpgv and the collection's archive reader read it as they read
deb.debian.org.

* the fixture itself: apt accepts it with Signed-By, sees a newer publish, refuses another key (1 s);
* the freshness gate at pack on a tiny tree, the module against a three-suite "bookworm" of the local repository:
  manifest and SBOM record origins, states and pending updates; a security update refuses the pack unless the gate
  warns; image_diff shows it as a security update (10 s);
* end to end (the issue's "Done when"): the default build's base plus a site leaf layer whose own source is the
  local repository installs hpc-fresh-probe 1.0; 1.1 is published; the plan names the leaf alone with the package
  and both versions; policy never rebuilds nothing and warns naming it; site.yml rebuilds the leaf only (the base
  image is the same one); the packs' manifests, the SBOM and image_diff show 1.0 -> 1.1 (about 90-115 s on the
  shared 2-core host, when the default build's base is current; otherwise the base is built first).
  Each phase before and after the publish reads the archive into its own cache directory: within the cache's
  max_age a view does not ask the mirror again, as a real run does not.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import packages_of, repositories_of
from apt_repo_support import AptRepo, apt_policy
from conftest import apt_leaf_inventory, buildah, default_base_prefix, image_labels, layer_images, run_site
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


# -- end to end: a site leaf layer with its own signed repository; the archive moves; the plan and build follow -----
LEAF = "freshleaf"
UNVERIFIED_OK = {"hpc_stateless_unverified_ok": "freshness test: a site leaf layer verify never booted"}


@pytest.fixture(scope="module", name="prefix")
def fixture_prefix():
    with default_base_prefix("fresh") as prefix:
        yield prefix
    for ref in layer_images(prefix):  # a batch rmi that one busy image failed leaves the others: one at a time
        buildah("rmi", "--force", ref, check=False)
    assert not layer_images(prefix), f"images of {prefix} left behind"


def leaf_inventory(root: Path, uri: str, keyring: Path) -> Path:
    """The default base layer and the site leaf layer, whose own source is the local repository."""
    inventory = apt_leaf_inventory(root, LEAF, uuid.uuid4().hex[:8])
    layers_file = inventory / "group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text(encoding="utf-8"))
    spec["hpc_stateless_layers"][LEAF] = {
        "parent": "base", "roles": ["freshness_leaf"],
        "sources": [{"uri": uri, "suite": "site", "components": ["main"], "keyring": str(keyring)}]}
    layers_file.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return inventory


def playbook(inventory: Path, prefix: str, cache: Path, *extra: str, playbook_path: str = "site.yml"):
    variables = {"hpc_stateless_image_prefix": prefix, "hpc_stateless_freshness_cache_dir": str(cache)}
    return run_site("-e", json.dumps(variables), *extra, inventory=inventory, playbook=playbook_path)


def pack_leaf(inventory: Path, prefix: str, cache: Path, output: Path):
    variables = {**UNVERIFIED_OK, "hpc_stateless_pack_output_dir": str(output)}
    return playbook(inventory, prefix, cache, "-e", json.dumps(variables), playbook_path="playbooks/pack.yml")


def leaf_labels(prefix: str) -> dict:
    """The labels of the leaf's image of the current configuration (``:latest``, which every build run moves)."""
    return image_labels(f"{prefix}/{LEAF}:latest")


def version_dirs(output: Path) -> set[Path]:
    return {path.parent for path in (output / LEAF).glob("*/manifest.json")}


def test_an_archive_update_rebuilds_exactly_the_layer_that_installed_it(prefix, tmp_path):
    repo = AptRepo(tmp_path / "site")
    output = tmp_path / "images"
    try:
        repo.add_package(PACKAGE, "1.0")
        repo.publish()
        with repo.serve() as uri:
            inventory = leaf_inventory(tmp_path, uri, repo.keyring)
            built = playbook(inventory, prefix, tmp_path / "cache-built")
            assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
            before = layer_images(prefix)
            labels = leaf_labels(prefix)
            assert packages_of(labels)[PACKAGE] == "1.0"
            assert any(state["suite"] == "site" for state in repositories_of(labels))
            packed = pack_leaf(inventory, prefix, tmp_path / "cache-built", output)
            assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
            (first,) = version_dirs(output)

            repo.add_package(PACKAGE, "1.1")
            repo.publish()
            moved = tmp_path / "cache-moved"
            # The plan (check mode builds nothing) names exactly the leaf, the package and both versions.
            plan = playbook(inventory, prefix, moved, "--check")
            assert plan.returncode == 0, plan.stdout[-4000:] + plan.stderr[-2000:]
            assert f"2 layers, 1 to build: {LEAF} (check mode: not built)" in plan.stdout
            assert f"{LEAF}: 1 update ({PACKAGE} 1.0 -> 1.1)" in plan.stdout

            # Policy never: nothing rebuilds, and the warning names the lag.
            pinned = playbook(inventory, prefix, moved, "-e", "hpc_stateless_freshness_policy=never")
            assert pinned.returncode == 0, pinned.stdout[-4000:] + pinned.stderr[-2000:]
            assert "2 layers, 0 to build: nothing (every layer is cached)" in pinned.stdout
            warnings = " ".join(pinned.stderr.split())  # ansible wraps its warnings
            assert f"{LEAF} lags behind its archive: 1 update ({PACKAGE} 1.0 -> 1.1)" in warnings
            assert layer_images(prefix) == before

            # site.yml rebuilds the leaf only: the base image stays the one it was.
            rebuilt = playbook(inventory, prefix, moved)
            assert rebuilt.returncode == 0, rebuilt.stdout[-4000:] + rebuilt.stderr[-2000:]
            assert f"2 layers, 1 to build: {LEAF}" in rebuilt.stdout
            after = layer_images(prefix)
            assert {r: i for r, i in after.items() if f"/{LEAF}:" not in r} == \
                {r: i for r, i in before.items() if f"/{LEAF}:" not in r}
            labels = leaf_labels(prefix)
            assert packages_of(labels)[PACKAGE] == "1.1"

            packed = pack_leaf(inventory, prefix, moved, output)
            assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
            (second,) = version_dirs(output) - {first}
        old, new = (json.loads((path / "manifest.json").read_text()) for path in (first, second))
        old_probe = next(p for p in old["packages"] if p["name"] == PACKAGE)
        new_probe = next(p for p in new["packages"] if p["name"] == PACKAGE)
        assert old_probe == {"name": PACKAGE, "version": "1.0", "architecture": "all", "origin": "site",
                             "security": False}
        assert (new_probe["version"], new_probe["origin"]) == ("1.1", "site")
        assert not [u for u in new["freshness"]["pending_updates"] if u["package"] == PACKAGE]
        assert [u for u in old["freshness"]["pending_updates"] if u["package"] == PACKAGE] == []
        site_states = [s for s in new["freshness"]["repositories"] if s["suite"] == "site"]
        assert site_states and site_states[0]["layers"] == [LEAF]
        bom = json.loads((second / "sbom.cdx.json").read_text())
        probe = next(c for c in bom["components"] if c["name"] == PACKAGE)
        assert probe["version"] == "1.1"
        assert {"name": "hpc.stateless:origin_suite", "value": "site"} in probe["properties"]
        rc, diff = run_module("hpc.stateless.image_diff", old_dir=str(first), new_dir=str(second))
        assert rc == 0, diff.get("msg")
        assert diff["packages"]["upgraded"] == [{"name": PACKAGE, "old": "1.0", "new": "1.1"}]
        assert diff["packages"]["security_known"] is True and diff["packages"]["security"] == []
        assert f"  {PACKAGE} 1.0 -> 1.1" in "\n".join(diff["table"])
    finally:
        repo.close()
