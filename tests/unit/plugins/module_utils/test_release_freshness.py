"""How fresh a release is (issue 27): _verify/freshness.py's record and gate, and what the manifest and SBOM carry.

The archive view here is a small in-memory stand-in with the interface of _archive/index.py's ArchiveView
(candidate, origin, states): the real view reads signed indexes over HTTP and is tested in
tests/unit/test_archive_*.py and end to end with a signed repository in tests/integration/test_freshness.py;
here the rules on top of it are tested. pending_updates is the real one.
"""

from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract import sbom
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.pkgdb import Distro, Package, PackageDb
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source
from ansible_collections.hpc.stateless.plugins.module_utils._diff import diff
from ansible_collections.hpc.stateless.plugins.module_utils._verify import freshness

MAIN = Source("release", "http://deb.debian.org/debian", "bookworm", ("main",), None, "base")
UPDATES = Source("updates", "http://deb.debian.org/debian", "bookworm-updates", ("main",), None, "base")
SECURITY = Source("security", "http://deb.debian.org/debian-security", "bookworm-security", ("main",), None, "base")
SITE = Source("extra", "http://repo.example.org/site", "site", ("main",), "/etc/site.gpg", "compute")
STATES = [{"uri": s.uri, "suite": s.suite, "date": "Sat, 21 Nov 2026 09:00:00 UTC", "sha256": c * 64}
          for s, c in ((MAIN, "a"), (UPDATES, "b"), (SECURITY, "c"), (SITE, "d"))]


class View:
    """``{source: {package: [versions]}}`` with the view's questions answered from it."""

    def __init__(self, offers: dict[Source, dict[str, list[str]]]) -> None:
        self.offers = offers
        self.states = STATES

    def _all(self, name: str):
        return [(version, source) for source, packages in self.offers.items() for version in packages.get(name, ())]

    def candidate(self, name: str, security: bool = False):
        found = [(version, source) for version, source in self._all(name) if not security or source.kind == "security"]
        if not found:
            return None
        best = found[0]
        for version, source in found[1:]:
            if freshness_compare(version, best[0]) > 0:
                best = (version, source)
        return best

    def origin(self, name: str, version: str):
        return next((source for found, source in self._all(name) if found == version), None)


def freshness_compare(left: str, right: str) -> int:
    from ansible_collections.hpc.stateless.plugins.module_utils._archive.debversion import compare
    return compare(left, right)


INSTALLED = {"openssl": "3.0.20-1~deb12u1", "libssl3": "3.0.20-1~deb12u1", "tzdata": "2025a-0+deb12u1",
             "bash": "5.2.15-2+b7", "site-tool": "1.0", "local-only": "0.1"}
VIEW = View({
    MAIN: {"openssl": ["3.0.17-1~deb12u1"], "libssl3": ["3.0.17-1~deb12u1"], "bash": ["5.2.15-2+b7"],
           "tzdata": ["2025a-0+deb12u1"]},
    UPDATES: {"tzdata": ["2025b-0+deb12u1"]},
    SECURITY: {"openssl": ["3.0.20-1~deb12u1", "3.0.22-1~deb12u1"], "libssl3": ["3.0.22-1~deb12u1"]},
    SITE: {"site-tool": ["1.0", "1.1"]},
})


