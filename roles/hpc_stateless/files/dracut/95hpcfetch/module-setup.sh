#!/usr/bin/env bash
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# dracut module hpcfetch: the first stage of a squashfs two-stage boot. With root=hpcfetch the
# initrd brings the network up, fetches the image named by hpc.image=sha256:<hex> from the
# servers of hpc.servers= (hpc-fetch: retries, failover, sha256 check, memory check) into a tmpfs
# and mounts it as root through dmsquash-live (rd.live.image rd.live.overlay.overlayfs=1).
# pack adds this module to the image's dracut (docs/pack.md, docs/scale.md).

# moddir and systemdutildir are set by dracut when it sources this file.
# shellcheck disable=SC2154

# called by dracut: only when asked for (--add hpcfetch)
check() {
    return 255
}

# called by dracut
depends() {
    echo network dmsquash-live
    return 0
}

# called by dracut
install() {
    inst_multiple sha256sum df wc tr dirname mv rm mkdir sleep mount
    inst_multiple -o curl wget aria2c mountpoint du chmod ln
    inst_script "$moddir/hpc-fetch.sh" /sbin/hpc-fetch
    inst_script "$moddir/hpcfetchroot.sh" /sbin/hpcfetchroot
    inst_hook cmdline 28 "$moddir/parse-hpcfetch.sh"
    if dracut_module_included "systemd-initrd"; then
        inst_script "$moddir/hpcfetch-generator.sh" "$systemdutildir"/system-generators/dracut-hpcfetch-generator
    fi
    dracut_need_initqueue
}
