# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The project directory: where every default output of the stages goes, whose roles/ is searched
and whose git repository names the version.

The one rule, used by the plan action and the hpc.stateless.project_dir lookup alike:

1. ``hpc_stateless_project_dir`` when it is set;
2. else the directory of the first playbook file named on the ansible-playbook command line (the
   site's own site.yml, even when it imports our playbooks by FQCN, where Ansible's playbook_dir
   is the collection's playbooks/ directory) unless that file lies inside an installed collection;
3. else ``playbook_dir`` unless it lies inside an installed collection;
4. else the current directory (``ansible-playbook hpc.stateless.site`` run by its FQCN).

A playbook directory named ``playbooks`` stands for its parent, so ``ansible-playbook
playbooks/pack.yml`` of a checkout writes where ``ansible-playbook site.yml`` does; unless it is a
project root itself (holds ``.git`` or ``ansible.cfg``: a site repository cloned as ``playbooks``).
A relative ``hpc_stateless_project_dir`` is taken from the current directory.
"""

from __future__ import annotations

import os
from typing import Iterable

PLAYBOOKS_DIR_NAME = "playbooks"
# A directory holding one of these is a project root even when it is named ``playbooks``.
PROJECT_ROOT_MARKERS = (".git", "ansible.cfg")


def _project_of(directory: str) -> str:
    directory = os.path.abspath(directory)
    if os.path.basename(directory) != PLAYBOOKS_DIR_NAME:
        return directory
    if any(os.path.lexists(os.path.join(directory, marker)) for marker in PROJECT_ROOT_MARKERS):
        return directory
    return os.path.dirname(directory)


def inside_collection(path: str) -> bool:
    """True when ``path`` lies in ``.../ansible_collections/<namespace>/<name>/``."""
    parts = os.path.abspath(path).split(os.sep)
    return "ansible_collections" in parts[:-2]


def command_line_playbook_dir(playbooks: Iterable[str], cwd: str) -> str | None:
    """Directory of the first playbook file named on the command line (None for FQCNs or none, and
    for a file inside an installed collection: that is never a project)."""
    for entry in playbooks:
        if not isinstance(entry, str) or not entry:
            continue
        path = os.path.join(cwd, os.path.expanduser(entry))
        if os.path.isfile(path):
            directory = os.path.dirname(os.path.abspath(path))
            return None if inside_collection(directory) else directory
    return None


def project_dir(override: str | None, playbooks: Iterable[str], playbook_dir: str | None, cwd: str) -> str:
    """The project directory by the rule of this module's docstring (an absolute path)."""
    if override:
        return os.path.abspath(os.path.join(cwd, os.path.expanduser(override)))
    top = command_line_playbook_dir(playbooks, cwd)
    if top is not None:
        return _project_of(top)
    if playbook_dir and not inside_collection(playbook_dir):
        return _project_of(playbook_dir)
    return os.path.abspath(cwd)


def role_search_paths(project: str, playbooks: Iterable[str], playbook_dir: str | None, cwd: str) -> list[str]:
    """The ``roles/`` directories a layer's plain role names are looked up in, before ``roles_path``:
    beside the running play's playbook (Ansible's own first place, unless it is a collection's),
    beside the top-level playbook, then the project's."""
    found: list[str] = []
    top = command_line_playbook_dir(playbooks, cwd)
    for directory in (playbook_dir if playbook_dir and not inside_collection(playbook_dir) else None, top, project):
        if directory:
            roles = os.path.join(os.path.abspath(directory), "roles")
            if roles not in found:
                found.append(roles)
    return found
