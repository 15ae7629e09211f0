"""The image diff on small synthetic images: newc archives written by our newc writer, read back
through the real decompressors, squashfs images made by mksquashfs, trees on disk; every kind of change."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._diff.diff import (
    Side,
    compare_versions,
    diff_files,
    diff_layers,
    diff_packages,
    diff_sides,
    parse_release,
    render_markdown,
    render_table,
    write_markdown,
)
from ansible_collections.hpc.stateless.plugins.module_utils._diff.listing import (
    ListingError,
    Member,
    decompressor_argv,
    list_artifact,
    list_cpio,
    list_squashfs,
    list_tree,
    read_newc,
)
from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import NewcWriter
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, write_cpio

FILE, DIR, LINK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def newc(path: Path, members: list[tuple]) -> Path:
    """A newc archive of ``members``: (name, type|perm, data or None, uid, gid[, ino, nlink, rdev])."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        writer = NewcWriter(fd)
        for index, (name, mode, data, uid, gid, *link) in enumerate(members, start=1):
            ino, nlink = (link[0], link[1]) if link else (index, 1)
            rdev = link[2] if len(link) > 2 else (0, 0)
            fields = dict(ino=ino, mode=mode, uid=uid, gid=gid, nlink=nlink, mtime=0)
            if data is None:
                writer.add_header_only(name.encode(), rdevmajor=rdev[0], rdevminor=rdev[1], **fields)
            else:
                writer.add_bytes(name.encode(), data, **fields)
        writer.finish()
    finally:
        os.close(fd)
    return path


def compressed(raw: Path, fmt: str) -> Path:
    tool = {"cpio.zst": ["zstd", "-q", "-c"], "cpio.gz": ["gzip", "-n", "-c"], "cpio.xz": ["xz", "-c"]}[fmt]
    out = raw.with_name(raw.name + "." + fmt.split(".")[1])
    with open(raw, "rb") as src, open(out, "wb") as dst:
        subprocess.run(tool, stdin=src, stdout=dst, check=True)
    return out


OLD = [
    (".", DIR | 0o755, None, 0, 0),
    ("etc", DIR | 0o755, None, 0, 0),
    ("etc/image-release", FILE | 0o644, b"IMAGE=compute\nVERSION=1\nLAYER=compute\n", 0, 0),
    ("etc/same", FILE | 0o644, b"same", 0, 0),
    ("etc/content", FILE | 0o644, b"aaaa", 0, 0),
    ("etc/grows", FILE | 0o644, b"x" * 10, 0, 0),
    ("etc/mode", FILE | 0o644, b"m", 0, 0),
    ("etc/owner", FILE | 0o600, b"o", 0, 0),
    ("etc/link", LINK | 0o777, b"/etc/same", 0, 0),
    ("etc/becomes-dir", FILE | 0o644, b"f", 0, 0),
    ("etc/gone", FILE | 0o644, b"bye", 0, 0),
    ("dev", DIR | 0o755, None, 0, 0),
    ("dev/null", stat.S_IFCHR | 0o666, None, 0, 0, 40, 1, (1, 3)),
    ("dev/fifo", stat.S_IFIFO | 0o600, None, 0, 0),
    ("hl-a", FILE | 0o644, None, 0, 0, 99, 2),
    ("hl-b", FILE | 0o644, b"linked", 0, 0, 99, 2),
]
NEW = [
    (".", DIR | 0o755, None, 0, 0),
    ("etc", DIR | 0o755, None, 0, 0),
    ("etc/image-release", FILE | 0o644, b"IMAGE=compute\nVERSION=2\nLAYER=compute\n", 0, 0),
    ("etc/same", FILE | 0o644, b"same", 0, 0),
    ("etc/content", FILE | 0o644, b"bbbb", 0, 0),
    ("etc/grows", FILE | 0o644, b"x" * 1000, 0, 0),
    ("etc/mode", FILE | 0o4755, b"m", 0, 0),
    ("etc/owner", FILE | 0o600, b"o", 1000, 100),
    ("etc/link", LINK | 0o777, b"/etc/content", 0, 0),
    ("etc/becomes-dir", DIR | 0o755, None, 0, 0),
    ("etc/new", FILE | 0o644, b"hello", 0, 0),
    ("dev", DIR | 0o755, None, 0, 0),
    ("dev/null", stat.S_IFCHR | 0o666, None, 0, 0, 40, 1, (1, 5)),
    ("dev/fifo", stat.S_IFIFO | 0o600, None, 0, 0),
    ("hl-a", FILE | 0o644, None, 0, 0, 99, 2),
    ("hl-b", FILE | 0o644, b"linked", 0, 0, 99, 2),
]


