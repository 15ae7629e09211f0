#!/bin/sh
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# netroot handler of root=hpcfetch: fetch the image into a tmpfs of its own (RAM; moved with /run
# to the booted system, where the loop device keeps reading it) and mount it as root.

# shellcheck source=/dev/null  # dracut's library, in the initrd only
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

PATH=/usr/sbin:/usr/bin:/sbin:/bin
[ -e /tmp/hpcfetch.done ] && exit 0

dir=/run/hpc-image
mkdir -p "$dir"
mountpoint -q "$dir" 2>/dev/null || mount -t tmpfs -o mode=0700,size=95% hpc-image "$dir" ||
    die "hpcfetch: cannot mount a tmpfs on $dir"

torrent=$(getarg hpc.torrent=)
if ! hpc-fetch -s "$(getarg hpc.servers=)" -i "$(getarg hpc.image=)" -o "$dir/root.squashfs" \
    ${torrent:+-t "$torrent"}; then
    warn "hpcfetch: no server delivered the image $(getarg hpc.image=) (see the hpc-fetch lines above)"
    exit 1
fi
: >/tmp/hpcfetch.done
# The overlay's upper and work directories (tmpfs under /run): the generator's sysroot.mount uses them as
# soon as the root is there, before dracut's mount hooks (which would make them) run.
mkdir -p /run/overlayfs /run/ovlwork
exec /sbin/dmsquash-live-root "$dir/root.squashfs"
