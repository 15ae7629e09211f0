"""File capabilities through pack: decoded as libcap writes them, recorded, restored on cpio nodes, kept in squashfs.

image_diff compares what two sides record. The boot itself (the unit restores them, an
unprivileged user gets them) is tests/integration/test_pack_capabilities.py.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._diff.diff import (
    diff_capabilities,
    diff_sides,
    render_markdown,
    render_table,
)
from ansible_collections.hpc.stateless.plugins.module_utils._diff.sides import version_dir_side
from ansible_collections.hpc.stateless.plugins.module_utils._pack import capabilities as caps
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import Packer, PackRequest
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import (
    CAPABILITY_XATTR,
    DEFAULT_EXCLUDES,
    ExcludeRules,
    SecretRules,
    read_capability,
    scan_tree,
)
from test_pack_newc import parse_newc  # noqa: E402 - sibling test module (rootdir-relative import)

SDE = 1_700_000_000
NET_RAW = 1 << 13
NET_BIND_SERVICE = 1 << 10


def raw_v2(permitted: int, inheritable: int = 0, effective: bool = True) -> bytes:
    """A revision 2 ``security.capability`` value, as the kernel stores it."""
    return struct.pack("<5I", 0x02000000 | int(effective), permitted & 0xFFFFFFFF, inheritable & 0xFFFFFFFF,
                       permitted >> 32, inheritable >> 32)


def raw_v3(permitted: int, rootid: int) -> bytes:
    """A revision 3 value: the capabilities of the user namespace whose root is ``rootid``."""
    return struct.pack("<6I", 0x03000001, permitted, 0, 0, 0, rootid)


def _can_set_capabilities(directory: Path) -> bool:
    probe = directory / ".capability-probe"
    probe.write_bytes(b"")
    try:
        os.setxattr(probe, CAPABILITY_XATTR, raw_v2(NET_RAW))
    except OSError:
        return False
    finally:
        probe.unlink()
    return True


@pytest.fixture
def settable(tmp_path):
    """tmp_path, where this process may set file capabilities (root with CAP_SETFCAP, a file system with xattrs)."""
    if not _can_set_capabilities(tmp_path):
        pytest.skip("setting security.capability needs CAP_SETFCAP and a file system with extended attributes")
    return tmp_path


def set_caps(path: Path, raw: bytes) -> None:
    os.setxattr(path, CAPABILITY_XATTR, raw, follow_symlinks=False)


# -- the value and its text ------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "cap_net_raw=ep", "cap_net_raw=p", "cap_net_bind_service,cap_net_raw=ep", "cap_sys_admin=eip",
    "cap_setfcap,cap_checkpoint_restore=p", "cap_perfmon,cap_bpf=eip", "cap_chown=ei cap_net_raw=ep",
    "cap_chown=i cap_kill=p",
])
def test_text_is_what_libcap_reads_back_to_the_same_value(settable, text):
    setcap, getcap = shutil.which("setcap"), shutil.which("getcap")
    if not setcap or not getcap:
        pytest.skip("needs setcap and getcap (libcap2-bin) on the build host")
    target = settable / "tool"
    target.write_bytes(b"\x7fELF")
    subprocess.run([setcap, text, str(target)], check=True)
    raw = os.getxattr(target, CAPABILITY_XATTR)
    ours = caps.decode(raw).text()
    subprocess.run([setcap, ours, str(target)], check=True)
    assert os.getxattr(target, CAPABILITY_XATTR) == raw
    shown = subprocess.run([getcap, str(target)], capture_output=True, text=True, check=True).stdout.split(" ", 1)[1]
    if " " not in text:  # one clause: exactly what getcap prints
        assert ours == shown.strip() == text


def test_every_revision_decodes():
    v1 = struct.pack("<3I", 0x01000001, NET_RAW, 0)
    assert caps.decode(v1) == caps.CapabilitySet(NET_RAW, 0, True)
    assert caps.decode(raw_v2(NET_RAW | (1 << 40), effective=False)).text() == "cap_net_raw,cap_checkpoint_restore=p"
    decoded = caps.decode(raw_v3(NET_RAW, 100000))
    assert decoded.rootid == 100000 and decoded.text() == "cap_net_raw=ep"
    assert caps.decode(raw_v2(1 << 45)).text() == "45=ep"  # a capability newer than the name table
    assert caps.decode(raw_v2(0)).text() == caps.EMPTY_SET


@pytest.mark.parametrize("raw, message", [
    (b"\x01", "too short"),
    (struct.pack("<5I", 0x04000000, 0, 0, 0, 0), "unknown capability revision"),
    (raw_v2(NET_RAW)[:16], "where revision"),
    (struct.pack("<5I", 0x02000003, NET_RAW, 0, 0, 0), "unknown flags"),
])
def test_what_is_no_capability_set_is_refused(raw, message):
    with pytest.raises(ValueError, match=message):
        caps.decode(raw)


# -- pass 1 reads them -----------------------------------------------------------------------------
def test_scan_reads_each_packed_file_without_following_links(settable):
    root = settable / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "tmp").mkdir()
    for name in ("ping", "plain"):
        (root / "usr/bin" / name).write_bytes(b"\x7fELF" + name.encode())
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW))
    os.link(root / "usr/bin/ping", root / "usr/bin/ping-hard")  # one inode, two names: both listed
    (root / "usr/bin/ping-link").symlink_to("ping")  # a link has no capabilities of its own
    (root / "tmp/excluded").write_bytes(b"x")
    set_caps(root / "tmp/excluded", raw_v2(NET_RAW))
    scan = scan_tree(str(root), ExcludeRules(["tmp/*"]), SecretRules())
    assert scan.capabilities == [("usr/bin/ping", raw_v2(NET_RAW)), ("usr/bin/ping-hard", raw_v2(NET_RAW))]
    assert read_capability(os.fsencode(root / "usr/bin/ping-link")) is None
    assert read_capability(os.fsencode(root / "usr/bin/plain")) is None


# -- who may be trusted, what the image needs ------------------------------------------------------
def restorable_root(base: Path) -> Path:
    """A merged-/usr tree with what the restore needs (setcap, /bin/sh, systemd) and a kernel."""
    root = base / "root"
    for rel in ("usr/sbin/setcap", "usr/bin/sh", "usr/lib/systemd/systemd", "boot/vmlinuz-6.1.0-99-amd64",
                "usr/bin/ping", "usr/sbin/init"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"\x7fELF " + rel.encode())
    for link in ("bin", "sbin", "lib"):
        (root / link).symlink_to(f"usr/{link}")
    (root / "etc").mkdir()
    (root / "etc/hostname").write_bytes(b"node\n")
    root.chmod(0o755)
    return root


def test_only_paths_no_user_but_root_can_replace_are_trusted(tmp_path):
    root = restorable_root(tmp_path)
    for rel, uid, gid, mode in (("home/alice/bin", 1000, 1000, 0o755), ("srv/shared", 0, 100, 0o775),
                                ("srv/open", 0, 0, 0o777), ("srv/admin", 0, 0, 0o775), ("opt/owned", 0, 0, 0o755)):
        (root / rel).mkdir(parents=True)
        (root / rel / "tool").write_bytes(b"\x7fELF")
        os.chown(root / rel, uid, gid)
        (root / rel).chmod(mode)
    os.chown(root / "opt/owned/tool", 1000, 0)
    assert caps.untrusted(str(root), "usr/bin/ping") is None
    assert caps.untrusted(str(root), "srv/admin/tool") is None  # group root may write: only root is in it
    assert caps.untrusted(str(root), "home/alice/bin/tool") == "/home/alice/bin is owned by uid 1000"
    assert caps.untrusted(str(root), "srv/shared/tool") == "/srv/shared is writable by group 100"
    assert caps.untrusted(str(root), "srv/open/tool") == "/srv/open is writable by every user"
    assert caps.untrusted(str(root), "opt/owned/tool") == "/opt/owned/tool is owned by uid 1000"
    (root / "usr").chmod(0o757)
    assert caps.untrusted(str(root), "usr/bin/ping") == "/usr is writable by every user"


def test_the_restore_needs_setcap_a_shell_and_systemd_in_the_packed_tree(tmp_path):
    root = restorable_root(tmp_path)
    rules = ExcludeRules()
    assert caps.restore_blocker(str(root), rules) is None
    assert "no setcap" in caps.restore_blocker(str(root), ExcludeRules(["usr/sbin"]))
    (root / "usr/lib/systemd/systemd").unlink()
    assert "no systemd" in caps.restore_blocker(str(root), rules)
    (root / "usr/lib/systemd/systemd").write_bytes(b"\x7fELF")
    (root / "usr/bin/sh").unlink()
    assert "no /bin/sh" in caps.restore_blocker(str(root), rules)
    (root / "usr/bin/sh").symlink_to("dash")
    (root / "usr/bin/dash").write_bytes(b"\x7fELF")
    assert caps.restore_blocker(str(root), rules) is None
    (root / "usr/sbin/setcap").unlink()
    assert "no setcap" in caps.restore_blocker(str(root), rules)
    (root / "usr/sbin/setcap").symlink_to("/etc/hostname")  # inside the image: a regular file, packed
    assert caps.restore_blocker(str(root), rules) is None
    (root / "usr/lib/systemd/system/sysinit.target.wants").mkdir(parents=True)
    os.chown(root / "usr/lib/systemd/system", 1000, 0)  # the unit would run what a user may replace
    assert caps.restore_blocker(str(root), rules) == "/usr/lib/systemd/system is owned by uid 1000"
    os.chown(root / "usr/lib/systemd/system", 0, 0)
    (root / "usr/lib/hpc-stateless").symlink_to("/tmp")  # pack adds files below it: never through a link
    assert caps.restore_blocker(str(root), rules) == "/usr/lib/hpc-stateless is a symbolic link, not a directory"


def test_the_plan_restores_trusted_files_and_says_which_are_not(tmp_path):
    root = restorable_root(tmp_path)
    (root / "home/alice").mkdir(parents=True)
    (root / "home/alice/tool").write_bytes(b"\x7fELF")
    os.chown(root / "home/alice", 1000, 1000)
    (root / "usr/bin/ns").write_bytes(b"\x7fELF")
    found = [("home/alice/tool", raw_v2(NET_BIND_SERVICE)), ("usr/bin/empty", raw_v2(0)),
             ("usr/bin/ns", raw_v3(NET_RAW, 100000)),
             ("usr/bin/ping", raw_v2(NET_RAW)), ("usr/bin/weird", b"\x00\x00\x00\x09")]
    plan = caps.plan(str(root), found, ExcludeRules(), cpio=True)
    assert plan.blocker is None
    assert [f.rel for f in plan.restored] == ["usr/bin/ns", "usr/bin/ping"]  # a rootless build's: the image's own
    assert plan.manifest() == [
        {"path": "/home/alice/tool", "capabilities": "cap_net_bind_service=ep",
         caps.NOT_RESTORED_KEY: "/home/alice is owned by uid 1000"},
        {"path": "/usr/bin/empty", "capabilities": "="},
        {"path": "/usr/bin/ns", "capabilities": "cap_net_raw=ep", "rootid": 100000},
        {"path": "/usr/bin/ping", "capabilities": "cap_net_raw=ep"},
        {"path": "/usr/bin/weird", "capabilities": "unreadable: 0x00000009",
         caps.NOT_RESTORED_KEY: "its security.capability is unreadable: unknown capability revision 0x09000000"},
    ]
    warning = plan.warning() or ""
    assert "2 file(s) are not restored" in warning and "/home/alice/tool (cap_net_bind_service=ep)" in warning
    overlay = {f.rel: f for f in plan.overlay()}
    assert set(overlay) == {caps.RECORD_PATH, caps.SCRIPT_PATH, caps.UNIT_PATH, caps.WANTS_PATH}
    assert all(f.cpio_only and f.uid == 0 and f.gid == 0 for f in overlay.values())
    record = overlay[caps.RECORD_PATH].data.decode().splitlines()
    assert record[-2:] == ["cap_net_raw=ep /usr/bin/ns", "cap_net_raw=ep /usr/bin/ping"]
    assert stat.S_IMODE(overlay[caps.SCRIPT_PATH].mode) == 0o755
    assert overlay[caps.WANTS_PATH].data == f"../{caps.UNIT_NAME}".encode()
    # squashfs keeps the attributes itself: the same record, nothing to restore, nothing to warn about
    kept = caps.plan(str(root), found, ExcludeRules(), cpio=False)
    assert not kept.overlay() and kept.warning() is None
    assert [e["path"] for e in kept.manifest()] == [e["path"] for e in plan.manifest()]
    assert not any(caps.NOT_RESTORED_KEY in e for e in kept.manifest())


def test_without_setcap_nothing_is_added_and_every_file_is_named(tmp_path):
    root = restorable_root(tmp_path)
    (root / "usr/sbin/setcap").unlink()
    plan = caps.plan(str(root), [("usr/bin/ping", raw_v2(NET_RAW))], ExcludeRules(), cpio=True)
    assert plan.overlay() == []
    assert plan.manifest()[0][caps.NOT_RESTORED_KEY] == "the image has no setcap (Debian: libcap2-bin, EL: libcap)"
    assert "/usr/bin/ping (cap_net_raw=ep): the image has no setcap" in (plan.warning() or "")


def test_the_unit_runs_before_sysinit_and_the_script_parses():
    unit = caps.UNIT.splitlines()
    assert "DefaultDependencies=no" in unit and "Before=sysinit.target shutdown.target" in unit
    assert f"ExecStart=/{caps.SCRIPT_PATH}" in unit and "Type=oneshot" in unit
    assert caps.WANTS_PATH.startswith(caps.UNIT_DIR + "/sysinit.target.wants/")
    assert "for candidate in /usr/sbin/setcap /sbin/setcap; do" in caps.RESTORE_SCRIPT
    subprocess.run(["sh", "-n"], input=caps.RESTORE_SCRIPT.encode(), check=True)


def test_the_script_splits_a_record_line_at_the_first_space_slash(tmp_path):
    """The record's split, run by the shell: capabilities (several clauses) and a path with spaces."""
    line = "cap_chown=ei cap_net_raw=ep /opt/my tools/a b"
    script = 'IFS= read -r line; printf "%s\\n" "${line%% /*}" "/${line#* /}"'
    out = subprocess.run(["sh", "-c", script], input=line + "\n", capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["cap_chown=ei cap_net_raw=ep", "/opt/my tools/a b"]
    assert "${line%% /*}" in caps.RESTORE_SCRIPT and "/${line#* /}" in caps.RESTORE_SCRIPT


# -- a whole pack ----------------------------------------------------------------------------------
def _pack(root: Path, out: Path, formats: list[str]) -> dict:
    request = PackRequest(image="node", output_dir=str(out), formats=formats, version="1.0", source_path=str(root),
                          source_date_epoch=SDE)
    packer = Packer(request)
    result = packer.run(False)
    result["warnings"] = packer.warnings
    return result


def _members(archive: Path) -> dict[bytes, dict]:
    return {m["name"]: m for m in parse_newc(gzip.decompress(archive.read_bytes()))}


def test_a_cpio_pack_carries_the_restore_and_the_manifest_the_record(settable):
    root = restorable_root(settable)
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW))
    first = _pack(root, settable / "a", ["cpio.gz"])
    again = _pack(root, settable / "b", ["cpio.gz"])
    archive = settable / "a/node/1.0/node.cpio.gz"
    assert archive.read_bytes() == (settable / "b/node/1.0/node.cpio.gz").read_bytes()  # reproducible
    assert first["manifest"]["capabilities"] == [{"path": "/usr/bin/ping", "capabilities": "cap_net_raw=ep"}]
    assert again["manifest"]["capabilities"] == first["manifest"]["capabilities"]
    assert not [w for w in first["warnings"] if "capabilit" in w]
    members = _members(archive)
    record = members[caps.RECORD_PATH.encode()]
    assert record["data"].decode().endswith("\ncap_net_raw=ep /usr/bin/ping\n")
    assert (record["uid"], record["gid"], record["mode"]) == (0, 0, stat.S_IFREG | 0o644)
    assert members[caps.SCRIPT_PATH.encode()]["data"] == caps.RESTORE_SCRIPT.encode()
    assert members[caps.UNIT_PATH.encode()]["data"] == caps.UNIT.encode()
    assert stat.S_ISLNK(members[caps.WANTS_PATH.encode()]["mode"])
    manifest = json.loads((settable / "a/node/1.0/manifest.json").read_text())
    assert manifest["capabilities"] == first["manifest"]["capabilities"]


