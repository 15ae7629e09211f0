# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way hpc.stateless runs a short-lived external command.

Modules, module_utils, the action plugin and the connection plugins all run tools (buildah,
git, mount, rpm, mksquashfs, systemd-nspawn's helpers) through :func:`run` or a
:class:`ToolRunner` bound to one executable:

* always an argv list, never a shell string;
* ``LANG=C``/``LC_ALL=C`` so output parses the same on every host (a caller may override);
* stdin is ``/dev/null`` unless the caller passes input: a child that shares our stdin
  can leave it non-blocking (``buildah run`` with chroot isolation does), which makes the
  next ``ansible-playbook`` refuse to start;
* a timeout is an answer (rc 124), not a hang;
* a failure raises :class:`ProcessError` naming the command, its exit code and its stderr,
  plus the next step when the caller knows one.

Long-running processes that stream through pipes (the compressors of pack, the nspawn
supervisor, connection plugins) use ``subprocess.Popen`` directly with :func:`command_env`,
so they share the environment rule.

Unit tests replace the executor (:func:`set_executor`) to check argv without running it.

The facts about processes that the stages share live here too: a process's state, parent and start
time from ``/proc/<pid>/stat`` (:func:`proc_stat`; a pid with its start time names one process, even
after the pid is reused), and the id maps of our user namespace (:func:`id_map`, :func:`in_user_namespace`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable, Mapping, NamedTuple, Sequence

TIMEOUT_RC = 124
NOT_FOUND_RC = 127


def locale_env(locale: str = "C", *, language: bool = False) -> dict[str, str]:
    """The environment that makes a child speak ``locale``: ``LANG``, and ``LC_ALL``, which outranks every ``LC_*``.

    With ``language`` also ``LANGUAGE``: GNU gettext ignores it in the C locale, but Python's gettext (dnf,
    zypper's helpers) reads it first, so tools of the image run by a bootstrap need it to print English.
    """
    names = ("LANG", "LC_ALL", "LANGUAGE") if language else ("LANG", "LC_ALL")
    return dict.fromkeys(names, locale)


#: The locale of every command :func:`run` starts, so output parses the same on every host.
C_LOCALE = locale_env("C")
#: The C locale with UTF-8 characters: for the host's side of a container, whose names may be UTF-8.
UTF8_LOCALE = locale_env("C.UTF-8")


class ProcessError(Exception):
    """A command failed; ``str()`` carries the command, its exit code, stderr and the next step."""

    def __init__(self, argv: Sequence[str], rc: int, stderr: str, hint: str = "") -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stderr = (stderr or "").strip()
        self.hint = hint
        message = f"{' '.join(self.argv)} failed (rc={rc})"
        if self.stderr:
            message += f": {self.stderr}"
        if hint:
            message += f" - {hint}"
        super().__init__(message)


class ToolMissing(ProcessError):
    """The executable is not installed; the message says how to install it."""

    def __init__(self, name: str, install_hint: str) -> None:
        super().__init__([name], NOT_FOUND_RC, f"{name} is not installed", install_hint)
        self.args = (f"{name} is not installed on this host; {install_hint}",)

    def __str__(self) -> str:
        return self.args[0]


class Result:
    """What a finished command returned."""

    __slots__ = ("argv", "rc", "stdout", "stderr")

    def __init__(self, argv: Sequence[str], rc: int, stdout: str, stderr: str) -> None:
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def __iter__(self):
        """``rc, out, err = run(...)`` like ``AnsibleModule.run_command``."""
        return iter((self.rc, self.stdout, self.stderr))

    def __repr__(self) -> str:
        return f"Result(argv={self.argv!r}, rc={self.rc})"


def command_env(env: Mapping[str, str] | None = None, inherit: bool = True) -> dict[str, str]:
    """The environment of a child: ours (or only PATH when ``inherit`` is False), C locale, then ``env``."""
    base = dict(os.environ) if inherit else {"PATH": os.environ.get("PATH", os.defpath)}
    return {**base, **C_LOCALE, **(env or {})}


Executor = Callable[..., Result]


def _subprocess_executor(argv: list[str], *, env: dict[str, str], timeout: float | None,
                         input: str | bytes | None, cwd: str | None, text: bool) -> Result:
    try:
        proc = subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, check=False, capture_output=True,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL,
                              text=text, errors="surrogateescape" if text else None)
    except subprocess.TimeoutExpired:
        empty: str | bytes = "" if text else b""
        return Result(argv, TIMEOUT_RC, empty, f"{argv[0]} timed out after {timeout:.0f}s")
    except OSError as exc:
        empty = "" if text else b""
        return Result(argv, NOT_FOUND_RC, empty, f"{argv[0]}: {exc.strerror or exc}")
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


_executor: Executor = _subprocess_executor


def set_executor(executor: Executor | None) -> Executor:
    """Replace how commands are executed (unit tests); None restores the real one. Returns the old one."""
    global _executor  # pylint: disable=global-statement
    old = _executor
    _executor = executor or _subprocess_executor
    return old


def run(argv: Sequence[str], *, check: bool = True, env: Mapping[str, str] | None = None,
        inherit_env: bool = True, timeout: float | None = None, input: str | bytes | None = None,
        cwd: str | None = None, text: bool = True, hint: str = "") -> Result:
    """Run ``argv`` to completion and return its :class:`Result`.

    With ``check`` (the default) a non-zero exit raises :class:`ProcessError` carrying ``hint``.
    """
    argv = [os.fspath(a) for a in argv]
    result = _executor(argv, env=command_env(env, inherit_env), timeout=timeout, input=input, cwd=cwd, text=text)
    if check and result.rc != 0:
        stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode("utf-8", "replace")
        if not stderr.strip():
            stdout = result.stdout if isinstance(result.stdout, str) else result.stdout.decode("utf-8", "replace")
            stderr = stdout
        raise ProcessError(argv, result.rc, stderr, hint)
    return result


def which(name: str, install_hint: str = "") -> str:
    """Absolute path of executable ``name`` (or ``name`` itself when it is an executable path).

    Raises :class:`ToolMissing` with ``install_hint`` when it cannot be found.
    """
    if os.path.isabs(name):
        if os.access(name, os.X_OK) and os.path.isfile(name):
            return name
    else:
        found = shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")
        if found:
            return found
    raise ToolMissing(name, install_hint or f"install the package that provides {name}")


class ToolRunner:
    """One executable with the arguments and environment every call of it shares.

    ``ToolRunner("buildah", install_hint=..., global_args=["--root", r], env={...})("images", "--json")``
    The executable is looked up on first use, so building a runner never fails.
    """

    def __init__(self, executable: str, *, install_hint: str = "", global_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, timeout: float | None = None) -> None:
        self.name = executable
        self.install_hint = install_hint
        self.global_args = list(global_args)
        self.env = dict(env or {})
        self.timeout = timeout
        self._path: str | None = None

    @property
    def path(self) -> str:
        if self._path is None:
            self._path = which(self.name, self.install_hint)
        return self._path

    def argv(self, *args: str) -> list[str]:
        """The full command line of ``args``, without running it."""
        return [self.path, *self.global_args, *args]

    def __call__(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, input: str | bytes | None = None, cwd: str | None = None,
                 text: bool = True, hint: str = "") -> Result:
        return run(self.argv(*args), check=check, env={**self.env, **(env or {})},
                   timeout=timeout if timeout is not None else self.timeout, input=input, cwd=cwd,
                   text=text, hint=hint)


# -- process facts -------------------------------------------------------------------------------
def playbook_pid() -> int:
    """The ``ansible-playbook`` process: the parent of a task worker (a multiprocessing child), else this process.

    What lives on between tasks (a buildah agent's holder, an nspawn session) ends when it does.
    """
    import multiprocessing  # pylint: disable=import-outside-toplevel  # only the connections ask

    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid else os.getpid()


#: States of ``/proc/<pid>/stat`` of a process that ended: a zombie (not yet reaped) or dead.
ENDED_STATES = frozenset({"Z", "X"})


class ProcStat(NamedTuple):
    """What hpc.stateless reads of ``/proc/<pid>/stat``: ``state`` (R, S, D, T, Z, ...), the parent's pid,
    and the start time (clock ticks after boot, as text: compared, never computed with)."""

    state: str
    ppid: int
    start_time: str

    @property
    def running(self) -> bool:
        """False for a zombie or a dead process: killed counts as gone before it is reaped."""
        return self.state not in ENDED_STATES


def parse_proc_stat(line: bytes) -> ProcStat:
    """The :class:`ProcStat` of one ``/proc/<pid>/stat`` line; ValueError when it is not one.

    The command name (field 2) may hold spaces and parentheses: the fields after its last ``)`` are fixed.
    """
    name_end = line.rfind(b")")
    fields = line[name_end + 2:].split() if name_end >= 0 else []
    if len(fields) < 20:
        raise ValueError(f"not a /proc/<pid>/stat line: {line[:80]!r}")
    return ProcStat(fields[0].decode("ascii", "replace"), int(fields[1]), fields[19].decode("ascii", "replace"))


def proc_stat(pid: int, proc: str = "/proc") -> ProcStat | None:
    """The :class:`ProcStat` of ``pid``, None when no such process exists (or ``proc`` does not tell)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), "rb") as handle:
            return parse_proc_stat(handle.read())
    except (OSError, ValueError):
        return None


#: The id map of the initial user namespace: every id to itself.
INITIAL_ID_MAP = [(0, 0, 4294967295)]


def parse_id_map(text: str) -> list[tuple[int, int, int]]:
    """The ``(inside, outside, count)`` lines of a ``/proc/<pid>/uid_map`` or ``gid_map`` text."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if fields:
            if len(fields) != 3:
                raise ValueError(f"not an id map line: {line!r}")
            entries.append((int(fields[0]), int(fields[1]), int(fields[2])))
    return entries


def id_map(kind: str = "uid", proc: str = "/proc/self") -> list[tuple[int, int, int]]:
    """The ``(inside, outside, count)`` lines of ``<proc>/uid_map`` (``kind`` uid) or ``gid_map`` (gid).

    OSError when it cannot be read, ValueError when it is not a map.
    """
    with open(os.path.join(proc, f"{kind}_map"), encoding="ascii") as handle:
        return parse_id_map(handle.read())


def in_user_namespace(proc: str = "/proc/self") -> bool:
    """True inside a user namespace (``buildah unshare``, a rootless container): its uid map is not the host's."""
    return id_map("uid", proc) != INITIAL_ID_MAP


def outside_id(inside: int, entries: Sequence[tuple[int, int, int]]) -> int | None:
    """The id that ``inside`` (an id of the namespace whose map is ``entries``) is outside it; None if unmapped."""
    for first, outside, count in entries:
        if first <= inside < first + count:
            return outside + inside - first
    return None
