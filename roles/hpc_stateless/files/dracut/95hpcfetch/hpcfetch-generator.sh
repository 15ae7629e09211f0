#!/bin/sh
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# systemd generator of root=hpcfetch: /sysroot is the overlay dmsquash-live-root sets up (the
# squashfs below, a tmpfs above), mounted once hpcfetchroot has fetched the image.

# shellcheck source=/dev/null  # dracut's library, in the initrd only
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

[ "$(getarg root=)" = hpcfetch ] || exit 0
dir="$2"
[ -n "$dir" ] || exit 1
mkdir -p "$dir"
{
    echo "[Unit]"
    echo "Before=initrd-root-fs.target"
    echo "[Mount]"
    echo "Where=/sysroot"
    echo "What=LiveOS_rootfs"
    echo "Options=lowerdir=/run/rootfsbase,upperdir=/run/overlayfs,workdir=/run/ovlwork"
    echo "Type=overlay"
} >"$dir"/sysroot.mount
# The fetch of a large image over a busy network takes longer than the default device timeout.
mkdir -p "$dir/LiveOS_rootfs.device.d"
{
    echo "[Unit]"
    echo "JobTimeoutSec=3000"
    echo "JobRunningTimeoutSec=3000"
} >"$dir/LiveOS_rootfs.device.d/timeout.conf"
