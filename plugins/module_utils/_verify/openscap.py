# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""OpenSCAP in the verify gate: the build host's scanner in the booted image, the SCAP Security Guide's content,
the collection's tailoring and waivers, and the verdict.

Where the scan runs: inside the booted container (playbooks/tasks/verify_openscap.yml), with the build host's
``oscap`` bound in read-only under ``/run`` of the throw-away boot (:func:`nspawn_binds`): its binary, the directories
of its shared libraries (run by the host's own dynamic loader with ``--library-path``, so the image's libraries are
never mixed in), its schemas and XSLT, the content, the tailoring and the platform dictionary. The image never gains
the scanner. A scan of the image's tree from the build host (``oscap-chroot``, ``OSCAP_PROBE_ROOT``) was measured and
refused: its dpkginfo probe runs the image's ``/usr/bin/dpkg`` as host root in a chroot (code from an image as host
root), it fails there anyway (every package rule then reads "not installed"), and its sysctl and systemd probes do
not work offline. Inside the boot the probes see the running system: the tmpfs mounts, the enabled units, dpkg's
database through the image's own tools, as the container's root.

Platform: the SCAP Security Guide names its content by release (``ssg-debian11-ds.xml``) and each benchmark applies to
its own platform only (``cpe:/o:debian:debian_linux:11``); on any other release every rule is "notapplicable". When the
build host has no content for the image's release, the newest content of the distribution is used and the collection's
CPE dictionary (roles/hpc_stateless/files/openscap/cpe-dictionary.xml, ``oscap xccdf eval --cpe``) lets the image's
release count as that platform; the content itself is not changed. :func:`platform_note` says so in the verdict.

Tailoring (roles/hpc_stateless/files/openscap/tailoring.xml, the XCCDF 1.2 Tailoring format the security team's own
tools read): one profile per SSG profile it tailors, each deselecting the rules that make no sense on a stateless node,
each ``select`` with a ``remark`` giving the reason (:func:`load_tailoring` refuses one without). Deselected rules are
not scanned and count neither way; the verdict lists them, with their reasons, as waived checks.

Waivers (roles/hpc_stateless/files/openscap-waivers.yml and hpc_stateless_verify_openscap_waivers): rules that are
scanned and fail, accepted with a reason. They still count as failed in the score. :func:`judge` passes when the share
of passing applicable rules reaches the minimum and every failed rule is waived: a role change that breaks a rule stops
the gate naming the rule.
"""

from __future__ import annotations

import os
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath, _paths, _process
from ansible_collections.hpc.stateless.plugins.module_utils._contract import names
from ansible_collections.hpc.stateless.plugins.module_utils._verify import boot_files
from ansible_collections.hpc.stateless.plugins.module_utils._verify.scan_verdict import ScanVerdict

try:
    import yaml
except ImportError:  # on the controller PyYAML is there (Ansible needs it)
    yaml = None  # type: ignore[assignment]

XCCDF_NS = "http://checklists.nist.gov/xccdf/1.2"
_X = "{" + XCCDF_NS + "}"
#: The SCAP Security Guide's id prefixes; a short name ("anssi_np_nt28_average") gets the profile prefix.
SSG_PROFILE = "xccdf_org.ssgproject.content_profile_"
SSG_RULE = "xccdf_org.ssgproject.content_rule_"
#: Where Debian's ssg-debian and ssg-debderived put the data streams.
CONTENT_DIR = "/usr/share/xml/scap/ssg/content"
_CONTENT_NAME = re.compile(r"^ssg-(?P<distro>[a-z]+)(?P<release>\d+)-ds\.xml$")
#: Where the scanner and its files appear inside the booted container: /run is a tmpfs of the boot.
MOUNT_POINT = "/run/hpc-stateless-openscap"
#: The scan's outputs, by kind; written into the writable ``out`` directory of the boot.
OUTPUTS = {"arf": "arf.xml", "results": "results.xml", "report": "report.html"}
#: oscap's exit codes: 0 every rule passed, 2 some rule failed; anything else is an error of the run.
SCAN_RCS = (0, 2)
_HOST_SHARE = ("/usr/share/openscap",)
#: The largest results file read back from the boot (the container writes it: it is bounded).
MAX_RESULTS_BYTES = 64 * 1024 * 1024
PASSING = ("pass", "fixed")
FAILING = ("fail", "error", "unknown")
NOT_APPLICABLE = ("notapplicable", "notchecked", "informational")
_WAIVER_KEYS = {"rule", "reason"}
#: The record's check that holds the score; each rule's check is ``openscap/<rule>``.
SCORE_CHECK = "openscap/score"
#: The check of a live node whose scan did not run or left no results (an error, never a pass).
RUN_CHECK = "openscap/run"


class OpenscapError(ValueError):
    """OpenSCAP cannot run or its results cannot be judged; the message names the file, key or value and what to do."""


def short_rule(rule_id: str) -> str:
    """``xccdf_org.ssgproject.content_rule_sshd_disable_root_login`` -> ``sshd_disable_root_login``."""
    return rule_id[len(SSG_RULE):] if rule_id.startswith(SSG_RULE) else rule_id


def profile_id(name: str) -> str:
    """The full XCCDF id of a profile named by its short SSG name or in full."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise OpenscapError(f"hpc_stateless_verify_openscap_profile: {name!r} is not a profile name; give the SSG "
                            "profile's short name (anssi_np_nt28_average, standard; `oscap info <data stream>` lists "
                            "them) or its full id")
    return name if name.startswith("xccdf_") else SSG_PROFILE + name


