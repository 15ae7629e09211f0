# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Find the kernel in an image tree, and how a squashfs image of it can be booted.

Debian and EL keep ``/boot/vmlinuz-<version>``; EL 9 and Fedora also keep
``/usr/lib/modules/<version>/vmlinuz``. With several kernels the newest version wins unless
one is named. Every path of the image is read through :mod:`_imagepath`: a link in the image
never leads to a file of the build host.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath

_BOOT_KERNEL = re.compile(r"^vmlinuz-(.+)$")
HOST_ORIGIN = "host:"  # Kernel.origin of a kernel taken from the build host (the kernel option)
_MODULE_DIRS = ("usr/lib/modules", "lib/modules")


class KernelError(Exception):
    """No usable kernel; the message says where we looked and what to do."""


@dataclass(frozen=True)
class Kernel:
    path: str  # the file on the build host: the option's path, or the image's file resolved inside the image
    version: str
    origin: str  # path inside the image ("/boot/vmlinuz-6.1.0-9-amd64") or "host:<path>"

    def open(self, root: str) -> int:
        """A read-only descriptor of the kernel file: the build host's own (the ``kernel`` option) as
        given, the image's read inside ``root`` only (never through a link that leads out of it)."""
        if self.origin.startswith(HOST_ORIGIN):
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        return _imagepath.open_file(root, self.origin, follow_last=False)


def version_key(version: str) -> tuple:
    """Natural order: 6.1.0-10 after 6.1.0-9."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", version) if part)


def bzimage_version(path: str) -> str | None:
    """Version string of an x86 bzImage from its setup header, or None for other formats."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(0x4000 + 512)
    except OSError:
        return None
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        return None
    (offset,) = struct.unpack_from("<H", head, 0x20E)
    start = offset + 0x200
    if not offset or start >= len(head):
        return None
    raw = head[start:start + 256].split(b"\0", 1)[0].decode("ascii", "replace").strip()
    return raw.split(" ", 1)[0] or None


# What the first bytes of a kernel file say of the machine it runs on (Debian's architecture names, as the
# image's): an x86 bzImage's setup header ("HdrS" at 0x202, xloadflags bit 0 = a 64-bit kernel), an arm64
# Image's header (the magic "ARM\x64" at 0x38, before or after its EFI stub's "MZ"), either one gzip'd (Debian
# arm64's vmlinuz, when compressed). An EFI zboot image or anything else is not read: None.
KERNEL_HEAD_BYTES = 0x4000
_ARM64_MAGIC = b"ARM\x64"
_GZIP_MAGIC = b"\x1f\x8b"


def kernel_arch(head: bytes) -> str | None:
    """``amd64``, ``i386`` or ``arm64`` for the first bytes of a kernel file (:data:`KERNEL_HEAD_BYTES` are
    enough), None when the format is not one of those."""
    if head[:2] == _GZIP_MAGIC:
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 0x400)
        except zlib.error:
            return None
    if len(head) >= 0x3C and head[0x38:0x3C] == _ARM64_MAGIC:
        return "arm64"
    if len(head) >= 0x237 and head[0x202:0x206] == b"HdrS":
        protocol, = struct.unpack_from("<H", head, 0x206)
        return "amd64" if protocol >= 0x20C and head[0x236] & 1 else "i386"
    return None


def read_kernel_arch(fd: int) -> str | None:
    """:func:`kernel_arch` of an open kernel file, read from its start (the offset is left where it was)."""
    return kernel_arch(os.pread(fd, KERNEL_HEAD_BYTES, 0))


def _listing(root: str, rel: str) -> list[str]:
    try:
        return _imagepath.list_dir(root, rel)
    except OSError:
        return []


def kernels_in_tree(root: str) -> dict[str, str]:
    """``{version: path relative to root}`` of every kernel image in the tree (``/boot`` preferred).

    Directories are resolved inside the image (``/lib -> usr/lib``, a ``/boot`` link), the kernel
    file itself must be a regular file, not a link.
    """
    found: dict[str, str] = {}
    seen = set()
    for base in _MODULE_DIRS:
        directory = _imagepath.resolve_rel(root, base)
        if directory is None or directory in seen:
            continue  # /lib -> usr/lib: already seen
        seen.add(directory)
        for version in _listing(root, directory):
            candidate = _imagepath.resolve_rel(root, f"{directory}/{version}/vmlinuz", follow_last=False)
            if candidate is not None and _imagepath.is_file(root, candidate, follow_last=False):
                found[version] = candidate
    boot = _imagepath.resolve_rel(root, "boot")
    for name in _listing(root, boot) if boot is not None else []:
        match = _BOOT_KERNEL.match(name)
        candidate = f"{boot}/{name}" if boot else name
        if match and match.group(1) not in (".", "..") and not name.endswith((".sig", ".hmac")) and \
                _imagepath.is_file(root, candidate, follow_last=False):
            found[match.group(1)] = candidate
    return found


