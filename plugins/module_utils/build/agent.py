# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The agent that runs inside a buildah working container, and the frames it speaks.

The ``hpc.stateless.buildah`` connection keeps one agent per layer: ``buildah run <container> --
python3 -I -B -c <this file's source>``, started by the holder (:mod:`.holder`). The agent reads
requests from its standard input and writes one answer per request to its standard output; it
writes no file of its own in the container (its code travels as ``-c``, ``-B`` writes no bytecode).

A frame is ``>II`` (header length, body length), a JSON header and a binary body. Every request
header has an ``id`` and an ``op``; the answer that ends a request has ``more`` false:

* ``exec``: body is the command (``cmd_len`` bytes) followed by its standard input (``stdin``
  true) -> ``rc`` and ``out`` (length of stdout), body stdout + stderr. Run with ``/bin/sh -c``
  exactly once.
* ``put``: ``path``, ``more``; the body is the next chunk of the file. The last frame (``more``
  false) is answered with ``rc`` 0, or ``rc`` 1 and ``error``; ``abort`` ends an unfinished put
  and removes what it wrote.
* ``fetch``: ``path`` -> frames with ``more`` true carrying chunks, then ``rc`` (and ``error``).

On start the agent writes a hello frame (``id`` 0, :data:`HELLO`). When its standard input
closes (the holder is gone) while a command runs, it kills the command and everything it
started, so nothing of the agent outlives its holder.

This module uses the standard library only and Python 3.8 syntax: it is the agent's source.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading

