# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""apt while a layer builds: a configuration of the build's own, and apt's scratch files left out of the image.

A Debian-family layer's roles run apt in its working container, and the first ``apt-get update`` of a layer
is common: ansible.builtin.apt runs one before it installs python3-apt into a root without it, and for
``update_cache``; the build runs one for a layer's own sources (layer_sources.yml). Profiled on a bookworm root
with its three suites, that update fetches 8 MB of description translations no image reads
(``Translation-en``; a bootstrapped root has none).

apt keeps two binary caches in ``/var/cache/apt``, about 37 MB each with the three suites: ``srcpkgcache.bin``,
the parsed lists, valid as long as the lists and sources are the same files; and ``pkgcache.bin``, that plus
dpkg's status, stale after every install. Parsing the lists again is 1.1-2.2 s on the 2-core build host; making
``pkgcache.bin`` from a valid ``srcpkgcache.bin`` is about 0.5 s. So a layer keeps ``srcpkgcache.bin``: it is
written where the lists change (the base layer's first update, a layer that adds sources or refreshes them) and
is then the parent's file in every child, which writes no copy of it, and each later apt run of a child (the
first of every role's apt tasks) starts from it. ``pkgcache.bin`` is stale in any child that installs a package,
so it leaves with the layer's commit. Packs never carry either (_pack/tree.py).

* :func:`install` - at ``started``, :data:`CONF_NAME` in the tree's ``/etc/apt/apt.conf.d`` (only where that
  directory exists): no translations are fetched (``Acquire::Languages``), a download that got no answer is
  tried again as the bootstrap's are (``Acquire::Retries``: a resolver outage passes), and dpkg unpacks without
  an fsync per file (``--force-unsafe-io``: the tree is committed from the host after the build, a build that crashes is built
  again). Packages, InRelease files and so what the suites carry (security updates included) and the repository
  labels (_build/records.py) are as before.
* :func:`remove` - at ``committed``, before the tree is recorded: that file, and ``pkgcache.bin`` (apt makes it
  again on its next run, on a node or in the next layer, from ``srcpkgcache.bin``).
* :func:`lists_unparsed` - at the commit of a root layer: whether its tree has apt's lists but no
  ``srcpkgcache.bin`` (a bootstrapped root, whose bootstrap cleans apt's caches, or a root layer whose roles ran
  no apt). The build then runs :data:`PARSE_LISTS` in it, so no child parses them again and none writes a copy.
  A bootstrap in a user namespace parses them there itself (_build/bootstrap.py ``parse_lists_argv``): its
  container is not mapped, and the tree's apt-cache must not run as host root.

The tree is the working container's mount on the host; nothing runs in it at either point (the agent is
stopped before a commit, none is started yet at ``started``). Its paths are resolved inside it (its links
never lead to the host's files, module_utils/_imagepath.py) and only the names themselves are created or
removed, through a descriptor of their directory.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import APT_RETRY_COUNT
from ansible_collections.hpc.stateless.plugins.module_utils._build.records import APT_LISTS

CONF_DIR = "etc/apt/apt.conf.d"
#: Sorted first among apt's configuration files: a role's own file may still say otherwise.
CONF_NAME = "00hpc-stateless-build"
CONF_TEXT = f"""\
// Written by hpc.stateless while this layer builds; removed before the layer is committed (_build/aptconf.py).
Acquire::Languages "none";
Acquire::Retries "{APT_RETRY_COUNT}";
DPkg::Options:: "--force-unsafe-io";
"""
APT_CACHE_DIR = "var/cache/apt"
#: apt's binary cache of the lists and dpkg's status, stale after any install: no layer keeps it.
APT_CACHE_FILES = ("pkgcache.bin",)
#: apt's binary cache of the parsed lists, which layers keep.
LISTS_CACHE_FILE = "srcpkgcache.bin"
#: The command, run in the working container, that writes both caches from the lists and changes nothing else.
PARSE_LISTS = ("apt-cache", "gencaches")


def _unlink(directory: int, name: str) -> bool:
    """Remove the name ``name`` of ``directory`` (a link there is removed, never followed); whether it was there."""
    try:
        st = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return False  # not ours: a directory by that name is left as it is
    os.unlink(name, dir_fd=directory)
    return True


def install(root: str) -> bool:
    """Write :data:`CONF_NAME` into the tree ``root`` when it has apt's configuration directory; whether it did."""
    try:
        directory = _imagepath.open_dir(root, CONF_DIR)
    except FileNotFoundError:
        return False  # no apt in this tree (an EL or SUSE layer, a root not bootstrapped yet)
    try:
        _unlink(directory, CONF_NAME)  # a start after a killed one: written afresh
        fd = os.open(CONF_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(fd, 0o644)
            handle.write(CONF_TEXT)
    finally:
        os.close(directory)
    return True


def remove(root: str) -> list[str]:
    """Remove the build's apt configuration and apt's package cache (:data:`APT_CACHE_FILES`) from the tree
    ``root``; the paths removed."""
    removed = []
    for parent, names in ((CONF_DIR, (CONF_NAME,)), (APT_CACHE_DIR, APT_CACHE_FILES)):
        try:
            directory = _imagepath.open_dir(root, parent)
        except FileNotFoundError:
            continue
        try:
            removed += [f"/{parent}/{name}" for name in names if _unlink(directory, name)]
        finally:
            os.close(directory)
    return removed


def lists_unparsed(root: str) -> bool:
    """Whether the tree ``root`` has apt (``apt-cache``) and package lists but no :data:`LISTS_CACHE_FILE`."""
    cache = _imagepath.lstat(root, f"{APT_CACHE_DIR}/{LISTS_CACHE_FILE}", follow_last=False)
    if cache is not None or not _imagepath.is_file(root, "usr/bin/apt-cache"):
        return False
    try:
        return any(name.endswith("_Packages") for name in _imagepath.list_dir(root, APT_LISTS))
    except (FileNotFoundError, NotADirectoryError):
        return False
