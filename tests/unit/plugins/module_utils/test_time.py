# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one time format: what the manifest, the record, the boot tree and lock notes write, and what reads it back."""

from __future__ import annotations

import time

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc, parse_iso_utc


def test_an_epoch_is_written_in_utc_to_the_second():
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(1_700_000_000) == "2023-11-14T22:13:20Z"
    assert iso_utc(1_700_000_000.999) == "2023-11-14T22:13:20Z"  # fractions dropped, never rounded up


def test_without_an_epoch_it_is_now():
    before = int(time.time())
    assert before <= parse_iso_utc(iso_utc()) <= int(time.time())


@pytest.mark.parametrize("epoch", [0, 86_399, 1_700_000_000, 4_102_444_800])
def test_what_it_writes_reads_back(epoch):
    assert parse_iso_utc(iso_utc(epoch)) == epoch


@pytest.mark.parametrize("text, epoch", [
    ("2023-11-14T22:13:20.123456789Z", 1_700_000_000),  # buildah's nanoseconds
    ("2023-11-14 23:13:20+01:00", 1_700_000_000),
    ("2023-11-14T17:13:20-0500", 1_700_000_000),
    ("2023-11-14T22:13:20", 1_700_000_000),  # no zone: UTC, not the host's
])
def test_rfc3339_times_of_other_zones_and_precisions(text, epoch):
    assert parse_iso_utc(text) == epoch


def test_a_text_that_is_no_time_is_named():
    with pytest.raises(ValueError, match=r"not an ISO 8601 time: 'yesterday'"):
        parse_iso_utc("yesterday")