# ------------------------------------------------------------------------------------------ the host's scanner


@dataclass(frozen=True)
class Scanner:
    """The build host's oscap: the binary, its dynamic loader, the directories of its libraries, its share dir, and
    the libraries it links (the name the loader looks for, the file found)."""

    oscap: str
    interpreter: str
    libdirs: tuple[str, ...]
    share: str
    libraries: tuple[tuple[str, str], ...] = ()


def parse_ldd(text: str) -> tuple[str, list[str]]:
    """(dynamic loader, library directories in first-seen order) of ``ldd``'s output."""
    interpreter = ""
    dirs: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        match = re.match(r"^\S+ => (/\S+) \(", line)
        if match:
            directory = os.path.dirname(os.path.realpath(match.group(1)))
            if directory not in dirs:
                dirs.append(directory)
        elif line.startswith("/"):
            interpreter = os.path.realpath(line.split()[0])
        elif "=> not found" in line:
            raise OpenscapError(f"oscap on the build host misses a library ({line}); reinstall openscap-scanner")
    if not interpreter:
        raise OpenscapError("ldd names no dynamic loader for oscap; is /usr/bin/oscap a dynamic executable?")
    return interpreter, dirs


def ldd_libraries(text: str) -> list[tuple[str, str]]:
    """(name the dynamic loader looks for, the file it found) of each library in ``ldd``'s output."""
    found = []
    for line in text.splitlines():
        match = re.match(r"^\s*(\S+) => (/\S+) \(", line)
        if match:
            found.append((match.group(1), os.path.realpath(match.group(2))))
    return found


def host_scanner(share_candidates: Iterable[str] = _HOST_SHARE) -> Scanner:
    """The build host's oscap, ready to bind into a boot; a clear error when it is not installed."""
    hint = ("hpc_stateless_verify_openscap is true but OpenSCAP is not installed on the build host: "
            "apt-get install openscap-scanner ssg-debian (`make setup` does), or set hpc_stateless_verify_openscap: false")
    try:
        oscap = os.path.realpath(_process.which("oscap", hint))
    except _process.ToolMissing as exc:
        raise OpenscapError(hint) from exc
    share = next((path for path in share_candidates if os.path.isdir(os.path.join(path, "schemas"))), None)
    if share is None:
        raise OpenscapError(f"{hint} (no schemas directory in {', '.join(share_candidates)})")
    ldd = _process.run([_process.which("ldd"), oscap], hint="ldd could not read the build host's oscap")
    interpreter, libdirs = parse_ldd(ldd.stdout)
    return Scanner(oscap, interpreter, tuple(libdirs), share, tuple(ldd_libraries(ldd.stdout)))


