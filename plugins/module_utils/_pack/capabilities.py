# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""File capabilities (``security.capability``) through pack: recorded for every image, restored at boot on cpio nodes.

A tool that a package installs with ``setcap`` (Debian's ``ping`` has ``cap_net_raw=ep``) keeps its
capabilities in an extended attribute. squashfs stores extended attributes (mksquashfs ``-xattrs``);
the newc cpio format has no room for them, so a node booted from a cpio image would run such a tool
without them: it works for root only. Pack therefore:

* reads each packed regular file's ``security.capability`` in pass 1 (_pack/tree.py,
  :func:`~.tree.read_capability`: never through a link) and records it in the manifest
  (``capabilities``: path and capabilities in the text form ``setcap`` takes and ``getcap`` prints),
  for every format, so that ``image_diff`` and auditors see it;
* for cpio formats, adds to the packed copy (only there; the layer image is never written) the record
  :data:`RECORD_PATH` (one ``<capabilities> /<path>`` line per file), the script :data:`SCRIPT_PATH`
  that applies it with the image's own ``setcap``, and the unit :data:`UNIT_NAME`, pulled in by
  ``sysinit.target`` and ordered before it with no default dependencies: it has run before any
  service, login or user session starts, so before any user can run the tool.

Only capabilities of files that no user but root can replace are restored: the file and every
directory above it must be owned by root and writable by no other user or group (group root aside).
A capability on a path a user may write (``/home/alice/bin/tool``) would be given at boot to whatever
that user put there; such files are reported, listed in the manifest as not restored, and keep no
capability on a cpio node. The image must carry ``setcap`` (Debian: libcap2-bin, EL: libcap),
``/bin/sh`` and systemd, and the directories pack writes the restore into must be root's alone;
otherwise pack warns and restores nothing.

Everything is derived from the tree, in walk order: packing the same image twice gives the same bytes.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, OverlayFile, read_capability, walk

# Paths inside the packed copy (relative to its root), all root-owned, all cpio only.
RECORD_DIR = "usr/lib/hpc-stateless"
RECORD_PATH = f"{RECORD_DIR}/capabilities"
SCRIPT_PATH = f"{RECORD_DIR}/restore-capabilities"
UNIT_NAME = "hpc-stateless-capabilities.service"
UNIT_DIR = "usr/lib/systemd/system"
UNIT_PATH = f"{UNIT_DIR}/{UNIT_NAME}"
WANTS_DIR = f"{UNIT_DIR}/sysinit.target.wants"
WANTS_PATH = f"{WANTS_DIR}/{UNIT_NAME}"
# Entries pack adds for the restore (directories it may create included): not part of the layer image.
PACK_ADDED = frozenset({RECORD_DIR, RECORD_PATH, SCRIPT_PATH, UNIT_PATH, WANTS_DIR, WANTS_PATH})
# Where the restore looks for the image's setcap, in this order (the script is written from this list).
SETCAP_PATHS = ("usr/sbin/setcap", "sbin/setcap")
SYSTEMD_PATHS = ("usr/lib/systemd/systemd", "lib/systemd/systemd")
SHELL_PATH = "bin/sh"
# The manifest key of a file whose capabilities a cpio node does not get back, and why.
NOT_RESTORED_KEY = "not_restored_in_cpio"
EMPTY_SET = "="  # the text form of a capability set that raises nothing

# Linux capability numbers -> names (include/uapi/linux/capability.h); a higher number is written as
# the number itself, which libcap's text form accepts too.
CAPABILITY_NAMES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock", "ipc_owner",
    "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot", "sys_nice",
    "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control", "setfcap",
    "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf",
    "checkpoint_restore",
)

# struct vfs_cap_data (include/uapi/linux/capability.h): little-endian 32-bit words. magic_etc holds the
# revision and the effective flag, then {permitted, inheritable} per 32 capabilities; revision 3 adds the
# root user ID of the user namespace the capability applies in.
_REVISION_MASK = 0xFF000000
_FLAG_EFFECTIVE = 0x000001
_FLAGS_MASK = 0x00FFFFFF
_REVISIONS = {0x01000000: (1, 12), 0x02000000: (2, 20), 0x03000000: (2, 24)}  # magic -> (32-bit words, size)

