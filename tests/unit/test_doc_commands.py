# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every command of README.md and docs/*.md runs as written.

The commands are taken from the fenced code blocks of the pages (a ``$ `` prompt, ``\\`` continuations and
``#`` comments understood) and from inline code spans that start with ``ansible-playbook`` or ``make``.
Each is checked as far as it can be without changing the host:

- ``ansible-playbook``: the playbook exists (a path of the checkout, or ``hpc.stateless.<name>``), every
  ``-e`` variable is one a playbook reads (an option of a role's ``meta/argument_specs.yml``), and every
  playbook named passes ``ansible-playbook --syntax-check`` (one run for all of them);
- ``ansible -m hpc.stateless.<module> -a 'k=v ...'``: the module exists and has each option;
- ``make``: the target exists and ``make -n`` runs (recursive makes run with ``-n`` too);
- ``python <script>``: the script exists and each option given is in its ``--help``;
- ``ansible-galaxy``: the subcommand's ``--help`` lists each option given.

A placeholder (``<name>``, ``...``) is not checked as a value, only the names around it. An inventory given
with ``-i`` that the checkout does not hold (a site's own cluster) is not checked. docs/README.md, the index,
must link every page of docs/.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from ansible.parsing.splitter import parse_kv

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: Languages of the code blocks whose lines are commands (a block without one may hold commands too).
SHELL_LANGS = {"", "console", "sh", "bash", "shell"}
COMMAND_START = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*"  # environment assignments, then the tool
                           r"(ansible-playbook|ansible|ansible-galaxy|make|python3?)(?:\s|$)")
FQCN_PLAYBOOK = re.compile(r"^hpc\.stateless\.([a-z_]+)$")
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.")


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _join_continuations(lines: list[str], start: int) -> tuple[str, int]:
    text = lines[start].strip()
    index = start
    while text.endswith("\\") and index + 1 < len(lines):
        index += 1
        text = text[:-1].rstrip() + " " + lines[index].strip()
    return text, index


def extract(page: Path) -> list[Command]:
    """The commands of one page, in order."""
    name = str(page.relative_to(REPO))
    text = page.read_text(encoding="utf-8")
    commands: list[Command] = []
    for block in re.finditer(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M):
        if block.group(1) not in SHELL_LANGS:
            continue
        first_line = text.count("\n", 0, block.start(2)) + 1
        lines = block.group(2).splitlines()
        index = 0
        while index < len(lines):
            joined, last = _join_continuations(lines, index)
            joined = re.sub(r"^\$\s+", "", joined)
            if COMMAND_START.match(joined):
                commands.append(Command(name, first_line + index, joined))
            index = last + 1
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    for span in re.finditer(r"`((?:ansible-playbook|make) [^`]+)`", prose):
        commands.append(Command(name, text.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split())))
    return commands


def all_commands() -> list[Command]:
    return [command for page in PAGES for command in extract(page)]


def _argv(command: Command) -> list[str]:
    argv = shlex.split(command.text, comments=True)
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv.pop(0)
    return argv


def _spec_options() -> set[str]:
    """Every variable a playbook or role of the collection reads, as the argument specs declare them."""
    names: set[str] = set()
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}).values():
            names.update((entry or {}).get("options") or {})
    return names


def _playbook_path(arg: str) -> Path | None:
    fqcn = FQCN_PLAYBOOK.match(arg)
    if fqcn:
        return REPO / "playbooks" / f"{fqcn.group(1)}.yml"
    marker = "ansible_collections/hpc/stateless/"
    if marker in arg:
        arg = arg.split(marker, 1)[1]
    return REPO / arg


def _extra_var_names(value: str) -> list[str] | None:
    """The variable names of one ``-e`` value as ansible-playbook parses it; None for ``@file`` (the user's).

    Words that are not ``key=value`` come back as ``_raw_params``: Ansible drops them (a value with spaces
    needs quotes inside the shell's quotes, or JSON)."""
    if value.startswith("@"):
        return None
    if value.lstrip().startswith("{"):
        return list(yaml.safe_load(value))
    return list(parse_kv(value))


def check_playbook(command: Command, argv: list[str], known: set[str]) -> tuple[list[str], list[Path]]:
    errors: list[str] = []
    playbooks: list[Path] = []
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-e", "--extra-vars"):
            names = _extra_var_names(next(args))
            for name in names or []:
                if PLACEHOLDER.search(name):
                    continue
                if name == "_raw_params":
                    errors.append(f"{command}: -e: words that are not key=value, which Ansible drops (quote a value "
                                  "with spaces inside the shell's quotes: -e 'key=\"a b\"', or give JSON)")
                elif name not in known:
                    errors.append(f"{command}: -e {name}: no playbook or role of the collection reads it "
                                  "(not an option of any meta/argument_specs.yml)")
        elif arg in ("-i", "--inventory", "-l", "--limit", "-t", "--tags", "--skip-tags", "-u", "--user"):
            next(args)
        elif arg.startswith("-"):
            continue
        elif PLACEHOLDER.search(arg) and "ansible_collections/" not in arg:
            continue
        else:
            path = _playbook_path(arg)
            if path is None or not path.is_file():
                errors.append(f"{command}: playbook {arg} does not exist ({path})")
            else:
                playbooks.append(path)
    if not playbooks and not PLACEHOLDER.search(command.text) and len(argv) > 1:
        errors.append(f"{command}: names no playbook")
    return errors, playbooks


