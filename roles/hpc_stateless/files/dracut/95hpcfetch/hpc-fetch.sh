#!/bin/sh
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# hpc-fetch: fetch a content-named image from a list of boot servers and verify it.
#
#   hpc-fetch -s 'http://a/,http://b/' -i <64 hex> -o /run/hpc-image/root.squashfs
#             [-r rounds] [-w seconds] [-m reserve MiB] [-c connect timeout] [-l stall seconds]
#             [-t <64 hex of a .torrent>]
#
# The image is <server>/sha256/<hex> on every server (docs/scale.md). Servers are tried in the
# order given (the node's own first); a transfer cut off is resumed from the next server (the
# bytes are the same everywhere: they are named by their hash); a file whose sha256 is not the
# one named is refused and fetched again from the next server. After a round over every server
# failed it waits (doubling up to 8x) and starts again, ROUNDS times. Before downloading, the
# image's size (HEAD) is held against MemAvailable minus a reserve and the output directory's free
# space: a node that cannot hold the image fails at once, saying so.
# With -t and aria2c present the image is first fetched peer-to-peer (the .torrent is an artifact
# too, verified like the image); peers that stall fall back to HTTP from the same servers.
# This is the first stage of the initramfs (dracut module hpcfetch) and what the boot-storm
# benchmark runs on each simulated node: POSIX sh, curl (or wget), sha256sum; peer-to-peer also aria2c,
# du, chmod, ln.
#
# Exit status: 0 fetched and verified (OUT holds it); 2 bad arguments; 3 the node cannot hold the
# image (memory or space); 4 no server delivered the image after every round.

servers=${HPC_FETCH_SERVERS:-}
image=${HPC_FETCH_IMAGE:-}
out=${HPC_FETCH_OUT:-}
rounds=${HPC_FETCH_ROUNDS:-5}
wait_s=${HPC_FETCH_WAIT:-2}
reserve_mib=${HPC_FETCH_RESERVE_MIB:-256}
connect_s=${HPC_FETCH_CONNECT_TIMEOUT:-5}
stall_s=${HPC_FETCH_STALL:-15}
poll_s=${HPC_FETCH_POLL_S:-5}
torrent=${HPC_FETCH_TORRENT:-}

log() { echo "hpc-fetch: $*" >&2; }
usage() { log "$*"; log "usage: hpc-fetch -s 'http://a/,http://b/' -i <64 hex> -o <file> [-r rounds] [-w seconds] [-m reserve MiB] [-c connect s] [-l stall s] [-t <torrent hex>]"; exit 2; }

while getopts s:i:o:r:w:m:c:l:t: opt; do
    case $opt in
        s) servers=$OPTARG ;;
        i) image=$OPTARG ;;
        o) out=$OPTARG ;;
        r) rounds=$OPTARG ;;
        w) wait_s=$OPTARG ;;
        m) reserve_mib=$OPTARG ;;
        c) connect_s=$OPTARG ;;
        l) stall_s=$OPTARG ;;
        t) torrent=$OPTARG ;;
        *) usage "unknown option" ;;
    esac
done

# <64 lowercase hex> (or sha256:<64 lowercase hex>) -> the hex; fails on anything else.
hex_of() {
    h=${1#sha256:}
    [ ${#h} -eq 64 ] || return 1
    case $h in *[!0-9a-f]*) return 1 ;; esac
    echo "$h"
}

is_count() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

hex=$(hex_of "$image") || usage "hpc.image (-i) must be <64 lowercase hex> (the sha256), got '$image'"
[ -n "$torrent" ] && { torrent_hex=$(hex_of "$torrent") || usage "hpc.torrent (-t) must be <64 lowercase hex> (the sha256), got '$torrent'"; }
[ -n "$out" ] || usage "no output file (-o)"
for n in "$rounds" "$wait_s" "$reserve_mib" "$connect_s" "$stall_s" "$poll_s"; do
    is_count "$n" || usage "'$n' is not a whole number (-r -w -m -c -l, HPC_FETCH_POLL_S)"
done
[ "$rounds" -ge 1 ] || usage "rounds (-r) must be at least 1"

# The server list: comma-separated base URLs; each gets its trailing slash. Duplicates are refused:
# a list that names one server twice is a configuration error, not extra failover.
list=
old_ifs=$IFS
IFS=,
for s in $servers; do
    case $s in
        http://?* | https://?*) ;;
        *) IFS=$old_ifs; usage "hpc.servers (-s): '$s' is not an http:// or https:// base URL" ;;
    esac
    case $s in */) ;; *) s="$s/" ;; esac
    case " $list " in *" $s "*) IFS=$old_ifs; usage "hpc.servers (-s) names $s twice" ;; esac
    list="${list:+$list }$s"
done
IFS=$old_ifs
[ -n "$list" ] || usage "hpc.servers (-s) names no server"

if command -v curl >/dev/null 2>&1; then
    tool=curl
elif command -v wget >/dev/null 2>&1; then
    tool=wget