RESTORE_SCRIPT = r"""#!/bin/sh
# Restores the file capabilities (security.capability) listed in /{record}: the cpio (newc) image
# this node booted from cannot carry them. Written by hpc.stateless.pack; run once at boot by
# {unit}, before sysinit.target, so before any user can run a program. Pack lists only files
# that, like every directory above them, are owned by root and writable by no other user.
# A line of the record: <capabilities as setcap takes them> /<path>
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
record=/{record}
setcap=
for candidate in {setcap_paths}; do
    if [ -x "$candidate" ]; then
        setcap=$candidate
        break
    fi
done
if [ -z "$setcap" ]; then
    echo "{unit}: no setcap in the image: file capabilities not restored" >&2
    exit 1
fi
status=0
while IFS= read -r line; do
    case $line in
        '' | '#'*) continue ;;
    esac
    capabilities=${{line%% /*}}
    path=/${{line#* /}}
    if [ -L "$path" ] || [ ! -f "$path" ]; then
        echo "{unit}: $path is not a regular file: its capabilities are not restored" >&2
        status=1
        continue
    fi
    "$setcap" "$capabilities" "$path" || status=1
done <"$record"
exit $status
""".format(record=RECORD_PATH, unit=UNIT_NAME, setcap_paths=" ".join("/" + p for p in SETCAP_PATHS))

UNIT = f"""# Written by hpc.stateless.pack into cpio images: the newc format carries no extended attributes,
# so the file capabilities of the image are restored from /{RECORD_PATH} at boot,
# before sysinit.target: before any service, login or user session starts.
[Unit]
Description=Restore the file capabilities of the cpio image
DefaultDependencies=no
Conflicts=shutdown.target
Before=sysinit.target shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/{SCRIPT_PATH}
"""

RECORD_HEADER = (f"# File capabilities of this image, restored at boot by {UNIT_NAME} (written by hpc.stateless.pack).\n"
                 "# <capabilities as setcap takes them> /<path>\n")


@dataclass(frozen=True)
class CapabilitySet:
    """One decoded ``security.capability``: bit masks of capability numbers, the effective flag, the root ID."""

    permitted: int
    inheritable: int
    effective: bool
    # revision 3 only: the capability applies in user namespaces whose root is this uid. A rootless build (buildah in a
    # user namespace) sets such capabilities: the namespace's root is the image's root, so a cpio node restores them
    # as ordinary (revision 2) ones, the way the image sees them.
    rootid: int | None = None

    def text(self) -> str:
        """libcap's text form (what ``getcap`` prints and ``setcap`` takes): ``cap_net_raw=ep``.

        Capabilities with the same flags share a clause, clauses are ordered by their flags (``e``,
        ``i``, ``p``: the effective flag of a file applies to every capability it raises); an empty set is ``=``.
        """
        clauses: dict[str, list[str]] = {}
        raised = self.permitted | self.inheritable
        for number in range(raised.bit_length()):
            bit = 1 << number
            if not raised & bit:
                continue
            flags = ("e" if self.effective else "") + ("i" if self.inheritable & bit else "") + \
                ("p" if self.permitted & bit else "")
            name = f"cap_{CAPABILITY_NAMES[number]}" if number < len(CAPABILITY_NAMES) else str(number)
            clauses.setdefault(flags, []).append(name)
        if not clauses:
            return EMPTY_SET
        return " ".join(f"{','.join(names)}={flags}" for flags, names in sorted(clauses.items()))


def text_of(raw: bytes) -> str:
    """The text form of the ``security.capability`` value ``raw``; ``unreadable: 0x<hex>`` when it is no capability set."""
    try:
        return decode(raw).text()
    except ValueError:
        return f"unreadable: 0x{raw.hex()}"


