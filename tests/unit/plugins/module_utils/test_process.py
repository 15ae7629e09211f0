# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one process runner: real commands, C locale, stdin closed, timeouts and errors that say what failed."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process as proc


def test_runs_an_argv_and_returns_its_output():
    result = proc.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert (result.rc, result.stdout, result.stderr) == (0, "out\n", "err\n")
    rc, out, _err = result
    assert (rc, out) == (0, "out\n")


def test_c_locale_unless_the_caller_overrides():
    code = "import os; print(os.environ['LANG'], os.environ['LC_ALL'], os.environ.get('X'))"
    assert proc.run([sys.executable, "-c", code]).stdout.split() == ["C", "C", "None"]
    assert proc.run([sys.executable, "-c", code], env={"LANG": "C.UTF-8", "X": "1"}).stdout.split() == \
        ["C.UTF-8", "C", "1"]


def test_without_inherit_only_path_and_locale_reach_the_child(monkeypatch):
    monkeypatch.setenv("HPC_STATELESS_SECRET_OF_THE_HOST", "x")
    code = "import os; print(sorted(os.environ))"
    names = eval(proc.run([sys.executable, "-c", code], inherit_env=False).stdout)  # noqa: S307 (our own output)
    assert "HPC_STATELESS_SECRET_OF_THE_HOST" not in names
    assert {"PATH", "LANG", "LC_ALL"} <= set(names)


def test_stdin_is_dev_null_unless_input_is_given():
    code = "import os, sys; print(os.path.realpath('/proc/self/fd/0')); print(sys.stdin.read())"
    assert proc.run([sys.executable, "-c", code]).stdout.splitlines()[0] == os.devnull
    assert proc.run([sys.executable, "-c", code], input="fed").stdout.splitlines()[-1] == "fed"


def test_a_failure_raises_with_command_rc_stderr_and_hint():
    with pytest.raises(proc.ProcessError) as err:
        proc.run([sys.executable, "-c", "import sys; sys.exit('broken disk')"], hint="free some space")
    assert err.value.rc == 1
    assert "broken disk" in str(err.value) and "(rc=1)" in str(err.value)
    assert str(err.value).endswith("- free some space")


def test_stdout_stands_in_for_an_empty_stderr():
    with pytest.raises(proc.ProcessError, match="said it on stdout"):
        proc.run([sys.executable, "-c", "print('said it on stdout'); raise SystemExit(3)"])


def test_check_false_returns_the_failure():
    assert proc.run([sys.executable, "-c", "raise SystemExit(7)"], check=False).rc == 7


def test_a_timeout_is_rc_124_not_a_hang():
    result = proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5, check=False)
    assert result.rc == proc.TIMEOUT_RC and "timed out" in result.stderr
    with pytest.raises(proc.ProcessError, match="timed out"):
        proc.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_a_missing_executable_is_rc_127():
    result = proc.run(["/nonexistent/hpc-stateless-tool"], check=False)
    assert result.rc == proc.NOT_FOUND_RC


def test_which_names_the_tool_and_how_to_install_it():
    assert proc.which("sh").endswith("/sh")
    with pytest.raises(proc.ToolMissing) as err:
        proc.which("hpc-stateless-no-such-tool", "apt-get install hpc-stateless-no-such-tool")
    assert str(err.value) == ("hpc-stateless-no-such-tool is not installed on this host; "
                              "apt-get install hpc-stateless-no-such-tool")


def test_tool_runner_prepends_global_args_and_merges_env():
    seen = []

    def fake(argv, **kwargs):
        seen.append((argv, kwargs["env"]["BUILDAH_ISOLATION"], kwargs["env"]["TMPDIR"]))
        return proc.Result(argv, 0, "ok", "")

    old = proc.set_executor(fake)
    try:
        runner = proc.ToolRunner(sys.executable, global_args=["--root", "/r"], env={"BUILDAH_ISOLATION": "chroot"})
        assert runner("images", env={"TMPDIR": "/t"}).stdout == "ok"
    finally:
        proc.set_executor(old)
    assert seen == [([sys.executable, "--root", "/r", "images"], "chroot", "/t")]
    assert proc.run([sys.executable, "-c", "print(1)"]).stdout == "1\n"  # the real executor is back


def test_tool_runner_looks_the_executable_up_only_when_used():
    runner = proc.ToolRunner("hpc-stateless-no-such-tool", install_hint="apt-get install it")
    with pytest.raises(proc.ToolMissing, match="apt-get install it"):
        runner("--version")
