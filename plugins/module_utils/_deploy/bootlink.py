# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PXE boot tree of hpc.stateless: publish packed versions, switch them atomically.

Layout under a boot root (the TFTP/HTTP root)::

    <boot_root>/images/<image>/<version>/     one published version: vmlinuz, the artifact(s),
                                              manifest.json, the SBOM, SHA256SUMS (+ .asc) as
                                              packed and an ``initrd`` symlink
                                              (+ ``rootfs.squashfs`` for squashfs)
    <boot_root>/images/<image>/previous       symlink -> <version> (the rollback target)
    <boot_root>/<image>                       symlink -> images/<image>/<version> (served)
    <boot_root>/sha256/<hex>                  the boot files of every kept version, named by their sha256
                                              (hard links: no second copy), for boot scripts that name
                                              hashes (several boot servers, docs/scale.md)

Boot entries name ``<image>/vmlinuz`` and ``<image>/initrd``. Both resolve through the
one ``<boot_root>/<image>`` symlink, so a single ``rename(2)`` switches kernel and initrd
in the same instant: at no instant is a link missing or pointing at a partial file. (A node
whose two TFTP downloads straddle that instant can still fetch the old kernel and the new
initrd; see docs/deploy.md.) A version directory appears under its final name only after every file in
it was copied, synced and checked against SHA256SUMS.

