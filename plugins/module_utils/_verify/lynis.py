# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lynis in the verify gate: where the build host's Lynis is, what its report says, and the verdict.

verify.yml boots each layer image under systemd-nspawn; playbooks/tasks/verify_lynis.yml runs the build
host's Lynis inside that boot. Lynis is never installed into the image: :func:`nspawn_binds` bind-mounts
its script, include and db directories read-only under ``/run`` of the booted container (a tmpfs of
the throw-away boot) and Lynis runs from there with ``--usecwd``.

:func:`parse_report` reads the report data file (``--report-file``): ``key=value`` lines, ``key[]=value``
for lists; findings are ``warning[]``/``suggestion[]`` lines ``TEST-ID|text|details|solution|``.
:func:`load_waivers` reads waiver files in the format of the Molecule suite's (``waivers: [{check: TEST-ID,
reason: ..., item: <optional text of one finding>}]``), each with a reason. :func:`judge` decides: the
hardening index must reach the minimum and every warning and suggestion must be waived. Waivers excuse a
finding in the record; they never change Lynis's score.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ansible_collections.hpc.stateless.plugins.module_utils._verify.scan_verdict import ScanVerdict

try:
    import yaml
except ImportError:  # on the controller PyYAML is there (Ansible needs it); the check below says so otherwise
    yaml = None

# The build host's Lynis as the Debian/Ubuntu package (and the upstream tarball's layout) installs it:
# the script, its include/ and db/ directories and the default profile. plugins/ is optional.
HOST_LAYOUT = {
    "lynis": ("/usr/sbin/lynis", "/usr/bin/lynis", "/usr/local/bin/lynis"),
    "include": ("/usr/share/lynis/include", "/usr/local/include/lynis"),
    "db": ("/usr/share/lynis/db", "/usr/local/share/lynis/db"),
    "default.prf": ("/etc/lynis/default.prf", "/usr/local/etc/lynis/default.prf"),
}
OPTIONAL_LAYOUT = {"plugins": ("/etc/lynis/plugins", "/usr/local/etc/lynis/plugins")}
# Where the bundle appears inside the booted container: /run is a tmpfs of the boot, so the mount points
# nspawn creates vanish with it.
MOUNT_POINT = "/run/hpc-stateless-lynis"
#: Where verify's Lynis keeps its things in the boot, all under /run (never in the image): its working directory
#: (the host's Lynis, bound in read-only), this boot's profile (bound in read-only from the build host) and the report.
BOOT_PATHS: dict[str, str] = {
    "workdir": MOUNT_POINT,
    "profile": "/run/hpc-stateless-lynis.prf",
    "report": "/run/hpc-stateless-lynis-report.dat",
}
#: Lynis's tests that judge the process table at one instant (``ps``): a zombie (PROC-3612) or a process waiting for
#: I/O (PROC-3614). When one reports a finding, the command of :func:`lynis_argv` prints the process table as it is
#: right after the audit below this marker line, and the verdict names what it holds.
PROCESS_TESTS = ("PROC-3612", "PROC-3614")
PROCESS_TABLE_MARKER = "# hpc.stateless: the process table when Lynis ended"
PROCESS_TABLE_COLUMNS = "pid,ppid,stat,comm,args"
FINDING_KINDS = ("warning", "suggestion")
_TEST_ID = re.compile(r"^([A-Z]{3,5}-\d{4}|LYNIS)$")
_WAIVER_KEYS = {"check", "reason", "item"}
_SKIP_KEYS = {"test", "reason"}
_SETTING_KEYS = {"setting", "reason"}
_SETTING = re.compile(r"^[a-z0-9-]+=[^\n]*$")


class LynisError(ValueError):
    """Lynis cannot run or its report cannot be judged; the message names the file or key and what to do."""


@dataclass(frozen=True)
class Finding:
    """One warning or suggestion of the report."""

    kind: str
    test: str
    text: str
    details: str = ""
    solution: str = ""

    def describe(self) -> str:
        extra = f" ({self.details})" if self.details else ""
        return f"{self.test}: {self.text}{extra}"


