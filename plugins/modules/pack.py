#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pack
short_description: Pack a layer image or a directory into boot artifacts (cpio initramfs, squashfs)
version_added: 0.1.0
author: hpc.stateless developers (@hpc-stateless)
description:
  - Packs the tree of a layer image (mounted through a throw-away buildah working container, so the
    cached layer is never written) or of a directory into C(<output_dir>/<image>/<version>/).
  - "Writes C(<image>.cpio.zst), C(<image>.cpio.gz), C(<image>.cpio.xz) (the SVR4 newc cpio format the
    Linux kernel unpacks as its root file system) and/or C(<image>.squashfs), the kernel as C(vmlinuz),
    for squashfs an C(initrd.img) that mounts it when the image can make one (dracut with its live
    modules, or Debian live-boot), the SBOM C(sbom.cdx.json) (CycloneDX 1.6, from the image's dpkg or
    rpm database), C(SHA256SUMS) and C(manifest.json)."
  - "C(/etc/image-release) is added to the packed copy only: C(IMAGE=), C(VERSION=), C(LAYER=),
    C(LAYER_KEY=), C(BUILD_TIME=) lines."
  - Reproducible - packing the same image twice gives byte-identical artifacts. Entries are sorted,
    inode numbers renumbered, and modification times newer than C(SOURCE_DATE_EPOCH) clamped to it.
  - Before any byte is written the tree is checked - secrets are refused and named with the form found unless
    allowed - by name (SSH host and private keys, the MUNGE and Slurm keys, files named in O(secret_patterns)) and
    by content at any path (private keys in PEM, OpenSSH, PGP, DER and other formats, keytabs, MUNGE-sized
    random keys, cloud and service credentials such as AWS key pairs, GCP service-account keys, Azure
    connection strings, kubeconfig client keys, Vault tokens, .pgpass, .netrc and registry auths, PKCS#12
    and Java keystores holding a key, and keys inside tar, zip, gzip, bzip2 and xz files, within bounds).
    Files of 4 GiB or more are refused for cpio formats, and the uncompressed size is held against
    O(size_ceiling).
  - Artifacts are written into a hidden C(.<version>.partial-<pid>) directory that is renamed into place
    at the end; a failed or killed pack leaves no file under a final name.
  - The image is untrusted input. Its paths are resolved inside it (an absolute symlink is the image's own
    path, never the build host's), the files pack publishes are created new, never through a link, and the
    image's own dracut and depmod write into directories of their own, from which only regular files are
    copied out. A O(source_image) is packed from the image ID that was inspected (and that the
    verification gate checked), not from the reference.
  - When the version directory already holds a pack of the same source image with the same options and
    its files match C(SHA256SUMS), nothing is done (C(changed=false)) unless O(force=true).
  - The cpio stream is written by the module itself from a sorted walk and piped into zstd, pigz or xz, so
    memory use does not grow with the image.
extends_documentation_fragment:
  - hpc.stateless.attributes
attributes:
  check_mode:
    support: full
    details: Mounts the source and runs every check (kernel, secrets, sizes); writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Up to date when the manifest records the same source image ID and options; a O(source_path) is always packed.
options:
  image:
    description: Image name; names the output directory and the artifacts, and goes into C(/etc/image-release).
    type: str
    required: true
  source_image:
    description:
      - Layer image in local containers-storage to pack, for example C(localhost/hpc-stateless/slurm:<key>).
      - Its C(hpc.stateless.*) labels give the layer, the layer keys and the default version.
      - Exactly one of O(source_image) and O(source_path) is required.
    type: str
  source_path:
    description: A directory to pack instead of an image (not modified).
    type: path
  output_dir:
    description: Where C(<image>/<version>/) is created.
    type: path
    required: true
  version:
    description:
      - Version directory name and C(VERSION=) of C(/etc/image-release); C(pack.yml) passes the version the plan
        names for the content (C(git describe) of a clean project, else C(<describe>+<leaf layer key>)).
      - A version directory that holds another build (another source image, or other pack options) is never
        replaced; the module fails naming both builds. A repack of the same build (O(force)) replaces it.
      - Defaults to the image's C(hpc.stateless.git-commit) label, else the first 12 characters of its layer key.
      - "Image and version names: letters, digits and C(._+~-), starting with a letter or digit (Debian-style
        C(1.0~rc1), C(2026.11.23+site1)), at most 128 characters, not C(images), C(previous), C(pxelinux.cfg),
        C(ipxe), C(pxelinux.0) or C(ldlinux.c32) - the rule M(hpc.stateless.bootlink) applies too."
    type: str
  layer:
    description: Layer name recorded in the release file and manifest. Defaults to the image's C(hpc.stateless.layer) label.
    type: str
  layer_keys:
    description: "C({layer: key}) of the layer and its ancestors. Defaults to the labels of the image and its parent images."
    type: dict
  formats:
    description: Artifacts to write.
    type: list
    elements: str
    default: [cpio.zst]
    choices: [cpio.zst, cpio.gz, cpio.xz, squashfs]
  levels:
    description:
      - "Compression level per format, for example C({cpio.zst: 19, squashfs: 15})."
      - "Defaults and ranges: cpio.zst 3 (1-19), cpio.gz 6 (1-9), cpio.xz 6 (0-9), squashfs with zstd 3 (1-22),
        with gzip 6 (1-9); mksquashfs' xz has no level."
    type: dict
    default: {}
  squashfs_compression:
    description: Compressor of the squashfs image.
    type: str
    choices: [zstd, xz, gzip]
    default: zstd
  threads:
    description: Compressor threads; C(0) uses every processor.
    type: int
    default: 0
  exclude:
    description:
      - Shell globs of paths (relative to the image root, a leading C(/) is ignored) left out of the image.
        C(*) also matches C(/). C(dir/*) keeps C(dir) empty; C(dir) drops it.
    type: list
    elements: str
    default: []
  exclude_defaults:
    description:
      - Also leave out runtime trees and caches - the contents of C(/proc), C(/sys), C(/run), C(/tmp),
        C(/var/tmp), C(/boot), apt/dnf/yum/zypper caches and lists, C(/var/log/journal).
    type: bool
    default: true
  secret_patterns:
    description: Further globs of files that are secrets and must not be packed.
    type: list
    elements: str
    default: []
  allowed_secrets:
    description: Globs of secret files that may be packed anyway (each one is reported as a warning).
    type: list
    elements: str
    default: []
  allow_secrets:
    description: Pack every secret found (each one is reported as a warning).
    type: bool
    default: false
  kernel:
    description: Take the kernel from this path on the build host instead of the image's C(/boot).
    type: path
  kernel_version:
    description: Which of several kernels in the image to publish (default the newest).
    type: str
  kernel_args:
    description: Kernel command line recorded in the manifest for deploy.
    type: str
    default: ""
  initrd:
    description: Initrd (path on the build host) published with a squashfs image instead of building one.
    type: path
  dracut:
    description: Build the squashfs initrd with the image's dracut (dmsquash-live, livenet) when it has them.
    type: bool
    default: true
  first_stage:
    description:
      - Directory of the collection's dracut module C(hpcfetch) (C(roles/hpc_stateless/files/dracut/95hpcfetch)).
        When the image's dracut can fetch over the network (livenet), the module is added to the squashfs
        initrd, and the manifest's C(initrd.first_stage.kernel_args) say how to boot with it
        (C(root=hpcfetch); deploy adds C(hpc.servers=) and C(hpc.image=)). See C(docs/scale.md).
    type: path
  source_date_epoch:
    description:
      - Time (seconds since the epoch) for C(BUILD_TIME), the manifest's C(created) and the mtime clamp.
      - Defaults to the environment's C(SOURCE_DATE_EPOCH), else the image's creation time, else the newest
        mtime in O(source_path).
    type: int
  size_ceiling:
    description:
      - Largest acceptable uncompressed tree and artifact, as bytes or with a unit (C(3G), C(3584M)).
        Legacy BIOS/pxelinux loaders cannot load initrds near 4 GiB and the node needs the tree in RAM.
    type: str
    default: 4G
  size_warn_ratio:
    description: Warn when the uncompressed tree reaches this fraction of O(size_ceiling).
    type: float
    default: 0.8
  size_ceiling_action:
    description: What exceeding O(size_ceiling) does.
    type: str
    choices: [fail, warn]
    default: fail
  reset_machine_id:
    description: Pack an empty C(/etc/machine-id), so every node makes its own at boot.
    type: bool
    default: true
  release_extra:
    description: Further C(KEY=value) lines for C(/etc/image-release) (upper-case keys).
    type: dict
    default: {}
  force:
    description: Pack even when the version directory is up to date.
    type: bool
    default: false
  hardware_profile:
    description:
      - Prune the kernel modules and firmware of the packed copy to the hardware the nodes have; the cached
        layer is never changed. Without it (the default) nothing is pruned.
      - "Kept: the modules named in C(modules) and C(force), the modules whose C(modules.alias) patterns match a
        line of C(modaliases) or C(modaliases_file), what systemd and the squashfs boot path load (autofs4,
        configfs, dm_mod, efi_pstore, fuse, loop, overlay, squashfs), their dependencies and soft dependencies,
        transitively, and the firmware files they name (C(modinfo -F firmware)) plus the globs of C(firmware)."
      - "C(modules.dep) and the other depmod files are regenerated for the kept modules (with the image's depmod),
        so C(modprobe) works on the node. The unpruned C(modules.alias) is kept as C(modules.alias.unpruned) and
        C(/usr/local/sbin/hpc-hwprofile-check) on the node names the modules its devices need that were left out."
      - "Capture a node's modaliases with C(find /sys/devices -name modalias -exec cat {} + | sort -u > node.modaliases)."
      - An unknown module name fails, naming the key; modalias lines that match no module are reported as a warning.
      - "The manifest records the profile, the kept modules and firmware, and what was removed (files, bytes)."
    type: dict
    suboptions:
      modules:
        description: Module names (C(-) and C(_) are the same).
        type: list
        elements: str
        default: []
      modaliases:
        description: Modalias lines, as read from C(/sys/devices/**/modalias) on a node.
        type: list
        elements: str
        default: []
      modaliases_file:
        description: File on the build host with one modalias line per line (C(#) comments allowed).
        type: path
      force:
        description: Module names kept whatever the hardware (for example a file system or a protocol module).
        type: list
        elements: str
        default: []
      firmware:
        description: Further firmware files to keep, as globs relative to C(/usr/lib/firmware).
        type: list
        elements: str
        default: []
  verify_dir:
    description:
      - The verification gate. Directory of the verification records C(playbooks/verify.yml) writes
        (C(<project>/build/verify) in C(playbooks/pack.yml), which always sets it).
      - When set, a O(source_image) is packed only when its layer and content key have a record there
        whose checks all passed for the image's current ID. Otherwise nothing is written and the error
        names the checks that failed, or says verify never ran (or ran on an image since built again),
        with the command that runs it.
      - "The verdict is recorded in the manifest as C(verification): C(status) C(passed), C(overridden)
        (O(unverified_ok)) or, without O(verify_dir) or for a O(source_path), C(not-checked).
        C(playbooks/deploy.yml) serves only C(passed) and C(overridden) packs."
    type: path
  unverified_ok:
    description:
      - Emergencies only. The reason to pack an image that the gate refuses (C(hpc_stateless_unverified_ok) in
        the playbooks); it is reported as a warning and recorded in the manifest's C(verification.override_reason).
      - Empty or blank means no override.
    type: str
    default: ""
  layers:
    description:
      - The layer DAG (C(hpc_stateless_layers) in the playbooks, which always set it). With it, pack holds the image's
        installed packages against the archive of its layer's apt sources (the root layer's bootstrap suites and the
        extra C(sources) of the layer and its ancestors), read on the controller as the plan reads it (signed
        indexes, cached). Debian-style images only.
      - "The manifest records C(freshness): the repository states the image was built against (the layers'
        C(hpc.stateless.repositories) labels), those read at pack time, and the pending updates (normally none).
        Each C(packages) entry gets the C(origin) suite that serves its version and C(security) when that is a
        security suite. The SBOM carries the same as C(hpc.stateless:*) properties."
      - Without it nothing is checked or recorded.
    type: dict
  project_dir:
    description: The directory a relative C(keyring) of a layer's sources is relative to (C(pack.yml) passes the project's).
    type: path
  freshness_gate:
    description:
      - What pending security updates (a newer version of an installed package in a security suite) do, with O(layers).
      - C(refuse) (the default) - nothing is written; the error names the updates and says to run C(site.yml)
        to rebuild the layers that installed them. C(warn) - the image is packed and each warns; an archive that
        cannot be read is then a warning too.
      - Updates from other suites never stop a pack; the manifest lists them.
    type: str
    choices: [refuse, warn]
    default: refuse
  archive_cache_dir:
    description:
      - Where the archive's indexes are cached (shared with the plan). Defaults to C(/var/cache/hpc.stateless/archive)
        as root, else C(~/.cache/hpc.stateless/archive).
    type: path
