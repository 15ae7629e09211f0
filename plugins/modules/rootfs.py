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
  - As root with O(userns=true) (what the build passes by default) the tool and every package script run as root
    of a user namespace whose ids are root's subordinate range, an unprivileged host uid; the tree's ids are mapped
    back and its device nodes made by host root afterwards, so the root is the same as one bootstrapped without
    the namespace. Only C(mmdebstrap) runs so.
  - Runs without root too. As root inside a user namespace (a build under C(buildah unshare)) the tools
    run as they are; as an ordinary user each tool runs under C(buildah unshare), so file owners map as
    in buildah's rootless storage. The record's C(mode) says which.
  - Records what was bootstrapped in C(<path>/var/lib/hpc-stateless/rootfs.json). A rerun with the
    same options finds the record and runs nothing. A record with different options, or a non-empty
    directory without a record (C(lost+found) aside), is refused unless O(force=true).
  - The build host's C(/etc) is never changed; its repositories are never read or used. Only
    O(path) and O(cache_dir) are written.
  - If the bootstrap command fails, no record is written and O(path) is left as is for inspection.
  - Before anything is written, every source (each suite of each mirror) is checked to serve its release
    file (C(dists/<suite>/InRelease) or C(Release); C(repodata/repomd.xml) for dnf and zypper); an
    unreachable mirror or a missing suite fails naming the source and the suite.
  - Debian and Ubuntu roots are bootstrapped from all their suites (release, updates, security) and keep
    them in C(/etc/apt/sources.list), one line each; a O(keyring) is copied to
    C(/etc/apt/keyrings/<layer>-<name>.gpg) and named by C(signed-by). C(debootstrap) installs from the
    release suite, then C(apt-get dist-upgrade) in the root brings it up to the other suites.
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
  bootstrap:
    description:
      - The layer's whole C(bootstrap) mapping, as the plan returns it (C(_plan.bootstrap) in
        C(playbooks/tasks/build_layer.yml)); one option instead of the options it holds, with the same
        names, types, defaults and rules. Keys that are absent or null take the options' defaults.
      - Mutually exclusive with O(distro), O(release), O(mirror), O(updates_mirror), O(security_mirror),
        O(updates), O(security), O(variant), O(packages), O(components), O(arch), O(extra_args), O(keyring),
        O(gpg_check) and O(tool).
    type: dict
    version_added: 0.1.0
    suboptions:
      distro:
        description: See O(distro).
        type: str
        required: true
        choices: [almalinux, centos, debian, fedora, ol, opensuse-leap, opensuse-tumbleweed, rhel, rocky, sles, ubuntu]
      release:
        description: See O(release).
        type: str
        required: true
      mirror:
        description: See O(mirror).
        type: str
      updates_mirror:
        description: See O(updates_mirror).
        type: str
      security_mirror:
        description: See O(security_mirror).
        type: str
      updates:
        description: See O(updates).
        type: bool
      security:
        description: See O(security).
        type: bool
      variant:
        description: See O(variant).
        type: str
      packages:
        description: See O(packages).
        type: list
        elements: str
        default: []
      components:
        description: See O(components).
        type: list
        elements: str
        default: [main]
      arch:
        description: See O(arch).
        type: str
      extra_args:
        description: See O(extra_args).
        type: list
        elements: str
        default: []
      keyring:
        description: See O(keyring).
        type: path
      gpg_check:
        description: See O(gpg_check).
        type: bool
        default: true
      tool:
        description: See O(tool).
        type: str
        choices: [debootstrap, dnf, mmdebstrap, zypper]
  distro:
    description:
      - Distribution to bootstrap; selects the tool.
      - Required unless O(bootstrap) is given.
    type: str
    choices: [almalinux, centos, debian, fedora, ol, opensuse-leap, opensuse-tumbleweed, rhel, rocky, sles, ubuntu]
  release:
    description:
      - Release to bootstrap. A suite name for debootstrap (V(bookworm), V(noble)), the C(releasever)
        for dnf (V(9)), the version for zypper (V(15.6)); for zypper it is recorded only, the release
        is the one O(mirror) serves.
      - Required with O(distro).
    type: str
  mirror:
    description:
      - Repository URL or local directory to install from.
      - Defaults to U(http://deb.debian.org/debian) for Debian and U(http://archive.ubuntu.com/ubuntu) for Ubuntu.
      - Required for the dnf and zypper families, for example the BaseOS repository of a Rocky mirror.
      - For Debian and Ubuntu it serves the release suite and, unless O(updates_mirror) is set, the
        C(<release>-updates) suite.
    type: str
  updates_mirror:
    description:
      - Debian, Ubuntu - the mirror of the C(<release>-updates) suite; defaults to O(mirror).
      - dnf and zypper - a second repository with the distribution's updates, enabled beside O(mirror)
        (Fedora's C(updates), openSUSE Leap's C(repo/update)). Rocky, AlmaLinux, CentOS Stream and RHEL
        publish their updates into BaseOS itself and need none.
    type: str
  security_mirror:
    description:
      - Debian, Ubuntu - the mirror of the C(<release>-security) suite (C(<release>/updates) for Debian
        buster and older). Defaults to U(http://deb.debian.org/debian-security) for Debian and
        U(http://security.ubuntu.com/ubuntu) for Ubuntu. Not for dnf and zypper.
    type: str
  updates:
    description:
      - Debian, Ubuntu - install from and keep the C(<release>-updates) suite. Defaults to V(true), V(false)
        for sid, unstable and experimental. dnf, zypper - V(false) leaves O(updates_mirror) out.
    type: bool
  security:
    description:
      - Debian, Ubuntu - install from and keep the security suite. Defaults to V(true), V(false) for sid,
        unstable and experimental. Not for dnf and zypper.
    type: bool
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
  layer:
    description: The layer the root is for; named in messages and in the record's sources.
    type: str
    version_added: 0.1.0
  userns:
    description:
      - As root on the host, run the tool in a user namespace that maps its ids 0..65535 to root's subordinate range
        (the line of C(root) in C(/etc/subuid) and C(/etc/subgid)), so the package scripts run as an unprivileged host
        uid, and a second C(chroot) or a write through C(/proc/1/root) reaches only what that uid may. The tree's
        owners and groups are mapped back afterwards and the device nodes of C(/dev) made by host root; the record's
        C(mode) is C(mapped).
      - Only O(tool=mmdebstrap) supports it; another tool fails naming the opt-out. A given O(keyring) or local
        mirror must be readable by any uid.
      - Ignored without root (the tools run in the user's namespace then). The build passes
        C(hpc_stateless_build_userns), true by default.
    type: bool
    default: false
    version_added: 0.1.0
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
- name: Bootstrap the root layer the plan describes (playbooks/tasks/build_layer.yml)
  hpc.stateless.rootfs:
    path: "{{ layer_mount }}"
    bootstrap: "{{ _plan.bootstrap }}"
    layer: "{{ inventory_hostname }}"

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
    sources: [release http://deb.debian.org/debian bookworm, updates http://deb.debian.org/debian bookworm-updates,
              security http://deb.debian.org/debian-security bookworm-security]
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

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hpc.stateless.plugins.module_utils._contract.inventory import BOOTSTRAP_KEYS
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    RootfsBootstrap,
    RootfsError,
    RootfsRequest,
    bootstrap_options,
)


def argument_spec() -> dict[str, Any]:
    """Return the module's argument_spec (kept in step with DOCUMENTATION); the bootstrap keys' options come
    from the inventory schema, once at the top level and once as the suboptions of ``bootstrap``."""
    return dict(
        path=dict(type="path", required=True),
        bootstrap=dict(type="dict", options=bootstrap_options(required=True)),
        **bootstrap_options(required=False),
        cache_dir=dict(type="path"),
        layer=dict(type="str"),
        userns=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[("bootstrap", key) for key in BOOTSTRAP_KEYS],
        required_one_of=[("bootstrap", "distro")],
        required_together=[("distro", "release")],
        supports_check_mode=True,
    )
    try:
        job = RootfsBootstrap(RootfsRequest.from_params(module.params), check_mode=module.check_mode, warn=module.warn)
        result = job.apply()
    except RootfsError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
