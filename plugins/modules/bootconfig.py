#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bootconfig
short_description: Render pxelinux and iPXE boot entries for stateless nodes from inventory
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Writes C(pxelinux.cfg/default) (one label per published image), C(pxelinux.cfg/01-<mac>) per node,
    C(ipxe/boot.ipxe), C(ipxe/images/<image>.ipxe) and C(ipxe/nodes/<mac>.ipxe) under the boot root.
  - Entries load C(<image>/vmlinuz) and C(<image>/initrd), the links M(hpc.stateless.bootlink) switches,
    so serving another version needs no config change.
  - "Kernel arguments: C(initrd=), C(rdinit=) for cpio images or the initrd's C(root=live:...) for squashfs,
    C(ramdisk_size) at least the largest uncompressed size (C(manifest.json)) of every published or pending
    version plus headroom, the serial console, C(ip=dhcp), then the image's C(kernel_args), then the node's.
    A later C(key=value) replaces an earlier one."
  - "Every kernel argument, from the inventory, an option or a manifest, may hold only letters, digits and
    C(-_.,:=/+@%~): iPXE reads C(${...}), C(&&), C(||), C(;) and C(#) in a C(kernel) line as script syntax. An argument
    with anything else (quotes, C($), C(&), C(|), C(;), C(#), C(<>), backslash, control characters) is refused,
    naming the argument and where it came from; nothing is written."
  - Writes only files whose content changes, each through a temporary file renamed into place; removes
    per-node files it wrote earlier for nodes no longer listed. Files without its marker line are never touched.
  - Holds the boot root's deploy lock while writing, like M(hpc.stateless.bootlink).
  - With O(loader_dirs), also copies the PXE boot loader (C(pxelinux.0), C(ldlinux.c32)) from the first of those
    directories of the boot host holding each file into the boot root, when its bytes differ.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Renders everything and reports which files would be written or removed; writes nothing.
  diff_mode:
    support: full
    details: Shows up to O(diff_limit) changed files.
  idempotent:
    support: full
    details: Files whose content is already right are not written.
options:
  boot_root:
    description: The TFTP/HTTP root of the boot tree.
    type: path
    required: true
  images:
    description: Image definitions, as C(hpc_stateless_images) (C(formats), C(kernel_args) are used).
    type: dict
    required: true
  default_image:
    description: Image of C(pxelinux.cfg/default), C(ipxe/boot.ipxe)'s fallback and of nodes without an image.
      Defaults to the first image by name.
    type: str
  nodes:
    description: Nodes with their own entries.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Node name (inventory hostname).
        type: str
        required: true
      mac:
        description: MAC address(es) the node PXE-boots from (C(52:54:00:12:34:56), C(52-54-00-12-34-56) or bare hex).
        type: raw
        required: true
      image:
        description: Image the node boots (default O(default_image)).
        type: str
      kernel_args:
        description: Extra kernel arguments of this node (string or list), each of the characters described above.
        type: raw
      groups:
        description: The node's inventory groups; the first one O(server_map) maps picks its own boot server(s).
        type: list
        elements: str
        default: []
  servers:
    description:
      - The boot servers, in inventory order (docs/scale.md). When given, the iPXE scripts name the served release's
        boot files by hash (C(/sha256/<hex>) on every server) and try every server in turn, the node's own first;
        the per-image script C(ipxe/images/<image>.ipxe) names the release of the last of O(pending_manifests) (else
        the served one), so writing it is the switch for iPXE nodes. C(hpc-first.ipxe) (the first-stage loader's
        script) chains each server's C(ipxe/boot.ipxe) in turn. pxelinux entries are unchanged.
      - A server or URL listed twice is refused.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Inventory host of the server.
        type: str
        required: true
      url:
        description: Base URL of its boot root over HTTP (C(http://10.1.0.10)).
        type: str
        required: true
  server_map:
    description:
      - Node group -> list of its own servers (names of O(servers)); a group mapped to no server or to an unknown one
        is refused.
    type: dict
    default: {}
  pending_manifests:
    description: C(manifest.json) files of versions about to be published, so C(ramdisk_size) covers them
      before they are served. Pass the checked copies M(hpc.stateless.bootlink) returns as C(manifest),
      not files of the pack output.
    type: list
    elements: path
    default: []
  serial_console:
    description: Serial console (C(ttyS<N>,<baud><parity><bits>)), also pxelinux's C(SERIAL); empty for none.
    type: str
    default: ttyS0,115200n8
  ip:
    description: Value of the C(ip=) kernel argument (one argument, of the characters described above); empty to
      leave it out.
    type: str
    default: dhcp
  rdinit:
    description: Init program of cpio images (C(rdinit=)), of the characters described above.
    type: str
    default: /sbin/init
  ramdisk_headroom:
    description: Percent added to the largest uncompressed size for C(ramdisk_size).
    type: int
    default: 10
  ramdisk_round_mib:
    description: C(ramdisk_size) is rounded up to a multiple of this many MiB, so most new versions change no file.
    type: int
    default: 256
  boot_url:
    description:
      - URL of the boot root as booted nodes reach it, for example C(http://10.0.0.1/tftpboot). Required for
        squashfs images (the initrd fetches C(<boot_url>/<image>/rootfs.squashfs)); iPXE scripts fetch kernel
        and initrd from it when set (else relative to the script, over TFTP).
      - Of the characters described above (it goes into the C(kernel) line and C(root=live:)); percent-encode others.
    type: str
    default: ""
  prompt_timeout:
    description: Tenths of a second C(pxelinux.cfg/default) waits at its prompt.
    type: int
    default: 30
  ipappend:
    description: pxelinux C(IPAPPEND) flags (2 adds C(BOOTIF=) with the boot NIC's MAC); 0 for none.
    type: int
    default: 2
  remove_stale:
    description: Remove per-node and per-image files this module wrote earlier that are no longer wanted.
    type: bool
    default: true
  diff_limit:
    description: Most changed files shown with C(--diff).
    type: int
    default: 20
  lock_timeout:
    description: Seconds to wait for another deploy's lock on the boot root before failing.
    type: float
    default: 60
  loader_dirs:
    description:
      - Directories of the boot host searched, in order, for C(pxelinux.0) and C(ldlinux.c32); the first of each
        found is copied into the boot root (through a temporary file renamed into place) when the boot root's copy
        differs or is missing. A file found nowhere is left alone (the site may serve its own loader).
      - Empty copies nothing.
    type: list
    elements: path
    default: []
  validate_only:
    description: Only check the input (nodes, MACs, images, options); read no manifest, write nothing.
      Lets a deploy refuse bad inventory before it publishes anything.
    type: bool
    default: false
seealso:
  - module: hpc.stateless.bootlink
"""

EXAMPLES = r"""
- name: Render boot entries for every node of group compute (MACs from hostvars)
  hpc.stateless.bootconfig:
    boot_root: /srv/tftp
    images: "{{ hpc_stateless_images }}"
    default_image: compute
    nodes: "{{ query('ansible.builtin.inventory_hostnames', 'compute') | map('extract', hostvars, 'hpc_stateless_boot_node') | list }}"

- name: Render for two nodes, one with extra arguments
  hpc.stateless.bootconfig:
    boot_root: /srv/tftp
    images:
      compute:
        formats: [cpio.zst]
        kernel_args: quiet
    nodes:
      - name: n0001
        mac: "52:54:00:00:00:01"
      - name: n0002
        mac: "52:54:00:00:00:02"
        kernel_args: systemd.unit=rescue.target
"""

RETURN = r"""
files:
  description: Number of managed files.
  returned: always
  type: int
written:
  description: Files written (or that would be), relative to the boot root; at most 200 listed.
  returned: always
  type: list
  elements: str
written_count:
  description: Number of files written.
  returned: always
  type: int
removed:
  description: Stale managed files removed; at most 200 listed.
  returned: always
  type: list
  elements: str
removed_count:
  description: Number of stale files removed.
  returned: always
  type: int
loaders:
  description: The boot loader files found in O(loader_dirs) and where each was taken from (empty with O(validate_only)).
  returned: always
  type: dict
  sample: {"pxelinux.0": "/usr/lib/PXELINUX/pxelinux.0", "ldlinux.c32": "/usr/lib/syslinux/modules/bios/ldlinux.c32"}
unchanged:
  description: Files whose content was already right.
  returned: always
  type: int
fence_lifted:
  description:
    - Whether the render removed the boot root's switch fence (C(.hpc-stateless-switch), written by C(deploy.yml) on
      every boot server before the switch; while it exists the server's nginx answers 503 for C(ipxe/)).
  returned: always
  type: bool
nodes:
  description: Number of nodes rendered.
  returned: always
  type: int
images:
  description:
    - Per image, the format, C(ramdisk_size) (KiB), C(arch) (the architecture its served version boots on, from
      its manifest; empty when the manifest names none) and the pxelinux kernel arguments.
    - With O(validate_only), the format alone - the one each image boots, for M(hpc.stateless.bootlink)'s
      O(hpc.stateless.bootlink#module:format).
  returned: always
  type: dict
arch_defaults:
  description:
    - The image a node without its own file boots on a machine of another architecture than the default
      image's (the iPXE entry point dispatches on C(${buildarch})); the first image by name of each such
      architecture.
  returned: success, without O(validate_only)
  type: dict
  sample: {"arm64": "compute-arm64"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig_task import ARGUMENT_SPEC, VALIDATION, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **VALIDATION)
    result = run(module.params, module.check_mode, module._diff)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