def newest_content(content_dir: str = CONTENT_DIR, distro: str = "debian") -> str:
    """The data stream of the newest release of ``distro`` in ``content_dir`` (``ssg-debian11-ds.xml``)."""
    try:
        names = os.listdir(content_dir)
    except OSError as exc:
        raise OpenscapError(f"hpc_stateless_verify_openscap_content: no SCAP Security Guide content in {content_dir} "
                            f"({exc.strerror}); apt-get install ssg-debian, or name a data stream") from None
    found = [(int(m.group("release")), name) for name in names
             if (m := _CONTENT_NAME.match(name)) and m.group("distro") == distro]
    if not found:
        raise OpenscapError(f"hpc_stateless_verify_openscap_content: {content_dir} has no ssg-{distro}<release>-ds.xml; "
                            f"apt-get install ssg-debian (Debian) or ssg-debderived (Ubuntu), or name a data stream")
    return os.path.join(content_dir, max(found)[1])


def content_release(path: str) -> tuple[str, str]:
    """(distribution, release) a data stream is named for: ``ssg-debian11-ds.xml`` -> (debian, 11); ('', '') if unknown."""
    match = _CONTENT_NAME.match(os.path.basename(path))
    return (match.group("distro"), match.group("release")) if match else ("", "")


def boot_paths(content: str, platform_dir: str) -> dict[str, str]:
    """Where the boot sees the scan's files: the scanner, the content, the tailoring, the platform dictionary, the
    outputs."""
    return {
        "scanner": f"{MOUNT_POINT}/bin/oscap",
        "share": f"{MOUNT_POINT}/share",
        "content": f"{MOUNT_POINT}/content/{os.path.basename(content)}",
        "tailoring": f"{MOUNT_POINT}/tailoring.xml",
        "platform": f"{MOUNT_POINT}/platform/{os.path.basename(platform_dir.rstrip('/'))}",
        "out": f"{MOUNT_POINT}/out",
    }


def _bind_path(option: str, path: str) -> str:
    if ":" in path or "\n" in path:
        raise OpenscapError(f"{option}: {path!r} cannot be bound by systemd-nspawn (no ':' or newline in the path)")
    return path


def nspawn_binds(scanner: Scanner, content: str, tailoring: str, platform_dir: str, out_dir: str) -> list[str]:
    """``--bind-ro`` arguments that show the scanner and its inputs in the boot, ``--bind`` for the output directory."""
    paths = boot_paths(content, platform_dir)
    binds = [f"--bind-ro={_bind_path('oscap', scanner.oscap)}:{paths['scanner']}",
             f"--bind-ro={_bind_path('oscap', scanner.share)}:{paths['share']}"]
    binds += [f"--bind-ro={_bind_path('oscap', d)}:{MOUNT_POINT}/lib/{i}" for i, d in enumerate(scanner.libdirs)]
    binds += [f"--bind-ro={_bind_path('hpc_stateless_verify_openscap_content', content)}:{paths['content']}",
              f"--bind-ro={_bind_path('hpc_stateless_verify_openscap_tailoring', tailoring)}:{paths['tailoring']}",
              f"--bind-ro={_bind_path('platform', platform_dir)}:{paths['platform']}",
              f"--bind={_bind_path('out', out_dir)}:{paths['out']}"]
    return binds


def scan_argv(scanner: Scanner, content: str, platform_dir: str, profile: str) -> list[str]:
    """The command that scans the booted container (run inside it), writing every output of :data:`OUTPUTS`."""
    paths = boot_paths(content, platform_dir)
    interpreter = f"{MOUNT_POINT}/lib/{scanner.libdirs.index(os.path.dirname(scanner.interpreter))}/" \
        f"{os.path.basename(scanner.interpreter)}" if os.path.dirname(scanner.interpreter) in scanner.libdirs else ""
    if not interpreter:
        raise OpenscapError(f"oscap's dynamic loader {scanner.interpreter} is in none of its library directories "
                            f"({', '.join(scanner.libdirs)}); it cannot be bound into the boot")
    library_path = ":".join(f"{MOUNT_POINT}/lib/{i}" for i in range(len(scanner.libdirs)))
    return [interpreter, "--library-path", library_path, paths["scanner"], "xccdf", "eval",
            "--profile", profile, "--tailoring-file", paths["tailoring"],
            "--cpe", f"{paths['platform']}/cpe-dictionary.xml",
            "--results-arf", f"{paths['out']}/{OUTPUTS['arf']}", "--results", f"{paths['out']}/{OUTPUTS['results']}",
            "--report", f"{paths['out']}/{OUTPUTS['report']}", paths["content"]]


