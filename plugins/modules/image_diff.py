#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_diff
short_description: Compare two versions of a node image (packages, files, kernel, layers, image-release)
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Answers "what changed since what the nodes run" - packages added, removed, upgraded and downgraded (old -> new
    version, from the C(packages) list of C(manifest.json), or from the package database of a layer image), files
    added, removed and changed (content, type, mode, owner, link target) with size deltas, the largest growths, the
    kernel version and command line, the layers whose content key changed (so were rebuilt), and
    C(/etc/image-release) of both.
  - The old version is one of O(old_dir) (a pack version directory), O(old_image) (a layer image in
    containers-storage), or a version published in the boot tree O(boot_root) (O(old_version), by default the
    version the boot tree serves for O(image)).
  - The new version is one of O(new_dir), O(new_image), the newest pack of O(image) under O(output_dir) (or its
    O(new_version)), or O(new_version) published in O(boot_root).
  - Artifacts are read in one pass each, both at once, without extracting them. A cpio artifact is decompressed
    into a pipe and its newc headers parsed, a squashfs artifact is read through C(unsquashfs -pf) on a pipe, and
    every regular file's data is hashed (SHA-256) as it streams by. Entries are compared by type, permission bits,
    owner, size and content; modification times are not compared (pack clamps them).
  - A layer image is opened through a working container of buildah that is removed again, also on error. Only a
    pack adds the kernel command line, so a layer image has none (the result says so in RV(notes)).
  - Returns JSON (the result itself), a table as text lines (RV(table)) and a short Markdown summary for a
    merge-request comment (RV(markdown)), which O(markdown_dest) writes to a file atomically.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: The comparison only reads; in check mode O(markdown_dest) is not written, and C(changed) says
      whether it would be.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  old_dir:
    description: Pack version directory C(<output_dir>/<image>/<version>) of the old version.
    type: path
  old_image:
    description: Layer image of the old version in local containers-storage, for example
      C(localhost/hpc-stateless/compute:<key>).
    type: str
  old_version:
    description: Version published in O(boot_root) to compare against; default the version the boot tree serves.
    type: str
  new_dir:
    description: Pack version directory of the new version.
    type: path
  new_image:
    description: Layer image of the new version in local containers-storage.
    type: str
  new_version:
    description:
      - With O(output_dir), the packed version to compare (default the newest pack of O(image)).
      - Without O(output_dir), a version published in O(boot_root).
    type: str
  boot_root:
    description: Boot tree written by M(hpc.stateless.bootlink), where the old (and maybe the new) version is published.
    type: path
  output_dir:
    description: Pack output directory; the new version is the newest pack of O(image) there unless O(new_version) is set.
    type: path
  image:
    description: Image name, with O(boot_root) or O(output_dir).
    type: str
  format:
    description: Which artifact of a version directory to read; default a cpio one (one stream), else the squashfs.
    type: str
    choices: [cpio.zst, cpio.gz, cpio.xz, squashfs]
  top:
    description: How many of the largest growths to list.
    type: int
    default: 10
  table_lines:
    description: At most this many lines per list in RV(table) (the JSON result always has every entry).
    type: int
    default: 50
  markdown_lines:
    description: At most this many entries per list in RV(markdown).
    type: int
    default: 20
  markdown_dest:
    description: Write RV(markdown) to this file (replaced at once; its directory must exist).
    type: path
requirements:
  - zstd, gzip (or pigz) or xz for cpio artifacts; unsquashfs 4.5 or later for squashfs artifacts
  - buildah for layer images
seealso:
  - module: hpc.stateless.pack
  - module: hpc.stateless.bootlink
"""

EXAMPLES = r"""
- name: What changed between the version the boot tree serves and the newest pack
  hpc.stateless.image_diff:
    boot_root: /srv/tftp
    image: compute
    output_dir: /srv/images
    markdown_dest: build/compute-diff.md
  register: diff

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ diff.table }}"

- name: Two pack version directories
  hpc.stateless.image_diff:
    old_dir: /srv/images/compute/2026.11.01
    new_dir: /srv/images/compute/2026.11.23

- name: The served version against a freshly built layer image (no pack needed)
  hpc.stateless.image_diff:
    boot_root: /srv/tftp
    image: compute
    new_image: localhost/hpc-stateless/slurm:97b0f0094ba7f20309bb9caed9264e23f3d5d8e8adf79c7f68fc6d7f6b02733d
"""

RETURN = r"""
differs:
  description: Whether the two versions differ in packages, files, file capabilities, kernel, kernel command line or layers.
  type: bool
  returned: success
summary:
  description: Counts of each kind of change, and the byte delta of all regular files.
  type: dict
  returned: success
  sample: {packages_added: 1, packages_removed: 0, packages_upgraded: 2, packages_downgraded: 0,
           packages_changed: 0, security_updates: 1, files_added: 14, files_removed: 0, files_changed: 31, bytes_delta: 1048576,
           capabilities_added: 1, capabilities_removed: 0, capabilities_changed: 0, layers_rebuilt: 1}
