#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rootfs
short_description: Bootstrap a distribution root file system into a directory
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Installs a minimal distribution into O(path), typically the mount point of an empty
    buildah C(scratch) working container, with C(mmdebstrap) (Debian, Ubuntu; or C(debootstrap), see O(tool)),
    C(dnf --installroot) (Rocky, AlmaLinux, CentOS, RHEL, Fedora, Oracle Linux) or
    C(zypper --root) (openSUSE Leap, openSUSE Tumbleweed, SLES).
  - The kernel's install hooks build no initramfs (C(INITRD=No)); a stateless image never boots from
    one, and M(hpc.stateless.pack) makes the boot artifact.
  - Runs without root too. As root inside a user namespace (a build under C(buildah unshare)) the tools
    run as they are; as an ordinary user each tool runs under C(buildah unshare), so file owners map as
    in buildah's rootless storage. The record's C(mode) says which.
  - Records what was bootstrapped in C(<path>/var/lib/hpc-stateless/rootfs.json). A rerun with the
    same options finds the record and runs nothing. A record with different options, or a non-empty
    directory without a record (C(lost+found) aside), is refused unless O(force=true).
  - The build host's C(/etc) is never changed; its repositories are never read or used. Only
    O(path) and O(cache_dir) are written.
  - If the bootstrap command fails, no record is written and O(path) is left as is for inspection.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Runs no command; returns the command lines that would run in RV(cmd) and RV(commands).
  diff_mode:
    support: full
    details: Before and after are the bootstrap records.
  idempotent:
    support: full
    details: A rerun with the same options finds the bootstrap record and runs nothing.
options:
  path:
    description: Directory to bootstrap into; created if missing. Must not be C(/).
    type: path
    required: true
  distro:
    description: Distribution to bootstrap; selects the tool.
    type: str
    required: true
    choices: [almalinux, centos, debian, fedora, ol, opensuse-leap, opensuse-tumbleweed, rhel, rocky, sles, ubuntu]
  release:
    description:
      - Release to bootstrap. A suite name for debootstrap (V(bookworm), V(noble)), the C(releasever)
        for dnf (V(9)), the version for zypper (V(15.6)); for zypper it is recorded only, the release
        is the one O(mirror) serves.
    type: str
    required: true
  mirror:
    description:
      - Repository URL or local directory to install from.
      - Defaults to U(http://deb.debian.org/debian) for Debian and U(http://archive.ubuntu.com/ubuntu) for Ubuntu.
      - Required for the dnf and zypper families, for example the BaseOS repository of a Rocky mirror.
    type: str
  variant:
    description:
      - debootstrap C(--variant), for example V(minbase) or V(buildd).
      - Ignored (with a warning) for dnf and zypper, whose install is always minimal
        (weak dependencies and recommends are not installed).
    type: str
  packages:
    description:
      - Packages to include. debootstrap C(--include), otherwise the packages installed.
      - For dnf and zypper the default is C(bash systemd python3) plus C(dnf) or C(zypper).
    type: list
    elements: str
    default: []
  components:
    description: debootstrap C(--components); ignored by dnf and zypper.
    type: list
    elements: str
    default: [main]
  arch:
    description:
      - Architecture to bootstrap; debootstrap C(--arch), dnf C(--forcearch). Not supported with zypper.
      - Defaults to the build host's architecture.
    type: str
  extra_args:
    description:
      - Extra arguments for the tool, added after the module's options.
      - debootstrap and dnf get them before the positional arguments (suite, or C(-y install));
        zypper gets them as options of C(zypper install).
    type: list
    elements: str
    default: []
  keyring:
    description:
      - Public key file to verify packages with.
      - debootstrap C(--keyring). dnf uses it as the repository's C(gpgkey) and imports it into
        the new root. For zypper it is imported into the new root's rpm database with C(rpm --root
        --import) (needs the C(rpm) binary), so exactly this key is trusted.
      - Without it, debootstrap uses its default keyring; dnf and zypper then fail on signed packages
        whose key is not yet trusted.
      - zypper with O(gpg_check) also verifies the repository metadata, so the repository must have a
        C(repodata/repomd.xml.asc) made with this key, as openSUSE and SUSE repositories do.
    type: path
  gpg_check:
    description: Verify signatures. V(false) passes C(--no-check-gpg), C(--nogpgcheck) or C(--no-gpg-checks).
    type: bool
    default: true
  cache_dir:
    description:
      - Host directory where downloaded packages are kept across runs, so a rebuild does not download
        them again. Created if missing. Defaults to C(/var/cache/hpc-stateless/<family>) (C(debootstrap)
        for Debian and Ubuntu with either tool, C(dnf), C(zypper)).
    type: path
  tool:
    description:
      - Bootstrap tool. V(mmdebstrap) (the default for Debian and Ubuntu) or V(debootstrap) for Debian
        and Ubuntu; V(dnf) and V(zypper) are the only tools of their families.
      - The tool and its version are recorded as provenance; a root bootstrapped by the other tool with
        the same options counts as the same root (nothing reruns).
      - V(debootstrap) needs root on the host.
    type: str
    choices: [debootstrap, dnf, mmdebstrap, zypper]
  force:
    description:
      - Wipe the contents of O(path) and bootstrap again when it holds a different record or unknown
        content. Refused while anything is mounted below O(path).
    type: bool
    default: false
