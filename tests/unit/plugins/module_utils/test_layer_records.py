"""What a layer image records at commit (issue 27): its packages and the repository states apt saw.

The tree is a real directory laid out as an image (dpkg status, apt sources and lists); apt's own naming of
list files is checked against the build host's apt, which named the files of /var/lib/apt/lists itself.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import records
from ansible_collections.hpc.stateless.plugins.module_utils._contract import labels

STATUS = """Package: openssl
Status: install ok installed
Architecture: amd64
Version: 3.0.20-1~deb12u1

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u13
"""

IN_RELEASE = b"""-----BEGIN PGP SIGNED MESSAGE-----
Hash: SHA256

Origin: Debian
Suite: oldstable-security
Codename: bookworm-security
Date: Tue, 24 Nov 2026 10:00:00 UTC
"""


def _write(root, rel: str, data: str | bytes) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


def test_apt_names_its_list_files_as_this_host_shows():
    """The judge: the host's apt wrote /var/lib/apt/lists after its own sources; each of its release files
    maps back to a configured source with its scheme."""
    host_lists = [n for n in os.listdir("/var/lib/apt/lists") if n.endswith("_InRelease")]
    assert host_lists, "this Debian build host has run apt-get update: it has release files"
    sources = records.parse_sources_list(open("/etc/apt/sources.list", encoding="utf-8").read()) \
        if os.path.exists("/etc/apt/sources.list") else []
    for name in os.listdir("/etc/apt/sources.list.d"):
        text = open(os.path.join("/etc/apt/sources.list.d", name), encoding="utf-8").read()
        sources += records.parse_sources_list(text) if name.endswith(".list") else \
            records.parse_deb822_sources(text) if name.endswith(".sources") else []
    states = records.repository_states({n: b"Date: x\n" for n in host_lists}, sources)
    assert len(states) == len(host_lists)
    assert all("://" in state["uri"] for state in states), states


def test_list_names_quote_what_apt_quotes():
    assert records.apt_list_name("http://deb.debian.org/debian/", "dists/bookworm-security/InRelease") == \
        "deb.debian.org_debian_dists_bookworm-security_InRelease"
    assert records.apt_list_name("https://user:pw@repo.example:8443/my_repo", "dists/x/Release") == \
        "repo.example:8443_my%5frepo_dists_x_Release"
    assert records.apt_list_name("file:///srv/repo", "./InRelease") == "_srv_repo_._InRelease"


def test_sources_of_both_formats():
    assert records.parse_sources_list(
        "deb [signed-by=/etc/apt/keyrings/site.gpg arch=amd64] http://repo.example/debian bookworm main\n"
        "# deb http://off.example/ x main\ndeb-src http://src.example/ bookworm main\n"
        "deb http://deb.debian.org/debian bookworm-updates main # comment\n") == [
        ("http://repo.example/debian", "bookworm"), ("http://deb.debian.org/debian", "bookworm-updates")]
    assert records.parse_deb822_sources(
        "Types: deb deb-src\nURIs: http://a.example/debian\nSuites: bookworm bookworm-updates\n\n"
        "Types: deb\nURIs: http://b.example/\nSuites: x\nEnabled: no\n") == [
        ("http://a.example/debian", "bookworm"), ("http://a.example/debian", "bookworm-updates")]


def test_a_tree_records_its_installed_packages_and_repository_states(tmp_path):
    root = str(tmp_path)
    _write(root, "var/lib/dpkg/status", STATUS)
    _write(root, "etc/apt/sources.list", "deb http://deb.debian.org/debian bookworm main\n")
    _write(root, "etc/apt/sources.list.d/security.sources",
           "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n")
    _write(root, "var/lib/apt/lists/deb.debian.org_debian-security_dists_bookworm-security_InRelease", IN_RELEASE)
    _write(root, "var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_Release", b"Date: Sat, 11 Jul 2026\n")
    _write(root, "var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages", b"x")
    found = records.read_records(root)
    assert labels.packages_of(found) == {"libc6": "2.36-9+deb12u13", "openssl": "3.0.20-1~deb12u1"}
    assert labels.repositories_of(found) == [
        {"uri": "http://deb.debian.org/debian", "suite": "bookworm", "date": "Sat, 11 Jul 2026",
         "sha256": hashlib.sha256(b"Date: Sat, 11 Jul 2026\n").hexdigest()},
        {"uri": "http://deb.debian.org/debian-security", "suite": "bookworm-security",
         "date": "Tue, 24 Nov 2026 10:00:00 UTC", "sha256": hashlib.sha256(IN_RELEASE).hexdigest()}]


def test_a_link_in_the_tree_never_reads_the_hosts_file(tmp_path):
    """The image's status file is a link to an absolute path: it is resolved inside the tree, not on the host."""
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "var/lib/dpkg"))
    os.symlink("/var/lib/dpkg/status.real", os.path.join(root, "var/lib/dpkg/status"))
    _write(root, "var/lib/dpkg/status.real", STATUS.split("\n\n", 1)[0] + "\n")
    assert labels.packages_of(records.read_records(root)) == {"openssl": "3.0.20-1~deb12u1"}
    os.symlink("/var/lib/apt/lists/" + os.listdir("/var/lib/apt/lists")[0],
               os.path.join(root, "x_dists_y_InRelease"))
    os.makedirs(os.path.join(root, "var/lib/apt/lists"))
    os.symlink("/x_dists_y_InRelease", os.path.join(root, "var/lib/apt/lists/x_dists_y_InRelease"))
    assert labels.repositories_of(records.read_records(root)) == []  # a link is no state apt wrote


