#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer_info
short_description: List layer images and working containers in local containers-storage
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Lists the images built by M(hpc.stateless.layer) (those labelled C(hpc.stateless.layer)) with their
    names, content keys and parents, and the layer working containers that exist.
  - M(hpc.stateless.plan) uses it to tell cached layers from stale ones.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    details: Reads only.
  idempotent:
    support: full
    details: Reads only.
options:
  isolation:
    description: Value of C(BUILDAH_ISOLATION) for buildah. Defaults to the environment's value, else C(chroot).
    type: str
    choices: [chroot, oci, rootless]
"""

EXAMPLES = r"""
- name: Show which layer images exist
  hpc.stateless.layer_info:
  register: layer_images

- name: Keys of every built compute layer
  ansible.builtin.debug:
    msg: "{{ layer_images.images | selectattr('layer', 'eq', 'compute') | map(attribute='key') }}"
"""

RETURN = r"""
images:
  description: Layer images, one entry per image ID.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Image ID.
      type: str
    names:
      description: Image names (references) of the image.
      type: list
      elements: str
    layer:
      description: Layer name label.
      type: str
    key:
      description: Content key label.
      type: str
    parent:
      description: Parent layer label.
      type: str
    labels:
      description:
        - All labels, among them the package record (C(hpc.stateless.packages)), the repository states
          (C(hpc.stateless.repositories)) and the inputs key (C(hpc.stateless.inputs-key)) of the image.
      type: dict
    created:
      description: When the image was created, in seconds since the epoch.
      type: int
keys:
  description: Content keys present, per layer name.
  returned: always
  type: dict
  sample: {base: [3f2a...], compute: [9c1e...]}
containers:
  description: Names of layer working containers (C(hpc-stateless-*)) that exist.
  returned: always
  type: list
  elements: str
arches:
  description:
    - Architectures (Debian's names) whose programs the build host runs, its own first, then each one an enabled
      qemu-user binfmt handler runs. The plan refuses a layer of another architecture (docs/arch.md).
  returned: always
  type: list
  elements: str
  sample: [amd64, arm64]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.listing import layer_listing
from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(isolation=dict(type="str", choices=["chroot", "oci", "rootless"])),
        supports_check_mode=True,
    )
    try:
        listing = layer_listing(Buildah(isolation=module.params["isolation"]))
    except ProcessError as exc:
        module.fail_json(msg=str(exc), cmd=exc.argv, rc=exc.rc)
    module.exit_json(changed=False, **listing)


if __name__ == "__main__":
    main()
