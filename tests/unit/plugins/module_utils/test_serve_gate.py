# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Deploy's side of the verify gate: which packs are served, on which override, and what is said."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import serve_gate

SOURCE = "/srv/images/compute/v2"


def test_a_passed_pack_is_served():
    verdict = serve_gate("compute", "v2", SOURCE, {"status": "passed", "layer": "compute"})
    assert verdict.to_dict() == {"servable": True, "status": "passed",
                                 "message": "image compute version v2: verification passed"}


def test_a_pack_made_on_an_override_is_served_naming_the_pack_time_reason():
    verdict = serve_gate("compute", "v2", SOURCE, {"status": "overridden", "override_reason": "INC-4711"})
    assert verdict.servable
    assert verdict.message == "image compute version v2: verification overridden - OVERRIDE at pack time: INC-4711"


@pytest.mark.parametrize("verification, found", [
    (None, "no verification (packed without the verify gate, or by an older release)"),
    ({}, "no verification (packed without the verify gate, or by an older release)"),
    ({"status": "not-checked"}, "verification status not-checked"),
    ({"status": "failed"}, "verification status failed"),
])
def test_anything_else_is_refused_saying_what_to_do(verification, found):
    verdict = serve_gate("compute", "v2", SOURCE, verification)
    assert not verdict.servable
    assert verdict.message == (
        f"image compute version v2 ({SOURCE}): refused, its manifest records {found}. Verify the layer "
        "(ansible-playbook playbooks/verify.yml), pack again (playbooks/pack.yml) and deploy; in an emergency only, "
        "set hpc_stateless_unverified_ok to the reason to serve it anyway.")


def test_a_deploy_time_override_serves_it_and_says_so():
    verdict = serve_gate("compute", "v2", SOURCE, None, "  rollback to a pre-gate pack ")
    assert (verdict.servable, verdict.status) == (True, "none")
    assert verdict.message == ("image compute version v2: verification none - OVERRIDE at deploy "
                               "(hpc_stateless_unverified_ok): rollback to a pre-gate pack")


def test_a_blank_override_is_no_override():
    assert not serve_gate("compute", "v2", SOURCE, {"status": "failed"}, "   ").servable


def test_a_passed_pack_needs_no_override_and_names_none():
    assert serve_gate("compute", "v2", SOURCE, {"status": "passed"}, "reason").message.endswith("verification passed")
