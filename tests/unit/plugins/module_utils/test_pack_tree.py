"""Walk order, exclusions, overlay, secrets, pass-1 figures and the cpio stream of pack_tree."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack.newc import MAX_FILE_SIZE
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import (
    DEFAULT_EXCLUDES,
    ExcludeRules,
    Overlay,
    OverlayFile,
    PackTreeError,
    SecretRules,
    scan_tree,
    walk,
    write_cpio,
)
from test_pack_newc import parse_newc  # noqa: E402 - sibling test module (rootdir-relative import)

SDE = 1_700_000_000
PRIVATE_KEY = (b"-----BEGIN OPENSSH PRIVATE KEY-----\n"
               b"b3BlbnNzaC1rZXktdjEAAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMA==\n"
               b"-----END OPENSSH PRIVATE KEY-----\n")


def make_tree(root, files):
    """``{relative path: bytes | ('link', target) | 'dir'}``."""
    root.mkdir(exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "dir":
            path.mkdir(exist_ok=True)
        elif isinstance(content, tuple):
            path.symlink_to(content[1])
        else:
            path.write_bytes(content)
    return root


@pytest.fixture
def tree(tmp_path):
    root = make_tree(tmp_path / "root", {
        "etc/hostname": b"node\n",
        "etc/ssh/ssh_host_ed25519_key.pub": b"ssh-ed25519 AAAA\n",
        "tmp/junk": b"x",
        "tmp/sub/more": b"y",
        "usr/bin/tool": b"\x7fELF" + b"\0" * 100,
        "usr/bin/tool-link": ("link", "tool"),
        "usr/share/doc/a/README": b"docs",
        "proc": "dir",
        "a-b": b"dash sorts before slash",
    })
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-hard")
    return root


def test_exclude_rules_keep_the_directory_of_a_slash_star_pattern():
    rules = ExcludeRules(["/tmp/*", "usr/share/doc/", "./var/cache/apt/*.bin"])
    assert rules.patterns == ["tmp/*", "usr/share/doc", "var/cache/apt/*.bin"]
    assert not rules.excluded("tmp")
    assert rules.excluded("tmp/x") and rules.excluded("tmp/a/b")
    assert rules.excluded("usr/share/doc") and not rules.excluded("usr/share/docs")
    assert rules.excluded("var/cache/apt/pkgcache.bin")
    assert not ExcludeRules([]).excluded("anything")


def test_default_excludes_cover_runtime_trees_and_caches():
    rules = ExcludeRules(DEFAULT_EXCLUDES)
    for path in ("proc/1/status", "sys/kernel", "run/lock", "tmp/x", "var/tmp/y", "boot/vmlinuz-6.1",
                 "var/lib/apt/lists/deb.debian.org_Packages", "var/cache/apt/archives/x.deb", "var/cache/dnf/x",
                 "initrd.img"):
        assert rules.excluded(path), path
    for path in ("proc", "tmp", "run", "etc/passwd", "var/lib/dpkg/status", "usr/lib/modules/6.1/kernel"):
        assert not rules.excluded(path), path


def test_walk_is_sorted_parents_first_and_prunes_excluded(tree):
    pruned = []
    rels = [e.rel for e in walk(tree, ExcludeRules(["tmp/*", "usr/share/doc"]), on_excluded=pruned.append)]
    assert rels[0] == ""
    assert rels == ["", "a-b", "etc", "etc/hostname", "etc/ssh", "etc/ssh/ssh_host_ed25519_key.pub", "proc",
                    "tmp", "usr", "usr/bin", "usr/bin/tool", "usr/bin/tool-hard", "usr/bin/tool-link",
                    "usr/share"]
    assert sorted(pruned) == ["tmp/junk", "tmp/sub", "usr/share/doc"]  # prune points, not their contents
    for index, rel in enumerate(rels[1:], 1):
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        assert parent in rels[:index], f"{rel} comes before its parent"


def test_overlay_replaces_files_and_creates_missing_parents(tree):
    overlay = Overlay([OverlayFile("etc/hostname", stat.S_IFREG | 0o644, b"packed\n"),
                       OverlayFile("new/dir/file", stat.S_IFREG | 0o600, b"n")], SDE)
    entries = {e.rel: e for e in walk(tree, ExcludeRules(), overlay)}
    assert entries["etc/hostname"].data == b"packed\n" and entries["etc/hostname"].path is None
    assert stat.S_ISDIR(entries["new"].mode) and stat.S_ISDIR(entries["new/dir"].mode)
    assert entries["new/dir/file"].mtime == SDE
    assert (tree / "etc/hostname").read_bytes() == b"node\n"  # the tree is never written


def test_scan_counts_hardlinked_data_once(tree):
    scan = scan_tree(tree, ExcludeRules(["tmp/*"]), SecretRules())
    tool = len(b"\x7fELF") + 100
    assert list(scan.hardlinks.values()) == [2]
    expected = (5 + len(b"ssh-ed25519 AAAA\n") + tool + len("tool") + len(b"docs") + len(b"dash sorts before slash"))
    assert scan.total_bytes == expected
    assert scan.files == 5  # hostname, .pub, tool (once), README, a-b
    dirs = {d["path"]: d["bytes"] for d in scan.largest_directories()}
    assert dirs["/usr"] == tool + len("tool") + 4 and dirs["/usr/share/doc/a"] == 4


@pytest.mark.parametrize("rel, content, reason", [
    ("etc/ssh/ssh_host_rsa_key", b"anything", "SSH host private key"),
    ("root/.ssh/id_ed25519", b"anything", "SSH private key"),
    ("home/alice/.ssh/id_rsa", b"anything", "SSH private key"),
    ("etc/munge/munge.key", b"\x00" * 1024, "MUNGE key"),
    ("etc/ssl/private/site.key", PRIVATE_KEY, "OpenSSH private key block at byte 0"),
    ("root/.ssh/deploy_key", PRIVATE_KEY, "OpenSSH private key block at byte 0"),
    ("usr/share/misc/notes", PRIVATE_KEY, "OpenSSH private key block at byte 0"),  # any path
])
def test_secrets_are_found_and_named(tmp_path, rel, content, reason):
    root = make_tree(tmp_path / "r", {rel: content, rel + ".pub": b"public", "etc/ok.key": b"not a key"})
    scan = scan_tree(root, ExcludeRules(), SecretRules())
    assert [(s.path, s.reason) for s in scan.secrets] == [(rel, reason)]
    assert str(scan.secrets[0]) == f"/{rel} ({reason})"


def test_user_patterns_allowed_list_and_exclusion(tmp_path):
    root = make_tree(tmp_path / "r", {"etc/munge/munge.key": b"k", "etc/site/token": b"t",
                                      "etc/ssh/ssh_host_ecdsa_key": b"k"})
    scan = scan_tree(root, ExcludeRules(["etc/ssh/ssh_host_*"]),
                     SecretRules(["etc/site/token"], allowed=["etc/munge/munge.key"]))
    assert [s.path for s in scan.secrets] == ["etc/site/token"]
    assert [s.path for s in scan.allowed_secrets] == ["etc/munge/munge.key"]


def test_files_of_4gib_are_reported_before_writing(tmp_path):
    root = make_tree(tmp_path / "r", {"small": b"s"})
    with open(root / "huge.img", "wb") as handle:
        handle.truncate(MAX_FILE_SIZE + 1)  # sparse: no disk space used
    scan = scan_tree(root, ExcludeRules(), SecretRules())
    assert scan.too_large == [("huge.img", MAX_FILE_SIZE + 1)]


def _cpio(tree, sde=SDE, overlay=None, rules=None):
    rules = rules or ExcludeRules(["tmp/*"])
    scan = scan_tree(tree, rules, SecretRules())
    read, write = os.pipe()
    out = tree.parent / "out.cpio"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(["cat"], stdin=read, stdout=sink)
        os.close(read)
        size = write_cpio(tree, rules, overlay, scan.hardlinks, sde, write)
        os.close(write)
        proc.wait()
    data = out.read_bytes()
    assert len(data) == size
    return data


def test_cpio_stream_is_reproducible_with_clamped_times_and_renumbered_inodes(tree):
    os.utime(tree / "etc/hostname", (SDE + 500, SDE + 500))
    os.utime(tree / "a-b", (1000, 1000))
    first = _cpio(tree)
    assert _cpio(tree) == first
    members = parse_newc(first)
    by_name = {m["name"]: m for m in members}
    assert by_name[b"etc/hostname"]["mtime"] == SDE  # newer than SOURCE_DATE_EPOCH: clamped
    assert by_name[b"a-b"]["mtime"] == 1000  # older: kept
    assert [m["ino"] for m in members if m["name"] != b"usr/bin/tool-hard"] == list(range(1, len(members)))
    assert by_name[b"."]["nlink"] == 2 + 4  # etc, proc, tmp, usr


def test_cpio_hard_links_carry_data_on_the_last_name(tree, tmp_path):
    data = _cpio(tree)
    by_name = {m["name"]: m for m in parse_newc(data)}
    first, last = by_name[b"usr/bin/tool"], by_name[b"usr/bin/tool-hard"]
    assert first["ino"] == last["ino"] and first["nlink"] == last["nlink"] == 2
    assert first["filesize"] == 0 and last["data"] == (tree / "usr/bin/tool").read_bytes()
    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["cpio", "-i", "-d", "--quiet", "-D", str(dest)], input=data, check=True)
    assert (dest / "usr/bin/tool").read_bytes() == (tree / "usr/bin/tool").read_bytes()
    assert os.stat(dest / "usr/bin/tool").st_ino == os.stat(dest / "usr/bin/tool-hard").st_ino


def test_gnu_cpio_lists_exactly_the_walk_plus_overlay(tree):
    overlay = Overlay([OverlayFile("etc/image-release", stat.S_IFREG | 0o644, b"IMAGE=x\n")], SDE)
    data = _cpio(tree, overlay=overlay)
    listing = subprocess.run(["cpio", "-t", "--quiet"], input=data, capture_output=True, check=True).stdout
    expected = ["."] + [e.rel for e in walk(tree, ExcludeRules(["tmp/*"]), overlay)][1:]
    assert listing.decode().splitlines() == expected
    assert "etc/image-release" in expected and "tmp/junk" not in expected


def test_tree_changed_between_passes_is_an_error(tree):
    rules = ExcludeRules()
    scan = scan_tree(tree, rules, SecretRules())
    os.link(tree / "usr/bin/tool", tree / "usr/bin/tool-third")
    read, write = os.pipe()
    try:
        with pytest.raises(PackTreeError, match="changed while they were packed"):
            pid = os.fork()
            if pid == 0:  # drain the pipe
                os.close(write)
                while os.read(read, 1 << 16):
                    pass
                os._exit(0)
            write_cpio(tree, rules, None, scan.hardlinks, SDE, write)
    finally:
        os.close(write)
        os.close(read)
        os.waitpid(pid, 0)


def test_walk_of_a_missing_root_names_it(tmp_path):
    with pytest.raises(PackTreeError, match="nope"):
        list(walk(tmp_path / "nope", ExcludeRules()))
