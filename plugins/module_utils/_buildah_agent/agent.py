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

A pipelined Python module (Ansible's ``/bin/sh -c '[NAME=value ...] <python> && sleep 0'`` with the
AnsiballZ wrapper as standard input) runs in a *warm python* instead (:class:`WarmPython`): a fork of
the agent that imported ``ansible.module_utils.basic`` once, from the first module's payload held in
memory, and forks once per module run, so each module still runs in a fresh process of its own
without paying that import. The exec answer then carries ``warm`` true. Anything else, and every
module the warm python cannot run exactly as that command would, runs with ``/bin/sh -c``.

This module uses the standard library only and Python 3.8 syntax: it is the agent's source.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import gc
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import pkgutil
import posixpath
import re
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import types
import warnings
import zipfile
import zipimport

HELLO = "hpc-stateless-agent"
PROTOCOL = 1
HEAD = struct.Struct(">II")
CHUNK = 1 << 20
# What each pipe between the holder and the agent can hold: a whole module request (100-400 kB).
# buildah's chroot runtime relays the agent's standard streams; when the tail of a frame finds the
# pipe into the agent full, that tail waits about 0.1 s before it moves on (measured: a 400 kB
# request took 310 ms through 64 KiB pipes, 7 ms through 1 MiB ones; docs/connection.md).
PIPE_SIZE = 1 << 20
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


def widen_pipe(fd: int, size: int = PIPE_SIZE) -> None:
    """Let the pipe ``fd`` hold ``size`` bytes where the kernel allows (not a pipe, above ``fs.pipe-max-size``
    or beyond the user's pipe quota: it keeps its size, which is only slower)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)  # the constant is Python 3.10's
    except OSError:
        pass


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


# -- the warm python -----------------------------------------------------------------------
# A word of a command as shlex.quote writes it: safe characters, '...' and "'" only (no expansion).
_WORD = re.compile(r"""((?:[\w@%+=:,./-]+|'[^']*'|"'")+|&&)(?:\s+|$)""", re.ASCII)
_QUOTED = re.compile(r"'([^']*)'|\"(')\"")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=", re.ASCII)
SHELLS = ("sh", "bash", "dash")
ANSIBALLZ = (b"def _ansiballz_main():", b"runpy.run_module(", b"from ansible.module_utils import basic")
ZIPDATA = b"\n    ZIPDATA = "  # the one line of the wrapper that holds its payload, base64 in quotes
# Read by Python at start (the warm python started with the agent's): a request setting them otherwise runs cold.
_STARTUP = re.compile(r"PYTHON|LANG$|LC_|TZ$", re.ASCII)
# PYTHON* variables that change nothing a module's result shows (the warm python writes no bytecode anyway).
_HARMLESS = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
WARM_ORIGIN = "<warm>/"  # __file__ prefix of what the warm python imported, until a module's run rebinds it
LD_CACHE = "/etc/ld.so.cache"  # rewritten when a package brings shared libraries (libselinux: basic's import)


def shell_words(text: str) -> list | None:
    """``[(raw, value)]`` of ``text`` when every word is plain or quoted as shlex.quote does, else None."""
    words, pos, text = [], 0, text.strip()
    while pos < len(text):
        match = _WORD.match(text, pos)
        if match is None:
            return None
        raw = match.group(1)
        words.append((raw, _QUOTED.sub(lambda part: part.group(1) or part.group(2) or "", raw)))
        pos = match.end()
    return words


