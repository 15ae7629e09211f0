"""The agent of the buildah connection and its frames, run on the host.

The agent's code is plain Python meant to run inside a working container through ``buildah run``;
here it runs on the host (its functions directly, and as a ``python3 -c`` process behind a real
holder in ``test_build_holder.py``). ``buildah run`` itself is exercised in
tests/integration/test_buildah_agent.py.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent import agent


def frames(data: bytes) -> list:
    read = io.BytesIO(data).read
    found = []
    while True:
        frame = agent.read_frame(read)
        if frame is None:
            return found
        found.append(frame)


def test_a_frame_carries_header_and_body_and_a_clean_end_is_none():
    path = os.fsdecode(b"/tmp/caf\xe9 \xff")  # not UTF-8: travels surrogate-escaped
    data = agent.encode({"id": 7, "op": "put", "path": path}, b"\x00body") + agent.encode({"id": 8})
    assert frames(data) == [({"id": 7, "op": "put", "path": path}, b"\x00body"), ({"id": 8}, b"")]
    assert os.fsencode(frames(data)[0][0]["path"]) == b"/tmp/caf\xe9 \xff"


@pytest.mark.parametrize("cut", [3, 9, -1])
def test_a_stream_that_ends_inside_a_frame_is_an_error(cut):
    data = agent.encode({"id": 1}, b"body")
    with pytest.raises(agent.ProtocolError):
        agent.read_frame(io.BytesIO(data[:cut]).read)


def test_a_header_length_out_of_step_is_refused():
    with pytest.raises(agent.ProtocolError, match="out of step"):
        agent.read_frame(io.BytesIO(agent.HEAD.pack(agent.MAX_HEADER + 1, 0)).read)


def test_exec_request_and_result_keep_command_input_and_streams_apart():
    header, body = frames(agent.exec_request(3, b"cat; echo e >&2", b"in"))[0]
    assert header == {"id": 3, "op": "exec", "cmd_len": 15, "stdin": True} and body == b"cat; echo e >&2in"
    assert agent.exec_result({"rc": 2, "out": 3}, b"outerr") == (2, b"out", b"err")


F_GETPIPE_SZ = 1032  # Linux; Python 3.10's fcntl.F_GETPIPE_SZ


def test_widen_pipe_lets_a_pipe_hold_a_whole_module_request_and_leaves_what_is_no_pipe(tmp_path):
    read_end, write_end = os.pipe()
    try:
        assert fcntl.fcntl(read_end, F_GETPIPE_SZ) < agent.PIPE_SIZE
        agent.widen_pipe(read_end)
        assert fcntl.fcntl(write_end, F_GETPIPE_SZ) == agent.PIPE_SIZE  # one pipe, whichever end was widened
    finally:
        os.close(read_end)
        os.close(write_end)
    with open(tmp_path / "file", "wb") as handle:
        agent.widen_pipe(handle.fileno())  # EBADF from the kernel: kept quiet, nothing to widen
    agent.widen_pipe(999_999)


def serve(requests: list[bytes]) -> list:
    out = io.BytesIO()
    agent.Agent(io.BytesIO(b"".join(requests)).read, out.write).serve()
    return frames(out.getvalue())


def test_the_agent_says_hello_then_answers_each_command_once():
    answers = serve([agent.exec_request(1, b"echo out; echo err >&2; exit 3", None),
                     agent.exec_request(2, b"cat", b"given input"),
                     agent.exec_request(3, b"cat", None)])
    hello = answers.pop(0)[0]
    assert hello["hello"] == agent.HELLO and hello["protocol"] == agent.PROTOCOL and hello["id"] == 0
    assert [(h["id"], agent.exec_result(h, b)) for h, b in answers] == [
        (1, (3, b"out\n", b"err\n")), (2, (0, b"given input", b"")), (3, (0, b"", b""))]


def test_put_in_chunks_fetch_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "CHUNK", 4)
    target = str(tmp_path / "file")
    answers = serve([agent.encode({"id": 1, "op": "put", "path": target, "more": True}, b"0123"),
                     agent.encode({"id": 1, "op": "put", "path": target, "more": False}, b"456"),
                     agent.encode({"id": 2, "op": "fetch", "path": target})])[1:]
    assert (tmp_path / "file").read_bytes() == b"0123456"
    assert answers == [({"id": 1, "rc": 0}, b""), ({"id": 2, "more": True}, b"0123"),
                       ({"id": 2, "more": True}, b"456"), ({"id": 2, "rc": 0}, b"")]


def test_an_aborted_or_unfinished_put_leaves_no_file(tmp_path):
    aborted, unfinished = str(tmp_path / "aborted"), str(tmp_path / "unfinished")
    answers = serve([agent.encode({"id": 1, "op": "put", "path": aborted, "more": True}, b"part"),
                     agent.encode({"id": 1, "op": "abort"}),
                     agent.encode({"id": 2, "op": "put", "path": unfinished, "more": True}, b"part")])[1:]
    assert answers == [({"id": 1, "rc": 1, "error": "aborted"}, b"")]
    assert list(tmp_path.iterdir()) == []


def test_a_put_replaces_the_file_only_when_complete_and_an_abort_keeps_it(tmp_path):
    """Security review (issue 25, finding 4): an interrupted copy over a file must not destroy it."""
    target = tmp_path / "passwd"
    target.write_bytes(b"root:x:0:0::/root:/bin/sh\n")
    out = io.BytesIO()
    server = agent.Agent(io.BytesIO().read, out.write)
    server.handle({"id": 1, "op": "put", "path": str(target), "more": True}, b"half")
    assert target.read_bytes() == b"root:x:0:0::/root:/bin/sh\n", "the first chunk truncated the file it replaces"
    (temp,) = [path for path in tmp_path.iterdir() if path != target]
    assert temp.name.startswith(".passwd.") and temp.stat().st_mode & 0o777 == 0o600
    server.handle({"id": 1, "op": "abort"}, b"")
    assert target.read_bytes() == b"root:x:0:0::/root:/bin/sh\n" and list(tmp_path.iterdir()) == [target]
    server.handle({"id": 2, "op": "put", "path": str(target), "more": True}, b"unfinished")
    server.serve()  # the holder's end closes: unfinished puts are aborted
    assert target.read_bytes() == b"root:x:0:0::/root:/bin/sh\n" and list(tmp_path.iterdir()) == [target]
    assert [h for h, _body in frames(out.getvalue())][:1] == [{"id": 1, "rc": 1, "error": "aborted"}]


def test_a_put_keeps_mode_and_owner_of_the_file_it_replaces_and_writes_through_a_symlink(tmp_path):
    old = tmp_path / "old"
    old.write_bytes(b"old")
    owner = (os.getuid(), os.getgid()) if os.geteuid() else (4321, 4322)  # root may give files away
    os.chown(old, *owner)
    old.chmod(0o4750)
    (tmp_path / "link").symlink_to("old")
    answers = serve([agent.encode({"id": 1, "op": "put", "path": str(tmp_path / "link"), "more": False}, b"new"),
                     agent.encode({"id": 2, "op": "put", "path": str(tmp_path / "fresh"), "more": False}, b"x")])[1:]
    assert answers == [({"id": 1, "rc": 0}, b""), ({"id": 2, "rc": 0}, b"")]
    assert (tmp_path / "link").is_symlink() and old.read_bytes() == b"new"
    assert (old.stat().st_mode & 0o7777, old.stat().st_uid, old.stat().st_gid) == (0o4750, *owner)
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o666 & ~agent.umask()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fresh", "link", "old"]


def test_a_put_that_cannot_be_renamed_into_place_leaves_no_temporary_file(tmp_path):
    (tmp_path / "dir").mkdir()
    answers = serve([agent.encode({"id": 1, "op": "put", "path": str(tmp_path / "dir"), "more": False}, b"x")])[1:]
    assert answers[0][0]["rc"] == 1 and str(tmp_path / "dir") in answers[0][0]["error"]
    assert [path.name for path in tmp_path.iterdir()] == ["dir"] and not list((tmp_path / "dir").iterdir())


def test_file_errors_are_answers_that_name_the_path(tmp_path):
    missing = str(tmp_path / "missing")
    answers = serve([agent.encode({"id": 1, "op": "fetch", "path": missing}),
                     agent.encode({"id": 2, "op": "put", "path": str(tmp_path / "no" / "dir"), "more": False}, b"x"),
                     agent.encode({"id": 3, "op": "frobnicate"})])[1:]
    assert [h["id"] for h, _body in answers] == [1, 2, 3] and all(h["rc"] == 1 for h, _body in answers)
    assert missing in answers[0][0]["error"] and "No such file" in answers[1][0]["error"]
    assert "unknown request" in answers[2][0]["error"]


def test_fetch_refuses_what_is_no_regular_file_instead_of_blocking_or_streaming_forever(tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opened for reading, it blocks until a writer comes
    done = []
    requests = [agent.encode({"id": 1, "op": "fetch", "path": "/dev/null"}),
                agent.encode({"id": 2, "op": "fetch", "path": str(tmp_path)}),
                agent.encode({"id": 3, "op": "fetch", "path": str(tmp_path / "fifo")})]
    server = threading.Thread(target=lambda: done.append(serve(requests)[1:]), daemon=True)
    server.start()
    server.join(timeout=10)
    assert done, "the agent blocks on a FIFO"
    assert [(h["id"], h["rc"]) for h, _body in done[0]] == [(1, 1), (2, 1), (3, 1)]
    assert all("not a regular file" in h["error"] for h, _body in done[0])


def test_descendants_come_from_the_parent_fields_of_proc(tmp_path):
    for pid, ppid, name in ((10, 1, "agent"), (11, 10, "sh"), (12, 11, "a (b) c"), (13, 1, "other"), (14, 12, "x")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} 0 0\n")
    (tmp_path / "self").mkdir()
    assert sorted(agent.descendants(10, str(tmp_path))) == [11, 12, 14]


def test_the_agent_process_kills_a_running_command_when_its_input_closes(tmp_path):
    """As inside a container: ``python3 -I -B -c <source>``; closing its stdin mid-command ends both."""
    marker = tmp_path / "pid"
    source = Path(agent.__file__).read_text(encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-I", "-B", "-c", source], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert agent.read_frame(proc.stdout.read)[0]["hello"] == agent.HELLO
        proc.stdin.write(agent.exec_request(1, f"echo $$ > {marker}; exec sleep 937".encode(), None))
        proc.stdin.flush()
        for _poll in range(500):
            if marker.exists() and marker.read_text().strip():
                break
            subprocess.run(["sleep", "0.01"], check=True)
        sleeper = int(marker.read_text())
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
        for _poll in range(100):
            if not os.path.exists(f"/proc/{sleeper}") or open(f"/proc/{sleeper}/stat").read().split()[2] == "Z":
                break
            subprocess.run(["sleep", "0.02"], check=True)
        else:
            pytest.fail(f"the command (pid {sleeper}) still runs after the agent's input closed")
    finally:
        proc.kill()
        proc.wait()


# -- the warm python -----------------------------------------------------------------------
def sh_c(inner: str) -> bytes:
    """The command Ansible sends for a pipelined module: ``/bin/sh -c <inner, quoted>``."""
    return ("/bin/sh -c " + shlex.quote(inner)).encode()


@pytest.mark.parametrize("cmd, expected", [
    (sh_c("/usr/bin/python3 && sleep 0"), ("/usr/bin/python3", {})),
    (sh_c("LANG=C.UTF-8 FOO='a b'\"'\"'c' /usr/bin/python3 && sleep 0"),
     ("/usr/bin/python3", {"LANG": "C.UTF-8", "FOO": "a b'c"})),
    (sh_c("PWD=/x /usr/bin/python3 && sleep 0"), ("/usr/bin/python3", {"PWD": "/x"})),
    (b"/bin/bash -c '/usr/bin/python3.11 && sleep 0'",
     ("/usr/bin/python3.11", {"SHLVL": "1", "_": "/usr/bin/python3.11"})),
    (sh_c("sudo -H -S -n -u root /bin/sh -c 'echo BECOME-SUCCESS-x ; /usr/bin/python3' && sleep 0"), None),
    (sh_c("FOO=$HOME /usr/bin/python3 && sleep 0"), None),  # expanded by the shell: not ours to guess
    (sh_c("FOO=`id` /usr/bin/python3 && sleep 0"), None),
    (sh_c("/usr/bin/python3 /root/.ansible/tmp/AnsiballZ_ping.py && sleep 0"), None),  # not pipelined
    (sh_c("/usr/bin/python3 -X dev && sleep 0"), None),
    (sh_c("python3 && sleep 0"), None),
    (sh_c("/usr/bin/python3 ; sleep 0"), None),
    (sh_c("/usr/bin/python3 && sleep 0 && rm -rf /"), None),
    (b"/usr/bin/fish -c '/usr/bin/python3 && sleep 0'", None),
    (b"/bin/sh -c '/usr/bin/python3 && sleep 0' extra", None),
    (b"/bin/sh -c '/usr/bin/python3 \xff && sleep 0'", None),
])
def test_only_the_exact_pipelined_module_command_is_read_as_one(cmd, expected, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", "/")  # not where we are: the shell sets it
    monkeypatch.delenv("SHLVL", raising=False)
    if expected is not None:
        expected = (expected[0], {"PWD": str(tmp_path), **expected[1]})
    assert agent.pipelined_python(cmd) == expected


PROBE = '''#!/usr/bin/python
from __future__ import annotations
import json, os, signal, sys, time
from ansible.module_utils.basic import AnsibleModule
import ansible
import ansible.module_utils.basic as basic


def main():
    module = AnsibleModule(argument_spec={"action": {"type": "str", "default": "report"}, "pidfile": {"type": "str"}})
    action = module.params["action"]
    if action == "fail":
        sys.stderr.write("about to fail\\n")
        module.fail_json(msg="asked to fail")
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "sleep":
        with open(module.params["pidfile"], "w") as handle:
            handle.write(str(os.getpid()))
        time.sleep(600)
    from ansible.module_utils.common import respawn  # not imported by basic: only in this module's payload
    module.exit_json(pid=os.getpid(), ppid=os.getppid(), foo=os.environ.get("HSB_PROBE"), cwd=os.getcwd(),
                     argv=sys.argv, executable=sys.executable, bytecode=not sys.dont_write_bytecode,
                     basic=basic.__file__, respawn=respawn.__file__, respawn_parent=str(respawn._ANSIBLE_PARENT_PATH),
                     package=list(ansible.__path__), module_path=basic.get_module_path(), env=dict(os.environ))


if __name__ == "__main__":
    main()
'''

WRAPPERS = '''
import json, sys
from ansible.executor.module_common import modify_module
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, module_loader
from ansible.template import Templar
init_plugin_loader([])
out = {}
for key, name, args in json.loads(sys.argv[1]):
    path = name if name.startswith("/") else module_loader.find_plugin_with_context(name).plugin_resolved_path
    fqcn = "probe" if name.startswith("/") else module_loader.find_plugin_with_context(name).resolved_fqcn
    data = modify_module(fqcn, path, args, Templar(loader=DataLoader()),
                         task_vars={"ansible_python_interpreter": sys.executable})[0]
    out[key] = data.decode("latin-1")
print(json.dumps(out))
'''


@pytest.fixture(name="wrappers", scope="module")
def fixture_wrappers(tmp_path_factory):
    """Real AnsiballZ wrappers, made by Ansible's own module_common in another process."""
    probe = tmp_path_factory.mktemp("probe") / "probe.py"
    probe.write_text(PROBE)
    modules = [["ping", "ansible.builtin.ping", {}], ["stat", "ansible.builtin.stat", {"path": "/etc/passwd"}]]
    for action in ("report", "fail", "kill", "sleep"):
        modules.append([action, str(probe), {"action": action, "pidfile": str(probe.parent / "pid")}])
    made = subprocess.run([sys.executable, "-c", WRAPPERS, json.dumps(modules)], capture_output=True, check=True)
    found = {key: value.encode("latin-1") for key, value in json.loads(made.stdout).items()}
    found["pidfile"] = probe.parent / "pid"  # where the "sleep" module writes its pid
    return found


