# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's package caches as each layer build sees them: a private view over a shared pool.

Every build on a host (two projects, two CI jobs on one runner) reads packages from the same pool,
``/var/cache/hpc-stateless/{apt,dnf,zypp}``. apt locks its archive directory for a whole
``apt-get install`` and never waits for that lock (``DPkg::Lock::Timeout`` only covers dpkg's own
lock), dnf and zypper take their cache the same way: bound as is, the second of two builds fails.
Sharing the directory buys nothing but the downloaded packages themselves, so a build binds a view of
its own instead:

* :func:`seed` - ``<views>/<container>/<n>-<cache>``: a hard link of every package file of the pool
  (``.deb``, ``.rpm``, ``.drpm``; no lock file, no metadata: apt's lists live in the image anyway). The
  package manager finds what an earlier build downloaded and locks nothing anyone else uses.
* :func:`merge` - at commit, the package files the build downloaded are linked into the pool, each
  under a temporary name and renamed (a reader sees a whole file or none; two builds merging the same
  file agree on its content, which the package manager verified).
* :func:`remove_views` - the views of a working container go with it (the removal of a failed or killed
  build's container, the next run's clean-up, removes them too).

No lock is taken: a view is its build's alone, a hard link and a rename are atomic, and the pool only
grows. The views live beside the pools (``<cache root>/.builds``), on their file system: a pool
elsewhere, where a hard link cannot reach, seeds nothing and is merged by copy.
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.hpc.stateless.plugins.module_utils import _paths

#: Files of a pool that are whole packages, written once (the package manager verified them) and never changed.
PACKAGE_SUFFIXES = (".deb", ".rpm", ".drpm")
#: Where the views live, below the host's cache root.
VIEWS_DIR = ".builds"
#: Beside each view, a symbolic link to the pool it was seeded from (what the commit merges into).
POOL_SUFFIX = ".pool"


def views_root(cache_root: str) -> str:
    """The directory that holds every working container's views: ``<cache_root>/.builds``."""
    return os.path.join(cache_root, VIEWS_DIR)


def view_path(cache_root: str, container: str, index: int, pool: str) -> str:
    """The view of ``pool`` (the ``index``-th cache of the layer) for ``container``."""
    return os.path.join(views_root(cache_root), container, f"{index}-{os.path.basename(pool.rstrip('/'))}")


def _package_files(top: str) -> list[str]:
    """Package files below ``top``, relative to it, sorted; hidden names (temporary, lock files) and views skipped."""
    found = []
    for directory, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "partial")
        found.extend(os.path.relpath(os.path.join(directory, name), top) for name in files
                     if name.endswith(PACKAGE_SUFFIXES) and not name.startswith("."))
    return sorted(found)


def seed(pool: str, view: str) -> int:
    """Create ``view`` afresh with a hard link of each package file of ``pool``; return how many were linked.

    A file the link cannot reach (another file system, a file removed meanwhile) is left out: the
    package manager downloads it again.
    """
    shutil.rmtree(view, ignore_errors=True)
    os.makedirs(view, mode=0o755)
    linked = 0
    for rel in _package_files(pool) if os.path.isdir(pool) else []:
        target = os.path.join(view, rel)
        try:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            os.link(os.path.join(pool, rel), target)
        except OSError:
            continue
        linked += 1
    return linked


def merge(view: str, pool: str) -> list[str]:
    """Put the package files of ``view`` that ``pool`` lacks into it, each atomically; return them (relative)."""
    added = []
    for rel in _package_files(view) if os.path.isdir(view) else []:
        source, final = os.path.join(view, rel), os.path.join(pool, rel)
        try:
            if os.path.exists(final) and os.path.samefile(source, final):
                continue
            os.makedirs(os.path.dirname(final), mode=0o755, exist_ok=True)
            temp = _paths.temp_name(final)
            try:
                try:
                    os.link(source, temp)
                except OSError:
                    shutil.copyfile(source, temp)
                os.replace(temp, final)
            finally:
                if os.path.lexists(temp):
                    os.unlink(temp)
        except OSError:
            continue
        added.append(rel)
    return added


def open_view(cache_root: str, container: str, index: int, pool: str) -> str:
    """Seed the view of ``pool`` for ``container`` and record which pool it came from; return the view."""
    view = view_path(cache_root, container, index, pool)
    seed(pool, view)
    record = view + POOL_SUFFIX
    if os.path.lexists(record):
        os.unlink(record)
    os.symlink(os.path.abspath(pool), record)
    return view


def merge_views(cache_root: str, container: str) -> dict[str, list[str]]:
    """Merge every view of ``container`` into the pool it came from: pool -> the package files added."""
    top = os.path.join(views_root(cache_root), container)
    merged: dict[str, list[str]] = {}
    for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
        if not name.endswith(POOL_SUFFIX):
            continue
        pool = os.readlink(os.path.join(top, name))
        merged[pool] = merge(os.path.join(top, name[:-len(POOL_SUFFIX)]), pool)
    return merged


def remove_views(cache_root: str, container: str) -> None:
    """Remove every view of ``container`` (nothing when it has none)."""
    shutil.rmtree(os.path.join(views_root(cache_root), container), ignore_errors=True)


def stale_views(cache_root: str, stem: str) -> list[str]:
    """The containers, named from ``stem`` on, that have views: a killed build's, for the next run's clean-up."""
    try:
        names = os.listdir(views_root(cache_root))
    except OSError:
        return []
    return sorted(name for name in names if name.startswith(stem))
