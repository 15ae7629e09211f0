#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: seal
short_description: Remove the per-node identity package scripts baked into a layer, in one pass
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Package scripts re-create per-node identity whenever a layer installs or upgrades their package - systemd's
    writes C(/etc/machine-id), dbus's C(/var/lib/dbus/machine-id), openssh-server's the SSH host keys - and
    pam_tmpdir leaves C(/tmp/user) behind every session a package script opened. An image that carried them would
    give every node the same identity.
  - Leaves an empty C(/etc/machine-id) (root:root, mode 0444; systemd makes each node's own at boot), and removes
    C(/var/lib/dbus/machine-id), every C(/etc/ssh/ssh_host_*) and C(/tmp/user).
  - The base role's C(seal) entry point runs it; the build runs that entry point in every layer after its roles.
  - Paths are resolved inside O(root) the way the image sees them; a link is removed or replaced as a link, never
    followed out of the tree.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The diff lists the paths removed and emptied.
  idempotent:
    support: full
options:
  machine_id:
    description: Empty C(/etc/machine-id) and remove D-Bus's copy.
    type: bool
    default: true
  ssh_host_keys:
    description: Remove the SSH host keys (C(/etc/ssh/ssh_host_*)).
    type: bool
    default: true
  session_tmpdirs:
    description: Remove the per-user temporary directories (C(/tmp/user)) that sessions of the build made.
    type: bool
    default: true
  root:
    description: The tree to seal; V(/) in the layer's working container, where the build runs it.
    type: path
    default: /
seealso:
  - module: hpc.stateless.layer
"""

EXAMPLES = r"""
- name: Seal the layer (what the base role's seal entry point does)
  hpc.stateless.seal:

- name: Seal it but keep the SSH host keys (base_sshd_bake_host_keys)
  hpc.stateless.seal:
    ssh_host_keys: false
"""

RETURN = r"""
removed:
  description: Paths in the image removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/dbus/machine-id, /etc/ssh/ssh_host_ed25519_key, /etc/ssh/ssh_host_ed25519_key.pub]
emptied:
  description: Paths in the image left as empty files (or that would be).
  returned: always
  type: list
  elements: str
  sample: [/etc/machine-id]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._build.seal_tree import SealTreeError, seal


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            machine_id=dict(type="bool", default=True),
            ssh_host_keys=dict(type="bool", default=True),
            session_tmpdirs=dict(type="bool", default=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = seal(p["root"], machine_id=p["machine_id"], host_keys=p["ssh_host_keys"],
                      session_tmpdirs=p["session_tmpdirs"], check_mode=module.check_mode)
    except (SealTreeError, OSError) as exc:
        module.fail_json(msg=f"cannot seal {p['root']}: {exc}")
    before = "".join(f"{path}\n" for path in sorted(result.removed + result.emptied))
    after = "".join(f"{path} (empty)\n" for path in result.emptied)
    module.exit_json(changed=result.changed, removed=result.removed, emptied=result.emptied,
                     diff={"before": before, "after": after, "before_header": "sealed paths (before)",
                           "after_header": "sealed paths (after)"})


if __name__ == "__main__":
    main()