def test_a_tree_without_capabilities_packs_as_before(tmp_path):
    root = restorable_root(tmp_path)
    result = _pack(root, tmp_path / "out", ["cpio.gz"])
    assert result["manifest"]["capabilities"] == []
    names = set(_members(tmp_path / "out/node/1.0/node.cpio.gz"))
    assert not {p.encode() for p in caps.PACK_ADDED} & names


@pytest.mark.skipif(shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None,
                    reason="needs squashfs-tools")
def test_squashfs_keeps_the_attribute_and_gets_no_restore(settable):
    root = restorable_root(settable)
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW))
    result = _pack(root, settable / "out", ["squashfs"])
    assert result["manifest"]["capabilities"] == [{"path": "/usr/bin/ping", "capabilities": "cap_net_raw=ep"}]
    extracted = settable / "extracted"
    subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-d", str(extracted),
                    str(settable / "out/node/1.0/node.squashfs")], check=True, capture_output=True)
    assert os.getxattr(extracted / "usr/bin/ping", CAPABILITY_XATTR) == raw_v2(NET_RAW)
    assert not (extracted / caps.RECORD_DIR).exists() and not (extracted / caps.UNIT_PATH).exists()


# -- image_diff sees them ---------------------------------------------------------------------------
def test_image_diff_compares_what_two_packs_record(settable):
    root = restorable_root(settable)
    (root / "usr/bin/mtr").write_bytes(b"\x7fELF mtr")
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW))
    set_caps(root / "usr/bin/mtr", raw_v2(NET_RAW))
    _pack(root, settable / "old", ["cpio.gz"])
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW | NET_BIND_SERVICE))
    os.removexattr(root / "usr/bin/mtr", CAPABILITY_XATTR)
    set_caps(root / "usr/sbin/init", raw_v2(NET_BIND_SERVICE))
    _pack(root, settable / "new", ["cpio.gz"])
    result = diff_sides(version_dir_side(str(settable / "old/node/1.0")), version_dir_side(str(settable / "new/node/1.0")))
    assert result["capabilities"] == {
        "known": True,
        "added": [{"path": "/usr/sbin/init", "capabilities": "cap_net_bind_service=ep"}],
        "removed": [{"path": "/usr/bin/mtr", "capabilities": "cap_net_raw=ep"}],
        "changed": [{"path": "/usr/bin/ping", "old": "cap_net_raw=ep", "new": "cap_net_bind_service,cap_net_raw=ep"}],
    }
    assert result["differs"] and result["summary"]["capabilities_changed"] == 1
    table = render_table(result)
    assert "file capabilities added: 1" in table and "  + /usr/sbin/init cap_net_bind_service=ep" in table
    assert "  ~ /usr/bin/ping cap_net_raw=ep -> cap_net_bind_service,cap_net_raw=ep" in table
    markdown = render_markdown(result)
    assert "| file capabilities | 1 | 1 | | | 1 |" in markdown
    assert "<details><summary>File capabilities (3)</summary>" in markdown
    # the record pack adds to the cpio changed too: a pack against a pack compares it like any file
    assert "/" + caps.RECORD_PATH in {e["path"] for e in result["files"]["changed"]}


def test_a_layer_image_side_reads_them_from_its_tree_and_an_old_pack_is_unknown(settable):
    root = restorable_root(settable)
    set_caps(root / "usr/bin/ping", raw_v2(NET_RAW))
    (root / "tmp").mkdir()
    (root / "tmp/left-out").write_bytes(b"x")
    set_caps(root / "tmp/left-out", raw_v2(NET_RAW))
    assert caps.tree_capabilities(str(root), ExcludeRules(DEFAULT_EXCLUDES)) == {"/usr/bin/ping": "cap_net_raw=ep"}
    assert caps.recorded({"capabilities": [{"path": "/usr/bin/ping", "capabilities": "cap_net_raw=ep"}]}) == {
        "/usr/bin/ping": "cap_net_raw=ep"}
    assert caps.recorded({}) is None
    unknown = diff_capabilities(None, {"/usr/bin/ping": "cap_net_raw=ep"})
    assert unknown == {"known": False, "added": [], "removed": [], "changed": []}
