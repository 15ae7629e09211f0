# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers of the Molecule compliance tests (pytest-testinfra).

In Molecule the tests look at a buildah working container, not a booted node: testinfra's chroot
backend runs each check with ``chroot <mount point> /bin/sh -c ...`` on the build host, a few
milliseconds per check, where the ansible backend over ``containers.podman.buildah`` costs
seconds (one ``ansible`` process per check). In ``playbooks/verify.yml`` the same tests look at the
image booted under systemd-nspawn: :class:`NsenterBackend` runs each command with ``nsenter`` into
the namespaces and root of the container's leader (its systemd), so the checks see the running
system (its mounts, sockets, /proc/sys, the daemons' own view). Pure functions here parse what the
checks read, so unit tests reach them without a container.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

#: Where systemd-sysctl reads ``*.conf`` files, highest priority first (sysctl.d(5)).
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")

#: Directories whose contents must not be world-writable (sticky directories excepted).
SYSTEM_DIRS = ("/etc", "/usr", "/boot", "/opt", "/root", "/srv", "/var")

#: Places where a private key would be a secret baked into every node.
SECRET_SEARCH_DIRS = ("/etc", "/root", "/home", "/opt", "/srv", "/usr/local")

#: Servers a compute node does not run (CIS Debian Linux benchmark, "Special Purpose Services" and
#: "Service Clients"): legacy clear-text services, inetd super-servers, desktop and file/print/directory
#: servers. A site that needs one waives it in a waivers.yml with its reason.
UNWANTED_PACKAGES = ("telnetd", "inetutils-telnetd", "rsh-server", "rsh-redone-server", "nis", "talkd",
                     "tftpd-hpa", "xinetd", "openbsd-inetd", "inetutils-inetd", "vsftpd", "avahi-daemon", "cups",
                     "slapd", "bind9", "apache2", "samba", "snmpd", "squid", "xserver-xorg-core")

#: Known secret files that must not be in an image unless the user opted in.
SECRET_FILES = ("/etc/munge/munge.key",)

# sshd refuses to print its configuration without a host key (and, on Debian, its privilege
# separation directory): use a throw-away key and remove everything it created.
_SSHD_EFFECTIVE_SCRIPT = (
    'set -e; d=$(mktemp -d); created=""; '
    'for p in /run/sshd /var/run/sshd; do [ -d "$p" ] || { mkdir -p "$p"; created="$created $p"; }; done; '
    'trap \'rm -rf "$d"; for p in $created; do rmdir "$p"; done\' EXIT; '
    'ssh-keygen -q -t ed25519 -N "" -f "$d/key"; '
    'sshd=$(command -v sshd || echo /usr/sbin/sshd); '
    '"$sshd" -T -f /etc/ssh/sshd_config -h "$d/key" -C @MATCH@'
)


#: Mount options the runtime checks hold a mounted file system to when fstab asks for them.
SECURITY_MOUNT_OPTIONS = ("nosuid", "nodev", "noexec", "ro")


class WaiverError(ValueError):
    """A waiver file is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Waiver:
    check: str
    reason: str
    item: str | None = None


def load_waivers(*paths: Path) -> list[Waiver]:
    """Waivers from YAML files (missing files are skipped).

    Format: ``waivers: [{check: <test name>, reason: <why>, item: <finding, optional>}]``.
    Without ``item`` the whole check is waived; with it, only that finding (a path, an account).
    Every waiver needs a reason.
    """
    waivers: list[Waiver] = []
    for path in paths:
        if not path.is_file():
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        entries = data.get("waivers", []) if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise WaiverError(f"{path}: expected a mapping with a 'waivers' list")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not entry.get("check"):
                raise WaiverError(f"{path}: waivers[{index}] needs a 'check' (the test name)")
            reason = str(entry.get("reason") or "").strip()
            if not reason:
                raise WaiverError(f"{path}: waivers[{index}] ({entry['check']}) needs a 'reason'")
            unknown = set(entry) - {"check", "reason", "item"}
            if unknown:
                raise WaiverError(f"{path}: waivers[{index}] has unknown keys {sorted(unknown)}")
            item = entry.get("item")
            waivers.append(Waiver(str(entry["check"]), reason, None if item is None else str(item)))
    return waivers


def check_waiver(waivers: Iterable[Waiver], check: str) -> Waiver | None:
    """The waiver that switches off ``check`` as a whole, if any."""
    return next((w for w in waivers if w.check == check and w.item is None), None)


def unwaived(findings: Iterable[str], waivers: Iterable[Waiver], check: str) -> list[str]:
    """Findings of ``check`` that no waiver covers."""
    waived = {w.item for w in waivers if w.check == check and w.item is not None}
    return sorted(f for f in findings if f not in waived)


# --------------------------------------------------------------------------- parsers


def parse_sysctl_conf(text: str) -> dict[str, str]:
    """``key = value`` lines of a sysctl.d file; later lines win. ``-key`` (ignore errors) counts."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip().lstrip("-").replace("/", ".")
        values[key] = value.strip()
    return values


def sysctl_file_order(files_by_dir: Mapping[str, Iterable[str]]) -> list[str]:
    """Paths systemd-sysctl applies, in order: one file per basename (the highest-priority
    directory wins), sorted by basename. (systemd-sysctl does not read /etc/sysctl.conf itself;
    Debian links it in as /etc/sysctl.d/99-sysctl.conf.)"""
    chosen: dict[str, str] = {}
    for directory in SYSCTL_DIRS:
        for name in files_by_dir.get(directory, ()):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{directory}/{name}"
    return [chosen[name] for name in sorted(chosen)]


def parse_sshd_t(text: str) -> dict[str, str]:
    """``sshd -T`` output -> ``{keyword: value}``; repeated keywords are joined with a newline."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        keyword, _sep, value = line.strip().partition(" ")
        if not keyword:
            continue
        settings[keyword] = f"{settings[keyword]}\n{value}" if keyword in settings else value
    return settings


def parse_shadow_empty_passwords(text: str) -> list[str]:
    """Accounts of an /etc/shadow whose password field is empty (login without a password)."""
    return sorted(line.split(":", 2)[0] for line in text.splitlines()
                  if line.count(":") >= 2 and line.split(":", 2)[1] == "")


def parse_uid0_accounts(passwd: str) -> list[str]:
    return sorted(line.split(":")[0] for line in passwd.splitlines()
                  if line.count(":") >= 3 and line.split(":")[2] == "0")


def duplicates(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    dups: set[str] = set()
    for value in values:
        (dups if value in seen else seen).add(value)
    return sorted(dups)


def passwd_field(passwd: str, index: int) -> list[str]:
    return [line.split(":")[index] for line in passwd.splitlines() if line.count(":") >= index]


def find_command(dirs: Iterable[str], predicate: str, action: str = "-print") -> str:
    """Shell command: ``find`` over ``dirs`` on one file system, running ``action`` (default:
    print the path) for what matches ``predicate`` (find expressions in shell syntax).
    Missing directories and unreadable entries are not errors."""
    quoted = " ".join(shlex.quote(d) for d in dirs)
    return f"find {quoted} -xdev {predicate} {action} 2>/dev/null; true"


def fstab_boot_mounts(text: str) -> list[tuple[str, str, list[str]]]:
    """``(mount point, type, options)`` of the fstab entries mounted at boot: not swap, not ``noauto``,
    not ``nofail`` (a disk a node may lack, e.g. local scratch)."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[0].startswith("#") or fields[2] == "swap" or fields[1] == "none":
            continue
        options = fields[3].split(",")
        if "noauto" in options or "nofail" in options:
            continue
        found.append((fields[1], fields[2], options))
    return found


def cgroup_path(proc_cgroup: str) -> str:
    """The unified (``0::``) or, failing that, the systemd (``name=systemd``) path of /proc/<pid>/cgroup."""
    paths = dict(line.split(":", 2)[1:] for line in proc_cgroup.splitlines() if line.count(":") >= 2)
    return paths.get("", "") or paths.get("name=systemd", "")


def lines(text: str) -> list[str]:
    """Non-empty lines of command output."""
    return [line for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- image access


class BuildahError(RuntimeError):
    pass


def buildah(*args: str) -> str:
    env = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot")}
    proc = subprocess.run(["buildah", *args], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildahError(f"buildah {' '.join(args)} failed (rc={proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


class MountedContainer:
    """``buildah mount`` of a working container for the life of a test session."""

    def __init__(self, container: str) -> None:
        self.container = container
        self.path = ""

    def __enter__(self) -> str:
        self.path = buildah("mount", self.container).strip()
        return self.path

    def __exit__(self, *exc: Any) -> None:
        # Drops only our reference: buildah counts mounts, the creator's stays.
        try:
            buildah("umount", self.container)
        except BuildahError:
            pass


def chroot_host(mountpoint: str) -> Any:
    """A testinfra host that runs every check with chroot(8) in the container's root."""
    import testinfra

    if not os.path.isdir(mountpoint):
        raise FileNotFoundError(f"{mountpoint} is not a directory: is the working container mounted?")
    return testinfra.get_host(mountpoint, connection="chroot")


#: PATH and locale of a command entered into a booted container (nothing of the build host's).
CONTAINER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                 "USER": "root", "LOGNAME": "root", "LANG": "C.UTF-8", "container": "systemd-nspawn"}


def own_user_namespace(pid: int) -> bool:
    """True when process ``pid`` runs in another user namespace than ours (a container booted with one)."""
    return os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino


def nsenter_argv(leader_pid: int, command: str, nsenter: str = "nsenter", user_ns: bool = False) -> list[str]:
    """argv that runs the shell ``command`` inside the namespaces and root of a booted container
    whose leader (its PID 1) is ``leader_pid`` on the build host; ``user_ns``: in its user namespace too
    (the checks then run as the container's root, an unprivileged host uid)."""
    return [nsenter, f"--target={leader_pid}", *(["--user"] if user_ns else []), "--mount", "--uts", "--ipc",
            "--net", "--pid", "--cgroup", "--root", "--wd", "--", "/bin/sh", "-c", command]


def _nsenter_backend_class() -> Any:
    from testinfra.backend import base  # pylint: disable=import-outside-toplevel

    class NsenterBackend(base.BaseBackend):
        """testinfra backend into a container booted under systemd-nspawn: ``nsenter`` into its leader.

        The host spec is the leader's PID on the build host (``nsenter://<pid>``); a leader that is
        gone makes every command fail with a message saying so (never an empty, passing answer)."""

        NAME = "nsenter"

        def __init__(self, hostname: str, *args: Any, nsenter: str = "nsenter", **kwargs: Any) -> None:
            self.leader = int(str(hostname).strip("/"))
            self.nsenter = nsenter
            # A leader in a user namespace of its own (verify's default) is entered in it too.
            self.user_ns = own_user_namespace(self.leader)
            super().__init__(str(self.leader), *args, **kwargs)

        def run(self, command: str, *args: str, **kwargs: Any) -> Any:
            cmd = self.get_command(command, *args)
            if not os.path.exists(f"/proc/{self.leader}"):
                raise RuntimeError(f"the booted container (leader PID {self.leader}) is no longer running")
            proc = subprocess.run(nsenter_argv(self.leader, cmd, self.nsenter, self.user_ns), env=CONTAINER_ENV, cwd="/",
                                  stdin=subprocess.DEVNULL, capture_output=True, check=False)
            return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)

    return NsenterBackend


def nsenter_host(leader_pid: int, nsenter: str = "nsenter") -> Any:
    """A testinfra host whose every command runs inside the booted container of ``leader_pid``."""
    import testinfra.host  # pylint: disable=import-outside-toplevel

    if not os.path.isdir(f"/proc/{leader_pid}"):
        raise FileNotFoundError(f"no process {leader_pid}: is the container still booted?")
    backend = _nsenter_backend_class()(str(leader_pid), nsenter=nsenter)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host


def sshd_effective(host: Any, match: str = "user=root,host=node,addr=192.0.2.1") -> dict[str, str]:
    """Effective sshd settings (``sshd -T``) inside the image."""
    result = host.run(_SSHD_EFFECTIVE_SCRIPT.replace("@MATCH@", shlex.quote(match)))
    if result.rc != 0:
        raise AssertionError(f"sshd -T failed (rc={result.rc}): {result.stderr.strip()}")
    return parse_sshd_t(result.stdout)


def effective_sysctl(host: Any) -> dict[str, str]:
    """Kernel parameters systemd-sysctl would apply when the image boots."""
    files_by_dir: dict[str, list[str]] = {}
    for directory in SYSCTL_DIRS:
        listing = host.run(f"ls -1A {shlex.quote(directory)} 2>/dev/null")
        files_by_dir.setdefault(directory, []).extend(listing.stdout.split())
    values: dict[str, str] = {}
    for path in sysctl_file_order(files_by_dir):
        values.update(parse_sysctl_conf(host.file(path).content_string))
    return values


def scenario_vars(project: Path, role: str, scenario_dir: Path, instance: str | None = None) -> dict[str, Any]:
    """A role's defaults overlaid with what the scenario's converge applied: ``vars/converge.yml``,
    then ``vars/<instance>.yml`` (the same files, in the same order, as converge.yml's vars_files)."""
    merged: dict[str, Any] = {}
    files = [project / "roles" / role / "defaults" / "main.yml", scenario_dir / "vars" / "converge.yml"]
    if instance:
        files.append(scenario_dir / "vars" / f"{instance}.yml")
    for path in files:
        if path.is_file():
            merged.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return merged


class _InventoryLoader(yaml.SafeLoader):
    """YAML of an inventory's variable files, with Ansible's tags: ``!unsafe`` is its string, ``!vault`` the
    digest of its ciphertext as the layer keys have it (``{"__vault_sha256__": ...}``), never the secret - plain
    ``yaml.safe_load`` stopped at either tag."""


_InventoryLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
_InventoryLoader.add_constructor("!vault", lambda loader, node: {
    "__vault_sha256__": hashlib.sha256(str(loader.construct_scalar(node)).encode("utf-8")).hexdigest()})


def _inventory_yaml(path: Path) -> Any:
    """The data of one inventory variable file (:class:`_InventoryLoader`)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_InventoryLoader)


def _inventory_files(inventory: Path, group: str = "all") -> list[Path]:
    """``group_vars/<group>.yml`` (or ``.yaml``), then the files of ``group_vars/<group>/``, of an inventory directory."""
    group_vars = inventory / "group_vars"
    files = [group_vars / f"{group}{suffix}" for suffix in (".yml", ".yaml") if (group_vars / f"{group}{suffix}").is_file()]
    if (group_vars / group).is_dir():
        files += sorted(p for p in (group_vars / group).rglob("*") if p.suffix in (".yml", ".yaml"))
    return files


def inventory_layers(inventory: Path) -> dict[str, Any]:
    """``hpc_stateless_layers`` of an inventory directory (group_vars/all)."""
    layers: dict[str, Any] = {}
    for path in _inventory_files(inventory):
        data = _inventory_yaml(path) or {}
        layers.update(data.get("hpc_stateless_layers") or {})
    return layers


def applied_roles(inventory: Path) -> set[str]:
    """Short names of the roles the inventory's layers apply (``hpc.stateless.base`` -> ``base``)."""
    return {role.rsplit(".", 1)[-1] for spec in inventory_layers(inventory).values()
            for role in spec.get("roles") or []}


def inventory_images(inventory: Path) -> dict[str, Any]:
    """``hpc_stateless_images`` of an inventory directory (group_vars/all)."""
    images: dict[str, Any] = {}
    for path in _inventory_files(inventory):
        data = _inventory_yaml(path) or {}
        images.update(data.get("hpc_stateless_images") or {})
    return images


def layer_chain(inventory: Path, name: str | None) -> list[str] | None:
    """The layers from the root to ``name`` (a layer, or an image whose layer it is), or None when the
    inventory has no such layer or image: then every layer counts."""
    layers = inventory_layers(inventory)
    if name and name not in layers:
        name = (inventory_images(inventory).get(name) or {}).get("layer")
    if not name or name not in layers:
        return None
    chain: list[str] = []
    while name and name not in chain and name in layers:
        chain.insert(0, name)
        name = (layers[name] or {}).get("parent")
    return chain


def inventory_vars(inventory: Path, role: str, layer: str | None = None,
                   chain: list[str] | None = None) -> dict[str, Any]:
    """What a layer build gives ``role``: its prefixed variables from ``group_vars/all`` of the
    inventory, overlaid with the ``vars`` of the layer(s) that apply the role: those of ``chain`` (the
    image's layers, root first, as verify's plan has them), else of ``layer``'s chain when ``layer`` names a
    layer or image of the inventory, else every layer. Two layers may apply one role differently (the test
    cluster's slurm node and controller): an image expects what its own chain applied. Values are taken as
    written (Jinja is not rendered)."""
    merged: dict[str, Any] = {}
    for path in _inventory_files(inventory):
        data = _inventory_yaml(path) or {}
        merged.update({k: v for k, v in data.items() if k.startswith(f"{role}_")})
    layers = inventory_layers(inventory)
    if chain is None:
        chain = layer_chain(inventory, layer)
    for name in [n for n in chain if n in layers] if chain is not None else list(layers):
        spec = layers[name] or {}
        if role in spec.get("roles", []) or f"hpc.stateless.{role}" in spec.get("roles", []):
            # the group_vars of the groups the layer names (its build host is in them), then its own vars
            for group in spec.get("groups") or []:
                merged.update({k: v for k, v in _group_vars(inventory, str(group)).items() if k.startswith(f"{role}_")})
            merged.update({k: v for k, v in (spec.get("vars") or {}).items() if k.startswith(f"{role}_")})
    return merged


def _group_vars(inventory: Path, group: str) -> dict[str, Any]:
    """The values of ``group``'s group_vars files (:func:`_inventory_files`), later files winning."""
    values: dict[str, Any] = {}
    for path in _inventory_files(inventory, group):
        values.update(_inventory_yaml(path) or {})
    return values