def test_check_names_the_pending_updates_the_origins_and_the_states():
    chain = [("compute", STATES[3:]), ("base", STATES[:3]), ("hsn", STATES[:1])]
    result = freshness.check(VIEW, INSTALLED, chain)
    # security updates first, then by name
    assert [str(u) for u in result.pending] == [
        "libssl3 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1", "openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1",
        "site-tool 1.0 -> 1.1", "tzdata 2025a-0+deb12u1 -> 2025b-0+deb12u1"]
    assert [u.package for u in result.security] == ["libssl3", "openssl"]
    # origin: the suite serving the installed version; one no source serves (libssl3's superseded version,
    # a local build) has none
    assert result.origins["openssl"] == {"suite": "bookworm-security", "uri": SECURITY.uri, "security": True}
    assert result.origins["bash"] == {"suite": "bookworm", "uri": MAIN.uri, "security": False}
    assert "libssl3" not in result.origins and "local-only" not in result.origins
    # the build-time states: one entry per state, naming the layers that saw it
    states = {(s["suite"], tuple(s["layers"])) for s in result.repositories}
    assert states == {("bookworm", ("base", "hsn")), ("bookworm-updates", ("base",)),
                      ("bookworm-security", ("base",)), ("site", ("compute",))}
    entry = result.manifest_entry()
    assert entry["pending_security_updates"] == 2
    assert entry["archive"] == STATES
    assert entry["pending_updates"][1] == {"package": "openssl", "installed": "3.0.20-1~deb12u1",
                                           "candidate": "3.0.22-1~deb12u1", "suite": "bookworm-security",
                                           "security": True}


def test_the_gate_refuses_pending_security_updates_naming_them_and_what_to_run():
    result = freshness.check(VIEW, INSTALLED)
    with pytest.raises(freshness.StaleImageError) as refused:
        freshness.gate(result, "refuse", "compute")
    message = str(refused.value)
    assert message.startswith("image compute: 2 security updates (libssl3 3.0.20-1~deb12u1 -> "
                              "3.0.22-1~deb12u1, openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1) pending")
    assert "run ansible-playbook site.yml to rebuild" in message
    assert "hpc_stateless_freshness_gate: warn" in message
    assert "tzdata" not in message  # not a security update
    warning = freshness.gate(result, "warn", "compute")
    assert warning and "2 security updates (" in warning and "packed anyway" in warning


def test_the_gate_passes_an_image_whose_only_updates_are_not_security_ones():
    installed = {**INSTALLED, "openssl": "3.0.22-1~deb12u1", "libssl3": "3.0.22-1~deb12u1"}
    result = freshness.check(VIEW, installed)
    assert [u.package for u in result.pending] == ["site-tool", "tzdata"]
    assert freshness.gate(result, "refuse", "compute") is None
    with pytest.raises(freshness.StaleImageError, match="hpc_stateless_freshness_gate: 'strict' is not one of"):
        freshness.gate(result, "strict", "compute")


def test_the_gate_names_five_and_counts_all():
    many = freshness.check(View({SECURITY: {f"p{i}": ["2"] for i in range(7)}}), {f"p{i}": "1" for i in range(7)})
    with pytest.raises(freshness.StaleImageError, match=r"7 security updates \(p0 1 -> 2, p1 1 -> 2, p2 1 -> 2, "
                       r"p3 1 -> 2, p4 1 -> 2, \.\.\.\) pending"):
        freshness.gate(many, "refuse", "compute")


def test_image_arch_is_the_commonest_but_all():
    assert freshness.image_arch(["all", "amd64", "amd64", "i386", "all", "all"]) == "amd64"
    assert freshness.image_arch(["all"]) == freshness.DEFAULT_ARCH