notes:
  - Runs on the build host as root (it mounts images). Needs buildah for O(source_image), zstd, pigz (or gzip), xz
    and mksquashfs for the formats asked for.
  - The newc format has no extended attributes. Pack records each file's capabilities (C(security.capability), e.g.
    C(ping)'s C(cap_net_raw=ep)) in the manifest, and a cpio image restores them at boot with the image's C(setcap),
    before C(sysinit.target) (C(hpc-stateless-capabilities.service)), for files only root can replace; squashfs
    images keep every extended attribute. See docs/pack.md.
seealso:
  - module: hpc.stateless.layer
  - module: hpc.stateless.plan
"""

EXAMPLES = r"""
- name: Pack the compute image as cpio.zst and squashfs
  hpc.stateless.pack:
    image: compute
    source_image: localhost/hpc-stateless/slurm:{{ plan.layers.slurm.key }}
    output_dir: build/images
    version: "{{ plan.git_commit }}"
    formats: [cpio.zst, squashfs]
    kernel_args: console=ttyS0
  register: packed

- name: Show the size report
  ansible.builtin.debug:
    msg: "{{ packed.size_report_text }}"

- name: Pack the compute image for virtual machines only (modules pruned to the qemu profile)
  hpc.stateless.pack:
    image: compute-vm
    source_image: localhost/hpc-stateless/slurm:{{ plan.layers.slurm.key }}
    output_dir: build/images
    hardware_profile:
      modules: [virtio_net, virtio_blk]
      modaliases_file: files/qemu-q35.modaliases
      force: [nfs]