def scan_environment(content: str, platform_dir: str) -> dict[str, str]:
    """Where the bound-in oscap finds its schemas and XSLT (its built-in paths are the host's, not the boot's)."""
    share = boot_paths(content, platform_dir)["share"]
    return {"OSCAP_SCHEMA_PATH": f"{share}/schemas", "OSCAP_XSLT_PATH": f"{share}/xsl"}


# ------------------------------------------------------------------------------------------ tailoring and waivers


@dataclass(frozen=True)
class TailoredProfile:
    """One profile of the tailoring file: its id, the SSG profile it extends and the rules it deselects (with reasons)."""

    id: str
    extends: str
    deselected: dict[str, str]


def load_tailoring(data: bytes | str, where: str) -> dict[str, TailoredProfile]:
    """The tailored profiles of an XCCDF 1.2 Tailoring document, by the id of the profile each extends."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise OpenscapError(f"{where}: not XML ({exc}); give an XCCDF 1.2 Tailoring file") from None
    if root.tag != f"{_X}Tailoring":
        raise OpenscapError(f"{where}: the root element is {root.tag}, expected an XCCDF 1.2 Tailoring ({_X}Tailoring)")
    profiles: dict[str, TailoredProfile] = {}
    for element in root.findall(f"{_X}Profile"):
        pid, extends = element.get("id") or "", element.get("extends") or ""
        if not pid or not extends:
            raise OpenscapError(f"{where}: a Profile needs an id and the profile it extends, got id={pid!r} "
                                f"extends={extends!r}")
        if extends in profiles:
            raise OpenscapError(f"{where}: two profiles extend {extends}; keep one")
        deselected: dict[str, str] = {}
        for select in element.findall(f"{_X}select"):
            rule = select.get("idref") or ""
            if select.get("selected") != "false":
                raise OpenscapError(f"{where}: profile {pid} selects {rule}; the tailoring only deselects rules "
                                    "(selected=\"false\", with a remark giving the reason)")
            reason = " ".join(" ".join(r.text or "" for r in select.findall(f"{_X}remark")).split())
            if not reason:
                raise OpenscapError(f"{where}: profile {pid} deselects {rule} without a reason; add "
                                    "<xccdf:remark>why it makes no sense on a stateless node</xccdf:remark>")
            deselected[rule] = reason
        profiles[extends] = TailoredProfile(pid, extends, deselected)
    if not profiles:
        raise OpenscapError(f"{where}: the tailoring has no Profile")
    return profiles


def load_waivers(files: Iterable[str]) -> dict[str, str]:
    """Waived rules (short or full id -> reason) of waiver files ``waivers: [{rule, reason}]``; later files win."""
    if yaml is None:
        raise OpenscapError("PyYAML is needed to read the OpenSCAP waiver files")
    waivers: dict[str, str] = {}
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
        except OSError as exc:
            raise OpenscapError(f"hpc_stateless_verify_openscap_waivers: cannot read {path} ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise OpenscapError(f"{path}: not YAML ({exc})") from None
        entries = data.get("waivers") if isinstance(data, dict) else None
        if not isinstance(entries, list) or set(data) - {"waivers"}:
            raise OpenscapError(f"{path}: expects a mapping with one key, waivers: a list of {{rule, reason}}")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or set(entry) != _WAIVER_KEYS or not all(
                    isinstance(entry[k], str) and entry[k].strip() for k in _WAIVER_KEYS):
                raise OpenscapError(f"{path}: waivers[{index}] needs exactly a rule and a reason (both text), "
                                    f"got {entry!r}")
            waivers[short_rule(entry["rule"].strip())] = " ".join(entry["reason"].split())
    return waivers


# ------------------------------------------------------------------------------------------ results and verdict


@dataclass(frozen=True)
class RuleResult:
    rule: str
    result: str
    title: str = ""
    severity: str = ""


@dataclass(frozen=True)
class Results:
    """What one XCCDF results document says: the profile evaluated, the platforms that applied, each rule's result."""

    profile: str
    platforms: tuple[str, ...]
    rules: tuple[RuleResult, ...]
    benchmark: str = ""