SHA256SUMS and its signature SHA256SUMS.asc are published byte for byte as pack wrote and the
site signed them, so ``gpgv`` and ``sha256sum -c --ignore-missing`` check a published version
in place (the pack's other formats are listed there but not published). With a keyring, the
signature is checked (:func:`load_packed`) before anything of the pack output is parsed or anything
in the boot tree changes.

Deploy reads only bytes it has checked: the manifest is parsed from the bytes that matched their
SHA256SUMS entry, and those bytes are what is published; a version already published is compared
file by file with its SHA256SUMS (:func:`publish`), and a version a link is about to point at again
(switch by version, rollback) has its signature and files checked first (:func:`verify_published`).

Every change happens under an exclusive ``flock`` on ``<boot_root>/.hpc-stateless.lock``,
so two deploys (or a deploy and a config render) cannot interleave.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import (
    kernel_file,
    newest_version_dir,
    parse_manifest,
    read_manifest,
    read_manifest_bytes,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    CONTENT_DIR,
    FORMATS,
    IMAGES_DIR,
    INITRD_FILE,
    KERNEL_FILE,
    MANIFEST_FILE,
    PREVIOUS_LINK,
    SBOM_FILE,
    SIGNATURE_FILE,
    SQUASHFS_FORMAT,
    SUMS_FILE,
    ArtifactError,
    check_file_name,
    check_name,
    format_of,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.signature import Signer, read_optional, verify
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import parse_sums, read_sums, sha256_bytes, sha256_file
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, LockBusy, wait_message
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc, parse_iso_utc
from ansible_collections.hpc.stateless.plugins.module_utils._paths import (
    TEMP_INFIX,
    fsync_dir,
    move_into_place,
    nearest_existing,
    replacing,
    write_atomic,
)

LOCK_NAME = ".hpc-stateless.lock"
INITRD_LINK = "initrd"
SQUASHFS_LINK = "rootfs.squashfs"
PUBLISH_PREFIX = ".publish-"
REMOVE_PREFIX = ".remove-"

_CHUNK = 1024 * 1024


class BootlinkError(Exception):
    """A refused or failed deploy step; the message names the file or key and what to do next."""


class LockBusyError(BootlinkError):
    """Another deploy holds the boot root's lock."""


# --------------------------------------------------------------------------- pack output
# Names, manifest.json and SHA256SUMS are read through the artifact contract (module_utils/_contract/),
# the same modules pack writes them with; their errors are ArtifactError.


@dataclass
class PackedVersion:
    """One pack output directory and the files a boot tree needs from it."""

    path: str
    manifest: dict[str, Any]
    sums: dict[str, str]
    format: str
    kernel: str
    initrd: str
    squashfs: str | None = None
    sums_data: bytes = b""  # SHA256SUMS as read (and verified): what is published
    signature: bytes | None = None  # SHA256SUMS.asc as read, None when the release is not signed
    manifest_data: bytes = b""  # manifest.json as read and checked against SHA256SUMS: what is parsed and published
    signer: Signer | None = None  # who signed SHA256SUMS, when a keyring checked it

    @property
    def image(self) -> str:
        return self.manifest["image"]

    @property
    def version(self) -> str:
        return self.manifest["version"]

    @property
    def boot_files(self) -> list[str]:
        """What nodes load: the kernel and the chosen format's artifact(s)."""
        names = [self.kernel, self.initrd] + ([self.squashfs] if self.squashfs else [])
        return list(dict.fromkeys(names))

    @property
    def files(self) -> list[str]:
        """The files to publish: the boot files, the metadata, SHA256SUMS and its signature unchanged."""
        metadata = [MANIFEST_FILE] + ([SBOM_FILE] if SBOM_FILE in self.sums else [])
        return self.boot_files + metadata + [SUMS_FILE] + ([SIGNATURE_FILE] if self.signature is not None else [])

    def payload_bytes(self) -> int:
        return sum(os.stat(os.path.join(self.path, name)).st_size for name in self.files)


def pick_artifacts(where: str, manifest: dict[str, Any], fmt: str | None) -> tuple[str, str, str | None]:
    """(format, initrd file, squashfs file or None) for the requested or first format."""
    by_format: dict[str, str] = {}
    for artifact in manifest["artifacts"]:
        by_format.setdefault(str(artifact.get("format") or _format_of(artifact["file"])), artifact["file"])
    bootable = [name for name in by_format if name in FORMATS]
    if fmt is None:
        if not bootable:
            raise BootlinkError(f"{where}: no bootable artifact (formats {sorted(by_format)}; want one of {list(FORMATS)})")
        fmt = bootable[0]
    if fmt not in by_format:
        raise BootlinkError(
            f"{where}: format {fmt!r} was not packed for image {manifest['image']!r} "
            f"(packed: {', '.join(sorted(by_format)) or 'nothing'}); add it to the image's formats and pack again"
        )
    if fmt == SQUASHFS_FORMAT:
        entry = manifest.get("initrd") if isinstance(manifest.get("initrd"), dict) else {}
        initrd = entry.get("file") or by_format.get("initrd")
        if not initrd:
            raise BootlinkError(f"{where}: the squashfs has no initrd.img to mount it (manifest key 'initrd' is empty); "
                                "add dracut with its live modules or live-boot to a layer, or pack with initrd=, "
                                "or deploy a cpio format")
        check_file_name(f"{where}: initrd.file", initrd)
        return fmt, initrd, by_format[fmt]
    return fmt, by_format[fmt], None


def _format_of(name: str) -> str:
    return format_of(name) or ("initrd" if name == INITRD_FILE else "")


def load_packed(path: str, fmt: str | None = None, keyring: str | None = None,
                signers: Sequence[str] = ()) -> PackedVersion:
    """Read a pack version directory: SHA256SUMS, the manifest and the chosen boot format.

    With ``keyring``, the signature of SHA256SUMS is checked first (SignatureError otherwise). The
    manifest is parsed only after its bytes matched their SHA256SUMS entry, and those same bytes are
    what :func:`publish` writes, so a manifest.json edited after packing (or signing) is refused
    before anything of it is used.
    """
    if not os.path.isdir(path):
        raise BootlinkError(f"src {path}: not a directory; point src at <pack output>/<image>/<version>")
    manifest_path = os.path.join(path, MANIFEST_FILE)
    manifest_data = read_manifest_bytes(manifest_path)
    sums_path = os.path.join(path, SUMS_FILE)
    sums_data = _read_bytes(sums_path)
    if sums_data is None:
        read_sums(sums_path)  # raises the contract's error for a missing SHA256SUMS
    signature = _read_bytes(os.path.join(path, SIGNATURE_FILE))
    signer = verify(sums_data, signature, keyring, list(signers), sums_path) if keyring else None
    sums = _parse_sums_data(sums_data, sums_path)
    manifest = _checked_manifest(manifest_path, manifest_data, sums, sums_path, signer is not None)
    fmt, initrd, squashfs = pick_artifacts(path, manifest, fmt)
    kernel = kernel_file(manifest)
    packed = PackedVersion(path, manifest, sums, fmt, kernel, initrd, squashfs, sums_data, signature, manifest_data, signer)
    for name in packed.boot_files:
        if name not in sums:
            raise BootlinkError(f"{sums_path}: no checksum for {name}; pack the image again")
    for name in packed.files:
        if name not in (SUMS_FILE, SIGNATURE_FILE) and not os.path.isfile(os.path.join(path, name)):
            raise BootlinkError(f"{path}/{name}: listed in the manifest or {SUMS_FILE} but missing; "
                                "pack the image again")
    return packed


def _parse_sums_data(data: bytes, where: str) -> dict[str, str]:
    """:func:`parse_sums` of SHA256SUMS bytes read from ``where``."""
    try:
        return parse_sums(data.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise ArtifactError(f"{where}: not UTF-8 text; pack the image again") from None


def _checked_manifest(manifest_path: str, data: bytes, sums: Mapping[str, str], sums_path: str,
                      signed: bool) -> dict[str, Any]:
    """The manifest in ``data`` once its digest is the one SHA256SUMS lists; BootlinkError before parsing otherwise."""
    expected = sums.get(MANIFEST_FILE)
    if expected is None:
        raise BootlinkError(f"{sums_path} does not list {MANIFEST_FILE}, so nothing vouches for the manifest the "
                            "boot entries would be rendered from; nothing was published: pack the image again "
                            "(pack lists it)")
    actual = sha256_bytes(data)
    if actual != expected:
        raise BootlinkError(
            f"{manifest_path} does not match its checksum in {SUMS_FILE} ({expected[:12]}..., file {actual[:12]}...): "
            f"it was changed after the image was packed{' and signed' if signed else ''}; nothing was published and "
            "the boot tree is unchanged: pack the image again (and sign it)")
    return parse_manifest(data, manifest_path)


def _read_bytes(path: str) -> bytes | None:
    """The content of ``path``, None when it does not exist."""
    try:
        return read_optional(path)
    except OSError as exc:
        raise BootlinkError(f"{path}: unreadable ({exc.strerror}); make the pack output readable for the "
                            "deploying user") from None


def find_packed(src: str, version: str | None) -> str:
    """The pack version directory ``src`` names: itself, ``src/<version>``, or the newest under ``src``."""
    if os.path.isfile(os.path.join(src, MANIFEST_FILE)):
        return src
    if version:
        candidate = os.path.join(src, version)
        if not os.path.isfile(os.path.join(candidate, MANIFEST_FILE)):
            raise BootlinkError(f"src {src}: no packed version {version!r} (no {candidate}/{MANIFEST_FILE}); pack it first")
        return candidate
    try:
        newest = newest_version_dir(src)
    except FileNotFoundError:
        raise BootlinkError(f"src {src}: does not exist; run the pack step (playbooks/pack.yml) first") from None
    if newest is None:
        raise BootlinkError(f"src {src}: holds no packed version (no */{MANIFEST_FILE}); run the pack step first")
    return newest


# --------------------------------------------------------------------------- lock


@contextlib.contextmanager
def deploy_lock(boot_root: str, timeout: float = 0.0, purpose: str = "deploy",
                on_wait: Callable[[str], None] | None = None) -> Iterator[str]:
    """Hold the boot root's exclusive lock; raise LockBusyError naming the holder after ``timeout`` s.

    When another deploy holds it, ``on_wait`` gets ``waiting for the boot tree <root>, held by <holder>`` once,
    as the wait begins (with no ``timeout`` there is no wait: the error names the holder)."""
    path = os.path.join(boot_root, LOCK_NAME)
    lock = Flock(path, purpose)
    say = (None if on_wait is None or timeout <= 0
           else (lambda holder: on_wait(wait_message(f"the boot tree {boot_root}", holder))))
    try:
        lock.acquire(timeout=max(timeout, 0.0), on_wait=say)
    except LockBusy as exc:
        raise LockBusyError(f"boot root {boot_root} is locked by another deploy ({exc.holder}); wait for it to finish "
                            f"or raise lock_timeout (waited {timeout:g} s on {path})") from None
    except OSError as exc:
        raise BootlinkError(f"boot root {boot_root}: cannot create the lock file {path} ({exc.strerror}); "
                            "make the boot root writable for the deploying user") from None
    try:
        yield path
    finally:
        lock.release()


# --------------------------------------------------------------------------- tree


@dataclass
class VersionInfo:
    name: str
    path: str
    published: float
    manifest: dict[str, Any] | None = None
    links: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        manifest = self.manifest or {}
        return {
            "version": self.name,
            "path": self.path,
            "published": iso_utc(self.published),
            "uncompressed_size": manifest.get("uncompressed_size"),
            "linked_by": list(self.links),
        }


def replace_symlink(target: str, link: str) -> None:
    """Point ``link`` at ``target`` by renaming a fresh symlink over it: never absent, never half-made."""
    with replacing(link) as temp:
        os.symlink(target, temp)


class BootTree:
    """Read and change the boot tree of one boot root. Callers hold :func:`deploy_lock` to change it."""

    def __init__(self, boot_root: str) -> None:
        self.root = os.path.abspath(boot_root)

    # paths
    def image_dir(self, image: str) -> str:
        return os.path.join(self.root, IMAGES_DIR, image)

    def version_dir(self, image: str, version: str) -> str:
        return os.path.join(self.image_dir(image), version)

    def served_link(self, image: str) -> str:
        return os.path.join(self.root, image)

    def content_path(self, digest: str) -> str:
        return os.path.join(self.root, CONTENT_DIR, digest)

    def previous_link(self, image: str) -> str:
        return os.path.join(self.image_dir(image), PREVIOUS_LINK)

    @staticmethod
    def served_target(image: str, version: str) -> str:
        return f"{IMAGES_DIR}/{image}/{version}"

    # reading
    def current(self, image: str) -> str | None:
        """Version the served link points at, or None when there is no link yet."""
        link = self.served_link(image)
        try:
            target = os.readlink(link)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise BootlinkError(f"{link} exists and is not a symlink; bootlink manages it as a symlink to "
                                    f"{IMAGES_DIR}/{image}/<version>: move it away and deploy again") from None
            raise
        prefix = f"{IMAGES_DIR}/{image}/"
        if not target.startswith(prefix) or "/" in target[len(prefix):]:
            raise BootlinkError(f"{link} points at {target!r}, not at {prefix}<version>; "
                                "it was not made by bootlink: move it away and deploy again")
        return target[len(prefix):]

    def previous(self, image: str) -> str | None:
        try:
            target = os.readlink(self.previous_link(image))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return target if "/" not in target else None

    def versions(self, image: str) -> list[VersionInfo]:
        """Published versions, oldest first (by publish time)."""
        found: list[VersionInfo] = []
        try:
            entries = list(os.scandir(self.image_dir(image)))
        except FileNotFoundError:
            return []
        current, previous = self.current(image), self.previous(image)
        for entry in entries:
            if entry.name.startswith(".") or entry.name == PREVIOUS_LINK or not entry.is_dir(follow_symlinks=False):
                continue
            info = VersionInfo(entry.name, entry.path, entry.stat(follow_symlinks=False).st_mtime)
            with contextlib.suppress(ArtifactError):
                info.manifest = read_manifest(os.path.join(entry.path, MANIFEST_FILE))
            if entry.name == current:
                info.links.append(self.served_link(image))
            if entry.name == previous:
                info.links.append(self.previous_link(image))
            found.append(info)
        found.sort(key=lambda info: (info.published, info.name))
        return found

    def leftovers(self, image: str) -> list[str]:
        """Temporary directories and links of interrupted runs."""
        names: list[str] = []
        for directory in (self.image_dir(image), self.root, os.path.join(self.root, CONTENT_DIR)):
            with contextlib.suppress(FileNotFoundError):
                names.extend(os.path.join(directory, name) for name in os.listdir(directory)
                             if name.startswith((PUBLISH_PREFIX, REMOVE_PREFIX))
                             or (name.startswith(".") and TEMP_INFIX in name))
        for info in self.versions(image):  # a signature being replaced in a published version
            with contextlib.suppress(FileNotFoundError):
                names.extend(os.path.join(info.path, name) for name in os.listdir(info.path)
                             if name.startswith(f".{SIGNATURE_FILE}{TEMP_INFIX}"))
        return sorted(names)

    def check_complete(self, image: str, version: str) -> dict[str, Any]:
        """Cheap completeness check of a published version (files present, sizes as in the manifest)."""
        path = self.version_dir(image, version)
        if not os.path.isdir(path):
            known = ", ".join(v.name for v in self.versions(image)) or "none"
            raise BootlinkError(f"image {image!r} has no published version {version!r} in {self.image_dir(image)} "
                                f"(published: {known}); publish it first (state=present with src)")
        manifest = read_manifest(os.path.join(path, MANIFEST_FILE))
        sizes = {a["file"]: a.get("size") for a in manifest["artifacts"]}
        for name in (KERNEL_FILE, INITRD_LINK):
            if not os.path.isfile(os.path.join(path, name)):
                raise BootlinkError(f"{path}/{name} is missing: the version is incomplete; remove it (state=absent) "
                                    "and publish it again")
        for name in os.listdir(path):
            expected = sizes.get(name)
            if isinstance(expected, int) and os.path.getsize(os.path.join(path, name)) != expected:
                raise BootlinkError(f"{path}/{name}: size differs from the manifest; remove the version "
                                    "(state=absent) and publish it again")
        return manifest


# --------------------------------------------------------------------------- publish


def _copy_file(source: str, dest: str) -> None:
    """Copy with the kernel's fast path and flush to disk before the caller verifies the copy."""
    with open(source, "rb") as src, open(dest, "xb") as dst:
        _copy_range(src, dst)
        dst.flush()
        os.fsync(dst.fileno())


def _write_file(dest: str, data: bytes) -> None:
    with open(dest, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _copy_range(src, dst) -> None:
    size = os.fstat(src.fileno()).st_size
    offset = 0
    try:
        while offset < size:
            sent = os.copy_file_range(src.fileno(), dst.fileno(), min(size - offset, 1 << 30))
            if sent == 0:
                break
            offset += sent
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL) or offset:
            raise
        shutil.copyfileobj(src, dst, _CHUNK)
        return
    if offset < size:
        raise OSError(errno.EIO, f"short copy of {src.name}")


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _remove_tree(path: str) -> None:
    """Rename away first (the version vanishes in one step), then delete."""
    parent, name = os.path.split(path)
    doomed = os.path.join(parent, f"{REMOVE_PREFIX}{name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def same_content(tree: BootTree, packed: PackedVersion) -> bool:
    """True when the published version already holds ``packed``, signature included."""
    return published_difference(tree, packed) is None


SIGNATURE_DIFFERS = "signature"


def published_difference(tree: BootTree, packed: PackedVersion) -> str | None:
    """How the published version of ``packed`` differs from it: None (the same release),
    SIGNATURE_DIFFERS (same files, ``packed`` carries another or a first signature), or why it is
    another build.

    Every published file is hashed against ``packed``'s (checked) SHA256SUMS: a published copy
    changed after it was published raises BootlinkError naming the files (see :func:`check_published_copy`).
    A version published before SHA256SUMS was published unchanged lists only the published
    files; it is the same release when those entries agree.
    """
    path = tree.version_dir(packed.image, packed.version)
    try:
        published = read_sums(os.path.join(path, SUMS_FILE))
    except ArtifactError as exc:
        return f"its {SUMS_FILE} is unusable: {exc}"
    if published == packed.sums:
        names = [name for name in packed.files if name != SIGNATURE_FILE]
    elif published.items() <= packed.sums.items():
        names = packed.boot_files + [MANIFEST_FILE, SUMS_FILE]
    else:
        return f"{SUMS_FILE} differs"
    missing = [name for name in names if not os.path.isfile(os.path.join(path, name))]
    if missing:
        return f"{', '.join(missing)} missing"
    check_published_copy(path, packed.image, packed.version,
                         {name: packed.sums[name] for name in names if name in packed.sums}, {INITRD_LINK: packed.initrd})
    if packed.signature is not None and _read_bytes(os.path.join(path, SIGNATURE_FILE)) != packed.signature:
        return SIGNATURE_DIFFERS  # with a rewritten SHA256SUMS too: _replace_signature puts back the signed one
    return None


def _check_same(tree: BootTree, packed: PackedVersion) -> bool:
    """False when the published version is ``packed``, True when only its signature is to be replaced;
    refuses a published version that holds another release of the same version name."""
    difference = published_difference(tree, packed)
    if difference is None or difference == SIGNATURE_DIFFERS:
        return difference is not None
    raise BootlinkError(
        f"{tree.version_dir(packed.image, packed.version)} already holds a different build of version "
        f"{packed.version!r} ({difference}); versions are immutable: pack with a new version, or remove this "
        "one (state=absent) first")


def _replace_signature(tree: BootTree, packed: PackedVersion) -> None:
    """Put ``packed``'s SHA256SUMS.asc into its published version (same files, signed now or again)."""
    directory = tree.version_dir(packed.image, packed.version)
    sums_path = os.path.join(directory, SUMS_FILE)
    name = SUMS_FILE
    try:
        if _read_bytes(sums_path) != packed.sums_data:
            # Published by a deploy that still rewrote SHA256SUMS to the published files: the same
            # files, so the signed list goes back first, then the signature that covers it.
            write_atomic(sums_path, packed.sums_data)
        name = SIGNATURE_FILE
        write_atomic(os.path.join(directory, SIGNATURE_FILE), packed.signature or b"")
    except OSError as exc:
        raise BootlinkError(f"writing {directory}/{name} failed ({exc.strerror}); the served version "
                            "is unchanged: check that the boot root is writable") from None


def publish(tree: BootTree, packed: PackedVersion) -> bool:
    """Copy ``packed`` to ``images/<image>/<version>`` via a temp dir on the same fs; True if published now.

    Raises BootlinkError (leaving nothing behind) on a checksum mismatch, a full disk or an
    unwritable boot root. The served link is not touched.
    """
    image, version = packed.image, packed.version
    final = tree.version_dir(image, version)
    if os.path.isdir(final):
        if not _check_same(tree, packed):
            return False
        _replace_signature(tree, packed)
        return True
    image_dir = tree.image_dir(image)
    try:
        os.makedirs(image_dir, exist_ok=True)
    except OSError as exc:
        raise BootlinkError(f"cannot create {image_dir} ({exc.strerror}); check that boot root {tree.root} is "
                            "writable") from None
    needed = packed.payload_bytes()
    free = _free_bytes(image_dir)
    if needed > free:
        raise BootlinkError(
            f"not enough space to publish {image} {version} under {image_dir}: needs {needed / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB free; free space (state=absent for old versions, or a lower keep) and "
            "deploy again. The served version is unchanged")
    temp = os.path.join(image_dir, f"{PUBLISH_PREFIX}{version}-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(temp, 0o755)
        for name in packed.files:
            if name == SUMS_FILE:
                _write_file(os.path.join(temp, name), packed.sums_data)  # the bytes the signature was checked on
            elif name == MANIFEST_FILE:
                _write_file(os.path.join(temp, name), packed.manifest_data)  # the bytes checked and parsed
            elif name == SIGNATURE_FILE and packed.signature is not None:
                _write_file(os.path.join(temp, name), packed.signature)
            else:
                _copy_file(os.path.join(packed.path, name), os.path.join(temp, name))
        _verify_copy(temp, packed)
        os.symlink(packed.initrd, os.path.join(temp, INITRD_LINK))
        if packed.squashfs:
            os.symlink(packed.squashfs, os.path.join(temp, SQUASHFS_LINK))
        fsync_dir(temp)
        move_into_place(temp, final)  # the version appears complete, or not at all
        os.utime(final)  # publish time orders versions for retention
    except OSError as exc:
        shutil.rmtree(temp, ignore_errors=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise BootlinkError(
                f"disk full while publishing {image} {version} to {image_dir} ({exc.strerror}); nothing was "
                "published and the served version is unchanged: free space (state=absent for old versions, or a "
                "lower keep) and deploy again") from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise BootlinkError(f"boot root {tree.root} is not writable ({exc.strerror}: {exc.filename}); "
                                "fix its permissions or mount, then deploy again") from None
        raise BootlinkError(f"publishing {image} {version} to {image_dir} failed: {exc}; "
                            "the served version is unchanged") from None
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return True


def _verify_copy(directory: str, packed: PackedVersion) -> None:
    """Hash every copied file as it is on disk now; refuse on any mismatch with SHA256SUMS."""
    bad = []
    for name in packed.files:
        expected = packed.sums.get(name)
        if expected is None:
            continue
        actual = sha256_file(os.path.join(directory, name))
        if actual != expected:
            bad.append(f"{name} (SHA256SUMS {expected[:12]}..., copy {actual[:12]}...)")
    for artifact in packed.manifest["artifacts"]:
        digest = artifact.get("sha256")
        name = artifact["file"]
        if digest and name in packed.sums and digest.lower() != packed.sums[name]:
            bad.append(f"{name} (manifest.json and SHA256SUMS disagree)")
    if bad:
        raise BootlinkError(
            f"checksum mismatch publishing {packed.image} {packed.version} from {packed.path}: {', '.join(bad)}; "
            "nothing was published and the served links are unchanged: pack the image again")


def verify_packed(packed: PackedVersion) -> None:
    """Hash the source files (check mode: find a bad pack output without copying)."""
    _verify_copy(packed.path, packed)


def check_published_copy(directory: str, image: str, version: str, expected: Mapping[str, str],
                         links: Mapping[str, str] | None = None) -> None:
    """Hash each file of ``expected`` (``{name: sha256}``) in the published ``directory`` and read each of ``links``
    (``{name: target}``); BootlinkError naming every file that is missing, not a regular file or holds other bytes,
    and every link that points elsewhere."""
    bad = []
    for name, target in sorted((links or {}).items()):
        try:
            actual_target = os.readlink(os.path.join(directory, name))
        except OSError:
            actual_target = None
        if actual_target != target:
            bad.append(f"{name} (points at {actual_target or 'nothing'}, not {target})")
    for name in sorted(expected):
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                bad.append(f"{name} (not a regular file)")
                continue
            actual = sha256_file(path)
        except FileNotFoundError:
            bad.append(f"{name} (missing)")
            continue
        except OSError as exc:
            bad.append(f"{name} (unreadable: {exc.strerror})")
            continue
        if actual != expected[name]:
            bad.append(f"{name} ({SUMS_FILE} {expected[name][:12]}..., published {actual[:12]}...)")
    if bad:
        raise BootlinkError(
            f"the published copy of image {image!r} version {version!r} in {directory} does not match its "
            f"{SUMS_FILE}: {', '.join(bad)}; it was changed after it was published. Nothing was changed: serve "
            "another version if this one is served (state=switched), remove it (state=absent) and deploy it again "
            "from its pack output")


def verify_published(tree: BootTree, image: str, version: str, keyring: str | None = None,
                     signers: Sequence[str] = ()) -> Signer | None:
    """Check a published version before a link points at it again (switch by version, rollback).

    With ``keyring``, the signature of its published SHA256SUMS (SignatureError otherwise); then every file that
    SHA256SUMS lists and the version holds is hashed, and the manifest, the kernel and what ``initrd`` (and
    ``rootfs.squashfs``) point at must be among them. Returns the signer when a keyring was given.
    """
    path = tree.version_dir(image, version)
    if not os.path.isdir(path):
        tree.check_complete(image, version)  # raises, naming the published versions
    sums_path = os.path.join(path, SUMS_FILE)
    sums_data = _read_bytes(sums_path)
    if sums_data is None:
        read_sums(sums_path)  # raises the contract's error for a missing SHA256SUMS
    signer = None
    if keyring:
        signer = verify(sums_data, _read_bytes(os.path.join(path, SIGNATURE_FILE)), keyring, list(signers), sums_path)
    sums = _parse_sums_data(sums_data, sums_path)
    required = {MANIFEST_FILE, KERNEL_FILE}
    for link in (INITRD_LINK, SQUASHFS_LINK):
        try:
            required.add(os.readlink(os.path.join(path, link)))
        except OSError:
            if link == INITRD_LINK:
                raise BootlinkError(f"{path}/{INITRD_LINK} is missing or not a symlink: the version is incomplete; "
                                    "remove it (state=absent) and publish it again") from None
    unlisted = sorted(name for name in required if name not in sums)
    if unlisted:
        raise BootlinkError(f"{sums_path} does not list {', '.join(unlisted)}, so nothing vouches for what nodes would "
                            f"boot from version {version!r} of image {image!r}; nothing was changed: remove it "
                            "(state=absent) and publish it again")
    check_published_copy(path, image, version, {name: digest for name, digest in sums.items()
                                                if name in required or os.path.lexists(os.path.join(path, name))})
    tree.check_complete(image, version)
    return signer


# --------------------------------------------------------------------------- content store


def boot_digests(path: str) -> dict[str, str]:
    """``{file name: sha256}`` of the files nodes load from the published version ``path``: the kernel and what
    ``initrd`` (and ``rootfs.squashfs``) point at, as its SHA256SUMS lists them."""
    sums = read_sums(os.path.join(path, SUMS_FILE))
    names = [KERNEL_FILE]
    for link in (INITRD_LINK, SQUASHFS_LINK):
        with contextlib.suppress(OSError):
            names.append(os.readlink(os.path.join(path, link)))
    return {name: sums[name] for name in names if name in sums}


def link_content(tree: BootTree, image: str, version: str) -> list[str]:
    """Make ``sha256/<digest>`` of each boot file of a published (checked) version; returns the digests added.

    An entry is a hard link of the version's file (a copy where the file system has none), made under a temporary
    name and renamed: it appears complete or not at all, and it is never rewritten (its name is its content).
    """
    path = tree.version_dir(image, version)
    store = os.path.join(tree.root, CONTENT_DIR)
    added = []
    for name, digest in boot_digests(path).items():
        final = tree.content_path(digest)
        source = os.path.join(path, name)
        if os.path.lexists(final):
            if not os.path.isfile(final) or os.path.islink(final) or \
                    os.path.getsize(final) != os.path.getsize(source):
                raise BootlinkError(f"{final} is not the file {name} of image {image!r} version {version!r} names "
                                    "(another size or not a regular file): it was changed by hand; remove it and "
                                    "deploy again")
            continue
        try:
            os.makedirs(store, exist_ok=True)
            with replacing(final) as temp:
                try:
                    os.link(source, temp)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                        raise
                    _copy_file(source, temp)
        except OSError as exc:
            raise BootlinkError(f"cannot add {name} of image {image!r} version {version!r} to {store} "
                                f"({exc.strerror}); free space or fix the boot root's permissions and deploy "
                                "again. The served version is unchanged") from None
        added.append(digest)
    return added


def prune_content(tree: BootTree) -> list[str]:
    """Remove ``sha256/<digest>`` entries no published version of any image lists any more; returns them."""
    store = os.path.join(tree.root, CONTENT_DIR)
    try:
        entries = os.listdir(store)
    except FileNotFoundError:
        return []
    used: set[str] = set()
    images_root = os.path.join(tree.root, IMAGES_DIR)
    with contextlib.suppress(FileNotFoundError):
        for image in os.listdir(images_root):
            for info in tree.versions(image):
                with contextlib.suppress(ArtifactError):
                    used.update(read_sums(os.path.join(info.path, SUMS_FILE)).values())
    removed = [name for name in entries if not name.startswith(".") and name not in used]
    for name in removed:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(store, name))
    return sorted(removed)


# --------------------------------------------------------------------------- switch, retain, remove


def switch(tree: BootTree, image: str, version: str) -> tuple[str | None, bool]:
    """Point ``<boot_root>/<image>`` at ``version``; returns (old version, changed)."""
    tree.check_complete(image, version)
    old = tree.current(image)
    if old == version:
        return old, False
    replace_symlink(tree.served_target(image, version), tree.served_link(image))
    if old is not None and os.path.isdir(tree.version_dir(image, old)):
        replace_symlink(old, tree.previous_link(image))
    return old, True


def rollback_target(tree: BootTree, image: str) -> str:
    """The previous version (what a rollback serves); BootlinkError when there is none."""
    target = tree.previous(image)
    if target is None or not os.path.isdir(tree.version_dir(image, target)):
        raise BootlinkError(f"image {image!r} has no previous version to roll back to in {tree.image_dir(image)} "
                            f"(current: {tree.current(image) or 'none'}); switch to a published version instead "
                            "(state=switched, version=...)")
    return target


def rollback(tree: BootTree, image: str) -> tuple[str | None, str]:
    """Switch back to the previous version; returns (old, new)."""
    target = rollback_target(tree, image)
    old, _changed = switch(tree, image, target)
    return old, target


def retention_victims(tree: BootTree, image: str, keep: int, protect: frozenset[str] = frozenset()) -> list[str]:
    """Versions beyond the newest ``keep``, oldest first; never the current, previous or a ``protect``ed one."""
    if keep < 1:
        raise BootlinkError(f"keep must be at least 1, got {keep}")
    names = [info.name for info in tree.versions(image)]
    return plan_retention(names, keep, {tree.current(image), tree.previous(image), *protect})


def plan_retention(names: list[str], keep: int, protected: set[str | None]) -> list[str]:
    """Of ``names`` (oldest first), the ones to remove so at most ``keep`` remain, skipping ``protected``."""
    surplus = len(names) - keep
    victims: list[str] = []
    for name in names:
        if surplus <= 0:
            break
        if name in protected:
            continue
        victims.append(name)
        surplus -= 1
    return victims


def remove_version(tree: BootTree, image: str, version: str, check_mode: bool = False) -> bool:
    """Remove a published version no link points at; True if it existed."""
    path = tree.version_dir(image, version)
    if not os.path.isdir(path):
        return False
    for link, target in ((tree.served_link(image), tree.current(image)),
                         (tree.previous_link(image), tree.previous(image))):
        if target == version:
            raise BootlinkError(f"version {version!r} of image {image!r} is in use: {link} points at it; "
                                "switch or roll back to another version first")
    if not check_mode:
        _remove_tree(path)
    return True


def clean_leftovers(tree: BootTree, image: str) -> list[str]:
    """Remove temp dirs/links of interrupted runs (call with the lock held)."""
    removed = tree.leftovers(image)
    for path in removed:
        if os.path.islink(path) or not os.path.isdir(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    return removed


def check_writable(boot_root: str) -> None:
    """Raise a clear error when the boot root cannot be created or written."""
    probe = nearest_existing(boot_root)
    if not os.path.isdir(probe):
        raise BootlinkError(f"boot root {boot_root}: {probe} is not a directory; choose another boot root")
    if not os.access(probe, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only(probe) else "permission denied"
        raise BootlinkError(f"boot root {boot_root} is not writable ({reason} on {probe}); fix its permissions or "
                            "mount, or choose another boot root (hpc_stateless_boot_root)")


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def is_symlink(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


# --------------------------------------------------------------------------- the module's whole job

STATES = ("switched", "present", "rollback", "absent")


def describe(tree: BootTree, image: str, current: str | None = None, previous: str | None = None,
             versions: list[str] | None = None) -> str:
    """Text of the links and versions of one image (the --diff before/after)."""
    current = tree.current(image) if current is None else current
    previous = tree.previous(image) if previous is None else previous
    names = [info.name for info in tree.versions(image)] if versions is None else versions
    lines = [
        f"{tree.served_link(image)} -> " + (tree.served_target(image, current) if current else "(none)"),
        f"{tree.previous_link(image)} -> " + (previous or "(none)"),
        "published: " + (" ".join(names) or "(none)"),
    ]
    return "\n".join(lines) + "\n"


def apply_state(params: dict[str, Any], check_mode: bool = False,
                on_wait: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Do (or, in check mode, predict) what ``params`` ask for; the bootlink module's logic.

    ``params``: boot_root, image, state, src, version, format, keep, lock_timeout, keyring, signers.
    With a keyring, the signature of ``src`` is checked before anything else (check mode included), and
    so is the signature of a published version a switch by version or a rollback points the link at.
    Returns the module result (changed, current, previous, published, removed, versions, diff; with ``src``
    also manifest and verification).
    """
    tree = BootTree(params["boot_root"])
    image = check_name("image", params["image"])
    state = params.get("state") or "switched"
    if state not in STATES:
        raise BootlinkError(f"state {state!r} is not one of {', '.join(STATES)}")
    version = params.get("version")
    if version is not None:
        check_name("version", version)
    keep = int(params.get("keep") or 3)
    if keep < 1:
        raise BootlinkError(f"keep must be at least 1, got {keep}")
    keyring = params.get("keyring") or None
    signers = list(params.get("signers") or ())

    packed = None
    if params.get("src") and state in ("present", "switched"):
        packed = load_packed(find_packed(params["src"], version), params.get("format"), keyring, signers)
        if packed.image != image:
            raise BootlinkError(f"src {packed.path} holds image {packed.image!r}, not {image!r}; "
                                "point src at the pack output of this image")
        if version is not None and version != packed.version:
            raise BootlinkError(f"version {version!r} differs from {packed.path}/{MANIFEST_FILE} "
                                f"(version {packed.version!r}); drop version or pick the matching pack output")
        version = packed.version
        result_source = packed.path
        signature = _signature_entry(packed.signer, packed.signature is not None, keyring)
    else:
        result_source = None
        signature = None
    if state == "present" and packed is None:
        raise BootlinkError("state=present needs src: the pack output directory of the version to publish")
    if state == "switched" and version is None:
        raise BootlinkError("state=switched needs src (publish and switch) or version (switch to a published one)")
    if state == "absent" and version is None:
        raise BootlinkError("state=absent needs version: the published version to remove")

    check_writable(tree.root)
    old_current, old_previous = tree.current(image), tree.previous(image)
    downgrade = _downgrade(tree, image, packed, old_current, params) if packed is not None else None
    old_versions = [info.name for info in tree.versions(image)]
    before = describe(tree, image, old_current or "", old_previous or "", old_versions)
    result: dict[str, Any] = {"image": image, "boot_root": tree.root, "version": version, "source": result_source,
                              "published": False, "switched": False, "removed": [], "signature": signature,
                              "content": [], "content_removed": []}
    if downgrade:
        result["downgrade"] = downgrade
        result["warnings"] = [f"image {image!r}: downgrading from {downgrade['from']!r} (built {downgrade['from_built']})"
                              f" to {downgrade['to']!r} (built {downgrade['to_built']}), as allow_downgrade asks"]
    verify_target = _target_verifier(tree, image, keyring, signers, result)

    if check_mode:
        _predict(tree, image, state, packed, version, keep, result, old_current, old_previous, old_versions,
                 verify_target)
    else:
        os.makedirs(tree.root, exist_ok=True)
        with deploy_lock(tree.root, float(params.get("lock_timeout") or 0), f"bootlink {state} {image}", on_wait):
            result["cleaned"] = clean_leftovers(tree, image)
            _apply(tree, image, state, packed, version, keep, result, verify_target)
        result["current"], result["previous"] = tree.current(image), tree.previous(image)
        result["versions"] = [info.as_dict() for info in tree.versions(image)]

    if packed is not None:
        # What the boot entries are rendered from: the checked manifest, as published (in check mode, before
        # the version is published, the pack output's, checked in this run).
        published_manifest = os.path.join(tree.version_dir(image, packed.version), MANIFEST_FILE)
        result["manifest"] = published_manifest if os.path.isfile(published_manifest) else \
            os.path.join(packed.path, MANIFEST_FILE)
        result["verification"] = packed.manifest.get("verification")
        result["bytes"] = packed.payload_bytes()  # what publishing it copies (staging on a boot server: twice)
    new_versions = [v["version"] for v in result["versions"]] if not check_mode else result.pop("_names")
    after = describe(tree, image, result["current"] or "", result["previous"] or "", new_versions)
    result["changed"] = bool(result["published"] or result["switched"] or result["removed"])
    result["diff"] = {"before": before, "after": after,
                      "before_header": f"{tree.root} ({image})", "after_header": f"{tree.root} ({image})"}
    result["old_current"] = old_current
    return result


def _downgrade(tree: BootTree, image: str, packed: PackedVersion, current: str | None,
               params: Mapping[str, Any]) -> dict[str, str] | None:
    """What serving ``packed`` in place of the served version ``current`` downgrades (from, to, their build times),
    or None when it does not: ``packed`` is older when its layer image was built before the served one's (the
    manifests' ``created``, the order "the newest pack" is picked by). A downgrade is refused unless
    ``allow_downgrade`` asks for it: a pack output that lost its newest pack (or an older, validly signed release
    copied in) would otherwise serve old software, security fixes undone, without a word."""
    if not current or current == packed.version:
        return None
    try:
        served = read_manifest(os.path.join(tree.version_dir(image, current), MANIFEST_FILE))
    except ArtifactError:
        return None  # nothing to compare with: the served version's manifest is checked when it is switched to
    served_built, packed_built = str(served.get("created") or ""), str(packed.manifest.get("created") or "")
    try:
        if parse_iso_utc(packed_built) >= parse_iso_utc(served_built):
            return None
    except ValueError:
        return None  # a manifest without a build time (made by hand): no order to judge by
    change = {"from": current, "from_built": served_built, "to": packed.version, "to_built": packed_built}
    if params.get("allow_downgrade"):
        return change
    src = str(params.get("src") or "")
    picked = "" if params.get("version") else (
        f" (the newest pack in {src}; the served version's pack is not there)"
        if not os.path.isdir(os.path.join(src, current)) else f" (the newest pack in {src})")
    raise BootlinkError(
        f"image {image!r}: {packed.version!r}{picked} was built {packed_built}, before the served {current!r} "
        f"(built {served_built}): serving it is a downgrade. To roll back on purpose, ask for it "
        f"(hpc_stateless_deploy_downgrade: true with hpc_stateless_deploy_version: {packed.version}, or the module's "
        f"allow_downgrade: true); else put {current!r}'s pack back in the pack output. The boot tree is unchanged")


def _signature_entry(signer: Signer | None, signed: bool, keyring: str | None) -> dict[str, Any]:
    """The result's ``signature`` entry: checked (with the signer) when a keyring verified it."""
    if signer is None:
        return {"checked": False, "signed": signed}
    return {"checked": True, "signed": True, "keyring": keyring, **signer.as_dict()}


def _target_verifier(tree: BootTree, image: str, keyring: str | None, signers: list[str],
                     result: dict[str, Any]) -> Callable[[str], None]:
    """Check a published version a link is about to point at (:func:`verify_published`) and record its signature."""
    def check(version: str) -> None:
        signer = verify_published(tree, image, version, keyring, signers)
        signed = os.path.isfile(os.path.join(tree.version_dir(image, version), SIGNATURE_FILE))
        result["signature"] = _signature_entry(signer, signed, keyring)
    return check


def _apply(tree: BootTree, image: str, state: str, packed: PackedVersion | None, version: str | None,
           keep: int, result: dict[str, Any], verify_target: Callable[[str], None]) -> None:
    if packed is not None:
        result["published"] = publish(tree, packed)  # checks the source, or the published copy file by file
        result["content"] = link_content(tree, image, packed.version)
    if state == "switched":
        if packed is None and version != tree.current(image):
            verify_target(version)
        _old, result["switched"] = switch(tree, image, version)
        result["content"] += [d for d in link_content(tree, image, version) if d not in result["content"]]
    elif state == "rollback":
        verify_target(rollback_target(tree, image))
        _old, result["version"] = rollback(tree, image)
        result["switched"] = True
        result["content"] += link_content(tree, image, result["version"])
    elif state == "absent":
        if remove_version(tree, image, version):
            result["removed"].append(version)
            result["content_removed"] = prune_content(tree)
        return
    for victim in retention_victims(tree, image, keep, frozenset({version} if version else ())):
        remove_version(tree, image, victim)
        result["removed"].append(victim)
    if result["removed"]:
        result["content_removed"] = prune_content(tree)


def _predict(tree: BootTree, image: str, state: str, packed: PackedVersion | None, version: str | None,
             keep: int, result: dict[str, Any], current: str | None, previous: str | None,
             names: list[str], verify_target: Callable[[str], None]) -> None:
    names = list(names)
    if packed is not None:
        final = tree.version_dir(image, packed.version)
        if os.path.isdir(final):
            result["published"] = _check_same(tree, packed)
        else:
            verify_packed(packed)
            result["published"] = True
            names.append(packed.version)
    new_current, new_previous = current, previous
    if state == "switched":
        if version not in names:
            tree.check_complete(image, version)  # raises: not published
        if packed is None and version != current:
            verify_target(version)
        if version != current:
            result["switched"] = True
            new_current, new_previous = version, current or previous
        if version in names and not result["published"]:
            tree.check_complete(image, version)
    elif state == "rollback":
        target = rollback_target(tree, image)  # raises: no previous version
        verify_target(target)
        result["version"] = target
        result["switched"] = True
        new_current, new_previous = target, current
    elif state == "absent":
        if version in names:
            for link, target in ((tree.served_link(image), current), (tree.previous_link(image), previous)):
                if target == version:
                    raise BootlinkError(f"version {version!r} of image {image!r} is in use: {link} points at it; "
                                        "switch or roll back to another version first")
            result["removed"].append(version)
            names.remove(version)
    if state != "absent":
        for name in plan_retention(names, keep, {new_current, new_previous, version}):
            result["removed"].append(name)
            names.remove(name)
    result["current"], result["previous"] = new_current, new_previous
    result["versions"] = [{"version": name} for name in names]
    result["_names"] = names
