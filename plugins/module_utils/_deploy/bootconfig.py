# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot configuration of hpc.stateless: pxelinux and iPXE entries rendered from inventory.

Files written under the boot root (paths relative to it)::

    pxelinux.cfg/default            one LABEL per published image, DEFAULT = the default image
    pxelinux.cfg/01-<mac>           per node (per MAC): that node's image and kernel arguments
    ipxe/boot.ipxe                  chains ipxe/nodes/<mac>.ipxe, else ipxe/images/<default>.ipxe
    ipxe/images/<image>.ipxe        per image
    ipxe/nodes/<mac>.ipxe           per node (per MAC)

Entries load ``<image>/vmlinuz`` and ``<image>/initrd``, the links hpc.stateless.bootlink switches,
so switching a version rewrites no config file. ``ramdisk_size`` covers the largest uncompressed
size of every published (and pending) version of the image, so a switch or a rollback never boots
an image bigger than the configured RAM disk.

Only files whose content changes are written, each through a temp file renamed into place.
Files this module wrote carry a marker line; per-node files with the marker whose node left the
inventory are removed, files without it are never touched.

Every kernel argument, from whichever source (inventory, module options, a manifest), is checked
against :data:`KERNEL_ARG_CHARS` before it reaches an entry: iPXE reads ``${...}``, ``&&``, ``||``,
``;`` and ``#`` in a ``kernel`` line as script syntax, so one such argument would make every node
run another script.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._paths import TEMP_INFIX, write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import read_manifest
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    CONTENT_DIR,
    CPIO_FORMATS,
    DEFAULT_FORMATS,
    FIRST_STAGE_FILE,
    IMAGES_DIR,
    IPXE_DIR,
    KERNEL_FILE,
    MANIFEST_FILE,
    NAME_REGEX,
    PREVIOUS_LINK,
    PXE_DIR,
    SQUASHFS_FORMAT,
    SUMS_FILE,
    check_name,
    url_quote,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import read_sums
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import (
    INITRD_LINK,
    SQUASHFS_LINK,
    BootlinkError,
    check_writable,
    deploy_lock,
    pick_artifacts,
)

MARKER = "hpc.stateless.bootconfig"
IPXE_NODES = f"{IPXE_DIR}/nodes"
IPXE_IMAGES = f"{IPXE_DIR}/images"
REPORT_LIMIT = 200  # file names listed in the result; the counts are always complete

_MAC_SEPARATED = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")
_MAC_BARE = re.compile(r"^[0-9a-f]{12}$")
_SERIAL = re.compile(r"^ttyS(\d+)(?:,(\d+)([noe]\d?)?)?$")
_SINGLE_VALUED = frozenset({"initrd", "rdinit", "root", "ramdisk_size", "ip", "init", "rootfstype"})
# What one kernel argument may hold: enough for console=ttyS0,115200n8, root=live:http://10.0.0.1/tftp/x%2By/rootfs.squashfs,
# ip=10.0.0.5::10.0.0.1:255.255.255.0:n1:eth0:off, BOOTIF=01-52-54-00-00-00-01, crashkernel=256M@16M, initrd=<image>/initrd
# (image names hold ~ and +). Nothing iPXE or pxelinux read as syntax: no $ { } & | ; # quotes, backslash, < >, spaces
# or control characters.
KERNEL_ARG_CHARS = "letters, digits and - _ . , : = / + @ % ~"
_KERNEL_ARG = re.compile(r"^[A-Za-z0-9_.,:=/+@%~-]+$")


class BootConfigError(BootlinkError):
    """Bad inventory input for the boot configuration; the message names the node/key at fault."""


# --------------------------------------------------------------------------- input