def parse_results(data: bytes | str) -> Results:
    """Read an XCCDF 1.2 results document (``oscap xccdf eval --results``): the last TestResult, rule titles."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise OpenscapError(f"the XCCDF results are not XML ({exc}); the scan did not finish") from None
    benchmark = root if root.tag == f"{_X}Benchmark" else root.find(f".//{_X}Benchmark")
    tests = root.findall(f".//{_X}TestResult")
    if benchmark is None or not tests:
        raise OpenscapError("the XCCDF results hold no Benchmark with a TestResult; the scan did not finish")
    titles = {rule.get("id"): " ".join((rule.findtext(f"{_X}title") or "").split())
              for rule in benchmark.iter(f"{_X}Rule")}
    test = tests[-1]
    profile_el = test.find(f"{_X}profile")
    rules = tuple(RuleResult(rr.get("idref") or "", (rr.findtext(f"{_X}result") or "").strip(),
                             titles.get(rr.get("idref"), ""), rr.get("severity") or "")
                  for rr in test.findall(f"{_X}rule-result"))
    platforms = tuple(p.get("idref") or "" for p in test.findall(f"{_X}platform"))
    return Results((profile_el.get("idref") or "") if profile_el is not None else "", platforms, rules,
                   benchmark.get("id") or "")


def platform_note(content: str, image_release: str) -> str:
    """How the content's platform was matched to the image's release (``os_release``'s VERSION_ID)."""
    distro, release = content_release(content)
    name = os.path.basename(content)
    if not release:
        return f"content {name}"
    if not image_release or image_release.split(".")[0] == release:
        return f"content {name} ({distro} {release}, the image's release)"
    return (f"content {name}: the build host's newest {distro} content is for {distro} {release}; it does not know "
            f"{distro} {image_release}, whose image was matched as the {distro} {release} platform by the collection's "
            "CPE dictionary (roles/hpc_stateless/files/openscap/cpe-dictionary.xml)")


def os_release_version(text: str) -> str:
    """VERSION_ID of an os-release file's text ('' when absent)."""
    for line in (text or "").splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() == "VERSION_ID":
            return value.strip().strip("\"'")
    return ""


@dataclass
class Verdict(ScanVerdict):
    """OpenSCAP's verdict: the share of passing applicable rules is the score (%), with its two counts and the rules
    the tailoring deselected (rule -> reason)."""

    passing: int = 0
    applicable: int = 0
    tailored_out: dict[str, str] = field(default_factory=dict)


def score(rules: Iterable[RuleResult]) -> tuple[int, int]:
    """(passing, applicable) rules: applicable ones passed, failed or could not be decided (error, unknown)."""
    rules = list(rules)
    passing = sum(1 for r in rules if r.result in PASSING)
    return passing, passing + sum(1 for r in rules if r.result in FAILING)


def judge(results: Results, profile: str, minimum: int, tailored: TailoredProfile | None = None,
          waivers: Mapping[str, str] | None = None, platform: str = "") -> Verdict:
    """Passes when the share of passing applicable rules reaches ``minimum`` (%) and every failed rule is waived."""
    if isinstance(minimum, bool) or not isinstance(minimum, int) or not 0 <= minimum <= 100:
        raise OpenscapError(f"hpc_stateless_verify_openscap_min_pass: expects a whole percentage 0-100, got {minimum!r}")
    waivers = dict(waivers or {})
    deselected = tailored.deselected if tailored else {}
    passing, applicable = score(results.rules)
    name = short_rule(profile)[len(SSG_PROFILE):] if profile.startswith(SSG_PROFILE) else profile
    if applicable == 0:
        return Verdict(False, 0.0, minimum, [{
            "id": SCORE_CHECK, "name": f"OpenSCAP {name} score", "passed": False, "result": "error", "waiver": "",
            "detail": f"no rule of {profile} applies to this image ({platform or 'content unknown'}); check that the "
                      "content is for the image's distribution (hpc_stateless_verify_openscap_content)"}],
            message=f"OpenSCAP {name}: no rule applies to this image; {platform}")
    percent = round(100.0 * passing / applicable, 1)
    checks: list[dict[str, Any]] = []
    unwaived: list[str] = []
    used: set[str] = set()
    for rule in results.rules:
        rid = short_rule(rule.rule)
        check: dict[str, Any] = {"id": f"openscap/{rid}", "name": f"OpenSCAP rule {rule.title or rid}", "waiver": "",
                                 "detail": rule.result}
        if rule.result in PASSING:
            check.update(passed=True, result="passed")
        elif rule.result in FAILING:
            if rid in waivers:
                used.add(rid)
                check.update(passed=True, result="waived", waiver=waivers[rid],
                             detail=f"{rule.result} (counted as failed in the score)")
            else:
                unwaived.append(rid)
                check.update(passed=False, result="failed" if rule.result == "fail" else "error",
                             detail=f"{rule.result}: {rule.title or rid} (severity {rule.severity or 'unknown'})")
        elif rule.result == "notselected":
            if rule.rule not in deselected:
                continue
            check.update(passed=True, result="waived", waiver=deselected[rule.rule], detail="tailored out")
        else:
            check.update(passed=True, result="skipped", detail=rule.result)
        checks.append(check)
    above = percent >= minimum
    summary = (f"{passing}/{applicable} applicable rules pass ({percent} %, minimum {minimum} % "
               f"hpc_stateless_verify_openscap_min_pass)")
    checks.append({"id": SCORE_CHECK, "name": f"OpenSCAP {name} score", "passed": above,
                   "result": "passed" if above else "failed", "waiver": "",
                   "detail": f"{summary}; {len(deselected)} rule(s) tailored out; {platform}"})
    passed = above and not unwaived
    problems = []
    if not above:
        problems.append(f"below the minimum: {summary}")
    if unwaived:
        problems.append("failed rules not waived: " + ", ".join(unwaived)
                        + " (fix the role and build again; or waive a rule with its reason in "
                          "hpc_stateless_verify_openscap_waivers, or tailor out one that makes no sense on a "
                          "stateless node: docs/verify.md)")
    message = (f"OpenSCAP {name}: " + ("; ".join(problems) if problems else summary)
               + f"; {len(deselected)} tailored out; {platform}")
    return Verdict(passed, percent, minimum, checks, unwaived, sorted(set(waivers) - used), message, passing=passing,
                   applicable=applicable, tailored_out={short_rule(r): why for r, why in deselected.items()})


# ------------------------------------------------------------------------------------------ one scan's files

#: The name every directory of one scan's files ends with; :func:`remove` refuses any other.
SUFFIX = ".verify-openscap"
#: The suffix of the directory of kept outputs beside the verify record (``<layer>-<key>.openscap``).
KEPT_SUFFIX = ".openscap"


@dataclass(frozen=True)
class Scan:
    """One scan prepared on the build host: its private directory, the boot's binds, the command and its settings."""

    path: str
    binds: list[str]
    argv: list[str]
    environment: dict[str, str]
    profile: str
    tailored: bool
    content: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "binds": self.binds, "argv": self.argv, "environment": self.environment,
                "profile": self.profile, "tailored": self.tailored, "content": self.content}


