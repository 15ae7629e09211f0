# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One agent per working container for the ``hpc.stateless.buildah`` connection: the holder and its client.

Ansible runs each task in a worker process that opens and closes the connection, so what stays
alive between tasks cannot live in a worker. The first worker that needs the container starts a
*holder*: a small detached Python process on the host (forked twice, stdin ``/dev/null``, in the
playbook's process group so a signal to the group still reaches every command) that runs
``buildah run <container> -- python3 -I -B -c <agent>`` through the collection's buildah client
and listens on a Unix socket. Later workers of the same ``ansible-playbook`` connect to it.

The socket is a file in a directory private to the user (:func:`socket_dir`: mode 0700, outside
anything a build container sees), and both ends check the peer's uid (``SO_PEERCRED``). Not in the
abstract namespace: that belongs to the network namespace, which ``buildah run`` with chroot
isolation shares with the host, so every build container could reach an abstract socket, as root
(the holder's uid). Its name holds the container, the user commands run as, and the pid of the
``ansible-playbook`` process. A holder removes its socket when it ends; one that was killed leaves
it, and the next holder removes it.

The holder serves one client at a time and relays whole frames (:mod:`.agent`) between it and
the agent. A client that goes away mid-request leaves its answer to be read and dropped (and its
unfinished upload aborted) before the next client is served, so an answer never reaches the
wrong request. The holder ends, stopping the agent first, when a client asks (the connection's
reset), when the ``ansible-playbook`` process is gone, when the container is gone, after an idle
timeout, or on SIGINT/SIGTERM/SIGHUP.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from ansible_collections.hpc.stateless.plugins.module_utils import _paths
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, collection_root
from ansible_collections.hpc.stateless.plugins.module_utils._process import command_env, id_map, outside_id, proc_stat
# owner_pid: the ansible-playbook process a holder serves.
from ansible_collections.hpc.stateless.plugins.module_utils._process import playbook_pid as owner_pid
from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent import agent
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError

# A start of the agent that never said hello ran nothing: it may be repeated this often.
START_ATTEMPTS = 3
START_TIMEOUT = 120.0
# A holder says whether its agent is ready once the agent started (or failed to): a client waits this long.
READY_TIMEOUT = START_ATTEMPTS * START_TIMEOUT + 30.0
# How long the holder waits for a client in the middle of a frame, or for it to take an answer.
PEER_TIMEOUT = 60.0
TICK = 0.2  # how often the holder looks at its owner
CONTAINER_CHECK = 10.0  # how often an idle holder asks buildah whether the container still exists
STOP_GRACE = 30.0
DEFAULT_IDLE = 600
STDERR_TAIL = 4096
AGENT_SOURCE = Path(agent.__file__).read_text(encoding="utf-8")


class AgentUnavailable(Exception):
    """The agent could not be started; nothing was run, so the caller may use another way."""


class AgentLost(Exception):
    """The agent or holder went away before it answered: whether the request ran is unknown."""


# -- names and owner ---------------------------------------------------------------------------
def start_time(pid: int) -> str | None:
    """Start time of ``pid`` (a zombie's too), None when it does not exist: tells a reused pid apart."""
    info = proc_stat(pid)
    return info.start_time if info is not None else None


def host_uid() -> int:
    """This process's uid outside its user namespace (``buildah unshare`` runs a rootless playbook as its uid 0)."""
    uid = os.getuid()
    try:
        outside = outside_id(uid, id_map("uid"))
    except (OSError, ValueError):
        outside = None
    return uid if outside is None else outside


def socket_dir() -> str:
    """The user's directory of holder sockets: in ``$XDG_RUNTIME_DIR``, else the temporary directory."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not base.startswith("/"):
        base = tempfile.gettempdir()
    return os.path.join(base, f"hpc-stateless-buildah-{host_uid()}")


def private_dir(path: str) -> None:
    """Create directory ``path`` with mode 0700, or check that it is one of ours no one else may enter (nor write
    above: module_utils/_paths.py private_dir)."""
    try:
        _paths.private_dir(path, "the directory of the buildah agent's sockets")
    except OSError as exc:
        raise AgentUnavailable(f"{path} is not a directory private to uid {os.getuid()}, so the agent's socket "
                               f"cannot be there: {exc.strerror or exc}") from None
    info = os.lstat(path)
    if info.st_mode & 0o077:
        raise AgentUnavailable(f"{path} is not a directory private to uid {os.getuid()} (owner {info.st_uid}, mode "
                               f"{stat.filemode(info.st_mode)}), so the agent's socket cannot be there: remove it")


def address(container: str, user: str | None, owner: int, directory: str | None = None) -> bytes:
    """Socket path of the holder of ``container`` (commands as ``user``) for playbook ``owner``."""
    digest = hashlib.sha256(f"{container}\0{user or ''}".encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return os.fsencode(os.path.join(directory or socket_dir(), f"{digest}.{owner}.sock"))


def listening(path: bytes) -> bool:
    """Whether a process listens on socket ``path`` (a socket file whose holder was killed refuses)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # there, but busy: a full backlog
    finally:
        probe.close()
    return True


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def agent_argv(client: Buildah, container: str, user: str | None) -> list[str]:
    """``buildah run [--user u] <container> -- python3 -I -B -c <agent>``."""
    options = ["--user", user] if user and user != "root" else []
    return client.argv("run", *options, container, "--", "python3", "-I", "-B", "-c", AGENT_SOURCE)


# -- the holder process ----------------------------------------------------------------------
def _read_fd(fd: int) -> Callable[[int], bytes]:
    return lambda size: os.read(fd, size)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Holder:
    """Keeps one agent running in ``container`` and relays frames between it and one client at a time."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.container: str = config["container"]
        self.user: str | None = config.get("user")
        self.owner: int = config["owner"]
        self.owner_start: str | None = config.get("owner_start")
        self.idle: float = float(config.get("idle_timeout") or DEFAULT_IDLE)
        self.client = Buildah(config.get("executable") or "buildah", config.get("isolation"))
        self.address: bytes = os.fsencode(config["address"])
        self.bound: tuple[int, int] | None = None  # (device, inode) of our socket file
        self.proc: subprocess.Popen | None = None
        self.hello: dict[str, Any] = {}
        self.stderr_tail = b""
        self.peer: socket.socket | None = None
        self.pending: set[int] = set()  # requests sent to the agent, not answered yet
        self.open_puts: set[int] = set()  # uploads of the current client, not finished yet
        self.stop_reason = ""
        self.stopper: socket.socket | None = None

    # agent ------------------------------------------------------------------------------
    def start_agent(self) -> None:
        """Start the agent; repeat a start that never said hello. AgentUnavailable after the last."""
        said = ""
        for _attempt in range(START_ATTEMPTS):
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                agent_argv(self.client, self.container, self.user), env=command_env(self.client.env),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)
            for pipe in self._pipes()[:2]:  # the agent widens its ends of the runtime's relay
                agent.widen_pipe(pipe.fileno())
            hello = self._await_hello()
            if hello is not None:
                self.hello = hello
                return
            self._stop_process()  # it may still run after saying something else than hello
            said = self.stderr_tail.decode("utf-8", "replace").strip()
            if self.stop_reason:
                break
        raise AgentUnavailable(f"buildah run of the agent in container {self.container} exited before it started "
                               f"(rc={self.proc.returncode if self.proc else '?'}): {said or 'no message'}")

    def _await_hello(self) -> dict[str, Any] | None:
        _stdin, stdout, stderr = self._pipes()
        out, err = stdout.fileno(), stderr.fileno()
        deadline = time.monotonic() + START_TIMEOUT
        self.stderr_tail = b""
        while time.monotonic() < deadline and not self.stop_reason:
            ready = select.select([out] + ([err] if err >= 0 else []), [], [], TICK)[0]
            if err in ready and not self._drain_stderr():
                err = -1
            if out in ready:
                try:
                    frame = agent.read_frame(_read_fd(out))
                except (agent.ProtocolError, ValueError):
                    frame = None
                if frame and frame[0].get("hello") == agent.HELLO:
                    return frame[0]
                return None
            if err == -1 and self.proc.poll() is not None:
                return None
            self._check_owner()
        self._stop_process()
        return None

    def _pipes(self) -> tuple[Any, Any, Any]:
        """stdin, stdout and stderr of ``buildah run`` (the agent's streams)."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None or proc.stderr is None:
            raise RuntimeError(f"the agent of container {self.container} was never started")
        return proc.stdin, proc.stdout, proc.stderr

    def _drain_stderr(self) -> bool:
        data = os.read(self._pipes()[2].fileno(), 65536)
        self.stderr_tail = (self.stderr_tail + data)[-STDERR_TAIL:]
        return bool(data)

    def _stop_process(self) -> None:
        """Close the agent's stdin (it kills a running command and exits), then wait for buildah run."""
        proc = self.proc
        if proc is None:
            return
        if proc.stdin and not proc.stdin.closed:
            try:
                proc.stdin.close()
            except OSError:
                pass
        for sig, grace in ((None, STOP_GRACE), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue

    # liveness ---------------------------------------------------------------------------
    def _check_owner(self) -> None:
        if start_time(self.owner) != self.owner_start:
            self.stop_reason = f"ansible-playbook (pid {self.owner}) is gone"

    def _container_gone(self) -> bool:
        try:
            self.client.run("inspect", "--type", "container", "--format", "{{.ContainerID}}", self.container)
        except BuildahError as exc:
            return exc.gone
        return False

    # relaying ---------------------------------------------------------------------------
    def _send_peer(self, data: bytes) -> None:
        if self.peer is None:
            return
        try:
            self.peer.sendall(data)
        except OSError:
            self._peer_gone()

    def _peer_gone(self) -> None:
        """The client left: abort its unfinished uploads; answers still due are dropped when they come."""
        if self.peer is not None:
            self.peer.close()
        self.peer = None
        for rid in sorted(self.open_puts):
            _write_all(self._pipes()[0].fileno(), agent.encode({"id": rid, "op": "abort"}))
            self.pending.add(rid)
        self.open_puts.clear()

    def _from_peer(self) -> None:
        if self.peer is None:
            return
        try:
            frame = agent.read_frame(self.peer.recv)
        except (agent.ProtocolError, ValueError, OSError):
            frame = None
        if frame is None:
            self._peer_gone()
            return
        header, body = frame
        if header.get("op") == "stop":
            self.stop_reason = "the connection was reset"
            self.stopper, self.peer = self.peer, None
            return
        rid = header.get("id")
        if header.get("op") == "put" and header.get("more"):
            self.open_puts.add(rid)
        else:
            self.open_puts.discard(rid)
            self.pending.add(rid)
        _write_all(self._pipes()[0].fileno(), agent.encode(header, body))

    def _from_agent(self) -> bool:
        """Relay one answer; False when the agent is gone."""
        try:
            frame = agent.read_frame(_read_fd(self._pipes()[1].fileno()))
        except (agent.ProtocolError, ValueError, OSError):
            frame = None
        if frame is None:
            return False
        header, body = frame
        rid = header.get("id")
        if not header.get("more"):
            self.pending.discard(rid)
        self._send_peer(agent.encode(header, body))
        return True

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        if peer_uid(conn) != os.getuid():
            conn.close()
            return
        conn.settimeout(PEER_TIMEOUT)  # a client stuck inside a frame must not stop the holder's watch
        self.peer = conn
        self._send_peer(agent.encode({"id": 0, "ready": True, **self.hello}))

    def _owner_fd(self) -> int:
        """A pidfd of the playbook (readable the moment it exits), -1 where the kernel has none."""
        try:
            fd = os.pidfd_open(self.owner)  # type: ignore[attr-defined]  # Python >= 3.9, Linux >= 5.3
        except (AttributeError, OSError):
            return -1
        self._check_owner()  # the pid is the playbook's, not a reused one
        return fd

    def serve(self, listener: socket.socket) -> None:
        _stdin, stdout, stderr = self._pipes()
        out, err = stdout.fileno(), stderr.fileno()
        owner = self._owner_fd()
        last_use = last_check = time.monotonic()
        while not self.stop_reason:
            watch = [out] + ([err] if err >= 0 else []) + ([owner] if owner >= 0 else [])
            if self.peer is not None:
                watch.append(self.peer.fileno())
            elif not self.pending:
                watch.append(listener.fileno())
            ready = select.select(watch, [], [], TICK)[0]
            if owner in ready:
                self.stop_reason = f"ansible-playbook (pid {self.owner}) is gone"
                continue
            if err in ready and not self._drain_stderr():
                err = -1
            if out in ready and not self._from_agent():
                self.stop_reason = "the agent exited: " + self.stderr_tail.decode("utf-8", "replace").strip()
                continue
            if self.peer is not None and self.peer.fileno() in ready:
                self._from_peer()
            elif listener.fileno() in ready:
                self._accept(listener)
            now = time.monotonic()
            if ready or self.peer is not None or self.pending:
                last_use = now
            self._check_owner()
            if now - last_use > self.idle:
                self.stop_reason = f"idle for {self.idle:.0f} s"
            elif self.peer is None and not self.pending and now - last_check > CONTAINER_CHECK:
                last_check = now
                if self._container_gone():
                    self.stop_reason = f"container {self.container} is gone"
        if owner >= 0:
            os.close(owner)

    def _locked(self) -> Flock:
        """The lock of the socket directory: binding, and removing socket files, happen one holder at a time."""
        return Flock(os.path.dirname(self.address), directory=True)

    def _listen(self) -> socket.socket | None:
        """Listen on our socket file; None when another holder serves it. Removes the files killed holders left."""
        directory = os.path.dirname(self.address)
        private_dir(os.fsdecode(directory))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self._locked():
                for name in os.listdir(directory):
                    path = os.path.join(directory, name)
                    if name.endswith(b".sock") and stat.S_ISSOCK(os.lstat(path).st_mode) and not listening(path):
                        os.unlink(path)
                try:
                    listener.bind(self.address)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        listener.close()
                        return None  # another holder serves this container for this playbook
                    raise
                listener.listen(16)  # under the lock: a holder that finds the file finds it listening
                info = os.stat(self.address)
                self.bound = (info.st_dev, info.st_ino)
        except BaseException:
            listener.close()
            raise
        return listener

    def _unlink(self) -> None:
        """Remove our socket file, if it is still ours."""
        if self.bound is None:
            return
        with self._locked():
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(self.address)
                if (info.st_dev, info.st_ino) == self.bound:
                    os.unlink(self.address)

    def run(self) -> None:
        listener = self._listen()
        if listener is None:
            return
        try:
            try:
                self.start_agent()
            except AgentUnavailable as exc:
                self._refuse(listener, str(exc))
                return
            self.serve(listener)
        finally:
            self._unlink()  # first: a client that comes now starts a new holder instead of waiting on this one
            listener.close()
            self._stop_process()
            if self.peer is not None:
                self.peer.close()
            if self.stopper is not None:
                try:
                    self.stopper.sendall(agent.encode({"id": 0, "stopped": True, "reason": self.stop_reason}))
                except OSError:
                    pass
                self.stopper.close()

    def _refuse(self, listener: socket.socket, error: str) -> None:
        """Tell the clients waiting for the agent that it did not start."""
        listener.settimeout(1.0)
        while True:
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            try:
                conn.sendall(agent.encode({"id": 0, "ready": False, "error": error}))
            except OSError:
                pass
            conn.close()


def _on_signal(holder: Holder) -> Callable[..., None]:
    def handler(signum: int, _frame: Any) -> None:
        holder.stop_reason = f"signal {signum}"
    return handler


def daemon(config: dict[str, Any]) -> None:
    """Entry point of the holder process (started by :meth:`Session.start_holder`): detach, then serve."""
    if os.fork():
        os._exit(0)  # pylint: disable=protected-access
    os.chdir("/")
    holder = Holder(config)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal(holder))
    try:
        holder.run()
    finally:
        os._exit(0)  # pylint: disable=protected-access


BOOT = ("import json, sys; config = json.loads(sys.argv[1]); sys.path[:0] = config['path']; "
        "from ansible_collections.hpc.stateless.plugins.module_utils._buildah_agent.holder import daemon; daemon(config)")


# -- the client (in an Ansible worker) ---------------------------------------------------------
class Session:
    """A worker's connection to the holder of ``container``; starts the holder when there is none."""

    def __init__(self, container: str, user: str | None, client: Buildah, idle_timeout: float = DEFAULT_IDLE,
                 log: Callable[[str], None] | None = None, owner: int | None = None) -> None:
        self.container, self.user, self.client = container, user, client
        self.idle_timeout = idle_timeout
        self.log = log or (lambda _msg: None)
        self.owner = owner or owner_pid()
        self.address = address(container, user, self.owner)
        self.sock: socket.socket | None = None
        self.next_id = 0
        self.hello: dict[str, Any] = {}
        self.warm = False  # whether the last command was a module the agent's warm python ran

    # connecting -------------------------------------------------------------------------
    def _try_connect(self) -> socket.socket | None:
        """A connection to the holder (blocking calls time out after READY_TIMEOUT), None when none listens."""
        private_dir(os.fsdecode(os.path.dirname(self.address)))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(READY_TIMEOUT)
        try:
            sock.connect(self.address)
        except (ConnectionRefusedError, FileNotFoundError):
            sock.close()
            return None
        except OSError as exc:
            sock.close()
            raise AgentUnavailable(f"cannot connect to the agent holder of container {self.container} at "
                                   f"{os.fsdecode(self.address)}: {exc}") from None
        if peer_uid(sock) != os.getuid():
            sock.close()
            raise AgentUnavailable(f"the socket of the agent of container {self.container} belongs to another user")
        return sock

    def start_holder(self) -> None:
        """Start a holder (it detaches at once) and wait until it listens."""
        config = {"container": self.container, "user": self.user, "owner": self.owner,
                  "owner_start": start_time(self.owner), "idle_timeout": self.idle_timeout,
                  "executable": self.client.executable, "isolation": self.client.isolation,
                  "address": os.fsdecode(self.address), "path": [collection_root()]}
        self.log(f"starting the agent holder of container {self.container}")
        proc = subprocess.Popen([sys.executable, "-B", "-c", BOOT, json.dumps(config)],  # pylint: disable=consider-using-with
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, env=command_env())
        rc = proc.wait()
        if rc != 0:
            raise AgentUnavailable(f"the agent holder of container {self.container} could not start (rc={rc})")

    def connect(self) -> None:
        """Connect to the holder, starting one first when none listens; AgentUnavailable when the agent cannot run."""
        if self.sock is not None:
            return
        sock = self._try_connect()
        if sock is None:
            self.start_holder()
            deadline = time.monotonic() + 30.0
            while sock is None and time.monotonic() < deadline:
                time.sleep(0.01)
                sock = self._try_connect()
            if sock is None:
                raise AgentUnavailable(f"the agent holder of container {self.container} did not listen within 30 s")
        try:
            frame = agent.read_frame(sock.recv)
        except TimeoutError:
            sock.close()
            raise AgentUnavailable(f"the agent holder of container {self.container} did not say whether its agent is "
                                   f"ready within {READY_TIMEOUT:g} s ({os.fsdecode(self.address)})") from None
        except (agent.ProtocolError, ValueError, OSError) as exc:
            sock.close()
            raise AgentUnavailable(f"the agent holder of container {self.container} broke off: {exc}") from None
        if frame is None or not frame[0].get("ready"):
            sock.close()
            said = frame[0].get("error") if frame else "it closed the connection"
            raise AgentUnavailable(f"the agent in container {self.container} is not available: {said}")
        sock.settimeout(None)  # a command's answer takes as long as the command
        self.sock, self.hello = sock, frame[0]

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None

    def stop(self) -> bool:
        """Ask this playbook's holder of the container to stop, and wait until it did; False when none ran."""
        self.close()
        sock = self._try_connect()
        if sock is None:
            return False
        sock.settimeout(READY_TIMEOUT + STOP_GRACE)  # the holder's own bounds, and some
        try:
            agent.read_frame(sock.recv)  # ready (or refused)
            sock.sendall(agent.encode({"id": 0, "op": "stop"}))
            agent.read_frame(sock.recv)  # stopped, once the agent and buildah run have exited
        except (agent.ProtocolError, ValueError, OSError):
            pass
        finally:
            sock.close()
        return True

    # requests ---------------------------------------------------------------------------
    def _lost(self, what: str, exc: Exception | str) -> AgentLost:
        self.close()
        return AgentLost(f"the agent in container {self.container} went away before it answered {what} ({exc}); "
                         f"it may have run, so it is not run again. Run the play again, or set "
                         f"ansible_hpc_stateless_buildah_persistent=false to use one buildah run per task")

    def _socket(self) -> socket.socket:
        if self.sock is None:
            raise AgentLost(f"no connection to the agent of container {self.container}")
        return self.sock

    def _send(self, data: bytes) -> None:
        self._socket().sendall(data)

    def _answers(self, rid: int, what: str):
        """Frames answering request ``rid`` up to the final one."""
        sock = self._socket()
        while True:
            try:
                frame = agent.read_frame(sock.recv)
            except (agent.ProtocolError, ValueError, OSError) as exc:
                raise self._lost(what, exc) from None
            if frame is None:
                raise self._lost(what, "connection closed")
            header, body = frame
            if header.get("id") != rid:
                raise self._lost(what, f"an answer to request {header.get('id')} instead of {rid}")
            yield header, body
            if not header.get("more"):
                return

    def _new_id(self) -> int:
        self.connect()
        self.next_id += 1
        return self.next_id

    def exec(self, cmd: bytes, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Run ``cmd`` once in the container; ``(rc, stdout, stderr)``."""
        rid = self._new_id()
        what = f"the command {cmd[:200]!r}"
        try:
            self._send(agent.exec_request(rid, cmd, stdin))
        except OSError as exc:
            raise self._lost(what, exc) from None
        for header, body in self._answers(rid, what):
            if "error" in header:
                raise AgentLost(f"the agent in container {self.container} could not run {what}: {header['error']}")
            self.warm = bool(header.get("warm"))
            return agent.exec_result(header, body)
        raise self._lost(what, "no answer")

    def put(self, local: bytes, remote: str) -> None:
        """Copy host file ``local`` to ``remote`` in the container, in chunks."""
        rid = self._new_id()
        what = f"the copy to {remote}"
        try:
            with open(local, "rb") as handle:
                chunk = handle.read(agent.CHUNK)
                while True:
                    following = handle.read(agent.CHUNK) if chunk else b""
                    self._send(agent.encode({"id": rid, "op": "put", "path": remote, "more": bool(following)}, chunk))
                    if not following:
                        break
                    chunk = following
        except OSError as exc:
            raise self._lost(what, exc) from None
        for header, _body in self._answers(rid, what):
            if header.get("rc"):
                raise OSError(f"cannot write {remote} in container {self.container}: {header.get('error')}")

    def fetch(self, remote: str, local: bytes) -> None:
        """Copy ``remote`` in the container to host file ``local``, replaced only once the whole file came."""
        rid = self._new_id()
        what = f"the copy of {remote}"
        # Opened before the request: a local error must not leave its answer unread on the socket.
        target = agent.Replacement(os.path.realpath(local))  # through a symlink at ``local``, as writing to it did
        try:
            try:
                self._send(agent.encode({"id": rid, "op": "fetch", "path": remote}))
            except OSError as exc:
                raise self._lost(what, exc) from None
            for header, body in self._answers(rid, what):
                if header.get("more"):
                    try:
                        target.write(body)
                    except OSError:
                        self.close()  # the rest of the answer is dropped by the holder, not read as the next one's
                        raise
                elif header.get("rc"):
                    raise OSError(f"cannot read {remote} in container {self.container}: {header.get('error')}")
            target.commit()
        finally:
            target.discard()
