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
* ``put``: ``path``, ``more``; the body is the next chunk of the file. The chunks go to a new file
  next to ``path`` (:class:`Replacement`), renamed over ``path`` once the last frame (``more``
  false) came, which is answered with ``rc`` 0, or ``rc`` 1 and ``error``; ``abort`` ends an
  unfinished put and removes its new file: ``path`` is never seen half-written nor lost.
* ``fetch``: ``path`` -> frames with ``more`` true carrying chunks, then ``rc`` (and ``error``).

On start the agent writes a hello frame (``id`` 0, :data:`HELLO`). When its standard input
closes (the holder is gone) while a command runs, it kills the command and everything it
started, so nothing of the agent outlives its holder.

This module uses the standard library only and Python 3.8 syntax: it is the agent's source.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import stat
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
                line = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after its last ")" are fixed.
        fields = line[line.rfind(b")") + 2:].split()
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


def umask() -> int:
    """The process's umask, read without changing it where ``/proc`` tells (threads may create files meanwhile)."""
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Replacement:
    """A new file for ``path``, written under a temporary name in its directory and renamed over it when complete.

    Until :meth:`commit`, ``path`` is untouched and nothing is under its name that was not there before;
    :meth:`discard` removes the temporary file only. The temporary file is created exclusively (never
    through a link, never an existing file) and readable by its owner only while it is written. A symlink
    at ``path`` is replaced, not followed: resolve ``path`` first to write through it. ``dir_fd``: ``path``
    is relative to that open directory.

    Once committed, the file has the mode and owner of the regular file it replaced, as writing into that
    file did (the owner where the process may set it), else mode ``0o666`` less the umask and the process's
    owner. Hard links to the replaced file keep the old content.
    """

    def __init__(self, path: bytes, dir_fd: int | None = None) -> None:
        self.path, self.dir_fd = path, dir_fd
        directory, name = os.path.split(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            # Short enough for any name: the final name's start, and 96 random bits.
            self.temp = os.path.join(directory, b".%s.%s.part" % (name[:180], os.urandom(12).hex().encode("ascii")))
            try:
                fd = os.open(self.temp, flags, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, os.fsdecode(path)) from None
        self.handle = os.fdopen(fd, "wb")
        self.done = False

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def commit(self) -> None:
        """Give the new file its mode and owner and rename it over ``path``; the temporary file is gone on failure."""
        try:
            fd = self.handle.fileno()
            try:
                old = os.stat(self.path, dir_fd=self.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat.S_ISREG(old.st_mode):
                if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(fd, old.st_uid, old.st_gid)
                    except PermissionError:
                        pass  # not ours to give away: the new file stays the writer's, as a new file would
                os.fchmod(fd, stat.S_IMODE(old.st_mode))  # after fchown, which drops set-id bits
            else:
                os.fchmod(fd, 0o666 & ~umask())
            self.handle.close()
            os.rename(self.temp, self.path, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
            self.done = True
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Close and remove the temporary file (``path`` keeps what it had); nothing once committed."""
        if self.done:
            return
        self.done = True
        self.handle.close()
        try:
            os.unlink(self.temp, dir_fd=self.dir_fd)
        except OSError:
            pass  # the directory went away with it


class Agent:
    """Answers requests read from ``read`` with frames written through ``write``."""

    def __init__(self, read, write) -> None:
        self.read, self.write = read, write
        self.puts: dict = {}  # id -> Replacement of an unfinished put

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
            # Written through a symlink at the path, as opening the path for writing did.
            self.puts[rid] = Replacement(os.path.realpath(_fs(header["path"])))
        target = self.puts[rid]
        target.write(body)
        if not header.get("more"):
            del self.puts[rid]
            target.commit()
            self.write(encode({"id": rid, "rc": 0}))

    def abort(self, rid: int) -> None:
        """Remove the new file of an unfinished put; the file it was to replace stays as it was."""
        target = self.puts.pop(rid, None)
        if target is not None:
            target.discard()

    def fetch(self, rid: int, path: str) -> None:
        """Stream the regular file ``path`` (a FIFO or a device would block or never end: refused)."""
        fd = os.open(_fs(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", path)
        with open(fd, "rb") as handle:
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
