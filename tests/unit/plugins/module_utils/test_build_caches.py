# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A build's view of the shared package pool: no build can change or add a file of the pool that another build's
apt would take, and nothing a build leaves in its view leads the merge to a host file.

The views are real overlays (the unit tests run as root, as the build does); the image tree is a directory with
apt's lists, as a working container's mount has them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import caches

from signing_keys import SigningKey, throwaway_key

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the views are overlay mounts: root, as a build")


def stanza(package: str, version: str, data: bytes, arch: str = "amd64") -> str:
    return (f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\n"
            f"Filename: pool/main/{package[0]}/{package}/{package}_{version.split(':')[-1]}_{arch}.deb\n"
            f"Size: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\nDescription: x\n second line\n")


GOOD = b"!<arch>\ngood package\n"
NEW = b"!<arch>\nnew package\n"


@pytest.fixture
def tree(tmp_path):
    """An image tree whose apt lists name good_1_amd64.deb (GOOD) and new_2_amd64.deb (NEW)."""
    lists = tmp_path / "root" / "var" / "lib" / "apt" / "lists"
    lists.mkdir(parents=True)
    (lists / "deb.example_dists_x_main_binary-amd64_Packages").write_text(
        stanza("good", "1", GOOD) + "\n" + stanza("new", "2", NEW))
    return tmp_path / "root"


@pytest.fixture
def views(tmp_path):
    root = tmp_path / "cache-root"
    yield root
    caches.remove_views(str(root), "c1")


def open_view(views, pool, tree):
    return caches.open_view(str(views), "c1", 0, str(pool), str(tree))


def test_a_build_that_rewrites_a_pooled_package_in_place_changes_only_its_own_view(tmp_path, tree, views):
    pool = tmp_path / "apt"
    pool.mkdir()
    (pool / "good_1_amd64.deb").write_bytes(GOOD)
    view = open_view(views, pool, tree)
    assert os.path.ismount(view)
    with open(os.path.join(view, "good_1_amd64.deb"), "r+b") as handle:  # a package script, as root
        handle.write(b"!<arch>\nevil package\n")
    assert (pool / "good_1_amd64.deb").read_bytes() == GOOD
    assert caches.merge_views(str(views), "c1", str(tree)) == {str(pool): []}
    assert (pool / "good_1_amd64.deb").read_bytes() == GOOD


def test_only_pooled_packages_the_images_own_lists_vouch_for_are_in_the_view(tmp_path, tree, views):
    """A poisoned file in the pool (same name and size, other bytes) or one no list names never reaches apt."""
    pool = tmp_path / "apt"
    (pool / "sub").mkdir(parents=True)
    (pool / "good_1_amd64.deb").write_bytes(GOOD)
    (pool / "new_2_amd64.deb").write_bytes(NEW.replace(b"new", b"bad"))  # poisoned: the size apt checks is right
    (pool / "stray_1_amd64.deb").write_bytes(b"not in any list")
    (pool / "sub" / "tool-1.0-1.x86_64.rpm").write_bytes(b"rpm")  # dnf and zypper check their own
    view = open_view(views, pool, tree)
    assert sorted(os.path.relpath(os.path.join(d, f), view) for d, _s, fs in os.walk(view) for f in fs) == [
        "good_1_amd64.deb", "sub/tool-1.0-1.x86_64.rpm"]
    assert os.stat(os.path.join(view, "good_1_amd64.deb")).st_ino != 0


def test_the_merge_adds_only_new_files_the_lists_vouch_for_and_replaces_none(tmp_path, tree, views):
    pool = tmp_path / "apt"
    pool.mkdir()
    (pool / "good_1_amd64.deb").write_bytes(GOOD)
    view = open_view(views, pool, tree)
    os.unlink(os.path.join(view, "good_1_amd64.deb"))
    with open(os.path.join(view, "good_1_amd64.deb"), "wb") as handle:  # replaced by a file of the same name
        handle.write(b"!<arch>\nevil package\n")
    with open(os.path.join(view, "new_2_amd64.deb"), "wb") as handle:  # what apt downloaded
        handle.write(NEW)
    with open(os.path.join(view, "forged_1_amd64.deb"), "wb") as handle:  # no list names it
        handle.write(b"forged")
    os.chmod(os.path.join(view, "new_2_amd64.deb"), 0o4755)
    assert caches.merge_views(str(views), "c1", str(tree)) == {str(pool): ["new_2_amd64.deb"]}
    assert (pool / "good_1_amd64.deb").read_bytes() == GOOD
    assert (pool / "new_2_amd64.deb").read_bytes() == NEW
    assert stat.S_IMODE((pool / "new_2_amd64.deb").stat().st_mode) == 0o644
    assert sorted(p.name for p in pool.iterdir()) == ["good_1_amd64.deb", "new_2_amd64.deb"]


