#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer_registry
short_description: Pull a layer image from, or push it to, an OCI registry
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Moves the image of one layer, C(<image_prefix>/<name>:<key>), between local containers-storage and an
    OCI registry, where it is stored as C(<registry>/<name>:<key>). This is how CI runners share layers;
    a job pulls the parent layer an earlier job pushed, builds its own layer and pushes it.
  - O(state=pulled) pulls the image unless it is already in local storage, checks that its
    C(hpc.stateless.layer) and C(hpc.stateless.key) labels match, and tags it with its local name.
    An image whose labels do not match is removed again and the module fails.
  - O(state=pushed) pushes the local image; it fails when the layer has not been built.
  - O(state=pushed) with O(variants) pushes ONE manifest list of the layer's architectures (docs/arch.md) to
    C(<registry>/<name>:<tag>), from which each client pulls its own architecture under the same tag.
  - Uses C(buildah pull)/C(buildah push); the storage is the one buildah uses (set C(CONTAINERS_STORAGE_CONF)
    to use another one). Registry credentials come from O(authfile) or C(buildah login).
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: A pull reports whether the image is missing locally; a push reports a change.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: A pull of a present image changes nothing; a push always reports a change (the registry
      stores blobs it already has once).
options:
  name:
    description: Layer name.
    type: str
    required: true
  key:
    description: Content key of the layer (64 hex digits) as computed by M(hpc.stateless.plan).
    type: str
    required: true
  image_prefix:
    description: Repository prefix of the layer images in local storage.
    type: str
    default: localhost/hpc-stateless
  registry:
    description:
      - Repository prefix in the registry, for example C(registry.example.org/hpc/layers) or C(127.0.0.1:5000/hpc).
    type: str
    required: true
  variants:
    description:
      - The local image of each of the layer's architectures, by architecture (Debian's names, as the plan's
        C(arch)), pushed as one manifest list with O(state=pushed). O(key) is the key of any one of them (it names
        the local list).
    type: dict
  tag:
    description: Tag of the manifest list pushed with O(variants); defaults to O(key).
    type: str
  state:
    description: Pull the image into local storage, or push it to the registry.
    type: str
    choices: [pulled, pushed]
    default: pulled
  tls_verify:
    description: Require HTTPS and verify certificates. Set V(false) for a plain-HTTP registry on a trusted network.
    type: bool
    default: true
  authfile:
    description: Path of a registry authentication file (as written by C(buildah login)).
    type: path
seealso:
  - module: hpc.stateless.layer
  - module: hpc.stateless.plan
"""

EXAMPLES = r"""
- name: Pull the parent layer an earlier CI job pushed
  hpc.stateless.layer_registry:
    name: base
    key: "{{ plan.layers.base.key }}"
    registry: registry.example.org/hpc/layers
    state: pulled

- name: Push the layer just built
  hpc.stateless.layer_registry:
    name: compute
    key: "{{ plan.layers.compute.key }}"
    registry: registry.example.org/hpc/layers
    state: pushed

- name: Push the amd64 and arm64 builds of layer compute under one tag (a manifest list)
  hpc.stateless.layer_registry:
    name: compute
    key: "{{ plan.layers.compute.key }}"
    variants:
      amd64: "{{ plan.layers.compute.image }}"
      arm64: "{{ plan.layers['compute-arm64'].image }}"
    tag: "2026.12"
    registry: registry.example.org/hpc/layers
    state: pushed
"""

RETURN = r"""
image:
  description: Local image reference of the layer.
  returned: always
  type: str
  sample: localhost/hpc-stateless/base:3f2a...
remote:
  description: Registry reference of the layer.
  returned: always
  type: str
  sample: registry.example.org/hpc/layers/base:3f2a...
image_id:
  description: ID of the local image (empty in check mode before a pull).
  returned: always
  type: str
present:
  description: The image is in local storage after the task.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._process import ProcessError
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import DEFAULT_IMAGE_PREFIX
from ansible_collections.hpc.stateless.plugins.module_utils._build.registry import LayerTransfer, TransferError


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            key=dict(type="str", required=True, no_log=False),
            image_prefix=dict(type="str", default=DEFAULT_IMAGE_PREFIX),
            registry=dict(type="str", required=True),
            state=dict(type="str", default="pulled", choices=["pulled", "pushed"]),
            tls_verify=dict(type="bool", default=True),
            authfile=dict(type="path"),
            variants=dict(type="dict"),
            tag=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    buildah = Buildah()
    try:
        transfer = LayerTransfer(buildah, params["name"], params["key"], params["image_prefix"],
                                 params["registry"], params["tls_verify"], params["authfile"])
        if params["state"] == "pulled":
            result = transfer.pull(module.check_mode)
        elif params["variants"]:
            result = transfer.push_list({str(a): str(r) for a, r in params["variants"].items()},
                                        params["tag"] or params["key"], module.check_mode)
        else:
            result = transfer.push(module.check_mode)
    except TransferError as exc:
        module.fail_json(msg=str(exc))
    except ProcessError as exc:
        module.fail_json(msg=f"layer {params['name']}: {exc}", cmd=exc.argv, rc=exc.rc, stderr=exc.stderr)
    module.exit_json(**result.as_dict())


if __name__ == "__main__":
    main()