notes:
  - The tool must be installed on the build host (Debian packages C(mmdebstrap), C(debootstrap), C(dnf),
    C(zypper)); without root also C(buildah) and subordinate ids for the user (C(/etc/subuid), C(/etc/subgid)).
  - Without root, device nodes cannot be made; C(/dev) of the root is left empty (the kernel's devtmpfs,
    systemd-nspawn and buildah provide C(/dev) at run time, and pack adds C(/dev/console) to a cpio).
  - Without root the default O(cache_dir) is C(${XDG_CACHE_HOME:-~/.cache}/hpc-stateless/<family>).
  - For dnf and zypper on a Debian build host the rpm database is placed where the target's rpm
    expects it (C(/var/lib/rpm), or C(/usr/lib/sysimage/rpm) for Fedora and SUSE).
  - dnf and zypper write a little state about O(cache_dir) below O(path) (C(expired_repos.json),
    the installed-system solv cache); the module removes it after the bootstrap, with the directories
    made only for it, so the image holds no build host cache path.
seealso:
  - module: hpc.stateless.layer
"""

EXAMPLES = r"""
- name: Bootstrap Debian bookworm (minbase) into the scratch container's mount
  hpc.stateless.rootfs:
    path: "{{ layer_mount }}"
    distro: debian
    release: bookworm
    variant: minbase
    packages: [python3, systemd-sysv]

- name: Bootstrap Rocky Linux 9 from a local mirror, verifying with its key
  hpc.stateless.rootfs:
    path: /var/tmp/rocky9
    distro: rocky
    release: "9"
    mirror: /srv/mirror/rocky/9/BaseOS/x86_64/os
    keyring: /srv/mirror/rocky/RPM-GPG-KEY-Rocky-9

- name: Bootstrap openSUSE Leap 15.6 without signature checks (test mirrors only)
  hpc.stateless.rootfs:
    path: /var/tmp/leap
    distro: opensuse-leap
    release: "15.6"
    mirror: http://mirror.example.org/opensuse/distribution/leap/15.6/repo/oss/
    gpg_check: false
"""

RETURN = r"""
path:
  description: The bootstrapped directory.
  returned: always
  type: str
  sample: /var/lib/containers/storage/overlay/3f1c/merged
record:
  description: What is (or, in check mode, would be) bootstrapped in O(path); the content of C(rootfs.json).
  returned: always
  type: dict
  sample:
    distro: debian
    release: bookworm
    mirror: http://deb.debian.org/debian
    variant: minbase
    packages: [python3]
    components: [main]
    arch: null
    extra_args: []
    tool: mmdebstrap
    tool_version: 1.3.5
    mode: root
cmd:
  description: The main bootstrap command line that ran (or would run); empty when nothing runs.
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/mmdebstrap, --mode=root, --variant=minbase, --components=main, --skip=essential/unlink,
           bookworm, /tmp/x, http://deb.debian.org/debian]
commands:
  description: Every command line that ran (or would run), in order; zypper needs more than one.
  returned: always
  type: list
  elements: list
stdout_lines:
  description: The last 40 lines of the bootstrap command's output.
  returned: when a command ran
  type: list
  elements: str
