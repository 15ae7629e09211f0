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


def private_users_args(private_users: Optional[Tuple[int, int]]) -> List[str]:
    """systemd-nspawn arguments that run the container in a user namespace whose ids 0.. are host ids
    ``start..start+count-1`` (``private_users``: ``(start, count)``; None: the host's ids).

    The tree is already shown with those host ids (a buildah working container started with the same
    mapping), so nspawn neither chowns it nor mounts it idmapped (``--private-users-ownership=off``).
    """
    if private_users is None:
        return []
    start, count = private_users
    return [f"--private-users={int(start)}:{int(count)}", "--private-users-ownership=off"]


def _bind_fields(value: str) -> List[str]:
    """``SOURCE[:TARGET[:OPTIONS]]`` of a ``--bind=`` value split on its unescaped colons."""
    return re.split(r"(?<!\\):", value)


def idmapped_binds(args: List[str]) -> List[str]:
    """``args`` with each ``--bind=``/``--bind-ro=`` that names no mount options given ``idmap``.

    In a user namespace a bind mount shows the host's owners as nobody: the host's Lynis refuses to
    read its own files, a daemon cannot read a test secret. ``idmap`` shows them as on the host (root as
    root), as without the namespace. A bind that names its options is left as it is.
    """
    out = []
    for arg in args:
        option, sep, value = arg.partition("=")
        if sep and option in ("--bind", "--bind-ro"):
            fields = _bind_fields(value)
            if len(fields) == 1:
                arg = f"{option}={value}:{value}:idmap"
            elif len(fields) == 2:
                arg = f"{option}={value}:idmap"
        out.append(arg)
    return out


def nspawn_command_argv(nspawn: str, root: str, machine: str, command: List[str],
                        hostname: Optional[str] = None, network: str = NETWORK_HOST,
                        extra_args: Optional[List[str]] = None, user: Optional[str] = None,
                        private_users: Optional[Tuple[int, int]] = None) -> List[str]:
    """argv that runs one command in ``root`` (directory mode); ``private_users``: see
    :func:`private_users_args`."""
    argv = [nspawn, "--quiet", "--pipe", "--as-pid2", "--register=no", "--keep-unit",
            f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    argv += network_args(network)
    argv += private_users_args(private_users)
    extra = list(extra_args or [])
    argv += idmapped_binds(extra) if private_users else extra
    if user and user != "root":
        argv.append(f"--user={user}")
    return argv + ["--", *command]


def nspawn_boot_argv(nspawn: str, root: str, machine: str, hostname: Optional[str] = None,
                     network: str = NETWORK_PRIVATE, extra_args: Optional[List[str]] = None,
                     binds_ro: Optional[List[Tuple[str, str]]] = None,
                     private_users: Optional[Tuple[int, int]] = None) -> List[str]:
    """argv that boots ``root`` with its own systemd (booted mode).

    ``--register=no --keep-unit``: no machined and no host systemd are needed.
    ``--notify-ready=yes``: systemd-nspawn reports READY=1 once the container's systemd
    finished starting up, and X_NSPAWN_LEADER_PID before that.
    ``private_users``: the container's ids are host ids of that range (:func:`private_users_args`),
    and every bind is idmapped (:func:`idmapped_binds`).
    """
    argv = [nspawn, "--quiet", "--boot", "--register=no", "--keep-unit", "--notify-ready=yes",
            "--console=read-only", f"--directory={root}", f"--machine={machine}"]
    if hostname:
        argv.append(f"--hostname={hostname}")
    binds = [f"--bind-ro={source}:{target}" for source, target in binds_ro or []]
    argv += idmapped_binds(binds) if private_users else binds
    argv += network_args(network)
    argv += private_users_args(private_users)
    extra = list(extra_args or [])
    return argv + (idmapped_binds(extra) if private_users else extra)


def nsenter_argv(nsenter: str, leader_pid: int, command: List[str],
                 uid: Optional[int] = None, gid: Optional[int] = None, user_ns: bool = False) -> List[str]:
    """argv that runs ``command`` inside the namespaces and root of a booted container.

    ``user_ns``: the container has a user namespace of its own (:func:`private_users_args`); the command
    joins it too, so it is the container's root (an unprivileged host uid), not host root.
    """
    argv = [nsenter, f"--target={leader_pid}", *(["--user"] if user_ns else []), "--mount", "--uts", "--ipc",
            "--net", "--pid", "--cgroup", "--root", "--wd"]
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
