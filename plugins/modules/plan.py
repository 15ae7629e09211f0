#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: plan
short_description: Validate the layer DAG, compute content keys and find the stale layers
version_added: 0.1.0
author: hpc.stateless developers
description:
  - Reads the layer DAG (O(layers), by default the raw inventory variable C(hpc_stateless_layers)) and
    the images (C(hpc_stateless_images)), validates them and returns the layers in topological order.
  - Computes each layer's content key, a sha256 over the parent's key, the canonical layer spec,
    the files of every role the layer applies (role dependencies and static C(include_role)/C(import_role)
    included; role READMEs, C(molecule/) and C(tests/) excluded) and the values of the variables those
    roles reference. Changing a variable no applied role references does not change any key.
  - Variables are read raw (untemplated) from the layer's inventory host when it exists (so group
    variables of the layer's O(layers[].groups) count), else from the task's host merged with the layer's C(vars).
  - Facts (C(ansible_*)) and magic variables never enter a key: facts come from inside the layer.
  - With O(check_storage=true), asks M(hpc.stateless.layer_info) which layer images exist; a layer whose
    keyed image is missing is stale.
  - Runs on the controller (action plugin); only the storage look-up runs on the host.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  layers:
    description:
      - The layer DAG, name to spec. A spec has either C(parent) or C(bootstrap) (C(distro), C(release),
        C(variant), C(mirror), C(packages), C(components), C(arch), C(extra_args), C(gpg_check), C(keyring)),
        and optionally C(roles), C(vars), C(groups), C(description).
      - Defaults to the raw value of C(hpc_stateless_layers).
    type: dict
  images:
    description: Images, name to C({layer, formats, kernel_args}). Defaults to C(hpc_stateless_images).
    type: dict
  image_prefix:
    description: Repository prefix of layer images. Defaults to C(hpc_stateless_image_prefix), else C(localhost/hpc-stateless).
    type: str
  compute_keys:
    description: Compute content keys. V(false) only validates and orders the DAG.
    type: bool
    default: true
  check_storage:
    description: Look up which layer images exist in local containers-storage.
    type: bool
    default: true
  role_paths:
    description: Extra directories to search for roles, before the playbook's C(roles/) and C(roles_path).
    type: list
    elements: path
    default: []
seealso:
  - module: hpc.stateless.layer
  - module: hpc.stateless.layer_info
"""

EXAMPLES = r"""
- name: Plan the build
  hpc.stateless.plan:
  register: plan

- name: Show what will be built
  ansible.builtin.debug:
    msg: "stale layers: {{ plan.stale }}"
"""

RETURN = r"""
order:
  description: Layer names in topological order.
  returned: always
  type: list
  elements: str
levels:
  description: Layers grouped by depth; layers of one level do not depend on each other.
  returned: always
  type: list
  elements: list
layers:
  description: Per layer, its plan.
  returned: always
  type: dict
  contains:
    parent:
      description: Parent layer, null for a root layer.
      type: str
    key:
      description: Content key (sha256 hex).
      type: str
    parent_key:
      description: Parent's content key.
      type: str
    image:
      description: Image reference the layer is committed to.
      type: str
    parent_image:
      description: Image the working container starts from; for a root layer its RV(layers.bootstrap_image).
      type: str
    bootstrap_key:
      description: Root layers only. Key of the bootstrapped root (the C(bootstrap) spec alone).
      type: str
    bootstrap_prefix:
      description: Root layers only. Image prefix of bootstrapped roots, C(<image_prefix>/bootstrap).
      type: str
    bootstrap_image:
      description:
        - Root layers only. The bootstrapped root before any role ran, committed on its own so that
          a change to the roles of a root layer does not bootstrap again.
      type: str
    bootstrap_cached:
      description: Root layers only. RV(layers.bootstrap_image) exists.
      type: bool
    container:
      description: Name of the working container while the layer builds.
      type: str
    cached:
      description: The keyed image exists.
      type: bool
    role_closure:
      description: Roles that went into the key, dependencies first.
      type: list
    variables:
      description: Names of the variables whose values went into the key.
      type: list
stale:
  description: Layers to build, in topological order.
  returned: always
  type: list
  elements: str
leaves:
  description: Layers no other layer builds on.
  returned: always
  type: list
  elements: str
images:
  description: The validated images.
  returned: always
  type: dict
git_commit:
  description: C(git describe --always --dirty) of the playbook directory (a label, never part of a key).
  returned: always
  type: str
"""
