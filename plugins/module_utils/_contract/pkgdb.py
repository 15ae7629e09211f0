# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one reader of an image tree's package database: what the manifest and the SBOM list.

* Debian family: ``/var/lib/dpkg/status`` (only packages dpkg calls ``installed``), licenses from
  the machine-readable ``/usr/share/doc/<package>/copyright`` files that are present (or, when a
  package's doc directory is gone, that of a package of the same source and version);
* EL and SUSE: the rpm database (``/usr/lib/sysimage/rpm`` or ``/var/lib/rpm``), queried with the
  build host's ``rpm --root <tree> --dbpath <db>`` (never the tree's own rpm: an image's programs are
  not run on the host); ``gpg-pubkey`` entries are imported signing keys, not software, and are left out;
* no database: no packages and a :attr:`PackageDb.reason` that says why.

The distribution (``/etc/os-release``) is read too: it names the purl namespace and ``distro``.
Parsing is pure (``parse_*``); only :func:`read_package_db` touches the tree or runs a tool.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath, _process

DPKG = "dpkg"
RPM = "rpm"
NONE = "none"

DPKG_STATUS = "var/lib/dpkg/status"
RPM_DB_DIRS = ("usr/lib/sysimage/rpm", "var/lib/rpm")  # newest layout first (EL 9.x, SUSE)
RPM_DB_FILES = ("rpmdb.sqlite", "Packages", "Packages.db")  # sqlite, bdb, ndb backends
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
COPYRIGHT_FORMAT = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
RPM_PSEUDO_PACKAGES = frozenset({"gpg-pubkey"})
_FIELD_SEP = "\t"
# One line per package; the fields never hold a tab (rpm's own tags) and (none) marks an unset tag.
RPM_QUERY_FORMAT = _FIELD_SEP.join(("%{NAME}", "%{EPOCH}", "%{VERSION}", "%{RELEASE}", "%{ARCH}", "%{SIZE}",
                                    "%{SOURCERPM}", "%{LICENSE}")) + r"\n"
_RPM_UNSET = "(none)"


@dataclass(frozen=True)
class Package:
    """One installed package. ``version`` is what the package manager prints: Debian's full version
    (``[epoch:]upstream[-revision]``), rpm's ``[epoch:]version-release``; ``epoch`` is set for rpm only
    (purl carries it as a qualifier there, inside the version for deb)."""

    name: str
    version: str
    architecture: str
    size: int = 0  # installed bytes
    source: str = ""
    source_version: str = ""
    licenses: tuple[str, ...] = ()
    epoch: str = ""

    def summary(self) -> dict[str, object]:
        """What the manifest and the size report take."""
        return {"name": self.name, "version": self.version, "architecture": self.architecture, "size": self.size}


@dataclass(frozen=True)
class Distro:
    """``ID``, ``VERSION_ID`` and ``VERSION_CODENAME`` of os-release; empty when unknown."""

    id: str = ""
    version_id: str = ""
    codename: str = ""


@dataclass(frozen=True)
class PackageDb:
    kind: str  # DPKG, RPM or NONE
    packages: tuple[Package, ...] = ()
    distro: Distro = field(default_factory=Distro)
    reason: str = ""  # why there are no packages (kind NONE)
    failed: bool = False  # a database is there but could not be read: worth a warning


# -- pure parsers --------------------------------------------------------------------------------
def stanzas(text: str) -> list[dict[str, str]]:
    """RFC 822 style paragraphs (dpkg status, debian/copyright) as ``{field: first line}``.

    Continuation lines (descriptions, conffiles, license texts) are dropped: no field read here
    needs them, and a continuation line that looks like ``Field: value`` must not count.
    """
    stanzas = []
    for block in re.split(r"\n[ \t]*\n", text.replace("\r\n", "\n")):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line or line[0] in " \t#":
                continue
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        if fields:
            stanzas.append(fields)
    return stanzas


