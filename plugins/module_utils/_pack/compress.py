# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one place that knows how zstd, pigz/gzip and xz are called to compress a cpio stream.

The archive is produced while it is compressed: the compressor reads our newc stream on a
pipe and writes the artifact file, so neither the archive nor the tree is ever held in
memory. That needs a live pipe, which the process runner's ``run`` cannot give, hence
``subprocess.Popen`` with an argv list (never a shell) and the runner's environment
(:func:`_process.command_env`: ``LANG=C``).

Every command line is chosen for byte-identical output on repeat: no file name or time
stamp in the gzip header (``-n``), fixed block sizes in the multi-threaded modes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._process import command_env

# format -> (tool, default level, lowest, highest)
COMPRESSORS: dict[str, tuple[str, int, int, int]] = {
    "cpio.zst": ("zstd", 3, 1, 19),
    "cpio.gz": ("gzip", 6, 1, 9),
    "cpio.xz": ("xz", 6, 0, 9),
}
# xz: the kernel's decoder checks CRC32 only; bound memory so -T0 on many cores stays small.
_XZ_MEMLIMIT = "160MiB"
_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031


class CompressError(Exception):
    """The compressor failed or is missing; the message carries the command and its stderr."""


@dataclass(frozen=True)
class CompressorCommand:
    tool: str
    argv: list[str]


def compressor_argv(fmt: str, level: int | None, threads: int, find_binary: Callable[[str], str | None]) -> CompressorCommand:
    """argv that reads stdin and writes the compressed stream to stdout.

    ``threads`` 0 means all processors. gzip is pigz when installed, else single-threaded gzip.
    """
    if fmt not in COMPRESSORS:
        raise CompressError(f"unknown cpio format {fmt!r} (supported: {', '.join(COMPRESSORS)})")
    tool, default, lowest, highest = COMPRESSORS[fmt]
    level = default if level is None else level
    if not lowest <= level <= highest:
        raise CompressError(f"compression level {level} for {fmt} is out of range ({lowest}..{highest})")
    workers = threads if threads > 0 else (os.cpu_count() or 1)
    if tool == "zstd":
        binary = find_binary("zstd")
        if not binary:
            raise CompressError("zstd is not installed on the build host (Debian: apt-get install zstd, EL: dnf install zstd)")
        return CompressorCommand("zstd", [binary, "-q", "-c", f"-{level}", f"-T{workers}"])
    if tool == "gzip":
        binary = find_binary("pigz")
        if binary:
            return CompressorCommand("pigz", [binary, "-c", "-n", f"-{level}", "-p", str(workers)])
        binary = find_binary("gzip")
        if not binary:
            raise CompressError("neither pigz nor gzip is installed on the build host (Debian: apt-get install pigz)")
        return CompressorCommand("gzip", [binary, "-c", "-n", f"-{level}"])
    binary = find_binary("xz")
    if not binary:
        raise CompressError("xz is not installed on the build host (Debian: apt-get install xz-utils)")
    return CompressorCommand("xz", [binary, "-q", "-c", f"-{level}", "--check=crc32", f"-T{workers}",
                                    f"--memlimit-compress={_XZ_MEMLIMIT}"])


class CompressorProcess:
    """A running compressor: write the stream to :attr:`fd`, then :meth:`close`.

    Used as a context manager; on an exception the compressor is killed and reaped.
    """

    def __init__(self, command: CompressorCommand, output_path: str) -> None:
        self.command = command
        self.output_path = output_path
        # a new file (O_EXCL, O_NOFOLLOW) in the directory pack made for its output: nothing planted there is opened
        self._out = os.fdopen(_imagepath.create_file(os.path.dirname(output_path) or ".", os.path.basename(output_path)),
                              "wb")
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(command.argv, stdin=subprocess.PIPE, stdout=self._out,
                                          stderr=self._stderr, env=command_env(),
                                          close_fds=True)
        except OSError as exc:
            self._out.close()
            self._stderr.close()
            raise CompressError(f"{' '.join(command.argv)} could not start: {exc.strerror}") from exc
        if self._proc.stdin is None:  # cannot happen with stdin=PIPE; keeps type checkers honest
            raise CompressError(f"{' '.join(command.argv)}: no stdin pipe")
        self._stdin = self._proc.stdin
        self.fd = self._stdin.fileno()
        try:
            import fcntl  # Linux: a larger pipe means fewer context switches
            fcntl.fcntl(self.fd, _F_SETPIPE_SZ, _PIPE_SIZE)
        except (ImportError, OSError):
            pass

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace").strip()

    def close(self) -> None:
        """End the stream and wait; CompressError if the compressor failed."""
        try:
            self._stdin.close()
        except BrokenPipeError:
            pass
        rc = self._proc.wait()
        try:
            self._out.flush()
            os.fsync(self._out.fileno())
        finally:
            self._out.close()
        if rc != 0:
            raise CompressError(f"{' '.join(self.command.argv)} > {self.output_path} failed (rc={rc}): "
                                f"{self.stderr_text() or 'no message'}")

    def abort(self) -> str:
        """Kill the compressor; returns what it said on stderr."""
        if self._proc.poll() is None:
            self._proc.kill()
        try:
            self._stdin.close()
        except OSError:
            pass
        self._proc.wait()
        self._out.close()
        return self.stderr_text()

    def __enter__(self) -> "CompressorProcess":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self._out.closed:
            self.abort()
        self._stderr.close()
