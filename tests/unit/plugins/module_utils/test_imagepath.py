"""The one resolver of image paths: links stay inside the image's root; outputs are created, never opened through a link."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath


@pytest.fixture
def host(tmp_path):
    """Files of the 'build host' outside the image, which no image path may reach."""
    outside = tmp_path / "host"
    (outside / "boot").mkdir(parents=True)
    (outside / "shadow").write_bytes(b"root:$6$host-secret:19000::::::\n")
    (outside / "shadow").chmod(0o600)
    (outside / "boot" / "vmlinuz-9.9").write_bytes(b"host kernel")
    return outside


@pytest.fixture
def root(tmp_path, host):
    image = tmp_path / "image"
    (image / "usr/lib/modules").mkdir(parents=True)
    (image / "etc").mkdir()
    (image / "etc/hostname").write_text("node\n")
    (image / "lib").symlink_to("usr/lib")
    (image / "etc/abs-hostname").symlink_to("/etc/hostname")  # absolute: the image's own file
    (image / "etc/up").symlink_to("../../../../../../etc/hostname")  # '..' stops at the root
    (image / "etc/shadow-link").symlink_to(str(host / "shadow"))  # a host path: not below the root
    (image / "hostboot").symlink_to(str(host / "boot"))
    (image / "loop-a").symlink_to("/loop-b")
    (image / "loop-b").symlink_to("loop-a")
    os.mkfifo(image / "etc/fifo")
    return image


def test_links_resolve_inside_the_root(root):
    assert _imagepath.resolve_rel(str(root), "/lib/modules") == "usr/lib/modules"
    assert _imagepath.resolve(str(root), "etc/abs-hostname") == str(root / "etc/hostname")
    assert _imagepath.resolve_rel(str(root), "/etc/up") == "etc/hostname"
    assert _imagepath.resolve_rel(str(root), "/") == ""
    assert _imagepath.resolve_rel(str(root), "etc/abs-hostname", follow_last=False) == "etc/abs-hostname"


def test_links_to_host_paths_and_loops_resolve_to_nothing(root, host):
    assert _imagepath.resolve(str(root), "etc/shadow-link") is None
    assert _imagepath.resolve(str(root), "hostboot/vmlinuz-9.9") is None
    assert _imagepath.resolve(str(root), "loop-a") is None
    assert _imagepath.resolve(str(root), "missing/file") is None
    assert _imagepath.resolve(str(root), "etc/hostname/below-a-file") is None
    with pytest.raises(FileNotFoundError):
        _imagepath.list_dir(str(root), "hostboot")
    assert _imagepath.read_file(str(root), "etc/shadow-link") is None
    assert oct(stat.S_IMODE((host / "shadow").stat().st_mode)) == oct(0o600)


def test_open_file_reads_regular_files_only(root):
    assert _imagepath.read_file(str(root), "/etc/abs-hostname") == b"node\n"
    with pytest.raises(_imagepath.NotRegularFile, match="symbolic link"):
        _imagepath.open_file(str(root), "etc/abs-hostname", follow_last=False)
    with pytest.raises(_imagepath.NotRegularFile, match="FIFO"):
        _imagepath.open_file(str(root), "etc/fifo")  # never opened: a FIFO without a writer would block
    with pytest.raises(_imagepath.NotRegularFile, match="directory"):
        _imagepath.read_file(str(root), "lib")


def test_literal_paths_follow_no_link(root):
    assert _imagepath.exists_literal(str(root), "usr/lib/modules")
    assert _imagepath.exists_literal(str(root), "lib")  # the link itself
    assert not _imagepath.exists_literal(str(root), "lib/modules")  # through the link: not what the walk packs
    assert _imagepath.readlink(str(root), "etc/shadow-link").endswith("/host/shadow")
    assert _imagepath.readlink(str(root), "etc/hostname") is None


def test_outputs_are_created_and_never_opened_through_a_planted_link(tmp_path, host):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").symlink_to(host / "shadow")
    with pytest.raises(FileExistsError):
        _imagepath.write_file(str(out), "manifest.json", b"{}")
    assert (host / "shadow").read_bytes().startswith(b"root:$6$host-secret")
    old = os.umask(0o077)
    try:
        _imagepath.write_file(str(out), "SHA256SUMS", b"sums\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((out / "SHA256SUMS").stat().st_mode) == 0o644  # exactly, whatever the umask
    with pytest.raises(FileExistsError):
        _imagepath.write_file(str(out), "SHA256SUMS", b"again\n")
    with pytest.raises(ValueError):
        _imagepath.create_file(str(out), "../escape")
    (tmp_path / "link-to-out").symlink_to(out)
    with pytest.raises(OSError):
        _imagepath.create_file(str(tmp_path / "link-to-out"), "x")  # the directory itself is no link either


def test_copy_out_copies_the_images_file_only(root, tmp_path, host):
    out = tmp_path / "out"
    out.mkdir()
    assert _imagepath.copy_out(str(root), "/etc/abs-hostname", str(out), "hostname") == 5
    assert (out / "hostname").read_bytes() == b"node\n"
    with pytest.raises(FileNotFoundError):
        _imagepath.copy_out(str(root), "etc/shadow-link", str(out), "initrd.img")
    assert not (out / "initrd.img").exists()


def test_replace_file_writes_inside_the_tree_whatever_its_links_say(tmp_path):
    """A tree whose directories and file are links to the host's: the file lands where the tree itself resolves them
    (an absolute link taken from the tree's root), a link in the file's place is replaced, the host's are untouched."""
    host = tmp_path / "host"
    (host / "lib").mkdir(parents=True)
    host_file = tmp_path / "host-sources.list"
    host_file.write_text("the host's\n")
    root = tmp_path / "root"
    (root / "etc" / "apt").mkdir(parents=True)
    (root / "var").symlink_to(host)  # in the tree: <root><host>, made below
    (root / str(host).lstrip("/")).mkdir(parents=True)
    (root / "etc" / "apt" / "sources.list").symlink_to(host_file)
    _imagepath.replace_file(str(root), "var/lib/hpc-stateless/rootfs.json", b"{}\n")
    _imagepath.replace_file(str(root), "/etc/apt/sources.list", b"deb x\n", mode=0o600)
    assert (root / str(host).lstrip("/") / "lib/hpc-stateless/rootfs.json").read_bytes() == b"{}\n"
    assert sorted(p.name for p in host.iterdir()) == ["lib"] and not list((host / "lib").iterdir())
    written = root / "etc" / "apt" / "sources.list"
    assert not written.is_symlink() and written.read_text() == "deb x\n" and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert host_file.read_text() == "the host's\n"
    assert sorted(p.name for p in (root / "etc" / "apt").iterdir()) == ["sources.list"]  # no temporary name left


def test_make_dirs_refuses_a_file_on_the_way(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "var").write_text("a file")
    with pytest.raises(OSError):
        _imagepath.make_dirs(str(root), "var/lib")
    fd = _imagepath.make_dirs(str(root), "srv/a/b", mode=0o750)
    os.close(fd)
    assert stat.S_IMODE((root / "srv" / "a" / "b").stat().st_mode) == 0o750