def decode(raw: bytes) -> CapabilitySet:
    """The ``security.capability`` value ``raw``; ValueError when it is no capability set of a known revision."""
    if len(raw) < 4:
        raise ValueError(f"{len(raw)} bytes, too short for a capability set")
    (magic,) = struct.unpack_from("<I", raw)
    revision = magic & _REVISION_MASK
    if revision not in _REVISIONS:
        raise ValueError(f"unknown capability revision 0x{revision:08x}")
    words, size = _REVISIONS[revision]
    if len(raw) != size:
        raise ValueError(f"{len(raw)} bytes where revision 0x{revision:08x} has {size}")
    if magic & _FLAGS_MASK & ~_FLAG_EFFECTIVE:
        raise ValueError(f"unknown flags 0x{magic & _FLAGS_MASK:06x}")
    values = struct.unpack_from(f"<{2 * words}I", raw, 4)
    permitted = sum(values[2 * i] << (32 * i) for i in range(words))
    inheritable = sum(values[2 * i + 1] << (32 * i) for i in range(words))
    rootid = struct.unpack_from("<I", raw, 20)[0] if size == 24 else None
    return CapabilitySet(permitted, inheritable, bool(magic & _FLAG_EFFECTIVE), rootid)


@dataclass(frozen=True)
class FileCapability:
    """The capabilities of one packed file: ``rel`` (relative to the root), their text, and, for a
    cpio pack, why a node booted from it does not get them back (None when it does)."""

    rel: str
    text: str
    rootid: int | None = None
    not_restored: str | None = None

    @property
    def restored(self) -> bool:
        """Whether a cpio node gets these capabilities back (an empty set needs nothing)."""
        return not self.not_restored and self.text != EMPTY_SET

    def manifest_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": "/" + self.rel, "capabilities": self.text}
        if self.rootid:
            entry["rootid"] = self.rootid
        if self.not_restored:
            entry[NOT_RESTORED_KEY] = self.not_restored
        return entry

    def __str__(self) -> str:
        return f"/{self.rel} ({self.text})"


