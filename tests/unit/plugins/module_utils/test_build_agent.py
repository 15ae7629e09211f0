"""The agent of the buildah connection and its frames, run on the host.

The agent's code is plain Python meant to run inside a working container through ``buildah run``;
here it runs on the host (its functions directly, and as a ``python3 -c`` process behind a real
holder in ``test_build_holder.py``). ``buildah run`` itself is exercised in
tests/integration/test_buildah_agent.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
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
