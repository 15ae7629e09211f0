# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Bootstrapping a distribution root file system: the command lines, the records and the rootfs module's job.

The command lines and records are pure functions, no I/O; :class:`RootfsBootstrap` (the job of the
``rootfs`` module, which only parses its options into a :class:`RootfsRequest`) runs them. The
module's bootstrap options are derived from the inventory schema's bootstrap keys
(:func:`bootstrap_options`), so a layer's ``bootstrap`` mapping and the module take the same keys.
One builder per tool: mmdebstrap (Debian, Ubuntu; the default) or debootstrap (selectable),
``dnf --installroot`` (EL family, Fedora) and ``zypper --root`` (SUSE).

Where the build runs decides how the tools run (:func:`privilege_mode`): as root on the host
they run as they are, or, mapped (``userns``, the build's default), in a user namespace whose root is
root's subordinate uid, their files' ids shifted back and the device nodes made by host root after
(:func:`mapped_argv`); as root inside a user namespace (``buildah unshare``, the rootless build)
they run as they are too, but device nodes cannot be made; as an ordinary user every command is
wrapped in ``buildah unshare``, so the root's owners map exactly as buildah's own storage maps them.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ansible_collections.hpc.stateless.plugins.module_utils._process import INITIAL_ID_MAP, parse_id_map
from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath, _process
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import (
    APT_RETRY_COUNT,
    DISTRO_KEYRINGS,
    FetchFailed,
    fetch_url,
    fetch_with_retries,
)
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, LockBusy, mounts_below, wait_message
from ansible_collections.hpc.stateless.plugins.module_utils._build import aptconf, caches, idshift
from ansible_collections.hpc.stateless.plugins.module_utils._build.idshift import IdRange
from ansible_collections.hpc.stateless.plugins.module_utils._build.rootless import HOST_CACHE_ROOT, host_cache_path
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import RPM_ARCHES, host_arch
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import (
    BOOTSTRAP_KEYS,
    BOOTSTRAP_REQUIRED,
    BOOTSTRAP_TOOLS,
    KIND_BOOL,
    KIND_PATH,
    KIND_STRING,
    KIND_STRINGS,
    SUPPORTED_DISTROS,
    bootstrap_tool_choices,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import (
    DEBIAN_STYLE_MIRRORS,
    SOURCES_LIST,
    Source,
    bootstrap_sources,
    image_keyring_path,
    render_sources_list,
)

# distro -> tool family; the single source is _contract/inventory.py's SUPPORTED_DISTROS.
DISTRO_FAMILIES: dict[str, str] = SUPPORTED_DISTROS

DEFAULT_MIRRORS: dict[str, str] = {distro: mirrors[0] for distro, mirrors in DEBIAN_STYLE_MIRRORS.items()}

# tool -> Debian package that provides the tool's binary (named in errors).
TOOL_PACKAGES: dict[str, str] = {
    "mmdebstrap": "mmdebstrap",
    "debootstrap": "debootstrap",
    "dnf": "dnf",
    "zypper": "zypper",
    "unshare": "util-linux",
    "newuidmap": "uidmap",
    "newgidmap": "uidmap",
}

# Installed when `packages` is empty: enough for Ansible (python3) and for the
# image to manage its own packages later.
DEFAULT_PACKAGES: dict[str, tuple[str, ...]] = {
    "dnf": ("bash", "systemd", "python3", "dnf"),
    "zypper": ("bash", "systemd", "python3", "zypper"),
}

# Where the target distribution's own rpm looks for its database. A Debian
# build host's rpm defaults to ~/.rpmdb, which would hide the database from
# the image, so the module pins %_dbpath to this value.
RPMDB_PATHS: dict[str, str] = {
    "fedora": "/usr/lib/sysimage/rpm",
    "opensuse-leap": "/usr/lib/sysimage/rpm",
    "opensuse-tumbleweed": "/usr/lib/sysimage/rpm",
    "sles": "/usr/lib/sysimage/rpm",
}
DEFAULT_RPMDB_PATH = "/var/lib/rpm"

# dnf prefixes --installroot to the cache directory its repository persistor
# uses, and zypper prefixes --root to its installed-system solv cache and key
# cache, even when the cache directory is given on the command line. So a
# little tool state about the host cache lands at <path>/<cache_dir>; the
# module removes these entries after the bootstrap, so no host cache path
# ends up in the image. Relative to <cache_dir>.
CACHE_STATE_IN_ROOT: dict[str, tuple[str, ...]] = {
    "dnf": ("expired_repos.json", "last_makecache"),
    "zypper": ("solv/@System", "pubkeys"),
}

# The tools a family can bootstrap with, the default first; the single source is
# _contract/inventory.py's BOOTSTRAP_TOOLS. mmdebstrap installs the same packages through apt, faster than
# debootstrap, and also runs without root.
FAMILY_TOOLS: dict[str, tuple[str, ...]] = BOOTSTRAP_TOOLS

# How the tools run, from where the build runs (see privilege_mode).
MODE_ROOT = "root"          # root on the host, the tools too
MODE_MAPPED = "mapped"      # root on the host; each command runs as root of a user namespace: root's subordinate uid
MODE_USERNS = "userns"      # uid 0 inside a user namespace, e.g. under `buildah unshare`
MODE_UNSHARE = "unshare"    # an ordinary user: each command runs under `buildah unshare`
MODES = (MODE_ROOT, MODE_MAPPED, MODE_USERNS, MODE_UNSHARE)
#: The tools a mapped bootstrap can run: the others need root on the host (debootstrap makes device nodes) or a
#: package cache they may write in place (dnf, zypper), which a mapped root must never be given.
MAPPED_TOOLS = ("mmdebstrap",)
#: A mapped bootstrap's outer step, in a mount namespace of its own as host root: the tree (often the mount of a
#: container in root's 0700 containers-storage, which the mapped uid may not search) bound where it may, then the
#: tool started in the user namespace (:func:`mapped_argv`). The bind ends with the namespace.
MAPPED_BIND_SCRIPT = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'

# What a root bootstrapped as host root has in /dev (mmdebstrap's root mode makes it, and removes it again where it
# cannot make the nodes): host root makes it after a mapped bootstrap, so the tree is the same either way.
DEV_NODES: tuple[tuple[str, int, int], ...] = (
    ("console", 5, 1), ("full", 1, 7), ("null", 1, 3), ("ptmx", 5, 2), ("random", 1, 8), ("tty", 5, 0),
    ("urandom", 1, 9), ("zero", 1, 5),
)
DEV_LINKS: tuple[tuple[str, str], ...] = (
    ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
)
DEV_DIRS = ("pts", "shm")

# The kernel's postinst hooks (initramfs-tools, dracut) skip building an initramfs when
# INITRD=No: a stateless image never boots from one, pack builds the boot artifact.
NO_INITRD_ENV: dict[str, str] = {"INITRD": "No"}

# mmdebstrap's own hook that bind-mounts file:// mirrors into the chroot, so apt inside
# it finds a local mirror.
MMDEBSTRAP_FILE_MIRROR_HOOKS = "/usr/share/mmdebstrap/hooks/file-mirror-automount"
APT_ARCHIVES = "/var/cache/apt/archives"

REPO_ID = "hpc-stateless-base"
#: The repository id of an EL/SUSE ``updates_mirror``.
UPDATES_REPO_ID = "hpc-stateless-updates"
RECORD_RELPATH = "var/lib/hpc-stateless/rootfs.json"
DEFAULT_CACHE_ROOT = HOST_CACHE_ROOT  # one place: _build/rootless.py

# Keys whose change means a different root file system. The tool, its version and the
# privilege mode are recorded for provenance only: a host upgrade of debootstrap, or the
# switch to mmdebstrap, must not make every existing root "different".
COMPARED_KEYS: tuple[str, ...] = (
    "distro",
    "release",
    "mirror",
    "variant",
    "packages",
    "components",
    "arch",
    "extra_args",
    "sources",
)


@dataclass(frozen=True)
class BootstrapSpec:
    """What to bootstrap where; built from the module parameters."""

    path: str
    distro: str
    release: str
    mirror: str
    variant: str | None = None
    packages: tuple[str, ...] = ()
    components: tuple[str, ...] = ("main",)
    arch: str | None = None
    extra_args: tuple[str, ...] = ()
    keyring: str | None = None
    gpg_check: bool = True
    cache_dir: str = ""
    tool: str = ""
    mode: str = MODE_ROOT
    updates_mirror: str | None = None
    security_mirror: str | None = None
    updates: bool | None = None
    security: bool | None = None
    layer: str = ""
    #: MODE_MAPPED: the (uid, gid) ranges of the user namespace the commands run in (idshift.root_ranges).
    id_ranges: tuple[IdRange, IdRange] | None = None
    family: str = field(init=False)
    #: Every source the root installs from and keeps (_contract/sources.py), the release first.
    sources: tuple[Source, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", distro_family(self.distro))
        object.__setattr__(self, "sources", bootstrap_sources({
            "distro": self.distro, "release": self.release, "mirror": self.mirror, "components": self.components,
            "keyring": self.keyring, "gpg_check": self.gpg_check, "updates_mirror": self.updates_mirror,
            "security_mirror": self.security_mirror, "updates": self.updates, "security": self.security,
        }, self.layer))
        object.__setattr__(self, "tool", resolve_tool(self.distro, self.tool))
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode == MODE_MAPPED:
            if self.tool not in MAPPED_TOOLS:
                raise ValueError(unmapped_tool_message(self.tool, self.layer))
            if self.id_ranges is None:
                raise ValueError("a mapped bootstrap needs the id ranges of its user namespace")
        elif self.mode != MODE_ROOT and self.tool == "debootstrap":
            raise ValueError("tool debootstrap needs root on the host (it makes device nodes); this build runs "
                             f"without it ({mode_description(self.mode)}): use tool: mmdebstrap, the default")
        if not self.cache_dir:
            object.__setattr__(self, "cache_dir", default_cache_dir(self.family))


def unmapped_tool_message(tool: str, layer: str = "") -> str:
    """Why ``tool`` cannot bootstrap in a user namespace, and the two ways on."""
    where = f"the vars of layer {layer}" if layer else "the layer's vars"
    other = "use tool: mmdebstrap (the default), or " if tool == "debootstrap" else ""
    return (f"tool {tool} cannot run its package scripts in a user namespace, and this root build runs them there "
            f"(hpc_stateless_build_userns: true, the default; the rootfs module's userns option): {other}set "
            f"hpc_stateless_build_userns: false in {where} to run them as host root, an explicit opt-in for packages "
            "you trust (docs/rootless.md)")


def distro_family(distro: str) -> str:
    """Return the tool family for `distro`; ValueError lists the supported ones."""
    try:
        return DISTRO_FAMILIES[distro]
    except KeyError:
        supported = ", ".join(sorted(DISTRO_FAMILIES))
        raise ValueError(f"distro {distro!r} is not supported; supported: {supported}") from None


def resolve_tool(distro: str, tool: str | None) -> str:
    """Return the tool that bootstraps `distro`: `tool`, or the family's default; ValueError naming `tool`."""
    tools = FAMILY_TOOLS[distro_family(distro)]
    if not tool:
        return tools[0]
    if tool not in tools:
        raise ValueError(f"tool {tool!r} cannot bootstrap distro {distro!r}; use one of: {', '.join(tools)}")
    return tool


def mode_description(mode: str) -> str:
    """Return a phrase that says where a build in `mode` runs (for messages)."""
    return {
        MODE_ROOT: "as root",
        MODE_MAPPED: "as root, the tools as root of a user namespace",
        MODE_USERNS: "as root inside a user namespace",
        MODE_UNSHARE: "as an ordinary user",
    }[mode]


def in_user_namespace(uid_map: str) -> bool:
    """Tell from /proc/self/uid_map's text whether it describes a user namespace other than the host's.

    The host's (initial) namespace maps every id to itself: one line ``0 0 4294967295``.
    """
    return parse_id_map(uid_map) != INITIAL_ID_MAP


def privilege_mode(euid: int, uid_map: str) -> str:
    """Return how the bootstrap tools run for a process with `euid` and /proc/self/uid_map text `uid_map`."""
    if euid != 0:
        return MODE_UNSHARE
    return MODE_USERNS if in_user_namespace(uid_map) else MODE_ROOT


def default_cache_dir(family: str, cache_root: str = DEFAULT_CACHE_ROOT) -> str:
    """Return the default package cache directory of a tool family (both Debian tools share one)."""
    return os.path.join(cache_root, family)


def resolve_mirror(distro: str, mirror: str | None) -> str:
    """Return `mirror`, or the distro's default; ValueError naming `mirror` if none."""
    if mirror:
        return mirror
    if distro in DEFAULT_MIRRORS:
        return DEFAULT_MIRRORS[distro]
    raise ValueError(
        f"mirror is required for distro {distro!r}: give a repository URL or a local "
        f"directory holding repodata (e.g. mirror: https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/)"
    )


def effective_packages(spec: BootstrapSpec) -> list[str]:
    """Return the sorted, de-duplicated package list the tool is asked to install."""
    packages = spec.packages or DEFAULT_PACKAGES.get(spec.family, ())
    return sorted(set(packages))


def rpmdb_path(distro: str) -> str:
    """Return the rpm database path the distro's own rpm expects."""
    return RPMDB_PATHS.get(distro, DEFAULT_RPMDB_PATH)


def rpm_macros(distro: str) -> str:
    """Return an ~/.rpmmacros body that puts the rpm database where the image expects it."""
    return f"%_dbpath {rpmdb_path(distro)}\n"


def cache_state_in_root(spec: BootstrapSpec) -> list[str]:
    """Return the paths below `spec.path` where the tool leaves state about the host cache directory."""
    shadow = os.path.join(spec.path, spec.cache_dir.lstrip("/"))
    return [os.path.join(shadow, entry) for entry in CACHE_STATE_IN_ROOT.get(spec.family, ())]


def downloaded_packages_in_root(spec: BootstrapSpec) -> list[str]:
    """Return the package files the tool left in the root's own package cache, sorted.

    debootstrap keeps every .deb it installed in <root>/var/cache/apt/archives (about 50 MB for a
    minbase root), and each layer above would carry them; the host cache already holds them.
    """
    if spec.tool != "debootstrap":
        return []  # mmdebstrap's archive is the package cache's overlay, unmounted before its cleanup
    archives = os.path.join(spec.path, "var", "cache", "apt", "archives")
    try:
        names = os.listdir(archives)
    except OSError:
        return []
    return sorted(os.path.join(archives, name) for name in names
                  if name.endswith(".deb") and os.path.isfile(os.path.join(archives, name)))


def _as_file_url(location: str) -> str:
    """Turn a local path into a file:// URL; URLs pass through."""
    return f"file://{location}" if location.startswith("/") else location


def debian_selection_args(spec: BootstrapSpec) -> list[str]:
    """The options debootstrap and mmdebstrap share, spelled alike: the variant, the packages, the components."""
    args = [f"--variant={spec.variant}"] if spec.variant else []
    packages = effective_packages(spec)
    names = [package for package in packages if "/" not in package]
    if names:
        args.append("--include=" + ",".join(names))
    # A local .deb (mmdebstrap installs one given by its path): one option each, since mmdebstrap takes an option
    # value holding a "/" whole, as one path.
    args += [f"--include={package}" for package in packages if "/" in package]
    return args + ["--components=" + ",".join(spec.components or ("main",))]


def debootstrap_argv(spec: BootstrapSpec, binary: str = "debootstrap") -> list[str]:
    """Return the debootstrap command line; options first, since debootstrap stops at the first positional."""
    argv = [binary, *debian_selection_args(spec)]
    if spec.arch:
        argv += ["--arch", spec.arch]
    argv.append(f"--cache-dir={spec.cache_dir}")
    if not spec.gpg_check:
        argv.append("--no-check-gpg")
    elif spec.keyring:
        argv.append(f"--keyring={spec.keyring}")
    argv += list(spec.extra_args)
    argv += [spec.release, spec.path, spec.mirror]
    return argv


APT_RETRIES = f'--aptopt=Acquire::Retries "{APT_RETRY_COUNT}"'
#: debootstrap downloads with wget, which gives up at once when the mirror's name does not resolve or the connection
#: is refused (its own retries then fail in the same instant). Its configuration for the run (``WGETRC``, a file of the
#: run's private directory, read after the host's /etc/wgetrc) makes those transient and waits 1, 2, ... 10 s between
#: tries (``waitretry``), about a minute in all as RETRY_DELAYS: the resolver outage apt rides out (APT_RETRY_COUNT)
#: passes for debootstrap too.
WGETRC_TEXT = "tries = 12\nwaitretry = 10\nretry_on_host_error = on\nretry_connrefused = on\n"


def mmdebstrap_argv(spec: BootstrapSpec, binary: str = "mmdebstrap") -> list[str]:
    """Return the mmdebstrap command line (options first, then suite, target, mirror).

    The host cache directory is the lower layer of an overlay mounted over the root's apt archive while
    mmdebstrap runs (hooks run as root, in the host's or the build's user namespace): the packages' scripts
    never change a cached file (apt takes one by name and size alone); what apt downloads is kept in the
    overlay's upper directory (``--skip=essential/unlink``, :func:`caches.bootstrap_view`) and merged into the
    cache afterwards (:meth:`Bootstrapper.apply`). Where the kernel refuses the overlay, that directory alone is
    bound. It is unmounted before mmdebstrap's cleanup, which then leaves no package file in the root. The
    package lists stay, as with debootstrap.
    """
    archives = APT_ARCHIVES.lstrip("/")
    cache = shlex.quote(spec.cache_dir)
    view = caches.bootstrap_view(spec.cache_dir, spec.path)
    upper, work = (shlex.quote(os.path.join(view, name)) for name in ("upper", "work"))
    overlay = f"mount -t overlay overlay -o lowerdir={cache},upperdir={upper},workdir={work}"
    # mmdebstrap's root mode also works as uid 0 inside a user namespace (it bind-mounts /dev
    # entries where it cannot make them); its own unshare mode maps root to the first
    # subordinate id, which is not how buildah's storage maps it.
    argv = [binary, "--mode=root", *debian_selection_args(spec), APT_RETRIES]
    target = mapped_target(spec) if spec.mode == MODE_MAPPED else spec.path
    if spec.arch:
        argv.append(f"--architectures={spec.arch}")
    if not spec.gpg_check:
        argv += ['--aptopt=Acquire::AllowInsecureRepositories "true"',
                 '--aptopt=APT::Get::AllowUnauthenticated "true"']
    elif spec.keyring:
        argv.append(f"--keyring={spec.keyring}")
    argv += [
        "--skip=essential/unlink",
        # Keep apt's package lists, as debootstrap does: a role's apt with cache_valid_time trusts a fresh
        # list directory, and mmdebstrap's cleanup would leave it fresh and empty ("No package matching").
        "--skip=cleanup/apt/lists",
        f"--hook-dir={MMDEBSTRAP_FILE_MIRROR_HOOKS}",
        f'--setup-hook=mkdir -p "$1/{archives}" && {{ {overlay} "$1/{archives}" || {overlay},userxattr "$1/{archives}"'
        f' || mount -o bind {upper} "$1/{archives}"; }}',
        f'--customize-hook=umount "$1/{archives}"',
    ]
    argv += list(spec.extra_args)
    argv += [spec.release, target, *source_lines(spec)]
    return argv


def mapped_target(spec: BootstrapSpec) -> str:
    """Where a mapped bootstrap's tool sees the tree: a directory of its bootstrap view (caches.bootstrap_view),
    which the mapped uid may search, the tree bound there by :data:`MAPPED_BIND_SCRIPT`."""
    return os.path.join(caches.bootstrap_view(spec.cache_dir, spec.path), caches.BOOTSTRAP_TARGET)


def mapped_argv(spec: BootstrapSpec, argv: list[str], binaries: dict[str, str] | None = None) -> list[str]:
    """``argv`` run as root of a user namespace whose ids 0.. are root's subordinate range (``spec.id_ranges``).

    Host root first makes a mount namespace and binds the tree at :func:`mapped_target`; util-linux ``unshare``
    then makes the user namespace (its maps written by newuidmap/newgidmap from root's /etc/subuid and
    /etc/subgid lines) with a mount namespace of its own, in which the tool mounts what it needs (/proc, the
    package cache's overlay) and which no mount outlives. The tool's files carry the range's host ids on disk:
    :meth:`RootfsBootstrap.apply` maps them back (idshift.shift_back).
    """
    binaries = binaries or {}
    unshare = binaries.get("unshare", "unshare")
    if spec.id_ranges is None:
        raise ValueError("a mapped bootstrap needs the id ranges of its user namespace")
    uids, gids = spec.id_ranges
    return [unshare, "--mount", "--propagation=private", "--", "sh", "-c", MAPPED_BIND_SCRIPT, "sh",
            spec.path, mapped_target(spec),
            unshare, "--user", "--mount", f"--map-users={uids.start},0,{uids.count}",
            f"--map-groups={gids.start},0,{gids.count}", "--setuid=0", "--setgid=0", "--", *argv]


#: apt's lists parsed into its binary caches in the tree (aptconf.PARSE_LISTS), by its own apt-cache where it has one.
PARSE_IN_TREE = f'if [ -x "$1/usr/bin/apt-cache" ]; then exec chroot "$1" {" ".join(aptconf.PARSE_LISTS)}; fi'


def parse_lists_argv(spec: BootstrapSpec, binaries: dict[str, str] | None = None) -> list[str] | None:
    """A mapped bootstrap's last command: the root's apt lists parsed (aptconf.PARSE_LISTS) in its user namespace.

    The commit of a root layer parses lists it finds unparsed by running the tree's apt-cache in the working
    container (_build/layer.py); a bootstrap's container is not mapped, so that would run a binary of the tree as
    host root. Parsed here, the commit finds ``srcpkgcache.bin`` and runs nothing. None for any other bootstrap.
    """
    if spec.mode != MODE_MAPPED or spec.tool != "mmdebstrap":
        return None
    return mapped_argv(spec, ["sh", "-c", PARSE_IN_TREE, "sh", mapped_target(spec)], binaries)


def merge_keyrings(spec: BootstrapSpec) -> list[str]:
    """The keyrings whose signature on a Release file of the root lets its apt lists vouch for what the bootstrap
    downloaded into the package cache: the sources' own (``keyring``), else the distribution's archive keyrings of
    the host (those mmdebstrap's apt trusts); none without signature checks (``gpg_check: false``: nothing is
    merged)."""
    if not spec.gpg_check:
        return []
    given = sorted({source.signed_by for source in spec.sources if source.signed_by})
    return given or [keyring for keyring in DISTRO_KEYRINGS if os.path.isfile(keyring)]


def source_lines(spec: BootstrapSpec) -> list[str]:
    """The one-line apt entries of a Debian-style root's sources, as mmdebstrap takes them (one mirror each).

    No ``signed-by``: apt runs outside the root while mmdebstrap sets it up, so the keyring is given with
    ``--keyring`` instead; the image's own sources.list is written after the bootstrap (:func:`sources_list_text`).
    """
    return [" ".join(["deb", source.uri, source.suite, *source.components]) for source in spec.sources]


def sources_list_text(spec: BootstrapSpec) -> str:
    """The image's /etc/apt/sources.list: every source of the root, the keyring named where one is given."""
    return render_sources_list(spec.sources)


def debootstrap_upgrade_argv(spec: BootstrapSpec, binary: str = "chroot") -> list[str] | None:
    """The command that brings a debootstrap root up to its updates and security suites (None with only the release).

    debootstrap installs from one suite; once the root's sources.list names them all, apt inside the root
    upgrades what those suites carry newer. /proc is mounted for the maintainer scripts, and unmounted after.
    """
    if len(spec.sources) < 2:
        return None
    apt = f"apt-get -o Acquire::Retries={APT_RETRY_COUNT}"
    script = (f"mount -t proc proc /proc && {apt} update && {apt} -y dist-upgrade; rc=$?; "
              "umount /proc; apt-get clean; exit $rc")
    return [binary, spec.path, "/bin/sh", "-c", script]


def dnf_argv(spec: BootstrapSpec, binary: str = "dnf") -> list[str]:
    """Return the ``dnf --installroot`` command line; only our one repository is ever enabled."""
    argv = [
        binary,
        f"--installroot={spec.path}",
        f"--releasever={spec.release}",
        # Never read or use the host's repositories (invariant 3).
        "--setopt=reposdir=/dev/null",
        "--disablerepo=*",
        f"--repofrompath={REPO_ID},{_as_file_url(spec.mirror)}",
        f"--enablerepo={REPO_ID}",
        *updates_repo_args(spec),
        "--setopt=install_weak_deps=False",
        f"--setopt=cachedir={spec.cache_dir}",
        "--setopt=keepcache=True",
    ]
    if spec.arch:
        argv.append(f"--forcearch={RPM_ARCHES.get(spec.arch, spec.arch)}")
    if not spec.gpg_check:
        argv.append("--nogpgcheck")
    else:
        for repo in rpm_repo_ids(spec):
            argv.append(f"--setopt={repo}.gpgcheck=True")
            if spec.keyring:
                argv.append(f"--setopt={repo}.gpgkey={_as_file_url(spec.keyring)}")
    argv += list(spec.extra_args)
    argv += ["-y", "install"] + effective_packages(spec)
    return argv


def rpm_repo_ids(spec: BootstrapSpec) -> list[str]:
    """The repository ids an EL/SUSE bootstrap enables: ours, and the updates repository when one is set."""
    return [REPO_ID] + [UPDATES_REPO_ID for source in spec.sources if source.kind == "updates"]


def updates_repo_args(spec: BootstrapSpec) -> list[str]:
    """dnf's options that add and enable the ``updates_mirror`` repository (none without one)."""
    return [arg for source in spec.sources if source.kind == "updates"
            for arg in (f"--repofrompath={UPDATES_REPO_ID},{source.uri}", f"--enablerepo={UPDATES_REPO_ID}")]


def _zypper_global(spec: BootstrapSpec, binary: str) -> list[str]:
    """Return the zypper global options shared by every zypper call."""
    argv = [
        binary,
        f"--root={spec.path}",
        "--non-interactive",
        # All of zypper's caches (metadata and kept packages) live on the host, outside the root.
        f"--cache-dir={spec.cache_dir}",
    ]
    if not spec.gpg_check:
        argv.append("--no-gpg-checks")
    return argv


def zypper_argvs(spec: BootstrapSpec, binary: str = "zypper", rpm_binary: str = "rpm") -> list[list[str]]:
    """Return the zypper command lines: [rpm key import,] addrepo, install.

    ``--root`` keeps repository definitions inside the new root, so the host's
    repositories are neither read nor changed. A given keyring is imported into
    the new root's rpm database, so only that key is trusted (no auto-import).
    """
    if spec.arch and RPM_ARCHES.get(spec.arch, spec.arch) != RPM_ARCHES.get(host_arch()):
        raise ValueError(f"arch {spec.arch} is not supported for zypper-family distros: zypper installs the build "
                         f"host's architecture ({host_arch()}); build this layer on a {spec.arch} host or remove arch")
    commands: list[list[str]] = []
    if spec.gpg_check and spec.keyring:
        commands.append([rpm_binary, f"--root={spec.path}", "--import", spec.keyring])
    for source, repo in zip(spec.sources, rpm_repo_ids(spec)):
        addrepo = _zypper_global(spec, binary) + ["addrepo", "--refresh", "--keep-packages"]
        addrepo.append("--gpgcheck" if spec.gpg_check else "--no-gpgcheck")
        addrepo += [source.uri, repo]
        commands.append(addrepo)
    install = _zypper_global(spec, binary) + ["install", "--no-recommends"]
    install += list(spec.extra_args)
    install += effective_packages(spec)
    commands.append(install)
    return commands


def bootstrap_commands(spec: BootstrapSpec, binaries: dict[str, str] | None = None,
                       inner_env: dict[str, str] | None = None) -> list[list[str]]:
    """Return every command line, in order, that bootstraps `spec`.

    `binaries` maps tool names (mmdebstrap, debootstrap, dnf, zypper, rpm, buildah) to resolved
    paths. In MODE_UNSHARE each command runs under ``buildah unshare``, with `inner_env` set
    inside it only (buildah itself needs the user's own HOME to find its run directory).
    """
    binaries = binaries or {}
    if spec.tool == "mmdebstrap":
        commands = [mmdebstrap_argv(spec, binaries.get("mmdebstrap", "mmdebstrap"))]
    elif spec.tool == "debootstrap":
        commands = [debootstrap_argv(spec, binaries.get("debootstrap", "debootstrap"))]
    elif spec.tool == "dnf":
        commands = [dnf_argv(spec, binaries.get("dnf", "dnf"))]
    else:
        commands = zypper_argvs(spec, binaries.get("zypper", "zypper"), binaries.get("rpm", "rpm"))
    if spec.mode == MODE_MAPPED:
        commands = [mapped_argv(spec, argv, binaries) for argv in commands]
    if spec.mode == MODE_UNSHARE:
        buildah = binaries.get("buildah", "buildah")
        inner = ["env", *[f"{name}={value}" for name, value in sorted((inner_env or {}).items())]] if inner_env else []
        commands = [[buildah, "unshare", "--", *inner, *argv] for argv in commands]
    return commands


#: How long the check of a source's release file waits for its mirror.
PROBE_TIMEOUT = 30.0


def release_files(source: Source) -> list[str]:
    """The files whose presence shows that ``source`` serves its suite (any one of them), as URLs."""
    base = source.uri.rstrip("/")
    if not source.suite:  # an rpm repository
        return [f"{base}/repodata/repomd.xml"]
    if source.suite.endswith("/"):  # a flat repository
        base = f"{base}/{source.suite.rstrip('/')}" if source.suite != "./" else base
        return [f"{base}/InRelease", f"{base}/Release"]
    return [f"{base}/dists/{source.suite}/InRelease", f"{base}/dists/{source.suite}/Release"]


def probe_url(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when ``url`` (http(s):// or file://) can be read; otherwise why not. Read the way the archive view
    reads it (_archive/index.py fetch_url: one HTTP client, one set of error messages; a fault that may pass, such
    as a resolver outage, is tried again as the archive view does)."""
    try:
        answer = fetch_with_retries(fetch_url, url, timeout=timeout)
    except FetchFailed as exc:
        return f"unreachable ({exc})"
    return "no such file" if url.startswith("file://") and answer.status == 404 else (
        None if answer.status == 200 else f"HTTP {answer.status}")


def source_problem(source: Source, probe: Callable[[str], str | None] = probe_url) -> str | None:
    """None when ``source``'s mirror serves its suite; otherwise a message naming the source, the suite and what to do."""
    answers = []
    for url in release_files(source):
        problem = probe(url)
        if problem is None:
            return None
        answers.append(f"{url}: {problem}")
    unreachable = all("unreachable" in answer for answer in answers)
    what = "its mirror cannot be reached" if unreachable else f"the mirror does not serve suite {source.suite!r}"
    if not source.suite:
        what = "the mirror holds no repository" if not unreachable else what
    switch = {"updates": " or switch it off with updates: false", "security": " or switch it off with security: false"}
    if unreachable:
        todo = "check the URL, the build host's network and proxy settings (http_proxy)"
    elif source.suite:
        todo = ("check the suite name and the mirror URL: a dated snapshot URL is the archive's root, such as "
                "http://snapshot.debian.org/archive/debian-security/20261101T000000Z, which serves dists/<suite>/")
    else:
        todo = "point the mirror at a directory or URL holding repodata/repomd.xml"
    return (f"the {source} cannot be used: {what} ({'; '.join(answers)}). Nothing was bootstrapped; "
            f"{todo}{switch.get(source.kind, '')}.")


def required_binaries(spec: BootstrapSpec) -> dict[str, str]:
    """Return {binary: Debian package providing it} that bootstrapping `spec` runs."""
    needed = {spec.tool: TOOL_PACKAGES[spec.tool]}
    if spec.family == "zypper" and spec.gpg_check and spec.keyring:
        needed["rpm"] = "rpm"
    if spec.mode == MODE_UNSHARE:
        needed["buildah"] = "buildah"
    if spec.mode == MODE_MAPPED:
        needed.update({name: TOOL_PACKAGES[name] for name in ("unshare", "newuidmap", "newgidmap")})
    return needed


def bootstrap_record(spec: BootstrapSpec, tool_version: str | None = None) -> dict[str, Any]:
    """Return the record of what `spec` bootstraps, as stored in the root.

    ``tool``, ``tool_version`` and ``mode`` are provenance: :data:`COMPARED_KEYS` leaves them out.
    """
    debootstrap = spec.family == "debootstrap"
    return {
        "distro": spec.distro,
        "release": spec.release,
        "mirror": spec.mirror,
        # dnf and zypper always install minimally: no variant, no components.
        "variant": spec.variant if debootstrap else None,
        "packages": effective_packages(spec),
        "components": list(spec.components) if debootstrap else None,
        "arch": spec.arch,
        "extra_args": list(spec.extra_args),
        "sources": [f"{source.kind} {source.uri} {source.suite}".rstrip() for source in spec.sources],
        "tool": spec.tool,
        "tool_version": tool_version,
        "mode": spec.mode,
    }


def record_differences(existing: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """Return the sorted keys whose values differ between two records (provenance keys ignored)."""
    return sorted(key for key in COMPARED_KEYS if existing.get(key) != wanted.get(key))


def parse_tool_version(output: str) -> str | None:
    """Return the version from a tool's ``--version`` output (first line, last word)."""
    for line in output.splitlines():
        words = line.split()
        if words:
            return words[-1]
    return None


# -- the rootfs module's options ------------------------------------------------------------------
# The module option type of each kind of bootstrap value (_contract/inventory.py's BOOTSTRAP_KEYS).
_OPTION_TYPES: dict[str, dict[str, Any]] = {
    KIND_STRING: {"type": "str"},
    KIND_PATH: {"type": "path"},
    KIND_STRINGS: {"type": "list", "elements": "str"},
    KIND_BOOL: {"type": "bool"},
}
# What the rootfs module adds to a bootstrap key's type: its choices and defaults.
_OPTION_EXTRAS: dict[str, dict[str, Any]] = {
    "distro": {"choices": sorted(SUPPORTED_DISTROS)},
    "tool": {"choices": bootstrap_tool_choices()},
    "packages": {"default": []},
    "components": {"default": ["main"]},
    "extra_args": {"default": []},
    "keyring": {"no_log": False},
    "gpg_check": {"default": True},
    "updates_mirror": {"no_log": False},
    "security_mirror": {"no_log": False},
}


def bootstrap_options(required: bool = True) -> dict[str, dict[str, Any]]:
    """The rootfs module's argument_spec entries of the bootstrap keys, derived from BOOTSTRAP_KEYS.

    ``required``: whether the keys a layer must set (BOOTSTRAP_REQUIRED) are required options; the
    module's top-level ones are not, since the whole mapping may come as its ``bootstrap`` option.
    Every call returns new dictionaries (argument_spec defaults are not to be shared).
    """
    options = {key: {**copy.deepcopy(_OPTION_TYPES[kind]), **copy.deepcopy(_OPTION_EXTRAS.get(key, {}))}
               for key, kind in BOOTSTRAP_KEYS.items()}
    for key in BOOTSTRAP_REQUIRED:
        options[key]["required"] = required
    return options


# -- the rootfs module's job ----------------------------------------------------------------------
OUTPUT_TAIL_LINES = 40
CACHE_LOCK_NAME = ".hpc-stateless-rootfs.lock"
#: How long a bootstrap waits for another one that holds its package cache (a cold debootstrap takes minutes).
CACHE_LOCK_TIMEOUT = 1800.0
C_LOCALE = _process.locale_env("C", language=True)
IGNORED_ENTRIES = frozenset({"lost+found"})


class RootfsError(Exception):
    """The bootstrap cannot go on; ``result`` holds the result fields the module fails with besides ``msg``."""

    def __init__(self, msg: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result or {}


@dataclass(frozen=True)
class RootfsRequest:
    """What the rootfs module is asked: where to bootstrap, the layer's bootstrap keys, the cache, force.

    ``bootstrap`` holds every key of BOOTSTRAP_KEYS (None where not given), from the module's
    ``bootstrap`` option or its individual options.
    """

    path: str
    bootstrap: dict[str, Any]
    cache_dir: str | None = None
    force: bool = False
    layer: str = ""
    #: As root on the host: run the tool in a user namespace from root's subordinate range (MODE_MAPPED).
    userns: bool = False

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> RootfsRequest:
        """The request of the module's validated parameters."""
        given = params.get("bootstrap") or params
        return cls(path=params["path"], bootstrap={key: given.get(key) for key in BOOTSTRAP_KEYS},
                   cache_dir=params.get("cache_dir"), force=bool(params.get("force")),
                   layer=params.get("layer") or "", userns=bool(params.get("userns")))

    def spec(self, mode: str = MODE_ROOT, id_ranges: tuple[IdRange, IdRange] | None = None) -> BootstrapSpec:
        """The BootstrapSpec of this request for a build in ``mode`` (MODE_MAPPED: in a user namespace of
        ``id_ranges``); ValueError names the offending option."""
        path = os.path.abspath(self.path)
        if os.path.realpath(path) == "/":
            raise ValueError("path must not be / : the rootfs module never bootstraps over the build host")
        keys = self.bootstrap
        return BootstrapSpec(
            path=path,
            distro=keys["distro"],
            release=keys["release"],
            mirror=resolve_mirror(keys["distro"], keys["mirror"]),
            variant=keys["variant"],
            packages=tuple(keys["packages"] or ()),
            components=tuple(keys["components"] or ()),
            arch=keys["arch"],
            extra_args=tuple(keys["extra_args"] or ()),
            keyring=keys["keyring"],
            gpg_check=keys["gpg_check"] is not False,
            cache_dir=self.cache_dir or default_cache_dir(distro_family(keys["distro"]), cache_root(mode)),
            tool=keys["tool"] or "",
            mode=mode,
            updates_mirror=keys["updates_mirror"],
            security_mirror=keys["security_mirror"],
            updates=keys["updates"],
            security=keys["security"],
            layer=self.layer,
            id_ranges=id_ranges,
        )


def current_mode() -> str:
    """Return how the tools run here, from our euid and whether we are in a user namespace."""
    try:
        with open("/proc/self/uid_map", encoding="utf-8") as handle:
            uid_map = handle.read()
    except OSError:
        uid_map = ""
    return privilege_mode(os.geteuid(), uid_map)


def cache_root(mode: str) -> str:
    """Return the root of the default package caches for a build in `mode`."""
    return DEFAULT_CACHE_ROOT if mode in (MODE_ROOT, MODE_MAPPED) else host_cache_path(DEFAULT_CACHE_ROOT)


def make_dev_entries(root: str) -> list[str]:
    """Make in the tree ``root``'s /dev what a bootstrap as host root leaves there (:data:`DEV_NODES`,
    :data:`DEV_LINKS`, :data:`DEV_DIRS`), owned by root, each only where nothing has its name; the names made.
    Relative to a descriptor of /dev found inside the tree: nothing of the tree leads the host elsewhere."""
    made = []
    directory = _imagepath.make_dirs(root, "dev")
    try:
        def absent(name: str) -> bool:
            try:
                os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                return True
            return False

        for name, major, minor in DEV_NODES:
            if absent(name):
                os.mknod(name, 0o666 | stat.S_IFCHR, os.makedev(major, minor), dir_fd=directory)
                os.chmod(name, 0o666, dir_fd=directory)  # the node just made: mknod's mode is the umask's
                made.append(name)
        for name, target in DEV_LINKS:
            if absent(name):
                os.symlink(target, name, dir_fd=directory)
                made.append(name)
        for name in DEV_DIRS:
            if absent(name):
                os.mkdir(name, 0o755, dir_fd=directory)
                made.append(name)
    finally:
        os.close(directory)
    return made


def unreadable_by_others(path: str) -> str | None:
    """None when any uid may read ``path`` (a file or a directory tree's top) and search its parents; otherwise the
    first component that stops it."""
    parts = os.path.abspath(path).split("/")[1:]
    for depth in range(1, len(parts) + 1):
        component = "/" + "/".join(parts[:depth])
        try:
            mode = os.stat(component).st_mode
        except OSError as exc:
            return f"{component}: {exc.strerror}"
        last = depth == len(parts)
        needed = (stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)) if last else stat.S_IXOTH
        if mode & needed != needed:
            return f"{component} is mode {stat.S_IMODE(mode):04o}"
    return None


def tail(text: str, lines: int = OUTPUT_TAIL_LINES) -> list[str]:
    """Return the last `lines` lines of `text`."""
    return text.splitlines()[-lines:]


def unknown_entries(path: str) -> list[str]:
    """Return the sorted entries of `path` that are not expected in an empty mount point."""
    if not os.path.isdir(path):
        return []
    return sorted(entry for entry in os.listdir(path) if entry not in IGNORED_ENTRIES)


def cache_lock(cache_dir: str, root: str = "", layer: str = "") -> Flock:
    """The exclusive lock on the package cache while one bootstrap uses it.

    Two root layers (or two builds, of two projects) may bootstrap at once: apt refuses a package cache
    whose lock another apt holds, and dnf's and zypper's caches take no second writer either; the second
    bootstrap waits here instead of failing (:meth:`RootfsBootstrap.locked_cache`). The lock file says
    which process holds it, and for which layer and root.
    """
    whose = (f"layer {layer} ({root})" if root else f"layer {layer}") if layer else root
    return Flock(os.path.join(cache_dir, CACHE_LOCK_NAME), f"rootfs bootstrap of {whose}" if whose else "rootfs bootstrap")


class RootfsBootstrap:
    """Bootstraps one root file system (the rootfs module's job); every change goes through `apply`.

    ``warn`` receives the warnings for the user; :class:`RootfsError` carries every failure with
    the result fields known at that point.
    """

    def __init__(self, request: RootfsRequest, check_mode: bool = False,
                 warn: Callable[[str], None] | None = None, mode: str | None = None,
                 probe: Callable[[str], str | None] = probe_url) -> None:
        self.force = request.force
        self.probe = probe
        self.check_mode = check_mode
        self.warn = warn or (lambda msg: None)
        try:
            mode = mode or current_mode()
            ranges = None
            if mode == MODE_ROOT and request.userns:
                mode, ranges = MODE_MAPPED, idshift.root_ranges()
            self.spec = request.spec(mode, ranges)
            # Builds the command lines once, so an unsupported combination (arch with zypper) fails
            # here with its message, before anything is read or run.
            bootstrap_commands(self.spec)
        except (ValueError, idshift.IdShiftError) as exc:
            raise RootfsError(str(exc)) from None
        self.record_path = os.path.join(self.spec.path, RECORD_RELPATH)
        self.result: dict[str, Any] = {"changed": False, "path": self.spec.path, "cmd": [], "commands": []}

    def fail(self, msg: str, **extra: Any) -> NoReturn:
        """Fail with the common result fields."""
        raise RootfsError(msg, {**self.result, **extra})

    def read_existing_record(self) -> dict[str, Any] | None:
        """Return the stored record, None without one; fail on an unreadable record unless forced."""
        if _imagepath.lstat(self.spec.path, RECORD_RELPATH, follow_last=False) is None:
            return None
        try:
            # Read inside the tree, as every file of it: its links lead nowhere on the host.
            record = json.loads(_imagepath.read_file(self.spec.path, RECORD_RELPATH, follow_last=False) or b"")
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            return record
        except (OSError, ValueError) as exc:
            if self.force:
                return {}
            self.fail(f"cannot read the bootstrap record {self.record_path}: {exc}. "
                      "Remove the directory's content or set force: true to bootstrap again.")

    def needs_bootstrap(self, existing: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
        """Decide whether to bootstrap; fail when that would overwrite something unasked."""
        if existing:
            differing = record_differences(existing, wanted)
            if not differing:
                return False
            if not self.force:
                details = "; ".join(f"{key}: {existing.get(key)!r} -> {wanted.get(key)!r}" for key in differing)
                self.fail(f"{self.spec.path} already holds a different root file system (differs in: "
                          f"{', '.join(differing)}; {details}). Use a fresh directory, or set force: true "
                          "to wipe it and bootstrap again.", differing_keys=differing, record=existing)
            return True
        if existing is None and unknown_entries(self.spec.path) and not self.force:
            shown = ", ".join(unknown_entries(self.spec.path)[:10])
            self.fail(f"refusing to bootstrap into {self.spec.path}: it is not empty and holds no bootstrap "
                      f"record ({RECORD_RELPATH}); found: {shown}. Use an empty directory, or set force: true "
                      "to wipe its content.")
        return True

    def resolve_binaries(self) -> dict[str, str]:
        """Return absolute paths of the tools needed; fail naming the missing binary and its package."""
        binaries = {}
        for binary, package in required_binaries(self.spec).items():
            try:
                binaries[binary] = _process.which(binary)
            except _process.ToolMissing:
                self.fail(f"{binary} is not installed on the build host (needed for distro "
                          f"{self.spec.distro}); install the Debian package '{package}', e.g. apt-get install {package}.")
        return binaries

    def wipe(self, binaries: dict[str, str]) -> None:
        """Remove everything in `path` except lost+found; never crosses a mount point."""
        mounted = mounts_below(self.spec.path)
        if mounted:
            self.fail(f"refusing to wipe {self.spec.path}: file systems are mounted below it "
                      f"({', '.join(mounted)}); unmount them first.")
        if self.spec.mode == MODE_UNSHARE:
            # Files of a root bootstrapped without root belong to subordinate ids: only the
            # user namespace they were made in may remove them.
            targets = [os.path.join(self.spec.path, entry) for entry in unknown_entries(self.spec.path)]
            _process.run([binaries["buildah"], "unshare", "--", "rm", "-rf", "--one-file-system", "--", *targets])
            return
        for entry in unknown_entries(self.spec.path):
            target = os.path.join(self.spec.path, entry)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.unlink(target)

    def run(self, argv: list[str], environ: dict[str, str]) -> tuple[str, str]:
        """Run one command; on failure keep the directory and tell the user how to retry."""
        rc, out, err = _process.run(argv, check=False, env=environ)
        if rc != 0:
            # A tool that failed half-way may leave its binds (package cache, mirror) mounted.
            self.release_mounts()
            self.fail(f"bootstrap command failed (rc={rc}): {' '.join(argv)}. No record was written; "
                      f"{self.spec.path} is left as is for inspection. Fix the cause, then rerun with "
                      "force: true (or remove the working container) to bootstrap cleanly.",
                      rc=rc, failed_cmd=argv, stderr_lines=tail(err), stdout_lines=tail(out))
        return out, err

    def release_mounts(self) -> None:
        """Unmount whatever is still mounted below `path`, deepest first."""
        for point in mounts_below(self.spec.path):
            if not _process.run(["umount", point], check=False).ok:
                _process.run(["umount", "-l", point], check=False)

    def tool_version(self, binary: str, environ: dict[str, str]) -> str | None:
        """Return the tool's version for the record; None if it cannot tell."""
        rc, out, err = _process.run([binary, "--version"], check=False, env=environ)
        return parse_tool_version(out or err) if rc == 0 else None

    def remove_cache_state(self) -> None:
        """Remove the tool's state about the host cache from the root, and the directories made only for it."""
        for target in cache_state_in_root(self.spec):
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            elif os.path.lexists(target):
                os.unlink(target)
            else:
                continue
            self.prune_empty_parents(os.path.dirname(target))

    def prune_empty_parents(self, directory: str) -> None:
        """Remove empty directories from `directory` up, stopping at `path` or at one a package owns."""
        root = self.spec.path.rstrip("/")
        while (directory.startswith(root + "/") and os.path.isdir(directory) and not os.path.islink(directory)
               and not os.listdir(directory) and not self.owned_by_package(directory)):
            os.rmdir(directory)
            directory = os.path.dirname(directory)

    def owned_by_package(self, directory: str) -> bool:
        """Tell whether a package in the new root owns `directory`; True when rpm cannot tell (keep it)."""
        try:
            rpm = _process.which("rpm")
        except _process.ToolMissing:
            return True
        inside = "/" + os.path.relpath(directory, self.spec.path)
        return _process.run([rpm, f"--root={self.spec.path}", f"--dbpath={rpmdb_path(self.spec.distro)}", "-qf",
                             inside], check=False, env=C_LOCALE).ok

    def write_record(self, record: dict[str, Any]) -> None:
        """Write the record atomically, inside the tree (no link of it followed on the host)."""
        _imagepath.replace_file(self.spec.path, RECORD_RELPATH,
                                (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"))

    def apply(self) -> dict[str, Any]:
        """Bootstrap if needed and return the module result."""
        spec = self.spec
        if spec.family != "debootstrap" and spec.variant:
            self.warn(f"variant is ignored for {spec.distro}: {spec.family} always installs minimally")
        existing = self.read_existing_record()
        wanted = bootstrap_record(spec)
        if not self.needs_bootstrap(existing, wanted):
            self.result["record"] = existing
            return self.result

        binaries = self.resolve_binaries()
        commands = bootstrap_commands(spec, binaries)
        upgrade = self.upgrade_command()
        parse = parse_lists_argv(spec, binaries)
        self.result.update(changed=True, cmd=commands[-1],
                           commands=commands + [argv for argv in (upgrade, parse) if argv],
                           record=wanted, diff={"before": existing or {}, "after": wanted})
        if self.check_mode:
            return self.result
        self.check_sources()

        if unknown_entries(spec.path):
            self.wipe(binaries)
        os.makedirs(spec.path, mode=0o755, exist_ok=True)
        os.makedirs(spec.cache_dir, mode=0o755, exist_ok=True)
        mapped_root = (spec.id_ranges[0].start, spec.id_ranges[1].start) if spec.id_ranges else None
        if mapped_root:
            self.check_mapped_access()
            # The tree's "/" (a container's mount, host root's) is the mapped root's while the tool writes it.
            os.chown(spec.path, *mapped_root)
        with tempfile.TemporaryDirectory(prefix="hpc-stateless-rootfs-") as home:
            environ = self.environment(home)
            if spec.mode == MODE_UNSHARE and "HOME" in environ:
                # The private HOME goes inside buildah unshare only: buildah finds its run directory through the user's.
                commands = bootstrap_commands(spec, binaries, inner_env={"HOME": environ.pop("HOME")})
                self.result.update(cmd=commands[-1], commands=commands)
            version = self.tool_version(binaries[spec.tool], environ)
            out = ""
            lock = self.locked_cache()
            view = ""
            try:
                if spec.tool == "mmdebstrap":
                    view = caches.new_bootstrap_view(spec.cache_dir, spec.path, mapped_root)
                for argv in commands:
                    stdout, stderr = self.run(argv, environ)
                    out = stdout or stderr  # mmdebstrap reports on stderr
                if spec.id_ranges:
                    # /dev first: the lists' parse in the namespace (any program of the tree) writes to /dev/null.
                    self.finish_mapped("its device nodes", lambda: make_dev_entries(spec.path))
                if spec.family == "debootstrap":
                    self.write_sources()
                if parse:
                    # After the sources are written: apt takes its parsed lists for stale when sources.list is newer.
                    self.run(parse, environ)
                if spec.id_ranges:
                    ranges = spec.id_ranges
                    self.finish_mapped("the container's ids", lambda: idshift.shift_back(spec.path, *ranges))
                if view:
                    # What the bootstrap downloaded, checked against the root's apt lists that a Release file signed
                    # by the sources' keys vouches for: the packages' scripts may have rewritten the lists
                    # (_build/caches.py).
                    caches.merge(os.path.join(view, "upper"), spec.cache_dir, spec.path, merge_keyrings(spec))
                if upgrade:
                    stdout, stderr = self.run(upgrade, {**environ, "DEBIAN_FRONTEND": "noninteractive"})
                    out = stdout or stderr
            finally:
                if view:
                    # The customize hook unmounts the cache's overlay; where mmdebstrap runs no customize hook
                    # (variant extract) or a run failed, it is still mounted: never left behind, never removed under it.
                    self.release_mounts()
                    caches.remove_tree(view)
                lock.release()
        self.remove_cache_state()
        for package_file in downloaded_packages_in_root(spec):
            os.unlink(package_file)
        record = bootstrap_record(spec, tool_version=version)
        self.write_record(record)
        self.result.update(record=record, stdout_lines=tail(out), diff={"before": existing or {}, "after": record})
        return self.result

    def finish_mapped(self, what: str, step: Callable[[], Any]) -> None:
        """One of host root's steps after a mapped bootstrap: /dev as a bootstrap by host root leaves it (no user
        namespace may make a device node), the tree's ids of the range back to the container's."""
        try:
            step()
        except (idshift.IdShiftError, OSError) as exc:
            self.fail(f"cannot give the bootstrapped tree {self.spec.path} {what}: {exc}. No record was written; "
                      "rerun with force: true (or remove the working container) to bootstrap again.")

    def check_mapped_access(self) -> None:
        """Fail before anything runs when the mapped root cannot read a keyring or a local mirror it is given
        (it is an unprivileged host uid: "other" to files of host root)."""
        given = [("keyring", self.spec.keyring)] if self.spec.keyring and self.spec.gpg_check else []
        given += [(f"{source.kind} mirror", source.uri[len("file://"):] if source.uri.startswith("file://")
                   else source.uri) for source in self.spec.sources]
        for what, path in given:
            if not path.startswith("/"):
                continue
            problem = unreadable_by_others(path)
            if problem:
                self.fail(f"the {what} {path} cannot be read by the bootstrap's mapped root (root's subordinate uid "
                          f"{self.spec.id_ranges[0].start if self.spec.id_ranges else '?'}, which the package scripts "
                          f"run as): {problem}. Make it readable by all (chmod o+r, its directories o+x), or set "
                          "hpc_stateless_build_userns: false for this layer (docs/rootless.md).")

    def check_sources(self) -> None:
        """Fail before anything is written unless every source's mirror serves its suite (names the source)."""
        for source in self.spec.sources:
            problem = source_problem(source, self.probe)
            if problem:
                self.fail(problem, source={"kind": source.kind, "uri": source.uri, "suite": source.suite})

    def upgrade_command(self) -> list[str] | None:
        """debootstrap's second step (:func:`debootstrap_upgrade_argv`), with the chroot binary resolved."""
        if self.spec.tool != "debootstrap":
            return None
        try:
            chroot = _process.which("chroot")
        except _process.ToolMissing:
            chroot = "chroot"
        return debootstrap_upgrade_argv(self.spec, chroot)

    def write_sources(self) -> None:
        """Write the root's apt sources (every suite it was bootstrapped from) and copy a given keyring beside them."""
        for source in self.spec.sources:
            target = image_keyring_path(source)
            if target:
                with open(source.signed_by, "rb") as handle:
                    _imagepath.replace_file(self.spec.path, target, handle.read(), mode=0o644)
        _imagepath.replace_file(self.spec.path, SOURCES_LIST, sources_list_text(self.spec).encode("utf-8"), mode=0o644)

    def locked_cache(self, timeout: float = CACHE_LOCK_TIMEOUT) -> Flock:
        """Take the package cache's lock (:func:`cache_lock`); a wait is a warning naming the holder, and a
        holder that keeps it past ``timeout`` seconds fails the bootstrap with its name."""
        spec = self.spec
        what = f"the {spec.family} package cache {spec.cache_dir}"
        lock = cache_lock(spec.cache_dir, spec.path, spec.layer)
        try:
            lock.acquire(timeout=timeout, on_wait=lambda holder: self.warn(wait_message(what, holder)))
        except LockBusy as exc:
            self.fail(f"{what} is still held by {exc.holder} after {exc.waited:g} s; wait for that bootstrap "
                      f"to finish (or end it) and run again")
        return lock

    def environment(self, home: str) -> dict[str, str]:
        """Return the environment for the tools: C locale, no initramfs; for debootstrap the wget configuration of
        WGETRC_TEXT; for rpm tools a private HOME with our rpm macros (``home``: the run's private directory)."""
        environ = {**C_LOCALE, **NO_INITRD_ENV}
        if self.spec.mode == MODE_MAPPED:
            # Host root's HOME is no home of the mapped root (dpkg would warn that it cannot read ~/.dpkg.cfg there):
            # none, as for Debian's system users.
            environ["HOME"] = "/nonexistent"
        if self.spec.tool == "debootstrap":
            wgetrc = os.path.join(home, "wgetrc")
            with open(wgetrc, "w", encoding="utf-8") as handle:
                handle.write(WGETRC_TEXT)
            environ["WGETRC"] = wgetrc
        if self.spec.family != "debootstrap":
            # rpm reads ~/.rpmmacros: this pins %_dbpath without touching the host's /etc/rpm.
            with open(os.path.join(home, ".rpmmacros"), "w", encoding="utf-8") as handle:
                handle.write(rpm_macros(self.spec.distro))
            environ["HOME"] = home
        return environ