def resolve_profile(profile: str, tailoring: Mapping[str, TailoredProfile]) -> tuple[str, TailoredProfile | None]:
    """(the id to evaluate, its tailored profile): the tailored profile that extends ``profile``, else ``profile``."""
    base = profile_id(profile)
    tailored = tailoring.get(base)
    return (tailored.id if tailored else base), tailored


def read_tailoring(path: str) -> dict[str, TailoredProfile]:
    try:
        with open(path, "rb") as handle:
            return load_tailoring(handle.read(), path)
    except OSError as exc:
        raise OpenscapError(f"hpc_stateless_verify_openscap_tailoring: cannot read {path} ({exc.strerror})") from None


def prepare(profile: str, tailoring: str, platform_dir: str, content: str | None = None,
            scanner: Scanner | None = None, parent: str | None = None, live: bool = False) -> Scan:
    """Check the settings and make one scan's private directory: for a verify boot, its ``out`` directory is bound into
    the boot (``binds``); for live nodes (``live``), it holds the archive :data:`BUNDLE_NAME` that each node unpacks
    into MOUNT_POINT (``binds`` empty) and, later, each node's outputs under ``<node>/out``."""
    import tempfile  # pylint: disable=import-outside-toplevel

    content = content or newest_content()
    if not os.path.isfile(content):
        raise OpenscapError(f"hpc_stateless_verify_openscap_content: {content} is no file; name a SCAP data stream "
                            f"(ssg-debian11-ds.xml in {CONTENT_DIR})")
    if not os.path.isfile(os.path.join(platform_dir, "cpe-dictionary.xml")):
        raise OpenscapError(f"{platform_dir}: no cpe-dictionary.xml; the collection's platform dictionary is missing")
    evaluated, tailored = resolve_profile(profile, read_tailoring(tailoring))
    scanner = scanner or host_scanner()
    argv = scan_argv(scanner, content, platform_dir, evaluated)
    members = bundle_members(scanner, content, tailoring, platform_dir) if live else []
    directory = tempfile.mkdtemp(suffix=SUFFIX, dir=parent)
    try:
        if live:
            write_bundle(members, os.path.join(directory, BUNDLE_NAME))
            binds = []
        else:
            out = os.path.join(directory, "out")
            os.mkdir(out, 0o700)
            binds = nspawn_binds(scanner, content, tailoring, platform_dir, out)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Scan(directory, binds, argv, scan_environment(content, platform_dir), evaluated, tailored is not None,
                content)