HELLO = "hpc-stateless-agent"
PROTOCOL = 1
HEAD = struct.Struct(">II")
CHUNK = 1 << 20
# A header bigger than this is no header of ours: the stream is out of step.
MAX_HEADER = 1 << 20


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol, or the stream ended mid-frame."""


def encode(header: dict, body: bytes = b"") -> bytes:
    """One frame: lengths, JSON header (non-ASCII and surrogate-escaped text as JSON escapes), body."""
    raw = json.dumps(header, separators=(",", ":")).encode("ascii")
    return HEAD.pack(len(raw), len(body)) + raw + body


def decode_head(data: bytes) -> tuple:
    """``(header length, body length)`` of the first :data:`HEAD` bytes of a frame."""
    size, body = HEAD.unpack(data)
    if size > MAX_HEADER:
        raise ProtocolError("header of %d bytes: the stream is out of step" % size)
    return size, body


def read_exactly(read, size: int) -> bytes:
    """``size`` bytes from ``read(n)``; b"" on a clean end before the first byte, else ProtocolError."""
    parts, left = [], size
    while left:
        part = read(left)
        if not part:
            if left == size:
                return b""
            raise ProtocolError("the stream ended inside a frame (%d of %d bytes)" % (size - left, size))
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_frame(read):
    """The next ``(header, body)`` from ``read(n)``, or None when the stream ended between frames."""
    head = read_exactly(read, HEAD.size)
    if not head:
        return None
    size, length = decode_head(head)
    header = json.loads(read_exactly(read, size).decode("ascii") if size else "{}")
    body = read_exactly(read, length) if length else b""
    if len(body) != length or (size and not header):
        raise ProtocolError("the stream ended inside a frame")
    return header, body


def exec_request(rid: int, cmd: bytes, stdin: bytes | None) -> bytes:
    """Frame of an ``exec`` request."""
    return encode({"id": rid, "op": "exec", "cmd_len": len(cmd), "stdin": stdin is not None}, cmd + (stdin or b""))


def exec_result(header: dict, body: bytes) -> tuple:
    """``(rc, stdout, stderr)`` of the answer to an ``exec``."""
    split = header["out"]
    return header["rc"], body[:split], body[split:]


# -- inside the container ---------------------------------------------------------------------
def descendants(root: int, proc: str = "/proc") -> list:
    """Pids of every process below ``root`` (children first found, then theirs), from ``/proc``."""
    children: dict = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after its last ")" are fixed.
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def kill_tree(root: int) -> None:
    """SIGKILL every process below ``root`` (stopped first, so none starts another in between)."""
    pids = descendants(root)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def run_command(cmd: bytes, stdin: bytes | None) -> tuple:
    """Run ``/bin/sh -c cmd`` once with ``stdin`` (None: /dev/null); ``(rc, stdout, stderr)``."""
    proc = subprocess.Popen([b"/bin/sh", b"-c", cmd], stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)
    out, err = proc.communicate(stdin)
    return proc.returncode, out, err


def _fs(path: str) -> bytes:
    return os.fsencode(path)


class Agent:
    """Answers requests read from ``read`` with frames written through ``write``."""

    def __init__(self, read, write) -> None:
        self.read, self.write = read, write
        self.puts: dict = {}  # id -> (open file, path) of unfinished puts

    def serve(self) -> None:
        self.write(encode({"id": 0, "hello": HELLO, "protocol": PROTOCOL, "pid": os.getpid(),
                           "python": "%d.%d" % sys.version_info[:2]}))
        while True:
            frame = read_frame(self.read)
            if frame is None:
                break
            self.handle(*frame)
        for rid in list(self.puts):
            self.abort(rid)

    def handle(self, header: dict, body: bytes) -> None:
        rid, op = header.get("id"), header.get("op")
        try:
            if op == "exec":
                split = header["cmd_len"]
                rc, out, err = run_command(body[:split], body[split:] if header.get("stdin") else None)
                self.write(encode({"id": rid, "rc": rc, "out": len(out)}, out + err))
            elif op == "put":
                self.put(rid, header, body)
            elif op == "fetch":
                self.fetch(rid, header["path"])
            elif op == "abort":
                self.abort(rid)
                self.write(encode({"id": rid, "rc": 1, "error": "aborted"}))
            else:
                self.write(encode({"id": rid, "rc": 1, "error": "unknown request %r" % op}))
        except OSError as exc:
            self.abort(rid)
            self.write(encode({"id": rid, "rc": 1, "error": "%s: %s" % (header.get("path", op), exc)}))

    def put(self, rid: int, header: dict, body: bytes) -> None:
        if rid not in self.puts:
            path = _fs(header["path"])
            self.puts[rid] = (open(path, "wb"), path)  # pylint: disable=consider-using-with
        handle = self.puts[rid][0]
        handle.write(body)
        if not header.get("more"):
            del self.puts[rid]
            handle.close()
            self.write(encode({"id": rid, "rc": 0}))

    def abort(self, rid: int) -> None:
        """Close and remove the file of an unfinished put (nothing half-written stays)."""
        handle, path = self.puts.pop(rid, (None, None))
        if handle is not None:
            handle.close()
            try:
                os.unlink(path)
            except OSError:
                pass

    def fetch(self, rid: int, path: str) -> None:
        with open(_fs(path), "rb") as handle:
            while True:
                chunk = handle.read(CHUNK)
                if not chunk:
                    break
                self.write(encode({"id": rid, "more": True}, chunk))
        self.write(encode({"id": rid, "rc": 0}))


def _watch_holder(fd: int) -> None:
    """When the holder's end of our stdin closes while a command runs, kill the command and leave."""
    poller = select.poll()
    poller.register(fd, 0)  # POLLHUP and POLLERR are always reported; pending requests are not
    while True:
        for _fd, event in poller.poll():
            if event & (select.POLLHUP | select.POLLERR):
                kill_tree(os.getpid())
                os._exit(0)  # pylint: disable=protected-access


def main() -> None:
    """Entry point inside the container: serve stdin/stdout until stdin closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Nothing a command prints reaches our stdout but our frames: commands get pipes of their own.

    def write(data: bytes) -> None:
        stdout.write(data)
        stdout.flush()

    threading.Thread(target=_watch_holder, args=(stdin.fileno(),), daemon=True).start()
    Agent(stdin.read, write).serve()


if __name__ == "__main__":
    main()
