# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The compliance suite in verify: which test files an image gets, and its results as record checks.

The suite is the pytest-testinfra checks of ``molecule/`` (shipped in the collection): the security
baseline (``molecule/_shared/tests``) for every image, and ``molecule/<role>/tests`` for each role of
the image's layer chain; a site adds its own files beside them. verify.yml runs them once per image, in
one pytest process, against the image booted under systemd-nspawn (action ``hpc.stateless.compliance_suite``);
playbooks/compliance.yml runs the same suite against LIVE nodes over SSH (:func:`live_inventory`,
:func:`live_environment`: testinfra's ansible backend with the SSH settings Ansible resolved for the node).
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
import shlex
import stat
import xml.etree.ElementTree as ET
from typing import Any, Callable, Iterable, Iterator, Mapping
from urllib.parse import quote

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


def _applications(layers: Mapping[str, Any], layer: str) -> Iterator[tuple[str, str]]:
    """``(layer, short role name)`` for each role each layer of ``layer``'s chain applies, root layer first."""
    for item in chain_layers(layers, layer):
        for role in layers[item].get("roles") or []:
            role_name = role.get("role") if isinstance(role, dict) else role
            if role_name:
                yield item, short_role(str(role_name))


def chain_roles(layers: Mapping[str, Any], layer: str) -> list[str]:
    """Short names of the roles applied to ``layer``'s image, root layer first (each once)."""
    return list(dict.fromkeys(role for _item, role in _applications(layers, layer)))


def role_values(layers: Mapping[str, Any], layer: str,
                variables_of: Callable[[str], Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What each role of ``layer``'s image was applied with: ``{role: {role_variable: value}}``, the values of the
    role's prefixed variables as the last layer of the chain that applies it saw them while it was built.

    ``variables_of(layer)`` gives a layer's raw variables the way the plan reads them for its key (its inventory
    host: group_vars of its groups, host_vars, extra variables; then the layer's ``vars``), so the checks expect
    what the build applied, not a second reading of the inventory's files. Values are raw (as written, Jinja not
    rendered); the caller makes them JSON (``content_key.canonical_value``: a vaulted value becomes the digest
    of its ciphertext, never the secret)."""
    applied = {role: item for item, role in _applications(layers, layer)}  # the last layer applying each role
    found: dict[str, dict[str, Any]] = {}
    seen: dict[str, Mapping[str, Any]] = {}
    for role, item in applied.items():
        if item not in seen:
            seen[item] = variables_of(item)
        found[role] = {name: value for name, value in sorted(seen[item].items())
                       if isinstance(name, str) and name.startswith(f"{role}_")}
    return found


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
                      chain: Iterable[str] = (), values: str = "") -> dict[str, str]:
    """Environment of that process: what molecule/conftest.py reads to enter the booted container (leader PID),
    find the image at rest (``image`` or the packed tree ``root``), pick the roles' tests, the waivers and the
    inventory, and the file of the values the checks expect (``values``: :func:`role_values` as JSON). Nothing
    of an outer pytest, Molecule or verify run leaks in."""
    return _environment(base, f"nsenter://{int(leader)}", layer, roles, nsenter=nsenter, image=image, root=root,
                        waivers=waivers, inventory=inventory, chain=chain, values=values)


def live_environment(base: Mapping[str, str], node: str, inventory_file: str, layer: str, roles: Iterable[str],
                     waivers: Iterable[str] = (), inventory: str = "", chain: Iterable[str] = (),
                     bindirs: Iterable[str] = (), values: str = "") -> dict[str, str]:
    """Environment of the pytest process that checks the live ``node`` (playbooks/compliance.yml): the target is
    testinfra's ansible backend on the one-host ``inventory_file`` (:func:`live_inventory`); no image at rest.
    ``bindirs`` go in front of PATH (testinfra runs ``ansible-inventory`` of the controller's Ansible)."""
    env = _environment(base, live_target(node, inventory_file), layer, roles, waivers=waivers, inventory=inventory,
                       chain=chain, values=values)
    path = [d for d in bindirs if d] + [d for d in env.get("PATH", "").split(os.pathsep) if d]
    env["PATH"] = os.pathsep.join(dict.fromkeys(path))
    # testinfra's ansible backend also reads the controller's ansible.cfg and pastes its [ssh_connection] ssh_args and
    # control_path, unquoted, into the sh -c line that runs ssh. The inventory already holds them, resolved and
    # quoted (live_inventory): the suite reads an empty configuration beside it instead (LIVE_CONFIG).
    env["ANSIBLE_CONFIG"] = live_config(inventory_file)
    return env


#: The live suite's Ansible configuration, an empty file beside its inventory (compliance_suite writes both).
LIVE_CONFIG = "suite.cfg"


def live_config(inventory_file: str) -> str:
    """The path of the live suite's empty Ansible configuration (:data:`LIVE_CONFIG`) for ``inventory_file``."""
    return os.path.join(os.path.dirname(os.path.abspath(inventory_file)), LIVE_CONFIG)


def _environment(base: Mapping[str, str], target: str, layer: str, roles: Iterable[str], nsenter: str = "nsenter",
                 image: str = "", root: str = "", waivers: Iterable[str] = (), inventory: str = "",
                 chain: Iterable[str] = (), values: str = "") -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(("PYTEST_", "MOLECULE_", "HPC_STATELESS_"))}
    env.update({
        "HPC_STATELESS_TEST_TARGET": target,
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
    if values:
        # The file of role_values: the checks expect these values instead of reading the inventory's files.
        env["HPC_STATELESS_EXPECT_VALUES"] = values
    return env


#: The scheme of a live node's target: testinfra's ansible backend (``ansible://<node>?ansible_inventory=<file>``).
LIVE_SCHEME = "ansible"
#: Connections of a live node the suite can use: testinfra's ansible backend maps them onto its own ssh backend
#: (one ``ssh`` per command, through the connection master Ansible opened). Others would run one ``ansible``
#: process per command - minutes per node - and are refused.
SSH_CONNECTIONS = ("ssh", "ansible.builtin.ssh", "ansible.legacy.ssh", "smart")
#: The check a live node gets when its suite could not run at all (unreachable, no ssh, pytest failed).
RUN_CHECK = "suite::run"


def live_target(node: str, inventory_file: str) -> str:
    """testinfra host spec of a live node: its ansible backend on the one-host inventory."""
    return f"{LIVE_SCHEME}://{node}?ansible_inventory={quote(inventory_file, safe='/')}"


def _has_option(args: str, option: str) -> bool:
    return option.lower() in args.lower()


def live_inventory(node: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one-host inventory (``ansible-inventory`` YAML/JSON) that hands testinfra's ansible backend the SSH
    settings Ansible itself uses for ``node``: ``settings`` are the resolved options of the node's ssh connection
    (``host``, ``port``, ``remote_user``, ``private_key_file``, ``ssh_args``, ``ssh_common_args``,
    ``ssh_extra_args``, ``host_key_checking``, ``timeout``, ``control_path`` - the socket path Ansible's master
    listens on - ``password``, ``become``, ``become_user``, ``become_method``, ``remote_tmp`` - the shell's remote
    temporary directory, so the suite leaves its files where the play does). The values are written resolved:
    testinfra reads inventory variables as written, and one source is all it takes. Keys only: a password is
    refused (SuiteError), it would go on ssh's command line."""
    if settings.get("password") and not settings.get("private_key_file"):
        raise SuiteError(f"{node}: the suite logs in with SSH keys only (a password would go on the command line); "
                         "give root a key (base_root_authorized_keys) and ansible_ssh_private_key_file")
    common = [str(settings.get(k) or "").strip() for k in ("ssh_args", "ssh_common_args")]
    joined = " ".join(common)
    if settings.get("host_key_checking") is False and not _has_option(joined, "StrictHostKeyChecking"):
        common.append("-o StrictHostKeyChecking=no")
    if settings.get("timeout") and not _has_option(joined, "ConnectTimeout"):
        common.append(f"-o ConnectTimeout={int(settings['timeout'])}")
    if settings.get("control_path") and _has_option(joined, "ControlPersist") and not _has_option(joined, "ControlPath"):
        common.append(f"-o ControlPath={shlex.quote(str(settings['control_path']))}")
    hostvars: dict[str, Any] = {"ansible_connection": "ssh", "ansible_host": str(settings.get("host") or node),
                                "ansible_ssh_common_args": _shell_words(node, "ssh_args/ssh_common_args",
                                                                        " ".join(c for c in common if c))}
    if settings.get("port"):
        hostvars["ansible_port"] = int(settings["port"])
    if settings.get("remote_user"):
        hostvars["ansible_user"] = str(settings["remote_user"])
    if settings.get("private_key_file"):
        hostvars["ansible_ssh_private_key_file"] = os.path.expanduser(str(settings["private_key_file"]))
    if settings.get("ssh_extra_args"):
        hostvars["ansible_ssh_extra_args"] = _shell_words(node, "ssh_extra_args", str(settings["ssh_extra_args"]))
    if settings.get("remote_tmp"):
        hostvars["ansible_remote_tmp"] = str(settings["remote_tmp"])
    if settings.get("become"):
        if (settings.get("become_method") or "sudo") != "sudo":
            raise SuiteError(f"{node}: become_method {settings['become_method']!r}: testinfra becomes root with sudo "
                             "only; log in as root (base_root_authorized_keys) or use sudo")
        hostvars["ansible_become"] = True
        hostvars["ansible_become_user"] = str(settings.get("become_user") or "root")
    return {"all": {"hosts": {node: hostvars}}}


def _shell_words(node: str, key: str, args: str) -> str:
    """``args`` split into words as Ansible's ssh connection splits them (:func:`shlex.split`, no shell), each
    quoted for a POSIX shell: testinfra's ssh backend pastes its ssh arguments into a ``sh -c`` command line on
    the controller, where ``$(...)``, backquotes, ``;`` or a glob of an inventory's ssh option would run or expand.
    Quoted, the shell hands ssh each word exactly as Ansible does."""
    try:
        return shlex.join(shlex.split(args))
    except ValueError as exc:
        raise SuiteError(f"{node}: {key} {args!r} cannot be split into ssh arguments ({exc}): mend its quotes") from None


def run_error(detail: str) -> dict[str, Any]:
    """The record check of a live node whose suite could not run: an error, never passed."""
    return {"name": RUN_CHECK, "passed": False, "result": ERROR, "waiver": "", "detail": detail[:DETAIL_LIMIT]}


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
