#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bootlink
short_description: Publish packed image versions into a PXE boot tree and switch them atomically
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Publishes one version written by M(hpc.stateless.pack) under C(<boot_root>/images/<image>/<version>/);
    the files are copied into a temporary directory on the same file system, synced, checked against
    C(SHA256SUMS) as they are on disk, and only then renamed into place.
  - Serves a version by pointing the symlink C(<boot_root>/<image>) at C(images/<image>/<version>), so boot
    entries name C(<image>/vmlinuz) and C(<image>/initrd) (and C(<image>/rootfs.squashfs)). The switch renames a
    new symlink over the old one (C(rename(2))), so the link is never missing, never points at a partial file, and
    kernel and initrd switch in the same instant.
  - The version served before becomes C(<boot_root>/images/<image>/previous); O(state=rollback) switches back to it.
  - Keeps the newest O(keep) versions; the served and the previous version are never removed.
  - Every change holds an exclusive C(flock) on C(<boot_root>/.hpc-stateless.lock), so two deploys cannot interleave.
  - On any error (checksum mismatch, full disk, unwritable boot root, lock held) nothing is left behind and the served
    links are unchanged.
  - C(SHA256SUMS) and its signature C(SHA256SUMS.asc) are published byte for byte as packed and signed, so
    C(gpgv) and C(sha256sum -c --ignore-missing) check a published version in place.
  - With O(keyring), the release signature (M(hpc.stateless.sign)) is checked with C(gpgv) before anything in the
    boot tree changes; an unsigned release, a signature by another key, a damaged signature or a C(SHA256SUMS)
    changed after signing is refused, naming the file and the key(s) expected.
  - C(manifest.json) is used only after its bytes matched their C(SHA256SUMS) entry (so the signature covers it), and
    those bytes are what is published; a C(SHA256SUMS) that does not list it is refused.
  - A version already published is compared file by file - every published file is hashed against C(SHA256SUMS) -
    and refused, naming the file and version, when the published copy or the pack output differs.
  - Before a link is pointed at an already published version again (O(state=switched) with only O(version), or
    O(state=rollback)), that version's files are hashed against its C(SHA256SUMS) and, with O(keyring), its
    C(SHA256SUMS.asc) is checked; a failure changes nothing.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Verifies the checksums (and with O(keyring) the signature) of O(src), or of the published version a
      switch or rollback would serve, and reports what would be published, switched and removed.
  diff_mode:
    support: full
    details: Shows the served and previous link targets and the published versions, before and after.
  idempotent:
    support: full
    details: An identical published version is reused; a served version is not switched again.