old:
  description: What the old version is (label, image, version, source read, kernel, kernel_args, layer_keys,
    number of packages or null when unknown).
  type: dict
  returned: success
new:
  description: The same for the new version.
  type: dict
  returned: success
packages:
  description:
    - C(added) and C(removed) (C(name), C(version)); C(upgraded) and C(downgraded) (C(name), C(old), C(new)) as
      dpkg orders versions; C(changed) for names installed in several versions on one side.
    - C(known) is false when one side has no package list; the lists are empty then.
    - C(security) - the security updates - the upgraded, downgraded or changed packages whose new version's origin
      is a security suite (C(name), C(old), C(new), C(origin)), as the new side's pack manifest records each package's
      origin (C(pack) with C(layers)). C(security_known) is false when the new side records no origins (a layer image,
      an older pack); C(security) is empty then and the table says so.
  type: dict
  returned: success
files:
  description:
    - C(added) and C(removed) (C(path), C(type), C(size), C(target) for symlinks); C(changed) (C(path), C(type),
      C(changed) - a list of content, type, mode, owner, target, device - with C(old_size), C(new_size), C(delta),
      and the old and new mode, owner or target when those changed).
    - C(largest_growths) (C(path), C(delta), C(old_size), C(new_size)); C(old) and C(new) (entries, bytes); C(delta).
  type: dict
  returned: success
capabilities:
  description:
    - File capabilities (C(security.capability)) as each side records them (a pack's manifest, a layer image's files);
      C(added) and C(removed) (C(path), C(capabilities)), C(changed) (C(path), C(old), C(new)).
    - C(known) is false when one side is a pack made before pack recorded them; the lists are empty then.
  type: dict
  returned: success
arch:
  description:
    - C(old), C(new) architecture (Debian's name, docs/arch.md; null when a side records none, as a pack from
      before manifests named it) and C(changed).
  type: dict
  returned: success
kernel:
  description: C(old), C(new) kernel version and C(changed).
  type: dict
  returned: success
kernel_args:
  description: C(old), C(new) kernel command line (null for a layer image) and C(changed).
  type: dict
  returned: success
layers:
  description: C(rebuilt) (C(layer), C(old), C(new) content key), C(added), C(removed), C(unchanged) layer names.
  type: dict
  returned: success
release:
  description: C(old) and C(new) C(/etc/image-release) as KEY -> value (null when missing) and the C(changed) keys.
  type: dict
  returned: success
notes:
  description: What could not be compared and why (a layer image has no kernel command line, a missing package list).
  type: list
  elements: str
  returned: success
table:
  description: The comparison as text lines a person reads.
  type: list
  elements: str
  returned: success
markdown:
  description: A short Markdown summary for a merge-request comment.
  type: str
  returned: success
markdown_dest:
  description: The file the Markdown was written to.
  type: str
  returned: when O(markdown_dest) is set
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._diff.diff import (
    render_markdown,
    render_table,
    write_markdown,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import FORMATS
from ansible_collections.hpc.stateless.plugins.module_utils._diff.sides import compare, list_errors

ARGUMENT_SPEC = dict(
    old_dir=dict(type="path"),
    old_image=dict(type="str"),
    old_version=dict(type="str"),
    new_dir=dict(type="path"),
    new_image=dict(type="str"),
    new_version=dict(type="str"),
    boot_root=dict(type="path"),
    output_dir=dict(type="path"),
    image=dict(type="str"),
    format=dict(type="str", choices=list(FORMATS)),
    top=dict(type="int", default=10),
    table_lines=dict(type="int", default=50),
    markdown_lines=dict(type="int", default=20),
    markdown_dest=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        mutually_exclusive=[("old_dir", "old_image", "old_version"), ("new_dir", "new_image", "output_dir")],
        required_by={"old_version": ("boot_root", "image"), "output_dir": ("image",)},
        supports_check_mode=True,
    )
    params = module.params
    for name in ("top", "table_lines", "markdown_lines"):
        if params[name] < 1:
            module.fail_json(msg=f"{name} must be at least 1, got {params[name]}")
    try:
        result = compare(params)
    except list_errors() as exc:
        module.fail_json(msg=str(exc))
    result["table"] = render_table(result, params["table_lines"])
    result["markdown"] = render_markdown(result, params["markdown_lines"])
    changed = False
    if params["markdown_dest"]:
        try:
            changed = write_markdown(params["markdown_dest"], result["markdown"], module.check_mode)
        except OSError as exc:
            module.fail_json(msg=f"markdown_dest {params['markdown_dest']}: {exc}")
        result["markdown_dest"] = params["markdown_dest"]
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