def pipelined_python(cmd: bytes) -> tuple | None:
    """``(python, {name: value})`` of ``/bin/sh -c '[NAME=value ...] <python> && sleep 0'``, else None."""
    try:
        outer = shell_words(cmd.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    if (not outer or len(outer) != 3 or os.path.basename(outer[0][1]) not in SHELLS or not outer[0][1].startswith("/")
            or outer[1][1] != "-c"):
        return None
    inner = shell_words(outer[2][1])
    if not inner or len(inner) < 4 or [raw for raw, _value in inner[-3:]] != ["&&", "sleep", "0"]:
        return None
    *assignments, (raw, python) = inner[:-3]
    env = {}
    for raw_assignment, value in assignments:
        if not _ASSIGNMENT.match(raw_assignment):
            return None
        name, _eq, value = value.partition("=")
        env[name] = value
    if _ASSIGNMENT.match(raw) or not python.startswith("/"):
        return None
    return python, dict(shell_env(outer[0][1], python), **env)


def shell_env(shell: str, python: str) -> dict:
    """What ``shell`` adds to the environment of the ``python`` it starts (its assignments aside)."""
    pwd = os.environ.get("PWD", "")
    try:
        here, there = os.stat("."), os.stat(pwd) if pwd.startswith("/") else None
    except OSError:
        here, there = None, None
    added = {"PWD": pwd if here and there and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
             else os.getcwd()}
    if os.path.basename(os.path.realpath(shell)) == "bash":  # /bin/sh may be bash
        try:
            level = int(os.environ.get("SHLVL", "0")) + 1
        except ValueError:
            level = 1
        added.update(SHLVL=str(level), _=python)
    return added


def zipdata(wrapper: bytes) -> bytes | None:
    """The base64 payload of an AnsiballZ wrapper (its one ``ZIPDATA = '...'`` line), None when it has not one."""
    start = wrapper.find(ZIPDATA)
    if start < 0 or wrapper.find(ZIPDATA, start + 1) >= 0:
        return None
    start += len(ZIPDATA)
    quote, end = wrapper[start:start + 1], wrapper.find(b"\n", start)
    if quote not in (b"'", b'"') or end < 0 or wrapper[end - 1:end] != quote:
        return None
    return wrapper[start + 1:end - 1]


def _venv(python: str) -> str | None:
    """The root of the virtual environment ``python`` belongs to, None when it is a base interpreter."""
    for root in (os.path.dirname(python), os.path.dirname(os.path.dirname(python))):
        if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
            return root
    return None


def cold_reason(python: str, env: dict) -> str | None:
    """Why ``python`` with ``env`` added to ours would not start as the warm python did; None when it would."""
    if os.path.realpath(python) != os.path.realpath(sys.executable) or _venv(python) != _venv(sys.executable):
        return "another python than the agent's (%s)" % sys.executable
    merged = dict(os.environ, **env)
    for name, value in merged.items():
        if name.startswith("PYTHON") and name not in _HARMLESS:
            return "%s is set" % name
        if _STARTUP.match(name) and value != os.environ.get(name):
            return "%s differs" % name
    home = merged.get("HOME") or os.path.expanduser("~")
    site = os.path.join(home, ".local", "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    if os.path.isdir(site):
        return "a user site-packages directory exists (%s)" % site
    return None


def _stamps(paths: list) -> list:
    found = []
    for path in paths:
        try:
            info = os.stat(path)
            found.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except OSError:
            found.append(None)
    return found


class _MemoryFinder:
    """Imports ``ansible`` and ``ansible.*`` from a module's payload held in memory (nothing written)."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive
        self.loaded: dict = {}  # module name -> (zip entry, CRC, size)
        self.modules: dict = {}  # module name -> (module, zip entry) (sys.modules may hold another under its name)

    def find_spec(self, name, path=None, target=None):  # pylint: disable=unused-argument
        if name != "ansible" and not name.startswith("ansible."):
            return None
        base = name.replace(".", "/")
        for entry, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if entry in self.archive.NameToInfo:
                spec = importlib.util.spec_from_loader(name, self, origin=WARM_ORIGIN + entry, is_package=package)
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = [WARM_ORIGIN + base]
                return spec
        return None

    def create_module(self, spec):  # pylint: disable=unused-argument
        return None

    def exec_module(self, module) -> None:
        entry = module.__spec__.origin[len(WARM_ORIGIN):]
        info = self.archive.getinfo(entry)
        self.loaded[module.__name__] = (entry, info.CRC, info.file_size)
        self.modules[module.__name__] = (module, entry)
        exec(compile(self.archive.read(entry), module.__spec__.origin, "exec", dont_inherit=True),  # pylint: disable=exec-used
             module.__dict__)

    def get_source(self, name: str) -> str | None:
        loaded = self.loaded.get(name)
        return self.archive.read(loaded[0]).decode("utf-8") if loaded else None


class _Rebind:
    """In a module's process: at its first import under ``ansible`` (after the wrapper put its payload on
    sys.path), point what the warm python imported at the module's own payload, as a cold import would have:
    ``__file__``, ``__spec__``, ``__loader__`` and each package's ``__path__``, so what the module imports
    next comes from its own payload."""

    def __init__(self, modules: dict) -> None:
        self.modules = modules  # name -> (module, zip entry), as the warm python imported them

    def find_spec(self, name, path=None, target=None):  # pylint: disable=unused-argument
        if name.split(".")[0] in ("ansible", "ansible_collections"):
            sys.meta_path.remove(self)
            top = importlib.machinery.PathFinder.find_spec("ansible")  # where a cold import finds it
            archive = getattr(top.loader, "archive", None) if top is not None else None
            for warm in sorted(self.modules, key=lambda name: name.count(".")):  # packages before what they hold
                self.rebind(warm, archive)
        return None

    def rebind(self, name: str, archive: str | None) -> None:
        # The module the warm python imported, not sys.modules[name]: a module may put another there
        # (ansible.module_utils.distro puts its _distro, or the system's distro).
        module, entry = self.modules[name]
        package = entry.endswith("/__init__.py")
        if archive is not None:
            # As zipimport makes it, without its get_filename, which compiles the module to name its file.
            parent_dir = posixpath.dirname(posixpath.dirname(entry) if package else entry)
            loader = zipimport.zipimporter(archive + "/" + parent_dir if parent_dir else archive)
            spec = importlib.machinery.ModuleSpec(name, loader, origin=archive + "/" + entry, is_package=package)
            spec.has_location = True
            if package:
                spec.submodule_search_locations = [archive + "/" + posixpath.dirname(entry)]
        else:
            parent = self.modules.get(name.rpartition(".")[0])
            spec = importlib.machinery.PathFinder.find_spec(name, parent[0].__path__ if parent else None)
            if spec is None:
                return
        module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, spec.origin
        vars(module).pop("__cached__", None)  # a module imported from a zip has none
        if spec.submodule_search_locations is not None and isinstance(getattr(module, "__path__", None), list):
            locations = list(spec.submodule_search_locations)
            if "extend_path" in vars(module):  # Ansible's stubs for ansible and ansible.module_utils
                locations = pkgutil.extend_path(locations, name)
            module.__path__[:] = locations  # in place: the import under way holds this list


class _ModuleRun(BaseException):
    """Raised in a module's fresh process (a fork of the warm python) up to :func:`main`, which runs it."""

    def __init__(self, job: dict) -> None:
        super().__init__("module run")
        self.job = job


class _Warm:
    """The warm python's state: the modules it imported, from which payload entries, and what they depend on."""

    def __init__(self) -> None:
        self.entries: dict | None = None  # module name -> (zip entry, CRC, size)
        self.modules: dict = {}  # module name -> (module, zip entry), as imported here
        self.paths: list = []
        self.stamps: list = []
        self.broken = ""

    def check(self, wrapper: bytes) -> dict | None:
        """None when the module of ``wrapper`` can run here; else the header that declines it."""
        if self.broken:
            return {"declined": self.broken, "broken": True}
        payload = zipdata(wrapper)
        if payload is None:
            return {"declined": "no payload in the module's wrapper"}
        try:
            archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(payload, validate=True)))
        except (ValueError, zipfile.BadZipFile) as exc:
            return {"declined": "unreadable payload: %s" % exc}
        if self.entries is None:
            return self.warm_up(archive)
        if _stamps(self.paths) != self.stamps:
            return {"declined": "python files or shared libraries changed", "stale": True}
        for name, (entry, crc, size) in self.entries.items():
            info = archive.NameToInfo.get(entry)
            if info is None or (info.CRC, info.file_size) != (crc, size):
                return {"declined": "the module's payload has another %s" % name}
        return None

    def warm_up(self, archive: zipfile.ZipFile) -> dict | None:
        finder = _MemoryFinder(archive)
        sys.meta_path.insert(0, finder)
        try:
            importlib.import_module("ansible.module_utils.basic")
        except Exception as exc:  # pylint: disable=broad-exception-caught
            for name in [name for name in sys.modules if name == "ansible" or name.startswith("ansible.")]:
                del sys.modules[name]
            self.broken = "ansible.module_utils.basic did not import: %r" % exc
            return {"declined": self.broken, "broken": True}
        finally:
            sys.meta_path.remove(finder)
        self.entries, self.modules = finder.loaded, finder.modules
        gc.collect()
        gc.freeze()  # what every module's process shares: its collections never walk (nor copy) it
        files = [getattr(module, "__file__", None) for module in list(sys.modules.values())]
        self.paths = sorted({path for path in files if isinstance(path, str) and path.startswith("/")}
                            | {path for path in sys.path if path.startswith("/")} | {LD_CACHE})
        self.stamps = _stamps(self.paths)
        return None


