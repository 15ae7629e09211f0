"""A bootstrap leaves nothing mounted in its root and no overlay directory behind, whatever the variant.

mmdebstrap mounts the package cache's overlay over the root's apt archive in a setup hook and unmounts it in a
customize hook; the variant ``extract`` runs no customize hook, so the rootfs module itself must release what is
still mounted before it removes the overlay's directories. Real mmdebstrap, real mirror (the default
inventory's), one small package.
"""

from __future__ import annotations

import os
import re

from pack_support import run_module

from ansible_collections.hpc.stateless.plugins.module_utils._fs import mounts_below


def test_an_extract_bootstrap_leaves_no_mount_and_no_overlay_directory(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    rc, result = run_module("hpc.stateless.rootfs", path=str(root), distro="debian", release="bookworm",
                            variant="extract", packages=["hostname"], mirror="http://deb.debian.org/debian",
                            updates=False, security=False)
    try:
        assert rc == 0 and result.get("changed"), result.get("msg")
        view = re.search(r"upperdir=(\S+)/upper,", " ".join(result["cmd"]))  # mmdebstrap's, with the cache overlay
        assert view, result["cmd"]
        assert (root / "bin" / "hostname").is_file()
        assert mounts_below(str(root)) == []
        assert not os.path.lexists(view.group(1)), "the overlay's directories are left"
    finally:
        for point in mounts_below(str(root)):  # the old behaviour's leftover, so the test cleans up after itself
            os.system(f"umount -l {point}")


def test_what_a_bootstrap_downloads_enters_its_cache_by_the_signed_lists(tmp_path):
    """A real mmdebstrap bootstrap (variant essential: its customize hook unmounts the cache overlay before
    mmdebstrap's cleanup) into an empty cache: every package it downloaded is merged, each vouched for by the root's
    apt lists whose SHA256 the archive's signed InRelease names (caches.signed_apt_archive_hashes, gpgv with the
    host's Debian archive keyring). (Variant extract runs no customize hook: its cleanup removes the downloads
    through the overlay, nothing is merged.)"""
    root, cache = tmp_path / "root", tmp_path / "cache" / "debootstrap"
    root.mkdir()
    rc, result = run_module("hpc.stateless.rootfs", path=str(root), distro="debian", release="bookworm",
                            variant="essential", packages=[], mirror="http://deb.debian.org/debian",
                            updates=False, security=False, cache_dir=str(cache))
    assert rc == 0 and result.get("changed"), result.get("msg")
    merged = sorted(p.name for p in cache.glob("*.deb"))
    assert len(merged) > 20 and any(name.startswith("dpkg_") for name in merged), merged
    assert sorted(os.listdir(root / "var" / "cache" / "apt" / "archives")) == ["lock", "partial"]