def test_manifest_and_sbom_carry_origins_states_and_pending_updates():
    result = freshness.check(VIEW, INSTALLED, [("base", STATES[:3])])
    entry = result.manifest_entry()
    packages = [{"name": n, "version": v, "architecture": "amd64"} for n, v in sorted(INSTALLED.items())]
    data = pm.build_manifest(image="compute", version="1", created=1_700_000_000, layer="slurm",
                             layer_keys={"slurm": "1" * 64}, kernel={"file": "vmlinuz"}, artifacts=[],
                             uncompressed_size=1, packages=packages, origins=result.origins, freshness=entry)
    by_name = {p["name"]: p for p in data["packages"]}
    assert by_name["openssl"]["origin"] == "bookworm-security" and by_name["openssl"]["security"] is True
    assert by_name["bash"]["origin"] == "bookworm" and by_name["bash"]["security"] is False
    assert "origin" not in by_name["local-only"]
    assert pm.parse_manifest(pm.manifest_bytes(data), "m")["freshness"]["pending_security_updates"] == 2
    with pytest.raises(ArtifactError, match="'freshness' must be an object"):
        pm.check_manifest({**data, "freshness": {"pending_updates": "none"}}, "m")

    db = PackageDb("dpkg", tuple(Package(n, v, "amd64") for n, v in sorted(INSTALLED.items())),
                   Distro("debian", "12", "bookworm"))
    bom = sbom.build_sbom(image="compute", version="1", created=1_700_000_000, layer="slurm",
                          layer_keys={"slurm": "1" * 64}, kernel={"file": "vmlinuz", "version": "6.1"}, db=db,
                          source={}, origins=result.origins, freshness=entry)
    text = sbom.sbom_bytes(bom)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text.decode("utf-8"))
    assert error is None, getattr(error, "data", error).message
    properties = [(p["name"], p["value"]) for p in json.loads(text)["metadata"]["component"]["properties"]]
    assert ("hpc.stateless:pending_update", "openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1 bookworm-security "
            "security") in properties
    assert ("hpc.stateless:pending_updates", "4") in properties
    assert ("hpc.stateless:repository", f"{SECURITY.uri} bookworm-security {STATES[2]['date']} "
            f"sha256:{'c' * 64}") in properties
    assert sum(1 for name, _value in properties if name == "hpc.stateless:archive") == 4
    openssl = next(c for c in bom["components"] if c["name"] == "openssl")
    assert {"name": "hpc.stateless:origin_suite", "value": "bookworm-security"} in openssl["properties"]
    assert {"name": "hpc.stateless:origin_security", "value": "true"} in openssl["properties"]
    # without a check nothing is added (and the bytes stay those of before)
    plain = sbom.build_sbom(image="compute", version="1", created=1_700_000_000, layer="slurm",
                            layer_keys={"slurm": "1" * 64}, kernel={"file": "vmlinuz", "version": "6.1"}, db=db,
                            source={})
    assert not any("pending" in p["name"] for p in plain["metadata"]["component"]["properties"])


def test_image_diff_lists_security_updates_as_their_own_section():
    old = [{"name": "openssl", "version": "3.0.20-1~deb12u1"}, {"name": "tzdata", "version": "2025a-0+deb12u1"},
           {"name": "bash", "version": "5.2.15-2+b7"}]
    new = [{"name": "openssl", "version": "3.0.22-1~deb12u1", "origin": "bookworm-security", "security": True},
           {"name": "tzdata", "version": "2025b-0+deb12u1", "origin": "bookworm-updates", "security": False},
           {"name": "bash", "version": "5.2.15-2+b7", "origin": "bookworm-security", "security": True},
           {"name": "curl", "version": "7.88.1-10+deb12u12", "origin": "bookworm-security", "security": True}]
    packages = diff.diff_packages(old, new)
    # unchanged bash and the added curl are no updates; tzdata's new version is not from a security suite
    assert packages["security_known"] is True
    assert packages["security"] == [{"name": "openssl", "old": "3.0.20-1~deb12u1", "new": "3.0.22-1~deb12u1",
                                     "origin": "bookworm-security"}]
    lines = list(diff._package_lines(packages, 50))  # pylint: disable=protected-access
    assert lines[-2:] == ["security updates: 1", "  ! openssl 3.0.20-1~deb12u1 -> 3.0.22-1~deb12u1 (bookworm-security)"]
    # a new side without origins (a layer image): not known, and said so
    unknown = diff.diff_packages(old, [{k: v for k, v in p.items() if k not in ("origin", "security")} for p in new])
    assert unknown["security_known"] is False and unknown["security"] == []
    assert list(diff._package_lines(unknown, 50))[-1].startswith(  # pylint: disable=protected-access
        "security updates: not known (the new side records no package origins")
