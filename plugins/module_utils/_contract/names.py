# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Names in the contract between pack and deploy: image and version names, formats, file names.

A pack version directory ``<output_dir>/<image>/<version>/`` holds::

    <image>.<format>     one per packed format (FORMATS)
    vmlinuz              the kernel (KERNEL_FILE)
    initrd.img           for squashfs, the initrd that mounts it, when one was made (INITRD_FILE)
    manifest.json        the manifest (MANIFEST_FILE, see _contract/manifest.py)
    sbom.cdx.json        the software bill of materials, CycloneDX JSON (SBOM_FILE)
    SHA256SUMS           sha256sum lines for every file above (SUMS_FILE, see _contract/sums.py)
    SHA256SUMS.asc       when the release is signed: GnuPG detached, armored signature of
                         SHA256SUMS (SIGNATURE_FILE); not listed in SHA256SUMS

Image and version names become directory names in the pack output and the boot tree, symlink
targets the TFTP server follows, ``KEY=value`` lines of /etc/image-release, pxelinux paths and
iPXE/HTTP URL paths. One rule, checked by pack before it writes and by deploy before it reads:

* letters, digits and ``. _ + ~ -``, starting with a letter or digit (Debian-style versions such
  as ``1.0~rc1`` and ``2.36-9+deb12u4``, and ``git describe`` output, fit);
* at most MAX_NAME_LENGTH characters;
* not one of RESERVED_NAMES: the boot tree's own entries, which a served-image symlink
  ``<boot_root>/<image>`` or a version directory must not replace.

No space, ``/``, ``,`` (pxelinux separates initrds with it), ``:``, ``$`` (iPXE settings), ``%``,
``#`` or ``?`` (URLs) can occur. ``~`` is unreserved in URLs; ``+`` is literal in a URL path but
reads as a space in query strings to some servers, so URLs quote names (see :func:`url_quote`).
"""

from __future__ import annotations

import re
import urllib.parse

MAX_NAME_LENGTH = 128
NAME_REGEX = r"[A-Za-z0-9][A-Za-z0-9._+~-]{0,%d}" % (MAX_NAME_LENGTH - 1)  # to embed in file-name patterns
NAME_PATTERN = re.compile(NAME_REGEX)  # use fullmatch: "$" would let a trailing newline through
NAME_CHARACTERS = "letters, digits and '._+~-'"
# Entries of the boot tree that share a directory with image or version names: <boot_root>/images,
# <boot_root>/images/<image>/previous (the rollback link), the boot configuration directories and
# the boot loader files deploy copies into the boot root. No image or version may take these names.
IMAGES_DIR = "images"
PREVIOUS_LINK = "previous"
PXE_DIR = "pxelinux.cfg"
IPXE_DIR = "ipxe"
LOADER_FILES = ("pxelinux.0", "ldlinux.c32")
# The content store of a boot root: <boot_root>/sha256/<hex> is an artifact named by the sha256 of its bytes
# (docs/scale.md), and the first-stage iPXE script that tries every boot server in turn.
CONTENT_DIR = "sha256"
FIRST_STAGE_FILE = "hpc-first.ipxe"
RESERVED_NAMES = frozenset({IMAGES_DIR, PREVIOUS_LINK, PXE_DIR, IPXE_DIR, CONTENT_DIR, FIRST_STAGE_FILE, *LOADER_FILES})

CPIO_FORMATS = ("cpio.zst", "cpio.gz", "cpio.xz")
SQUASHFS_FORMAT = "squashfs"
FORMATS = CPIO_FORMATS + (SQUASHFS_FORMAT,)
DEFAULT_FORMATS = ("cpio.zst",)

KERNEL_FILE = "vmlinuz"
INITRD_FILE = "initrd.img"
MANIFEST_FILE = "manifest.json"
SUMS_FILE = "SHA256SUMS"
SBOM_FILE = "sbom.cdx.json"
SIGNATURE_FILE = SUMS_FILE + ".asc"
RELEASE_PATH = "etc/image-release"  # inside the packed tree

# Verification records (_verify/record.py): <project>/build/VERIFY_DIR/<layer>-<content key>.json, one per
# layer image verified; pack and deploy read them, verify writes them.
VERIFY_DIR = "verify"
VERIFY_RECORD_SUFFIX = ".json"


def verify_record_file(layer: str, key: str) -> str:
    """File name of the verification record of ``layer`` at content key ``key``."""
    return f"{layer}-{key}{VERIFY_RECORD_SUFFIX}"


class ArtifactError(ValueError):
    """Pack output that breaks the contract; the message names the file, line or key and what to do."""


def check_name(kind: str, value: object) -> str:
    """``value`` unchanged when it is a usable ``kind`` ('image' or 'version') name; else ArtifactError."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value) or value in RESERVED_NAMES:
        raise ArtifactError(
            f"{kind} {value!r} is not a valid name: use {NAME_CHARACTERS}, starting with a letter or digit, "
            f"at most {MAX_NAME_LENGTH} characters, not one of {', '.join(sorted(RESERVED_NAMES))}")
    return value


def check_file_name(where: str, name: object) -> str:
    """``name`` when it is a plain file name inside a version directory (no path, not hidden)."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith(".") or "\0" in name:
        raise ArtifactError(f"{where}: {name!r} must be a plain file name inside the version directory")
    return name


def check_format(where: str, fmt: object) -> str:
    if fmt not in FORMATS:
        raise ArtifactError(f"{where}: unknown format {fmt!r} (supported: {', '.join(FORMATS)})")
    return str(fmt)


def artifact_file(image: str, fmt: str) -> str:
    """File name of the ``fmt`` artifact of ``image``: ``<image>.<format>``."""
    return f"{image}.{fmt}"


def format_of(file_name: str) -> str | None:
    """The format an artifact file name ends with, or None."""
    return next((fmt for fmt in FORMATS if file_name.endswith("." + fmt)), None)


def url_quote(name: str) -> str:
    """``name`` as a segment of an HTTP URL path: ``+`` becomes ``%2B``, which every server decodes back
    to ``+`` (a literal ``+`` reads as a space to servers that decode paths like form data)."""
    return urllib.parse.quote(name, safe="")
