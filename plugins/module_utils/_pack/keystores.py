# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Key stores by their structure: PKCS#12 (PFX) bundles and Java keystores (JKS, JCEKS).

A key store and a trust store have the same container; what tells them apart is in the clear in
both formats, without the password:

* PKCS#12 (RFC 7292): ``PFX ::= SEQUENCE { version 3, authSafe ContentInfo, macData }`` whose
  authSafe is pkcs7-data (1.2.840.113549.1.7.1) holding a SEQUENCE OF ContentInfo. Each of those
  is either pkcs7-data, whose SafeBags are listed with their bag type in the clear (keyBag,
  pkcs8ShroudedKeyBag, certBag, secretBag, ...), or encrypted (encryptedData, envelopedData), whose
  bags cannot be seen. OpenSSL, Java's keytool, Windows and NSS put a private key in a
  pkcs8ShroudedKeyBag (or, with ``-keypbe NONE``, a keyBag) of a *data* ContentInfo and encrypt only
  the certificates, so a key or secret bag in sight is a key store, and a bundle whose bags are
  certificates, in the clear or encrypted, is a trust store (Java's PKCS#12 trust stores encrypt
  their certificates). A bundle in public-key integrity mode (signedData: nothing in the clear) is
  reported, since a key cannot be ruled out. Not found: a key inside an encrypted SafeContents,
  which none of those tools writes.
* JKS (magic 0xFEEDFEED) and JCEKS (0xCECECECE), version 1 or 2: a count, then entries tagged
  1 (PrivateKeyEntry), 2 (trustedCertEntry) or 3 (SecretKeyEntry, JCEKS) with their alias in the
  clear. An entry tagged 1 or 3 is a key; a store of trustedCertEntry only (Debian's
  ``/etc/ssl/certs/java/cacerts``) is a trust store. PKCS#12 keystores (keytool's default since
  Java 9) are PFX bundles, above.
"""

from __future__ import annotations

import struct

from ansible_collections.hpc.stateless.plugins.module_utils._pack import der

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"
MAGICS = (JKS_MAGIC, JCEKS_MAGIC)

_DATA = der.oid("1.2.840.113549.1.7.1")
_SIGNED = der.oid("1.2.840.113549.1.7.2")
_BAG = "1.2.840.113549.1.12.10.1."
_KEY_BAGS = {der.oid(_BAG + "1"): "a private key (keyBag)", der.oid(_BAG + "2"): "a private key (pkcs8ShroudedKeyBag)",
             der.oid(_BAG + "5"): "a secret (secretBag)"}
_NESTED_BAG = der.oid(_BAG + "6")  # safeContentsBag: a SafeContents inside a bag
_MAX_BAGS = 4096
_MAX_ENTRIES = 65536


def pkcs12(data: bytes) -> str | None:
    """What the PKCS#12 bundle ``data`` (the whole file) is, when it is one that may hold a key, or None."""
    outer = der.element(data, 0)
    if outer is None or outer[0] != der.SEQUENCE or outer[2] != len(data):
        return None
    version, auth_safe = (der.children(data, outer[1], outer[2], 3) + [None, None])[:2]
    if version is None or auth_safe is None or version[0] != der.INTEGER or der.content(data, version) != b"\x03" \
            or auth_safe[0] != der.SEQUENCE:
        return None
    kind, inner = _content_info(data, auth_safe)
    if kind == _SIGNED:
        return "PKCS#12 (PFX) bundle in public-key integrity mode (a private key cannot be ruled out) at byte 0"
    if kind != _DATA or inner is None:
        return None
    infos = der.element(data, inner[1])
    if infos is None or infos[0] != der.SEQUENCE:
        return None
    for info in der.children(data, infos[1], infos[2], _MAX_BAGS):
        kind, inner = _content_info(data, info)
        if kind == _DATA and inner is not None:
            found = _safe_contents(data, inner[1], inner[2], 2)
            if found:
                return f"PKCS#12 (PFX) bundle with {found} at byte 0"
    return None


def _content_info(data: bytes, info: der.Element) -> tuple[bytes | None, der.Element | None]:
    """(content type OID, the OCTET STRING of a pkcs7-data content or None) of the ContentInfo ``info``."""
    parts = der.children(data, info[1], info[2], 2)
    if not parts or parts[0][0] != der.OID:
        return None, None
    kind = der.content(data, parts[0])
    if len(parts) < 2 or parts[1][0] != der.CONTEXT_0:
        return kind, None
    octets = der.element(data, parts[1][1])
    return kind, (octets if octets is not None and octets[0] == der.OCTET_STRING else None)


def _safe_contents(data: bytes, start: int, end: int, depth: int) -> str | None:
    """The key or secret bag among the SafeBags of the SafeContents at ``start``, if any."""
    sequence = der.element(data, start)
    if sequence is None or sequence[0] != der.SEQUENCE or sequence[2] > end:
        return None
    for bag in der.children(data, sequence[1], sequence[2], _MAX_BAGS):
        parts = der.children(data, bag[1], bag[2], 2)
        if not parts or parts[0][0] != der.OID:
            continue
        bag_id = der.content(data, parts[0])
        if bag_id in _KEY_BAGS:
            return _KEY_BAGS[bag_id]
        if bag_id == _NESTED_BAG and depth > 0 and len(parts) == 2 and parts[1][0] == der.CONTEXT_0:
            found = _safe_contents(data, parts[1][1], parts[1][2], depth - 1)
            if found:
                return found
    return None


def java_keystore(data: bytes) -> str | None:
    """The first key entry of the JKS or JCEKS keystore ``data`` (the whole file), or None (a trust store,
    or not a keystore)."""
    if len(data) < 12 or data[:4] not in MAGICS:
        return None
    name = "JKS" if data.startswith(JKS_MAGIC) else "JCEKS"
    version, count = struct.unpack(">II", data[4:12])
    if version not in (1, 2) or count > _MAX_ENTRIES:
        return None
    at = 12
    for _entry in range(count):
        if at + 6 > len(data):
            return None
        tag = struct.unpack(">I", data[at:at + 4])[0]
        alias, at = _utf(data, at + 4)
        if alias is None or tag not in (1, 2, 3):
            return None
        if tag in (1, 3):
            kind = "a private key" if tag == 1 else "a secret key"
            return f"Java keystore ({name}) with {kind} entry (alias {alias!r}) at byte 0"
        at += 8  # the timestamp
        if version == 2:
            _type, at = _utf(data, at)
            if _type is None:
                return None
        if at + 4 > len(data):
            return None
        at += 4 + struct.unpack(">I", data[at:at + 4])[0]
    return None


def _utf(data: bytes, at: int) -> tuple[str | None, int]:
    """A Java ``writeUTF`` string at ``at`` and the offset after it."""
    if at + 2 > len(data):
        return None, at
    length = struct.unpack(">H", data[at:at + 2])[0]
    raw = data[at + 2:at + 2 + length]
    if len(raw) != length:
        return None, at
    return raw.decode("utf-8", "replace"), at + 2 + length
