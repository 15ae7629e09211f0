#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: layer
short_description: Manage the buildah working container of one image layer
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Drives the lifecycle of one layer of a stateless node image in local containers-storage.
  - O(state=started) creates a working container from the parent image (or C(scratch)), mounts it
    and bind-mounts the host's package caches into it, so roles applied over the
    C(containers.podman.buildah) connection do not download packages twice.
  - O(state=committed) releases the binds, removes the build's own files from the tree (apt's build-time
    configuration and the binary cache C(pkgcache.bin), the build connection's Ansible temporary directory
    C(/root/.ansible/tmp); the empty C(/root/.ansible) stays, so that the first Ansible run on a node does not change
    C(/root)), labels the container, commits it to C(<image_prefix>/<name>:<key>) and removes the working container.
  - The labels record what the image holds, read from its tree before the commit - C(hpc.stateless.packages),
    every installed package and its version (dpkg status, or the rpm database read with the build host's rpm),
    and C(hpc.stateless.repositories), the state (URI, suite, date, sha256 of the InRelease or Release file) of
    each repository in apt's lists - and C(hpc.stateless.inputs-key), O(inputs_key). The plan compares the
    packages with the archive (docs/freshness.md).
  - O(state=absent) unmounts and removes working containers of the layer.
  - An action plugin runs it in the controller's process when the task's connection is local, with no become and no
    task environment (the build host is the controller, as in the collection's playbooks); otherwise as a module on
    the build host.
  - When an image with the layer's key already exists (a cache hit), O(state=started) and
    O(state=committed) create nothing and report C(changed=false).
  - On failure no working container and no mount of the layer is left behind.
  - buildah runs with C(BUILDAH_ISOLATION=chroot) unless O(isolation) or the environment says otherwise.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Returns what would be created, committed or removed; changes nothing.
  diff_mode:
    support: none
    details: Working containers and images are not files Ansible can diff.
  idempotent:
    support: full
    details: A cache hit, a second commit or removing what is gone reports no change.
options:
  name:
    description: Layer name; used in the image name and the working-container name.
    type: str
    required: true
  key:
    description:
      - Content key of the layer (sha256 hex), as computed by M(hpc.stateless.plan). The image is tagged with it.
      - Required for O(state=started) and O(state=committed). With O(state=absent) and no key, every
        working container of the layer is removed (leftovers of killed runs included).
    type: str
  fresh:
    description:
      - With O(state=started), first remove every working container of the layer, of any key (as O(state=absent)
        without O(key)), the leftovers of a killed run, which a build must never build into. The build does so under
        the layer's build lock (M(hpc.stateless.layer_lock)); RV(removed) names them.
    type: bool
    default: false
  userns:
    description:
      - With O(state=started), a new working container maps its ids 0..65535 to root's subordinate range (the line
        of C(root) in C(/etc/subuid) and C(/etc/subgid)); the roles and package scripts run in it as an
        unprivileged host uid, and a second C(chroot) or a write through C(/proc/1/root) reaches only what that
        uid may. O(state=committed) maps the ids of the layer's changes back to the container's (owners, the
        setuid/setgid bits, file capabilities, POSIX ACLs) before C(buildah commit); and runs nothing in a
        container that is not mapped (a bootstrap's, whose M(hpc.stateless.rootfs) parsed apt's lists in its own
        namespace), where a binary of the tree would run as host root.
      - False runs them as host root. A container from C(scratch) is never mapped, since the bootstrap maps its own
        tool (M(hpc.stateless.rootfs) O(userns)) and gives the tree back with the container's ids; nor is a rootless
        build's container (its root is the unprivileged user already). The playbooks pass
        C(hpc_stateless_build_userns), true by default.
    type: bool
    default: false
  state:
    description: Desired state of the layer's working container.
    type: str
    choices: [started, committed, absent]
    default: started
  parent_image:
    description: Image to start from, or C(scratch) for a root layer that a distribution is bootstrapped into.
    type: str
    default: scratch
  image_prefix:
    description: Repository prefix of layer images.
    type: str
    default: localhost/hpc-stateless
  parent:
    description: Name of the parent layer, recorded as a label.
    type: str
  parent_key:
    description: Content key of the parent layer, recorded as a label.
    type: str
  git_commit:
    description: Commit of the configuration repository, recorded as a label (not part of the key).
    type: str
  arch:
    description:
      - Architecture of the layer, Debian's name (C(amd64), C(arm64)), the plan's C(arch) of the layer (docs/arch.md).
        Recorded as the label C(hpc.stateless.arch) and set as the committed image's OCI architecture and variant
        (C(arm64) is C(arm64)/C(v8)). Defaults to the build host's.
    type: str
  inputs_key:
    description:
      - Content key of the layer's inputs, recorded as the label C(hpc.stateless.inputs-key). It differs from
        O(key) when the plan rebuilds the layer for updates in the archive (O(key) is then that key hashed with
        the updates). Defaults to O(key).
    type: str
  labels:
    description: Extra image labels.
    type: dict
    default: {}
  extra_tags:
    description:
      - Further tags given to the committed image, for example C(latest).
      - On a cache hit, O(state=committed) moves a tag that names another image to this one (the image of the
        current configuration), and reports a change.
    type: list
    elements: str
    default: [latest]
  also_tag:
    description:
      - Further full image references the committed image is tagged with (O(state=committed)), for
        example the bootstrap image of a root layer without roles, so its tree is committed once.
      - On a cache hit, references that are missing are tagged (and the result is changed).
    type: list
    elements: str
    default: []
  container:
    description:
      - Name of the working container to commit (O(state=committed)) when it was started under another
        name, for example the bootstrap container of a root layer (the RV(container) of that start).
      - Defaults to the name derived from O(image_prefix), O(name) and O(key).
    type: str
  package_caches:
    description:
      - Host directories (pools) of package caches for the in-image package cache directories.
      - The working container gets a view of each pool of its own, bound over the in-image directory, an overlay
        over hard links of the pool's package files, so a build never changes a file of the pool (a write copies
        it up into the build's own layer). A C(.deb) is offered only when its SHA256 and size are what the image's
        own apt lists say of it. What the build downloads (new regular files only, a C(.deb) only when the
        committed image's apt lists vouch for its SHA256) is copied into the pool when the layer is committed.
        Builds that run at once never share a package manager's lock.
      - Only caches whose in-image directory exists are bound.
    type: list
    elements: dict
    suboptions:
      path:
        description: Directory inside the image.
        type: str
        required: true
      host_path:
        description: Directory on the build host.
        type: path
        required: true
  isolation:
    description:
      - Value of C(BUILDAH_ISOLATION) for buildah. Defaults to the environment's value, else C(chroot).
    type: str
    choices: [chroot, oci, rootless]
notes:
  - Runs on the build host; with the C(containers.podman.buildah) connection, delegate it to C(localhost).
seealso:
  - module: hpc.stateless.plan
  - module: hpc.stateless.rootfs
"""

EXAMPLES = r"""
- name: Start the working container of layer compute
  hpc.stateless.layer:
    name: compute
    key: "{{ hpc_stateless_layer_key }}"
    parent_image: localhost/hpc-stateless/base:{{ parent_key }}
    state: started
  delegate_to: localhost
  register: compute_container

- name: Commit it
  hpc.stateless.layer:
    name: compute
    key: "{{ hpc_stateless_layer_key }}"
    parent: base
    parent_key: "{{ parent_key }}"
    state: committed
  delegate_to: localhost

- name: Commit a root layer without roles from its bootstrap container, once, as both images
  hpc.stateless.layer:
    name: base
    key: "{{ layer_key }}"
    container: "{{ bootstrap_container.container }}"
    also_tag: ["localhost/hpc-stateless/bootstrap/base:{{ bootstrap_key }}"]
    state: committed
  delegate_to: localhost

- name: Remove every working container of layer compute
  hpc.stateless.layer:
    name: compute
    state: absent
  delegate_to: localhost
"""

RETURN = r"""
cached:
  description: The layer image with this key already existed; nothing was built.
  returned: always
  type: bool
container:
  description: Name of the working container.
  returned: always
  type: str
  sample: hpc-stateless-compute-5d41a2-3f2a9c0d1e4b
mountpoint:
  description: Where the working container's root is mounted on the build host.
  returned: when O(state=started) and not cached
  type: str
image:
  description: Image reference of the layer.
  returned: always
  type: str
  sample: localhost/hpc-stateless/compute:3f2a9c0d1e4b...
image_id:
  description: ID of the committed image.
  returned: when O(state=committed) and a commit happened
  type: str
labels:
  description: Labels written to the image.
  returned: when O(state=committed)
  type: dict
removed:
  description: Working containers removed.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._build.layer_task import ARGUMENT_SPEC, VALIDATION, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **VALIDATION)
    result = run(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