@dataclass(frozen=True)
class Report:
    """What one Lynis run reported."""

    hardening_index: int
    findings: tuple[Finding, ...]
    version: str = ""
    tests_executed: int = 0
    tests_skipped: tuple[str, ...] = ()
    # Rows of the process table taken when the audit ended (after PROCESS_TABLE_MARKER), header first; empty without one.
    processes: tuple[str, ...] = ()

    def stuck_processes(self) -> list[str]:
        """The rows of :attr:`processes` in state Z (zombie), X (dead) or D (waiting for I/O)."""
        rows = []
        for row in self.processes[1:]:
            fields = row.split(None, 3)
            if len(fields) >= 3 and fields[2][:1] in ("Z", "X", "D"):
                rows.append(" ".join(row.split()))
        return rows


@dataclass(frozen=True)
class Waiver:
    check: str
    reason: str
    item: str | None = None
    source: str = ""

    def covers(self, finding: Finding) -> bool:
        if finding.test != self.check:
            return False
        return self.item is None or self.item in finding.text or self.item in finding.details


@dataclass(frozen=True)
class Skip:
    """A test Lynis does not run in the verify boot, with the reason (written to the run's profile)."""

    test: str
    reason: str
    source: str = ""


@dataclass
class Waivers:
    """The waivers and skipped tests of all waiver files, in file order."""

    waivers: list[Waiver] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    # Profile lines (``key=value``) with their reasons, e.g. paths a test does not scan.
    settings: list[tuple[str, str, str]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ the host's Lynis


def host_install(layout: Mapping[str, Iterable[str]] | None = None,
                 optional: Mapping[str, Iterable[str]] | None = None) -> dict[str, str]:
    """The build host's Lynis files by bundle name (``lynis``, ``include``, ``db``, ``default.prf``[, ``plugins``])."""
    found: dict[str, str] = {}
    missing = []
    for name, candidates in (HOST_LAYOUT if layout is None else layout).items():
        path = next((c for c in candidates if os.path.exists(c)), None)
        if path is None:
            missing.append(f"{name} ({' or '.join(candidates)})")
        else:
            found[name] = path
    if missing:
        raise LynisError(
            "hpc_stateless_verify_lynis is true but Lynis is not installed on the build host: missing "
            + ", ".join(missing) + ". Install it (apt-get install lynis; `make setup` does) or set "
            "hpc_stateless_verify_lynis: false.")
    for name, candidates in (OPTIONAL_LAYOUT if optional is None else optional).items():
        path = next((c for c in candidates if os.path.isdir(c)), None)
        if path is not None:
            found[name] = path
    return found


def nspawn_binds(install: Mapping[str, str], mount_point: str = MOUNT_POINT) -> list[str]:
    """systemd-nspawn arguments that show the host's Lynis read-only at ``mount_point`` in the container."""
    return [f"--bind-ro={source}:{mount_point}/{name}" for name, source in sorted(install.items())]


def lynis_argv(report_file: str, log_file: str = "", profile: str = "", mount_point: str = MOUNT_POINT,
               print_report: bool = False, timeout: int = 0) -> list[str]:
    """The command that audits the booted container; run it with ``mount_point`` as the working directory.

    With ``print_report``, the command's output is the report file's text once Lynis succeeded (its screen output is
    dropped), so the task hands the report over and nobody reads the file afterwards; when a test of
    :data:`PROCESS_TESTS` reported a finding, the process table follows (:data:`PROCESS_TABLE_MARKER`).
    With ``timeout`` (seconds), coreutils' timeout stops the audit then (exit status 124, or 137 when it had to kill).
    """
    argv = ["sh", f"{mount_point}/lynis", "audit", "system", "--usecwd", "--quick", "--no-colors",
            "--report-file", report_file]
    argv += ["--log-file", log_file] if log_file else ["--no-log"]
    if profile:
        argv += ["--profile", profile]
    if print_report:
        tests = "|".join(PROCESS_TESTS)
        script = ('report=$1; shift; "$@" > /dev/null || exit; cat -- "$report" || exit; '
                  f"if grep -qE '^(warning|suggestion)\\[\\]=({tests})\\|' \"$report\"; then "
                  f"echo '{PROCESS_TABLE_MARKER}'; ps -eo {PROCESS_TABLE_COLUMNS} || true; fi")
        argv = ["sh", "-c", script, "sh", report_file] + argv
    if timeout:
        argv = ["timeout", "--kill-after=10", str(int(timeout))] + argv
    return argv


# ------------------------------------------------------------------------------------------ the report


def parse_report(text: str, where: str = "the Lynis report") -> Report:
    """The report data file of one run (``--report-file``), and the process table that may follow it
    (:data:`PROCESS_TABLE_MARKER`); :class:`LynisError` when the report is incomplete."""
    text, _marker, table = text.partition(PROCESS_TABLE_MARKER + "\n")
    processes = tuple(line.rstrip() for line in table.splitlines() if line.strip())
    scalars: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if key.endswith("[]"):
            lists.setdefault(key[:-2], []).append(value)
        else:
            scalars[key] = value
    index = scalars.get("hardening_index", "")
    if not index.isdigit():
        ended = "report_datetime_end" in scalars
        raise LynisError(
            f"{where}: no hardening_index ({'the run ended' if ended else 'the run did not finish'}; "
            f"{len(text.splitlines())} lines): Lynis did not complete its audit. Run it by hand in the "
            "booted image to see why (its log file says).")
    findings = []
    for kind in FINDING_KINDS:
        for value in lists.get(kind, []):
            fields = (value.split("|") + ["", "", "", ""])[:4]
            test, message, details, solution = (_none_to_empty(f) for f in fields)
            findings.append(Finding(kind, test, message, details, solution))
    executed = scalars.get("tests_executed", "")
    skipped = tuple(t for t in scalars.get("tests_skipped", "").split("|") if t)
    return Report(int(index), tuple(findings), scalars.get("lynis_version", ""),
                  len([t for t in executed.split("|") if t]), skipped, processes)


def _none_to_empty(value: str) -> str:
    value = value.strip()
    return "" if value == "-" else value


# ------------------------------------------------------------------------------------------ waivers


def load_waivers(paths: Iterable[str]) -> Waivers:
    """Waivers and skipped tests from YAML files (a missing file is an error: it was named on purpose).

    ``waivers: [{check: TEST-ID, reason: why, item: text of one finding}]``: without ``item`` every finding
    of that test is waived; with it, the findings whose text or details contain ``item``.
    ``skip_tests: [{test: TEST-ID, reason: why}]``: tests Lynis does not run in the verify boot (they
    measure the build host or the container, not the image). Every entry needs a reason.
    """
    found = Waivers()
    if yaml is None and paths:
        raise LynisError("reading Lynis waiver files needs PyYAML on the controller: install it (pip install pyyaml)")
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except OSError as exc:
            raise LynisError(f"Lynis waiver file {path}: {exc.strerror}; fix hpc_stateless_verify_lynis_waivers") from exc
        except yaml.YAMLError as exc:
            raise LynisError(f"Lynis waiver file {path}: not valid YAML ({exc})") from exc
        more = waivers_from({} if data is None else data, str(path))
        found.waivers += more.waivers
        found.skips += more.skips
        found.settings += more.settings
    return found


def _reason(entry: Mapping[str, Any], where: str, what: str) -> str:
    reason = str(entry.get("reason") or "").strip()
    if not reason:
        raise LynisError(f"{where} ({what}) needs a 'reason': why it does not apply to a stateless compute "
                         "node booted for verification")
    return reason


def waivers_from(data: Any, where: str) -> Waivers:
    """Waivers and skips from the parsed content of one file (``where`` names it in errors)."""
    if not isinstance(data, dict) or not isinstance(data.get("waivers", []), list) \
            or not isinstance(data.get("skip_tests", []), list) or not isinstance(data.get("profile", []), list) \
            or set(data) - {"waivers", "skip_tests", "profile"}:
        raise LynisError(f"{where}: expected a mapping with a 'waivers' list of {{check, reason, item}} and "
                         "optionally 'skip_tests' ({test, reason}) and 'profile' ({setting, reason}) lists")
    found = Waivers()
    for index, entry in enumerate(data.get("waivers", [])):
        at = f"{where}: waivers[{index}]"
        if not isinstance(entry, dict) or not _TEST_ID.match(str(entry.get("check") or "")):
            raise LynisError(f"{at} needs 'check', a Lynis test id like SSH-7408, got {entry!r:.120}")
        unknown = set(entry) - _WAIVER_KEYS
        if unknown:
            raise LynisError(f"{at} ({entry['check']}) has unknown keys {sorted(unknown)}; allowed: {sorted(_WAIVER_KEYS)}")
        reason = _reason(entry, at, entry["check"])
        item = entry.get("item")
        if item is not None and not str(item).strip():
            raise LynisError(f"{at} ({entry['check']}) has an empty 'item'; leave it out to waive every "
                             "finding of the test")
        found.waivers.append(Waiver(str(entry["check"]), reason, None if item is None else str(item), where))
    for index, entry in enumerate(data.get("skip_tests", [])):
        at = f"{where}: skip_tests[{index}]"
        if not isinstance(entry, dict) or not _TEST_ID.match(str(entry.get("test") or "")):
            raise LynisError(f"{at} needs 'test', a Lynis test id like KRNL-6000, got {entry!r:.120}")
        unknown = set(entry) - _SKIP_KEYS
        if unknown:
            raise LynisError(f"{at} ({entry['test']}) has unknown keys {sorted(unknown)}; allowed: {sorted(_SKIP_KEYS)}")
        found.skips.append(Skip(str(entry["test"]), _reason(entry, at, entry["test"]), where))
    for index, entry in enumerate(data.get("profile", [])):
        at = f"{where}: profile[{index}]"
        if not isinstance(entry, dict) or not _SETTING.match(str(entry.get("setting") or "")) \
                or set(entry) - _SETTING_KEYS or str(entry["setting"]).startswith("skip-test="):
            raise LynisError(f"{at} needs 'setting', one Lynis profile line 'key=value' (skip tests with "
                             f"skip_tests), and 'reason', got {entry!r:.120}")
        found.settings.append((str(entry["setting"]), _reason(entry, at, entry["setting"]), where))
    return found


def profile_text(waivers: Waivers) -> str:
    """The Lynis profile of the verify run (``--profile``): the settings, then a ``skip-test=`` line per skipped test."""
    lines = ["# Written by hpc.stateless verify for this boot only, from the Lynis waiver files."]
    for setting, reason, source in waivers.settings:
        lines.append(f"# {reason} ({source})")
        lines.append(setting)
    for skip in waivers.skips:
        lines.append(f"# {skip.reason} ({skip.source})")
        lines.append(f"skip-test={skip.test}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the verdict


def _check_ids(findings: Iterable[Finding]) -> list[str]:
    """A stable id per finding: ``lynis/<TEST-ID>``, with the details (else the text) when a test reports several."""
    findings = list(findings)
    counts: dict[str, int] = {}
    for finding in findings:
        counts[finding.test] = counts.get(finding.test, 0) + 1
    ids = []
    seen: dict[str, int] = {}
    for finding in findings:
        check_id = f"lynis/{finding.test}"
        if counts[finding.test] > 1:
            check_id += "/" + (finding.details or finding.text)
        seen[check_id] = seen.get(check_id, 0) + 1
        ids.append(check_id if seen[check_id] == 1 else f"{check_id}#{seen[check_id]}")
    return ids


def _process_table(report: Report) -> str:
    """What the process table held when the audit ended, for a finding of a test of :data:`PROCESS_TESTS`."""
    if not report.processes:
        return "; no process table was taken after the audit"
    stuck = report.stuck_processes()
    if stuck:
        return (f"; when Lynis ended, {len(stuck)} process(es) were still in state Z, X or D "
                f"({PROCESS_TABLE_COLUMNS.replace(',', ' ')}): " + " | ".join(stuck))
    table = " | ".join(" ".join(row.split()) for row in report.processes[1:])
    return ("; when Lynis ended, no process was in state Z, X or D: Lynis saw one that was gone moments later "
            f"(the table then, {PROCESS_TABLE_COLUMNS.replace(',', ' ')}: {table[:1500]})")


def judge(report: Report, waiver_set: Waivers, minimum: int) -> ScanVerdict:
    """Pass when the hardening index reaches ``minimum`` and every finding is waived; name what is not."""
    if not isinstance(minimum, int) or isinstance(minimum, bool) or not 0 <= minimum <= 100:
        raise LynisError(f"hpc_stateless_verify_lynis_min_score: expected a whole number from 0 to 100, got {minimum!r}")
    waivers = list(waiver_set.waivers)
    used: set[int] = set()
    score_ok = report.hardening_index >= minimum
    checks: list[dict[str, Any]] = [{
        "id": "lynis/hardening-index", "name": "Lynis hardening index",
        "passed": score_ok, "result": "passed" if score_ok else "failed", "waiver": None,
        "detail": f"{report.hardening_index} (minimum {minimum}; Lynis {report.version or '?'}, "
                  f"{report.tests_executed} tests)"}]
    unwaived = []
    for check_id, finding in zip(_check_ids(report.findings), report.findings):
        index = next((i for i, w in enumerate(waivers) if w.covers(finding)), None)
        if index is not None:
            used.add(index)
        waiver = None if index is None else waivers[index].reason
        seen = _process_table(report) if finding.test in PROCESS_TESTS else ""
        if waiver is None:
            unwaived.append(f"{finding.kind} {finding.describe()}{seen}")
        checks.append({
            "id": check_id, "name": f"Lynis {finding.kind} {finding.describe()}",
            "passed": waiver is not None, "result": "waived" if waiver else "failed", "waiver": waiver,
            "detail": (finding.solution + seen).strip("; ")})
    for skip in waiver_set.skips:
        ran = skip.test not in report.tests_skipped and report.tests_skipped != ()
        checks.append({"id": f"lynis/{skip.test}", "name": f"Lynis test {skip.test} not run in the verify boot",
                       "passed": not ran, "result": "failed" if ran else "skipped", "waiver": skip.reason,
                       "detail": "Lynis ran it although the profile skips it" if ran else ""})
        if ran:
            unwaived.append(f"skipped test {skip.test} ran anyway")
    unused = [f"{w.check}{' (' + w.item + ')' if w.item else ''} in {w.source}"
              for i, w in enumerate(waivers) if i not in used]
    passed = score_ok and not unwaived
    problems = []
    if not score_ok:
        problems.append(f"hardening index {report.hardening_index} is below the minimum {minimum} "
                        "(hpc_stateless_verify_lynis_min_score)")
    if unwaived:
        problems.append(f"{len(unwaived)} finding(s) not waived: " + "; ".join(unwaived))
    if passed:
        message = (f"Lynis hardening index {report.hardening_index} (minimum {minimum}); "
                   f"{len(report.findings)} finding(s), all waived; {len(waiver_set.skips)} test(s) skipped with reasons")
    else:
        message = ("Lynis: " + "; and ".join(problems) + ". Harden the roles (docs/hardening.md), or waive a "
                   "finding that makes no sense on a stateless compute node with its reason in a file of "
                   "hpc_stateless_verify_lynis_waivers.")
    return ScanVerdict(passed, report.hardening_index, minimum, checks, unwaived, unused, message)
