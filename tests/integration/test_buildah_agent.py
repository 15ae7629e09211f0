"""The buildah connection's agent against real buildah: one ``buildah run`` per play, not per task.

A working container of the default root layer (``localhost/hpc-stateless/base``, built by ``make
build`` before the integration tests) is used by every test here and removed at the end. Checked:
every answer arrives exactly once and intact under CPU load, a SIGKILLed ``ansible-playbook``
leaves no holder, agent, command, socket or mount, nothing of the agent is in the committed image,
nothing we start leaves the terminal's stdin non-blocking, and no process in a build container
reaches the holder's socket.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import multiprocessing
import os
import pty
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import BUILDAH_ENV, REPO, buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent.holder import Session, address

BASE = "localhost/hpc-stateless/base:latest"
RUNS = 300
WORKERS = 3
ANSIBLE_ENV = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "PYTHONPATH": str(REPO / ".collections")}


def working_container():
    name = f"hpc-stateless-agent-test-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, BASE)
    yield name
    Session(name, None, Buildah()).stop()
    buildah("umount", name, check=False)
    buildah("rm", name, check=False)


@pytest.fixture(scope="module", name="container")
def fixture_container():
    yield from working_container()


@pytest.fixture(name="fresh_container")
def fixture_fresh_container():
    """A container of its own: a killed module leaves its AnsiballZ payload in /tmp (Ansible's, not ours)."""
    yield from working_container()


def playbook(tmp_path: Path, tasks: str) -> Path:
    path = tmp_path / "play.yml"
    path.write_text("- name: Agent test\n  hosts: all\n  gather_facts: false\n  tasks:\n" + tasks, encoding="utf-8")
    return path


def ansible_playbook(container: str, play: Path, *extra: str) -> list[str]:
    return [str(REPO / ".venv/bin/ansible-playbook"), "-i", f"{container},", "-c", "hpc.stateless.buildah", str(play),
            *extra]


# -- what a run may leave ------------------------------------------------------------------------
def processes() -> dict[int, tuple[str, str]]:
    """``{pid: (argv, root directory)}`` of every live process."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat[stat.rfind(")") + 2] in "ZX":
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            found[int(pid)] = (argv.strip(), os.readlink(f"/proc/{pid}/root"))
        except OSError:
            continue
    return found


def ours(container: str, roots: set[str]) -> list[str]:
    """Our holder and ``buildah run`` (the container's name in their argv) and everything rooted in ``roots``."""
    return [f"{pid} {argv[:120]}" for pid, (argv, root) in processes().items()
            if container in argv or any(root == r or root.startswith(r + "/") for r in roots)]


def sockets(container: str) -> list[str]:
    """The holder sockets of ``container`` (any playbook): open ones, and socket files on disk."""
    stem = os.fsdecode(address(container, None, 0).rsplit(b".", 2)[0])
    return ([line for line in Path("/proc/net/unix").read_text().splitlines() if stem in line]
            + glob.glob(glob.escape(stem) + ".*.sock"))


def mounted(container: str) -> bool:
    return container in buildah("mount")


def wait_until(condition, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


# -- answers under load ------------------------------------------------------------------------
def worker(container: str, ids: list[str], results) -> None:
    """Like an Ansible worker: a new session per command, each command's id out, err and a status."""
    got = []
    for index, rid in enumerate(ids):
        session = Session(container, None, Buildah())
        if index % 3 == 0:
            answer = session.exec(f"cat; echo {rid} >&2; echo {rid} >> /root/agent-runs; exit {index % 7}".encode(),
                                  f"{rid}\n".encode())
        else:
            answer = session.exec(f"echo {rid}; echo {rid} >&2; echo {rid} >> /root/agent-runs; exit {index % 7}"
                                  .encode())
        session.close()
        got.append((rid, index % 7, answer))
    results.put(got)


def test_every_answer_arrives_exactly_once_under_load(container):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _burner in range(2)]  # pylint: disable=consider-using-with
    try:
        ids = [uuid.uuid4().hex for _run in range(RUNS)]
        results = multiprocessing.get_context("fork").SimpleQueue()
        children = [multiprocessing.get_context("fork").Process(target=worker, args=(container, ids[n::WORKERS], results))
                    for n in range(WORKERS)]
        for child in children:  # one after another, as Ansible's tasks for one host
            child.start()
            child.join(timeout=120)
            assert child.exitcode == 0
        answers = [item for _child in children for item in results.get()]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert len(answers) == RUNS
    for rid, status, (rc, out, err) in answers:
        assert (rc, out, err) == (status, f"{rid}\n".encode(), f"{rid}\n".encode())
    session = Session(container, None, Buildah())
    runs = session.exec(b"cat /root/agent-runs; rm /root/agent-runs")[1].decode().split()
    assert sorted(runs) == sorted(ids), "a command ran more than once or not at all"


def test_module_results_through_ansible_are_whole(container, tmp_path):
    play = playbook(tmp_path, "    - name: Echo\n      ansible.builtin.command: echo id-{{ item }}\n"
                              "      loop: \"{{ range(40) | list }}\"\n      register: echoed\n"
                              "    - name: Every item answered once\n      ansible.builtin.assert:\n        that:\n"
                              "          - echoed.results | map(attribute='stdout') | list == "
                              "range(40) | map('regex_replace', '^', 'id-') | list\n")
    proc = subprocess.run(ansible_playbook(container, play), env=ANSIBLE_ENV, capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok=2" in proc.stdout


# -- requests bigger than a pipe ----------------------------------------------------------------
F_GETPIPE_SZ = 1032  # Linux; Python 3.10's fcntl.F_GETPIPE_SZ


def test_the_pipes_of_the_relay_hold_a_whole_module_request_and_big_requests_arrive_whole(container):
    """buildah's chroot runtime relays the agent's streams and lets the tail of a frame that found the pipe into
    the agent full wait about 0.1 s; so the agent and its holder widen their pipes (figures: docs/connection.md)."""
    session = Session(container, None, Buildah())
    assert session.exec(b"true")[0] == 0
    agent_pid = session.hello["pid"]  # chroot isolation: the host's pid namespace
    sizes = {}
    for fd in (0, 1):
        with open(f"/proc/{agent_pid}/fd/{fd}", "rb" if fd == 0 else "wb") as pipe:
            sizes[fd] = fcntl.fcntl(pipe.fileno(), F_GETPIPE_SZ)
    assert sizes == {0: 1 << 20, 1: 1 << 20}, f"the agent's stdin and stdout pipes: {sizes}"
    payload = os.urandom(700_000)
    rc, out, _err = session.exec(b"sha256sum", payload)
    assert rc == 0 and out.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    rc, out, _err = session.exec(b"head -c 700000 /dev/zero")
    assert rc == 0 and out == bytes(700_000)
    session.close()


# -- what a build container reaches -------------------------------------------------------------
# What a process a package script left behind in a build container can do: find every agent holder's socket
# in /proc/net/unix (chroot isolation shares the host's network namespace, so it lists the host's sockets),
# connect, and read the holder's first frame, after which it could send commands to that layer's agent.
PROBE = r"""
import socket
for line in open("/proc/net/unix").read().splitlines()[1:]:
    fields = line.split()
    name = fields[7] if len(fields) > 7 else ""
    if "hpc-stateless" not in name:
        continue
    print("seen", name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(b"\0" + name[1:].encode() if name.startswith("@") else name)
        print("reached", name, sock.recv(200)[8:60])
    except OSError as exc:
        print("unreachable", name, exc)
    finally:
        sock.close()
"""


def test_a_process_in_a_build_container_cannot_reach_the_agent_holder(container):
    """Security review (issue 25, finding 7): the holder's socket was in the abstract namespace, which belongs
    to the network namespace that ``buildah run`` with chroot isolation shares with the host; its peer check
    (same uid) passes for the container's root. It is now a file in a 0700 directory of the host."""
    session = Session(container, None, Buildah())
    assert session.exec(b"true")[0] == 0  # a holder listens, idle
    session.close()
    said = buildah("run", container, "--", "python3", "-I", "-c", PROBE)
    shown = os.fsdecode(session.address)  # as /proc/net/unix shows it: an abstract name with "@" for its NUL
    assert f"seen {'@' + shown[1:] if shown.startswith(chr(0)) else shown}" in said, said
    assert "reached" not in said, f"a process in the build container reached an agent holder:\n{said}"
    assert session.exec(b"echo unharmed")[1] == b"unharmed\n"


# -- a killed playbook -------------------------------------------------------------------------
def test_a_sigkilled_playbook_leaves_no_holder_agent_socket_or_mount(container, tmp_path):
    Session(container, None, Buildah()).stop()
    # The holder of the previous test's playbook stops by itself once that playbook is gone.
    assert wait_until(lambda: not mounted(container)), "the agent of an ended playbook kept the container mounted"
    hold = f"{int(uuid.uuid4().int % 9000) + 1000}.5"
    play = playbook(tmp_path, "    - name: Start the agent\n      ansible.builtin.command: /bin/true\n"
                              f"    - name: Hold\n      ansible.builtin.command: sleep {hold}\n")
    proc = subprocess.Popen(ansible_playbook(container, play), env=ANSIBLE_ENV, stdout=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        sleeping = wait_until(lambda: [root for argv, root in processes().values() if argv == f"sleep {hold}"], 120)
        assert sleeping, "the held task never ran"
        assert mounted(container) and sockets(container)
        os.kill(proc.pid, signal.SIGKILL)  # the playbook only: its holder must notice by itself
        proc.wait()
        left = wait_until(lambda: not (ours(container, set(sleeping)) or sockets(container) or mounted(container)))
        assert left, (f"left behind: processes {ours(container, set(sleeping))}, sockets {sockets(container)}, "
                      f"mounted {mounted(container)}")
        assert not any(Path(root).exists() for root in sleeping), "buildah run's bundle stayed"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # Ansible's workers, if any are left
        except ProcessLookupError:
            pass


# -- nothing of the agent in the image ---------------------------------------------------------
def upper_dir(container: str) -> Path:
    merged = buildah("mount", container).strip()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == merged:
            found = re.search(r"upperdir=([^,]+)", line)
            assert found, line
            return Path(found.group(1))
    raise AssertionError(f"{merged} is not mounted")


def test_the_committed_layer_holds_nothing_of_the_agent(fresh_container, tmp_path):
    container = fresh_container
    ref = f"localhost/hpc-stateless-agent-test-{uuid.uuid4().hex[:8]}:test"
    (tmp_path / "input.txt").write_text("through the agent\n")
    play = playbook(tmp_path, "    - name: Facts from inside\n      ansible.builtin.setup:\n        gather_subset: [min]\n"
                              "    - name: Copy\n      ansible.builtin.copy:\n        src: input.txt\n"
                              "        dest: /etc/agent-test.txt\n        mode: \"0644\"\n"
                              "    - name: Fetch\n      ansible.builtin.fetch:\n        src: /etc/agent-test.txt\n"
                              f"        dest: {tmp_path}/fetched.txt\n        flat: true\n"
                              "    - name: Stop the agent before the commit\n      ansible.builtin.meta: reset_connection\n")
    proc = subprocess.run(ansible_playbook(container, play), env=ANSIBLE_ENV, capture_output=True, text=True,
                          check=False, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "fetched.txt").read_text() == "through the agent\n"
    assert not ours(container, set()), "reset_connection left the agent running"
    upper = upper_dir(container)
    written = sorted(str(path.relative_to(upper)) for path in upper.rglob("*"))
    assert "etc/agent-test.txt" in written
    strays = [path for path in written if path.startswith("tmp/") or "__pycache__" in path or path.endswith(".pyc")
              or "ansible-tmp-" in path or "hpc-stateless" in path]
    assert strays == [], f"the layer holds {strays}"
    buildah("umount", container)
    new = subprocess.run(["buildah", "commit", "--quiet", container, ref], env=BUILDAH_ENV, capture_output=True,
                         text=True, check=False)
    try:
        assert new.returncode == 0, new.stderr
    finally:
        buildah("rmi", ref, check=False)


# -- the terminal's stdin ----------------------------------------------------------------------
def test_the_terminals_stdin_stays_blocking_for_the_next_playbook(container, tmp_path):
    """ansible-playbook refuses to start on a non-blocking stdin; ``buildah run`` (chroot isolation) makes the
    stdin it shares non-blocking. Two playbooks in a row on one terminal: the second must start."""
    play = playbook(tmp_path, "    - name: Through the agent\n      ansible.builtin.command: /bin/true\n")
    primary, terminal = pty.openpty()
    try:
        for _run in range(2):
            proc = subprocess.run(ansible_playbook(container, play), env=ANSIBLE_ENV, stdin=terminal,
                                  capture_output=True, text=True, check=False)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
            assert wait_until(lambda: not ours(container, set()), 10), "the agent outlived its playbook"
            assert not fcntl.fcntl(terminal, fcntl.F_GETFL) & os.O_NONBLOCK, "the terminal was left non-blocking"
    finally:
        os.close(primary)
        os.close(terminal)
