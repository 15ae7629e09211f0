# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Drift of a live node from the image the boot tree serves it: pure functions (playbooks/compliance.yml).

A stateless node runs what it booted; it drifts when it booted another version than the boot tree serves now,
or when someone changed it after boot (a package installed by hand, a file edited). compliance.yml gathers
on each node, over its own connection: ``/etc/image-release`` (_contract/release.py), the installed packages
``{name: version}`` (package_facts) and the files whose inode changed since the boot finished
(:func:`find_command`); and reads on the boot host the ``manifest.json`` of the served version
(``<boot_root>/<image>/manifest.json``, _contract/manifest.py). :func:`drift_checks` compares them into record
checks (_verify/record.Check: id, result, waiver), :func:`node_report` makes the report per node.

What could not be gathered (node unreachable, command failed, nothing served) is a check with result
``error``, never ``passed``; a waiver excuses a failed check or some of its findings, never an error.
"""

from __future__ import annotations

import base64
import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import check_manifest
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError, RELEASE_PATH
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import parse_image_release
from ansible_collections.hpc.stateless.plugins.module_utils._time import iso_utc
from ansible_collections.hpc.stateless.plugins.module_utils._verify.record import Check
from ansible_collections.hpc.stateless.plugins.module_utils._verify.suite import (
    ERROR,
    FAILED,
    WAIVED,
    run_error,
    summary,
)

REPORT_FORMAT = 1
#: The checks, in report order.
RELEASE_CHECK = "drift::image-release"
PACKAGES_CHECK = "drift::packages"
FILES_CHECK = "drift::files-changed-since-boot"
CHECKS = (RELEASE_CHECK, PACKAGES_CHECK, FILES_CHECK)
#: Most findings named per check (the count says how many there are).
FINDINGS_CAP = 50

#: Places whose content changes at run time by design on every node, so a change there is no drift;
#: the file search prunes them (one list, with why).
RUNTIME_PATHS: tuple[tuple[str, str], ...] = (
    ("/proc", "the kernel's view of processes, not files"),
    ("/sys", "the kernel's view of devices and settings, not files"),
    ("/dev", "device nodes made at boot"),
    ("/run", "run-time state of services (a tmpfs)"),
    ("/tmp", "scratch space of jobs and users"),
    ("/var/tmp", "scratch space of jobs and users"),
    ("/var/log", "logs grow by design"),
    ("/var/cache", "caches services refill (man-db, ldconfig, apt)"),
    ("/var/lib/systemd", "systemd's own state: timer stamps, random seed, coredumps, linger"),
    ("/var/spool", "queues of services: slurmd's job scripts and state, cron, mail"),
    ("/var/lib/slurm", "slurmd's state files"),
    ("/var/lib/munge", "munged's random seed, rewritten while it runs"),
    ("/var/lib/private", "state of units with DynamicUser=yes"),
    ("/var/lib/chrony", "the clock's drift file"),
    ("/var/lib/sss", "sssd's caches"),
    ("/home", "users' files (a network file system on a real cluster)"),
    ("/root/.ansible", "the temporary files of an Ansible run with the default remote_tmp; images keep the empty "
                       "directory (making it would change /root), compliance.yml puts its own in "
                       "hpc_stateless_compliance_remote_tmp"),
)
#: The run-time places where a change since boot is reported all the same when it is something that runs: a
#: program (a regular file with an execute bit), a systemd unit or drop-in of the system manager, a crontab or an
#: at job. Each of these survives nothing but runs as long as the node is up, which is what an intruder needs; a
#: service's own run-time files (sockets, pid files, locks, state) are none of them and stay quiet.
WATCHED_PLACES: tuple[str, ...] = ("/run", "/dev/shm", "/tmp", "/var/tmp", "/var/spool")
#: Directories of the system manager's run-time units (``systemctl --runtime``, ``systemd-run``, generators).
RUNTIME_UNIT_DIRS: tuple[str, ...] = (
    "/run/systemd/system", "/run/systemd/transient", "/run/systemd/system.control", "/run/systemd/generator",
    "/run/systemd/generator.early", "/run/systemd/generator.late", "/run/systemd/user")
#: Where cron and at keep their jobs (Debian: cron/crontabs, cron/atjobs; Red Hat and SUSE: cron, at).
JOB_SPOOLS: tuple[str, ...] = ("/var/spool/cron", "/var/spool/at")
#: What is not reported in the watched places even so, with why (one list; docs/verify.md shows it).
WATCH_EXCEPTIONS: tuple[tuple[str, str], ...] = (
    ("*.scope, *.scope.d/*, *.slice, *.slice.d/*",
     "scopes and slices group processes that already run (logind makes one per login, Ansible's included); they "
     "start no program"),
    ("/var/spool/slurm*", "slurmd's spool: the batch scripts of the jobs it runs, executable by design"),
    ("<remote_tmp>/ansible-tmp-*/AnsiballZ_*.py", "the module files of this very check, in its remote_tmp"),
)
#: The line the file search prints first: the boot's end in seconds since the epoch.
SINCE_PREFIX = "since\t"


class DriftError(ValueError):
    """Input the drift check cannot judge; the message names the value and what to do."""


def find_command(runtime_paths: Sequence[str] | None = None, remote_tmp: str = "/tmp") -> str:
    """The shell command (bash, ``pipefail``) that prints ``since\\t<epoch>`` (when systemd finished booting)
    and then ``<ctime>\\t<path>`` of every file of the root file system whose inode changed after that, outside
    the run-time places, and of what runs in the watched run-time places (:func:`watch_command`). The inode's
    change time, not the modification time: ``touch -d`` cannot back-date it. The whole root is one file system
    on a stateless node (``-xdev`` keeps network mounts out). ``remote_tmp``: where this check's own module files
    are (Ansible's remote_tmp on the node)."""
    paths = list(runtime_paths if runtime_paths is not None else [p for p, _why in RUNTIME_PATHS])
    for path in paths:
        _check_path("run-time path", path)
    prune = " -o ".join(f"-path '{p}'" for p in paths)
    return ("set -o pipefail; finished=$(systemctl show -P FinishTimestamp --timestamp=us) && [ -n \"$finished\" ] "
            "|| { echo 'systemd has not finished booting (no FinishTimestamp)' >&2; exit 3; }; "
            "since=$(date -d \"$finished\" +%s.%N) || exit 3; printf 'since\\t%s\\n' \"$since\"; "
            f"find / -xdev -ignore_readdir_race \\( {prune} \\) -prune -o -newerct \"@$since\" "
            "-printf '%C@\\t%p\\n' && " + watch_command(remote_tmp))


def watch_command(remote_tmp: str = "/tmp") -> str:
    """The bash command that prints ``<ctime>\\t<path>`` of what runs and changed after ``$since`` in the
    :data:`WATCHED_PLACES` (each searched within its own file system: they are mounts of their own): programs,
    run-time units (:data:`RUNTIME_UNIT_DIRS`, files and links), crontabs and at jobs (:data:`JOB_SPOOLS`), but
    for :data:`WATCH_EXCEPTIONS`."""
    _check_path("remote_tmp", remote_tmp)
    units = " -o ".join(f"-path '{d}/*'" for d in RUNTIME_UNIT_DIRS)
    jobs = " -o ".join(f"-path '{d}/*'" for d in JOB_SPOOLS)
    quiet_units = "! -name '*.scope' ! -path '*.scope.d/*' ! -name '*.slice' ! -path '*.slice.d/*'"
    own = f"{remote_tmp.rstrip('/')}/ansible-tmp-*/AnsiballZ_*.py"
    places = " ".join(f"'{p}'" for p in WATCHED_PLACES)
    return (f"watched=(); for place in {places}; do [ -d \"$place\" ] && watched+=(\"$place\"); done; "
            "[ ${#watched[@]} -eq 0 ] || "
            "find \"${watched[@]}\" -xdev -ignore_readdir_race -path '/var/spool/slurm*' -prune -o "
            "-newerct \"@$since\" \\( "
            f"\\( -type f -perm /111 ! -path '{own}' \\) -o "
            f"\\( \\( -type f -o -type l \\) \\( {units} \\) {quiet_units} \\) -o "
            f"\\( -type f \\( {jobs} \\) \\) "
            "\\) -printf '%C@\\t%p\\n'")


def _check_path(what: str, path: str) -> None:
    if not path.startswith("/") or "'" in path:
        raise DriftError(f"{what} {path!r}: give an absolute path without quotes")


def parse_find(stdout: str) -> tuple[float, list[tuple[str, float]]]:
    """``(boot end epoch, [(path, ctime)])`` from :func:`find_command`'s output, paths sorted."""
    lines = stdout.splitlines()
    if not lines or not lines[0].startswith(SINCE_PREFIX):
        raise DriftError(f"the file search printed no '{SINCE_PREFIX.strip()}' line first: {stdout[:200]!r}")
    try:
        since = float(lines[0][len(SINCE_PREFIX):])
    except ValueError:
        raise DriftError(f"the file search printed a bad boot time: {lines[0]!r}") from None
    found = []
    for line in lines[1:]:
        stamp, sep, path = line.partition("\t")
        if not sep or not path.startswith("/"):
            raise DriftError(f"the file search printed a line that is no '<ctime>\\t<path>': {line!r}")
        try:
            found.append((path, float(stamp)))
        except ValueError:
            raise DriftError(f"the file search printed a bad change time: {line!r}") from None
    return since, sorted(found)


def parse_waivers(waivers: Any) -> list[dict[str, str]]:
    """``[{check, reason, item?}]`` (hpc_stateless_compliance_waivers), as the suite's waivers.yml entries:
    without ``item`` the whole check, with it the findings it matches (a path or package name; a glob)."""
    if waivers is None:
        return []
    if not isinstance(waivers, Sequence) or isinstance(waivers, (str, bytes)):
        raise DriftError(f"hpc_stateless_compliance_waivers must be a list of {{check, reason, item}}, got {waivers!r}")
    parsed = []
    for index, entry in enumerate(waivers):
        where = f"hpc_stateless_compliance_waivers[{index}]"
        if not isinstance(entry, Mapping) or entry.get("check") not in CHECKS:
            raise DriftError(f"{where}: 'check' must be one of {list(CHECKS)}, got {entry!r}")
        reason = str(entry.get("reason") or "").strip()
        if not reason:
            raise DriftError(f"{where}: waiver of {entry['check']} has no reason; say why it is no drift")
        item = entry.get("item")
        if item is not None and (not isinstance(item, str) or not item):
            raise DriftError(f"{where}: 'item' must be a path or package name (a glob), got {item!r}")
        parsed.append({"check": entry["check"], "reason": reason, **({"item": item} if item else {})})
    return parsed


def _whole_waiver(waivers: Sequence[Mapping[str, str]], check: str) -> str:
    return next((w["reason"] for w in waivers if w["check"] == check and "item" not in w), "")


def _unwaived(waivers: Sequence[Mapping[str, str]], check: str, items: Sequence[str]) -> list[str]:
    patterns = [w["item"] for w in waivers if w["check"] == check and "item" in w]
    return [i for i in items if not any(fnmatch.fnmatchcase(i.split(" ", 1)[0], p) for p in patterns)]


def _listing(findings: Sequence[str], what: str, cap: int) -> str:
    shown = "; ".join(findings[:cap])
    more = f"; ... and {len(findings) - cap} more" if len(findings) > cap else ""
    return f"{len(findings)} {what}: {shown}{more}"


def _judged(check: str, findings: Sequence[str], what: str, waivers: Sequence[Mapping[str, str]],
            cap: int, ok: str) -> Check:
    """passed when no finding is left after the item waivers; else failed, or waived by a whole-check waiver."""
    left = _unwaived(waivers, check, findings)
    waived = len(findings) - len(left)
    note = f" ({waived} waived)" if waived else ""
    if not left:
        return Check(check, True, ok + note)
    detail = _listing(left, what, cap) + note
    reason = _whole_waiver(waivers, check)
    if reason:
        return Check(check, True, detail, WAIVED, reason)
    return Check(check, False, detail, FAILED)


def _error(check: str, detail: str) -> Check:
    return Check(check, False, detail, ERROR)


def _gathered(result: Any, what: str) -> str:
    """Why an Ansible task result did not deliver ``what`` ('' when it did)."""
    if not isinstance(result, Mapping) or not result:
        return f"{what} was not gathered"
    if result.get("unreachable"):
        return f"the node is unreachable ({result.get('msg') or 'no answer'}): {what} could not be read"
    if result.get("failed") or result.get("rc") not in (None, 0):
        why = (str(result.get("stderr") or "").strip() or str(result.get("msg") or "").strip()
               or f"rc {result.get('rc')}")
        return f"reading {what} failed: {why[:500]}"
    return ""


def release_check(release: Mapping[str, str], image: str, served: Mapping[str, Any] | None, boot_root: str) -> Check:
    """The booted image and version (``/etc/image-release``) against the served manifest."""
    if served is None:
        return _error(RELEASE_CHECK, f"image {image} is not served under {boot_root} (no {image}/manifest.json); "
                                     "deploy it (playbooks/deploy.yml) or give the node its image "
                                     "(hpc_stateless_boot_image)")
    booted = (release.get("IMAGE", ""), release.get("VERSION", ""))
    want = (served["image"], served["version"])
    if not all(booted):
        return _error(RELEASE_CHECK, f"/{RELEASE_PATH} names no IMAGE and VERSION: {dict(release)!r}; "
                                     "the node did not boot an hpc.stateless image")
    if booted != want:
        return Check(RELEASE_CHECK, False, f"booted from {booted[0]} {booted[1]}; the boot tree serves "
                                           f"{want[0]} {want[1]} ({boot_root}/{image}); reboot the node "
                                           "(playbooks/rolling_update.yml)", FAILED)
    layer = release.get("LAYER", "")
    served_key = (served.get("layer_keys") or {}).get(layer)
    if served_key and release.get("LAYER_KEY") and release["LAYER_KEY"] != served_key:
        return Check(RELEASE_CHECK, False, f"booted {want[0]} {want[1]} with layer {layer} key "
                                           f"{release['LAYER_KEY'][:12]}, but the served {want[1]} holds key "
                                           f"{served_key[:12]}: the version was republished; reboot the node",
                     FAILED)
    return Check(RELEASE_CHECK, True, f"booted {want[0]} {want[1]}, the version the boot tree serves")


def package_findings(installed: Mapping[str, str], manifest_packages: Sequence[Mapping[str, Any]]) -> list[str]:
    """``name: what`` for every package installed but not in the manifest, missing, or at another version."""
    served: dict[str, set[str]] = {}
    for entry in manifest_packages:
        served.setdefault(str(entry["name"]), set()).add(str(entry["version"]))
    findings = []
    for name in sorted(set(installed) | set(served)):
        if name not in served:
            findings.append(f"{name} {installed[name]} installed, not in the image")
        elif name not in installed:
            findings.append(f"{name} {'/'.join(sorted(served[name]))} of the image is not installed")
        elif installed[name] not in served[name]:
            findings.append(f"{name} {installed[name]} installed, the image has {'/'.join(sorted(served[name]))}")
    return findings


def installed_packages(package_facts: Mapping[str, Any]) -> dict[str, str]:
    """``{name: version}`` from package_facts' ``packages`` (``{name: [{version, ...}]}``)."""
    installed = {}
    for name, entries in package_facts.items():
        versions = sorted({str(e.get("version")) for e in entries if isinstance(e, Mapping)})
        if not versions:
            raise DriftError(f"package_facts lists {name} without a version")
        installed[str(name)] = "/".join(versions)
    return installed


def served_manifest(text: str | None, image: str, boot_root: str) -> dict[str, Any] | None:
    """The served manifest of ``image`` from its text; None when nothing is served; DriftError when it is
    no pack manifest."""
    if text is None:
        return None
    where = f"{boot_root}/{image}/manifest.json"
    try:
        return check_manifest(json.loads(text), where)
    except ArtifactError as exc:
        raise DriftError(str(exc)) from None
    except ValueError as exc:
        raise DriftError(f"{where}: not JSON ({exc}); re-deploy the version") from None


def drift_checks(*, image: str, boot_root: str, served: Mapping[str, Any] | None, release: Any, packages: Any,
                 changed: Any, waivers: Sequence[Mapping[str, str]] = (), cap: int = FINDINGS_CAP
                 ) -> tuple[list[Check], dict[str, Any]]:
    """The three drift checks of one node and the facts they were judged on (``booted``, ``served``,
    ``since``, ``changed_files``, ``package_differences``). ``release``, ``packages`` and ``changed`` are the
    registered results of the node's tasks (slurp of /etc/image-release, package_facts, the file search)."""
    facts: dict[str, Any] = {"served": f"{served['image']} {served['version']}" if served else None}
    checks = []
    why = _gathered(release, f"/{RELEASE_PATH}")
    if why:
        checks.append(_error(RELEASE_CHECK, why))
    else:
        try:
            parsed = parse_image_release(base64.b64decode(release.get("content") or ""))
        except ValueError as exc:
            parsed = {}
            checks.append(_error(RELEASE_CHECK, f"/{RELEASE_PATH} is unreadable: {exc}"))
        if not checks:
            facts["booted"] = f"{parsed.get('IMAGE', '?')} {parsed.get('VERSION', '?')}"
            checks.append(release_check(parsed, image, served, boot_root))

    why = _gathered(packages, "the installed packages")
    facts_packages = (packages or {}).get("ansible_facts", {}).get("packages") if isinstance(packages, Mapping) else None
    if not why and not isinstance(facts_packages, Mapping):
        why = "package_facts returned no packages (is the node's package manager known to package_facts?)"
    if why:
        checks.append(_error(PACKAGES_CHECK, why))
    elif served is None:
        checks.append(_error(PACKAGES_CHECK, f"nothing to compare with: image {image} is not served"))
    else:
        try:
            findings = package_findings(installed_packages(facts_packages), served.get("packages") or [])
        except DriftError as exc:
            checks.append(_error(PACKAGES_CHECK, str(exc)))
        else:
            facts["package_differences"] = len(findings)
            checks.append(_judged(PACKAGES_CHECK, findings, "packages differ from the served manifest", waivers,
                                  cap, f"the {len(facts_packages)} installed packages are those of "
                                       f"{served['image']} {served['version']}"))

    why = _gathered(changed, "the files changed since boot")
    if why:
        checks.append(_error(FILES_CHECK, why))
    else:
        try:
            since, found = parse_find(str(changed.get("stdout") or ""))
        except DriftError as exc:
            checks.append(_error(FILES_CHECK, str(exc)))
        else:
            facts["since"] = iso_utc(int(since))
            paths = [path for path, _ctime in found]
            facts["changed_files"] = len(paths)
            checks.append(_judged(FILES_CHECK, paths, f"files changed since the boot finished ({iso_utc(int(since))})",
                                  waivers, cap, f"no file changed since the boot finished ({iso_utc(int(since))})"))
    return checks, facts


def node_report(node: str, image: str, boot_root: str, checks: Sequence[Check], facts: Mapping[str, Any],
                checked_at: int) -> dict[str, Any]:
    """The report of one node (build/compliance/<node>.json)."""
    return {"format": REPORT_FORMAT, "node": node, "image": image, "boot_root": boot_root,
            "checked_at": iso_utc(checked_at), "passed": all(c.passed for c in checks), **facts,
            "checks": [c.to_dict() for c in checks]}


def with_suite(report: Mapping[str, Any], checks: Sequence[Mapping[str, Any]], seconds: float | None = None
               ) -> dict[str, Any]:
    """The node's report with the checks of the compliance suite run on it (_verify/suite.py: ``{name, passed,
    result, waiver, detail}``) after its drift checks; ``passed`` only when every check of both passed,
    ``suite`` counts them by result and says how long the suite took. A suite that ran no check is an error."""
    suite = [dict(c) for c in checks] or [run_error("the compliance suite ran no check on the node")]
    merged = dict(report)
    merged["checks"] = [*report.get("checks", []), *suite]
    merged["passed"] = bool(report.get("passed", True)) and all(c.get("passed") for c in suite)
    merged["suite"] = {"checks": len(suite), "counts": summary(suite), "seconds": seconds}
    return merged


def with_checks(report: Mapping[str, Any], checks: Sequence[Mapping[str, Any]], what: str, summary: str
                ) -> dict[str, Any]:
    """The node's report with the checks of ``what`` (another judge's record checks: ``{name, passed, result, waiver,
    detail}``, ``id`` naming the check where given, as in a verify record) after its own; ``passed`` only when every
    check of both passed; ``summary`` (the judge's verdict in a line) kept under ``what`` lowercased."""
    added = [Check.from_dict(f"{what} checks", dict(c)).to_dict() for c in checks]
    merged = dict(report)
    merged["checks"] = [*report.get("checks", []), *added]
    merged["passed"] = bool(report.get("passed", True)) and all(c["passed"] for c in added)
    merged[what.lower()] = summary
    return merged


def report_line(report: Mapping[str, Any]) -> str:
    """One node's report in a line: passed or FAILED, the checks that failed, the suite's counts and time, the
    version the node booted and the one it is served."""
    failed = [str(c.get("name")) for c in report.get("checks", []) if not c.get("passed")]
    suite = report.get("suite") or {}
    return (f"{'passed' if report.get('passed') else 'FAILED'} "
            f"({', '.join(failed) or 'no drift, every check passed or waived'}; "
            f"suite {suite.get('counts', 'not run')} in {suite.get('seconds', 0)}s) "
            f"(booted {report.get('booted', '?')}, served {report.get('served') or 'nothing'})")


def findings_message(reports: Sequence[Mapping[str, Any]]) -> str:
    """One line per node that drifted or could not be checked, naming the checks and the first line of their
    details (a suite check's detail is its assertion with the traceback, in the report)."""
    lines = []
    for report in reports:
        bad = [c for c in report.get("checks", []) if not c.get("passed")]
        if bad:
            lines.append(f"{report['node']}: " + "; ".join(
                f"{c['name']} {c['result']}: {(str(c.get('detail') or '').splitlines() or [''])[0][:300]}"
                for c in bad))
    return "\n".join(lines)
