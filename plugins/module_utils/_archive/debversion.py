# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian package version ordering, from dpkg's documented rules (deb-version(7), Debian Policy 5.6.12).

A version is ``[epoch:]upstream[-revision]``. Epochs compare as numbers. Upstream and revision compare
the same way, left to right, alternating between a run of non-digits and a run of digits: non-digits
compare character by character with ``~`` before everything (even the end of the string), then the end,
then letters, then every other character (by its code); digit runs compare as numbers. A missing
revision compares as an empty one, so ``1.0`` equals ``1.0-0``.

    compare("1.0~rc1", "1.0") < 0       compare("1:0.9", "2.0") > 0      compare("3.0.20-1~deb12u1", "3.0.22-1~deb12u1") < 0
"""

from __future__ import annotations

from functools import cmp_to_key
from typing import NamedTuple


class Version(NamedTuple):
    """A parsed version: epoch (number), upstream version, Debian revision ("" when there is none)."""

    epoch: int
    upstream: str
    revision: str


def parse(version: str) -> Version:
    """Split ``version`` into epoch, upstream and revision; ValueError naming it when it is no Debian version."""
    text = version.strip() if isinstance(version, str) else version
    if not isinstance(text, str) or not text:
        raise ValueError(f"not a Debian version: {version!r} (empty)")
    if any(c.isspace() for c in text):
        raise ValueError(f"not a Debian version: {version!r} (contains white space)")
    epoch = 0
    head, colon, rest = text.partition(":")
    if colon:
        if not head.isdigit() or not head.isascii():
            raise ValueError(f"not a Debian version: {version!r} (the epoch {head!r} is not a number)")
        epoch, text = int(head), rest
    upstream, dash, revision = text.rpartition("-")
    if not dash:
        upstream, revision = text, ""
    if not upstream:
        raise ValueError(f"not a Debian version: {version!r} (no upstream version)")
    if dash and not revision:
        raise ValueError(f"not a Debian version: {version!r} (empty revision after '-')")
    return Version(epoch, upstream, revision)


def _order(char: str) -> int:
    """The weight of one non-digit character: ``~`` < end of string < letters < everything else."""
    if char == "~":
        return -1
    if "A" <= char <= "Z" or "a" <= char <= "z":
        return ord(char)
    return ord(char) + 256


def _isdigit(char: str) -> bool:
    return "0" <= char <= "9"


def _compare_part(a: str, b: str) -> int:
    """dpkg's ``verrevcmp``: compare one upstream version or one revision."""
    i = j = 0
    len_a, len_b = len(a), len(b)
    while i < len_a or j < len_b:
        # The non-digit run: character by character; the end of a string weighs 0.
        while (i < len_a and not _isdigit(a[i])) or (j < len_b and not _isdigit(b[j])):
            weight_a = _order(a[i]) if i < len_a and not _isdigit(a[i]) else 0
            weight_b = _order(b[j]) if j < len_b and not _isdigit(b[j]) else 0
            if weight_a != weight_b:
                return -1 if weight_a < weight_b else 1
            i += 1
            j += 1
        # The digit run: as a number (leading zeros skipped; the longer run is larger, else the first difference).
        while i < len_a and a[i] == "0":
            i += 1
        while j < len_b and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len_a and _isdigit(a[i]) and j < len_b and _isdigit(b[j]):
            if not first_diff and a[i] != b[j]:
                first_diff = -1 if a[i] < b[j] else 1
            i += 1
            j += 1
        if i < len_a and _isdigit(a[i]):
            return 1
        if j < len_b and _isdigit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` sorts before, equal to or after ``b`` (``dpkg --compare-versions``).

    Raises ValueError naming the version that is no Debian version.
    """
    left, right = parse(a), parse(b)
    if left.epoch != right.epoch:
        return -1 if left.epoch < right.epoch else 1
    return _compare_part(left.upstream, right.upstream) or _compare_part(left.revision, right.revision)


#: ``sorted(versions, key=sort_key)`` orders Debian versions oldest first.
sort_key = cmp_to_key(compare)


def newest(versions) -> str:
    """The newest of a non-empty iterable of versions."""
    best = None
    for version in versions:
        if best is None or compare(version, best) > 0:
            best = version
    if best is None:
        raise ValueError("newest() of no versions")
    return best