def members_of(path: Path) -> dict[str, Member]:
    with open(path, "rb") as handle:
        return {m.path: m for m in read_newc(handle, str(path))}


def test_read_newc_gives_every_member_with_its_digest_and_hard_links_share_the_data(tmp_path):
    found = members_of(newc(tmp_path / "old.cpio", OLD))
    assert sorted(found) == sorted("" if m[0] == "." else m[0] for m in OLD)
    assert found[""].kind == "dir" and found[""].mode == 0o755
    assert found["etc/content"] == Member("etc/content", "file", 0o644, 0, 0, 4, sha(b"aaaa"))
    assert found["etc/link"].kind == "symlink" and found["etc/link"].digest == "/etc/same"
    assert found["dev/null"].kind == "char" and found["dev/null"].digest == "1:3"
    assert found["dev/fifo"].kind == "fifo"
    assert found["hl-a"].key() == found["hl-b"].key() == ("file", 0o644, 0, 0, 6, sha(b"linked"))


def test_read_newc_keeps_only_the_files_asked_for(tmp_path):
    path = newc(tmp_path / "old.cpio", OLD)
    with open(path, "rb") as handle:
        found = {m.path: m for m in read_newc(handle, "x", frozenset({"etc/image-release"}))}
    assert found["etc/image-release"].data == b"IMAGE=compute\nVERSION=1\nLAYER=compute\n"
    assert found["etc/same"].data is None


def test_diff_files_finds_every_kind_of_change(tmp_path):
    old = members_of(newc(tmp_path / "old.cpio", OLD))
    new = members_of(newc(tmp_path / "new.cpio", NEW))
    files = diff_files(old, new, top=3)
    assert files["added"] == [{"path": "/etc/new", "type": "file", "size": 5}]
    assert files["removed"] == [{"path": "/etc/gone", "type": "file", "size": 3}]
    changed = {c["path"]: c for c in files["changed"]}
    assert sorted(changed) == ["/dev/null", "/etc/becomes-dir", "/etc/content", "/etc/grows", "/etc/image-release",
                               "/etc/link", "/etc/mode", "/etc/owner"]
    assert changed["/etc/content"]["changed"] == ["content"] and changed["/etc/content"]["delta"] == 0
    assert changed["/etc/grows"] == {"path": "/etc/grows", "type": "file", "changed": ["content"], "old_size": 10,
                                     "new_size": 1000, "delta": 990}
    assert changed["/etc/mode"]["changed"] == ["mode"]
    assert (changed["/etc/mode"]["old_mode"], changed["/etc/mode"]["new_mode"]) == ("0644", "4755")
    assert changed["/etc/owner"]["changed"] == ["owner"] and changed["/etc/owner"]["new_owner"] == "1000:100"
    assert changed["/etc/link"]["changed"] == ["target"]
    assert (changed["/etc/link"]["old_target"], changed["/etc/link"]["new_target"]) == ("/etc/same", "/etc/content")
    assert changed["/etc/becomes-dir"]["changed"] == ["type"]
    assert changed["/dev/null"]["changed"] == ["device"]
    assert [g["path"] for g in files["largest_growths"]] == ["/etc/grows", "/etc/new"]
    assert files["largest_growths"][0]["delta"] == 990
    assert files["delta"] == files["new"]["bytes"] - files["old"]["bytes"] == 990 + 5 - 3 - 1


@pytest.mark.parametrize("fmt", ["cpio.zst", "cpio.gz", "cpio.xz"])
def test_list_cpio_reads_through_the_real_decompressor(tmp_path, fmt):
    raw = newc(tmp_path / "old.cpio", OLD)
    assert {m.path: m for m in list_cpio(str(compressed(raw, fmt)), fmt)} == members_of(raw)


