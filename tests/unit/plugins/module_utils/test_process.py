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


# -- the locale every child speaks -----------------------------------------------------------------

def test_locale_env_sets_lang_and_lc_all_and_on_request_language():
    assert proc.C_LOCALE == proc.locale_env() == {"LANG": "C", "LC_ALL": "C"}
    assert proc.UTF8_LOCALE == {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    assert proc.locale_env(language=True) == {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}


def test_language_replaces_the_hosts_message_language(monkeypatch):
    """Python's gettext reads LANGUAGE before LC_ALL: a host's LANGUAGE reaches dnf unless the caller sets it."""
    monkeypatch.setenv("LANGUAGE", "de")
    ask = "import os; print(os.environ['LC_ALL'], os.environ['LANGUAGE'])"
    assert proc.run([sys.executable, "-c", ask]).stdout == "C de\n"
    assert proc.run([sys.executable, "-c", ask], env=proc.locale_env(language=True)).stdout == "C C\n"


# -- /proc/<pid>/stat -----------------------------------------------------------------------------

def test_proc_stat_of_this_process_from_the_real_proc():
    info = proc.proc_stat(os.getpid())
    assert info is not None and info.running and info.state in ("R", "S")
    assert info.ppid == os.getppid()
    assert info.start_time.isdigit() and info.start_time == proc.proc_stat(os.getpid()).start_time


def test_a_stopped_child_a_zombie_and_a_reaped_pid():
    import signal
    import subprocess
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = proc.proc_stat(child.pid)
        assert started.ppid == os.getpid() and started.start_time != proc.proc_stat(os.getpid()).start_time
        os.kill(child.pid, signal.SIGSTOP)
        for _attempt in range(100):
            if proc.proc_stat(child.pid).state == "T":
                break
            time.sleep(0.02)
        assert proc.proc_stat(child.pid).state == "T" and proc.proc_stat(child.pid).running
        child.kill()
        for _attempt in range(100):  # killed, not yet reaped: a zombie, which counts as gone
            if proc.proc_stat(child.pid).state == "Z":
                break
            time.sleep(0.02)
        zombie = proc.proc_stat(child.pid)
        assert zombie.state == "Z" and not zombie.running and zombie.start_time == started.start_time
    finally:
        child.kill()
        child.wait()
    assert proc.proc_stat(child.pid) is None


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields():
    fields = " ".join(["S", "41"] + [str(n) for n in range(2, 19)] + ["987654"] + ["0"] * 30)
    info = proc.parse_proc_stat(f"1234 (evil) S 1 (x) ) {fields}\n".encode())
    assert info == proc.ProcStat("S", 41, "987654")


@pytest.mark.parametrize("line", [b"", b"1234 (truncated) S 1 2", b"no parenthesis at all S 1 2 3 4 5 6 7 8 9 10"])
def test_what_is_no_stat_line_is_refused(line):
    with pytest.raises(ValueError, match="not a /proc/<pid>/stat line"):
        proc.parse_proc_stat(line)


def test_an_unreadable_or_broken_stat_is_no_process(tmp_path):
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_bytes(b"77 (x) S")
    assert proc.proc_stat(77, str(tmp_path)) is None
    assert proc.proc_stat(78, str(tmp_path)) is None


# -- user namespaces ---------------------------------------------------------------------------------

def test_the_id_maps_of_this_process_from_the_real_proc():
    uid_map = proc.id_map("uid")
    assert uid_map and all(len(entry) == 3 for entry in uid_map)
    assert proc.outside_id(os.getuid(), uid_map) is not None
    assert proc.in_user_namespace() == (uid_map != proc.INITIAL_ID_MAP)


def test_a_namespace_map_is_told_from_the_host_map(tmp_path):
    host, unshared = tmp_path / "host", tmp_path / "unshared"
    host.mkdir()
    unshared.mkdir()
    (host / "uid_map").write_text("         0          0 4294967295\n")
    (unshared / "uid_map").write_text("         0       1000          1\n         1     100000      65536\n")
    (unshared / "gid_map").write_text("         0       1000          1\n")
    assert not proc.in_user_namespace(str(host))
    assert proc.in_user_namespace(str(unshared))
    assert proc.id_map("gid", str(unshared)) == [(0, 1000, 1)]
    entries = proc.id_map("uid", str(unshared))
    assert [proc.outside_id(uid, entries) for uid in (0, 1, 65536, 65537)] == [1000, 100000, 165535, None]


def test_a_map_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not an id map line"):
        proc.parse_id_map("0 0\n")
    assert proc.parse_id_map("") == []


def test_playbook_pid_is_this_process_outside_a_worker_and_the_parent_inside_one():
    import multiprocessing

    assert proc.playbook_pid() == os.getpid()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(proc.playbook_pid) == os.getpid()
