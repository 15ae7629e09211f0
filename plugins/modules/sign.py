#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sign
short_description: Sign the SHA256SUMS of a packed image version with the site's GnuPG key
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Writes C(<version_dir>/SHA256SUMS.asc), a GnuPG detached, armored signature of the C(SHA256SUMS) that
    M(hpc.stateless.pack) wrote. C(SHA256SUMS) lists the kernel, every artifact, C(manifest.json) and the SBOM, so
    the signature covers the whole release.
  - M(hpc.stateless.bootlink) with O(hpc.stateless.bootlink#module:keyring) refuses to publish a release whose
    signature does not verify with the site's public key.
  - The key is the site's, from the site's GnuPG home (a package-repository signing key fits); it never lives in the
    repository or in an image.
  - The signature is written to a temporary file, checked with C(gpgv) against the signing key's public key, synced
    and renamed into place; a failed run leaves the previous signature (or none) untouched.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Checks the key and an existing signature; reports whether a signature would be written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A C(SHA256SUMS.asc) that already verifies with the key over the current C(SHA256SUMS) is kept.
options:
  version_dir:
    description: A pack version directory, C(<output_dir>/<image>/<version>), holding C(SHA256SUMS).
    type: path
    required: true
  key:
    description:
      - The secret key to sign with - its fingerprint (best), key id or a user id that names exactly one secret key
        of O(gnupghome).
    type: str
    required: true
  gnupghome:
    description:
      - The GnuPG home holding the key. Defaults to C($GNUPGHOME), else C(~/.gnupg) of the user running the task.
    type: path
  passphrase_file:
    description:
      - A file holding the key's passphrase (first line), for keys that have one and no unlocked C(gpg-agent).
      - Keep it readable by the signing user only.
    type: path
notes:
  - Needs C(gpg) and C(gpgv) on the host that runs the task (Debian packages gpg and gpgv, RHEL gnupg2).
  - Packing the same version again (O(hpc.stateless.pack#module:force)) writes a new C(SHA256SUMS) and removes the
    signature; sign again after every pack (playbooks/pack.yml does when C(hpc_stateless_sign_key) is set).
seealso:
  - module: hpc.stateless.pack
  - module: hpc.stateless.bootlink
"""

EXAMPLES = r"""
- name: Sign the packed compute version with the site's release key
  hpc.stateless.sign:
    version_dir: build/images/compute/1.4.0
    key: 0123456789ABCDEF0123456789ABCDEF01234567
    gnupghome: /root/.gnupg-release
"""

RETURN = r"""
signature:
  description: Path of the signature file.
  returned: always
  type: str
  sample: build/images/compute/1.4.0/SHA256SUMS.asc
fingerprint:
  description: Fingerprint of the signing (primary) key; give it to deploy as C(hpc_stateless_boot_signers).
  returned: always
  type: str
  sample: 0123456789ABCDEF0123456789ABCDEF01234567
uid:
  description: The first user id of the signing key.
  returned: always
  type: str
  sample: Site release key <hpc@example.org>
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.signature import SignatureError, sign


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            version_dir=dict(type="path", required=True),
            key=dict(type="str", required=True, no_log=False),  # names a key, is none
            gnupghome=dict(type="path"),
            passphrase_file=dict(type="path", no_log=False),  # a path to the secret, not the secret
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = sign(params["version_dir"], params["key"], params["gnupghome"], params["passphrase_file"],
                      check_mode=module.check_mode)
    except (SignatureError, ProcessError) as exc:
        module.fail_json(msg=str(exc), version_dir=params["version_dir"])
    module.exit_json(changed=result.changed, signature=result.signature, fingerprint=result.fingerprint,
                     uid=result.uid)


if __name__ == "__main__":
    main()
