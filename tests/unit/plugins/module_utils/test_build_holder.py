"""The holder of the buildah connection's agent and the client sessions of workers, on the host.

The holder runs in a thread of the test and starts the real agent as ``python3 -I -B -c <agent>``
on the host instead of through ``buildah run`` (a stand-in: no working container in unit tests),
and is told the container always exists. Everything else is real: the Unix socket in its private
directory (a fresh one per test, as ``$XDG_RUNTIME_DIR``), the peer uid check, frames, the relay,
orphaned answers, aborted uploads, stop and owner checks. The real ``buildah run``, and what a
process inside a build container can reach, are tested in tests/integration/test_buildah_agent.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent import agent, holder
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah


class HostHolder(holder.Holder):
    """A holder whose agent runs on the host, for a container that never goes away."""

    def __init__(self, config, argv=None):
        super().__init__(config)
        self.argv = argv or [sys.executable, "-I", "-B", "-c", holder.AGENT_SOURCE]

    def _container_gone(self):
        return False


@pytest.fixture(name="runtime_dir", autouse=True)
def fixture_runtime_dir(monkeypatch):
    """A fresh ``$XDG_RUNTIME_DIR`` (short: a socket path has at most 107 bytes); yields the sockets' directory."""
    base = tempfile.mkdtemp(prefix="hsb-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", base)
    yield Path(holder.socket_dir())
    shutil.rmtree(base)


@pytest.fixture(name="running")
def fixture_running(monkeypatch):
    """Start a holder thread for a fresh container name; yields (holder, Session factory)."""
    started = []

    def start(argv=None, owner=None, idle=60):
        container = f"unit-{uuid.uuid4().hex[:8]}"
        owner = owner or os.getpid()
        config = {"container": container, "user": None, "owner": owner, "owner_start": holder.start_time(owner),
                  "idle_timeout": idle, "address": os.fsdecode(holder.address(container, None, owner))}
        hold = HostHolder(config, argv)
        monkeypatch.setattr(holder, "agent_argv", lambda _client, _container, _user: hold.argv)
        thread = threading.Thread(target=hold.run, daemon=True)
        thread.start()
        started.append((hold, thread))

        def session():
            return holder.Session(container, None, Buildah(), owner=owner)
        wait_for(lambda: session()._try_connect() is not None, "the holder to listen")  # pylint: disable=protected-access
        return hold, thread, session

    yield start
    for hold, thread in started:
        hold.stop_reason = hold.stop_reason or "test over"
        thread.join(timeout=30)