- name: Pack a directory, dropping documentation, with the munge key allowed
  hpc.stateless.pack:
    image: test
    source_path: /srv/roots/test
    output_dir: /srv/images
    version: "1.0"
    exclude: [usr/share/doc/*, usr/share/man/*]
    allowed_secrets: [etc/munge/munge.key]
"""

RETURN = r"""
verification:
  description: The manifest's C(verification) - the gate's verdict (C(status), the record and its checks, an override reason).
  returned: always
  type: dict
  sample: {"status": "passed", "layer": "slurm", "key": "3f2a9c", "record": "slurm-3f2a9c.json"}
version_dir:
  description: The version directory.
  returned: always
  type: str
  sample: /work/build/images/compute/v1.2-3-gabc123
version:
  description: The version packed.
  returned: always
  type: str
up_to_date:
  description: The version directory already held this pack; nothing was written.
  returned: always
  type: bool
manifest:
  description: Content of C(manifest.json) (in check mode, what would be packed).
  returned: always
  type: dict
artifacts:
  description: Paths of the image artifacts.
  returned: always
  type: list
  elements: str
kernel:
  description: Path of the published kernel.
  returned: always
  type: str
sbom:
  description: Path of the SBOM, C(sbom.cdx.json) (CycloneDX 1.6 JSON), listed in C(SHA256SUMS).
  returned: always
  type: str
  sample: /work/build/images/compute/v1.2-3-gabc123/sbom.cdx.json
uncompressed_size:
  description: Bytes of the packed tree (file data and symlink targets).
  returned: always
  type: int
size_report:
  description: Uncompressed size, number of files, 20 largest packages, directories and files.
  returned: always
  type: dict
size_report_text:
  description: The size report as a table.
  returned: always
  type: str
excluded:
  description: Number of excluded paths (pruned subtrees count once).
  returned: when the tree was scanned (not when up to date)
  type: int
hardware_profile:
  description: What the hardware profile kept and removed (the manifest's C(hardware_profile)).
  returned: when hardware_profile is set and the tree was packed or checked
  type: dict
  sample: {"kept_modules": ["e1000", "virtio_net"], "removed": {"modules": {"files": 4004, "bytes": 394265868}}}
allowed_secrets:
  description: Secrets packed because they were allowed.
  returned: always
  type: list
  elements: str
freshness:
  description:
    - The manifest's C(freshness) - C(repositories) built against (with the C(layers) that saw each), C(archive)
      states read at pack time, C(pending_updates) (C(package), C(installed), C(candidate), C(suite), C(security)) and
      C(pending_security_updates), the count.
  returned: when O(layers) is set and the image has a dpkg database
  type: dict
  sample: {"pending_updates": [{"package": "tzdata", "installed": "2025a-0+deb12u1", "candidate": "2025b-0+deb12u1",
           "suite": "bookworm-updates", "security": false}], "pending_security_updates": 0}
capabilities:
  description:
    - The file capabilities of the packed tree, the manifest's C(capabilities) - C(path) and C(capabilities) in the
      text form C(setcap) takes, one entry per file that has a C(security.capability).
    - C(not_restored_in_cpio) says why a node booted from a cpio artifact does not get them back (a directory a user
      may write to, no C(setcap) in the image); pack warns about every such file.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/usr/bin/ping", "capabilities": "cap_net_raw=ep"}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.stateless.plugins.module_utils._pack.pack_task import ARGUMENT_SPEC, VALIDATION, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **VALIDATION)
    result = run(module.params, module.check_mode, module._diff)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