options:
  boot_root:
    description: The TFTP/HTTP root of the boot tree. Created when missing.
    type: path
    required: true
  image:
    description:
      - Image name, as in C(hpc_stateless_images).
      - Image and version names follow the rule of M(hpc.stateless.pack) - letters, digits and C(._+~-), starting
        with a letter or digit, at most 128 characters, not C(images), C(previous), C(pxelinux.cfg), C(ipxe),
        C(pxelinux.0) or C(ldlinux.c32).
    type: str
    required: true
  state:
    description:
      - V(switched) publishes O(src) (when given) and serves it, or serves the already published O(version).
      - V(present) publishes O(src) without serving it.
      - V(rollback) serves the previous version again.
      - V(absent) removes the published O(version); refused while a link points at it.
    type: str
    choices: [switched, present, rollback, absent]
    default: switched
  src:
    description:
      - Pack output to publish, on the host this runs on. Either a version directory (holding C(manifest.json),
        C(SHA256SUMS), C(vmlinuz) and the artifacts), or the image directory above it; then O(version) picks the
        version, or the newest (by C(created) in the manifest) is used.
    type: path
  version:
    description:
      - Version to publish, serve or remove. With O(src), it must match the manifest's C(version).
    type: str
  format:
    description:
      - Which packed format the boot entries load as C(initrd). Defaults to the first bootable artifact of the manifest.
      - For V(squashfs), C(initrd) is the pack's C(initrd.img) and C(rootfs.squashfs) the squashfs.
    type: str
    choices: [cpio.zst, cpio.gz, cpio.xz, squashfs]
  keep:
    description: How many published versions of the image to keep (the served and previous ones always stay).
    type: int
    default: 3
  lock_timeout:
    description: Seconds to wait for another deploy's lock on the boot root before failing.
    type: float
    default: 60
  keyring:
    description:
      - Public keys that may sign releases, on the host this runs on - a binary keyring (C(gpg --export KEY)) or an
        armored export (C(gpg --export --armor KEY)). When set, O(src) must carry a C(SHA256SUMS.asc) that C(gpgv)
        verifies with one of these keys; checked before anything is published or switched.
      - With O(state=rollback), or O(state=switched) and only O(version), the published version the link would point
        at must carry such a signature (a version published unsigned is refused).
      - Without it, signatures are not checked (a C(SHA256SUMS.asc) in O(src) is still published).
    type: path
  unverified_ok:
    description:
      - The reason to serve a pack of O(src) whose manifest does not record a passed (or at pack time overridden)
        verification of its layer image - the deploy-time override of the verify gate (C(hpc_stateless_unverified_ok)).
      - Only changes RV(gate); the module itself never refuses a pack for its verification, the caller does (as
        C(playbooks/deploy.yml) does in check mode, before the boot tree changes).
    type: str
    default: ""
  allow_downgrade:
    description:
      - Serve (and publish) a pack of O(src) built before the served version - a downgrade
        (C(hpc_stateless_deploy_downgrade)). Without it such a pack is refused, naming both versions and their build
        times - a pack output that lost its newest pack would otherwise serve an older release, validly signed,
        without a word. Allowed, the run warns and returns RV(downgrade).
      - The build time is the manifests' C(created), the order the newest pack is picked by. O(state=rollback) is a
        downgrade by its name and does not need it.
    type: bool
    default: false
  signers:
    description:
      - Fingerprints (40 hex digits) of the keys that may sign; the signature must be by one of them (primary key or
        signing subkey). Needs O(keyring). Without it, any key of O(keyring) may sign.
    type: list
    elements: str
notes:
  - Runs on the host that holds the boot root; O(src) must be readable there.
  - O(keyring) needs C(gpgv) on that host (Debian package gpgv, RHEL gnupg2); naming the expected keys in errors uses
    C(gpg) when it is installed.
  - The boot root's file system must support symlinks and C(rename(2)); TFTP servers must follow symlinks
    (relative links stay inside a C(--secure) chroot).
seealso:
  - module: hpc.stateless.bootconfig
  - module: hpc.stateless.sign
"""

EXAMPLES = r"""
- name: Publish and serve the newest packed version of compute
  hpc.stateless.bootlink:
    boot_root: /srv/tftp
    image: compute
    src: build/images/compute
    keep: 3

- name: Publish and serve only a release signed with the site's release key
  hpc.stateless.bootlink:
    boot_root: /srv/tftp
    image: compute
    src: build/images/compute
    keyring: /etc/hpc-stateless/release-keys.asc
    signers:
      - 0123456789ABCDEF0123456789ABCDEF01234567

- name: Publish a version without serving it yet
  hpc.stateless.bootlink:
    boot_root: /srv/tftp
    image: compute
    src: build/images/compute/1a2b3c4d5e6f
    state: present

- name: Go back to the version served before
  hpc.stateless.bootlink:
    boot_root: /srv/tftp
    image: compute
    state: rollback

- name: Remove an old version
  hpc.stateless.bootlink:
    boot_root: /srv/tftp
    image: compute
    version: 0f1e2d3c4b5a
    state: absent
"""

RETURN = r"""
version:
  description: The version published, served, rolled back to or removed.
  returned: always
  type: str
  sample: 1a2b3c4d5e6f
