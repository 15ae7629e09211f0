"""verify's boot in a user namespace (``ansible_nspawn_userns``): a hostile service of the image cannot reach the host.

The image is the nspawn tests' base layer plus one unit, enabled at boot, whose script tries to reach the host the
way root of an unmapped systemd-nspawn container can: it makes a block device node of the host's disk (nspawn keeps
CAP_MKNOD and CAP_SYS_ADMIN), tries to read the disk's superblock through it (nspawn's device cgroup refuses that
open), mounts the disk (which that policy does not stop) and overwrites a root-owned host file (mode 0644) through
that mount. It also
writes the file's path through ``/proc/1/root`` and reads ``/proc/1/root/dev/<disk>``: in nspawn's pid namespace pid 1
is the container's own init, so these name the container's files (ENOENT, mapped or not; the lines say so).

The image boots twice, over the connection as verify drives it: unmapped (the control: the service reaches the host -
the file is overwritten) and mapped (nothing reaches the host: the node, the mount and every write are refused).
Each boot's commands entered with nsenter are the container's root too (``/proc/self/uid_map``).
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from conftest import commit_changed_image, buildah
from nspawn_support import build_test_layers, connection, new_runtime_dir, remove_runtime_dir, run, wait_clean
from test_build_userns import host_disk

from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="systemd-nspawn and buildah mounts need root")

UNTOUCHED = "the host's own\n"
RESULT = "/var/lib/nspawn-escape"
SCRIPT = textwrap.dedent('''\
    """Try to reach the host from a service of the booted image: one line per way, what it got."""
    import ctypes, os, stat, sys
    MARKER, DISK, DISK_NAME = sys.argv[1], sys.argv[2], sys.argv[3]
    NODE, MOUNTPOINT = "/dev/escape-disk", "/run/escape-mnt"  # /run is nodev


    def attempt(what, action):
        """Print ``what`` and the result of ``action()``, or the errno that refused it."""
        try:
            print(what, action())
        except OSError as exc:
            print(what, f"errno{exc.errno}")


    def superblock(path):
        with open(path, "rb") as disk:
            return "read ext" if disk.read(4096)[1080:1082] == b"\\x53\\xef" else "read other"


    def overwrite(path):
        with open(path, "w", encoding="ascii") as target:
            target.write("escaped\\n")
        return "wrote"


    major, minor = (int(part) for part in DISK.split(":"))
    attempt("mknod", lambda: os.mknod(NODE, stat.S_IFBLK | 0o600, os.makedev(major, minor)) or "made")
    attempt("nodedisk", lambda: superblock(NODE))
    os.makedirs(MOUNTPOINT, exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(NODE.encode(), MOUNTPOINT.encode(), b"ext4", 0, None) == 0:
        print("mount mounted")
        attempt("mountwrite", lambda: overwrite(MOUNTPOINT + MARKER))
        libc.umount2(MOUNTPOINT.encode(), 2)
    else:
        print(f"mount errno{ctypes.get_errno()}")
    attempt("proc1disk", lambda: superblock(f"/proc/1/root/dev/{DISK_NAME}"))
    attempt("proc1root", lambda: overwrite("/proc/1/root" + MARKER))
    ''')


def escape_image(disk: tuple[str, str], marker: Path, run_id: str) -> str:
    """The nspawn tests' base layer with ``nspawn-escape.service`` enabled (``multi-user.target``)."""
    unit = textwrap.dedent(f"""\
        [Unit]
        Description=Try to reach the host from the booted image

        [Service]
        Type=oneshot
        RemainAfterExit=yes
        ExecStart=/bin/sh -c 'python3 /usr/local/sbin/nspawn-escape.py {marker} {disk[0]} {disk[1]} > {RESULT} 2>&1'

        [Install]
        WantedBy=multi-user.target
        """)

    def change(root: str) -> None:
        Path(root, "usr/local/sbin/nspawn-escape.py").write_text(SCRIPT)
        Path(root, "etc/systemd/system/nspawn-escape.service").write_text(unit)
        wants = Path(root, "etc/systemd/system/multi-user.target.wants")
        wants.mkdir(exist_ok=True)
        os.symlink("/etc/systemd/system/nspawn-escape.service", wants / "nspawn-escape.service")

    ref = f"localhost/hpc-stateless-nspawn-test/escape:{run_id}"
    return commit_changed_image(build_test_layers()["base"], ref, change, f"hpc-test-nspawn-escape-{run_id}")


def boot(image: str, runtime_dir: str, marker: Path, userns: bool) -> dict[str, str]:
    """Boot ``image`` (mapped or not), read what its service got and the uid map of a command entered into it."""
    marker.write_text(UNTOUCHED)
    os.chmod(marker, 0o644)
    conn = connection(runtime_dir, host=f"escape-{'mapped' if userns else 'unmapped'}", image=image, boot=True,
                      userns=userns)
    try:
        conn._connect()
        rc, tries, err = run(conn, f"systemctl is-active nspawn-escape.service >/dev/null && cat {RESULT}")
        assert rc == 0, (tries, err, conn._state)
        _rc, uid_map, _err = run(conn, "cat /proc/self/uid_map")
    finally:
        conn.reset()
    return {"tries": tries, "uid_map": uid_map.split(), "marker": marker.read_text()}


DISK = host_disk(Path(tempfile.gettempdir()))


@pytest.fixture(scope="module")
def boots():
    if DISK is None:
        pytest.skip("the host's / and temporary directory are on no block device: no disk to reach")
    run_id = uuid.uuid4().hex[:8]
    runtime_dir = new_runtime_dir()
    with tempfile.TemporaryDirectory(prefix="hpc-nspawn-escape-") as tmp:
        os.chmod(tmp, 0o755)
        marker = Path(tmp) / "marker"
        try:
            # The unit's command line names the marker: the image is made for this directory.
            image = escape_image(DISK, marker, run_id)
            yield {"mapped": boot(image, runtime_dir, marker, True),
                   "unmapped": boot(image, runtime_dir, marker, False),
                   "left": wait_clean(runtime_dir)}
        finally:
            buildah("rmi", "--force", f"localhost/hpc-stateless-nspawn-test/escape:{run_id}", check=False)
            remove_runtime_dir(runtime_dir)


def test_unmapped_boot_reaches_the_host(boots):
    """The control: container root is host root; its service makes the disk's node, mounts the disk and writes the
    host's file. (Opening the node for raw bytes is refused here, EPERM: the device cgroup systemd-nspawn sets up;
    the mount is not.)"""
    tries = boots["unmapped"]["tries"]
    assert "mknod made" in tries and "mount mounted" in tries and "mountwrite wrote" in tries, tries
    assert boots["unmapped"]["marker"] == "escaped\n"
    assert boots["unmapped"]["uid_map"] == ["0", "0", "4294967295"]


def test_mapped_boot_cannot_touch_the_host(boots):
    tries = boots["mapped"]["tries"]
    assert boots["mapped"]["marker"] == UNTOUCHED, tries
    # No node of the disk, no mount (EPERM), no raw bytes through any way.
    assert "mknod errno1" in tries and "mount errno1" in tries, tries
    assert "made" not in tries and "read ext" not in tries and "mounted" not in tries and "wrote" not in tries, tries


def test_commands_entered_into_the_mapped_boot_are_its_unprivileged_root(boots):
    uids, _gids = idshift.root_ranges()
    assert boots["mapped"]["uid_map"] == ["0", str(uids.start), str(uids.count)]


def test_both_boots_leave_nothing(boots):
    assert boots["left"] == {}
