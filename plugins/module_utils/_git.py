# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how git is called by the plan action (labels, change planning).

Runs on the controller (the plan action plugin) through the one process runner
(:mod:`_process`): argv lists, ``LANG=C``, no shell, timeouts as answers.
Every failure raises :class:`GitError` naming the repository and the revision or file.
"""

from __future__ import annotations

import os

from ansible_collections.hpc.stateless.plugins.module_utils import _process

_INSTALL_HINT = "install it (apt-get install git)"
_GIT_ENV = {"GIT_PAGER": "cat"}


class GitError(Exception):
    """A git command failed or a revision/file is unknown; ``str()`` says which and what to do."""


def describe_work_tree(path: str, executable: str = "git") -> str:
    """``git describe --always --dirty`` of the work tree at ``path`` (a label for images), or ''
    when ``path`` is not in a git work tree or git is missing: a build outside git still runs."""
    result = _process.run([executable, "-C", path, "describe", "--always", "--dirty", "--abbrev=12"],
                          check=False, env=_GIT_ENV, timeout=30)
    return result.stdout.strip() if result.rc == 0 else ""


def version_facts(path: str, inputs: list[str], executable: str = "git") -> tuple[str, str]:
    """``(describe, inexact)`` for the default version (_contract/versions.py): ``git describe --always``
    of HEAD at ``path`` ('' outside git), and '' when HEAD's tree is what the work tree builds from, or why
    it is not: a modified, staged or untracked file, an input path of ``inputs`` (inventory sources, role
    directories) outside the repository, or an ignored file below one of them."""
    base = [executable, "-C", path]
    described = _process.run([*base, "describe", "--always", "--abbrev=12"], check=False, env=_GIT_ENV, timeout=30)
    if described.rc != 0:
        return "", "the project is not a git work tree"
    describe = described.stdout.strip()
    top = _process.run([*base, "rev-parse", "--show-toplevel"], check=False, env=_GIT_ENV, timeout=30)
    root = os.path.realpath(top.stdout.strip())
    status = _process.run([*base, "status", "--porcelain", "--untracked-files=all"], check=False, env=_GIT_ENV,
                          timeout=120)
    if status.rc != 0:
        return describe, f"git status failed: {status.stderr.strip()}"
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return describe, f"the work tree differs from {describe} ({', '.join(changed[:3])}{more})"
    inside = []
    for item in sorted({os.path.realpath(i) for i in inputs if i}):
        if item != root and not item.startswith(root + os.sep):
            return describe, f"{item} is outside the repository {root}"
        inside.append(os.path.relpath(item, root))
    if inside:
        ignored = _process.run([*base, "-C", root, "ls-files", "--others", "--ignored", "--exclude-standard", "--",
                                *inside], check=False, env=_GIT_ENV, timeout=120)
        names = [n for n in ignored.stdout.splitlines() if n]
        if ignored.rc != 0 or names:
            return describe, f"ignored files are inputs of the image ({', '.join(names[:3]) or ignored.stderr.strip()})"
    return describe, ""


class GitRepository:
    """Read-only access to one work tree and its history."""

    def __init__(self, path: str, executable: str = "git") -> None:
        self.executable = executable
        self.root = os.path.realpath(self._toplevel(path))
        self._trees: dict[tuple[str, str], list[str]] = {}

    def _run(self, *args: str, cwd: str | None = None, what: str = "") -> bytes:
        try:
            executable = _process.which(self.executable, _INSTALL_HINT)
        except _process.ToolMissing:
            raise GitError(f"git is not installed on the controller; {_INSTALL_HINT}") from None
        argv = [executable, "-C", cwd or self.root, *args]
        result = _process.run(argv, check=False, env=_GIT_ENV, timeout=120, text=False)
        if result.rc == _process.TIMEOUT_RC:
            raise GitError(f"{' '.join(argv)} timed out")
        if result.rc != 0:
            detail = result.stderr.decode("utf-8", "replace").strip()
            raise GitError(f"{what or ' '.join(argv)}: {detail}")
        return result.stdout

    def _toplevel(self, path: str) -> str:
        if not os.path.isdir(path):
            raise GitError(f"repository directory {path} does not exist")
        return self._run("rev-parse", "--show-toplevel", cwd=path,
                         what=f"{path} is not inside a git work tree").decode().strip()

    def resolve(self, revision: str) -> str:
        """Full commit id of ``revision``; :class:`GitError` names it when git does not know it."""
        if not revision or revision.startswith("-"):
            raise GitError(f"invalid git revision {revision!r}")
        try:
            return self._run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}",
                             what=f"unknown git revision {revision!r}").decode().strip()
        except GitError:
            raise GitError(f"unknown git revision {revision!r} in {self.root}: fetch it "
                           f"(git fetch origin) or name an existing branch, tag or commit") from None

    def merge_base(self, first: str, second: str = "HEAD") -> str:
        """Common ancestor of two commits (what a merge request is compared against)."""
        return self._run("merge-base", first, second,
                         what=f"no common ancestor of {first} and {second}").decode().strip()

    def changed_files(self, base: str) -> list[str]:
        """Paths that differ between commit ``base`` and the work tree, untracked files included.

        Renames are reported as a deletion and an addition (both paths).
        """
        diff = self._run("diff", "--name-only", "--no-renames", "-z", base, "--",
                         what=f"git diff against {base}")
        untracked = self._run("ls-files", "--others", "--exclude-standard", "-z", what="git ls-files")
        names = {n for n in (diff + untracked).decode("utf-8", "surrogateescape").split("\0") if n}
        return sorted(names)

    def show(self, revision: str, path: str) -> bytes | None:
        """Content of ``path`` at ``revision``, or None when the file does not exist there."""
        if path not in self.tree(revision, os.path.dirname(path)):
            return None
        return self._run("show", f"{revision}:{path}", what=f"{path} at revision {revision}")

    def tree(self, revision: str, directory: str) -> list[str]:
        """Files below ``directory`` (repository-relative, '' for all) at ``revision``."""
        key = (revision, directory)
        if key not in self._trees:
            args = ["ls-tree", "-r", "--name-only", "-z", revision]
            if directory:
                args += ["--", directory.rstrip("/") + "/"]
            out = self._run(*args, what=f"list {directory or '/'} at revision {revision}")
            self._trees[key] = sorted(n for n in out.decode("utf-8", "surrogateescape").split("\0") if n)
        return self._trees[key]


class GitRevisionReader:
    """Files at a base commit (through git) and in the work tree (from disk).

    Implements ``change_plan.RevisionReader``; ``base_label`` says which revision the
    base is, for messages (for example ``origin/main (3f2a9c0d1e4b)``). Without a base
    commit (both None) only the work tree is read.
    """

    def __init__(self, repository: GitRepository, base_commit: str | None, base_label: str | None) -> None:
        self.repository = repository
        self.base_commit = base_commit
        self.base_label = base_label

    @staticmethod
    def _decode(data: bytes, path: str, where: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise GitError(f"{path} at {where}: not UTF-8 text") from None

    def base(self, path: str) -> str | None:
        if self.base_commit is None:
            return None
        data = self.repository.show(self.base_commit, path)
        return None if data is None else self._decode(data, path, self.base_label)

    def head(self, path: str) -> str | None:
        full = os.path.join(self.repository.root, path)
        if not os.path.isfile(full):
            return None
        with open(full, "rb") as handle:
            return self._decode(handle.read(), path, "the work tree")

    def base_files(self, directory: str) -> list[str]:
        if self.base_commit is None:
            return []
        return self.repository.tree(self.base_commit, directory)

    def head_files(self, directory: str) -> list[str]:
        top = os.path.join(self.repository.root, directory)
        found = []
        for root, dirs, files in os.walk(top):
            dirs.sort()
            for name in files:
                found.append(os.path.relpath(os.path.join(root, name), self.repository.root).replace(os.sep, "/"))
        return sorted(found)