class AgentProcess:
    """The agent as inside a container (``python -I -B -c <source>``), with an environment a container gives."""

    def __init__(self, python=sys.executable, cwd=None):
        env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
        self.python = python
        self.proc = subprocess.Popen([python, "-I", "-B", "-c", Path(agent.__file__).read_text(encoding="utf-8")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd)
        self.hello = agent.read_frame(self.proc.stdout.read)[0]
        self.next_id = 0

    def exec(self, cmd, stdin=None):
        """``(warm, rc, stdout, stderr)``."""
        self.next_id += 1
        self.proc.stdin.write(agent.exec_request(self.next_id, cmd, stdin))
        self.proc.stdin.flush()
        header, body = agent.read_frame(self.proc.stdout.read)
        assert header["id"] == self.next_id
        return (header.get("warm", False), *agent.exec_result(header, body))

    def module(self, wrapper, env="", python=None):
        return self.exec(sh_c(f"{env}{python or self.python} && sleep 0"), wrapper)

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture(name="agent_process")
def fixture_agent_process():
    started = []

    def start(**kwargs):
        started.append(AgentProcess(**kwargs))
        return started[-1]
    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.proc.kill()
            proc.proc.wait()


def result(out: bytes) -> dict:
    return json.loads(out[out.index(b"{"):])


def test_modules_run_warm_each_in_a_fresh_process_importing_from_their_own_payload(wrappers, agent_process, tmp_path):
    proc = agent_process(cwd=tmp_path)
    assert proc.module(wrappers["ping"]) == (True, 0, b'\n{"ping": "pong", "invocation": {"module_args": {"data": '
                                             b'"pong"}}}\n', b"")
    warm, rc, out, err = proc.module(wrappers["stat"])
    assert (warm, rc, err) == (True, 0, b"") and result(out)["stat"]["path"] == "/etc/passwd"
    runs = []
    for value in ("one", "two"):
        warm, rc, out, err = proc.module(wrappers["report"], env=f"HSB_PROBE={value} ")
        assert (warm, rc, err) == (True, 0, b""), err
        runs.append(result(out))
    first, second = runs
    assert (first["foo"], second["foo"]) == ("one", "two")  # the environment of each request, and only of it
    assert first["pid"] != second["pid"] and first["ppid"] == second["ppid"] != proc.hello["pid"]
    assert first["cwd"] == second["cwd"] == str(tmp_path)
    assert first["executable"] == sys.executable and not first["bytecode"]
    for run in runs:  # what the first module imported now names this module's payload, as a cold import would
        payload = run["respawn"].split("/ansible/")[0]
        assert payload.endswith("_payload.zip") and run["basic"] == payload + "/ansible/module_utils/basic.py"
        assert run["package"][0] == payload + "/ansible" and run["respawn_parent"] == payload
        assert run["module_path"] == payload + "/ansible/module_utils"
        assert run["argv"] == [payload + "/ansible/modules/probe.py"]  # runpy's, as in a cold run
    assert first["respawn"] != second["respawn"]
    warm, rc, out, err = proc.exec(sh_c(f"exec {sys.executable} && sleep 0"), wrappers["report"])
    cold = result(out)
    assert (warm, rc) == (False, 0) and cold["ppid"] != first["ppid"]
    assert cold["argv"] == [cold["respawn"].split("/ansible/")[0] + "/ansible/modules/probe.py"]
    assert (cold["cwd"], cold["executable"], cold["foo"]) == (str(tmp_path), sys.executable, None)
    assert first["env"] == dict(cold["env"], HSB_PROBE="one")  # what /bin/sh adds (PWD) too
    proc.close()


def test_a_warm_module_reports_its_failure_streams_and_death_as_the_shell_would(wrappers, agent_process):
    proc = agent_process()
    warm, rc, out, err = proc.module(wrappers["fail"])
    assert (warm, rc, err) == (True, 1, b"about to fail\n") and result(out)["msg"] == "asked to fail"
    assert proc.module(wrappers["kill"]) == (True, 128 + signal.SIGKILL, b"", b"")
    assert proc.exec(sh_c(f"exec {sys.executable} && sleep 0"), wrappers["kill"])[:2] == (False, 128 + signal.SIGKILL)
    assert proc.module(wrappers["ping"])[:2] == (True, 0)  # the warm python outlives the modules it ran
    proc.close()


def wait_for_file(path: Path) -> None:
    for _poll in range(1000):
        if path.exists() and path.read_text():
            return
        time.sleep(0.01)
    pytest.fail(f"{path} was never written")


def test_a_warm_module_dies_with_the_agent_when_the_holder_goes(wrappers, agent_process):
    proc = agent_process()
    proc.proc.stdin.write(agent.exec_request(1, sh_c(f"{sys.executable} && sleep 0"), wrappers["sleep"]))
    proc.proc.stdin.flush()
    pidfile = wrappers["pidfile"]
    wait_for_file(pidfile)
    module = int(pidfile.read_text())
    pidfile.unlink()
    proc.proc.stdin.close()
    assert proc.proc.wait(timeout=10) == 0
    for _poll in range(200):
        if not os.path.exists(f"/proc/{module}") or Path(f"/proc/{module}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"the warm module (pid {module}) still runs after the agent's input closed")


def test_what_the_warm_python_cannot_run_as_the_shell_would_runs_through_the_shell(wrappers, agent_process, tmp_path):
    proc = agent_process()
    assert proc.module(wrappers["ping"])[:2] == (True, 0)
    become = sh_c(f"echo BECOME-SUCCESS-x ; {sys.executable}")  # as a become plugin wraps it
    assert proc.exec(become, wrappers["ping"])[:2] == (False, 0)
    for env in ("LANG=C ", "PYTHONPATH=/nowhere ", "PYTHONWARNINGS=error "):
        warm, rc, out, _err = proc.module(wrappers["ping"], env=env)
        assert (warm, rc, result(out)["ping"]) == (False, 0, "pong"), env
    base = os.path.realpath(sys.executable)  # the same binary outside this virtual environment: another python
    if base != sys.executable and agent._venv(sys.executable):  # pylint: disable=protected-access
        warm, rc, out, _err = proc.module(wrappers["ping"], python=base)
        assert (warm, rc) == (False, 0) and result(out)["ping"] == "pong"
    assert proc.exec(sh_c(f"{sys.executable} && sleep 0"), b"print('not a module')\n") == (False, 0, b"not a module\n", b"")
    assert proc.exec(sh_c("/bin/cat && sleep 0"), wrappers["ping"])[:3] == (False, 0, wrappers["ping"])
    proc.close()


def test_a_warm_python_whose_files_changed_is_replaced_before_it_runs_a_module(wrappers, agent_process, tmp_path):
    """A package installed in the container (site-packages, or shared libraries) is seen as a cold python sees it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    proc = agent_process(python=python)
    warm, rc, out, err = proc.module(wrappers["report"])
    assert (warm, rc) == (True, 0), err
    before = result(out)
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    assert (warm, rc) == (True, 0) and proc.module(wrappers["report"])[0]
    (site / "newly_installed.py").write_text("")
    warm, rc, out, _err = proc.module(wrappers["report"])
    after = result(out)
    assert (warm, rc) == (True, 0) and after["ppid"] != before["ppid"] and after["executable"] == python
    assert proc.module(wrappers["report"])[0] and result(proc.module(wrappers["report"])[2])["ppid"] == after["ppid"]
    proc.close()