def _sort_key(package: Package) -> tuple[str, str, str]:
    return package.name, package.architecture, package.version


def parse_dpkg_status(text: str) -> list[Package]:
    """Installed packages of ``/var/lib/dpkg/status``, sorted; licenses are read separately.

    A package counts when its status is ``installed`` (``half-installed``, ``unpacked``,
    ``config-files``, ``triggers-pending`` ... are skipped). ``Source: name (version)`` gives a
    source version that differs from the binary's (binNMUs, ``+b1``); without it the source
    version is the binary version, without ``Source:`` the source name is the package name.
    """
    packages = []
    for fields in stanzas(text):
        name = fields.get("package", "")
        if not name or fields.get("status", "").split()[-1:] != ["installed"]:
            continue
        version = fields.get("version", "")
        source, _sep, rest = fields.get("source", "").partition(" ")
        match = re.fullmatch(r"\((.+)\)", rest.strip())
        size_kib = fields.get("installed-size", "0")
        packages.append(Package(
            name=name, version=version, architecture=fields.get("architecture", ""),
            size=int(size_kib) * 1024 if size_kib.isdigit() else 0,
            source=source or name, source_version=match.group(1).strip() if match else version))
    return sorted(packages, key=_sort_key)


def parse_copyright(text: str) -> tuple[str, ...]:
    """License names of a machine-readable debian/copyright (``Format:`` copyright-format 1.0), sorted.

    Only the header and ``Files:`` paragraphs count: their ``License:`` first line names the
    licenses that apply (``GPL-2+``, ``GPL-2+ or Artistic``); stand-alone ``License:`` paragraphs
    only carry texts. Free-form copyright files (no ``Format:``) give nothing: guessing from prose
    would invent facts.
    """
    paragraphs = stanzas(text)
    if not paragraphs or "format" not in paragraphs[0]:
        return ()
    names = {fields["license"] for index, fields in enumerate(paragraphs)
             if fields.get("license") and (index == 0 or "files" in fields)}
    return tuple(sorted(names))


def parse_rpm_query(text: str) -> list[Package]:
    """Packages of ``rpm -qa --qf RPM_QUERY_FORMAT`` output, sorted; ``(none)`` means unset.

    The version is ``epoch:version-release`` with an epoch, ``version-release`` without; the
    source package and its version come from the source rpm's file name
    (``bash-5.1.8-9.el9.src.rpm``). Lines that do not have every field, and ``gpg-pubkey``
    entries, are skipped.
    """
    packages = []
    for line in text.splitlines():
        parts = [None if value == _RPM_UNSET else value for value in line.split(_FIELD_SEP)]
        if len(parts) != 8 or not parts[0] or parts[0] in RPM_PSEUDO_PACKAGES:
            continue
        name, epoch, version, release, arch, size, source_rpm, license_tag = (value or "" for value in parts)
        evr = f"{version}-{release}" if release else version
        source, source_version = _source_rpm(source_rpm)
        packages.append(Package(
            name=name, version=f"{epoch}:{evr}" if epoch else evr, architecture=arch,
            size=int(size) if size.isdigit() else 0, source=source or name, source_version=source_version or evr,
            licenses=(license_tag,) if license_tag else (), epoch=epoch))
    return sorted(packages, key=_sort_key)


def _source_rpm(file_name: str) -> tuple[str, str]:
    """``(name, version-release)`` of a source rpm file name; empty strings when it is not one."""
    match = re.fullmatch(r"(.+)-([^-]+)-([^-]+)\.(?:no)?src\.rpm", file_name)
    return (match.group(1), f"{match.group(2)}-{match.group(3)}") if match else ("", "")


def parse_os_release(text: str) -> Distro:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and re.fullmatch(r"[A-Z_]+", key):
            values[key] = value.strip().strip("\"'")
    return Distro(values.get("ID", "").lower(), values.get("VERSION_ID", ""), values.get("VERSION_CODENAME", ""))