def _exit_code(status: int) -> int:
    """As ``/bin/sh`` reports it: the exit status, or 128 + the signal that killed it."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _serve_warm(sock: socket.socket) -> None:
    """The warm python's loop (a fork of the agent); raises :class:`_ModuleRun` in each module's process."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the agent's frames are not ours: the holder must see their end when the agent ends
        os.dup2(null, fd)
    os.close(null)
    warm = _Warm()

    def send(header: dict, body: bytes = b"") -> None:
        sock.sendall(encode(header, body))

    while True:
        try:
            frame = read_frame(sock.recv)
        except (ProtocolError, OSError, ValueError):
            frame = None
        if frame is None:
            os._exit(0)  # pylint: disable=protected-access
        header, wrapper = frame
        declined = warm.check(wrapper)
        if declined is not None:
            send(declined)
            continue
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(out_r)
            os.close(err_r)
            raise _ModuleRun({"wrapper": wrapper, "env": header["env"], "python": header["python"],
                              "out": out_w, "err": err_w, "modules": warm.modules})
        os.close(out_w)
        os.close(err_w)
        send({"started": pid})
        chunks, open_fds = {out_r: [], err_r: []}, [out_r, err_r]
        while open_fds:
            ready = select.select(open_fds + [sock.fileno()], [], [])[0]
            if sock.fileno() in ready and not sock.recv(1, socket.MSG_PEEK):
                kill_tree(os.getpid())  # the agent is gone: so is what it ran
                os._exit(1)  # pylint: disable=protected-access
            for fd in open_fds[:]:
                if fd in ready:
                    data = os.read(fd, 65536)
                    if data:
                        chunks[fd].append(data)
                    else:
                        os.close(fd)
                        open_fds.remove(fd)
        out, err = b"".join(chunks[out_r]), b"".join(chunks[err_r])
        send({"rc": _exit_code(os.waitpid(pid, 0)[1]), "out": len(out)}, out + err)


