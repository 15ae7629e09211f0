# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Verification records: what verify found for one layer image, and the gate pack and deploy apply.

verify.yml boots a layer image under systemd-nspawn and writes, whatever the outcome, one record
``<record dir>/<layer>-<content key>.json`` (names.verify_record_file) holding the image reference,
the image ID booted, the time and every check with its result. A label cannot be added to an image
without making a new image ID, so the record lives beside the build outputs (``<project>/build/verify``)
and is keyed by layer and content key; the image ID inside it ties it to the exact image booted.

pack asks :func:`gate` before it writes a byte: a passing record for the image ID it packs, or an
explicit override reason (hpc_stateless_unverified_ok), else :class:`UnverifiedError` naming the checks
that failed, or that verify never ran, and the command that runs it. The verdict goes into the pack's
manifest (:meth:`Verdict.manifest_entry`), which deploy reads: a pack made on another host carries its
verification with it.
"""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Iterable

from ansible_collections.hpc.stateless.plugins.module_utils._paths import write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc
from ansible_collections.hpc.stateless.plugins.module_utils._contract import names
from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import (
    FAILED,
    GOOD_RESULTS,
    PASSED as CHECK_PASSED,
    RESULTS,
    WAIVED,
)

RECORD_FORMAT = 1
#: The JUnit XML report of a record, beside it (GitLab's test report reads it).
JUNIT_SUFFIX = ".junit.xml"
OVERRIDE_VARIABLE = "hpc_stateless_unverified_ok"
PASSED = "passed"
OVERRIDDEN = "overridden"
NOT_CHECKED = "not-checked"
# Manifest statuses deploy serves (deploy.yml): anything else is refused unless overridden there.
SERVABLE = (PASSED, OVERRIDDEN)


class RecordError(ValueError):
    """A record that cannot be read or written; the message names the file and what to do."""


class UnverifiedError(Exception):
    """The image has no passing verification for its current content key and no override was given."""


def verify_command(layer: str) -> str:
    """The exact command that verifies ``layer`` (from a checkout; a site repository imports hpc.stateless.verify)."""
    return ("ansible-playbook playbooks/verify.yml -e '{\"hpc_stateless_verify_layers\": [\"%s\"]}'" % layer)


@dataclass(frozen=True)
class Check:
    """One check verify ran: its ``name`` (the id), whether the gate lets it through (``passed``), its
    ``result`` (suite.RESULTS: passed, failed, error, waived, skipped), the ``waiver`` reason that excused it
    and a ``detail`` (what failed, why it was skipped)."""

    name: str
    passed: bool
    detail: str = ""
    result: str = ""
    waiver: str = ""

    def __post_init__(self) -> None:
        if not self.result:
            object.__setattr__(self, "result", CHECK_PASSED if self.passed else FAILED)

    @classmethod
    def from_dict(cls, where: str, data: Any) -> "Check":
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
            raise RecordError(f"{where}: each check needs a non-empty 'name', got {data!r}")
        if not isinstance(data.get("passed"), bool):
            raise RecordError(f"{where}: check {data['name']!r} needs 'passed' true or false, got {data.get('passed')!r}")
        result = str(data.get("result") or "")
        if result and result not in RESULTS:
            raise RecordError(f"{where}: check {data['name']!r} has result {result!r}; expected one of {list(RESULTS)}")
        if result and (result in GOOD_RESULTS) != data["passed"]:
            raise RecordError(f"{where}: check {data['name']!r} has result {result!r} but passed "
                              f"{data['passed']!r}; a {result} check {'passes' if result in GOOD_RESULTS else 'fails'}")
        waiver = str(data.get("waiver") or "").strip()
        if result == WAIVED and not waiver:
            raise RecordError(f"{where}: check {data['name']!r} is waived without a reason; give the waiver's reason")
        detail = str(data.get("detail") or "")
        check_id = data.get("id")
        if isinstance(check_id, str) and check_id and check_id != data["name"]:
            # {id, name}: the id names the check in the record; the name, its words, leads the detail
            detail = f"{data['name']}: {detail}" if detail else data["name"]
            return cls(check_id, data["passed"], detail, result, waiver)
        return cls(data["name"], data["passed"], detail, result, waiver)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "passed": self.passed, "result": self.result, "detail": self.detail}
        if self.waiver:
            entry["waiver"] = self.waiver
        return entry


@dataclass(frozen=True)
class Record:
    layer: str
    key: str
    image: str
    image_id: str
    checks: tuple[Check, ...]
    verified_at: int = field(default_factory=lambda: int(time.time()))
    # What verify was told to accept (units allowed to fail, ...): a boot judged with other
    # settings is not reused by verify (judge's ``settings``).
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    @property
    def file_name(self) -> str:
        return names.verify_record_file(self.layer, self.key)

    def to_dict(self) -> dict[str, Any]:
        return {"format": RECORD_FORMAT, "layer": self.layer, "key": self.key, "image": self.image,
                "image_id": self.image_id, "passed": self.passed, "verified_at": iso_utc(self.verified_at),
                "verified_at_epoch": self.verified_at, "settings": self.settings,
                "checks": [c.to_dict() for c in self.checks]}

    @classmethod
    def from_dict(cls, where: str, data: Any) -> "Record":
        if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
            raise RecordError(f"{where}: not a verification record of format {RECORD_FORMAT}; "
                              "remove it and verify again")
        for name in ("layer", "key", "image", "image_id"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise RecordError(f"{where}: '{name}' is missing or empty; remove the file and verify again")
        checks = data.get("checks")
        if not isinstance(checks, list):
            raise RecordError(f"{where}: 'checks' must be a list; remove the file and verify again")
        epoch = data.get("verified_at_epoch")
        settings = data.get("settings")
        return cls(data["layer"], data["key"], data["image"], data["image_id"],
                   tuple(Check.from_dict(where, c) for c in checks), epoch if isinstance(epoch, int) else 0,
                   settings if isinstance(settings, dict) else {})


def _check_names(layer: str, key: str) -> None:
    try:
        names.check_name("layer", layer)
        names.check_name("content key", key)
    except names.ArtifactError as exc:
        raise RecordError(str(exc)) from exc


def record_path(record_dir: str, layer: str, key: str) -> str:
    _check_names(layer, key)
    return os.path.join(record_dir, names.verify_record_file(layer, key))


def junit_path(record_path_: str) -> str:
    """The JUnit report beside a record: ``<layer>-<key>.junit.xml``."""
    return os.path.splitext(record_path_)[0] + JUNIT_SUFFIX


def junit_xml(record: Record) -> str:
    """The record as a JUnit XML report: one test suite (the layer), one test case per check (:func:`checks_junit`)."""
    return checks_junit(f"verify {record.layer}", f"verify.{record.layer}", record.image, record.verified_at,
                        (("layer", record.layer), ("key", record.key), ("image", record.image),
                         ("image_id", record.image_id)), record.checks)


def checks_junit(suite_name: str, classname: str, hostname: str, epoch: int,
                 properties: Iterable[tuple[str, str]], checks: Iterable[Check]) -> str:
    """Checks as a JUnit XML report (GitLab's test report): one test suite, one test case per check; a failed
    check is a ``failure``, one that could not run an ``error``, a waived or skipped one ``skipped`` with the
    waiver's reason. Verify's record and the live nodes' drift report (_verify/drift.py) both use it."""
    checks = list(checks)
    counts = {result: sum(1 for c in checks if c.result == result) for result in RESULTS}
    suite = ET.Element("testsuite", {
        "name": suite_name, "tests": str(len(checks)), "failures": str(counts["failed"]),
        "errors": str(counts["error"]), "skipped": str(counts["waived"] + counts["skipped"]),
        "timestamp": iso_utc(epoch), "hostname": hostname})
    element_properties = ET.SubElement(suite, "properties")
    for name, value in properties:
        ET.SubElement(element_properties, "property", {"name": name, "value": value})
    for check in checks:
        case = ET.SubElement(suite, "testcase", {"classname": classname, "name": check.name})
        if check.result in ("failed", "error"):
            element = ET.SubElement(case, "failure" if check.result == "failed" else "error",
                                    {"message": check.detail.splitlines()[0][:500] if check.detail else check.result})
            element.text = check.detail
        elif check.result in ("waived", "skipped"):
            reason = f"waived: {check.waiver}" if check.result == "waived" else check.detail
            ET.SubElement(case, "skipped", {"message": reason})
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_record(record_dir: str, record: Record) -> str:
    """Write ``record`` and its JUnit report under their final names only once complete (a crash leaves the
    old ones or none). The JUnit report goes first: a record never stands without its report."""
    path = record_path(record_dir, record.layer, record.key)
    if not record.checks:
        raise RecordError(f"{path}: a record without checks proves nothing; give the checks verify ran")
    try:
        os.makedirs(record_dir, exist_ok=True)
        write_atomic(junit_path(path), junit_xml(record))
        write_atomic(path, json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise RecordError(f"writing the verification record {path} failed: {exc.strerror or exc}; "
                          f"check that {record_dir} is writable") from exc
    return path


def read_record(record_dir: str, layer: str, key: str) -> Record | None:
    """The record of ``layer`` at ``key``; None when verify never wrote one."""
    path = record_path(record_dir, layer, key)
    try:
        with open(path, "rb") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: unreadable verification record ({exc}); remove it and verify again") from exc
    record = Record.from_dict(path, data)
    if (record.layer, record.key) != (layer, key):
        raise RecordError(f"{path}: records layer {record.layer} key {record.key}, not {layer} {key}; "
                          "remove it and verify again")
    return record


@dataclass(frozen=True)
class Verdict:
    """What the gate found: ``status`` is passed, failed, missing, stale or overridden."""

    status: str
    layer: str
    key: str
    message: str
    record: Record | None = None
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def manifest_entry(self) -> dict[str, Any]:
        """The manifest's ``verification``: enough for deploy to decide and for an admin to see why."""
        entry: dict[str, Any] = {"status": self.status if self.status in SERVABLE else OVERRIDDEN,
                                 "layer": self.layer, "key": self.key}
        if self.record is not None:
            entry["record"] = self.record.file_name
            entry["image_id"] = self.record.image_id
            entry["verified_at"] = iso_utc(self.record.verified_at)
            entry["checks"] = [{"name": c.name, "passed": c.passed} for c in self.record.checks]
        if self.status != PASSED:
            entry["unverified_because"] = self.message
            entry["override_reason"] = self.reason
        return entry


#: Settings a record may hold more of than a request asks: a boot that also ran the suite, Lynis or OpenSCAP proves what
#: a request without them asks (the suite's waivers and paths, the audits' minimums and settings matter only when asked).
_SUITE_KEYS = ("suite", "waivers", "suite_paths")


def _audit(settings: dict[str, Any], name: str) -> dict[str, Any]:
    value = settings.get(name)
    return value if isinstance(value, dict) else {"enabled": False}


def uncovered_settings(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Keys of ``wanted`` verify settings a record made with ``recorded`` does not cover: exact equality, except
    that a record made with the compliance suite covers a request without it (whatever its waivers and paths),
    and one made with Lynis covers a request without Lynis, or with Lynis at the same or a lower minimum and the
    same waivers; the same for OpenSCAP (the same profile and content, a minimum share no higher; its waivers and
    tailoring are in the suite digest). A record from before a setting existed did not run what it switches on."""
    keys = set(recorded) | set(wanted)
    uncovered = {k for k in keys - set(_SUITE_KEYS) - {"lynis", "openscap"} if recorded.get(k) != wanted.get(k)}
    if wanted.get("suite"):
        uncovered |= {k for k in _SUITE_KEYS if recorded.get(k) != wanted.get(k)}
    want, have = _audit(wanted, "lynis"), _audit(recorded, "lynis")
    if want.get("enabled") and not (
            have.get("enabled") and have.get("waivers") == want.get("waivers")
            and _number(have.get("min_score")) >= _number(want.get("min_score"))):
        uncovered.add("lynis")
    want, have = _audit(wanted, "openscap"), _audit(recorded, "openscap")
    if want.get("enabled") and not (
            have.get("enabled") and (have.get("profile"), have.get("content")) == (want.get("profile"), want.get("content"))
            and _number(have.get("min_pass")) >= _number(want.get("min_pass"))):
        uncovered.add("openscap")
    return sorted(uncovered)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("-inf")


def judge(record_dir: str, layer: str, key: str, image_id: str, settings: dict[str, Any] | None = None) -> Verdict:
    """The verdict on image ``image_id`` of ``layer`` at ``key`` without any override; with ``settings``,
    a record whose settings do not cover them (:func:`uncovered_settings`) is stale too (verify boots the image
    again)."""
    try:
        record = read_record(record_dir, layer, key)
    except RecordError as exc:
        return Verdict("missing", layer, key, f"{exc}; then run: {verify_command(layer)}")
    where = f"layer {layer} (content key {key[:12]})"
    if record is None:
        return Verdict("missing", layer, key,
                       f"{where} was never verified: no record {record_path(record_dir, layer, key)}. "
                       f"Run: {verify_command(layer)}")
    if image_id and record.image_id != image_id:
        return Verdict("stale", layer, key,
                       f"{where}: the record {record_path(record_dir, layer, key)} verified image "
                       f"{record.image_id[:12]}, but the layer's image is now {image_id[:12]} (built again): "
                       f"run: {verify_command(layer)}", record)
    changed = uncovered_settings(record.settings, settings) if settings is not None else []
    if changed:
        return Verdict("stale", layer, key,
                       f"{where}: the record {record_path(record_dir, layer, key)} was made with other verify "
                       f"settings ({', '.join(changed)}): run: {verify_command(layer)}", record)
    if not record.passed:
        failed = "; ".join(f"{c.name}: {c.detail.splitlines()[0]}" if c.detail.strip() else c.name
                           for c in record.failed) or "no checks"
        return Verdict("failed", layer, key,
                       f"{where} failed verification at {iso_utc(record.verified_at)}: {failed}. Fix the layer's "
                       f"roles, build again (site.yml) and verify: {verify_command(layer)}", record)
    return Verdict(PASSED, layer, key, f"{where} passed verification at {iso_utc(record.verified_at)} "
                   f"({len(record.checks)} checks)", record)


def gate(record_dir: str, layer: str, key: str, image_id: str, override_reason: str = "") -> Verdict:
    """A passing verdict, or an overridden one when ``override_reason`` says why; else UnverifiedError."""
    verdict = judge(record_dir, layer, key, image_id)
    if verdict.passed:
        return verdict
    reason = (override_reason or "").strip()
    if reason:
        return Verdict(OVERRIDDEN, layer, key, verdict.message, verdict.record, reason)
    raise UnverifiedError(f"refused: {verdict.message}. In an emergency only, set {OVERRIDE_VARIABLE} to the "
                          "reason (it is printed and recorded in the manifest) to pack it anyway.")


@dataclass(frozen=True)
class ServeVerdict:
    """The gate's answer at deploy: may a pack be served, and the line that says why."""

    servable: bool
    status: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"servable": self.servable, "status": self.status, "message": self.message}


def serve_gate(image: str, version: str, source: str, verification: Any, override_reason: str = "") -> ServeVerdict:
    """Deploy's gate on a pack's (checked) manifest ``verification`` entry, as pack's :func:`gate` recorded it.

    A pack is served when its layer image passed verify, or was packed on an override (the pack-time reason
    is named); anything else - a failed or missing verification, a pack made without the gate or by an older
    release - only on a deploy-time ``override_reason``. ``status`` is the manifest's status, ``none`` when it
    records no verification.
    """
    entry = verification if isinstance(verification, dict) else {}
    recorded = entry.get("status")
    status = str(recorded) if recorded else "none"
    where = f"image {image} version {version}"
    reason = (override_reason or "").strip()
    if status in SERVABLE:
        pack_override = f" - OVERRIDE at pack time: {entry.get('override_reason') or ''}" if status == OVERRIDDEN else ""
        return ServeVerdict(True, status, f"{where}: verification {status}{pack_override}")
    if reason:
        return ServeVerdict(True, status, f"{where}: verification {status} - OVERRIDE at deploy ({OVERRIDE_VARIABLE}): {reason}")
    found = (f"verification status {status}" if recorded else
             "no verification (packed without the verify gate, or by an older release)")
    return ServeVerdict(False, status,
                        f"{where} ({source}): refused, its manifest records {found}. Verify the layer (ansible-playbook "
                        "playbooks/verify.yml), pack again (playbooks/pack.yml) and deploy; in an emergency only, set "
                        f"{OVERRIDE_VARIABLE} to the reason to serve it anyway.")
