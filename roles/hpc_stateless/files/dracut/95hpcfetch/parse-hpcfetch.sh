#!/bin/sh
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# cmdline hook: root=hpcfetch hands the root to hpcfetchroot once the network is up (network's
# netroot runs /sbin/<netroot type>root). hpc.servers= and hpc.image= are checked by hpc-fetch.

[ -z "$root" ] && root=$(getarg root=)
[ "$root" = hpcfetch ] || return 0

if [ -z "$(getarg hpc.servers=)" ] || [ -z "$(getarg hpc.image=)" ]; then
    die "root=hpcfetch needs hpc.servers=<url>,<url> and hpc.image=sha256:<hex> on the kernel command line"
fi
info "hpcfetch: image $(getarg hpc.image=) from $(getarg hpc.servers=)"
# shellcheck disable=SC2034  # read by dracut's netroot
netroot="hpcfetch:$(getarg hpc.image=)"
# shellcheck disable=SC2034  # read by dracut's init
rootok=1
wait_for_dev -n /dev/root