def _run_module(job: dict) -> None:
    """In a module's process: become ``python`` reading the wrapper from its input, then run the wrapper."""
    os.dup2(job["out"], 1)
    os.dup2(job["err"], 2)
    os.close(job["out"])
    os.close(job["err"])
    os.environ.update(job["env"])
    sys.executable, sys.argv = job["python"], [""]
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None
    sys.meta_path.insert(0, _Rebind(job["modules"]))
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    exec(compile(job["wrapper"], "<stdin>", "exec", dont_inherit=True), main_module.__dict__)  # pylint: disable=exec-used


class WarmPython:
    """The agent's end of its warm python: started on the first module, again when what it imported changed."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.pid = 0
        self.off = ""  # why no module runs warm in this agent any more

    def start(self) -> None:
        ours, theirs = socket.socketpair()
        with warnings.catch_warnings():
            # Forked while the agent's watch thread waits in poll(), holding no lock; the fork runs no thread.
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                _serve_warm(theirs)
            except _ModuleRun:
                raise
            except BaseException:  # pylint: disable=broad-exception-caught
                sys.excepthook(*sys.exc_info())  # never back into the agent's loop
            os._exit(70)  # pylint: disable=protected-access
        theirs.close()
        self.sock, self.pid = ours, pid

    def stop(self) -> None:
        if self.sock is not None:
            self.sock.close()  # the warm python ends when it reads the end of its requests
            self.sock = None
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass

    def run(self, cmd: bytes, stdin: bytes | None) -> tuple | None:
        """``(rc, stdout, stderr)`` of the module ``stdin`` run warm; None when it was not run (run it cold)."""
        if self.off or stdin is None or not all(mark in stdin for mark in ANSIBALLZ):
            return None
        request = pipelined_python(cmd)
        if request is None or cold_reason(*request) is not None:
            return None
        for _attempt in range(2):
            if self.sock is None:
                self.start()
            sock = self.sock
            try:
                sock.sendall(encode({"op": "module", "python": request[0], "env": request[1]}, stdin))
                header = read_frame(sock.recv)
            except (OSError, ProtocolError, ValueError):
                header = None
            if header is None:  # it never started the module
                self.stop()
                return None
            header = header[0]
            if header.get("stale"):
                self.stop()
                continue
            if "declined" in header:
                if header.get("broken"):
                    self.off = header["declined"]
                    self.stop()
                return None
            try:
                frame = read_frame(sock.recv)
            except (OSError, ProtocolError, ValueError):
                frame = None
            if frame is None:
                self.stop()
                return 1, b"", b"the agent's warm python went away while the module ran (pid %d)" % header["started"]
            return exec_result(*frame)
        return None


class Agent:
    """Answers requests read from ``read`` with frames written through ``write``."""

    def __init__(self, read, write, warm: WarmPython | None = None) -> None:
        self.read, self.write = read, write
        self.puts: dict = {}  # id -> Replacement of an unfinished put
        self.warm = warm  # runs pipelined Python modules; None: every command through /bin/sh

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
        if self.warm is not None:
            self.warm.stop()

    def handle(self, header: dict, body: bytes) -> None:
        rid, op = header.get("id"), header.get("op")
        try:
            if op == "exec":
                split = header["cmd_len"]
                cmd, stdin = body[:split], body[split:] if header.get("stdin") else None
                result = self.warm.run(cmd, stdin) if self.warm is not None else None
                answer = {"id": rid}
                if result is None:
                    result = run_command(cmd, stdin)
                else:
                    answer["warm"] = True
                rc, out, err = result
                self.write(encode(dict(answer, rc=rc, out=len(out)), out + err))
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

    for stream in (stdin, stdout):
        widen_pipe(stream.fileno())
    threading.Thread(target=_watch_holder, args=(stdin.fileno(),), daemon=True).start()
    try:
        Agent(stdin.read, write, WarmPython()).serve()
    except _ModuleRun as run:  # in a module's process, forked by the warm python: it leaves as python would
        _run_module(run.job)


if __name__ == "__main__":
    main()
