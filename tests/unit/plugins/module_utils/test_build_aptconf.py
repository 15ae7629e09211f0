"""apt's build-time configuration and binary caches in a layer's tree (_build/aptconf.py), on real directories."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._build import aptconf


def debian_tree(root):
    (root / "etc" / "apt" / "apt.conf.d").mkdir(parents=True)
    (root / "var" / "cache" / "apt" / "archives").mkdir(parents=True)
    return root


def test_install_writes_the_build_configuration_where_apt_has_its_directory(tmp_path):
    root = debian_tree(tmp_path / "root")
    assert aptconf.install(str(root)) is True
    written = root / "etc" / "apt" / "apt.conf.d" / aptconf.CONF_NAME
    assert 'Acquire::Languages "none";' in written.read_text()
    assert "srcpkgcache" not in written.read_text()  # the parsed lists are kept: children start from them
    assert oct(written.stat().st_mode & 0o777) == "0o644"


def test_install_writes_nothing_into_a_tree_without_apt(tmp_path):
    root = tmp_path / "el9"
    (root / "etc" / "yum.repos.d").mkdir(parents=True)
    assert aptconf.install(str(root)) is False
    assert sorted(p.name for p in (root / "etc").iterdir()) == ["yum.repos.d"]


def test_install_replaces_a_link_planted_under_its_name_without_following_it(tmp_path):
    root = debian_tree(tmp_path / "root")
    outside = tmp_path / "host-file"
    outside.write_text("host's own\n")
    (root / "etc" / "apt" / "apt.conf.d" / aptconf.CONF_NAME).symlink_to(outside)
    aptconf.install(str(root))
    assert outside.read_text() == "host's own\n"
    written = root / "etc" / "apt" / "apt.conf.d" / aptconf.CONF_NAME
    assert not written.is_symlink() and written.read_text() == aptconf.CONF_TEXT


def test_install_resolves_the_directory_inside_the_tree(tmp_path):
    """An absolute link in the image leads to the image's own directory, never the host's."""
    root = tmp_path / "root"
    (root / "usr" / "etc" / "apt" / "apt.conf.d").mkdir(parents=True)
    (root / "etc").symlink_to("/usr/etc")  # on the host this would be /usr/etc
    assert aptconf.install(str(root)) is True
    assert (root / "usr" / "etc" / "apt" / "apt.conf.d" / aptconf.CONF_NAME).is_file()


def test_remove_takes_the_configuration_and_apts_package_cache_only(tmp_path):
    root = debian_tree(tmp_path / "root")
    aptconf.install(str(root))
    cache = root / "var" / "cache" / "apt"
    for name in ("pkgcache.bin", "srcpkgcache.bin"):
        (cache / name).write_bytes(b"\0" * 16)
    (cache / "archives" / "chrony_4.3_amd64.deb").write_text("deb")
    (root / "etc" / "apt" / "apt.conf.d" / "70debconf").write_text("// the image's own\n")
    assert sorted(aptconf.remove(str(root))) == ["/etc/apt/apt.conf.d/00hpc-stateless-build",
                                                 "/var/cache/apt/pkgcache.bin"]
    assert sorted(p.name for p in cache.iterdir()) == ["archives", "srcpkgcache.bin"]  # the parsed lists stay
    assert (cache / "archives" / "chrony_4.3_amd64.deb").exists()
    assert sorted(os.listdir(root / "etc" / "apt" / "apt.conf.d")) == ["70debconf"]
    assert aptconf.remove(str(root)) == []  # nothing left to remove


def test_remove_unlinks_a_link_and_never_what_it_names(tmp_path):
    root = debian_tree(tmp_path / "root")
    outside = tmp_path / "host-cache.bin"
    outside.write_bytes(b"host")
    (root / "var" / "cache" / "apt" / "pkgcache.bin").symlink_to(outside)
    assert aptconf.remove(str(root)) == ["/var/cache/apt/pkgcache.bin"]
    assert outside.read_bytes() == b"host"


def test_remove_leaves_a_directory_by_a_cache_files_name(tmp_path):
    root = debian_tree(tmp_path / "root")
    (root / "var" / "cache" / "apt" / "pkgcache.bin").mkdir()
    assert aptconf.remove(str(root)) == []
    assert (root / "var" / "cache" / "apt" / "pkgcache.bin").is_dir()


def test_open_dir_refuses_what_is_no_directory(tmp_path):
    root = debian_tree(tmp_path / "root")
    (root / "etc" / "hostname").write_text("x\n")
    with pytest.raises(FileNotFoundError):
        _imagepath.open_dir(str(root), "etc/hostname")


def test_dpkg_unpacks_without_an_fsync_per_file_while_the_layer_builds(tmp_path):
    root = debian_tree(tmp_path / "root")
    aptconf.install(str(root))
    lines = (root / "etc" / "apt" / "apt.conf.d" / aptconf.CONF_NAME).read_text().splitlines()
    assert 'DPkg::Options:: "--force-unsafe-io";' in lines


def test_a_tree_without_apt_or_lists_is_not_parsed(tmp_path):
    root = tmp_path / "el9"
    (root / "usr" / "bin").mkdir(parents=True)
    assert aptconf.lists_unparsed(str(root)) is False
    (root / "usr" / "bin" / "apt-cache").write_text("#!/bin/sh\n")
    assert aptconf.lists_unparsed(str(root)) is False  # no lists
    (root / "var" / "lib" / "apt" / "lists").mkdir(parents=True)
    (root / "var" / "lib" / "apt" / "lists" / "lock").write_text("")
    assert aptconf.lists_unparsed(str(root)) is False  # lists without a Packages file
