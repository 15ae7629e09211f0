# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets found by what a file holds, whatever its name: the content half of pack's preflight.

:func:`sniff_file` opens one regular file (never through a symlink, never a device or FIFO),
reads its beginning and says what secret it holds and where (``"OpenSSH private key block at
byte 0"``), or None; :func:`sniff_many` does it for all the files of a tree, shared between
processes; :func:`sniff_bytes` does it for the content of a file pack adds. What is read, and why
these bounds:

* files of 1 MiB or less (:data:`CONTENT_MAX_SIZE`): every key format below is a few KiB
  (an RSA-16384 PEM key is 13 KiB, a keytab with a hundred principals 10 KiB); 99 % of the
  files of a node image are smaller, and the large ones (libraries, firmware, locales) are
  not keys. Of a larger file, up to 16 MiB, only the first 512 bytes are read, to tell an
  archive (below);
* their first 16 KiB (:data:`HEAD_BYTES`): a key file starts with its key, and 16 KiB also
  covers a key that follows a certificate chain of several certificates in one PEM file, and
  the credentials of a configuration file. The rest of the file (up to 1 MiB) is read when
  the first 16 KiB hold a ``-----BEGIN`` line, a JSON-escaped or base64 PEM header (a key
  appended to a CA bundle, a kubeconfig of many clusters), when the file is a Java keystore,
  or when it is one DER structure as long as the file (a PKCS#12 bundle with a long chain);
* archives (tar, zip, gzip, bzip2, xz) of 16 MiB or less: the first 16 KiB of each member,
  within the bounds of :mod:`.archives` (1024 members, 32 MiB decompressed, streamed);
* files that start with the magic of a format that cannot be a key (ELF, zstd, images,
  compiled Python, ...) are not looked at further.

What is found (a *block* means: the BEGIN line at the start of a line, optionally indented,
the same indentation on every line, a body that is valid base64 - for DER key labels, of a
DER structure - and the matching END line; prose, scripts and source code that merely name
a header do not have that):

* PEM private-key blocks (``-----BEGIN [RSA |EC |DSA |ENCRYPTED |OPENSSH |]PRIVATE KEY-----``,
  legacy encrypted ones with ``Proc-Type``/``DEK-Info`` headers, CRLF line ends), PGP
  private-key blocks, OpenVPN static and tls-crypt-v2 keys, SSH2 (RFC 4716 style) encrypted
  private keys;
* PuTTY ``.ppk`` files (their first line is the header), age identities (in the first 4 KiB),
  GnuPG ``private-keys-v1.d`` key files, the binary ``openssh-key-v1`` and SSH1 private key
  formats;
* cloud and service credentials (:mod:`.credentials`): AWS key pairs, PEM keys in JSON strings
  (GCP service-account keys) and in base64 (kubeconfig ``client-key-data``), Azure connection
  string keys, Vault tokens, ``.pgpass`` and ``.netrc`` passwords, container registry auths;
* binary OpenPGP secret keys (a Secret-Key packet first), DER private keys (PKCS#1, SEC1,
  PKCS#8, encrypted PKCS#8) whose outer SEQUENCE spans the whole file;
* key stores (:mod:`.keystores`): PKCS#12 bundles with a key or secret bag, JKS and JCEKS
  keystores with a private or secret key entry (trust stores are not reported);
* Kerberos keytabs: version 0x05 0x01/0x02 and a first entry that parses (realm and principal
  printable, a known encryption type with the key length it implies);
* random key material the size of a MUNGE key (32 to 1024 bytes: what ``mungekey`` accepts;
  128 is its default, 1024 the classic ``dd`` recipe), see :func:`looks_random`;
* any of the above but random key material in a member of an archive (:mod:`.archives`).

Not found, on purpose: WireGuard configurations (the documentation's examples carry
well-formed keys), keys inside binaries, keys in files over 1 MiB and in archives over the
bounds above, archives inside archives, random key material inside an archive (compressed
test data would look the same), a key inside an encrypted PKCS#12 SafeContents or an encrypted
zip member, credentials past the first 16 KiB of a text file, and a MUNGE key that is not
random bytes (a passphrase typed into the file).
"""

from __future__ import annotations

import binascii
import io
import json
import math
import os
import re
import stat
from collections import Counter
from typing import Sequence

from ansible_collections.hpc.stateless.plugins.module_utils._pack import archives, credentials, der, keystores

CONTENT_MAX_SIZE = 1 << 20
HEAD_BYTES = 16 << 10
RANDOM_MIN_SIZE = 32  # mungekey's MUNGE_KEY_LEN_MIN_BYTES
RANDOM_MAX_SIZE = 1024  # mungekey's MUNGE_KEY_LEN_MAX_BYTES, and the classic dd recipe
# sniff_many: a share of the files for each of up to this many processes, from this many files on.
MAX_WORKERS = 4
PARALLEL_MIN_FILES = 2000
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)

# Formats that cannot be a key: nothing else is looked for in a file that starts with one.
_NOT_KEYS = (
    b"\x7fELF", archives.GZIP, archives.XZ, b"\x28\xb5\x2f\xfd", archives.BZIP2, b"\x04\x22\x4d\x18", b"\x89LZO",
    archives.ZIP, archives.EMPTY_ZIP, b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"%PDF", b"\x00asm", b"!<arch>\n", b"070701", b"070702",
    b"hsqs", b"TZif", b"SQLite format 3\x00", b"\xde\x12\x04\x95", b"\x95\x04\x12\xde", b"wOFF", b"wOF2",
    b"OTTO", b"\x00\x01\x00\x00\x00", b"RIFF", b"\xca\xfe\xba\xbe", b"\xed\xab\xee\xdb",
    b"\xf1\xc5\x01",  # NSS library checksums (libfreebl3.chk): a signature, random-looking
)
_PEM_MARK = b"-----BEGIN "
# A first window that holds one of these is followed by the rest of the file: a key may come later.
_READ_ON = (_PEM_MARK, b"LS0tLS1CRUdJTi", b"PRIVATE KEY-----\\n")
_PEM = re.compile(
    rb"^(?P<indent>[ \t]*)(?P<begin>-----BEGIN (?P<label>(?:[A-Z0-9]+ )*PRIVATE KEY|PGP PRIVATE KEY BLOCK"
    rb"|OpenVPN Static key V1|OpenVPN tls-crypt-v2 (?:server|client) key)-----)[ \t]*\r?\n"
    rb"(?P<headers>(?:(?P=indent)[A-Za-z][A-Za-z0-9-]*: ?[^\r\n]*\r?\n)*)"
    rb"(?:(?P=indent)[ \t]*\r?\n)?"
    rb"(?P<body>(?:(?P=indent)[A-Za-z0-9+/=]+[ \t]*\r?\n)+)"
    rb"(?P=indent)-----END (?P=label)-----", re.M)
_SSH2_MARK = b"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----"
_SSH2 = re.compile(
    rb"^(?P<begin>---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----)\r?\n"
    rb"(?:[A-Za-z][A-Za-z0-9-]*: [^\r\n]*\r?\n(?:[^\r\n:]*\\\r?\n)*)*"
    rb"(?P<body>(?:[A-Za-z0-9+/=]+\r?\n)+)---- END SSH2 ENCRYPTED PRIVATE KEY ----", re.M)
_PUTTY_MARK = b"PuTTY-User-Key-File-"
_PUTTY = re.compile(rb"^PuTTY-User-Key-File-[1-3]: [a-z0-9@.-]+\r?\n", re.M)
_PUTTY_PRIVATE = re.compile(rb"^Private-Lines: ([1-9][0-9]{0,3})\r?\n((?:[A-Za-z0-9+/=]+\r?\n)+)", re.M)
_AGE_MARK = b"AGE-SECRET-KEY-1"
_AGE = re.compile(rb"^AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}[ \t]*\r?$", re.M)
_GNUPG_SEXP = (b"(21:protected-private-key(", b"(11:private-key(")
_GNUPG_EXTENDED = re.compile(rb"^Key: \((?:protected-)?private-key \(", re.M)
_OPENSSH_BINARY = b"openssh-key-v1\x00"
_SSH1 = b"SSH PRIVATE KEY FILE FORMAT 1.1\n"

_PEM_NAMES = {
    b"OPENSSH PRIVATE KEY": "OpenSSH private key block",
    b"RSA PRIVATE KEY": "PEM RSA private key block",
    b"EC PRIVATE KEY": "PEM EC private key block",
    b"DSA PRIVATE KEY": "PEM DSA private key block",
    b"ENCRYPTED PRIVATE KEY": "PEM encrypted private key block",
    b"PRIVATE KEY": "PEM private key block",
    b"PGP PRIVATE KEY BLOCK": "PGP private key block",
    b"OpenVPN Static key V1": "OpenVPN static key block",
}
_HEX_BODY = (b"OpenVPN Static key V1",)
_MIN_BODY_CHARS = 40  # an Ed25519 PKCS#8 key, the smallest, has 64

# Kerberos encryption types and the key length each implies (RFC 3961/3962/8009, 4757, 6803).
_KEYTAB_ENCTYPES = {1: 8, 2: 8, 3: 8, 5: 24, 7: 24, 16: 24, 17: 16, 18: 32, 19: 16, 20: 32, 23: 16, 24: 16,
                    25: 16, 26: 32}
_PRINTABLE = re.compile(rb"[\x21-\x7e]+")
# OpenPGP public-key algorithms (RFC 4880, 9580).
_PGP_ALGORITHMS = {1, 2, 3, 16, 17, 18, 19, 20, 22, 25, 26, 27, 28}
_PGP_EPOCH = (631152000, 4102444800)  # 1990 .. 2100: a creation time a key can have

# DER OIDs (content bytes) of key algorithms (PKCS#8) and of password-based encryption (encrypted PKCS#8).
_KEY_OIDS = (bytes.fromhex("2a864886f70d010101"), bytes.fromhex("2a8648ce3d0201"), bytes.fromhex("2a8648ce380401"),
             bytes.fromhex("2b6570"), bytes.fromhex("2b6571"), bytes.fromhex("2b656e"), bytes.fromhex("2b656f"),
             bytes.fromhex("2a864886f70d01010a"), bytes.fromhex("2a864886f70d010301"))
_PBE_OID_PREFIXES = (bytes.fromhex("2a864886f70d01050d"), bytes.fromhex("2a864886f70d010c01"),
                     bytes.fromhex("2a864886f70d0105"))


def sniff_file(path: str | bytes, size: int) -> str | None:
    """What secret the regular file at ``path`` (``size`` bytes by lstat) holds, or None.

    Opened with O_NOFOLLOW and O_NONBLOCK and checked with fstat: a file replaced by a symlink,
    a FIFO or a device since it was listed is not read. Unreadable files are None.
    """
    if not 0 < size <= archives.ARCHIVE_MAX_SIZE:
        return None
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, HEAD_BYTES if size <= CONTENT_MAX_SIZE else 512)
        kind = archives.kind_of(data)
        if kind:
            with open(fd, "rb", closefd=False) as source:
                return archives.scan_archive(source, kind, size, _sniff_member, HEAD_BYTES)
        if size > CONTENT_MAX_SIZE:
            return None
        if len(data) == HEAD_BYTES and len(data) < size and _read_on(data, size):
            data += _read_rest(fd, CONTENT_MAX_SIZE - len(data))
        whole = len(data) < HEAD_BYTES or len(data) >= size
    except OSError:
        return None
    finally:
        os.close(fd)
    return sniff(data, whole)


def sniff_many(files: Sequence[tuple[str | bytes, int]], workers: int = 0) -> dict[int, str]:
    """:func:`sniff_file` of every ``(path, size)`` of ``files``: ``{index: what was found}`` for the files
    that hold a secret.

    From :data:`PARALLEL_MIN_FILES` files on, the files are shared out, index modulo the number of
    processes, between this process and forked children (``workers``, default: the CPUs, at most
    :data:`MAX_WORKERS`), which send back what they found as JSON through a pipe and ``_exit``; a
    child that fails has its share sniffed here again. The findings are the same either way.
    """
    count = min(workers or os.cpu_count() or 1, MAX_WORKERS)
    if count < 2 or len(files) < PARALLEL_MIN_FILES:
        return _sniff_share(files, 0, 1)
    children = [(share, *_fork_share(files, share, count)) for share in range(1, count)]
    found = _sniff_share(files, 0, count)
    for share, pid, pipe in children:
        result = _collect(pid, pipe)
        found.update(_sniff_share(files, share, count) if result is None else result)
    return found


def _sniff_share(files: Sequence[tuple[str | bytes, int]], share: int, count: int) -> dict[int, str]:
    found = {}
    for index in range(share, len(files), count):
        reason = sniff_file(*files[index])
        if reason:
            found[index] = reason
    return found


def _fork_share(files: Sequence[tuple[str | bytes, int]], share: int, count: int) -> tuple[int, int]:
    """(pid, read end of its pipe) of a child that sniffs one share and writes ``{index: reason}`` as JSON."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    status = 1
    try:  # the child: nothing of the parent's (atexit, finally, buffered output) may run here
        os.close(read_end)
        data = memoryview(json.dumps(_sniff_share(files, share, count)).encode())
        while data:
            data = data[os.write(write_end, data):]
        status = 0
    finally:
        os._exit(status)  # pylint: disable=protected-access


def _collect(pid: int, pipe: int) -> dict[int, str] | None:
    """What the child ``pid`` found, or None when it did not finish well."""
    chunks = []
    try:
        while True:
            chunk = os.read(pipe, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(pipe)
    _pid, status = os.waitpid(pid, 0)
    if status != 0:
        return None
    try:
        return {int(index): str(reason) for index, reason in json.loads(b"".join(chunks)).items()}
    except (ValueError, AttributeError):
        return None


def sniff_bytes(data: bytes) -> str | None:
    """What secret ``data``, the whole content of a file that pack itself adds to an image, holds, or None;
    read within the bounds :func:`sniff_file` reads a file in."""
    if not 0 < len(data) <= archives.ARCHIVE_MAX_SIZE:
        return None
    kind = archives.kind_of(data[:HEAD_BYTES])
    if kind:
        return archives.scan_archive(io.BytesIO(data), kind, len(data), _sniff_member, HEAD_BYTES)
    if len(data) > CONTENT_MAX_SIZE:
        return None
    head = data[:HEAD_BYTES]
    if len(head) == HEAD_BYTES and _read_on(head, len(data)):
        head = data
    return sniff(head, len(head) == len(data))


def _read_on(head: bytes, size: int) -> bool:
    """Whether a file of ``size`` bytes whose first window is ``head`` is read to its end (or 1 MiB)."""
    if head.startswith(keystores.MAGICS) or der.declared_size(head) == size:
        return True
    return not head.startswith(_NOT_KEYS) and any(mark in head for mark in _READ_ON)


def _sniff_member(data: bytes, whole: bool) -> str | None:
    """:func:`sniff` for a member of an archive: every form but random key material."""
    return sniff(data, whole, member=True)


def _read_rest(fd: int, limit: int) -> bytes:
    chunks = []
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def sniff(data: bytes, whole: bool = True, member: bool = False) -> str | None:
    """What secret ``data`` (a file's beginning; ``whole`` when it is all of it) holds, or None;
    ``member``: ``data`` is a member of an archive, where random bytes are not a finding."""
    if not data:
        return None
    found = _binary(data, whole)
    if found or data.startswith(_NOT_KEYS) or data.startswith(keystores.MAGICS):
        return found
    found = _text(data)
    if found:
        return found
    if not member and whole and RANDOM_MIN_SIZE <= len(data) <= RANDOM_MAX_SIZE and not _structured(data) \
            and looks_random(data):
        return f"{len(data)} random bytes with no file format, as in a MUNGE key, at byte 0"
    return None


# -- text formats ----------------------------------------------------------------------------
def _text(data: bytes) -> str | None:
    # One pass over the window for the armored formats; the others are at the start of their files.
    if b"BEGIN" in data:
        found = _armored(data)
        if found:
            return found
    if data.startswith(_PUTTY_MARK):
        found = _putty(data)
        if found:
            return found
    if data.find(_AGE_MARK, 0, 4096) >= 0:
        match = _AGE.search(data)
        if match:
            return f"age secret key at byte {match.start()}"
    if data.startswith(_GNUPG_SEXP):
        return "GnuPG private key (private-keys-v1.d) at byte 0"
    if re.match(rb"[A-Z][A-Za-z-]*: ", data):
        match = _GNUPG_EXTENDED.search(data)
        if match:
            return f"GnuPG private key (private-keys-v1.d, extended format) at byte {match.start()}"
    return credentials.credential(data, _armored)


def _armored(data: bytes) -> str | None:
    if _PEM_MARK in data:
        for match in _PEM.finditer(data):
            if _pem_body_ok(match):
                label = match.group("label")
                name = _PEM_NAMES.get(label) or f"PEM {label.decode('ascii')} block"
                return f"{name} at byte {match.start('begin')}"
    if _SSH2_MARK in data:
        for match in _SSH2.finditer(data):
            if _base64(match.group("body")) is not None:
                return f"SSH2 encrypted private key block at byte {match.start('begin')}"
    return None


def _pem_body_ok(match: re.Match[bytes]) -> bool:
    label, body = match.group("label"), match.group("body")
    compact = b"".join(body.split())
    if len(compact) < _MIN_BODY_CHARS:
        return False
    if label in _HEX_BODY:
        return re.fullmatch(rb"[0-9a-f]+", compact) is not None and len(compact) % 2 == 0
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if label == b"PGP PRIVATE KEY BLOCK" and lines and lines[-1].startswith(b"="):
        lines = lines[:-1]  # the armor checksum
    decoded = _base64(b"".join(lines))
    if decoded is None or len(decoded) < 24:
        return False
    encrypted_legacy = b"Proc-Type:" in match.group("headers")
    if label == b"OPENSSH PRIVATE KEY":
        return decoded.startswith(_OPENSSH_BINARY)
    if label.endswith(b"PRIVATE KEY") and not encrypted_legacy:
        return decoded[0] == 0x30  # a DER SEQUENCE
    return True


def _base64(text: bytes) -> bytes | None:
    try:
        return binascii.a2b_base64(b"".join(text.split()), strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def _putty(data: bytes) -> str | None:
    match = _PUTTY.match(data)
    private = _PUTTY_PRIVATE.search(data, match.end()) if match else None
    if private and len(private.group(2).splitlines()) >= int(private.group(1)):
        return "PuTTY private key file at byte 0"
    return None


# -- binary formats ---------------------------------------------------------------------------
def _binary(data: bytes, whole: bool) -> str | None:
    if data.startswith(_OPENSSH_BINARY):
        return "OpenSSH private key (binary openssh-key-v1) at byte 0"
    if data.startswith(_SSH1):
        return "SSH1 private key at byte 0"
    if data[0] == 0x05 and data[1:2] in (b"\x01", b"\x02") and _keytab(data):
        return "Kerberos keytab at byte 0"
    if data[0] & 0x80 and _pgp_packet(data, (5,)) is not None:
        return "OpenPGP secret key (binary) at byte 0"
    if data[0] == der.SEQUENCE and whole:
        return _der_key(data) or keystores.pkcs12(data)
    if data.startswith(keystores.MAGICS) and whole:
        return keystores.java_keystore(data)
    return None


def _keytab(data: bytes) -> bool:
    """The first entry (after deleted ones) parses: printable realm and names, a known enctype and key."""
    order = "big" if data[1] == 2 else "little"  # version 1 used the host's byte order
    offset = 2
    for _entry in range(16):
        if offset + 4 > len(data):
            return False
        length = int.from_bytes(data[offset:offset + 4], "big", signed=True)
        offset += 4
        if length < 0:
            offset -= length  # a deleted entry
            continue
        if not 16 <= length <= 65536 or offset + length > len(data):
            return False
        return _keytab_entry(data[offset:offset + length], data[1] == 2, order)
    return False


def _keytab_entry(entry: bytes, version2: bool, order: str) -> bool:
    def u16(at: int) -> int:
        return int.from_bytes(entry[at:at + 2], order)

    count, at = u16(0), 2
    if version2 and not 1 <= count <= 16 or not version2 and not 2 <= count <= 17:
        return False
    for _part in range(count + (1 if version2 else 0)):  # the realm, then the name's components
        size = u16(at)
        text = entry[at + 2:at + 2 + size]
        if not 1 <= size <= 255 or len(text) != size or not _PRINTABLE.fullmatch(text):
            return False
        at += 2 + size
    if version2:
        if int.from_bytes(entry[at:at + 4], order) > 64:  # name type
            return False
        at += 4
    at += 4 + 1  # timestamp, 8-bit key version
    enctype, key_length = u16(at), u16(at + 2)
    return _KEYTAB_ENCTYPES.get(enctype) == key_length and at + 4 + key_length <= len(entry)


def _pgp_packet(data: bytes, tags: tuple[int, ...]) -> int | None:
    """The tag of the OpenPGP packet ``data`` starts with, if it is one of ``tags`` and its key header is sane."""
    first = data[0]
    if first & 0x40:
        tag, size_byte = first & 0x3F, data[1] if len(data) > 1 else 0
        if size_byte < 192:
            length, header = size_byte, 2
        elif size_byte < 224 and len(data) > 2:
            length, header = ((size_byte - 192) << 8) + data[2] + 192, 3
        elif size_byte == 255 and len(data) > 5:
            length, header = int.from_bytes(data[2:6], "big"), 6
        else:
            return None
    else:
        tag, kind = (first >> 2) & 0x0F, first & 0x03
        if kind == 3:
            return None
        width = 1 << kind
        length, header = int.from_bytes(data[1:1 + width], "big"), 1 + width
    if tag not in tags or length < 12 or len(data) < header + 12:
        return None
    body = data[header:]
    if tag == 2:  # a signature: version, then type, algorithm and hash (v4+)
        return tag if body[0] in (4, 5, 6) and body[2] in _PGP_ALGORITHMS and 1 <= body[3] <= 14 else None
    version, created = body[0], int.from_bytes(body[1:5], "big")
    algorithm = body[7] if version == 3 else body[5]
    if version in (3, 4, 5, 6) and _PGP_EPOCH[0] <= created <= _PGP_EPOCH[1] and algorithm in _PGP_ALGORITHMS:
        return tag
    return None


def _structured(data: bytes) -> bool:
    """Random-looking but not a secret: an OpenPGP public key, subkey or signature (a keyring, a
    detached .sig), or one DER element spanning the file (a public key, a certificate)."""
    if data[0] & 0x80 and _pgp_packet(data, (2, 6, 14)) is not None:
        return True
    element = der.element(data, 0)
    return element is not None and element[0] in (der.SEQUENCE, der.SET) and element[2] == len(data)


def _der_key(data: bytes) -> str | None:
    """A DER private key whose outer SEQUENCE is the whole file."""
    outer = der.element(data, 0)
    if outer is None or outer[2] != len(data):
        return None
    kids = der.children(data, outer[1], outer[2], 9)
    tags = [kid[0] for kid in kids]
    small_int = [data[kid[1]:kid[2]] if kid[0] == 0x02 else None for kid in kids]
    if tags[:3] == [0x02, 0x30, 0x04] and small_int[0] in (b"\x00", b"\x01"):
        algorithm = der.element(data, kids[1][1])
        if algorithm and algorithm[0] == 0x06 and data[algorithm[1]:algorithm[2]] in _KEY_OIDS:
            return "DER private key (PKCS#8) at byte 0"
    if tags[:2] == [0x30, 0x04] and len(kids) == 2:
        algorithm = der.element(data, kids[0][1])
        if algorithm and algorithm[0] == 0x06 and data[algorithm[1]:algorithm[2]].startswith(_PBE_OID_PREFIXES):
            return "DER encrypted private key (PKCS#8) at byte 0"
    if tags == [0x02] * 9 and small_int[0] == b"\x00" and kids[1][2] - kids[1][1] >= 64:
        return "DER RSA private key (PKCS#1) at byte 0"
    if tags == [0x02] * 6 and small_int[0] == b"\x00" and kids[1][2] - kids[1][1] >= 64:
        return "DER DSA private key at byte 0"
    if tags[:2] == [0x02, 0x04] and small_int[0] == b"\x01" and 16 <= kids[1][2] - kids[1][1] <= 66 \
            and (len(tags) == 2 or tags[2] in (0xA0, 0xA1)):
        return "DER EC private key (SEC1) at byte 0"
    return None


# -- random key material ------------------------------------------------------------------------
def looks_random(data: bytes) -> bool:
    """True when ``data`` is as varied as uniform random bytes of its length (a MUNGE key, a JWT key).

    ASCII text is not; then two tests, set so loose that 10^5 random samples of every size
    from 32 to 1024 bytes never fail them, while text, UTF-8, tables and code fail by far:

    * distinct byte values: at least the random expectation minus 8 standard deviations
      (near 1024 bytes the number of values never seen is Poisson, with a long tail: the
      worst of 10^5 samples is 6 deviations below);
    * the high and the low nibbles each spread over their 16 values: chi-square <= 90
      (15 degrees of freedom; the worst of 10^5 samples of 33 bytes reaches 77);
    * the differences of successive bytes pass the distinct-values test too: a table that
      counts through the byte values (a test fixture) is uniform, but not random.
    """
    size = len(data)
    if data.isascii():  # 32 random bytes are all below 0x80 once in 4 billion
        return False
    counts = Counter(data)
    expected, deviation = _distinct_bytes(size)
    if len(counts) < expected - 8 * deviation:
        return False
    high, low = [0] * 16, [0] * 16
    for value, count in counts.items():
        high[value >> 4] += count
        low[value & 15] += count
    mean = size / 16
    if any(sum((c - mean) ** 2 for c in nibbles) / mean > 90 for nibbles in (high, low)):
        return False
    steps = {(after - before) & 0xFF for before, after in zip(data, data[1:])}
    expected, deviation = _distinct_bytes(size - 1)
    return len(steps) >= expected - 8 * deviation


def _distinct_bytes(size: int) -> tuple[float, float]:
    """Mean and standard deviation of the number of distinct values among ``size`` random bytes."""
    miss1, miss2 = (255 / 256) ** size, (254 / 256) ** size
    mean = 256 * (1 - miss1)
    variance = 256 * 255 * miss2 + 256 * miss1 - 256 * 256 * miss1 * miss1
    return mean, math.sqrt(max(variance, 0.0))