def wait_for(condition, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def test_sessions_of_later_workers_reach_the_same_agent(running):
    _hold, _thread, session = running()
    first = session()
    assert first.exec(b"echo $PPID; echo err >&2; exit 4")[0] == 4
    agent_pid = first.exec(b"echo $PPID")[1]
    first.close()
    second = session()
    assert second.exec(b"echo $PPID")[1] == agent_pid
    assert second.hello["hello"] == agent.HELLO


def test_put_and_fetch_stream_whole_files(running, tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "CHUNK", 1000)
    _hold, _thread, session = running()
    data = os.urandom(5500)
    (tmp_path / "src").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    client = session()
    client.put(str(tmp_path / "src").encode(), str(tmp_path / "dst"))
    client.put(str(tmp_path / "empty").encode(), str(tmp_path / "empty-dst"))
    assert (tmp_path / "dst").read_bytes() == data and (tmp_path / "empty-dst").read_bytes() == b""
    client.fetch(str(tmp_path / "dst"), str(tmp_path / "back").encode())
    assert (tmp_path / "back").read_bytes() == data
    with pytest.raises(OSError, match="missing"):
        client.fetch(str(tmp_path / "missing"), str(tmp_path / "not-written").encode())
    assert not (tmp_path / "not-written").exists()


def test_an_answer_of_a_worker_that_left_never_reaches_the_next_one(running, tmp_path):
    _hold, _thread, session = running()
    gone = session()
    gone.connect()
    gone._send(agent.exec_request(1, f"sleep 0.3; echo late > {tmp_path}/ran; echo orphan".encode(), None))  # pylint: disable=protected-access
    gone.close()  # the worker dies before its answer
    follower = session()
    assert follower.exec(b"echo mine") == (0, b"mine\n", b"")
    assert (tmp_path / "ran").read_text() == "late\n", "the orphaned command did not run exactly once"


def test_an_upload_cut_off_by_its_worker_leaves_no_file(running, tmp_path):
    _hold, _thread, session = running()
    gone = session()
    gone.connect()
    gone._send(agent.encode({"id": 1, "op": "put", "path": str(tmp_path / "half"), "more": True}, b"part"))  # pylint: disable=protected-access
    gone.close()
    assert session().exec(b"true")[0] == 0
    assert not (tmp_path / "half").exists()


def test_an_upload_cut_off_by_its_worker_keeps_the_file_it_was_replacing(running, tmp_path):
    """Security review (issue 25, finding 4): an interrupted copy over /etc/passwd must not delete it."""
    _hold, _thread, session = running()
    (tmp_path / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    gone = session()
    gone.connect()
    gone._send(agent.encode({"id": 1, "op": "put", "path": str(tmp_path / "passwd"), "more": True}, b"part"))  # pylint: disable=protected-access
    wait_for(lambda: len(list(tmp_path.iterdir())) == 2, "the upload to start")
    assert (tmp_path / "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n", "half-written under the final name"
    gone.close()
    assert session().exec(b"true")[0] == 0
    assert (tmp_path / "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n"
    assert [path.name for path in tmp_path.iterdir()] == ["passwd"]


# An agent that dies after the first chunk of a fetch.
CUT_OFF_AGENT = f"""
import os, sys
sys.path.insert(0, {holder.collection_root()!r})
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent import agent


class CutOff(agent.Agent):
    def fetch(self, rid, path):
        self.write(agent.encode({{"id": rid, "more": True}}, b"first chunk"))
        os._exit(1)


def write(data):
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


CutOff(sys.stdin.buffer.read, write).serve()
"""


def test_a_fetch_that_fails_or_is_cut_off_keeps_the_local_file(running, tmp_path):
    local = tmp_path / "local"
    local.write_text("kept")
    _hold, _thread, session = running()
    with pytest.raises(OSError, match="missing"):
        session().fetch(str(tmp_path / "missing"), str(local).encode())
    assert local.read_text() == "kept"
    _hold, _thread, session = running(argv=[sys.executable, "-I", "-B", "-c", CUT_OFF_AGENT])
    with pytest.raises(holder.AgentLost):
        session().fetch("/etc/hostname", str(local).encode())
    assert local.read_text() == "kept", "a fetch cut off after its first chunk replaced the local file"
    assert [path.name for path in tmp_path.iterdir()] == ["local"]


def test_a_lost_agent_fails_the_request_and_does_not_run_it_again(running, tmp_path):
    hold, thread, session = running()
    client = session()
    client.connect()
    count = tmp_path / "count"

    def kill_agent():
        wait_for(count.exists, "the command to start")
        hold.proc.kill()
    killer = threading.Thread(target=kill_agent)
    killer.start()
    with pytest.raises(holder.AgentLost, match="not run again"):
        client.exec(f"echo x >> {count}; sleep 5".encode())
    killer.join()
    thread.join(timeout=30)
    assert count.read_text() == "x\n"


def test_stop_ends_agent_and_holder_and_says_so(running):
    hold, thread, session = running()
    assert session().exec(b"true")[0] == 0
    assert session().stop() is True
    thread.join(timeout=30)
    assert not thread.is_alive() and hold.proc.poll() is not None
    assert hold.stop_reason == "the connection was reset"
    assert session()._try_connect() is None  # pylint: disable=protected-access
    assert session().stop() is False


def test_the_holder_stops_when_its_playbook_is_gone(running):
    owner = subprocess.Popen(["sleep", "60"])  # pylint: disable=consider-using-with
    hold, thread, session = running(owner=owner.pid)
    assert session().exec(b"true")[0] == 0
    owner.kill()
    owner.wait()
    thread.join(timeout=30)
    assert not thread.is_alive() and hold.proc.poll() is not None
    assert hold.stop_reason == f"ansible-playbook (pid {owner.pid}) is gone"


def test_an_idle_holder_stops(running):
    hold, thread, _session = running(idle=0.3)
    thread.join(timeout=30)
    assert hold.stop_reason.startswith("idle")


def test_an_agent_that_never_says_hello_is_started_again_then_refused(running, tmp_path):
    starts = tmp_path / "starts"
    _hold, thread, session = running(argv=["/bin/sh", "-c", f"echo start >> {starts}; echo no python3 >&2; exit 127"])
    with pytest.raises(holder.AgentUnavailable, match="no python3"):
        session().connect()
    thread.join(timeout=30)
    assert starts.read_text().count("start") == holder.START_ATTEMPTS


def test_the_socket_is_a_file_in_a_private_directory_named_per_container_user_and_playbook(running, runtime_dir):
    """Security review (issue 25, finding 7): not in the abstract namespace, which build containers share."""
    name = holder.address("ctr", None, 42)
    assert name.startswith(os.fsencode(runtime_dir) + b"/") and name.endswith(b".42.sock")
    assert runtime_dir.name == f"hpc-stateless-buildah-{os.getuid()}"  # the host's uid, also in a user namespace
    assert len({name, holder.address("ctr", "builder", 42), holder.address("ctr2", None, 42),
                holder.address("ctr", None, 43)}) == 4
    hold, _thread, session = running()
    assert session().exec(b"true")[0] == 0
    info = runtime_dir.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, os.getuid())
    assert stat.S_ISSOCK(os.lstat(hold.address).st_mode)
    listed = [line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:]
              if "hpc-stateless-buildah" in line]
    assert os.fsdecode(hold.address) in listed and not [path for path in listed if path.startswith("@")]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(b"\0hpc-stateless-unit-" + uuid.uuid4().hex.encode())
    server.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(server.getsockname())
    conn, _address = server.accept()
    assert holder.peer_uid(conn) == holder.peer_uid(client) == os.getuid()
    for sock in (conn, client, server):
        sock.close()


def test_the_owner_is_the_process_that_forked_the_worker():
    assert holder.owner_pid() == os.getpid()  # not a multiprocessing child: this process itself
    assert holder.start_time(os.getpid()) and holder.start_time(2**22 + 1) is None


def test_the_holder_imports_from_the_collection_root():
    root = holder.collection_root()
    assert os.path.isfile(os.path.join(root, "ansible_collections", "hpc", "stateless", "plugins", "module_utils",
                                       "_buildah_agent", "holder.py"))


@pytest.mark.parametrize("spoil", ["open to others", "someone else's", "a symlink"])
def test_a_socket_directory_others_can_enter_or_own_is_refused(runtime_dir, spoil, tmp_path):
    if spoil == "a symlink":
        tmp_path.chmod(0o700)
        runtime_dir.symlink_to(tmp_path)
    else:
        runtime_dir.mkdir(mode=0o700)
        if spoil == "open to others":
            runtime_dir.chmod(0o755)
        elif os.geteuid() != 0:
            pytest.skip("only root may give a directory away")
        else:
            os.chown(runtime_dir, os.getuid() + 1, -1)
    session = holder.Session("ctr", None, Buildah(), owner=os.getpid())
    with pytest.raises(holder.AgentUnavailable, match=f"{runtime_dir} is not a directory private to uid"):
        session.connect()


def test_a_socket_a_killed_holder_left_is_replaced_and_a_holder_removes_its_own(running, runtime_dir):
    runtime_dir.mkdir(mode=0o700)
    stale = [holder.address(f"killed-{n}", None, os.getpid()) for n in range(2)]
    for path in stale:
        left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        left.bind(path)
        left.close()  # as a SIGKILLed holder leaves it: a socket file nobody listens on
    hold, thread, session = running()
    assert sorted(os.listdir(runtime_dir)) == [os.path.basename(os.fsdecode(hold.address))]
    assert session().stop() is True
    thread.join(timeout=30)
    assert os.listdir(runtime_dir) == []


def test_a_holder_finding_its_socket_served_leaves_it_alone(running):
    hold, _thread, session = running()
    second = HostHolder({"container": hold.container, "user": None, "owner": hold.owner, "owner_start": hold.owner_start,
                         "address": os.fsdecode(hold.address)})
    second.run()  # returns at once: another holder serves this container for this playbook
    assert second.proc is None and session().exec(b"echo still")[1] == b"still\n"


def test_a_holder_that_never_says_ready_fails_the_connect_in_time(runtime_dir, monkeypatch):
    """Security review (issue 25, finding 7): a silent peer must not hang the build."""
    monkeypatch.setattr(holder, "READY_TIMEOUT", 0.5)
    runtime_dir.mkdir(mode=0o700)
    session = holder.Session("silent", None, Buildah(), owner=os.getpid())
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(session.address)
    silent.listen(1)
    outcome = []

    def connect():
        try:
            session.connect()
        except holder.AgentUnavailable as exc:
            outcome.append(str(exc))
    caller = threading.Thread(target=connect, daemon=True)
    caller.start()
    peer, _address = silent.accept()  # accepted, and never a word
    caller.join(timeout=10)
    try:
        assert not caller.is_alive(), "Session.connect still waits for the holder's first frame"
        assert outcome and "did not say whether its agent is ready within 0.5 s" in outcome[0]
        assert os.fsdecode(session.address) in outcome[0]
    finally:
        peer.close()
        silent.close()


def test_a_client_stuck_inside_a_frame_is_dropped_and_the_next_one_served(running, monkeypatch):
    monkeypatch.setattr(holder, "PEER_TIMEOUT", 0.5)
    _hold, _thread, session = running()
    stuck = session()
    stuck.connect()
    stuck._send(agent.exec_request(1, b"true", None)[:agent.HEAD.size + 3])  # pylint: disable=protected-access
    answers = []
    follower = threading.Thread(target=lambda: answers.append(session().exec(b"echo next")), daemon=True)
    follower.start()
    follower.join(timeout=20)
    stuck.close()
    assert answers == [(0, b"next\n", b"")], "the holder still waits for the rest of a stalled client's frame"
