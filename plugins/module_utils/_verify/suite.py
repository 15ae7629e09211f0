# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The compliance suite in verify: which test files an image gets, and its results as record checks.

The suite is the pytest-testinfra checks of ``molecule/`` (shipped in the collection): the security
baseline (``molecule/_shared/tests``) for every image, and ``molecule/<role>/tests`` for each role of
the image's layer chain; a site adds its own files beside them. verify.yml runs them once per image, in
one pytest process, against the image booted under systemd-nspawn (action ``hpc.stateless.compliance_suite``);
pytest's JUnit report is read back here into one record check per test case:

- ``passed``; ``failed`` (an assertion; the message is the detail);
- ``error`` (the check could not run: a fixture failed, a tool is missing, the container went away) - never
  counted as passed;
- ``waived`` (skipped by a waiver of a ``waivers.yml``: ``waived: <reason>``; the reason is recorded);
- ``skipped`` (the check does not apply to this image, e.g. an interface the image does not configure; the
  reason is recorded).
"""

from __future__ import annotations

import hashlib
import os
import stat
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Mapping

PASSED = "passed"
FAILED = "failed"
ERROR = "error"
WAIVED = "waived"
SKIPPED = "skipped"
#: Every result a check of the record can have.
RESULTS = (PASSED, FAILED, ERROR, WAIVED, SKIPPED)
#: Results the gate lets through.
GOOD_RESULTS = (PASSED, WAIVED, SKIPPED)
#: How conftest.py marks a check that a waiver switched off.
WAIVER_PREFIX = "waived: "
#: Directory of the suite shared by every image, under the suite root (``molecule/``).
SHARED_DIR = "_shared"
#: Longest detail kept per check (the full text is in pytest's output).
DETAIL_LIMIT = 2000


class SuiteError(ValueError):
    """The suite cannot be run or read; the message says what is missing and what to do."""


def short_role(role: str) -> str:
    """``hpc.stateless.base`` -> ``base``: the directory of the role's tests under the suite root."""
    return role.rsplit(".", 1)[-1]


def chain_layers(layers: Mapping[str, Any], layer: str) -> list[str]:
    """The layers of ``layer``'s image, root layer first, as the plan (hpc_stateless_plan.layers) has them."""
    chain: list[str] = []
    seen: set[str] = set()
    name: str | None = layer
    while name is not None:
        if name in seen or name not in layers:
            raise SuiteError(f"layer {name!r} of {layer!r}'s chain is not in the plan (hpc_stateless_layers)")
        seen.add(name)
        chain.insert(0, name)
        name = layers[name].get("parent")
    return chain


def chain_roles(layers: Mapping[str, Any], layer: str) -> list[str]:
    """Short names of the roles applied to ``layer``'s image, root layer first (each once)."""
    chain = chain_layers(layers, layer)
    roles: list[str] = []
    for item in chain:
        for role in layers[item].get("roles") or []:
            role_name = role.get("role") if isinstance(role, dict) else role
            if role_name and short_role(str(role_name)) not in roles:
                roles.append(short_role(str(role_name)))
    return roles


