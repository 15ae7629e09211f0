"""The package database reader: dpkg status, Debian copyright, rpm query output, os-release, trees."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract import pkgdb

DPKG_STATUS = """Package: bash
Status: install ok installed
Priority: required
Installed-Size: 7175
Architecture: amd64
Source: bash (5.2.15-2)
Version: 5.2.15-2+b2
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 .
 Installed-Size: 1 (a continuation line that must not count)
 Package: nor-this

Package: removed-thing
Status: deinstall ok config-files
Installed-Size: 10
Version: 1.0

Package: half
Status: install reinstreq half-installed
Architecture: amd64
Version: 2.0

Package: unpacked-only
Status: install ok unpacked
Architecture: amd64
Version: 3.0

Package: libc6
Status: install ok installed
Installed-Size: 12988
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u4
Conffiles:
 /etc/ld.so.conf.d/x86_64-linux-gnu.conf abc

Package: libc6
Status: hold ok installed
Installed-Size: 12000
Architecture: i386
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u4

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib
Version: 1:1.2.13.dfsg-1
"""

COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: bash
License: GPL-3+

Files: *
Copyright: 1987-2022 Free Software Foundation, Inc.
License: GPL-3+

Files: lib/sh/*
Copyright: someone
License: GPL-2+ or Artistic
 License: Not-a-field (indented text of the license)

License: GPL-2+
 The full text.

License: Artistic
 The full text.
"""


def test_dpkg_status_keeps_installed_packages_per_architecture():
    packages = pkgdb.parse_dpkg_status(DPKG_STATUS)
    assert [(p.name, p.architecture, p.version, p.size) for p in packages] == [
        ("bash", "amd64", "5.2.15-2+b2", 7175 * 1024),
        ("libc6", "amd64", "2.36-9+deb12u4", 12988 * 1024),
        ("libc6", "i386", "2.36-9+deb12u4", 12000 * 1024),
        ("zlib1g", "amd64", "1:1.2.13.dfsg-1", 0),
    ]


def test_dpkg_status_source_name_and_version():
    by_name = {(p.name, p.architecture): p for p in pkgdb.parse_dpkg_status(DPKG_STATUS)}
    # "Source: bash (5.2.15-2)": a binNMU whose source version differs from the binary's
    assert (by_name["bash", "amd64"].source, by_name["bash", "amd64"].source_version) == ("bash", "5.2.15-2")
    # "Source: glibc": the source version is the binary version
    assert (by_name["libc6", "i386"].source, by_name["libc6", "i386"].source_version) == ("glibc", "2.36-9+deb12u4")
    assert by_name["zlib1g", "amd64"].source_version == "1:1.2.13.dfsg-1"


def test_dpkg_status_without_source_field_names_the_package_itself():
    text = "Package: tiny\nStatus: install ok installed\nVersion: 1\nArchitecture: all\n"
    (package,) = pkgdb.parse_dpkg_status(text)
    assert (package.source, package.source_version, package.epoch) == ("tiny", "1", "")


def test_machine_readable_copyright_names_the_licenses_of_header_and_files_paragraphs():
    assert pkgdb.parse_copyright(COPYRIGHT) == ("GPL-2+ or Artistic", "GPL-3+")


def test_free_form_copyright_gives_no_license():
    assert pkgdb.parse_copyright("This package was debianized by someone.\nLicense: GPL\n") == ()
    assert pkgdb.parse_copyright("") == ()


RPM_OUTPUT = "\t".join(["bash", "(none)", "5.1.8", "9.el9", "x86_64", "7738634", "bash-5.1.8-9.el9.src.rpm",
                        "GPL-3.0-or-later"]) + "\n" + \
    "\t".join(["openssl-libs", "1", "3.0.7", "27.el9", "x86_64", "1923", "openssl-3.0.7-27.el9.src.rpm",
               "Apache-2.0"]) + "\n" + \
    "\t".join(["gpg-pubkey", "(none)", "350d275d", "6279464b", "(none)", "0", "(none)", "pubkey"]) + "\n" + \
    "\t".join(["kernel-core", "(none)", "5.14.0", "362.el9", "x86_64", "(none)", "kernel-5.14.0-362.el9.src.rpm",
               "(none)"]) + "\n" + \
    "noise without tabs\n"


def test_rpm_query_epochs_none_and_sources():
    packages = pkgdb.parse_rpm_query(RPM_OUTPUT)
    assert [(p.name, p.version, p.epoch, p.architecture, p.size) for p in packages] == [
        ("bash", "5.1.8-9.el9", "", "x86_64", 7738634),
        ("kernel-core", "5.14.0-362.el9", "", "x86_64", 0),
        ("openssl-libs", "1:3.0.7-27.el9", "1", "x86_64", 1923),
    ]
    by_name = {p.name: p for p in packages}
    assert (by_name["kernel-core"].source, by_name["kernel-core"].source_version) == ("kernel", "5.14.0-362.el9")
    assert (by_name["openssl-libs"].source, by_name["openssl-libs"].source_version) == ("openssl", "3.0.7-27.el9")
    assert by_name["bash"].licenses == ("GPL-3.0-or-later",)
    assert by_name["kernel-core"].licenses == ()  # (none): no License tag


def test_the_query_format_asks_for_every_parsed_field():
    assert pkgdb.RPM_QUERY_FORMAT.count("\t") == 7 and pkgdb.RPM_QUERY_FORMAT.endswith(r"\n")