def find_kernel(root: str, version: str | None = None, host_path: str | None = None) -> Kernel:
    """The kernel to publish as ``vmlinuz``.

    ``host_path`` takes it from the build host instead of the image (its version is read
    from the bzImage header, or ``version``).
    """
    if host_path:
        if not os.path.isfile(host_path):
            raise KernelError(f"kernel {host_path} does not exist on the build host (option kernel)")
        detected = bzimage_version(host_path)
        return Kernel(path=host_path, version=version or detected or "unknown", origin=f"{HOST_ORIGIN}{host_path}")
    kernels = kernels_in_tree(root)
    if not kernels:
        raise KernelError("no kernel in the image: looked for /boot/vmlinuz-<version> and "
                          "/usr/lib/modules/<version>/vmlinuz. Install one in a layer role (Debian: "
                          "linux-image-amd64 or linux-image-arm64, EL: kernel), or take it from the build host "
                          "with the kernel option")
    if version:
        if version not in kernels:
            raise KernelError(f"kernel_version {version!r} is not in the image (found: {', '.join(sorted(kernels))})")
        chosen = version
    else:
        chosen = max(kernels, key=version_key)
    rel = kernels[chosen]
    return Kernel(path=os.path.join(root, rel), version=chosen, origin="/" + rel)


def has_modules(root: str, version: str) -> bool:
    return any(_imagepath.is_dir(root, f"{base}/{version}") for base in _MODULE_DIRS)


# -- how a squashfs root is booted ------------------------------------------------------------
DRACUT_BINARIES = ("usr/bin/dracut", "usr/sbin/dracut", "sbin/dracut", "bin/dracut")
DRACUT_LIVE_MODULES = ("usr/lib/dracut/modules.d/90dmsquash-live", "usr/lib/dracut/modules.d/90livenet")
LIVE_BOOT_SCRIPT = "usr/share/initramfs-tools/scripts/live"


def squashfs_boot_method(root: str) -> str | None:
    """``dracut`` when the image can build a live initrd with dracut, ``live-boot`` when it
    carries Debian's live-boot (its own initrd mounts a squashfs), else None."""
    if any(_imagepath.is_file(root, b) for b in DRACUT_BINARIES) and _imagepath.is_dir(root, DRACUT_LIVE_MODULES[0]):
        return "dracut"
    if _imagepath.lstat(root, LIVE_BOOT_SCRIPT) is not None:
        return "live-boot"
    return None


def _has_binary(root: str, name: str) -> bool:
    return any(_imagepath.is_file(root, f"{d}/{name}") for d in ("usr/bin", "usr/sbin", "bin", "sbin"))


# dracut 059 (Debian 12) fetches a live root over the network only with its network-legacy
# backend (its systemd-networkd backend never runs the "online" hooks livenet waits for).
LIVENET_BINARIES = ("curl", "dhclient", "arping", "pgrep")


def dracut_modules(root: str) -> tuple[list[str], list[str]]:
    """dracut modules for a squashfs root, and the binaries that keep livenet out.

    Always dmsquash-live (a squashfs on a block device); livenet + network-legacy (fetch it
    over HTTP) when the image has curl, dhclient, arping and pgrep.
    """
    missing = [name for name in LIVENET_BINARIES if not _has_binary(root, name)]
    if missing or not _imagepath.is_dir(root, DRACUT_LIVE_MODULES[1]):
        return ["dmsquash-live"], missing or ["dracut livenet module"]
    return ["dmsquash-live", "livenet", "network-legacy"], []


def image_initrd(root: str, version: str) -> str | None:
    """The image's own initrd for ``version`` (``/boot/initrd.img-<v>`` or ``/boot/initramfs-<v>.img``) as a
    link-free path inside the image, resolved there (a link to ``/etc/passwd`` is the image's, never the host's);
    read it with :func:`_imagepath.open_file`."""
    for name in (f"initrd.img-{version}", f"initramfs-{version}.img"):
        rel = _imagepath.resolve_rel(root, f"boot/{name}")
        if rel is not None and _imagepath.is_file(root, rel):
            return "/" + rel
    return None


DRACUT_KERNEL_ARGS = "root=live:<URL of the squashfs> rd.live.image rd.live.overlay.overlayfs=1 rd.neednet=1 ip=dhcp"
# The collection's first stage (roles/hpc_stateless/files/dracut/95hpcfetch): fetches the squashfs named by
# its sha256 from a list of servers (deploy adds hpc.servers=<url>,<url> hpc.image=<sha256>; docs/scale.md).
FIRST_STAGE_MODULE = "hpcfetch"
FIRST_STAGE_DIR = "usr/lib/dracut/modules.d/95hpcfetch"
FIRST_STAGE_KERNEL_ARGS = "root=hpcfetch rd.live.image rd.live.overlay.overlayfs=1 rd.neednet=1 ip=dhcp"
FIRST_STAGE_FILES = ("module-setup.sh", "hpc-fetch.sh", "hpcfetchroot.sh", "parse-hpcfetch.sh", "hpcfetch-generator.sh")
LIVE_BOOT_KERNEL_ARGS = "boot=live fetch=<URL of the squashfs>"