# -- reading a tree ------------------------------------------------------------------------------
def _read_text(root: str, rel: str) -> str | None:
    """The text of the image's regular file ``rel``, resolved inside ``root``; None when there is none."""
    try:
        data = _imagepath.read_file(root, rel)
    except OSError:  # a directory, FIFO or device where a file was expected, or unreadable
        return None
    return None if data is None else data.decode("utf-8", "replace")


def read_distro(root: str) -> Distro:
    for rel in OS_RELEASE:
        text = _read_text(root, rel)
        if text is not None:
            return parse_os_release(text)
    return Distro()


def _with_licenses(root: str, packages: list[Package]) -> tuple[Package, ...]:
    """``packages`` with the licenses of their copyright files. A package whose doc directory is gone
    (Debian links ``/usr/share/doc/<package>`` to a sibling's of the same source, and a
    ``path-exclude=/usr/share/doc/*`` drops such links) gets the licenses of the copyright file of
    a package built from the same source and version."""
    found: dict[str, tuple[str, ...]] = {}
    by_source: dict[tuple[str, str], tuple[str, ...]] = {}
    for package in packages:
        text = _read_text(root, f"usr/share/doc/{package.name}/copyright")
        if text is not None:
            found[package.name] = parse_copyright(text)
            if found[package.name]:
                by_source.setdefault((package.source, package.source_version), found[package.name])
    result = []
    for package in packages:
        licenses = found[package.name] if package.name in found else \
            by_source.get((package.source, package.source_version), ())
        result.append(Package(**{**package.__dict__, "licenses": licenses}) if licenses else package)
    return tuple(result)


def rpm_db_dir(root: str) -> str | None:
    """The rpm database directory of the tree, as a path inside it (``/usr/lib/sysimage/rpm``), or None."""
    for rel in RPM_DB_DIRS:
        resolved = _imagepath.resolve_rel(root, rel)
        if resolved is not None and any(_imagepath.is_file(root, f"{resolved}/{name}") for name in RPM_DB_FILES):
            return "/" + resolved
    return None


def rpm_query_argv(root: str, db_dir: str) -> list[str] | None:
    """The build host's rpm reading the tree's database; None when the host has no rpm.

    Never the tree's own rpm through ``chroot``: that would run the image's code as the build user on the
    host, outside any container.
    """
    try:
        return [_process.which("rpm"), "--root", root, "--dbpath", db_dir, "-qa", "--qf", RPM_QUERY_FORMAT]
    except _process.ToolMissing:
        return None


def read_package_db(root: str) -> PackageDb:
    """The packages installed in the tree at ``root``, from its own database (see the module doc)."""
    distro = read_distro(root)
    status = _read_text(root, DPKG_STATUS)
    if status is not None:
        return PackageDb(DPKG, _with_licenses(root, parse_dpkg_status(status)), distro)
    db_dir = rpm_db_dir(root)
    if db_dir is None:
        return PackageDb(NONE, (), distro, reason=f"no package database in the image (neither /{DPKG_STATUS} nor "
                                                  f"an rpm database in /{' or /'.join(RPM_DB_DIRS)})")
    argv = rpm_query_argv(root, db_dir)
    if argv is None:
        return PackageDb(NONE, (), distro, failed=True,
                         reason=f"the image has an rpm database ({db_dir}) but the build host has no rpm to read it "
                                "(Debian: apt-get install rpm; scripts/setup.sh installs it)")
    # HOME: no ~/.rpmmacros of the build host's user may move the database or change the output
    query = _process.run(argv, check=False, env={"HOME": os.devnull}, text=False, timeout=300)
    stderr = query.stderr.decode("utf-8", "replace").strip()
    if not query.ok:
        return PackageDb(NONE, (), distro, failed=True,
                         reason=f"{' '.join(argv[:5])} -qa failed (rc={query.rc}): {stderr[-300:] or 'no message'}")
    return PackageDb(RPM, tuple(parse_rpm_query(query.stdout.decode("utf-8", "replace"))), distro)
