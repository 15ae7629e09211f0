"""The ids of a layer built in a user namespace, mapped back before its commit (_build/idshift.py).

Real files on the test's file system (the unit tests run as root: chown and security.capability need it);
the ranges are root's subordinate range of a build, here 165536..231071.
"""

from __future__ import annotations

import os
import stat
import struct

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift

START = 165536
RANGE = idshift.IdRange(START, 65536)
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown and security.capability need root")


def v3_capability(permitted: int, rootid: int) -> bytes:
    return struct.pack("<IIIIII", 0x03000001, permitted, 0, 0, 0, rootid)


def acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_back_maps_the_range_and_keeps_other_ids():
    assert RANGE.back(START) == 0
    assert RANGE.back(START + 1234) == 1234
    assert RANGE.back(START + 65535) == 65535
    assert RANGE.back(0) == 0  # written from the host (apt's build configuration): the container's root already
    assert RANGE.back(START + 65536) == START + 65536


def test_capability_v3_becomes_v2_with_the_same_sets():
    value = v3_capability(1 << 10, START)
    assert idshift.capability_v2(value) == struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)
    v2 = struct.pack("<IIIII", 0x02000000, 1, 0, 0, 0)
    assert idshift.capability_v2(v2) == v2


def test_acl_user_and_group_entries_mapped_back():
    value = acl((1, 6, 0xFFFFFFFF), (2, 4, START + 1234), (8, 4, START + 4321), (2, 4, 7), (0x10, 4, 0xFFFFFFFF))
    assert idshift.acl_shifted(value, RANGE, RANGE) == acl(
        (1, 6, 0xFFFFFFFF), (2, 4, 1234), (8, 4, 4321), (2, 4, 7), (0x10, 4, 0xFFFFFFFF))


def test_ranges_of_buildah_mapping():
    assert idshift.ranges_of({"HostUIDMapping": True, "UIDMap": None}) is None
    assert idshift.ranges_of({}) is None
    mapping = {"HostUIDMapping": False, "UIDMap": [{"containerID": 0, "hostID": START, "size": 65536}],
               "GIDMap": [{"containerID": 0, "hostID": START + 10, "size": 65536}]}
    assert idshift.ranges_of(mapping) == (RANGE, idshift.IdRange(START + 10, 65536))
    with pytest.raises(idshift.IdShiftError, match="UIDMap"):
        idshift.ranges_of({**mapping, "UIDMap": [{"containerID": 1, "hostID": START, "size": 10}]})


def test_root_without_subordinate_ids_gets_the_line_to_add(tmp_path):
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("hpcbuild:100000:65536\n")
    subgid.write_text("root:300000:65536\n")
    with pytest.raises(idshift.IdShiftError) as raised:
        idshift.root_ranges({"uid": str(subuid), "gid": str(subgid)})
    assert f"add the line 'root:165536:65536' to {subuid}" in str(raised.value)
    assert str(subgid) not in str(raised.value)
    subuid.write_text("hpcbuild:100000:65536\nroot:165536:65536\n")
    assert idshift.root_ranges({"uid": str(subuid), "gid": str(subgid)}) == (
        RANGE, idshift.IdRange(300000, 65536))


@root_only
def test_shift_back_owners_bits_capability_acl_and_links(tmp_path):
    upper = tmp_path / "diff"
    (upper / "usr/bin").mkdir(parents=True)
    setuid = upper / "usr/bin/tool"
    setuid.write_bytes(b"x")
    os.chown(setuid, START, START + 4321)
    os.chmod(setuid, 0o6755)
    capped = upper / "usr/bin/capped"
    capped.write_bytes(b"x")
    os.chown(capped, START, START)
    os.setxattr(capped, "security.capability", v3_capability(1 << 10, START))
    outside = tmp_path / "outside"
    outside.write_text("host file")
    os.chown(outside, START + 5, START + 5)
    link = upper / "usr/bin/link"
    link.symlink_to(outside)
    os.chown(link, START, START, follow_symlinks=False)
    host_written = upper / "usr/bin/host"
    host_written.write_text("apt.conf")
    os.chown(upper / "usr/bin", START, START)
    os.chown(upper / "usr", START, START)
    os.chown(upper, START, START)

    assert idshift.shift_back(str(upper), RANGE, RANGE) == 6

    info = os.lstat(setuid)
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 4321, 0o6755)
    assert os.getxattr(capped, "security.capability") == struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)
    assert (os.lstat(link).st_uid, os.lstat(link).st_gid) == (0, 0)
    assert (os.stat(outside).st_uid, os.stat(outside).st_gid) == (START + 5, START + 5)  # never followed
    assert os.lstat(host_written).st_uid == 0
    assert os.lstat(upper).st_uid == 0 and os.lstat(upper / "usr/bin").st_gid == 0


def test_upper_dir_read_from_the_mount_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\n"
        "overlay /s/overlay/abc/merged overlay "
        "rw,relatime,lowerdir=/s/overlay/abc/mapped/0/l/X,upperdir=/s/overlay/abc/diff,workdir=/s/overlay/abc/work 0 0\n")
    assert idshift.upper_dir("/s/overlay/abc/merged", str(mounts)) == "/s/overlay/abc/diff"
    with pytest.raises(idshift.IdShiftError, match="/s/other"):
        idshift.upper_dir("/s/other", str(mounts))
