"""The CycloneDX SBOM: purls, components, reproducibility, and the schema (cyclonedx-python-lib's validator)."""

from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from ansible_collections.hpc.stateless.plugins.module_utils._contract import sbom
from ansible_collections.hpc.stateless.plugins.module_utils._contract.pkgdb import Distro, Package, PackageDb

BOOKWORM = Distro("debian", "12", "bookworm")
ROCKY = Distro("rocky", "9.3", "")
KERNEL = {"file": "vmlinuz", "version": "6.1.0-50-amd64", "origin": "/boot/vmlinuz-6.1.0-50-amd64",
          "sha256": "ab" * 32}
LAYER_KEYS = {"base": "1" * 64, "compute": "2" * 64}
SOURCE = {"image": "localhost/hpc-stateless/compute:" + "2" * 64, "image_id": "f" * 64}
DEB_PACKAGES = (
    Package("bash", "5.2.15-2+b2", "amd64", 7347200, "bash", "5.2.15-2", ("GPL-3+",)),
    Package("g++", "4:12.2.0-3", "amd64", 10240, "gcc-defaults", "1.203"),
    Package("libc6", "2.36-9+deb12u4", "amd64", 100, "glibc", "2.36-9+deb12u4", ("GPL-2+", "LGPL-2.1+")),
    Package("libc6", "2.36-9+deb12u4", "i386", 100, "glibc", "2.36-9+deb12u4"),
    Package("tilde", "1.0~rc1-1", "all", 0, "tilde", "1.0~rc1-1"),
)


def validate(data: bytes) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode("utf-8"))
    assert error is None, getattr(error, "data", error).message


def make(db: PackageDb, **changes) -> dict:
    params = {"image": "compute", "version": "1.0~rc1+site1", "created": 1_700_000_000, "layer": "compute",
              "layer_keys": LAYER_KEYS, "kernel": KERNEL, "db": db, "source": SOURCE, **changes}
    return sbom.build_sbom(**params)


@pytest.mark.parametrize("text, quoted", [
    ("5.2.15-2+b2", "5.2.15-2%2Bb2"),
    ("1:2.36-9+deb12u4", "1:2.36-9%2Bdeb12u4"),  # ':' stays (purl spec); '+' would read as a space
    ("1.0~rc1-1", "1.0~rc1-1"),  # '~' is unreserved
    ("g++", "g%2B%2B"),
    ("a b/c@d?e#f%", "a%20b%2Fc%40d%3Fe%23f%25"),
])
def test_purl_quote(text, quoted):
    assert sbom.purl_quote(text) == quoted