def normalise_mac(raw: object, where: str) -> str:
    """``aa:bb:cc:dd:ee:ff`` from common spellings; BootConfigError naming ``where`` otherwise."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raise BootConfigError(f"{where}: {raw!r} is a number, not a MAC address; YAML reads an unquoted "
                              "52:54:00:12:34:56 as a base-60 number: quote the MAC in the inventory")
    text = str(raw).strip().lower() if isinstance(raw, str) else ""
    if _MAC_SEPARATED.match(text):
        hexdigits = re.sub(r"[:-]", "", text)
    elif _MAC_BARE.match(text):
        hexdigits = text
    else:
        raise BootConfigError(f"{where}: {raw!r} is not a MAC address; write six hex pairs like 52:54:00:12:34:56")
    if int(hexdigits[:2], 16) & 1:
        raise BootConfigError(f"{where}: {raw!r} is a multicast address, not a NIC's MAC; check the inventory")
    if hexdigits in ("000000000000",):
        raise BootConfigError(f"{where}: {raw!r} is the all-zero address; check the inventory")
    return ":".join(hexdigits[i:i + 2] for i in range(0, 12, 2))


def _args_text(raw: object, where: str, fix: str = "") -> str:
    """Kernel arguments from a string or a list, each checked (:func:`check_kernel_args`), as one line."""
    if raw is None:
        return ""
    if isinstance(raw, (list, tuple)):
        raw = " ".join(str(item) for item in raw)
    if not isinstance(raw, str):
        raise BootConfigError(f"{where}: kernel arguments must be a string or a list of strings, got {raw!r}")
    if any(ch in raw for ch in "\n\r\0"):
        raise BootConfigError(f"{where}: kernel arguments must be one line")
    return check_kernel_args(raw, where, fix)


def check_kernel_args(text: str, where: str, fix: str = "") -> str:
    """``text`` (arguments separated by spaces or tabs) once every argument holds only :data:`KERNEL_ARG_CHARS`;
    BootConfigError naming the argument, ``where`` it came from (inventory key, option or manifest) and ``fix``
    (what to change) otherwise."""
    for token in _split_args(text):
        if not _KERNEL_ARG.match(token):
            raise BootConfigError(_bad_arg(token, where, fix))
    return text.strip()


def _split_args(text: str) -> list[str]:
    """Arguments as iPXE and pxelinux split them: at spaces and tabs only (any other character stays in one, to be
    refused)."""
    return [token for token in re.split(r"[ \t]+", text) if token]


def _bad_arg(token: str, where: str, fix: str = "") -> str:
    bad = "".join(sorted({ch for ch in token if not _KERNEL_ARG.match(ch)}))
    return (f"{where}: kernel argument {token!r} holds {bad!r}, which iPXE or pxelinux would read as script syntax "
            f"(or which no kernel argument needs); a kernel argument may hold only {KERNEL_ARG_CHARS}: "
            + (fix or "remove the argument or write it without them"))


@dataclass(frozen=True)
class Node:
    name: str
    macs: tuple[str, ...]
    image: str
    kernel_args: str
    groups: tuple[str, ...] = ()


def default_boot_image(default_image: str | None, images: Iterable[str]) -> str:
    """The image a node boots when it names none (the PXE default entry): ``default_image``
    (hpc_stateless_boot_default_image), else the first image by name; empty without images."""
    return default_image or min(images, default="")


def parse_nodes(raw_nodes: Iterable[Mapping[str, Any]], images: Iterable[str], default_image: str) -> list[Node]:
    """Validate ``nodes`` ({name, mac (str or list), image, kernel_args}); errors name the node and key."""
    known = set(images)
    seen_macs: dict[str, str] = {}
    seen_names: set[str] = set()
    nodes: list[Node] = []
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, Mapping):
            raise BootConfigError(f"nodes[{index}]: expected a mapping with name and mac, got {raw!r}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise BootConfigError(f"nodes[{index}]: 'name' is required")
        if not name.isprintable():  # it is written into a comment line of the node's entries
            raise BootConfigError(f"nodes[{index}]: name {name!r} holds a line break or another control character; "
                                  "use the inventory hostname")
        where = f"nodes[{index}] ({name})"
        if name in seen_names:
            raise BootConfigError(f"{where}: node listed twice")
        seen_names.add(name)
        raw_macs = raw.get("mac")
        if raw_macs in (None, "", []):
            raise BootConfigError(f"{where}: 'mac' is required (set hpc_stateless_boot_mac for the host)")
        if not isinstance(raw_macs, (list, tuple)):
            raw_macs = [raw_macs]
        macs = []
        for position, raw_mac in enumerate(raw_macs):
            mac = normalise_mac(raw_mac, f"{where}.mac" + (f"[{position}]" if len(raw_macs) > 1 else ""))
            if mac in seen_macs and seen_macs[mac] != name:
                raise BootConfigError(f"{where}.mac: {mac} is also the MAC of node {seen_macs[mac]}; "
                                      "each MAC must belong to one node")
            seen_macs[mac] = name
            macs.append(mac)
        image = raw.get("image") or default_image
        if image not in known:
            raise BootConfigError(f"{where}.image: unknown image {image!r} (known images: "
                                  f"{', '.join(sorted(known)) or 'none'}); fix hpc_stateless_boot_image of the host")
        nodes.append(Node(name, tuple(dict.fromkeys(macs)), image,
                          _args_text(raw.get("kernel_args"), f"{where}.kernel_args",
                                     "fix hpc_stateless_boot_kernel_args of the host"),
                          tuple(str(group) for group in raw.get("groups") or ())))
    return nodes


# --------------------------------------------------------------------------- kernel arguments


def _arg_identity(token: str) -> str:
    key, _sep, value = token.partition("=")
    if key == "console":
        return "console=" + value.split(",", 1)[0]
    if key in _SINGLE_VALUED:
        return key + "="
    return token


def merge_args(*sources: str) -> str:
    """Join argument strings; a later ``key=`` (console: per device) replaces an earlier one in place.

    A bare ``console=ttyS0`` does not replace ``console=ttyS0,115200n8``: it names the same
    device and would only drop the speed. Every argument is checked again here, the last step before
    an entry, so no source can bring script syntax into it (callers check each source first, to name it).
    """
    order: list[str] = []
    values: dict[str, str] = {}
    for source in sources:
        for token in _split_args(source):
            if not _KERNEL_ARG.match(token):
                raise BootConfigError(_bad_arg(token, "kernel arguments"))
            identity = _arg_identity(token)
            if identity not in values:
                order.append(identity)
            elif identity.startswith("console=") and token == identity and values[identity] != identity:
                continue
            values[identity] = token
    return " ".join(values[identity] for identity in order)


@dataclass(frozen=True)
class BootOptions:
    serial_console: str = "ttyS0,115200n8"
    ip: str = "dhcp"
    rdinit: str = "/sbin/init"
    ramdisk_headroom: int = 10
    ramdisk_round_mib: int = 256
    boot_url: str = ""
    prompt_timeout: int = 30
    ipappend: int = 2

    def check(self) -> None:
        """BootConfigError naming the option whose value would bring other syntax into an entry."""
        self.serial_directive()
        for option, value in (("ip", self.ip), ("rdinit", self.rdinit)):
            if value and not _KERNEL_ARG.match(value):
                raise BootConfigError(_bad_arg(f"{option}={value}", option))
        if self.boot_url and not _KERNEL_ARG.match(self.boot_url):
            raise BootConfigError(f"boot_url {self.boot_url!r} (hpc_stateless_boot_url): the URL goes into iPXE's kernel line "
                                  f"and the root=live: argument, so it may hold only {KERNEL_ARG_CHARS}; "
                                  "percent-encode anything else")

    def serial_directive(self) -> str:
        """pxelinux ``SERIAL port speed`` for the console, or '' without a serial console."""
        if not self.serial_console:
            return ""
        match = _SERIAL.match(self.serial_console)
        if not match:
            raise BootConfigError(f"serial_console {self.serial_console!r}: want ttyS<N>[,<baud>[<parity><bits>]], "
                                  "e.g. ttyS0,115200n8, or '' for none")
        return f"SERIAL {match.group(1)} {match.group(2) or 115200}"


def ramdisk_kib(sizes: Iterable[int], headroom_percent: int, round_mib: int = 256) -> int:
    """``ramdisk_size`` (KiB) ≥ the largest uncompressed size plus headroom, rounded up to ``round_mib``.

    The coarse rounding keeps the value (and so every node's file) unchanged across most
    version bumps; a RAM disk is allocated as it fills, so a larger size costs nothing.
    """
    largest = max(sizes, default=0)
    with_headroom = largest * (100 + max(headroom_percent, 0)) / 100
    step = max(round_mib, 1) * 2**20
    return max(1, math.ceil(with_headroom / step)) * step // 1024


@dataclass(frozen=True)
class ImageBoot:
    """What every entry of one image loads and passes."""

    name: str
    format: str
    ramdisk_kib: int
    args: str  # without initrd=
    arch: str = ""  # the architecture of the version being served (manifest_arch), "" when its manifest names none

    def pxe_args(self, extra: str = "") -> str:
        return merge_args(f"initrd={self.name}/{INITRD_LINK}", self.args, extra)

    def ipxe_args(self, extra: str = "") -> str:
        return merge_args(f"initrd={INITRD_LINK}", self.args, extra)


SQUASHFS_URL_PLACEHOLDER = "<URL of the squashfs>"
DEFAULT_SQUASHFS_ARGS = f"root=live:{SQUASHFS_URL_PLACEHOLDER} rd.live.image rd.neednet=1"


def manifest_arch(manifest: Mapping[str, Any]) -> str:
    """The architecture a packed version boots on: the manifest's ``arch``, else the one pack read from its kernel's
    header (``kernel.arch``); "" when it names neither."""
    kernel = manifest.get("kernel")
    arch = manifest.get("arch") or (kernel.get("arch") if isinstance(kernel, Mapping) else None)
    return arch if isinstance(arch, str) else ""


def published_manifests(boot_root: str, image: str) -> dict[str, dict[str, Any]]:
    """``{version: manifest}`` of every published version of ``image``."""
    directory = os.path.join(boot_root, IMAGES_DIR, image)
    found: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.name.startswith(".") or entry.name == PREVIOUS_LINK or not entry.is_dir(follow_symlinks=False):
                continue
            path = os.path.join(entry.path, MANIFEST_FILE)
            if os.path.isfile(path):
                found[entry.name] = read_manifest(path)
    return found


def served_version(boot_root: str, image: str) -> str | None:
    try:
        target = os.readlink(os.path.join(boot_root, image))
    except OSError:
        return None
    return target.rsplit("/", 1)[-1]


def image_boot(name: str, spec: Mapping[str, Any], manifests: list[dict[str, Any]], options: BootOptions,
               squashfs_url: str = "") -> ImageBoot:
    """Kernel arguments of image ``name`` from its definition (``formats``, ``kernel_args``) and manifests.

    ``manifests``: every published or pending version; the last one is the version being served
    (its initrd's arguments are used for squashfs). ``squashfs_url`` replaces the squashfs URL under
    ``boot_url`` (several boot servers: the content store's URL on the server a try fetches from).
    """
    formats = spec.get("formats") or list(DEFAULT_FORMATS)
    if isinstance(formats, str):
        formats = [formats]
    fmt = formats[0]
    if fmt in CPIO_FORMATS:
        format_args = f"rdinit={options.rdinit}"
    elif fmt == SQUASHFS_FORMAT:
        if not options.boot_url and not squashfs_url:
            raise BootConfigError(f"hpc_stateless_images.{name}.formats: {fmt} fetches its root at boot; set boot_url "
                                  "(hpc_stateless_boot_url) to the URL of the boot root, e.g. http://10.0.0.1/tftpboot")
        initrd = (manifests[-1].get("initrd") if manifests else None) or {}
        template = (initrd.get("kernel_args") if isinstance(initrd, dict) else "") or DEFAULT_SQUASHFS_ARGS
        key = "initrd.kernel_args"
        first_stage = initrd.get("first_stage") if isinstance(initrd, dict) else None
        if squashfs_url and isinstance(first_stage, Mapping) and first_stage.get("kernel_args"):
            # Several boot servers and an initrd that carries the first stage: it fetches the image by hpc.servers=
            # and hpc.image= (added by the boot script), from any server, checked against its hash.
            template, key = first_stage["kernel_args"], "initrd.first_stage.kernel_args"
        where = f"image {name} version {manifests[-1].get('version')}: manifest.json {key}" if manifests else \
            "the default squashfs arguments"
        if not isinstance(template, str):
            raise BootConfigError(f"{where}: not a string ({template!r}); pack the image again")
        url = squashfs_url or f"{options.boot_url.rstrip('/')}/{url_quote(name)}/{SQUASHFS_LINK}"
        format_args = _args_text(template.replace(SQUASHFS_URL_PLACEHOLDER, url),
                                 where, "pack the image again (the initrd's arguments come from pack)")
    else:
        raise BootConfigError(f"hpc_stateless_images.{name}.formats[0]: unknown format {fmt!r}")
    sizes = [int(manifest.get("uncompressed_size") or 0) for manifest in manifests]
    kib = ramdisk_kib(sizes, options.ramdisk_headroom, options.ramdisk_round_mib)
    console = (f"console=tty0 console={options.serial_console}" if options.serial_console else "")
    ip = f"ip={options.ip}" if options.ip else ""
    image_args = _args_text(spec.get("kernel_args"), f"hpc_stateless_images.{name}.kernel_args")
    arch = manifest_arch(manifests[-1]) if manifests else ""
    return ImageBoot(name, fmt, kib, merge_args(format_args, f"ramdisk_size={kib}", console, ip, image_args), arch)


# --------------------------------------------------------------------------- rendering


def _header(comment: str, what: str) -> str:
    return f"{comment} Managed by {MARKER}: {what}. Do not edit: the next deploy overwrites it.\n"


def _pxe_label(boot: ImageBoot, options: BootOptions, extra: str = "") -> str:
    lines = [f"LABEL {boot.name}",
             f"  KERNEL {boot.name}/{KERNEL_FILE}",
             f"  APPEND {boot.pxe_args(extra)}"]
    if options.ipappend:
        lines.append(f"  IPAPPEND {options.ipappend}")
    return "\n".join(lines) + "\n"


def render_pxe_default(boots: Mapping[str, ImageBoot], default_image: str, options: BootOptions) -> str:
    head = [_header("#", "default entry for nodes without their own file")]
    serial = options.serial_directive()
    if serial:
        head.append(serial + "\n")
    head.append(f"DEFAULT {default_image}\nPROMPT 1\nTIMEOUT {options.prompt_timeout}\n")
    return "".join(head) + "".join("\n" + _pxe_label(boots[name], options) for name in sorted(boots))


def _ipxe_base(options: BootOptions) -> str:
    # A root-relative path resolves against the script's own URL (same server, same protocol).
    return options.boot_url.rstrip("/") if options.boot_url else ""


def _ipxe_body(boot: ImageBoot, options: BootOptions, extra: str = "") -> str:
    base = _ipxe_base(options)
    # Over HTTP the image name is a URL path segment; over TFTP (no boot_url) a plain path.
    name = url_quote(boot.name) if base else boot.name
    return (f"kernel {base}/{name}/{KERNEL_FILE} {boot.ipxe_args(extra)}\n"
            f"initrd --name {INITRD_LINK} {base}/{name}/{INITRD_LINK}\n"
            "boot\n")


def render_ipxe_entry(boot: ImageBoot, options: BootOptions, what: str, extra: str = "") -> str:
    return "#!ipxe\n" + _header("#", what) + _ipxe_body(boot, options, extra)


# iPXE's ${buildarch} on the machines of each image architecture (Debian's names, as pack records them). A BIOS
# iPXE (undionly.kpxe) is an i386 build on an x86_64 machine too, so amd64 images answer both.
IPXE_BUILDARCH = {"amd64": ("x86_64", "i386"), "i386": ("i386",), "arm64": ("arm64",)}


def arch_defaults(boots: Mapping[str, ImageBoot], default_image: str) -> dict[str, str]:
    """``{architecture: image}`` a node without its own file boots on a machine of another architecture than the
    default image's: the first image (by name) of that architecture. The default image's own architecture, and
    images whose architecture is unknown or has no iPXE name (:data:`IPXE_BUILDARCH`), get no entry."""
    own = boots[default_image].arch if default_image in boots else ""
    found: dict[str, str] = {}
    for name in sorted(boots):
        arch = boots[name].arch
        if arch and arch != own and arch in IPXE_BUILDARCH and arch not in found:
            found[arch] = name
    return found


def render_ipxe_boot(default_image: str, other_arches: Mapping[str, str] | None = None) -> str:
    """The entry point: the node's own file, else the default image; with ``other_arches`` ({architecture: image},
    :func:`arch_defaults`) a machine whose ``${buildarch}`` is one of theirs gets that image instead."""
    head = "#!ipxe\n" + _header("#", "iPXE entry point; point DHCP's filename here")
    chain = "chain --autofree nodes/${netX/mac:hexhyp}.ipxe || chain --autofree images/%s.ipxe\n"
    if not other_arches:
        return head + chain % default_image
    lines = [f"iseq ${{buildarch}} {ipxe_arch} && goto arch-{arch} ||\n"
             for arch in sorted(other_arches) for ipxe_arch in IPXE_BUILDARCH[arch]]
    lines += [chain % default_image, "exit 1\n"]
    for arch in sorted(other_arches):
        lines += [f":arch-{arch}\n", chain % other_arches[arch], "exit 1\n"]
    return head + "".join(lines)


# --------------------------------------------------------------------------- several boot servers (docs/scale.md)

SERVER_TOKEN = "@hpc-server@"  # stands for the URL of the server a try fetches from (iPXE's ${hpc-s}) in the args
_SERVER_URL = re.compile(r"^https?://[A-Za-z0-9_.:@%~+-]+(/[A-Za-z0-9_.,:=/+@%~-]*)?$")


@dataclass(frozen=True)
class Servers:
    """The boot servers in inventory order and the orders nodes try them in (order 0: inventory order, then one
    per mapped node group: its own servers first)."""

    names: tuple[str, ...]
    urls: tuple[str, ...]
    orders: tuple[tuple[int, ...], ...]
    group_order: Mapping[str, int]

    def order_of(self, node: Node) -> int:
        return next((self.group_order[group] for group in node.groups if group in self.group_order), 0)


def parse_servers(raw_servers: Iterable[Mapping[str, Any]], raw_map: Mapping[str, Any] | None) -> Servers | None:
    """Validate ``servers`` ([{name, url}]) and ``server_map`` ({node group: [server name]}); None without servers.

    Errors name the server, URL or group at fault: a server or URL listed twice, a URL iPXE or a kernel argument
    cannot carry, a group mapped to no server or to a host that is not a boot server."""
    names: list[str] = []
    urls: list[str] = []
    for index, raw in enumerate(raw_servers or []):
        name, url = str(raw.get("name") or ""), str(raw.get("url") or "").rstrip("/")
        where = f"servers[{index}] ({name or '?'})"
        if not name:
            raise BootConfigError(f"servers[{index}]: 'name' is required (the inventory host of the boot server)")
        if name in names:
            raise BootConfigError(f"{where}: boot server {name!r} is listed twice; list each host once in the group "
                                  "hpc_stateless_boot_servers names")
        if not _SERVER_URL.match(url):
            raise BootConfigError(f"{where}: url {url!r} is not an http:// or https:// base URL of letters, digits "
                                  f"and {KERNEL_ARG_CHARS}; set hpc_stateless_boot_server_url of the host")
        if url in urls:
            raise BootConfigError(f"{where}: url {url} is also the URL of boot server {names[urls.index(url)]!r}; "
                                  "each boot server needs its own hpc_stateless_boot_server_url")
        names.append(name)
        urls.append(url)
    if not names:
        if raw_map:
            raise BootConfigError("server_map (hpc_stateless_boot_server_map) maps node groups to boot servers, but "
                                  "there are no boot servers; set hpc_stateless_boot_servers to their inventory group")
        return None
    orders: list[tuple[int, ...]] = [tuple(range(len(names)))]
    group_order: dict[str, int] = {}
    for group, own in (raw_map or {}).items():
        own = [own] if isinstance(own, str) else list(own or [])
        if not own:
            raise BootConfigError(f"server_map.{group}: node group {group!r} is mapped to no boot server; map it to "
                                  f"one or more of {', '.join(names)} (hpc_stateless_boot_server_map)")
        unknown = [str(server) for server in own if server not in names]
        if unknown:
            raise BootConfigError(f"server_map.{group}: {', '.join(unknown)} not a boot server (boot servers: "
                                  f"{', '.join(names)}); fix hpc_stateless_boot_server_map or the group "
                                  "hpc_stateless_boot_servers names")
        first = [names.index(server) for server in dict.fromkeys(own)]
        order = tuple(first + [index for index in range(len(names)) if index not in first])
        if order not in orders:
            orders.append(order)
        group_order[str(group)] = orders.index(order)
    return Servers(tuple(names), tuple(urls), tuple(orders), group_order)


@dataclass(frozen=True)
class Release:
    """The hashes of what the nodes of one image load: the version a per-image boot script names."""

    version: str
    kernel: str
    initrd: str
    squashfs: str | None

    @property
    def image(self) -> str:
        """What the first stage fetches and checks (``hpc.image=``): the squashfs, else the initrd (the image)."""
        return self.squashfs or self.initrd


def release_of(manifest: Mapping[str, Any], directory: str, fmt: str) -> Release:
    """The release of the version whose ``manifest`` lies in ``directory`` (published, or a pack output checked by
    this run), its boot files' hashes read from the SHA256SUMS next to it."""
    sums_path = os.path.join(directory, SUMS_FILE)
    sums = read_sums(sums_path)
    _fmt, initrd, squashfs = pick_artifacts(directory, dict(manifest), fmt)
    names = [KERNEL_FILE, initrd] + ([squashfs] if squashfs else [])
    missing = [name for name in names if name not in sums]
    if missing:
        raise BootConfigError(f"{sums_path}: no checksum for {', '.join(missing)}; pack the image again")
    return Release(str(manifest["version"]), sums[KERNEL_FILE], sums[initrd], sums[squashfs] if squashfs else None)


def render_ipxe_release(boot: ImageBoot, release: Release, servers: Servers, what: str) -> str:
    """The per-image boot script of several boot servers: one order block per server order, then one try per
    server (kernel and initrd from the same server, by hash), the next server when a try fails."""
    lines = ["#!ipxe", _header("#", what).rstrip("\n"),
             f"# hpc.stateless release {boot.name} {release.version} kernel={release.kernel} initrd={release.initrd} "
             f"image={release.image}",
             "isset ${hpc-order} || set hpc-order 0"]
    for number in range(1, len(servers.orders)):
        lines.append(f"iseq ${{hpc-order}} {number} && goto order-{number} ||")
    for number, order in enumerate(servers.orders):
        lines.append(f":order-{number}")
        lines += [f"set hpc-s{position} {servers.urls[index]}" for position, index in enumerate(order)]
        lines += [f"set hpc-servers {','.join(servers.urls[index] for index in order)}", "goto try-0"]
    store = f"/{CONTENT_DIR}/"
    args = boot.ipxe_args().replace(SERVER_TOKEN, "${hpc-s}")
    for position in range(len(servers.urls)):
        fail = f"try-{position + 1}" if position + 1 < len(servers.urls) else "failed"
        lines += [f":try-{position}", "imgfree", f"set hpc-s ${{hpc-s{position}}}",
                  f"kernel ${{hpc-s}}{store}{release.kernel} {args} hpc.servers=${{hpc-servers}} "
                  f"hpc.image={release.image} ${{hpc-args}} || goto {fail}",
                  f"initrd --name {INITRD_LINK} ${{hpc-s}}{store}{release.initrd} || goto {fail}",
                  f"boot || goto {fail}"]
    lines += [":failed", f"echo hpc.stateless: no boot server served image {boot.name} {release.version}; "
              "rebooting in 10 s", "sleep 10", "reboot", ""]
    return "\n".join(lines)


def render_ipxe_node_chain(image: str, order: int, extra: str, what: str) -> str:
    """A node's script with several boot servers: its server order and extra arguments, then the image's script."""
    return ("#!ipxe\n" + _header("#", what) + (f"set hpc-order {order}\n" if order else "")
            + (f"set hpc-args {extra}\n" if extra else "") + f"chain --autofree /{IPXE_IMAGES}/{image}.ipxe\n")


def render_ipxe_first(servers: Servers) -> str:
    """The first-stage loader's script (TFTP or HTTP): each server's entry point in turn."""
    tries = " || ".join(f"chain --autofree {url}/{IPXE_DIR}/boot.ipxe" for url in servers.urls)
    return ("#!ipxe\n" + _header("#", "first stage: the boot servers' iPXE entry points in turn")
            + "isset ${ip} || dhcp\n" + tries + " || goto failed\n"
            + ":failed\necho hpc.stateless: no boot server answered; rebooting in 10 s\nsleep 10\nreboot\n")


def pxe_node_file(mac: str) -> str:
    return f"{PXE_DIR}/01-{mac.replace(':', '-')}"


def ipxe_node_file(mac: str) -> str:
    return f"{IPXE_NODES}/{mac.replace(':', '-')}.ipxe"


def plan_files(nodes: list[Node], boots: Mapping[str, ImageBoot], default_image: str,
               options: BootOptions, servers: Servers | None = None,
               releases: Mapping[str, Release] | None = None) -> dict[str, str]:
    """Every managed file: relative path -> content. With ``servers``, the iPXE scripts name the hashes of
    ``releases`` and try every server (docs/scale.md); the pxelinux entries stay as they are."""
    files = {f"{PXE_DIR}/default": render_pxe_default(boots, default_image, options),
             f"{IPXE_DIR}/boot.ipxe": render_ipxe_boot(default_image, arch_defaults(boots, default_image))}
    if servers is not None:
        files[FIRST_STAGE_FILE] = render_ipxe_first(servers)
    for name, boot in boots.items():
        files[f"{IPXE_IMAGES}/{name}.ipxe"] = (
            render_ipxe_entry(boot, options, f"image {name}") if servers is None or releases is None else
            render_ipxe_release(boot, releases[name], servers, f"image {name} {releases[name].version}"))
    serial = options.serial_directive()
    # Nodes of one image with the same extra arguments share everything but the header line:
    # render each such body once (10,000 nodes are a handful of distinct bodies).
    pxe_bodies: dict[tuple[str, str], str] = {}
    ipxe_bodies: dict[tuple[str, str], str] = {}
    for node in nodes:
        key = (node.image, node.kernel_args)
        pxe_body = pxe_bodies.get(key)
        if pxe_body is None:
            boot = boots[node.image]
            pxe_body = pxe_bodies[key] = ((serial + "\n" if serial else "") + f"DEFAULT {boot.name}\nPROMPT 0\n\n"
                                          + _pxe_label(boot, options, node.kernel_args))
            ipxe_bodies[key] = _ipxe_body(boot, options, node.kernel_args)
        what = f"node {node.name}, image {node.image}"
        pxe = _header("#", what) + pxe_body
        ipxe = ("#!ipxe\n" + _header("#", what) + ipxe_bodies[key] if servers is None else
                render_ipxe_node_chain(node.image, servers.order_of(node), node.kernel_args, what))
        for mac in node.macs:
            files[pxe_node_file(mac)] = pxe
            files[ipxe_node_file(mac)] = ipxe
    return files


# --------------------------------------------------------------------------- writing


@dataclass
class SyncResult:
    written: list[str]
    removed: list[str]
    unchanged: int
    diffs: list[dict[str, str]]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""


def _is_ours(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            head = handle.read(256)
    except (OSError, UnicodeDecodeError):
        return False
    return f"Managed by {MARKER}" in head


def _stale(root: str, directory: str, wanted: set[str], pattern: re.Pattern[str]) -> list[str]:
    found: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(os.path.join(root, directory)):
            rel = f"{directory}/{entry.name}"
            if rel not in wanted and pattern.match(entry.name) and entry.is_file(follow_symlinks=False) \
                    and _is_ours(entry.path):
                found.append(rel)
    return sorted(found)


_STALE_PATTERNS = ((PXE_DIR, re.compile(r"^01-[0-9a-f]{2}(-[0-9a-f]{2}){5}$")),
                   (IPXE_NODES, re.compile(r"^[0-9a-f]{2}(-[0-9a-f]{2}){5}\.ipxe$")),
                   (IPXE_IMAGES, re.compile(rf"^{NAME_REGEX}\.ipxe$")))


STATE_FILE = ".hpc-stateless-bootconfig.state"
# While it exists, the boot server's nginx answers 503 for ipxe/ (role boot_server): deploy.yml writes it on every
# server before any switches, and the render that switches a server removes it (a server that missed its switch
# refuses to serve its old scripts until a deploy brings it level; docs/scale.md).
SWITCH_FENCE = ".hpc-stateless-switch"
#: The PXE boot loader copied from the boot host into the boot root (option loader_dirs): the first of each found.
LOADER_FILES = ("pxelinux.0", "ldlinux.c32")
# The temp name write_atomic gives a file before renaming it into place (``.<name>.new-<8 hex>``;
# releases before it used ``.<name>.<8 hex>``, still removed after an upgrade).
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:" + re.escape(TEMP_INFIX[1:]) + r")?[0-9a-f]{8}$")
# Where this module writes, and the names it writes there (temp files of other names are not ours).
_MANAGED_NAMES = (("", re.compile("^(" + "|".join(map(re.escape, (STATE_FILE, FIRST_STAGE_FILE, *LOADER_FILES)))
                                  + ")$")),
                  (PXE_DIR, re.compile(r"^(default|01-[0-9a-f]{2}(-[0-9a-f]{2}){5})$")),
                  (IPXE_DIR, re.compile(r"^boot\.ipxe$")),
                  *_STALE_PATTERNS[1:])


def remove_interrupted_writes(root: str) -> list[str]:
    """Remove the temp files of renders killed between writing a file and renaming it (hold the lock)."""
    removed = []
    for directory, names in _MANAGED_NAMES:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in os.scandir(os.path.join(root, directory)):
                match = _TEMP_NAME.match(entry.name)
                if match and names.match(match.group("name")) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                    removed.append(os.path.join(directory, entry.name))
    return sorted(removed)


def _digest(content: str) -> str:
    return hashlib.blake2b(content.encode("utf-8"), digest_size=16).hexdigest()


def _load_state(root: str) -> dict[str, list]:
    """What the last render wrote: rel -> [size, mtime_ns, inode, digest]; empty when unusable."""
    try:
        with open(os.path.join(root, STATE_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        return data["files"] if data.get("version") == 1 and isinstance(data.get("files"), dict) else {}
    except (OSError, ValueError, KeyError, AttributeError):
        return {}


def _save_state(root: str, state: dict[str, list]) -> None:
    write_atomic(os.path.join(root, STATE_FILE), json.dumps({"version": 1, "files": state}, separators=(",", ":")),
                 sync=False)


def _stamp(st: os.stat_result, digest: str) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ino, digest]


def sync_files(root: str, files: Mapping[str, str], check_mode: bool = False, remove_stale: bool = True,
               diff_limit: int = 0) -> SyncResult:
    """Write the files whose content differs (atomically), remove stale managed ones.

    A file whose size, mtime and inode are what the last render recorded, with the same
    content digest, is known unchanged without reading it; any other file is read and compared,
    so an edit by hand is still found and overwritten.
    """
    result = SyncResult([], [], 0, [])
    # A directory where an entry goes cannot be replaced by a rename: refused before anything is written.
    in_the_way = [os.path.join(root, rel) for rel in sorted(files) if os.path.isdir(os.path.join(root, rel))
                  and not os.path.islink(os.path.join(root, rel))]
    if in_the_way:
        raise BootConfigError(f"{', '.join(in_the_way)}: a directory where the boot entry (a file) goes; nothing was "
                              "written. Move it out of the boot root (bootconfig writes only files there) and run "
                              "again")
    if not check_mode:
        result.removed.extend(remove_interrupted_writes(root))
    made_dirs: set[str] = set()
    state = _load_state(root)
    new_state: dict[str, list] = {}
    for rel in sorted(files):
        content = files[rel]
        digest = _digest(content)
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if st is not None and state.get(rel) == _stamp(st, digest):
            result.unchanged += 1
            new_state[rel] = state[rel]
            continue
        old = _read(path) if st is not None else None
        if old == content:
            result.unchanged += 1
            new_state[rel] = _stamp(st, digest)
            continue
        result.written.append(rel)
        if len(result.diffs) < diff_limit:
            result.diffs.append({"before": old or "", "after": content,
                                 "before_header": rel if old is not None else "/dev/null", "after_header": rel})
        if check_mode:
            continue
        directory = os.path.dirname(path)
        if directory not in made_dirs:
            os.makedirs(directory, exist_ok=True)
            made_dirs.add(directory)
        write_atomic(path, content, sync=False)  # rendered in bulk; a crash is repaired by the next render
        new_state[rel] = _stamp(os.lstat(path), digest)
    if remove_stale:
        wanted = set(files)
        for directory, pattern in _STALE_PATTERNS:
            for rel in _stale(root, directory, wanted, pattern):
                result.removed.append(rel)
                if len(result.diffs) < diff_limit:
                    result.diffs.append({"before": _read(os.path.join(root, rel)) or "", "after": "",
                                         "before_header": rel, "after_header": "/dev/null"})
                if not check_mode:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(root, rel))
    if not check_mode and new_state != state:
        _save_state(root, new_state)
    return result


def find_loaders(dirs: Iterable[str]) -> dict[str, str]:
    """``{file: path}``: for each of :data:`LOADER_FILES`, the first of ``dirs`` (the boot host's) holding it."""
    found: dict[str, str] = {}
    for directory in dirs:
        for name in LOADER_FILES:
            path = os.path.join(directory, name)
            if name not in found and os.path.isfile(path):
                found[name] = path
    return found


def _read_bytes(path: str) -> bytes | None:
    """A regular file's bytes; None when there is none (a link or anything else under the name is replaced)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def sync_loaders(root: str, dirs: Iterable[str], check_mode: bool = False) -> tuple[dict[str, str], list[str]]:
    """Copy the boot loader found in ``dirs`` into ``root`` where its bytes differ (atomically); returns
    ``({file: source}, [files written])``. Nothing found is no error: the site may serve its own loader."""
    found = find_loaders(dirs)
    written = []
    for name, source in sorted(found.items()):
        with open(source, "rb") as handle:
            data = handle.read()
        target = os.path.join(root, name)
        if _read_bytes(target) == data:
            continue
        written.append(name)
        if not check_mode:
            write_atomic(target, data, 0o644)
    return found, written


# --------------------------------------------------------------------------- the module's whole job


def render(params: Mapping[str, Any], check_mode: bool = False,
           on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validate inventory input, render every entry and write what changed; the bootconfig module's logic.

    ``params``: boot_root, images ({name: {formats, kernel_args}}), default_image, nodes,
    pending_manifests, serial_console, ip, rdinit, ramdisk_headroom, ramdisk_round_mib, boot_url, prompt_timeout,
    ipappend, remove_stale, diff_limit, lock_timeout, loader_dirs (copy the PXE boot loader from the first of them
    holding each file), validate_only (check the input, read and write nothing).
    """
    root = os.path.abspath(params["boot_root"])
    images = params.get("images") or {}
    if not isinstance(images, Mapping) or not images:
        raise BootConfigError("images: no image definitions (hpc_stateless_images is empty or missing)")
    for name in images:
        check_name("image", name)
    default_image = default_boot_image(params.get("default_image"), images)
    if default_image not in images:
        raise BootConfigError(f"default_image: unknown image {default_image!r} (known images: "
                              f"{', '.join(sorted(images))}); fix hpc_stateless_boot_default_image")
    options = BootOptions(
        serial_console=params.get("serial_console") if params.get("serial_console") is not None else "ttyS0,115200n8",
        ip=params.get("ip") if params.get("ip") is not None else "dhcp",
        rdinit=params.get("rdinit") or "/sbin/init",
        ramdisk_headroom=int(params.get("ramdisk_headroom") if params.get("ramdisk_headroom") is not None else 10),
        ramdisk_round_mib=int(params.get("ramdisk_round_mib") or 256),
        boot_url=params.get("boot_url") or "",
        prompt_timeout=int(params.get("prompt_timeout") if params.get("prompt_timeout") is not None else 30),
        ipappend=int(params.get("ipappend") if params.get("ipappend") is not None else 2),
    )
    options.check()  # validate early
    nodes = parse_nodes(params.get("nodes") or [], images, default_image)
    servers = parse_servers(params.get("servers") or [], params.get("server_map"))
    boot_formats: dict[str, str] = {}
    for name in sorted(images):
        spec = images[name] if isinstance(images[name], Mapping) else {}
        _args_text(spec.get("kernel_args"), f"hpc_stateless_images.{name}.kernel_args")
        formats = spec.get("formats") or list(DEFAULT_FORMATS)
        first = formats if isinstance(formats, str) else formats[0]
        if first == SQUASHFS_FORMAT and not options.boot_url and servers is None:
            raise BootConfigError(f"hpc_stateless_images.{name}.formats: squashfs fetches its root at boot; set boot_url "
                                  "(hpc_stateless_boot_url) to the URL of the boot root, e.g. http://10.0.0.1/tftpboot")
        boot_formats[name] = first
    if params.get("validate_only"):
        # The format each image boots, so the caller publishes it (bootlink's format) by the rule the entries use.
        return {"changed": False, "boot_root": root, "files": 0, "written": [], "written_count": 0, "removed": [],
                "removed_count": 0, "unchanged": 0, "nodes": len(nodes), "loaders": {},
                "images": {name: {"format": fmt} for name, fmt in boot_formats.items()}, "diff": []}

    pending: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for path in params.get("pending_manifests") or []:
        manifest = read_manifest(path)
        pending.setdefault(manifest["image"], []).append((manifest, os.path.dirname(os.path.abspath(path))))
    used = {default_image} | {node.image for node in nodes}
    boots: dict[str, ImageBoot] = {}
    releases: dict[str, Release] = {}
    for name in sorted(images):
        published = published_manifests(root, name)
        served_name = served_version(root, name) or ""
        served = published.pop(served_name, None)
        manifests = list(published.values()) + ([served] if served else []) + [m for m, _d in pending.get(name, [])]
        if not manifests:
            if name in used:
                raise BootConfigError(
                    f"image {name!r} has no published version under {os.path.join(root, IMAGES_DIR, name)} and no "
                    f"pending manifest, yet {'it is the default image' if name == default_image else 'nodes boot it'}; "
                    "publish it first (hpc.stateless.bootlink) or pass its manifest in pending_manifests")
            continue
        squashfs_url = ""
        if servers is not None:
            # The version being served: the last pending one, else the served one (its published directory).
            directory = pending[name][-1][1] if name in pending else \
                os.path.join(root, IMAGES_DIR, name, served_name if served else list(published)[-1])
            releases[name] = release_of(manifests[-1], directory, boot_formats[name])
            if releases[name].squashfs:
                squashfs_url = f"{SERVER_TOKEN}/{CONTENT_DIR}/{releases[name].squashfs}"
        boots[name] = image_boot(name, images[name], manifests, options, squashfs_url)

    files = plan_files(nodes, boots, default_image, options, servers, releases)
    diff_limit = int(params.get("diff_limit") or 0)
    loader_dirs = [str(d) for d in params.get("loader_dirs") or []]
    fence_lifted = False
    if check_mode:
        synced = sync_files(root, files, True, bool(params.get("remove_stale", True)), diff_limit)
        loaders, loaders_written = sync_loaders(root, loader_dirs, True)
    else:
        check_writable(root)
        os.makedirs(root, exist_ok=True)
        with deploy_lock(root, float(params.get("lock_timeout") or 0), "bootconfig render", on_wait):
            synced = sync_files(root, files, False, bool(params.get("remove_stale", True)), diff_limit)
            loaders, loaders_written = sync_loaders(root, loader_dirs, False)
            fence_lifted = _lift_fence(root)
    written = loaders_written + synced.written
    return {
        "changed": bool(written or synced.removed),
        "boot_root": root,
        "files": len(files),
        "written": written[:REPORT_LIMIT],
        "written_count": len(written),
        "loaders": loaders,
        "removed": synced.removed[:REPORT_LIMIT],
        "removed_count": len(synced.removed),
        "unchanged": synced.unchanged,
        "fence_lifted": fence_lifted,
        "nodes": len(nodes),
        "images": {name: {"format": boot.format, "ramdisk_size": boot.ramdisk_kib, "arch": boot.arch,
                          "kernel_args": boot.pxe_args()} for name, boot in boots.items()},
        "arch_defaults": arch_defaults(boots, default_image),
        "diff": synced.diffs,
    }


def _lift_fence(root: str) -> bool:
    """Remove the switch fence of the boot root (the entries it held back are written); True when there was one."""
    try:
        os.unlink(os.path.join(root, SWITCH_FENCE))
    except FileNotFoundError:
        return False
    return True


def unified(diff: Mapping[str, str]) -> str:
    """A diff entry as unified text (for logs and tests)."""
    return "".join(difflib.unified_diff(diff["before"].splitlines(True), diff["after"].splitlines(True),
                                        diff["before_header"], diff["after_header"]))