def test_a_truncated_artifact_is_an_error_naming_the_file(tmp_path):
    raw = newc(tmp_path / "old.cpio", OLD)
    data = raw.read_bytes()
    cut = tmp_path / "cut.cpio"
    cut.write_bytes(data[:300])
    artifact = compressed(cut, "cpio.zst")
    with pytest.raises(ListingError, match=rf"{artifact}: the archive ends inside"):
        list(list_cpio(str(artifact), "cpio.zst"))
    broken = tmp_path / "broken.cpio.zst"
    broken.write_bytes(compressed(raw, "cpio.zst").read_bytes()[:-20])
    with pytest.raises(ListingError, match=rf"{broken}.*zstd"):
        list(list_cpio(str(broken), "cpio.zst"))
    not_cpio = tmp_path / "text.cpio"
    not_cpio.write_bytes(b"hello world" * 20)
    with pytest.raises(ListingError, match=r"no newc header at byte 0"):
        list(list_cpio(str(compressed(not_cpio, "cpio.gz")), "cpio.gz"))


def test_decompressor_argv_uses_the_tools_pack_compresses_with():
    found = {name: f"/bin/{name}" for name in ("zstd", "gzip", "xz")}
    assert decompressor_argv("cpio.zst", lambda name, hint: found[name]) == ["/bin/zstd", "-d", "-c", "-q"]
    assert decompressor_argv("cpio.xz", lambda name, hint: found[name])[:3] == ["/bin/xz", "-d", "-c"]
    with pytest.raises(ListingError, match="unknown cpio format 'cpio.bz2'"):
        decompressor_argv("cpio.bz2")


def make_tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "a file").write_bytes(b"alpha")
    (root / "etc" / "empty").write_bytes(b"")
    (root / "etc" / "quote'd").write_bytes(b"q")
    (root / "usr").mkdir()
    (root / "usr" / "big").write_bytes(os.urandom(300_000))
    (root / "usr" / "copy").write_bytes((root / "usr" / "big").read_bytes())
    os.link(root / "usr" / "big", root / "usr" / "hardlink")
    os.symlink("../etc/a file", root / "usr" / "to a file")
    os.chmod(root / "usr" / "copy", 0o4750)
    os.mkfifo(root / "usr" / "fifo")
    return root


