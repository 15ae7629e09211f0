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
author: hpc.stateless developers (@hpc-stateless)
description:
  - Reads the layer DAG (O(layers), by default the raw inventory variable C(hpc_stateless_layers)) and
    the images (C(hpc_stateless_images)), validates them and returns the layers in topological order.
  - Computes each layer's content key, a sha256 over the parent's key, the canonical layer spec,
    the files of every role the layer applies (role dependencies and static C(include_role)/C(import_role)
    included; role READMEs, C(molecule/) and C(tests/) excluded) and the values of the variables those
    roles reference. Changing a variable no applied role references does not change any key.
  - Variables are read raw (untemplated) from the layer's inventory host, in the groups RV(layers.host_groups)
    (C(hpc_stateless_layers) and the groups the layer names in its C(groups)), so its group and host variables
    count; the layer's C(vars) rank above them. When the run has no such host yet, it is read from a private
    copy of the run's inventory sources with the host added to those groups, so every stage reaches the
    keys of the build. Playbooks plan with C(playbooks/tasks/plan_layers.yml), which adds the hosts first.
  - Bad input (a bad DAG, an unknown revision, an unreadable inventory file) fails the task with a message
    naming the key, file or revision.
  - Facts (C(ansible_*)) and magic variables never enter a key, because facts come from inside the layer.
  - With O(check_storage=true), asks M(hpc.stateless.layer_info) which layer images exist; a layer whose
    keyed image is missing is stale.
  - With O(check_storage=true) the plan also notices the archive (docs/freshness.md). The key computed over a
    layer's inputs is its inputs key; among the layer's images built from it (label C(hpc.stateless.inputs-key))
    the newest is asked - the packages it installed (its package record less its parent's) against what the
    layer's apt sources offer now, read once per run for every layer on the controller. No pending update under
    O(freshness_policy), the layer is cached under that image's key. Otherwise it is stale, its key is the
    inputs key hashed with the updates, and RV(layers.why) says so, for example C(base) followed by
    C(4 security updates (openssl 3.0.20 -> 3.0.22, ...)); the layers below it get new keys. Policy V(never)
    keeps the image and warns with the lag.
  - An archive that cannot be read fails the plan with a message naming the layer, source and suite (policy
    V(never) warns instead). An image without a package record (built before the record existed) is rebuilt once.
  - Runs on the controller (action plugin); only the storage look-up runs on the host.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    details: Plans only; nothing to diff.
  idempotent:
    support: full
    details: Plans only; the same inputs give the same plan.
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
    description:
      - Extra directories to search for roles. Then come C(roles/) beside the running playbook (unless it
        is a collection's), beside the top-level playbook and in the project directory (lookup
        P(hpc.stateless.project_dir#lookup)), then C(roles_path).
    type: list
    elements: path
    default: []
  inventory:
    description:
      - Inventory sources (directories or files, as C(ansible-playbook -i)) to read the DAG, the image prefix and
        the layer hosts' variables from, instead of this run's inventory. For a run whose own inventory is
        another one, such as Molecule's C(create) planning the DAG of the site inventory.
    type: list
    elements: path
  since:
    description:
      - Base revision of the configuration repository (for example C(origin/main)). When given, the files that
        differ between it and the work tree (untracked files included) are mapped to the layers they rebuild,
        returned as RV(changes). Inventory variable files are compared by value with C(git show <base>:<file>).
      - Unless O(merge_base=false), the common ancestor of O(since) and C(HEAD) is the base, as in a merge request.
    type: str
  changed_files:
    description:
      - Explicit list of changed files (relative to the repository root, or absolute inside it) instead of
        C(git diff). Without O(since) there is no base revision, so every variable of a changed variable
        file counts as changed.
    type: list
    elements: str
  repo:
    description: The configuration repository. Defaults to the git work tree holding the first inventory source.
    type: path
  merge_base:
    description: Compare with the merge base of O(since) and C(HEAD) rather than O(since) itself.
    type: bool
    default: true
  variable_changes:
    description:
      - V(values) rebuilds only layers whose key covers a variable whose value changed (a comment-only
        edit rebuilds nothing). V(files) is the seed paper's rule, every variable of a changed file counts.
    type: str
    choices: [values, files]
    default: values
  playbook_changes:
    description:
      - What a change to one of O(build_playbooks) does. V(rebuild) rebuilds every layer they build.
        V(ignore) reports it only; content keys do not cover the build playbooks.
    type: str
    choices: [rebuild, ignore]
    default: rebuild
  build_playbooks:
    description: Repository-relative playbooks and task files that build layers.
    type: list
    elements: str
    default: [playbooks/build.yml, playbooks/layer.yml, playbooks/tasks/build_layer.yml]
  freshness_policy:
    description:
      - Which pending updates of a built layer's packages make it stale - V(any), V(security) (those whose newest
        version comes from a security suite) or V(never) (none; the lag is a warning). Needs O(check_storage).
    type: str
    choices: [any, security, never]
    default: any
  freshness_cache_dir:
    description:
      - Where the archive's Release files and parsed Packages indexes are cached between runs. Defaults to
        C(/var/cache/hpc.stateless/archive) for root, else (an unprivileged user, a rootless build inside
        C(buildah unshare) too) C($XDG_CACHE_HOME/hpc.stateless/archive), by default below C(~/.cache).
      - In check mode the plan reads a private copy of it and writes nothing.
    type: path
  image_types:
    description: Rebuild only the layers of these images (names of O(images)); other layers are reused.
    type: list
    elements: str
  pipeline:
    description: Settings of the GitLab CI child pipeline returned in RV(changes.pipeline).
    type: dict
    suboptions:
      registry:
        description: Repository prefix in the OCI registry the jobs pull parents from and push layers to.
        type: str
        default: ""
      inventory:
        description: Inventory the jobs use. Defaults to the first inventory source, relative to the repository.
        type: str
      playbook:
        description: Single-layer playbook each job runs.
        type: str
        default: hpc.stateless.layer
      image_prefix:
        description: Image prefix passed to the jobs (C(hpc_stateless_image_prefix)); empty keeps the inventory's.
        type: str
        default: ""
      tags:
        description: Runner tags of every job.
        type: list
        elements: str
        default: []
      extra_args:
        description: Further C(ansible-playbook) arguments of every job.
        type: list
        elements: str
        default: []
      tls_verify:
        description: Whether jobs verify the registry's TLS certificate.
        type: bool
        default: true
      diff_boot_root:
        description:
          - Boot tree (as the runners see it) to compare new images against. When set, each image whose layer
            is rebuilt gets a C(diff:<image>) job after its layer's job that runs the C(hpc.stateless.diff)
            playbook and keeps the Markdown summary C(image-diff/<image>.md) as an artifact.
        type: str
        default: ""
      rootless:
        description:
          - Jobs for runners that are not root. Each job runs its playbook inside C(buildah unshare), with
            C(BUILDAH_ISOLATION=chroot); the runner's user needs subordinate ids (docs/rootless.md).
        type: bool
        default: false
seealso:
  - module: hpc.stateless.layer
  - module: hpc.stateless.layer_info
"""

EXAMPLES = r"""
- name: Plan the build
  hpc.stateless.plan:
  register: plan

- name: Which layers does this merge request rebuild?
  hpc.stateless.plan:
    check_storage: false
    since: origin/main
    pipeline:
      registry: registry.example.org/hpc/layers
  register: plan

- name: Write the child pipeline
  ansible.builtin.copy:
    content: "{{ plan.changes.pipeline }}"
    dest: build/plan/pipeline.yml
    mode: "0644"

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
    root:
      description: The root layer of the layer's chain (the layer itself for a root layer).
      type: str
    host_groups:
      description:
        - Inventory groups of the layer's host, C(hpc_stateless_layers) first, then the layer's C(groups).
          The keys are computed with the variables of these groups; add the host to them before planning.
      type: list
      elements: str
    key:
      description:
        - Content key (sha256 hex) the layer's image is tagged with - its RV(layers.inputs_key), or the key of the
          image reused for it, or that key hashed with the archive updates the layer is rebuilt for.
      type: str
    inputs_key:
      description: Key over the layer's inputs (roles, variables, spec, parent's key), the image's C(hpc.stateless.inputs-key) label.
      type: str
    why:
      description: Why the layer is stale (only for stale layers) - the layer and its updates, or C(parent hsn rebuilds).
      type: str
    freshness:
      description:
        - With O(check_storage), what the archive check found - C(image) asked, C(updates) the rebuild is for,
          C(security_updates), C(lag) (policy V(never)), C(reason), C(note).
      type: dict
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
    bootstrap_inputs_key:
      description: Root layers only. Key over the bootstrap spec; RV(layers.bootstrap_key) differs when the bootstrapped root lags.
      type: str
    bootstrap_freshness:
      description: Root layers that rebuild only. What the archive check found for the bootstrapped root.
      type: dict
    bootstrap_cached:
      description: Root layers only. RV(layers.bootstrap_image) exists.
      type: bool
    container:
      description: Name of the working container while the layer builds.
      type: str
    arch:
      description: The layer's architecture, Debian's name (docs/arch.md).
      type: str
    origin:
      description: The layer as C(hpc_stateless_layers) names it (C(base) for C(base-arm64), docs/arch.md).
      type: str
    cached:
      description: The keyed image exists.
      type: bool
    role_closure:
      description: Roles that went into the key, dependencies first.
      type: list
    role_refs:
      description:
        - What the build includes for each of the layer's roles, in order - the role directory the key
          hashed for a plain name, the FQCN for a collection's role.
      type: list
    variables:
      description: Names of the variables whose values went into the key.
      type: list
stale:
  description: Layers to build, in topological order.
  returned: always
  type: list
  elements: str
freshness:
  description:
    - With O(check_storage), the C(policy) applied, the C(warnings) (lag under V(never), images without a record),
      the C(seconds) the check took (the archive view's loading included) and how each source was read this time
      (C(network), C(<uri> <suite>) to C(none) within the cache's max age, C(304), C(same) or C(fetched)).
  returned: when O(check_storage) and O(compute_keys)
  type: dict
leaves:
  description: Layers no other layer builds on.
  returned: always
  type: list
  elements: str
after_build:
  description: False; true in the plan build.yml records for the later stages of its run (filter
    P(hpc.stateless.plan_after_build#filter)), whose built layers are cached.
  returned: always
  type: bool
images:
  description:
    - The validated images, one per image and architecture (docs/arch.md), each with its C(layer) and C(arch).
  returned: always
  type: dict
layer_specs:
  description:
    - Every layer's normalised spec (C(parent), C(bootstrap), C(arch), C(roles), C(vars), C(groups), C(description),
      C(sources)), one per layer and architecture, by the plan's layer names.
  returned: always
  type: dict
git_commit:
  description: C(git describe --always --dirty) of the project directory (a label, never part of a key).
  returned: always
  type: str
project_dir:
  description: The project directory (the rule of the lookup P(hpc.stateless.project_dir#lookup)), an absolute path.
  returned: always
  type: str
changes:
  description: The layers a change rebuilds (see docs/ci.md).
  returned: when O(since) or O(changed_files) is given
  type: dict
  contains:
    repo:
      description: Root of the configuration repository.
      type: str
    plan:
      description:
        - C(base) (revision compared with), C(changed_files), C(files) (per file its C(kind) role, playbook,
          inventory or other, the C(layers) it rebuilds directly and a C(detail)), C(layers) (per layer its
          C(action) rebuild or reuse, C(why), C(reasons), C(images), C(parent), C(depth)), C(rebuild) and
          C(reuse) (build order), C(removed_layers), C(images) (per image its C(chain), the layers it
          C(rebuild)s and C(start), the earliest affected layer).
      type: dict
    table:
      description: Human table of the plan (layer, image types, rebuild/reuse, why).
      type: str
    dot:
      description: Graphviz DOT picture of the DAG; rebuilt layers are filled boxes, reused ones dotted ovals.
      type: str
    pipeline:
      description: GitLab CI child pipeline (YAML), one job per rebuilt layer with C(needs) following the DAG.
      type: str
"""