def test_os_release():
    text = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n' \
           "VERSION_CODENAME=bookworm\nID=debian\n# comment\n"
    assert pkgdb.parse_os_release(text) == pkgdb.Distro("debian", "12", "bookworm")


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_read_debian_tree_with_licenses_and_an_absolute_os_release_link(tmp_path):
    root = tmp_path / "root"
    _write(root, "var/lib/dpkg/status", DPKG_STATUS)
    _write(root, "usr/share/doc/bash/copyright", COPYRIGHT)
    _write(root, "usr/lib/os-release", 'ID=debian\nVERSION_ID="12"\n')
    (root / "etc").mkdir()
    os.symlink("/usr/lib/os-release", root / "etc" / "os-release")  # absolute: the image's own file, not the host's
    # libc6 shares the doc directory of another package through a relative link (Debian allows it)
    (root / "usr/share/doc/libc6").symlink_to("bash")
    db = pkgdb.read_package_db(str(root))
    assert (db.kind, db.reason, db.failed) == ("dpkg", "", False)
    assert db.distro == pkgdb.Distro("debian", "12", "")
    licenses = {(p.name, p.architecture): p.licenses for p in db.packages}
    assert licenses == {("bash", "amd64"): ("GPL-2+ or Artistic", "GPL-3+"),
                        ("libc6", "amd64"): ("GPL-2+ or Artistic", "GPL-3+"),
                        ("libc6", "i386"): ("GPL-2+ or Artistic", "GPL-3+"),
                        ("zlib1g", "amd64"): ()}
    assert db.packages[0].summary() == {"name": "bash", "version": "5.2.15-2+b2", "architecture": "amd64",
                                        "size": 7175 * 1024}


def test_package_without_doc_directory_takes_the_licenses_of_its_source_sibling(tmp_path):
    stanza = "Package: {}\nStatus: install ok installed\nArchitecture: amd64\nSource: kmod\nVersion: {}\n\n"
    versions = (("kmod", "30-1"), ("libkmod2", "30-1"), ("old-kmod-tool", "29-1"))
    status = "".join(stanza.format(name, version) for name, version in versions)
    _write(tmp_path, "var/lib/dpkg/status", status)
    _write(tmp_path, "usr/share/doc/libkmod2/copyright", COPYRIGHT)
    licenses = {p.name: p.licenses for p in pkgdb.read_package_db(str(tmp_path)).packages}
    # kmod's link to libkmod2 was dropped; a package of another source version gets nothing
    assert licenses == {"kmod": ("GPL-2+ or Artistic", "GPL-3+"), "libkmod2": ("GPL-2+ or Artistic", "GPL-3+"),
                        "old-kmod-tool": ()}


def test_absolute_link_out_of_the_tree_is_read_inside_it(tmp_path):
    root = tmp_path / "root"
    (root / "var/lib/dpkg").mkdir(parents=True)
    os.symlink("/etc/hostname", root / "var/lib/dpkg/status")  # the host's /etc/hostname must never be read
    db = pkgdb.read_package_db(str(root))
    assert db.kind == "none" and "no package database" in db.reason


def test_tree_without_package_database_says_why(tmp_path):
    (tmp_path / "etc").mkdir()
    db = pkgdb.read_package_db(str(tmp_path))
    assert (db.kind, db.packages, db.failed) == ("none", (), False)
    assert db.reason.startswith("no package database in the image (neither /var/lib/dpkg/status nor an rpm database")


@pytest.mark.skipif(not shutil.which("rpm"), reason="needs the build host's rpm (Debian package rpm, scripts/setup.sh)")
def test_unreadable_rpm_database_is_a_stated_failure(tmp_path):
    _write(tmp_path, "usr/lib/sysimage/rpm/rpmdb.sqlite", "not a database")
    assert pkgdb.rpm_db_dir(str(tmp_path)) == "/usr/lib/sysimage/rpm"
    db = pkgdb.read_package_db(str(tmp_path))
    assert (db.kind, db.packages, db.failed) == ("none", (), True)
    assert f"--root {tmp_path} --dbpath /usr/lib/sysimage/rpm -qa failed (rc=" in db.reason
    assert "sqlite" in db.reason  # rpm's own message


def test_without_rpm_on_the_host_the_images_own_rpm_is_never_run(tmp_path, monkeypatch):
    """An image's rpm run under chroot on the host would be the image's code outside any container: a host
    without rpm gets a stated failure instead, and the image's "rpm" (here one that would leave a mark) never runs."""
    _write(tmp_path, "usr/lib/sysimage/rpm/rpmdb.sqlite", "database")
    mark = tmp_path.parent / "image-rpm-ran"
    _write(tmp_path, "usr/bin/rpm", f"#!/bin/sh\ntouch {mark}\n")
    os.chmod(tmp_path / "usr/bin/rpm", 0o755)
    real_which = pkgdb._process.which

    def which(name, *args, **kwargs):
        if name == "rpm":
            raise pkgdb._process.ToolMissing("rpm", "apt-get install rpm")
        return real_which(name, *args, **kwargs)

    monkeypatch.setattr(pkgdb._process, "which", which)
    assert pkgdb.rpm_query_argv(str(tmp_path), "/usr/lib/sysimage/rpm") is None
    db = pkgdb.read_package_db(str(tmp_path))
    assert (db.kind, db.failed) == ("none", True)
    assert "the build host has no rpm" in db.reason and "apt-get install rpm" in db.reason
    assert not mark.exists()