source:
  description: The pack version directory O(src) resolved to.
  returned: when O(src) is given
  type: str
current:
  description: Version served after the task (C(<boot_root>/<image>) points at it).
  returned: always
  type: str
old_current:
  description: Version served before the task.
  returned: always
  type: str
previous:
  description: The rollback target after the task.
  returned: always
  type: str
published:
  description: A version directory was (or in check mode would be) created.
  returned: always
  type: bool
switched:
  description: The served link was (or would be) changed.
  returned: always
  type: bool
removed:
  description: Versions removed (by O(state=absent) or retention).
  returned: always
  type: list
  elements: str
cleaned:
  description: Temporary files of interrupted earlier runs that were removed.
  returned: when not in check mode
  type: list
  elements: str
signature:
  description:
    - The signature check of O(src), or of the published version a switch by O(version) or a rollback pointed the
      link at - C(checked) (a keyring was given), C(signed) (it has a C(SHA256SUMS.asc)), and when checked
      C(keyring), C(fingerprint) (primary key), C(signing_key) and C(uid) of the signer.
  returned: when O(src) is given, or the link is pointed at an already published version
  type: dict
  sample: {"checked": true, "signed": true, "fingerprint": "0123456789ABCDEF0123456789ABCDEF01234567",
           "signing_key": "0123456789ABCDEF0123456789ABCDEF01234567", "uid": "Site release <hpc@example.org>",
           "keyring": "/etc/hpc-stateless/release-keys.asc"}
manifest:
  description:
    - Path of the C(manifest.json) of O(src) as checked against C(SHA256SUMS) - the published copy; in check mode,
      before the version is published, the one in O(src), checked in this run. Boot entries are rendered from it
      (M(hpc.stateless.bootconfig) O(hpc.stateless.bootconfig#module:pending_manifests)).
  returned: when O(src) is given
  type: str
bytes:
  description: Bytes of the files publishing the pack of O(src) copies (boot files, metadata, sums).
  returned: when O(src) is given
  type: int
content:
  description:
    - Digests added to the boot root's content store (C(sha256/<hex>), hard links of the published boot files that
      boot scripts naming hashes load, docs/scale.md).
  returned: always
  type: list
  elements: str
content_removed:
  description: Digests removed from the content store with the versions retention or O(state=absent) removed.
  returned: always
  type: list
  elements: str
verification:
  description: The C(verification) entry of the checked manifest of O(src) (the verify gate's record), null when the
    pack recorded none.
  returned: when O(src) is given
  type: dict
downgrade:
  description: The versions of a downgrade O(allow_downgrade) allowed (C(from) the served, C(to) the new) and their
    build times (C(from_built), C(to_built)).
  returned: when O(src) holds a pack built before the served version and O(allow_downgrade) is true
  type: dict
  sample: {"from": "v2", "from_built": "2026-03-01T00:00:00Z", "to": "v1", "to_built": "2026-01-01T00:00:00Z"}
gate:
  description:
    - The verify gate's verdict on the pack of O(src) for deploy, from its checked manifest's RV(verification) and
      O(unverified_ok) - the rule is in C(module_utils/_verify/record.py).
  returned: when O(src) is given
  type: dict
  contains:
    servable:
      description: The pack passed verification, was packed on an override, or O(unverified_ok) gives a reason.
      type: bool
    status:
      description: The manifest's verification status (C(passed), C(overridden), ...), C(none) when it records none.
      type: str
    message:
      description: What the verdict is and why; for a refused pack, what to do.
      type: str
  sample: {"servable": true, "status": "passed", "message": "image compute version v2: verification passed"}
versions:
  description: Published versions after the task, oldest first, with publish time, uncompressed size and the links
    pointing at each.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink_task import ARGUMENT_SPEC, VALIDATION, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **VALIDATION)
    result = run(module.params, module.check_mode, module._diff)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
