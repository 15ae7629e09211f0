# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One source of truth for role variables: meta/argument_specs.yml.

defaults/main.yml must hold exactly the documented variables with the documented defaults,
the README's variable table is generated from the spec, and every OS family defines the same
internal variables. Regenerate the README tables with:

    python tests/unit/test_role_docs.py --write

The settings role hpc_stateless (the collection's playbook variables, not a role for images) is
held to the spec rules too; the image-role rules do not fit it and are not applied: it has no
per-OS-family vars (it runs on the controller, never inside an image), no task files per concern
with tags (its one task is the stage guard), and no Molecule scenario (the playbooks' integration
tests exercise it). Its unset optional settings are null and read as "unset" in the table.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"
ROLES = ["base", "hsn", "compute", "slurm"]
#: Roles for the hosts that serve the nodes, not for images: the spec and OS-family rules, no image tags or Molecule.
SERVER_ROLES = ["boot_server"]
#: The collection's settings role: the spec rules only (see the module docstring).
SETTINGS_ROLE = "hpc_stateless"
DOCUMENTED_ROLES = [*ROLES, *SERVER_ROLES, SETTINGS_ROLE]
#: What the table says for an option without a default, per role.
UNSET = {SETTINGS_ROLE: "unset"}
FAMILIES = ["Debian", "RedHat"]
BEGIN, END = "<!-- BEGIN VARIABLES (generated from meta/argument_specs.yml) -->", "<!-- END VARIABLES -->"


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def spec_options(role: str) -> dict[str, dict[str, Any]]:
    return _load(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else " ".join(value) if isinstance(value, list) else str(value)
    # Ansible doc markup -> Markdown
    text = re.sub(r"[CVOMP]\(([^)]*)\)", r"`\1`", text)
    return text.replace("|", "\\|").replace("\n", " ")


def _default(option: dict[str, Any], unset: str | None = None) -> str:
    if "default" not in option:
        if unset is not None:
            return unset
        return "distribution default" if option.get("type") in ("list", "str", "dict") else "-"
    value = option["default"]
    if isinstance(value, str) and "{{" in value:
        rendered = value  # a template (the settings role): as written, not YAML-quoted
    else:
        rendered = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
        rendered = rendered.removesuffix("\n...").removesuffix("...").strip()
    if len(rendered) > 60:
        return "see defaults/main.yml"
    return f"`{rendered}`".replace("|", "\\|")


def variable_table(role: str) -> str:
    """The README's variable table of ``role``."""
    rows = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, option in spec_options(role).items():
        kind = option.get("type", "str")
        if kind == "list" and option.get("elements"):
            kind = f"list of {option['elements']}"
        if option.get("choices"):
            kind += " (" + ", ".join(f"`{c}`" for c in option["choices"]) + ")"
        description = _text(option.get("description", ""))
        if option.get("options"):
            description += " Keys: " + ", ".join(
                f"`{key}`{' (required)' if sub.get('required') else ''}" for key, sub in option["options"].items())
        rows.append(f"| `{name}` | {kind} | {_default(option, UNSET.get(role))} | {description} |")
    return "\n".join(rows)


def readme_with_table(role: str) -> str:
    readme = (ROLES_DIR / role / "README.md").read_text(encoding="utf-8")
    if BEGIN not in readme or END not in readme:
        raise AssertionError(f"roles/{role}/README.md lacks the generated-table markers {BEGIN!r} ... {END!r}")
    head, rest = readme.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{variable_table(role)}\n{END}{tail}"


@pytest.mark.parametrize("role", DOCUMENTED_ROLES)
def test_defaults_match_argument_specs(role):
    options = spec_options(role)
    defaults = _load(ROLES_DIR / role / "defaults" / "main.yml")
    assert set(defaults) == set(options), (
        f"roles/{role}: undocumented defaults {sorted(set(defaults) - set(options))}, "
        f"documented without a default {sorted(set(options) - set(defaults))}")
    for name, option in options.items():
        expected = option.get("default")
        assert defaults[name] == expected, f"roles/{role}: {name} is {defaults[name]!r} in defaults, {expected!r} in specs"


@pytest.mark.parametrize("role", DOCUMENTED_ROLES)
def test_variables_are_prefixed_and_documented(role):
    for name, option in spec_options(role).items():
        assert name.startswith(f"{role}_"), f"roles/{role}: {name} lacks the role prefix"
        assert option.get("description"), f"roles/{role}: {name} has no description"
        assert option.get("type"), f"roles/{role}: {name} has no type"


@pytest.mark.parametrize("role", [*ROLES, *SERVER_ROLES])
def test_os_family_vars_define_the_same_names(role):
    names = {family: set(_load(ROLES_DIR / role / "vars" / f"{family}.yml")) for family in FAMILIES}
    assert names["Debian"] == names["RedHat"], f"roles/{role}: vars differ: {names['Debian'] ^ names['RedHat']}"
    assert all(name.startswith(f"__{role}_") for name in names["Debian"])


@pytest.mark.parametrize("role", [*ROLES, *SERVER_ROLES])
def test_internal_variables_are_defined_for_every_family(role):
    defined = set(_load(ROLES_DIR / role / "vars" / "Debian.yml"))
    used: set[str] = set()
    for path in (ROLES_DIR / role).rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".j2") and "vars" not in path.relative_to(ROLES_DIR / role).parts[:1]:
            used |= set(re.findall(rf"\b(__{role}_[a-z0-9_]+)", path.read_text(encoding="utf-8")))
    used |= set(re.findall(rf"\b(__{role}_[a-z0-9_]+)", (ROLES_DIR / role / "vars" / "main.yml").read_text(encoding="utf-8")))
    assert used <= defined, f"roles/{role}: used but not defined per family: {sorted(used - defined)}"


@pytest.mark.parametrize("role", DOCUMENTED_ROLES)
def test_readme_variable_table_is_current(role):
    readme = (ROLES_DIR / role / "README.md").read_text(encoding="utf-8")
    assert readme == readme_with_table(role), (
        f"roles/{role}/README.md: the variable table is out of date; run python tests/unit/test_role_docs.py --write")


def _task_tags(tasks: Any) -> set[str]:
    """Tags of a task list, blocks included."""
    found: set[str] = set()
    for task in tasks or []:
        tags = task.get("tags", [])
        found |= {tags} if isinstance(tags, str) else set(tags)
        for key in ("block", "rescue", "always"):
            found |= _task_tags(task.get(key))
    return found


def role_tags(role: str) -> set[str]:
    """Every tag set in the role's task files."""
    found: set[str] = set()
    for path in sorted((ROLES_DIR / role / "tasks").rglob("*.yml")):
        found |= _task_tags(_load(path))
    return found


def documented_tags(role: str) -> set[str]:
    """The tags of the README's concern table (``| Concern | Tag | Result |``)."""
    lines = (ROLES_DIR / role / "README.md").read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"\|\s*Concern\s*\|\s*Tag\s*\|", line)), None)
    assert start is not None, f"roles/{role}/README.md has no '| Concern | Tag | Result |' table"
    tags: set[str] = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        tags |= set(re.findall(r"`([^`]+)`", line.split("|")[2]))
    return tags


@pytest.mark.parametrize("role", ROLES)
def test_every_documented_tag_exists(role):
    """``--tags <documented tag>`` must select the concern, not silently skip it."""
    documented = documented_tags(role)
    assert documented, f"roles/{role}/README.md documents no tag"
    missing = documented - role_tags(role)
    assert not missing, f"roles/{role}: README documents tags no task carries: {sorted(missing)}"


@pytest.mark.parametrize("role", ROLES)
def test_tags_carry_the_role_prefix(role):
    wrong = sorted(t for t in role_tags(role) if t != "always" and not t.startswith(f"{role}_"))
    assert not wrong, f"roles/{role}: tags without the {role}_ prefix: {wrong}"


def test_table_renders_types_defaults_and_choices():
    table = variable_table("base")
    assert "| `base_journald_storage` | str (`volatile`, `persistent`, `auto`, `none`) | `volatile` |" in table
    assert "| `base_kernel_packages` | list of str | distribution default |" in table


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        for name in DOCUMENTED_ROLES:
            (ROLES_DIR / name / "README.md").write_text(readme_with_table(name), encoding="utf-8")
    else:
        sys.exit("usage: python tests/unit/test_role_docs.py --write")
