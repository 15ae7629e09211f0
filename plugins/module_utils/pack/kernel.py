# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Find the kernel in an image tree, and how a squashfs image of it can be booted.

Debian and EL keep ``/boot/vmlinuz-<version>``; EL 9 and Fedora also keep
``/usr/lib/modules/<version>/vmlinuz``. With several kernels the newest version wins unless
one is named.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

_BOOT_KERNEL = re.compile(r"^vmlinuz-(.+)$")
_MODULE_DIRS = ("usr/lib/modules", "lib/modules")


class KernelError(Exception):
    """No usable kernel; the message says where we looked and what to do."""


@dataclass(frozen=True)
class Kernel:
    path: str
    version: str
    origin: str  # path inside the image ("/boot/vmlinuz-6.1.0-9-amd64") or "host:<path>"


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


def kernels_in_tree(root: str) -> dict[str, str]:
    """``{version: path}`` of every kernel image in the tree (``/boot`` preferred)."""
    found: dict[str, str] = {}
    for base in _MODULE_DIRS:
        directory = os.path.join(root, base)
        if base == "lib/modules" and os.path.islink(os.path.join(root, "lib")):
            continue  # /lib -> usr/lib: already seen
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for version in names:
            candidate = os.path.join(directory, version, "vmlinuz")
            if os.path.isfile(candidate) and not os.path.islink(candidate):
                found[version] = candidate
    boot = os.path.join(root, "boot")
    try:
        names = os.listdir(boot)
    except OSError:
        names = []
    for name in names:
        match = _BOOT_KERNEL.match(name)
        path = os.path.join(boot, name)
        if match and os.path.isfile(path) and not os.path.islink(path) and not name.endswith((".sig", ".hmac")):
            found[match.group(1)] = path
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
        return Kernel(path=host_path, version=version or detected or "unknown", origin=f"host:{host_path}")
    kernels = kernels_in_tree(root)
    if not kernels:
        raise KernelError("no kernel in the image: looked for /boot/vmlinuz-<version> and "
                          "/usr/lib/modules/<version>/vmlinuz. Install one in a layer role (Debian: "
                          "linux-image-amd64, EL: kernel), or take it from the build host with the kernel option")
    if version:
        if version not in kernels:
            raise KernelError(f"kernel_version {version!r} is not in the image (found: {', '.join(sorted(kernels))})")
        chosen = version
    else:
        chosen = max(kernels, key=version_key)
    path = kernels[chosen]
    return Kernel(path=path, version=chosen, origin="/" + os.path.relpath(path, root))


def has_modules(root: str, version: str) -> bool:
    return any(os.path.isdir(os.path.join(root, base, version)) for base in _MODULE_DIRS)


# -- how a squashfs root is booted ------------------------------------------------------------
DRACUT_BINARIES = ("usr/bin/dracut", "usr/sbin/dracut", "sbin/dracut", "bin/dracut")
DRACUT_LIVE_MODULES = ("usr/lib/dracut/modules.d/90dmsquash-live", "usr/lib/dracut/modules.d/90livenet")
LIVE_BOOT_SCRIPT = "usr/share/initramfs-tools/scripts/live"


def squashfs_boot_method(root: str) -> str | None:
    """``dracut`` when the image can build a live initrd with dracut, ``live-boot`` when it
    carries Debian's live-boot (its own initrd mounts a squashfs), else None."""
    if any(os.path.isfile(os.path.join(root, b)) for b in DRACUT_BINARIES) and \
            os.path.isdir(os.path.join(root, DRACUT_LIVE_MODULES[0])):
        return "dracut"
    if os.path.exists(os.path.join(root, LIVE_BOOT_SCRIPT)):
        return "live-boot"
    return None


def _has_binary(root: str, name: str) -> bool:
    return any(os.path.isfile(os.path.join(root, d, name)) for d in ("usr/bin", "usr/sbin", "bin", "sbin"))


# dracut 059 (Debian 12) fetches a live root over the network only with its network-legacy
# backend (its systemd-networkd backend never runs the "online" hooks livenet waits for).
LIVENET_BINARIES = ("curl", "dhclient", "arping", "pgrep")


def dracut_modules(root: str) -> tuple[list[str], list[str]]:
    """dracut modules for a squashfs root, and the binaries that keep livenet out.

    Always dmsquash-live (a squashfs on a block device); livenet + network-legacy (fetch it
    over HTTP) when the image has curl, dhclient, arping and pgrep.
    """
    missing = [name for name in LIVENET_BINARIES if not _has_binary(root, name)]
    if missing or not os.path.isdir(os.path.join(root, DRACUT_LIVE_MODULES[1])):
        return ["dmsquash-live"], missing or ["dracut livenet module"]
    return ["dmsquash-live", "livenet", "network-legacy"], []


def image_initrd(root: str, version: str) -> str | None:
    """The image's own initrd for ``version`` (``/boot/initrd.img-<v>`` or ``/boot/initramfs-<v>.img``)."""
    for name in (f"initrd.img-{version}", f"initramfs-{version}.img"):
        path = os.path.join(root, "boot", name)
        if os.path.isfile(path):
            return path
    return None


DRACUT_KERNEL_ARGS = "root=live:<URL of the squashfs> rd.live.image rd.live.overlay.overlayfs=1 rd.neednet=1 ip=dhcp"
LIVE_BOOT_KERNEL_ARGS = "boot=live fetch=<URL of the squashfs>"
