# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a layer image records at commit: its packages and the repository states apt saw.

Read from the mounted tree of the working container, through module_utils/_imagepath.py (an image's
links never lead to the host's files):

* packages: the image's package database (_contract/pkgdb.py: dpkg status "install ok installed", the rpm
  database on EL/SUSE) as ``{name: version}``;
* repositories: each ``InRelease`` (or ``Release``) file in ``/var/lib/apt/lists`` - the state of one suite
  of one repository as apt fetched it - as ``{uri, suite, date, sha256}``. apt names those files after the
  URI without its scheme (``deb.debian.org_debian_dists_bookworm_InRelease``), so the URI and suite come from
  the image's own apt sources (``/etc/apt/sources.list``, ``sources.list.d/*.list`` and ``*.sources``) whose
  file name matches; a file no source names (sources edited after the last ``apt-get update``) keeps the
  scheme-less location its name gives.

Parsing is pure (``parse_*``, :func:`apt_list_name`); only :func:`read_records` touches the tree.
"""

from __future__ import annotations

import hashlib
import re
from typing import Mapping
from urllib.parse import unquote

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._contract import pkgdb
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import record_labels

APT_LISTS = "var/lib/apt/lists"
APT_SOURCES_LIST = "etc/apt/sources.list"
APT_SOURCES_DIR = "etc/apt/sources.list.d"
#: The release files of a suite, the signed one first.
RELEASE_FILES = ("InRelease", "Release")
# Characters apt quotes (as %XX) in a list file's name before '/' becomes '_' (apt-pkg's URItoFileName).
_APT_QUOTED = set('\\|{}[]<>"^~_=!@#$%^&*')


class RecordError(Exception):
    """The image's records cannot be read; the message names the file and what to do."""


def apt_list_name(uri: str, path: str) -> str:
    """The name apt gives the list file of ``path`` (``dists/bookworm/InRelease``) below repository ``uri``."""
    full = uri.rstrip("/") + "/" + path.lstrip("/")
    rest = full.split("://", 1)[1] if "://" in full else full
    # user:password@ is never part of the name
    host, sep, tail = rest.partition("/")
    host = host.rsplit("@", 1)[-1]
    rest = host + sep + tail
    quoted = "".join(f"%{ord(c):02x}" if c in _APT_QUOTED or ord(c) <= 0x20 or ord(c) >= 0x7f else c for c in rest)
    return quoted.replace("/", "_")


def _release_path(suite: str) -> str:
    """Where a suite's release files lie below its repository (a flat repository's suite ends with '/')."""
    return suite if suite.endswith("/") else f"dists/{suite}/"


def parse_sources_list(text: str) -> list[tuple[str, str]]:
    """``(uri, suite)`` of each ``deb`` line of a one-line-style sources file."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.startswith("deb ") and not line.startswith("deb\t"):
            continue
        line = re.sub(r"\[[^\]]*\]", " ", line[3:])
        words = line.split()
        if len(words) >= 2:
            found.append((words[0], words[1]))
    return found


def parse_deb822_sources(text: str) -> list[tuple[str, str]]:
    """``(uri, suite)`` of each enabled ``deb`` entry of a deb822-style ``.sources`` file."""
    found = []
    for fields in pkgdb.stanzas(text):
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        found += [(uri, suite) for uri in fields.get("uris", "").split() for suite in fields.get("suites", "").split()]
    return found


def parse_release_date(text: str) -> str:
    """The ``Date:`` field of a Release/InRelease file ('' without one)."""
    match = re.search(r"^Date:[ \t]*(.+?)[ \t]*$", text, re.MULTILINE)
    return match.group(1) if match else ""


def _scheme_less(list_name: str) -> tuple[str, str]:
    """The repository location and suite a list file's name gives when no source names it."""
    location, _sep, rest = list_name.partition("_dists_")
    suite = rest.rsplit("_", 1)[0]
    return unquote(location.replace("_", "/")), unquote(suite.replace("_", "/"))


def repository_states(list_files: Mapping[str, bytes], sources: list[tuple[str, str]]) -> list[dict[str, str]]:
    """``[{uri, suite, date, sha256}]`` of the release files among ``list_files`` (name -> content)."""
    by_name: dict[str, tuple[str, str]] = {}
    for uri, suite in sources:
        for release in RELEASE_FILES:
            by_name.setdefault(apt_list_name(uri, _release_path(suite) + release), (uri.rstrip("/"), suite))
    states: dict[tuple[str, str], dict[str, str]] = {}
    for name in sorted(list_files, key=lambda n: (not n.endswith("_InRelease"), n)):
        if not name.endswith(("_InRelease", "_Release")):
            continue
        uri, suite = by_name.get(name) or _scheme_less(name)
        if (uri, suite) in states:  # InRelease and Release of one suite: the signed one counts
            continue
        data = list_files[name]
        states[(uri, suite)] = {"uri": uri, "suite": suite,
                                "date": parse_release_date(data.decode("utf-8", "replace")),
                                "sha256": hashlib.sha256(data).hexdigest()}
    return [states[k] for k in sorted(states)]


def _image_text(root: str, rel: str) -> str | None:
    try:
        data = _imagepath.read_file(root, rel)
    except OSError:
        return None
    return None if data is None else data.decode("utf-8", "replace")


def _names(root: str, rel: str) -> list[str]:
    try:
        return _imagepath.list_dir(root, rel)
    except OSError:
        return []


def read_records(root: str) -> dict[str, str]:
    """The record labels (_contract/labels.py ``record_labels``) of the tree mounted at ``root``.

    Raises :class:`RecordError` when the tree has a package database that cannot be read.
    """
    database = pkgdb.read_package_db(root)
    if database.failed:
        raise RecordError(f"cannot record the packages of the layer: {database.reason}")
    packages = {package.name: package.version for package in database.packages}
    sources = parse_sources_list(_image_text(root, APT_SOURCES_LIST) or "")
    for name in _names(root, APT_SOURCES_DIR):
        text = _image_text(root, f"{APT_SOURCES_DIR}/{name}") or ""
        if name.endswith(".list"):
            sources += parse_sources_list(text)
        elif name.endswith(".sources"):
            sources += parse_deb822_sources(text)
    list_files: dict[str, bytes] = {}
    for name in _names(root, APT_LISTS):
        if name.endswith(("_InRelease", "_Release")):
            try:
                data = _imagepath.read_file(root, f"{APT_LISTS}/{name}", follow_last=False)
            except OSError:
                continue  # not a regular file: no state apt wrote
            if data is not None:
                list_files[name] = data
    return record_labels(packages, repository_states(list_files, sources))