def _writable_by_others(st: os.stat_result, shown: str) -> str | None:
    """Why a user other than root could replace what the path ``shown`` names (``st``: its lstat), or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{shown} is a symbolic link"
    if st.st_uid != 0:
        return f"{shown} is owned by uid {st.st_uid}"
    if st.st_mode & stat.S_IWOTH:
        return f"{shown} is writable by every user"
    if st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        return f"{shown} is writable by group {st.st_gid}"
    return None


def untrusted(root: str, rel: str) -> str | None:
    """Why a user other than root could replace the file ``rel`` of the tree ``root`` (it, or a directory
    above it, is owned by another user or writable by one), or None when only root can."""
    parts = rel.split("/")
    for depth in range(len(parts) + 1):
        path = "/".join(parts[:depth])
        st = _imagepath.lstat(root, path, follow_last=False)
        problem = f"/{path} is gone" if st is None else _writable_by_others(st, "/" + path)
        if problem:
            return problem
    return None


def _unsafe_directory(root: str, rel: str) -> str | None:
    """Why pack must not add files below the directory ``rel`` of the tree ``root`` (a component is no directory,
    or a user other than root could replace it), or None; what does not exist yet pack creates (root's, 0755)."""
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        path = "/".join(parts[:depth])
        st = _imagepath.lstat(root, path, follow_last=False)
        if st is None:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return f"/{path} is a {_imagepath.kind(st.st_mode)}, not a directory"
        problem = _writable_by_others(st, "/" + path)
        if problem:
            return problem
    return None


def _packed_file(root: str, rules: ExcludeRules, candidates: tuple[str, ...]) -> bool:
    """Whether one of ``candidates`` is a regular file of the image (links resolved inside it) that is packed."""
    for candidate in candidates:
        rel = _imagepath.resolve_rel(root, candidate)
        if rel is None or not _imagepath.is_file(root, rel, follow_last=False):
            continue
        parts = rel.split("/")
        if not any(rules.excluded("/".join(parts[:depth])) for depth in range(1, len(parts) + 1)):
            return True
    return False


def restore_blocker(root: str, rules: ExcludeRules) -> str | None:
    """Why a cpio node booted from the tree ``root`` (packed with ``rules``) could not restore capabilities
    at boot, or None when it can."""
    if not _packed_file(root, rules, SETCAP_PATHS):
        return "the image has no setcap (Debian: libcap2-bin, EL: libcap)"
    if not _packed_file(root, rules, (SHELL_PATH,)):
        return "the image has no /bin/sh"
    if not _packed_file(root, rules, SYSTEMD_PATHS):
        return "the image has no systemd to run the restore at boot"
    for directory in (RECORD_DIR, WANTS_DIR):
        problem = _unsafe_directory(root, directory)
        if problem:
            return problem
    return None


def record_bytes(files: list[FileCapability]) -> bytes:
    """Content of :data:`RECORD_PATH`: the capabilities of ``files`` that are restored, one line each."""
    lines = [f"{f.text} /{f.rel}\n" for f in files if f.restored]
    return (RECORD_HEADER + "".join(lines)).encode("utf-8", "surrogateescape")


@dataclass
class CapabilityPlan:
    """What a pack does with the capabilities of its tree: ``files`` in walk order; for cpio, ``blocker`` is
    why nothing is restored at boot (None when the restore can run)."""

    files: list[FileCapability] = field(default_factory=list)
    cpio: bool = False
    blocker: str | None = None

    @property
    def restored(self) -> list[FileCapability]:
        return [f for f in self.files if f.restored] if self.cpio and not self.blocker else []

    def manifest(self) -> list[dict[str, Any]]:
        """The manifest's ``capabilities``: one entry per file, in walk order."""
        return [f.manifest_entry() for f in self.files]

    def overlay(self) -> list[OverlayFile]:
        """What the cpio artifacts carry for the restore (nothing when no file's capabilities are restored)."""
        files = self.restored
        if not files:
            return []
        return [
            OverlayFile(RECORD_PATH, stat.S_IFREG | 0o644, record_bytes(files), cpio_only=True),
            OverlayFile(SCRIPT_PATH, stat.S_IFREG | 0o755, RESTORE_SCRIPT.encode("utf-8"), cpio_only=True),
            OverlayFile(UNIT_PATH, stat.S_IFREG | 0o644, UNIT.encode("utf-8"), cpio_only=True),
            OverlayFile(WANTS_PATH, stat.S_IFLNK | 0o777, f"../{UNIT_NAME}".encode(), cpio_only=True),
        ]

    def warning(self) -> str | None:
        """What a cpio node will lack, for the user, or None."""
        if not self.cpio:
            return None
        lost = [f for f in self.files if f.not_restored]
        if not lost:
            return None
        listed = "; ".join(f"{f}: {f.not_restored}" for f in lost[:10])
        more = f" (and {len(lost) - 10} more, see the manifest's capabilities)" if len(lost) > 10 else ""
        return (f"cpio: the file capabilities of {len(lost)} file(s) are not restored at boot - they work for root "
                f"only on a node booted from the cpio image: {listed}{more}. Fix the owner or mode in a layer role, "
                "add what the image lacks, or pack squashfs (it keeps them). See docs/pack.md")


def plan(root: str, found: list[tuple[str, bytes]], rules: ExcludeRules, cpio: bool) -> CapabilityPlan:
    """The :class:`CapabilityPlan` of the tree ``root``: ``found`` is :attr:`~.tree.TreeScan.capabilities`
    (packed path, raw ``security.capability``), ``cpio`` whether a cpio format is packed."""
    result = CapabilityPlan(cpio=cpio)
    if cpio and found:
        result.blocker = restore_blocker(root, rules)
    for rel, raw in found:
        try:
            caps = decode(raw)
        except ValueError as exc:
            result.files.append(FileCapability(rel, text_of(raw), None,
                                               f"its security.capability is unreadable: {exc}" if cpio else None))
            continue
        text = caps.text()
        reason = None
        if cpio:
            if not caps.permitted | caps.inheritable:
                reason = None  # an empty set: nothing to restore
            elif "\n" in rel:
                reason = "its name holds a line break"
            else:
                reason = result.blocker or untrusted(root, rel)
        result.files.append(FileCapability(rel, text, caps.rootid, reason))
    return result


def tree_capabilities(root: str, rules: ExcludeRules) -> dict[str, str]:
    """``{"/path": capabilities}`` of the regular files of the tree ``root`` walked as pack walks it with ``rules``
    (a layer image, for image_diff; a pack's are in its manifest)."""
    found = {}
    for entry in walk(root, rules):
        if stat.S_ISREG(entry.mode) and entry.path is not None:
            raw = read_capability(entry.path)
            if raw is not None:
                found["/" + entry.rel] = text_of(raw)
    return found


def recorded(manifest: dict[str, Any]) -> dict[str, str] | None:
    """``{"/path": capabilities}`` a checked manifest records; None when it was packed before they were recorded."""
    entries = manifest.get("capabilities")
    if not isinstance(entries, list):
        return None
    return {e["path"]: e["capabilities"] for e in entries}