def suite_paths(suite_root: str, roles: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """Test directories of the suite for an image with ``roles``: the shared baseline, each role's
    ``<role>/tests`` that exists, then ``extra`` (a site's own tests; each must exist)."""
    shared = os.path.join(suite_root, SHARED_DIR, "tests")
    if not os.path.isdir(shared):
        raise SuiteError(f"the compliance suite is not at {shared}: the collection is incomplete; "
                         "install it again (molecule/ is part of it)")
    paths = [shared]
    for role in roles:
        tests = os.path.join(suite_root, short_role(role), "tests")
        if os.path.isdir(tests) and tests not in paths:
            paths.append(tests)
    for path in extra:
        if not os.path.exists(path):
            raise SuiteError(f"hpc_stateless_verify_suite_paths: {path} does not exist; name test files or "
                             "directories of the site's own checks")
        paths.append(path)
    return paths


def pytest_command(python: str, suite_root: str, report: str, paths: Iterable[str]) -> list[str]:
    """argv of the ONE pytest process that runs the suite's ``paths`` and writes the JUnit ``report``."""
    return [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--rootdir", suite_root, "--tb=short",
            "-o", "junit_family=xunit1", "-o", "junit_logging=no", f"--junitxml={report}", *paths]


def suite_environment(base: Mapping[str, str], leader: int, nsenter: str, layer: str, roles: Iterable[str],
                      image: str = "", root: str = "", waivers: Iterable[str] = (), inventory: str = "",
                      chain: Iterable[str] = ()) -> dict[str, str]:
    """Environment of that process: what molecule/conftest.py reads to enter the booted container (leader PID),
    find the image at rest (``image`` or the packed tree ``root``), pick the roles' tests, the waivers and the
    inventory whose values the checks expect. Nothing of an outer pytest, Molecule or verify run leaks in."""
    env = {k: v for k, v in base.items() if not k.startswith(("PYTEST_", "MOLECULE_", "HPC_STATELESS_"))}
    env.update({
        "HPC_STATELESS_TEST_TARGET": f"nsenter://{int(leader)}",
        "HPC_STATELESS_NSENTER": nsenter,
        "HPC_STATELESS_TEST_IMAGE": image,
        "HPC_STATELESS_TEST_ROOT": root,
        "HPC_STATELESS_TEST_INSTANCE": layer,
        "HPC_STATELESS_TEST_ROLES": ",".join(roles),
        # The layers of the image, root first: the checks expect the role values of these layers only.
        "HPC_STATELESS_TEST_CHAIN": ",".join(chain),
        "HPC_STATELESS_WAIVERS": ":".join(waivers),
        "BUILDAH_ISOLATION": base.get("BUILDAH_ISOLATION", "chroot"),
    })
    if inventory:
        env.update({"HPC_STATELESS_EXPECT_FROM_INVENTORY": "1", "HPC_STATELESS_MOLECULE_INVENTORY": inventory})
    return env


def check_id(classname: str, name: str) -> str:
    """A check's id in the record: ``base/test_base::test_sysctl`` (role or ``_shared``, file, test)."""
    module = classname.replace(".tests.", "/", 1) if ".tests." in classname else classname
    return f"{module}::{name}" if module else name


def _text(element: ET.Element) -> str:
    message = element.get("message") or ""
    body = (element.text or "").strip()
    text = message if not body or body in message else (f"{message}\n{body}" if message else body)
    return text.strip()[:DETAIL_LIMIT]


def parse_junit(text: str | bytes, where: str = "JUnit report") -> list[dict[str, Any]]:
    """Record checks ``{name, passed, result, waiver, detail}`` from pytest's JUnit XML, in report order."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise SuiteError(f"{where}: not a JUnit XML report ({exc}); pytest stopped before it wrote one") from exc
    checks: list[dict[str, Any]] = []
    for case in root.iter("testcase"):
        name = check_id(case.get("classname") or "", case.get("name") or "")
        outcome = {child.tag: child for child in case if child.tag in ("failure", "error", "skipped")}
        result, waiver, detail = PASSED, "", ""
        if "error" in outcome:
            result, detail = ERROR, _text(outcome["error"])
        elif "failure" in outcome:
            result, detail = FAILED, _text(outcome["failure"])
        elif "skipped" in outcome:
            reason = _text(outcome["skipped"])
            # pytest writes "<file>:<line>: <reason>" in the body and the reason in the message
            reason = (outcome["skipped"].get("message") or reason).strip()
            if reason.startswith(WAIVER_PREFIX):
                result, waiver = WAIVED, reason[len(WAIVER_PREFIX):].strip()
            else:
                result, detail = SKIPPED, reason
        checks.append({"name": name, "passed": result in GOOD_RESULTS, "result": result,
                       "waiver": waiver, "detail": detail})
    if not checks:
        raise SuiteError(f"{where}: the suite ran no check (no test case in the report); a suite that checks "
                         "nothing proves nothing")
    names = [c["name"] for c in checks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(f"{where}: checks reported twice: {duplicates}; give each test a unique name")
    return checks


def summary(checks: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{result: count}`` over every result (zeros included)."""
    counts = {result: 0 for result in RESULTS}
    for check in checks:
        counts[check.get("result") or (PASSED if check.get("passed") else FAILED)] += 1
    return counts


def bad_checks(checks: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The checks the gate refuses on: failed or errored, not waived."""
    return [check for check in checks if not check.get("passed")]


#: Files of the suite whose content decides a check (tests, helpers, waivers, pytest settings).
DIGEST_SUFFIXES = (".py", ".yml", ".yaml", ".ini", ".cfg", ".toml", ".prf")


def _digest_files(path: str) -> list[tuple[str, str]]:
    """``(name, absolute path)`` of every regular file below ``path`` (or ``path`` itself) that a check reads;
    links are not followed, caches are left out."""
    info = os.lstat(path)
    if stat.S_ISREG(info.st_mode):
        return [(os.path.basename(path), path)]
    found = []
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            full = os.path.join(top, name)
            if name.endswith(DIGEST_SUFFIXES) and stat.S_ISREG(os.lstat(full).st_mode):
                found.append((os.path.relpath(full, path), full))
    return found


def suite_digest(paths: Iterable[str]) -> str:
    """sha256 over the names and contents of the suite's files below ``paths`` (directories or files, in
    order): a record made by another version of the checks or waivers is not the evidence of this one.
    SuiteError names a path that does not exist."""
    digest = hashlib.sha256()
    for path in paths:
        if not os.path.lexists(path):
            raise SuiteError(f"{path} does not exist: the suite's digest cannot cover it; name an existing test "
                             "or waiver file (hpc_stateless_verify_suite_paths, hpc_stateless_verify_waivers, "
                             "hpc_stateless_verify_lynis_waivers)")
        digest.update(f"{path}\0".encode())
        for name, full in _digest_files(path):
            with open(full, "rb") as handle:
                digest.update(f"{name}\0".encode() + hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()