def test_deb_purls_round_trip_through_packageurl_python():
    by_name = {(p.name, p.architecture): sbom.package_purl("dpkg", p, BOOKWORM) for p in DEB_PACKAGES}
    assert by_name["bash", "amd64"] == "pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12"
    assert by_name["g++", "amd64"] == "pkg:deb/debian/g%2B%2B@4:12.2.0-3?arch=amd64&distro=debian-12"
    assert by_name["libc6", "i386"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=i386&distro=debian-12"
    for package in DEB_PACKAGES:
        text = by_name[package.name, package.architecture]
        parsed = PackageURL.from_string(text)
        assert (parsed.type, parsed.namespace, parsed.name, parsed.version) == (
            "deb", "debian", package.name, package.version)
        assert parsed.qualifiers == {"arch": package.architecture, "distro": "debian-12"}
        assert parsed.to_string() == text  # the reference implementation writes the same string


def test_rpm_purl_carries_the_epoch_as_a_qualifier_and_the_vendor_from_os_release():
    openssl = Package("openssl-libs", "1:3.0.7-27.el9", "x86_64", 1, "openssl", "3.0.7-27.el9", epoch="1")
    text = sbom.package_purl("rpm", openssl, ROCKY)
    assert text == "pkg:rpm/rocky/openssl-libs@3.0.7-27.el9?arch=x86_64&distro=rocky-9.3&epoch=1"
    parsed = PackageURL.from_string(text)
    assert (parsed.version, parsed.qualifiers["epoch"]) == ("3.0.7-27.el9", "1")
    leap = sbom.package_purl("rpm", Package("bash", "4.4-9.1", "x86_64"), Distro("opensuse-leap", "15.6"))
    assert leap == "pkg:rpm/opensuse/bash@4.4-9.1?arch=x86_64&distro=opensuse-leap-15.6"
    bare = sbom.package_purl("rpm", Package("bash", "4.4-9.1", "noarch"), Distro())
    assert bare == "pkg:rpm/bash@4.4-9.1?arch=noarch"
    assert PackageURL.from_string(bare).namespace is None


def test_deb_document_is_valid_and_lists_packages_kernel_and_layer_keys():
    data = sbom.sbom_bytes(make(PackageDb("dpkg", DEB_PACKAGES, BOOKWORM)))
    validate(data)
    doc = json.loads(data)
    assert (doc["bomFormat"], doc["specVersion"], doc["metadata"]["timestamp"]) == (
        "CycloneDX", "1.6", "2023-11-14T22:13:20Z")
    image = doc["metadata"]["component"]
    assert (image["name"], image["version"], image["type"]) == ("compute", "1.0~rc1+site1", "operating-system")
    props = {p["name"]: p["value"] for p in image["properties"]}
    assert props["hpc.stateless:layer_key:base"] == "1" * 64 and props["hpc.stateless:layer_key:compute"] == "2" * 64
    assert props["hpc.stateless:source_image_id"] == "f" * 64
    assert props["hpc.stateless:package_database"] == "dpkg"
    assert props["hpc.stateless:distro"] == "debian-12"
    components = {c["bom-ref"]: c for c in doc["components"]}
    bash = components["pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12"]
    assert bash["licenses"] == [{"license": {"name": "GPL-3+", "acknowledgement": "declared"}}]
    bash_props = {p["name"]: p["value"] for p in bash["properties"]}
    assert bash_props == {"hpc.stateless:architecture": "amd64", "hpc.stateless:source_package": "bash",
                          "hpc.stateless:source_version": "5.2.15-2", "hpc.stateless:installed_size": "7347200"}
    libc_i386 = components["pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=i386&distro=debian-12"]
    assert "licenses" not in libc_i386
    assert "hpc.stateless:source_version" not in {p["name"] for p in libc_i386["properties"]}  # same as the binary
    kernel = components["kernel"]
    assert (kernel["version"], kernel["hashes"]) == ("6.1.0-50-amd64", [{"alg": "SHA-256", "content": "ab" * 32}])
    assert len(doc["components"]) == len(DEB_PACKAGES) + 1
    assert doc["compositions"] == [{"aggregate": "incomplete", "assemblies": ["image"]}]


def test_rpm_document_is_valid():
    packages = (Package("bash", "5.1.8-9.el9", "x86_64", 1, "bash", "5.1.8-9.el9", ("GPL-3.0-or-later",)),
                Package("openssl-libs", "1:3.0.7-27.el9", "x86_64", 1, "openssl", "3.0.7-27.el9",
                        ("Apache-2.0 AND (MIT OR custom)",), epoch="1"))
    data = sbom.sbom_bytes(make(PackageDb("rpm", packages, ROCKY)))
    validate(data)
    purls = [c.get("purl") for c in json.loads(data)["components"]]
    assert purls == ["pkg:rpm/rocky/bash@5.1.8-9.el9?arch=x86_64&distro=rocky-9.3",
                     "pkg:rpm/rocky/openssl-libs@3.0.7-27.el9?arch=x86_64&distro=rocky-9.3&epoch=1", None]


def test_no_package_database_gives_the_kernel_only_and_states_why():
    reason = "no package database in the image (neither /var/lib/dpkg/status nor an rpm database)"
    data = sbom.sbom_bytes(make(PackageDb("none", (), Distro(), reason=reason), source={"path": "/srv/tree"}))
    validate(data)
    doc = json.loads(data)
    assert [c["bom-ref"] for c in doc["components"]] == ["kernel"]
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["hpc.stateless:package_database"] == "none"
    assert props["hpc.stateless:package_database_reason"] == reason
    assert props["hpc.stateless:source_path"] == "/srv/tree"
    assert doc["compositions"] == [{"aggregate": "unknown", "assemblies": ["image"]}]


def test_same_input_same_bytes_in_any_order_and_serial_follows_content():
    db = PackageDb("dpkg", DEB_PACKAGES, BOOKWORM)
    first = sbom.sbom_bytes(make(db))
    shuffled = PackageDb("dpkg", tuple(reversed(DEB_PACKAGES)), BOOKWORM)
    assert sbom.sbom_bytes(make(shuffled, layer_keys=dict(reversed(list(LAYER_KEYS.items()))))) == first
    assert first.endswith(b"}\n") and b"\n  " in first
    serial = json.loads(first)["serialNumber"]
    assert serial.startswith("urn:uuid:") and serial[9:][14] == "5"  # a UUID version 5
    later = json.loads(sbom.sbom_bytes(make(db, created=1_700_000_001)))
    assert later["serialNumber"] != serial and later["metadata"]["timestamp"] == "2023-11-14T22:13:21Z"
    other = json.loads(sbom.sbom_bytes(make(db, version="1.0~rc2")))
    assert other["serialNumber"] != serial


def test_validator_rejects_what_the_schema_forbids():
    """The check above can fail: a document with a bad serial number is refused by the same validator."""
    doc = make(PackageDb("dpkg", DEB_PACKAGES[:1], BOOKWORM))
    doc["serialNumber"] = "not-a-uuid"
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc))
    assert error is not None and list(error.data.absolute_path) == ["serialNumber"]


def test_an_arm64_image_names_its_architecture_and_its_packages_purls_carry_dpkgs():
    """An arm64 image: each purl's arch is its package's (arm64, or all), the image's own is a property."""
    packages = (Package("bash", "5.2.15-2+b2", "arm64", 1, "bash", "5.2.15-2"),
                Package("tzdata", "2024a-0+deb12u1", "all", 1, "tzdata", "2024a-0+deb12u1"))
    data = sbom.sbom_bytes(make(PackageDb("dpkg", packages, BOOKWORM), arch="arm64"))
    validate(data)
    bom = json.loads(data)
    purls = sorted(c["purl"] for c in bom["components"] if "purl" in c)
    assert purls == ["pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=arm64&distro=debian-12",
                     "pkg:deb/debian/tzdata@2024a-0%2Bdeb12u1?arch=all&distro=debian-12"]
    properties = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    assert properties["hpc.stateless:arch"] == "arm64"
    unnamed = json.loads(sbom.sbom_bytes(make(PackageDb("dpkg", packages, BOOKWORM))))
    assert "hpc.stateless:arch" not in {p["name"] for p in unnamed["metadata"]["component"]["properties"]}