@pytest.fixture
def other_fs():
    """A pool on another file system than the views (/dev/shm, a tmpfs): the merge cannot hard-link, it copies."""
    directory = tempfile.mkdtemp(dir="/dev/shm")
    assert os.stat(directory).st_dev != os.stat(tempfile.gettempdir()).st_dev
    yield Path(directory)
    shutil.rmtree(directory)


@pytest.mark.parametrize("where", ["same", "other"])
def test_the_merge_never_follows_a_link_a_build_left(tmp_path, request, where):
    """A build leaves links named like packages in its cache, to a host file; root's merge takes none of them."""
    secret = tmp_path / "host-secret"
    secret.write_text("root:$y$j9T$secret:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    build = tmp_path / "upper"
    build.mkdir()
    (build / "evil-1.0-1.x86_64.rpm").symlink_to(secret)
    (build / "evil_1_amd64.deb").symlink_to(secret)
    pool = (request.getfixturevalue("other_fs") if where == "other" else tmp_path) / "pool"
    pool.mkdir()
    assert caches.merge(str(build), str(pool)) == []
    assert list(pool.iterdir()) == []


def test_the_views_go_with_their_container_unmounted(tmp_path, tree, views):
    pool = tmp_path / "apt"
    pool.mkdir()
    view = open_view(views, pool, tree)
    assert os.path.ismount(view)
    caches.remove_views(str(views), "c1")
    assert not os.path.exists(views / ".builds" / "c1")
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        assert str(views) not in handle.read()


@pytest.mark.parametrize(("package", "version", "arch", "name"), [
    ("bash", "5.2.15-2+b7", "amd64", "bash_5.2.15-2+b7_amd64.deb"),
    ("libc6", "2:2.36-9", "amd64", "libc6_2%3a2.36-9_amd64.deb"),  # apt quotes an epoch's colon
    ("tzdata", "2024a-0+deb12u1", "all", "tzdata_2024a-0+deb12u1_all.deb"),
])
def test_archive_names_are_apts(package, version, arch, name):
    assert caches.archive_name(package, version, arch, f"pool/main/x/{package}.deb") == name
    data = stanza(package, version, b"x", arch).encode()
    assert caches.parse_packages_hashes(data, {package}) == {name: (hashlib.sha256(b"x").hexdigest(), 1)}
    assert caches.parse_packages_hashes(data, {"other"}) == {}


def test_two_lists_that_disagree_on_a_file_vouch_for_neither():
    found = caches.parse_packages_hashes(stanza("p", "1", b"a").encode())
    caches.parse_packages_hashes(stanza("p", "1", b"b").encode(), into=found)
    assert found == {"p_1_amd64.deb": None}


def test_a_pool_file_is_hashed_once_while_it_is_the_same_file(tmp_path, tree, views, monkeypatch):
    pool = tmp_path / "apt"
    pool.mkdir()
    (pool / "good_1_amd64.deb").write_bytes(GOOD)
    hashed = []
    real = caches._sha256_fd
    monkeypatch.setattr(caches, "_sha256_fd", lambda fd: hashed.append(fd) or real(fd))
    for _round in range(2):
        view = open_view(views, pool, tree)
        assert os.listdir(view) == ["good_1_amd64.deb"]
        caches.remove_views(str(views), "c1")
    assert len(hashed) == 1
    with open(pool / "good_1_amd64.deb", "r+b") as handle:  # rewritten in place (by whatever): hashed again
        handle.write(b"!<arch>\nevil")
    view = open_view(views, pool, tree)
    assert os.listdir(view) == [] and len(hashed) == 2


# -- a bootstrap's merge: the lists a signed Release file vouches for ---------------------------------------
FORGED = b"!<arch>\nforged package\n"
LIST_PREFIX = "deb.example_debian_dists_bookworm_"


@pytest.fixture(scope="module")
def archive_key(tmp_path_factory):
    with throwaway_key(tmp_path_factory.mktemp("keys"), "archive") as key:
        yield key


def signed_lists(root: Path, key: SigningKey, packages: str) -> Path:
    """apt's lists of a root as an update leaves them: a Packages list and the InRelease, signed by ``key``, that
    names its SHA256 (apt keeps the lists uncompressed, the Release file lists that form too)."""
    lists = root / "var" / "lib" / "apt" / "lists"
    lists.mkdir(parents=True)
    (lists / f"{LIST_PREFIX}main_binary-amd64_Packages").write_text(packages)
    data = packages.encode()
    release = root / "Release"
    release.write_text("Origin: Example\nSuite: stable\nCodename: bookworm\nDate: Sat, 11 Nov 2023 09:00:00 UTC\n"
                       f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} main/binary-amd64/Packages\n")
    key.gpg("--yes", "--local-user", key.fingerprint, "--digest-algo", "SHA256", "--clearsign", "--output",
            str(lists / f"{LIST_PREFIX}InRelease"), str(release))
    return lists


def bootstrap_upper(tmp_path: Path) -> Path:
    upper = tmp_path / "upper"
    upper.mkdir(parents=True)
    (upper / "new_2_amd64.deb").write_bytes(NEW)
    return upper


def test_a_bootstrap_merge_takes_what_the_signed_lists_vouch_for(tmp_path, archive_key):
    root = tmp_path / "root"
    signed_lists(root, archive_key, stanza("good", "1", GOOD) + "\n" + stanza("new", "2", NEW))
    pool = tmp_path / "pool"
    pool.mkdir()
    assert caches.merge(str(bootstrap_upper(tmp_path)), str(pool), str(root), [str(archive_key.binary)]) == [
        "new_2_amd64.deb"]
    assert (pool / "new_2_amd64.deb").read_bytes() == NEW


def test_a_package_script_that_forges_its_roots_lists_gets_nothing_into_the_pool(tmp_path, archive_key):
    """The lists rewritten after apt verified them (a maintainer script runs as root of the tree): they vouch for a
    forged file under a package's name. The tree's own lists took it; the signed Release file does not."""
    root = tmp_path / "root"
    lists = signed_lists(root, archive_key, stanza("good", "1", GOOD) + "\n" + stanza("new", "2", NEW))
    (lists / f"{LIST_PREFIX}main_binary-amd64_Packages").write_text(stanza("new", "2", FORGED))
    upper = tmp_path / "upper"
    upper.mkdir()
    (upper / "new_2_amd64.deb").write_bytes(FORGED)
    pool = tmp_path / "pool"
    pool.mkdir()
    assert caches.merge(str(upper), str(pool), str(root), [str(archive_key.binary)]) == []
    assert not list(pool.iterdir())
    # What the tree's own lists say alone would have let it in: the gap the signed Release file closes.
    assert caches.merge(str(upper), str(tmp_path / "unsigned-pool"), str(root)) == ["new_2_amd64.deb"]


def test_a_release_file_signed_by_another_key_or_no_keyring_vouches_for_nothing(tmp_path, archive_key):
    root = tmp_path / "root"
    signed_lists(root, archive_key, stanza("new", "2", NEW))
    with throwaway_key(tmp_path / "other", "other") as other:
        for keyrings in ([str(other.binary)], []):
            pool = tmp_path / f"pool-{len(keyrings)}"
            pool.mkdir()
            assert caches.merge(str(bootstrap_upper(tmp_path / f"u{len(keyrings)}")), str(pool), str(root),
                                keyrings) == []


def test_a_list_named_by_no_signed_release_file_vouches_for_nothing(tmp_path, archive_key):
    """A list a script added beside the signed ones (another suite's name): no Release file names its hash."""
    root = tmp_path / "root"
    lists = signed_lists(root, archive_key, stanza("good", "1", GOOD))
    (lists / "deb.evil_debian_dists_bookworm_main_binary-amd64_Packages").write_text(stanza("new", "2", NEW))
    (lists / f"{LIST_PREFIX}contrib_binary-amd64_Packages").write_text(stanza("new", "2", NEW))
    assert caches.signed_apt_archive_hashes(str(root), [str(archive_key.binary)]) == {
        "good_1_amd64.deb": (hashlib.sha256(GOOD).hexdigest(), len(GOOD))}
