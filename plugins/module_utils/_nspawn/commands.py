# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Command lines of systemd-nspawn and nsenter, the environments they run in, and parsers of
what they print.

Pure functions: nothing here runs a process.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Tuple

from ansible_collections.hpc.stateless.plugins.module_utils._process import UTF8_LOCALE, command_env

NETWORK_HOST = "host"
NETWORK_PRIVATE = "private"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# systemd-nspawn tries to remove its propagation directory on exit and refuses when /run
# is not a tmpfs (hosts without systemd); the message is noise in every command's stderr.
_PROPAGATE_NOISE = re.compile(
    rb'^Attempted to remove disk file system under "/run/systemd/nspawn/propagate/[^"\n]*",'
    rb" and we can't allow that\.\r?\n?",
    re.M,
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_MACHINE_BAD = re.compile(r"[^A-Za-z0-9-]+")


class NspawnError(Exception):
    """A container could not be prepared, booted, entered or stopped; ``str()`` says why."""


def machine_name(host: str, salt: str = "") -> str:
    """A valid machine/host name from an inventory host name (``[A-Za-z0-9-]``, <= 64 chars).

    ``salt`` (a session id) is appended so two runs that boot the same host at once do not
    share systemd-nspawn's per-machine paths.
    """
    base = _MACHINE_BAD.sub("-", host).strip("-").lower() or "host"
    suffix = f"-{salt[:8]}" if salt else ""
    return base[: 64 - len(suffix)].rstrip("-") + suffix


def hostname_for(host: str) -> str:
    """The host name a container gets by default: the inventory name, made valid."""
    return machine_name(host)


def network_args(network: str) -> List[str]:
    """systemd-nspawn arguments for ``host``, ``private`` (loopback only) or a netns path."""
    if network == NETWORK_HOST:
        return []
    if network == NETWORK_PRIVATE:
        return ["--private-network"]
    if network.startswith("/"):
        return [f"--network-namespace-path={network}"]
    raise NspawnError(f"network must be 'host', 'private' or the path of a network namespace "
                      f"(for example /run/netns/NAME), not {network!r}")


def nspawn_command_argv(nspawn: str, root: str, machine: str, command: List[str],
                        hostname: Optional[str] = None, network: str = NETWORK_HOST,
                        extra_args: Optional[List[str]] = None, user: Optional[str] = None) -> List[str]:
    """argv that runs one command in ``root`` (directory mode)."""
    argv = [nspawn, "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit",
            f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    argv += network_args(network)
    argv += list(extra_args or [])
    if user and user != "root":
        argv.append(f"--user={user}")
    return argv + ["--", *command]


def nspawn_boot_argv(nspawn: str, root: str, machine: str, hostname: Optional[str] = None,
                     network: str = NETWORK_PRIVATE, extra_args: Optional[List[str]] = None,
                     binds_ro: Optional[List[Tuple[str, str]]] = None) -> List[str]:
    """argv that boots ``root`` with its own systemd (booted mode).

    ``--register=no --keep-unit``: no machined and no host systemd are needed.
    ``--notify-ready=yes``: systemd-nspawn reports READY=1 once the container's systemd
    finished starting up, and X_NSPAWN_LEADER_PID before that.
    """
    argv = [nspawn, "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
            "--console=read-only", f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    for source, target in binds_ro or []:
        argv.append(f"--bind-ro={source}:{target}")
    argv += network_args(network)
    return argv + list(extra_args or [])


def nsenter_argv(nsenter: str, leader_pid: int, command: List[str],
                 uid: Optional[int] = None, gid: Optional[int] = None) -> List[str]:
    """argv that runs ``command`` inside the namespaces and root of a booted container."""
    argv = [nsenter, f"--target={leader_pid}", "--mount", "--uts", "--ipc", "--net", "--pid",
            "--cgroup", "--root", "--wd"]
    if uid is not None:
        argv.append(f"--setuid={uid}")
    if gid is not None:
        argv.append(f"--setgid={gid}")
    return argv + ["--", *command]


def host_env() -> Dict[str, str]:
    """Environment of the host-side tools (systemd-nspawn, mount, the supervisor): PATH and a
    UTF-8 C locale, nothing else of ours."""
    return command_env({"PATH": os.environ.get("PATH", CONTAINER_PATH), **UTF8_LOCALE}, inherit=False)


def container_env(user: str = "root", home: str = "/root") -> Dict[str, str]:
    """Environment of a command entered into a booted container: nothing of the host's."""
    return {"PATH": CONTAINER_PATH, "HOME": home, "USER": user, "LOGNAME": user,
            "LANG": "C.UTF-8", "container": "systemd-nspawn"}


def parse_notify(datagram: bytes) -> Dict[str, str]:
    """``KEY=value`` lines of an sd_notify datagram as a dict."""
    fields = {}
    for line in datagram.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value
    return fields


def parse_unit_list(text: str) -> List[str]:
    """Unit names from ``systemctl list-units --plain --no-legend`` (first column)."""
    units = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] not in ("●", "*"):
            units.append(fields[0])
        elif len(fields) > 1:
            units.append(fields[1])
    return units


def parse_job_list(text: str) -> List[str]:
    """``unit (job type, state)`` from ``systemctl list-jobs --no-legend``."""
    jobs = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].isdigit():
            jobs.append(f"{fields[1]} ({fields[2]}, {fields[3]})")
    return jobs


def strip_noise(stderr: bytes) -> bytes:
    return _PROPAGATE_NOISE.sub(b"", stderr)


def console_tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of a console log, without colour codes."""
    text = _PROPAGATE_NOISE.sub(b"", text.encode("utf-8", "replace")).decode("utf-8", "replace")
    clean = [_ANSI.sub("", line).rstrip() for line in text.replace("\r", "").splitlines()]
    clean = [line for line in clean if line.strip()]
    return "\n".join(clean[-lines:])