"""

import json
import os
import shutil
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._fs import Flock, mounts_below
from ansible_collections.hpc.stateless.plugins.module_utils._paths import write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._build.rootless import host_cache_path
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import SUPPORTED_DISTROS, bootstrap_tool_choices
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    DEFAULT_CACHE_ROOT,
    MODE_ROOT,
    MODE_UNSHARE,
    NO_INITRD_ENV,
    RECORD_RELPATH,
    BootstrapSpec,
    bootstrap_commands,
    bootstrap_record,
    cache_state_in_root,
    default_cache_dir,
    distro_family,
    downloaded_packages_in_root,
    parse_tool_version,
    privilege_mode,
    record_differences,
    required_binaries,
    resolve_mirror,
    rpm_macros,
    rpmdb_path,
)

OUTPUT_TAIL_LINES = 40
CACHE_LOCK_NAME = ".hpc-stateless-rootfs.lock"
C_LOCALE = _process.locale_env("C", language=True)
IGNORED_ENTRIES = frozenset({"lost+found"})


def argument_spec() -> dict[str, Any]:
    """Return the module's argument_spec (kept in step with DOCUMENTATION)."""
    return dict(
        path=dict(type="path", required=True),
        distro=dict(type="str", required=True, choices=sorted(SUPPORTED_DISTROS)),
        release=dict(type="str", required=True),
        mirror=dict(type="str"),
        variant=dict(type="str"),
        packages=dict(type="list", elements="str", default=[]),
        components=dict(type="list", elements="str", default=["main"]),
        arch=dict(type="str"),
        extra_args=dict(type="list", elements="str", default=[]),
        keyring=dict(type="path", no_log=False),
        gpg_check=dict(type="bool", default=True),
        cache_dir=dict(type="path"),
        tool=dict(type="str", choices=bootstrap_tool_choices()),
        force=dict(type="bool", default=False),
    )


def current_mode() -> str:
    """Return how the tools run here, from our euid and whether we are in a user namespace."""
    try:
        with open("/proc/self/uid_map", encoding="utf-8") as handle:
            uid_map = handle.read()
    except OSError:
        uid_map = ""
    return privilege_mode(os.geteuid(), uid_map)


def spec_from_params(params: dict[str, Any], mode: str = MODE_ROOT) -> BootstrapSpec:
    """Build the BootstrapSpec; ValueError names the offending option."""
    path = os.path.abspath(params["path"])
    if os.path.realpath(path) == "/":
        raise ValueError("path must not be / : the rootfs module never bootstraps over the build host")
    return BootstrapSpec(
        path=path,
        distro=params["distro"],
        release=params["release"],
        mirror=resolve_mirror(params["distro"], params["mirror"]),
        variant=params["variant"],
        packages=tuple(params["packages"]),
        components=tuple(params["components"]),
        arch=params["arch"],
        extra_args=tuple(params["extra_args"]),
        keyring=params["keyring"],
        gpg_check=params["gpg_check"],
        cache_dir=params["cache_dir"] or default_cache_dir(distro_family(params["distro"]), cache_root(mode)),
        tool=params["tool"] or "",
        mode=mode,
    )


def cache_root(mode: str) -> str:
    """Return the root of the default package caches for a build in `mode`."""
    return DEFAULT_CACHE_ROOT if mode == MODE_ROOT else host_cache_path(DEFAULT_CACHE_ROOT)


def tail(text: str, lines: int = OUTPUT_TAIL_LINES) -> list[str]:
    """Return the last `lines` lines of `text`."""
    return text.splitlines()[-lines:]


def unknown_entries(path: str) -> list[str]:
    """Return the sorted entries of `path` that are not expected in an empty mount point."""
    if not os.path.isdir(path):
        return []
    return sorted(entry for entry in os.listdir(path) if entry not in IGNORED_ENTRIES)


def cache_lock(cache_dir: str) -> Flock:
    """The exclusive lock on the package cache while one bootstrap uses it (for a ``with``).

    Two root layers (or two builds) may bootstrap at once: apt refuses a package cache whose lock
    another apt holds, and dnf's and zypper's caches take no second writer either; the second
    bootstrap waits here instead of failing. The lock file says which process holds it.
    """
    return Flock(os.path.join(cache_dir, CACHE_LOCK_NAME), "rootfs bootstrap")