def test_tree_cpio_and_squashfs_of_one_tree_list_the_same(tmp_path):
    """Three readers, one truth: the tree itself, pack's cpio writer's archive, mksquashfs' image."""
    root = make_tree(tmp_path / "root")
    from_tree = {m.path: m for m in list_tree(str(root))}
    raw = tmp_path / "tree.cpio"
    fd = os.open(raw, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_cpio(str(root), ExcludeRules(), None, {(os.stat(root / "usr/big").st_dev,
                                                      os.stat(root / "usr/big").st_ino): 2}, 2**31, fd)
    finally:
        os.close(fd)
    from_cpio = {m.path: m for m in list_cpio(str(compressed(raw, "cpio.zst")), "cpio.zst")}
    image = tmp_path / "tree.squashfs"
    subprocess.run(["mksquashfs", str(root), str(image), "-quiet", "-no-progress", "-processors", "1"], check=True,
                   capture_output=True)
    from_squashfs = {m.path: m for m in list_squashfs(str(image))}
    assert from_tree == from_cpio == from_squashfs
    assert from_tree["usr/hardlink"].digest == from_tree["usr/copy"].digest == from_tree["usr/big"].digest
    assert from_tree["usr/to a file"].digest == "../etc/a file"
    assert from_tree["usr/copy"].mode == 0o4750


def test_list_artifact_picks_the_reader_by_format_and_squashfs_errors_name_the_file(tmp_path):
    with pytest.raises(ListingError, match=rf"{tmp_path}/none.squashfs: no such artifact file"):
        list(list_artifact(str(tmp_path / "none.squashfs"), "squashfs"))
    junk = tmp_path / "junk.squashfs"
    junk.write_bytes(b"\0" * 4096)
    with pytest.raises(ListingError, match=rf"{junk}"):
        list(list_artifact(str(junk), "squashfs"))


@pytest.mark.parametrize("left,right,expected", [
    ("1.0", "1.0", 0), ("1.0", "1.1", -1), ("1.10", "1.9", 1), ("1.0~rc1", "1.0", -1), ("1.0", "1.0+deb12u1", -1),
    ("2.36-9", "2.36-9+deb12u4", -1), ("1:1.0", "2.0", 1), ("1.0-2", "1.0-10", -1), ("1.0a", "1.0", 1),
    ("8.5.0-18.el8", "8.5.0-20.el8", -1),
])
def test_compare_versions_orders_as_dpkg(left, right, expected):
    assert compare_versions(left, right) == expected
    assert compare_versions(right, left) == -expected  # pylint: disable=arguments-out-of-order


def test_diff_packages_sorts_each_kind():
    old = [{"name": "a", "version": "1.0"}, {"name": "b", "version": "2.0"}, {"name": "c", "version": "1:1.0"},
           {"name": "gone", "version": "1"}, {"name": "multi", "version": "1"}, {"name": "same", "version": "3"}]
    new = [{"name": "a", "version": "1.1"}, {"name": "b", "version": "2.0~rc1"}, {"name": "c", "version": "1:1.0"},
           {"name": "fresh", "version": "0.1"}, {"name": "multi", "version": "1"}, {"name": "multi", "version": "2"},
           {"name": "same", "version": "3"}]
    result = diff_packages(old, new)
    assert result == {
        "known": True,
        "added": [{"name": "fresh", "version": "0.1"}],
        "removed": [{"name": "gone", "version": "1"}],
        "upgraded": [{"name": "a", "old": "1.0", "new": "1.1"}],
        "downgraded": [{"name": "b", "old": "2.0", "new": "2.0~rc1"}],
        "changed": [{"name": "multi", "old": "1", "new": "1, 2"}],
        # the new side records no origins (test_release_freshness.py has sides that do)
        "security": [], "security_known": False,
    }
    assert diff_packages(None, new)["known"] is False and diff_packages(None, new)["added"] == []


def test_diff_layers_and_release():
    layers = diff_layers({"base": "k1", "compute": "k2", "old": "k3"}, {"base": "k1", "compute": "k4", "new": "k5"})
    assert layers == {"rebuilt": [{"layer": "compute", "old": "k2", "new": "k4"}], "added": ["new"],
                      "removed": ["old"], "unchanged": ["base"]}
    assert parse_release(b"IMAGE=c\nVERSION=1=2\n\nbad line\n") == {"IMAGE": "c", "VERSION": "1=2"}
    assert parse_release(None) is None


def side(path: Path, label: str, version: str, packages, kernel: str, args: str, keys: dict) -> Side:
    return Side(label=label, members=lambda: list_cpio(str(path), "cpio.zst", frozenset({"etc/image-release"})),
                image="compute", version=version, source=str(path), packages=packages, kernel=kernel,
                kernel_args=args, layer_keys=keys)


@pytest.fixture
def result(tmp_path):
    old = side(compressed(newc(tmp_path / "old.cpio", OLD), "cpio.zst"), "compute 1 (served)", "1",
               [{"name": "slurm", "version": "22.05.8-4"}, {"name": "gone", "version": "1"}], "6.1.0-9-amd64",
               "console=ttyS0", {"base": "b" * 64, "compute": "c" * 64})
    new = side(compressed(newc(tmp_path / "new.cpio", NEW), "cpio.zst"), "compute 2", "2",
               [{"name": "slurm", "version": "22.05.8-5"}, {"name": "fresh", "version": "0.1"}], "6.1.0-10-amd64",
               "console=ttyS0 quiet", {"base": "b" * 64, "compute": "d" * 64})
    return diff_sides(old, new, top=2)


def test_diff_sides_json(result):
    assert result["differs"] is True
    assert result["summary"] == {"packages_added": 1, "packages_removed": 1, "packages_upgraded": 1,
                                 "packages_downgraded": 0, "packages_changed": 0, "security_updates": 0,
                                 "files_added": 1,
                                 "files_removed": 1, "files_changed": 8, "bytes_delta": 991,
                                 "capabilities_added": 0, "capabilities_removed": 0, "capabilities_changed": 0,
                                 "layers_rebuilt": 1}
    assert result["kernel"] == {"old": "6.1.0-9-amd64", "new": "6.1.0-10-amd64", "changed": True}
    assert result["kernel_args"]["changed"] is True
    assert result["release"]["changed"] == ["VERSION"]
    assert result["release"]["new"] == {"IMAGE": "compute", "VERSION": "2", "LAYER": "compute"}
    assert result["old"]["packages"] == 2 and result["new"]["label"] == "compute 2"


def test_render_table_reads_as_text(result):
    table = render_table(result, limit=2)
    assert table[:2] == ["old: compute 1 (served)", "new: compute 2"]
    assert "  - gone 1" in table and "  + fresh 0.1" in table
    assert "    slurm 22.05.8-4 -> 22.05.8-5" in table
    assert "  + /etc/new (file, 5 B)" in table and "  - /etc/gone (file, 3 B)" in table
    assert "  ~ /dev/null (device; +0 B)" in table
    assert "  ... 6 more (see the JSON result)" in table
    assert "kernel: 6.1.0-9-amd64 -> 6.1.0-10-amd64" in table
    assert "kernel command line: console=ttyS0 -> console=ttyS0 quiet" in table
    assert f"layers rebuilt: compute ({'c' * 12} -> {'d' * 12})" in table
    assert "image-release (new): IMAGE=compute VERSION=2 LAYER=compute" in table
    assert "        +990 B  /etc/grows" in table


def test_render_markdown_is_a_short_summary(result):
    text = render_markdown(result, limit=1)
    assert text.startswith("### Image diff: compute 1 (served) → compute 2\n")
    assert "| packages | 1 | 1 | 1 | 0 | 0 |" in text
    assert "| files | 1 | 1 | | | 8 |" in text
    assert "Kernel: `6.1.0-9-amd64` → `6.1.0-10-amd64`" in text
    assert "Layers rebuilt: compute" in text
    assert "<details><summary>Packages upgraded (1)</summary>" in text
    assert "- `slurm` 22.05.8-4 → 22.05.8-5" in text
    assert "- `/etc/grows` +990 B\n- … 1 more" in text


def test_identical_versions_say_no_difference(tmp_path):
    path = compressed(newc(tmp_path / "old.cpio", OLD), "cpio.zst")
    same = side(path, "compute 1", "1", [], "k", "", {"base": "b"})
    result = diff_sides(same, side(path, "compute 1 again", "1", [], "k", "", {"base": "b"}))
    assert result["differs"] is False
    assert render_table(result)[2] == "no difference"
    assert "No difference." in render_markdown(result)


def test_write_markdown_replaces_at_once_and_reports_a_change_only_when_there_is_one(tmp_path):
    dest = tmp_path / "diff.md"
    assert write_markdown(str(dest), "one\n", check_mode=True) is True
    assert not dest.exists()
    assert write_markdown(str(dest), "one\n") is True
    assert write_markdown(str(dest), "one\n") is False
    assert write_markdown(str(dest), "two\n") is True
    assert dest.read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diff.md"]
    with pytest.raises(OSError, match=f"directory {tmp_path}/missing does not exist"):
        write_markdown(str(tmp_path / "missing" / "diff.md"), "x")
    assert not (tmp_path / "missing").exists()


def test_read_newc_from_a_byte_stream_without_trailer_is_an_error():
    data = io.BytesIO(b"070701" + b"0" * 104)
    with pytest.raises(ListingError, match="stream: the archive ends inside a member"):
        list(read_newc(data, "stream"))


def test_a_pack_against_a_layer_image_leaves_out_what_pack_adds(tmp_path):
    packed = side(compressed(newc(tmp_path / "old.cpio", OLD), "cpio.zst"), "compute 1", "1", [], "k", "", {})
    tree = make_tree(tmp_path / "root")
    (tree / "etc" / "content").write_bytes(b"bbbb")
    layer = Side(label="layer", members=lambda: list_tree(str(tree), frozenset({"etc/image-release"})), packed=False)
    result = diff_sides(packed, layer)
    paths = {e["path"] for kind in ("added", "removed", "changed") for e in result["files"][kind]}
    assert "/etc/image-release" not in paths and "/etc/gone" in paths and "/etc/content" in paths
    assert any("are added by pack and not compared" in note for note in result["notes"])
    both_packed = diff_sides(packed, side(compressed(newc(tmp_path / "new.cpio", NEW), "cpio.zst"), "compute 2",
                                          "2", [], "k", "", {}))
    assert "/etc/image-release" in {e["path"] for e in both_packed["files"]["changed"]}