#: The archive of a live node's scan: the files :func:`nspawn_binds` shows a verify boot, laid out as they appear under
#: MOUNT_POINT there. A node unpacks it into its /run (a tmpfs: nothing of the scanner enters the image or outlives the
#: run), scans and is cleaned; the scan is the same command with the same content, tailoring and platform dictionary.
BUNDLE_NAME = "scanner.tar.gz"


def bundle_members(scanner: Scanner, content: str, tailoring: str, platform_dir: str) -> list[tuple[str, str]]:
    """(file on the controller, its path under MOUNT_POINT) of everything a live node's scan reads: the layout of
    :func:`nspawn_binds`, with the libraries oscap links (named as the loader looks for them) instead of their whole
    directories."""
    index = {directory: i for i, directory in enumerate(scanner.libdirs)}

    def library(name: str, path: str) -> tuple[str, str]:
        directory = os.path.dirname(path)
        if directory not in index or "/" in name:
            raise OpenscapError(f"oscap's library {name} ({path}) is in none of its library directories "
                                f"({', '.join(scanner.libdirs)}); reinstall openscap-scanner")
        return path, f"lib/{index[directory]}/{name}"

    members = [(scanner.oscap, "bin/oscap")]
    members += [library(name, path) for name, path in scanner.libraries]
    members.append(library(os.path.basename(scanner.interpreter), scanner.interpreter))
    for top, dirs, files in os.walk(scanner.share):
        dirs.sort()
        for name in sorted(files):
            path = os.path.realpath(os.path.join(top, name))
            if os.path.isfile(path):
                members.append((path, "share/" + os.path.relpath(os.path.join(top, name), scanner.share)))
    start = len(MOUNT_POINT) + 1
    paths = {kind: where[start:] for kind, where in boot_paths(content, platform_dir).items()}
    members += [(content, paths["content"]), (tailoring, paths["tailoring"])]
    for name in sorted(os.listdir(platform_dir)):
        path = os.path.join(platform_dir, name)
        if os.path.isfile(path):
            members.append((path, f"{paths['platform']}/{name}"))
    return members


