# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A bounded DER reader for the secret scan: elements, children, object identifiers.

Only what telling a key from a certificate needs (X.690 definite lengths of up to 4 bytes); an
element that does not fit in the data, or a BER indefinite length, is None rather than an error,
so that hostile bytes cost at most one pass over the children the caller asks for.
"""

from __future__ import annotations

SEQUENCE = 0x30
SET = 0x31
INTEGER = 0x02
OCTET_STRING = 0x04
OID = 0x06
CONTEXT_0 = 0xA0

Element = tuple[int, int, int]  # (tag, content start, content end)


def element(data: bytes, at: int) -> Element | None:
    """(tag, content start, content end) of the DER element at ``at``, or None."""
    if at + 2 > len(data):
        return None
    tag, first = data[at], data[at + 1]
    if first < 0x80:
        start, length = at + 2, first
    elif 0x81 <= first <= 0x84:
        width = first - 0x80
        start, length = at + 2 + width, int.from_bytes(data[at + 2:at + 2 + width], "big")
    else:
        return None
    return (tag, start, start + length) if start + length <= len(data) else None


def declared_size(head: bytes) -> int | None:
    """How many bytes the DER element at the start of ``head`` spans (header and content), from its
    header alone: a file whose size is this is one DER structure. None when ``head`` has no such header."""
    if len(head) < 2 or head[0] != SEQUENCE:
        return None
    first = head[1]
    if first < 0x80:
        return 2 + first
    width = first - 0x80
    if not 1 <= width <= 4 or len(head) < 2 + width:
        return None
    return 2 + width + int.from_bytes(head[2:2 + width], "big")


def children(data: bytes, start: int, end: int, limit: int) -> list[Element]:
    """Up to ``limit`` consecutive elements from ``start`` that end by ``end``."""
    found: list[Element] = []
    at = start
    while at < end and len(found) < limit:
        item = element(data, at)
        if item is None or item[2] > end:
            break
        found.append(item)
        at = item[2]
    return found


def content(data: bytes, item: Element) -> bytes:
    """The content bytes of ``item``."""
    return data[item[1]:item[2]]


def oid(text: str) -> bytes:
    """The DER content bytes of the dotted object identifier ``text`` (``"1.2.840.113549.1.7.1"``)."""
    arcs = [int(arc) for arc in text.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)
