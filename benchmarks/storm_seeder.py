# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The boot server's seeder of the boot-storm benchmark: libtorrent (Debian's python3-libtorrent) in super-seeding mode.

A plain seed sends whatever its peers ask for, and in a storm they all ask at once for the same rare pieces: the server
sends some pieces many times and others late. In super-seeding (BEP 16) the seed offers each peer one piece nobody
has yet, and the next only once that piece is seen at another peer: every piece leaves the server about once, the
swarm spreads it. The seeder stops once every piece is held by ``--stop-copies`` of its peers (they keep what they
hold while they fetch, and seed once done): the server's share is then about that many copies, however long the
storm. A site's boot server would run the same (any BitTorrent seed with super-seeding, and a stop rule).

    python3 storm_seeder.py --torrent T --dir D --listen ADDR:PORT --upload-bytes B [--stop-copies 2] [--peers 16]

Prints one JSON line when it stops: the seconds since it started seeding and the bytes it sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import libtorrent as lt  # pylint: disable=import-error  # Debian's python3-libtorrent (scripts/setup.sh)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--torrent", required=True)
    parser.add_argument("--dir", required=True, help="the directory that holds the image the torrent names")
    parser.add_argument("--listen", required=True, help="address:port to accept peers on")
    parser.add_argument("--upload-bytes", type=int, required=True, help="upload limit, bytes per second")
    parser.add_argument("--stop-copies", type=int, default=2, help="stop once every piece is held by this many peers")
    parser.add_argument("--peers", type=int, default=16,
                        help="peers it serves at once (unchoked, and connected: with more peers than pieces, super-"
                             "seeding hands the same rare piece to several newcomers)")
    args = parser.parse_args()
    session = lt.session({"listen_interfaces": args.listen, "enable_dht": False, "enable_lsd": False,
                          "enable_upnp": False, "enable_natpmp": False, "upload_rate_limit": args.upload_bytes,
                          "unchoke_slots_limit": args.peers, "connections_limit": args.peers,
                          # peers of one address (a test's swarm on loopback) are peers too
                          "allow_multiple_connections_per_ip": True,
                          "alert_mask": lt.alert.category_t.error_notification | lt.alert.category_t.tracker_notification})
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(args.torrent)
    params.save_path = args.dir
    params.flags |= lt.torrent_flags.seed_mode | lt.torrent_flags.super_seeding
    params.flags &= ~(lt.torrent_flags.auto_managed | lt.torrent_flags.paused)  # seed now, whatever the queue
    handle = session.add_torrent(params)
    pieces = params.ti.num_pieces()
    began = time.monotonic()
    while True:
        time.sleep(0.5)
        for alert in session.pop_alerts():
            print(f"{time.monotonic() - began:.1f} {alert.what()}: {alert.message()}", file=sys.stderr, flush=True)
        held = [0] * pieces
        for peer in handle.get_peer_info():
            if peer.flags & lt.peer_info.seed:
                held = [count + 1 for count in held]
                continue
            for index, has in enumerate(peer.pieces):
                held[index] += 1 if has else 0
        if args.stop_copies and min(held) >= args.stop_copies:
            break
    sent = handle.status().total_payload_upload
    print(json.dumps({"stopped_after_s": round(time.monotonic() - began, 2), "payload_sent": sent}), flush=True)
    session.remove_torrent(handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