class RootfsBootstrap:
    """Bootstraps one root file system; every change goes through `apply`."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.force: bool = module.params["force"]
        try:
            self.spec = spec_from_params(module.params, current_mode())
            # Builds the command lines once, so an unsupported combination (arch with zypper) fails
            # here with its message, before anything is read or run.
            bootstrap_commands(self.spec)
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        self.record_path = os.path.join(self.spec.path, RECORD_RELPATH)
        self.result: dict[str, Any] = {"changed": False, "path": self.spec.path, "cmd": [], "commands": []}

    def fail(self, msg: str, **extra: Any) -> None:
        """Fail with the common result fields."""
        self.module.fail_json(msg=msg, **{**self.result, **extra})

    def read_existing_record(self) -> dict[str, Any] | None:
        """Return the stored record, None without one; fail on an unreadable record unless forced."""
        if not os.path.exists(self.record_path):
            return None
        try:
            with open(self.record_path, encoding="utf-8") as handle:
                record = json.load(handle)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            return record
        except (OSError, ValueError) as exc:
            if self.force:
                return {}
            self.fail(f"cannot read the bootstrap record {self.record_path}: {exc}. "
                      "Remove the directory's content or set force: true to bootstrap again.")
        return None

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
        """Write the record atomically (temp file in the same directory, then rename)."""
        directory = os.path.dirname(self.record_path)
        os.makedirs(directory, mode=0o755, exist_ok=True)
        write_atomic(self.record_path, json.dumps(record, indent=2, sort_keys=True) + "\n")

    def apply(self) -> dict[str, Any]:
        """Bootstrap if needed and return the module result."""
        spec = self.spec
        if spec.family != "debootstrap" and spec.variant:
            self.module.warn(f"variant is ignored for {spec.distro}: {spec.family} always installs minimally")
        existing = self.read_existing_record()
        wanted = bootstrap_record(spec)
        if not self.needs_bootstrap(existing, wanted):
            self.result["record"] = existing
            return self.result

        binaries = self.resolve_binaries()
        commands = bootstrap_commands(spec, binaries)
        self.result.update(changed=True, cmd=commands[-1], commands=commands, record=wanted,
                           diff={"before": existing or {}, "after": wanted})
        if self.module.check_mode:
            return self.result

        if unknown_entries(spec.path):
            self.wipe(binaries)
        os.makedirs(spec.path, mode=0o755, exist_ok=True)
        os.makedirs(spec.cache_dir, mode=0o755, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="hpc-stateless-rootfs-") as home:
            environ = self.environment(home)
            if spec.mode == MODE_UNSHARE and "HOME" in environ:
                # The private HOME goes inside buildah unshare only: buildah finds its run directory through the user's.
                commands = bootstrap_commands(spec, binaries, inner_env={"HOME": environ.pop("HOME")})
                self.result.update(cmd=commands[-1], commands=commands)
            version = self.tool_version(binaries[spec.tool], environ)
            out = ""
            with cache_lock(spec.cache_dir):
                for argv in commands:
                    stdout, stderr = self.run(argv, environ)
                    out = stdout or stderr  # mmdebstrap reports on stderr
        self.remove_cache_state()
        for package_file in downloaded_packages_in_root(spec):
            os.unlink(package_file)
        record = bootstrap_record(spec, tool_version=version)
        self.write_record(record)
        self.result.update(record=record, stdout_lines=tail(out), diff={"before": existing or {}, "after": record})
        return self.result

    def environment(self, home: str) -> dict[str, str]:
        """Return the environment for the tools: C locale, no initramfs; for rpm tools a private HOME with our rpm macros."""
        environ = {**C_LOCALE, **NO_INITRD_ENV}
        if self.spec.family != "debootstrap":
            # rpm reads ~/.rpmmacros: this pins %_dbpath without touching the host's /etc/rpm.
            with open(os.path.join(home, ".rpmmacros"), "w", encoding="utf-8") as handle:
                handle.write(rpm_macros(self.spec.distro))
            environ["HOME"] = home
        return environ


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    module.exit_json(**RootfsBootstrap(module).apply())


if __name__ == "__main__":
    main()