def _module_options(module: str) -> set[str] | None:
    path = REPO / "plugins" / "modules" / f"{module}.py"
    if not path.is_file():
        return None
    source = path.read_text()
    doc = re.search(r'^DOCUMENTATION\s*=\s*r?(["\']{3})(.*?)\1', source, re.S | re.M)
    assert doc, f"{path}: no DOCUMENTATION"
    return set((yaml.safe_load(doc.group(2)) or {}).get("options") or {})


def check_adhoc(command: Command, argv: list[str]) -> list[str]:
    if "-m" not in argv:
        return [f"{command}: an ad-hoc command without -m"]
    module = argv[argv.index("-m") + 1]
    if not module.startswith("hpc.stateless."):
        return []
    options = _module_options(module.rsplit(".", 1)[1])
    if options is None:
        return [f"{command}: module {module} does not exist"]
    given = shlex.split(argv[argv.index("-a") + 1]) if "-a" in argv else []
    return [f"{command}: module {module} has no option {pair.split('=', 1)[0]}"
            for pair in given if pair.split("=", 1)[0] not in options]


def _run(argv: list[str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})


def check_make(command: Command, argv: list[str]) -> list[str]:
    if PLACEHOLDER.search(command.text):
        return []
    env_vars = [arg for arg in shlex.split(command.text, comments=True) if re.match(r"^[A-Z_][A-Z0-9_]*=", arg)]
    result = _run(["make", "-n", *argv[1:], *env_vars])
    if result.returncode != 0:
        return [f"{command}: make -n fails: {(result.stderr or result.stdout).strip()[-400:]}"]
    return []


def _help_options(argv: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]


def check_help(command: Command, argv: list[str], prefix: list[str]) -> list[str]:
    result = _run([*prefix, "--help"], timeout=60)
    if result.returncode != 0:
        return [f"{command}: {' '.join(prefix)} --help fails: {result.stderr.strip()[-400:]}"]
    return [f"{command}: {' '.join(prefix)} has no option {option}"
            for option in _help_options(argv) if option not in result.stdout]


def check_python(command: Command, argv: list[str]) -> list[str]:
    script = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    if script is None or not (REPO / script).is_file():
        return [f"{command}: script {script} does not exist"]
    return check_help(command, argv, [sys.executable, script])


def check_galaxy(command: Command, argv: list[str]) -> list[str]:
    words = [arg for arg in argv[1:3] if not arg.startswith("-")]
    return check_help(command, argv, ["ansible-galaxy", *words])


def test_commands_are_found():
    """The extraction sees the commands of the pages (a broken pattern would pass every check below)."""
    texts = [command.text for command in all_commands()]
    assert any(text.startswith("make image") for text in texts)
    assert any("playbooks/plan.yml" in text for text in texts)
    assert sum(text.startswith("ansible-playbook") for text in texts) > 40


def test_every_command_runs_as_written():
    known = _spec_options()
    errors: list[str] = []
    playbooks: set[Path] = set()
    for command in all_commands():
        argv = _argv(command)
        tool = argv[0] if argv else ""
        if tool == "ansible-playbook":
            found, books = check_playbook(command, argv, known)
            errors += found
            playbooks.update(books)
        elif tool == "ansible":
            errors += check_adhoc(command, argv)
        elif tool == "make":
            errors += check_make(command, argv)
        elif tool in ("python", "python3"):
            errors += check_python(command, argv)
        elif tool == "ansible-galaxy":
            errors += check_galaxy(command, argv)
    assert playbooks, "no playbook named in the pages"
    result = _run(["ansible-playbook", "--syntax-check", *sorted(map(str, playbooks))], timeout=300)
    if result.returncode != 0:
        errors.append(f"ansible-playbook --syntax-check of the playbooks the pages name fails: "
                      f"{(result.stderr or result.stdout).strip()[-800:]}")
    assert not errors, "commands of the docs that do not run as written:\n" + "\n".join(errors)


@pytest.mark.parametrize("text, reason", [
    ("ansible-playbook playbooks/plan.yml -e since=origin/main", "-e since"),
    ("ansible-playbook playbooks/no_such.yml", "does not exist"),
    ("ansible-playbook hpc.stateless.no_such", "does not exist"),
    ("ansible-playbook playbooks/verify.yml -e '{\"hpc_stateless_verify_layer\": [\"slurm\"]}'",
     "-e hpc_stateless_verify_layer"),
    ("ansible-playbook site.yml -e hpc_stateless_unverified_ok='verify host down'", "Ansible drops"),
])
def test_a_wrong_command_is_caught(text, reason):
    """The checks fail on the mistakes they are for (the first one the README made)."""
    command = Command("page.md", 1, text)
    errors, _playbooks = check_playbook(command, _argv(command), _spec_options())
    assert any(reason in error for error in errors), errors


def test_a_wrong_module_option_and_make_target_are_caught():
    adhoc = Command("page.md", 1, "ansible localhost -m hpc.stateless.image_diff -a 'old_dir=a newdir=b'")
    assert check_adhoc(adhoc, _argv(adhoc)) == [f"{adhoc}: module hpc.stateless.image_diff has no option newdir"]
    make = Command("page.md", 1, "make no-such-target")
    assert check_make(make, _argv(make))


def test_the_docs_index_links_every_page():
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {page.name for page in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert pages - linked == set(), "pages of docs/ that docs/README.md does not link"