else
    log "neither curl nor wget is here: cannot fetch"; exit 4
fi

part="$out.part"
dir=$(dirname "$out")
[ -d "$dir" ] || { log "output directory $dir does not exist"; exit 2; }

# Content-Length of URL from a HEAD request, or nothing.
remote_size() {
    if [ "$tool" = curl ]; then
        curl -fsSI --connect-timeout "$connect_s" --max-time $((connect_s * 2)) "$1" 2>/dev/null
    else
        wget -q -S --spider -T "$connect_s" "$1" 2>&1
    fi | while IFS=': ' read -r name value; do
        case $name in
            [Cc]ontent-[Ll]ength) echo "$value" | tr -d '\r '; break ;;
        esac
    done
}

# Download URL into $part, resuming what is there.
download() {
    if [ "$tool" = curl ]; then
        curl -fsS --connect-timeout "$connect_s" --speed-limit 1024 --speed-time "$stall_s" -C - -o "$part" "$1"
    else
        wget -q -c -T "$stall_s" -O "$part" "$1"
    fi
}

file_size() { wc -c <"$1" | tr -d ' '; }
sha_of() { sha256sum "$1" | { read -r sum _ && echo "$sum"; }; }

# Fits: the image's size against MemAvailable minus the reserve and the directory's free space.
check_room() {
    size=$1
    avail_kib=
    while read -r key value _; do
        [ "$key" = MemAvailable: ] && { avail_kib=$value; break; }
    done </proc/meminfo
    if [ -n "$avail_kib" ] && [ $((size / 1024 + reserve_mib * 1024)) -gt "$avail_kib" ]; then
        log "the image needs $((size / 1048576)) MiB + a reserve of $reserve_mib MiB, the node has $((avail_kib / 1024)) MiB available: it cannot be held in RAM; boot it on a node with more memory or make the image smaller"
        exit 3
    fi
    free_kib=$(df -Pk "$dir" | { read -r _; read -r _ _ _ f _ && echo "$f"; })
    if [ -n "$free_kib" ] && [ $((size / 1024 + 1)) -gt "$free_kib" ]; then
        log "the image needs $((size / 1048576)) MiB, $dir has $((free_kib / 1024)) MiB free"
        exit 3
    fi
}

# Accept $part as the image when its hash is the one named; refuse (remove) it otherwise.
accept() {
    got=$(sha_of "$part")
    if [ "$got" = "$hex" ]; then
        mv -f "$part" "$out" && return 0
        log "cannot move $part to $out"; exit 4
    fi
    log "refused the image from $1: its sha256 is $got, not $hex; fetching it again from the next server"
    rm -f "$part"
    return 1
}

# KiB of FILE held on disk (allocated blocks: aria2c writes pieces at their offsets, so the file's
# length says nothing about how much of it is there), in $held; one process a call (hundreds of
# nodes poll at once on a benchmark host).
held_kib() {
    held=0
    du -k "$1" >"$p2p/.held" 2>/dev/null && read -r held _ <"$p2p/.held"
}