def write_bundle(members: Iterable[tuple[str, str]], archive: str) -> None:
    """The gzip'd tar of ``members`` (root's regular files, 0755 where executable, else 0644) and the empty ``out``
    directory (0700) at ``archive``, written under a temporary name and renamed into place."""
    import tarfile  # pylint: disable=import-outside-toplevel

    with _paths.replacing(archive, sync=False) as staged, tarfile.open(staged, "w:gz", compresslevel=1) as tar:
        out = tarfile.TarInfo("out")
        out.type, out.mode = tarfile.DIRTYPE, 0o700
        tar.addfile(out)
        for path, name in members:
            info = tar.gettarinfo(path, name)
            if not info.isfile():
                raise OpenscapError(f"{path} is no regular file; it cannot go into the live scan's archive")
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            with open(path, "rb") as handle:
                tar.addfile(info, handle)


def failure_text(task: str, result: Any) -> str:
    """What failed of a live node's scan, in a line: the task and its result's message, else the end of its error
    output, and the exit status."""
    if not isinstance(result, Mapping):
        return f"{task}: {result}" if task else str(result)
    text = str(result.get("msg") or "").strip()
    stderr = str(result.get("stderr") or "").strip()
    if stderr:
        text = f"{text}; {stderr[-500:]}" if text else stderr[-500:]
    if result.get("rc") is not None:
        text = f"{text} (exit status {result['rc']})" if text else f"exit status {result['rc']}"
    if result.get("unreachable"):
        text = f"the node is unreachable: {text}"
    return f"{task}: {text or 'failed'}" if task else (text or "failed")


def kept_path(record_dir: str, layer: str, key: str) -> str:
    """Where the outputs of ``layer``'s scan at content key ``key`` are kept: beside its verify record, named after it
    (``<layer>-<key>.openscap``)."""
    record = names.verify_record_file(layer, key)
    if "/" in record or not layer or not key:
        raise OpenscapError(f"layer {layer!r} and key {key!r} do not name a verify record")
    return os.path.join(record_dir, record[:-len(names.VERIFY_RECORD_SUFFIX)] + KEPT_SUFFIX)


def keep_outputs(scan_dir: str, final: str) -> dict[str, str]:
    """Copy the scan's outputs (written by the container: read without following links, regular files only) into
    the directory ``final`` (:func:`kept_path`) under its name in one rename; the kept paths by kind."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    staged = _paths.temp_name(final)
    os.mkdir(staged, 0o755)
    try:
        kept = {}
        for kind_, name in OUTPUTS.items():
            try:
                _imagepath.copy_out(os.path.join(scan_dir, "out"), name, staged, name, follow_last=False, sync=False)
            except FileNotFoundError:
                continue
            kept[kind_] = os.path.join(final, name)
        _paths.move_into_place(staged, final, aside=_paths.temp_name(final))
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return kept


def read_results(scan_dir: str) -> Results:
    """The XCCDF results the scan wrote into its ``out`` directory (no link followed, at most MAX_RESULTS_BYTES)."""
    try:
        fd = _imagepath.open_file(os.path.join(scan_dir, "out"), OUTPUTS["results"], follow_last=False)
    except (FileNotFoundError, _imagepath.NotRegularFile) as exc:
        raise OpenscapError(f"the scan wrote no results file ({OUTPUTS['results']}: {exc}); see oscap's output "
                            "above") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_RESULTS_BYTES + 1)
    if len(data) > MAX_RESULTS_BYTES:
        raise OpenscapError(f"the XCCDF results are larger than {MAX_RESULTS_BYTES} bytes; refused")
    return parse_results(data)


def remove(path: str) -> bool:
    """Remove one scan's directory; whether it was there. Refuses a path that is no such directory."""
    try:
        return boot_files.remove_private_dir(path, SUFFIX, "an OpenSCAP scan")
    except boot_files.BootFilesError as exc:
        raise OpenscapError(str(exc)) from None