def test_an_empty_tree_records_nothing(tmp_path):
    found = records.read_records(str(tmp_path))
    assert labels.has_package_record(found)
    assert labels.packages_of(found) == {} and labels.repositories_of(found) == []


def test_labels_without_a_record_and_malformed_ones():
    assert not labels.has_package_record({labels.KEY_LABEL: "k"})
    assert labels.packages_of({}) == {} and labels.repositories_of({}) == []
    assert labels.inputs_key_of({labels.KEY_LABEL: "k"}) == "k"
    assert labels.inputs_key_of({labels.KEY_LABEL: "k", labels.INPUTS_KEY_LABEL: "k0"}) == "k0"
    with pytest.raises(ValueError, match="hpc.stateless.packages is not a readable record.*run site.yml"):
        labels.packages_of({labels.PACKAGES_LABEL: "{openssl"})
    with pytest.raises(ValueError, match="hpc.stateless.packages must map"):
        labels.packages_of({labels.PACKAGES_LABEL: json.dumps({"openssl": 3})})
    with pytest.raises(ValueError, match="hpc.stateless.repositories holds a JSON dict"):
        labels.repositories_of({labels.REPOSITORIES_LABEL: "{}"})


def test_what_a_layer_installed_is_what_its_parent_lacks_or_has_at_another_version():
    assert labels.installed_by_layer({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "1"}) == {"b": "2", "c": "3"}


def test_a_large_record_is_packed_under_the_argument_limit_and_read_back():
    """Thousands of packages: the label reaches buildah as one argument (at most 128 KiB on Linux)."""
    packages = {f"lib{i:05d}-very-long-package-name-of-a-vendor-stack": f"{i}.0.{i % 7}-1+deb12u{i % 3}" for i in range(6000)}
    record = labels.record_labels(packages, [])
    assert len(record[labels.PACKAGES_LABEL]) < 128 * 1024 < len(json.dumps(packages))
    assert record[labels.PACKAGES_LABEL].startswith(labels.PACKED_PREFIX)
    assert labels.packages_of(record) == packages
    small = labels.record_labels({"openssl": "3.0.20-1"}, [])
    assert json.loads(small[labels.PACKAGES_LABEL]) == {"openssl": "3.0.20-1"}  # readable as it is
    with pytest.raises(ValueError, match="hpc.stateless.packages is not a readable record"):
        labels.packages_of({labels.PACKAGES_LABEL: labels.PACKED_PREFIX + "bm90IHpsaWI="})