# The image file aria2c writes in $p2p (the torrent names it; not aria2c's .aria2 control file), in $got;
# unchanged while there is none yet.
swarm_file() {
    for f in "$p2p"/*; do
        [ -f "$f" ] && case $f in *.aria2) ;; *) got=$f ;; esac
    done
}

# Peer-to-peer first when a torrent is named and aria2c is here: the .torrent comes from the servers
# (verified), aria2c fetches the pieces from peers (each piece checked against the torrent), and an
# image that is still incomplete when the swarm stops making progress is left to the HTTP loop below.
# The swarm's own pace decides, not a wall clock: hpc-fetch watches the bytes aria2c holds and gives
# up on the swarm only after STALL seconds in which no byte arrived (a large swarm takes a while to
# reach a node: peers unchoke newcomers in rounds). The finished node keeps seeding for
# HPC_FETCH_SEED_S seconds (default 120) in the background while it boots, so that the nodes still
# fetching find peers: the image is a hard link of the seeded file (same tmpfs), and aria2c's
# process id is in OUT.seeder (the caller may wait for it).
# aria2c: no DHT and no local peer discovery (a closed network: the tracker on the boot server
# names the peers); ask the tracker every HPC_FETCH_TRACKER_S seconds (default 15; opentracker
# would say 30 min) so a node learns of the peers that joined after it; up to HPC_FETCH_PEERS peers
# (default 20: enough to reach the swarm, and each peer costs the node messages for every piece).
# The watch looks at the bytes held every HPC_FETCH_POLL_S seconds (default 5, at most the stall
# time); the completion hook wakes it at once.
fetch_p2p() {
    command -v aria2c >/dev/null 2>&1 || { log "no aria2c here: fetching over HTTP"; return 1; }
    tfile="$out.torrent"
    for s in $list; do
        if [ "$tool" = curl ]; then
            curl -fsS --connect-timeout "$connect_s" -o "$tfile" "${s}sha256/$torrent_hex" || continue
        else
            wget -q -T "$connect_s" -O "$tfile" "${s}sha256/$torrent_hex" || continue
        fi
        [ "$(sha_of "$tfile")" = "$torrent_hex" ] && break
        log "refused the torrent from $s: wrong sha256"
        rm -f "$tfile"
    done
    [ -s "$tfile" ] || { log "no server gave the torrent: fetching over HTTP"; return 1; }
    # The torrent names the file; aria2c writes it into a directory of its own.
    p2p="$out.p2p"
    rm -rf "$p2p"
    mkdir -p "$p2p"
    # aria2c runs this once every piece is in and checked, before it seeds: the image is complete. It ends the
    # watch's wait at once (the watch looks at the bytes held only every POLL seconds).
    # shellcheck disable=SC2016  # $w is the hook's own variable
    printf '#!/bin/sh\n: >"%s/.complete"\nread -r w <"%s/.wait" 2>/dev/null && kill "$w" 2>/dev/null\nexit 0\n' \
        "$p2p" "$p2p" >"$p2p/.on-complete"
    chmod 0755 "$p2p/.on-complete"
    seed_mmin=$(( ${HPC_FETCH_SEED_S:-120} * 1000 / 60 ))  # aria2c takes (fractional) minutes
    # HPC_FETCH_ARIA2_OPTS: extra aria2c options, split into words on purpose.
    # shellcheck disable=SC2086
    aria2c -q --dir="$p2p" --seed-time="$((seed_mmin / 1000)).$(printf %03d $((seed_mmin % 1000)))" \
        --seed-ratio=0.0 --bt-stop-timeout=0 \
        --file-allocation=none --bt-enable-lpd=false --enable-dht=false --enable-dht6=false \
        --check-integrity=false --bt-tracker-interval="${HPC_FETCH_TRACKER_S:-15}" --bt-max-peers="${HPC_FETCH_PEERS:-20}" \
        --bt-request-peer-speed-limit=100M --summary-interval=0 --console-log-level=error \
        --on-bt-download-complete="$p2p/.on-complete" \
        ${HPC_FETCH_ARIA2_OPTS:-} "$tfile" >&2 &
    apid=$!
    got=
    last=0
    quiet=0
    # Every POLL seconds (at most the stall time; a node's own CPU is spared the checks in between)
    [ "$poll_s" -ge 1 ] || poll_s=1
    [ "$poll_s" -le "$stall_s" ] || poll_s=$stall_s
    while kill -0 "$apid" 2>/dev/null && [ ! -e "$p2p/.complete" ]; do
        sleep "$poll_s" &
        echo $! >"$p2p/.wait"
        [ -e "$p2p/.complete" ] || wait $!
        : >"$p2p/.wait"
        [ -e "$p2p/.complete" ] && break
        swarm_file
        held_kib "${got:-/nonexistent}"
        if [ "$held" -gt "$last" ]; then
            last=$held
            quiet=0
        else
            quiet=$((quiet + poll_s))
            if [ "$quiet" -ge "$stall_s" ]; then
                log "the swarm gave no byte for ${stall_s} s (${last} KiB of the image held): fetching over HTTP"
                break
            fi
        fi
    done
    rm -f "$tfile"
    swarm_file
    if [ -e "$p2p/.complete" ] && [ -n "$got" ] && ln -f "$got" "$part" 2>/dev/null; then
        if accept "the swarm"; then
            log "fetched sha256:$hex peer-to-peer"
            if kill -0 "$apid" 2>/dev/null; then
                echo "$apid" >"$out.seeder"
            fi
            exit 0
        fi
    fi
    kill "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null
    log "the swarm did not deliver the image: fetching over HTTP"
    rm -rf "$p2p" "$part"
    return 1
}

# The size, from the first server that answers; the room is checked once.
size=
for s in $list; do
    size=$(remote_size "${s}sha256/$hex")
    [ -n "$size" ] && break
done
if is_count "$size"; then
    check_room "$size"
else
    log "no server answered a HEAD request for sha256:$hex: memory not checked before the download"
fi

if [ -n "$torrent" ]; then
    fetch_p2p
fi

round=1
delay=$wait_s
while :; do
    for s in $list; do
        url="${s}sha256/$hex"
        # A complete file needs no range request (a server answers 416 to one): verify it as it is.
        if [ -f "$part" ] && is_count "$size" && [ "$(file_size "$part")" -ge "$size" ]; then
            accept "$s" && { log "fetched sha256:$hex"; exit 0; }
        fi
        if download "$url"; then
            accept "$s" && { log "fetched sha256:$hex from $s"; exit 0; }
        else
            log "$url failed (round $round of $rounds); trying the next server"
        fi
    done
    if [ "$round" -ge "$rounds" ]; then
        log "no server delivered sha256:$hex after $rounds rounds over: $list"
        rm -f "$part"
        exit 4
    fi
    sleep "$delay"
    [ "$delay" -lt $((wait_s * 8)) ] && delay=$((delay * 2))
    round=$((round + 1))
done
