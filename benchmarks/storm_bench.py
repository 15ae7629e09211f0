# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot-storm benchmark: N simulated nodes fetch the image at once from real nginx boot servers.

Every node is a network namespace behind its own ``tc``-limited link (htb, both directions) on one
bridge; every boot server (nginx from Debian) is a namespace of its own with its own uplink limit.
Each node runs the first stage's fetch, the very script the initramfs runs (``hpc-fetch`` of the
dracut module hpcfetch), then hashes what it got (the benchmark's own check, not the script's word)
and deletes it. Scenarios:

* ``k1``, ``k2``, ``k4``: k servers, node i tries server i mod k first, then the others. The wire's
  bound is N x image / (k x server rate): p100 must be within 1.2x of it.
* ``kill``: 4 servers, the first killed (SIGKILL: its connections are reset) at 30 % of the
  4-server bound; its nodes resume from their next server. 100 % must boot a verified image,
  p100 within 1.25x of the 3-server bound.
* ``switch``: 2 servers serve release A; nodes start spread over the storm, each reads its boot
  script (the per-image iPXE script: the only file a switch replaces), then fetches the kernel and
  the image it names. At 30 % release B is staged on both servers, then both scripts are switched
  (rename). Every node's kernel and image must be the pair its script named: 0 mixed or corrupt.
* ``cache``: one origin, an nginx cache per rack in front of it (proxy_cache_lock on); the nodes of
  a rack fetch from their cache, then the origin. The origin must send <= 1.1 copies per cache.
* ``p2p``: aria2c on every node, with hpc-fetch's own settings (hpc-fetch -t: the torrent is an artifact too;
  a node that has the image keeps seeding while the others fetch), opentracker and a seeder on the one server:
  libtorrent in super-seeding mode (storm_seeder.py: each piece leaves the server about once) at a node's rate,
  stopping once every piece is held by 2 nodes; a node the swarm gives no byte for 30 s falls back to HTTP from
  the same server. p100 <= 0.5x the one-server HTTP bound, the server sends <= 3 copies (seeder, tracker and
  HTTP: the link's transmit counter), 100 % complete.

Rates are scaled down so that the simulated wire, not the 2 shared cores, is the bottleneck and the
whole run takes minutes: a 2 MiB image, nodes at 4 Mbit/s, servers at 40 Mbit/s (the 1:10 of 100 Mbit/s
nodes and 1 Gbit/s servers, or of 1 GbE nodes and 10 GbE servers). The bounds and the goals are ratios,
N x image / (k x server rate), which stay the same when the image and the rates scale together (a 2 GiB
image at 40 Gbit/s servers has the same bound in units of image / rate); the absolute seconds do not
carry over. Bytes each server sent are its link's transmit counter (the wire, headers included) and
nginx's own log (payload; a killed server's last requests are not logged).

Simulation settings (they spare the 2 cores, they are not the first stage's): ``p2p`` runs at half the rates
(``--p2p-scale``: its bound doubles, the goals are ratios to it, and 200 aria2c need half the CPU per second of
the storm); its torrent has 32 pieces (``--piece-kib 64``: a node's messages grow with pieces x peers). The clock
starts when every node's process is up and waits on the start (spawning 200 processes is the host's time, not a
node's). Each scenario records where the host's CPU went (/proc: user, system, softirq, by command) and its load.

    python benchmarks/storm_bench.py [--nodes 200] [--image-mib 2] [--node-mbit 4] [--server-mbit 40]
                                     [--scenarios k1,k2,k4,kill,switch,cache,p2p] [--quick]
                                     [--plot docs/images/storm.svg] [--output benchmarks/results/storm.json]

``--quick``: 24 nodes, every scenario (a smoke run: the bounds are then close to one node's own time, the
ratios are not judged). Needs root (namespaces), nginx, aria2, opentracker, iptables, python3-libtorrent
(scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import comparisons

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / ".collections"))

from storm_support import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    ARTIFACT_DIR,
    FETCH_SCRIPT,
    Nginx,
    publish,
    sha256_file,
)

MIB = 1 << 20
SUBNET = "10.41"
SCENARIOS = ("k1", "k2", "k4", "kill", "switch", "cache", "p2p")
GOAL_K = 1.2
GOAL_KILL = 1.25
GOAL_CACHE_COPIES = 1.1
GOAL_P2P = 0.5
GOAL_P2P_COPIES = 3.0
BOOT_SCRIPT = "ipxe/images/storm.ipxe"  # the per-image boot script (the deploy's layout, docs/scale.md)
TRACKER_PORT = 6969
SYSTEM_PYTHON = "/usr/bin/python3"  # the seeder's: Debian's python3-libtorrent is for it
KERNEL_MIB = 1  # the "kernel" of the switch scenario: a second artifact named by the same script

# What each simulated node runs: say it is up, wait for the storm's start (a shared lock the benchmark holds), then
# (switch) read the boot script and take the hashes it names, fetch with hpc-fetch, hash what it got.
NODE_SCRIPT = r"""
set -u
: >"$READY"
flock -s "$LOCK" true
[ "$DELAY" = 0.000 ] || sleep "$DELAY"
start=$(date +%s.%N)
kernel=-
image=$IMAGE
if [ -n "$SCRIPT_URL" ]; then
    script=$(curl -fsS --retry 5 --retry-delay 1 --retry-connrefused "$SCRIPT_URL") || { echo "fail $start $(date +%s.%N) - - - -" >"$RESULT"; exit 0; }
    image=$(printf '%s\n' "$script" | sed -n 's/.*hpc\.image=\([0-9a-f]\{64\}\).*/\1/p' | head -n 1)
    kernel=$(printf '%s\n' "$script" | sed -n 's/^kernel [^ ]*\/sha256\/\([0-9a-f]\{64\}\).*/\1/p' | head -n 1)
    sh "$FETCH" -s "$SERVERS" -i "$kernel" -o "$OUT.kernel" -w 1 -c 3 -l 10 -r 20 2>>"$LOG" || true
fi
rc=0
sh "$FETCH" -s "$SERVERS" -i "$image" -o "$OUT" -w 1 -c 3 -l 10 -r 20 $EXTRA 2>>"$LOG" || rc=$?
end=$(date +%s.%N)
got=-
[ -f "$OUT" ] && got=$(sha256sum "$OUT" | cut -d' ' -f1)
gotk=-
[ -f "$OUT.kernel" ] && gotk=$(sha256sum "$OUT.kernel" | cut -d' ' -f1)
echo "$rc $start $end $image $got $kernel $gotk" >"$RESULT.tmp" && mv "$RESULT.tmp" "$RESULT"
# A node that fetched peer-to-peer keeps seeding (hpc-fetch left aria2c running) while it "boots":
# the benchmark ends the storm's seeders once every node has its result.
if [ -f "$OUT.seeder" ]; then
    pid=$(cat "$OUT.seeder")
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
fi
rm -rf "$OUT" "$OUT.kernel" "$OUT.part" "$OUT.p2p" "$OUT.torrent" "$OUT.seeder"
"""


def sh(*argv: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kwargs)


def batch(tool: list[str], lines: list[str]) -> None:
    """Many ``ip``/``tc`` commands in one process (``-batch``): hundreds of namespaces in seconds."""
    if not lines:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".batch", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    try:
        done = subprocess.run([*tool, "-batch", handle.name], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(tool)} -batch failed: {done.stderr.strip()[:2000]}")
    finally:
        os.unlink(handle.name)


@dataclass
class Host:
    name: str  # network namespace
    address: str
    port: str  # the bridge's side of its veth (in the switch namespace)
    mbit: float


@dataclass
class Net:
    """A bridge in a namespace of its own, and hosts in namespaces behind htb-limited veths."""

    tag: str
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{self.tag}sw"

    def create(self, specs: list[tuple[str, float]]) -> None:
        """``specs``: (host name, link rate in Mbit/s); addresses are assigned in order."""
        root = [f"netns add {self.switch}"] + [f"netns add {self.tag}{name}" for name, _rate in specs]
        inside: dict[str, list[str]] = {self.switch: ["link add br0 type bridge", "link set br0 up", "link set lo up"]}
        shaping: dict[str, list[str]] = {self.switch: []}
        for index, (name, mbit) in enumerate(specs):
            ns = f"{self.tag}{name}"
            host = Host(ns, f"{SUBNET}.{index // 250}.{index % 250 + 1}", f"p{self.tag}{index}", mbit)
            self.hosts[name] = host
            root.append(f"link add {host.port} netns {self.switch} type veth peer name eth0 netns {ns}")
            inside[ns] = [f"addr add {host.address}/16 dev eth0", "link set eth0 up", "link set lo up"]
            inside[self.switch] += [f"link set {host.port} master br0", f"link set {host.port} up"]
            rate = f"{mbit:g}mbit"
            for dev_ns, dev in ((ns, "eth0"), (self.switch, host.port)):
                shaping.setdefault(dev_ns, []).extend([
                    f"qdisc add dev {dev} root handle 1: htb default 1",
                    f"class add dev {dev} parent 1: classid 1:1 htb rate {rate} ceil {rate} quantum 60000"])
        batch(["ip"], root)
        for ns, lines in inside.items():
            batch(["ip", "-n", ns], lines)
        for ns, lines in shaping.items():
            batch(["tc", "-n", ns], lines)

    def destroy(self) -> None:
        for host in self.hosts.values():
            sh("ip", "netns", "del", host.name, check=False)
        sh("ip", "netns", "del", self.switch, check=False)
        self.hosts.clear()

    def tx_bytes(self, name: str) -> int:
        """Bytes the host put on its link (its eth0's transmit counter)."""
        out = sh("ip", "-n", self.hosts[name].name, "-s", "-j", "link", "show", "eth0").stdout
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


@dataclass
class Config:
    nodes: int
    image_mib: int
    node_mbit: float
    server_mbit: float
    seed_mbit: float  # the server's seeder's upload limit (peer-to-peer)
    piece_kib: int = 64  # the torrent's piece size
    seeder_stop_copies: int = 2  # the seeder stops once every piece is held by this many nodes (0: never)
    p2p_scale: float = 0.5  # the p2p scenario's rates, times the others' (a simulation setting)

    @property
    def image_bytes(self) -> int:
        return self.image_mib * MIB

    def bound(self, servers: int) -> float:
        """The wire's bound: N x image / (k x server rate), in seconds."""
        return self.nodes * self.image_bytes * 8 / (servers * self.server_mbit * 1e6)

    def node_seconds(self) -> float:
        """One node alone: image / node rate (no storm is faster than this)."""
        return self.image_bytes * 8 / (self.node_mbit * 1e6)


NEIGH_SYSCTL = Path("/proc/sys/net/ipv4/neigh/default")


@contextlib.contextmanager
def neighbour_room(nodes: int) -> Iterator[None]:
    """Room in the kernel's ARP table for the storm, restored afterwards. The table is one for every network
    namespace (its limits are the host's: above gc_thresh2, 512 by default, entries are collected, above gc_thresh3,
    1024, refused): every scenario needs an entry per node and server on both sides, a failover a second one, and
    peer-to-peer, where every node talks to its peers (hpc-fetch's HPC_FETCH_PEERS, 20), one per node and peer; an
    overflowing table drops the nodes' connections ("neighbor table overflow!" in the kernel log; nodes time out
    connecting even to the server)."""
    wanted = {"gc_thresh1": nodes * 32, "gc_thresh2": nodes * 64, "gc_thresh3": nodes * 128}
    before = {}
    try:
        for name, value in wanted.items():
            path = NEIGH_SYSCTL / name
            before[name] = path.read_text().strip()
            if int(before[name]) < value:
                path.write_text(f"{value}\n")
        yield
    finally:
        for name, value in reversed(list(before.items())):
            with contextlib.suppress(OSError):
                (NEIGH_SYSCTL / name).write_text(f"{value}\n")


class CpuProfile:
    """Where the host's CPU went during a storm: /proc/stat's split (user, system, softirq: the veths, the bridge and
    htb run there, idle) and the CPU seconds of the processes by command, sampled every second (a process that lives
    less than a second - sh, du, sleep, curl of a node's script - is not seen by name: its share is in ``unnamed_s``,
    user + system time no sampled process accounts for). The host's, so other work on it counts too: the load average
    is recorded with it."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.hz = os.sysconf("SC_CLK_TCK")
        self.seen: dict[str, tuple[str, int]] = {}
        self.by_command: dict[str, int] = {}
        self.load_max = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.stat0: list[int] = []
        self.began = 0.0

    @staticmethod
    def _stat() -> list[int]:
        with open("/proc/stat", encoding="ascii") as handle:
            return [int(v) for v in handle.readline().split()[1:]]

    def _sample(self, baseline: bool = False) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as handle:
                    raw = handle.read()
            except OSError:
                continue
            comm = raw[raw.index("(") + 1:raw.rindex(")")]
            comm = "kworker" if comm.startswith("kworker/") else comm  # a kworker's name changes with its work
            fields = raw[raw.rindex(")") + 2:].split()
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
            key = f"{entry.name}@{fields[19]}"  # pid and start time: a pid used again is another process
            last = self.seen.get(key)
            before = last[1] if last else (ticks if baseline else 0)
            self.seen[key] = (comm, ticks)
            if ticks > before:
                self.by_command[comm] = self.by_command.get(comm, 0) + ticks - before
        with open("/proc/loadavg", encoding="ascii") as handle:
            self.load_max = max(self.load_max, float(handle.read().split()[0]))

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self._sample()

    def begin(self) -> "CpuProfile":
        self.stat0, self.began = self._stat(), time.monotonic()
        self._sample(baseline=True)
        self.thread.start()
        return self

    def end(self) -> dict[str, Any]:
        self.stop.set()
        self.thread.join()
        self._sample()
        delta = [b - a for a, b in zip(self.stat0, self._stat())]
        user, nice, system, idle, iowait, irq, softirq = (v / self.hz for v in delta[:7])
        named = sum(self.by_command.values()) / self.hz
        top = sorted(self.by_command.items(), key=lambda kv: -kv[1])[:8]
        return {"wall_s": round(time.monotonic() - self.began, 1), "cpus": os.cpu_count(),
                "user_s": round(user + nice, 1), "system_s": round(system, 1), "softirq_s": round(softirq + irq, 1),
                "idle_s": round(idle + iowait, 1), "load_max": self.load_max,
                "by_command_s": {comm: round(t / self.hz, 1) for comm, t in top},
                "unnamed_s": round(max(0.0, user + nice + system - named), 1)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def make_image(path: Path, mib: int) -> str:
    """An incompressible file of ``mib`` MiB (random: every call another one); its sha256."""
    with open(path, "wb") as handle:
        for _block in range(mib):
            handle.write(os.urandom(MIB))
    return sha256_file(str(path))


class Storm:
    """One scenario's world: servers (nginx), nodes, and the run."""

    def __init__(self, cfg: Config, work: Path, name: str, tag: str) -> None:
        self.cfg, self.work, self.name, self.tag = cfg, work / name, name, tag
        self.work.mkdir(parents=True)
        self.net = Net(tag)
        self.servers: dict[str, Nginx] = {}
        self.extra_procs: list[subprocess.Popen] = []
        self.cpu: dict[str, Any] = {}

    def url(self, host: str) -> str:
        return f"http://{self.net.hosts[host].address}"

    def serve(self, host: str, root: Path, upstream: Optional[str] = None) -> Nginx:
        server = Nginx(self.work / f"nginx-{host}", root, f"{self.net.hosts[host].address}:80",
                       self.net.hosts[host].name, upstream).start()
        self.servers[host] = server
        return server

    def spawn(self, host: str, argv: list[str], log: Path) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", self.net.hosts[host].name, *argv],
                                stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                                start_new_session=True)
        self.extra_procs.append(proc)
        return proc

    def run_nodes(self, orders: list[list[str]], image: str, delays: Optional[list[float]] = None,
                  script_url: Optional[list[str]] = None, extra: str = "",
                  events: Optional[list[tuple[float, Any]]] = None,
                  watch: Optional[Callable[[float], None]] = None) -> list[dict[str, Any]]:
        """Start every node's first stage at once (they wait on a lock), run ``events`` (seconds after
        the start, callable) and ``watch`` (in a thread of its own from the start, given the start's time), and
        collect each node's result."""
        lock = self.work / "start.lock"
        lock.touch()
        out_dir = self.work / "nodes"
        out_dir.mkdir()
        procs = []
        with open(lock, "rb") as held:
            import fcntl  # pylint: disable=import-outside-toplevel

            fcntl.flock(held, fcntl.LOCK_EX)
            for index, order in enumerate(orders):
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LOCK": str(lock),
                       "DELAY": f"{(delays or [0.0] * len(orders))[index]:.3f}",
                       "IMAGE": image, "SERVERS": ",".join(order), "FETCH": str(FETCH_SCRIPT),
                       "OUT": str(out_dir / f"n{index}.img"), "LOG": str(out_dir / f"n{index}.log"),
                       "RESULT": str(out_dir / f"n{index}.result"), "EXTRA": extra,
                       "READY": str(out_dir / f"n{index}.ready"),
                       "SCRIPT_URL": script_url[index] if script_url else ""}
                # The first stage's own settings (hpc-fetch's defaults); HPC_FETCH_* from the caller's environment
                # only to try other values by hand.
                env.update({k: v for k, v in os.environ.items() if k.startswith("HPC_FETCH_")})
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", self.net.hosts[f"n{index}"].name, "sh", "-c", NODE_SCRIPT],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            # The clock starts when every node's process is up and waits on the lock (the common release): spawning
            # hundreds of processes on the benchmark host's cores is the simulation's cost, not a node's boot time.
            ready = [out_dir / f"n{index}.ready" for index in range(len(orders))]
            up_by = time.monotonic() + 120
            while time.monotonic() < up_by and not all(path.exists() for path in ready):
                time.sleep(0.1)
            time.sleep(0.5)  # the last ones reach their flock
            start = time.time()
            profile = CpuProfile().begin()
            fcntl.flock(held, fcntl.LOCK_UN)
        timers = []
        if watch:
            threading.Thread(target=watch, args=(start,), daemon=True).start()
        for at, action in events or []:
            timer = threading.Timer(at, action)
            timer.start()
            timers.append(timer)
        deadline = time.monotonic() + 20 * max(self.cfg.bound(1), 60)
        results_at = [out_dir / f"n{index}.result" for index in range(len(orders))]
        while time.monotonic() < deadline and not all(path.exists() for path in results_at):
            time.sleep(0.5)
        self.cpu = profile.end()
        for proc in procs:  # what still runs is a node seeding after its fetch (or one past the deadline)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
            proc.wait()
        for timer in timers:
            timer.cancel()
        results = []
        for index in range(len(orders)):
            path = out_dir / f"n{index}.result"
            fields = path.read_text().split() if path.exists() else []
            if len(fields) != 7:
                results.append({"node": index, "ok": False, "rc": None, "seconds": None})
                continue
            rc, t0, t1, named, got, kernel, got_kernel = fields
            results.append({"node": index, "rc": int(rc) if rc.isdigit() else None, "start": float(t0) - start,
                            "seconds": float(t1) - start, "named": named, "got": got, "kernel_named": kernel,
                            "kernel_got": got_kernel,
                            "ok": rc == "0" and named == got and kernel == got_kernel})
        return results

    def close(self) -> None:
        for server in self.servers.values():
            server.kill()
        for proc in self.extra_procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
        self.net.destroy()


def summary(cfg: Config, results: list[dict[str, Any]], storm: Storm, server_hosts: list[str],
            images: set[str]) -> dict[str, Any]:
    done = [r["seconds"] for r in results if r["ok"]]
    wire = {h: storm.net.tx_bytes(h) for h in server_hosts}
    http = {h: storm.servers[h].bytes_sent(f"/{ARTIFACT_DIR}/") if h in storm.servers else 0 for h in server_hosts}
    return {
        "nodes": len(results), "succeeded": sum(1 for r in results if r["rc"] == 0),
        "verified": sum(1 for r in results if r["ok"] and r.get("got") in images),
        "mixed_or_corrupt": sum(1 for r in results if r["rc"] == 0 and not r["ok"]),
        "p50_s": round(percentile(done, 50), 2), "p95_s": round(percentile(done, 95), 2),
        "p100_s": round(max(done), 2) if done else None,
        "server_wire_bytes": wire, "server_http_bytes": http,
        "server_copies": {h: round(b / cfg.image_bytes, 2) for h, b in wire.items()},
        "seconds": sorted(round(s, 3) for s in done),
        # when each node's script ran after the release (its own clock reading): the simulation's start-up spread
        "started_p100_s": round(max((r["start"] for r in results if r.get("start") is not None), default=0), 2),
        "cpu": storm.cpu,
    }


def orders_for(nodes: int, servers: list[str], storm: Storm) -> list[list[str]]:
    """Node i: server i mod k first (its own), then the others, rotated by i div k so that the nodes of a
    server that dies spread over the rest instead of all falling onto the next one."""
    urls = [storm.url(s) for s in servers]
    k = len(urls)
    orders = []
    for i in range(nodes):
        own, others = urls[i % k], urls[i % k + 1:] + urls[:i % k]
        turn = (i // k) % len(others) if others else 0
        orders.append([own, *others[turn:], *others[:turn]])
    return orders


@contextlib.contextmanager
def world(cfg: Config, work: Path, name: str, servers: list[tuple[str, float]]) -> Iterator[Storm]:
    storm = Storm(cfg, work, name, f"hs{os.getpid() % 1000}{name[:2]}")
    try:
        with neighbour_room(cfg.nodes):
            storm.net.create(servers + [(f"n{i}", cfg.node_mbit) for i in range(cfg.nodes)])
            yield storm
    finally:
        storm.close()


def scenario_k(cfg: Config, work: Path, image: Path, digest: str, k: int) -> dict[str, Any]:
    hosts = [f"s{i}" for i in range(k)]
    with world(cfg, work, f"k{k}", [(h, cfg.server_mbit) for h in hosts]) as storm:
        root = storm.work / "root"
        publish(root, image)
        for host in hosts:
            storm.serve(host, root)
        results = storm.run_nodes(orders_for(cfg.nodes, hosts, storm), digest)
        out = summary(cfg, results, storm, hosts, {digest})
    out.update(servers=k, bound_s=round(cfg.bound(k), 2))
    out["ratio_to_bound"] = round(out["p100_s"] / out["bound_s"], 3) if out["p100_s"] else None
    return out


def scenario_kill(cfg: Config, work: Path, image: Path, digest: str, k: int = 4) -> dict[str, Any]:
    hosts = [f"s{i}" for i in range(k)]
    with world(cfg, work, "kill", [(h, cfg.server_mbit) for h in hosts]) as storm:
        root = storm.work / "root"
        publish(root, image)
        for host in hosts:
            storm.serve(host, root)
        at = 0.3 * cfg.bound(k)
        results = storm.run_nodes(orders_for(cfg.nodes, hosts, storm), digest,
                                  events=[(at, storm.servers["s0"].kill)])
        out = summary(cfg, results, storm, hosts, {digest})
    out.update(servers=k, killed="s0", killed_at_s=round(at, 2), bound_s=round(cfg.bound(k - 1), 2))
    out["ratio_to_bound"] = round(out["p100_s"] / out["bound_s"], 3) if out["p100_s"] else None
    return out


def boot_script(kernel: str, image: str, servers: list[str]) -> str:
    """A per-image boot script in the deploy's format, reduced to what a node reads from it."""
    return (f"#!ipxe\n# hpc.stateless release storm kernel={kernel} image={image}\n"
            f"kernel {servers[0]}/{ARTIFACT_DIR}/{kernel} root=hpcfetch hpc.servers={','.join(servers)} "
            f"hpc.image={image}\nboot\n")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def scenario_switch(cfg: Config, work: Path, image: Path, digest: str) -> dict[str, Any]:
    hosts = ["s0", "s1"]
    with world(cfg, work, "switch", [(h, cfg.server_mbit) for h in hosts]) as storm:
        release_b = storm.work / "image-b"
        digest_b = make_image(release_b, cfg.image_mib)
        kernels = {}
        for name in ("a", "b"):
            path = storm.work / f"kernel-{name}"
            kernels[name] = make_image(path, KERNEL_MIB)
        roots = {h: storm.work / f"root-{h}" for h in hosts}
        urls = [storm.url(h) for h in hosts]
        for host, root in roots.items():
            publish(root, image)
            publish(root, storm.work / "kernel-a")
            write_atomic(root / BOOT_SCRIPT, boot_script(kernels["a"], digest, urls))
            storm.serve(host, root)

        def switch() -> None:
            for root in roots.values():  # stage on every server first ...
                publish(root, release_b)
                publish(root, storm.work / "kernel-b")
            for root in roots.values():  # ... then switch them all
                write_atomic(root / BOOT_SCRIPT, boot_script(kernels["b"], digest_b, urls))

        at = 0.3 * cfg.bound(2)
        span = 0.6 * cfg.bound(2)
        delays = [span * i / max(1, cfg.nodes - 1) for i in range(cfg.nodes)]
        orders = orders_for(cfg.nodes, hosts, storm)
        scripts = [f"{order[0]}/{BOOT_SCRIPT}" for order in orders]
        results = storm.run_nodes(orders, digest, delays=delays, script_url=scripts, events=[(at, switch)])
        out = summary(cfg, results, storm, hosts, {digest, digest_b})
        pairs = {(kernels["a"], digest), (kernels["b"], digest_b)}
        out["mixed_or_corrupt"] = sum(1 for r in results if r["rc"] == 0 and
                                      (not r["ok"] or (r["kernel_got"], r["got"]) not in pairs))
        out["booted_old"] = sum(1 for r in results if r["ok"] and r["got"] == digest)
        out["booted_new"] = sum(1 for r in results if r["ok"] and r["got"] == digest_b)
        # Time to boot from a node's own start (they start spread over the storm).
        out["per_node_s_p100"] = round(max((r["seconds"] - r["start"] for r in results if r["ok"]), default=0), 2)
    out.update(servers=2, switched_at_s=round(at, 2), bound_s=round(cfg.bound(2), 2))
    return out


def scenario_cache(cfg: Config, work: Path, image: Path, digest: str, racks: int = 4) -> dict[str, Any]:
    caches = [f"c{i}" for i in range(racks)]
    with world(cfg, work, "cache", [("origin", cfg.server_mbit)] + [(c, cfg.server_mbit) for c in caches]) as storm:
        root = storm.work / "root"
        publish(root, image)
        storm.serve("origin", root)
        empty = storm.work / "empty"
        empty.mkdir()
        for cache in caches:
            storm.serve(cache, empty, upstream=storm.url("origin"))
        orders = [[storm.url(caches[i % racks]), storm.url("origin")] for i in range(cfg.nodes)]
        results = storm.run_nodes(orders, digest)
        out = summary(cfg, results, storm, ["origin", *caches], {digest})
        origin_http = storm.servers["origin"].bytes_sent(f"/{ARTIFACT_DIR}/")
    out.update(caches=racks, bound_s=round(cfg.bound(racks), 2),
               origin_copies_per_cache=round(origin_http / cfg.image_bytes / racks, 3),
               origin_wire_copies_per_cache=round(out["server_wire_bytes"]["origin"] / cfg.image_bytes / racks, 3))
    out["ratio_to_bound"] = round(out["p100_s"] / out["bound_s"], 3) if out["p100_s"] else None
    return out


def bencode(value: Any) -> bytes:
    if isinstance(value, int):
        return b"i%de" % value
    if isinstance(value, bytes):
        return b"%d:%s" % (len(value), value)
    if isinstance(value, str):
        return bencode(value.encode())
    if isinstance(value, list):
        return b"l" + b"".join(bencode(v) for v in value) + b"e"
    if isinstance(value, dict):
        return b"d" + b"".join(bencode(k) + bencode(value[k]) for k in sorted(value)) + b"e"
    raise TypeError(value)


def make_torrent(image: Path, announce: str, piece_kib: int = 64) -> tuple[bytes, str]:
    """A single-file .torrent of ``image`` in pieces of ``piece_kib`` KiB, and its info hash (hex: Debian's opentracker
    serves a whitelist)."""
    import hashlib  # pylint: disable=import-outside-toplevel

    piece = piece_kib << 10
    pieces = b""
    with open(image, "rb") as handle:
        for block in iter(lambda: handle.read(piece), b""):
            pieces += hashlib.sha1(block, usedforsecurity=False).digest()
    info = {"length": image.stat().st_size, "name": image.name, "piece length": piece, "pieces": pieces}
    return bencode({"announce": announce, "info": info}), hashlib.sha1(bencode(info), usedforsecurity=False).hexdigest()


class ServerTraffic:
    """Bytes the server's IP layer sent, by what sent them: nginx (HTTP, port 80), the tracker, and the rest (the
    seeder's peer connections); iptables counters in the server's namespace (IP packets: the link's own header is on
    the wire counter only)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        for port in (80, TRACKER_PORT):
            sh("ip", "netns", "exec", namespace, "iptables", "-A", "OUTPUT", "-p", "tcp", "--sport", str(port))
        sh("ip", "netns", "exec", namespace, "iptables", "-A", "OUTPUT")

    def bytes(self) -> dict[str, int]:
        out = sh("ip", "netns", "exec", self.namespace, "iptables", "-L", "OUTPUT", "-v", "-x", "-n").stdout
        counts = [int(line.split()[1]) for line in out.splitlines()[2:] if line.strip()]
        http, tracker, everything = counts[0], counts[1], counts[2]
        return {"http": http, "tracker": tracker, "seeder": everything - http - tracker}


def scenario_p2p(cfg: Config, work: Path, image: Path, digest: str) -> dict[str, Any]:
    # Every rate times --p2p-scale (a simulation setting): the bound and the goals stay the same in units of
    # image / rate, and 200 aria2c need that much less of the host's CPU per second of the storm.
    cfg = replace(cfg, node_mbit=cfg.node_mbit * cfg.p2p_scale, server_mbit=cfg.server_mbit * cfg.p2p_scale,
                  seed_mbit=cfg.seed_mbit * cfg.p2p_scale)
    with world(cfg, work, "p2p", [("s0", cfg.server_mbit)]) as storm:
        root = storm.work / "root"
        publish(root, image)
        address = storm.net.hosts["s0"].address
        torrent = storm.work / "image.torrent"
        meta, info_hash = make_torrent(image, f"http://{address}:{TRACKER_PORT}/announce", cfg.piece_kib)
        torrent.write_bytes(meta)
        torrent_hex = publish(root, torrent)
        storm.serve("s0", root)
        traffic = ServerTraffic(storm.net.hosts["s0"].name)
        allowed = storm.work / "tracker-whitelist"
        allowed.write_text(info_hash + "\n")
        allowed.chmod(0o644)
        for directory in (storm.work.parent, storm.work):
            directory.chmod(0o755)  # opentracker reads its whitelist as nobody
        storm.spawn("s0", ["opentracker", "-i", address, "-p", str(TRACKER_PORT), "-P", str(TRACKER_PORT),
                           "-d", "/", "-w", str(allowed)], storm.work / "tracker.log")
        seed_dir = storm.work / "seed"
        seed_dir.mkdir()
        os.link(image, seed_dir / image.name)
        limit = int(cfg.seed_mbit * 1e6 / 8)
        # The server's seeder: libtorrent in super-seeding mode (benchmarks/storm_seeder.py: each piece leaves the
        # server about once), at its upload limit, stopping once every piece is held by --seeder-stop-copies nodes.
        # aria2c has no super-seeding: as a plain seed it sent the same pieces again and again (7 copies before 3
        # nodes were done, at a node's rate), and capping its upload (--seed-ratio) left pieces no node had.
        seeder = storm.spawn("s0", [SYSTEM_PYTHON, str(Path(__file__).with_name("storm_seeder.py")),
                                    "--torrent", str(torrent), "--dir", str(seed_dir), "--listen", f"{address}:6881",
                                    "--upload-bytes", str(limit), "--stop-copies", str(cfg.seeder_stop_copies)],
                             storm.work / "seeder.log")
        time.sleep(2)
        stopped: dict[str, float] = {}

        def seeder_stop(began: float) -> None:
            seeder.wait()
            stopped["at"] = time.time() - began

        # hpc-fetch's own aria2c settings (the first stage's); -l: the swarm may give no byte for 30 s before a
        # node falls back to HTTP
        results = storm.run_nodes(orders_for(cfg.nodes, ["s0"], storm), digest, extra=f"-t {torrent_hex} -l 30",
                                  watch=seeder_stop)
        out = summary(cfg, results, storm, ["s0"], {digest})
        sent = traffic.bytes()
        out["server_ip_copies"] = {what: round(b / cfg.image_bytes, 2) for what, b in sent.items()}
        out["seeder_stopped_at_s"] = round(stopped["at"], 2) if "at" in stopped else None
        out["seeder_log"] = (storm.work / "seeder.log").read_text(errors="replace")[-500:]
        logs = "".join(p.read_text(errors="replace") for p in (storm.work / "nodes").glob("*.log"))
        out["fell_back_to_http"] = logs.count("fetching over HTTP")
    out.update(servers=1, bound_s=round(cfg.bound(1), 2), node_mbit=cfg.node_mbit, server_mbit=cfg.server_mbit,
               seeder_upload_mbit=cfg.seed_mbit, piece_kib=cfg.piece_kib,
               seeder_stop_copies=cfg.seeder_stop_copies)
    out["ratio_to_bound"] = round(out["p100_s"] / out["bound_s"], 3) if out["p100_s"] else None
    return out


def rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparisons block: each goal of the issue as A (the bound, x the goal) against B (measured p100)."""
    out = []
    sc = data["scenarios"]
    n = data["config"]["nodes"]
    # A quick run's bounds are close to one node's own time: its time ratios are shown, not judged.
    timed = None if data["config"].get("quick") else 1.0
    for key in ("k1", "k2", "k4"):
        if key in sc:
            s = sc[key]
            out.append(comparisons.comparison(
                f"boot storm, {n} nodes, {s['servers']} server(s): p100 against the wire's bound", f"{GOAL_K}x bound",
                GOAL_K * s["bound_s"], "p100", s["p100_s"], f"p100 <= {GOAL_K}x N x image / (k x rate)", timed,
                also={"100 % verified": s["verified"] == n}, note=f"bound {s['bound_s']} s, p50 {s['p50_s']} s"))
    if "kill" in sc:
        s = sc["kill"]
        out.append(comparisons.comparison(
            f"boot storm, {n} nodes, 4 servers, one killed at {s['killed_at_s']} s", f"{GOAL_KILL}x 3-server bound",
            GOAL_KILL * s["bound_s"], "p100", s["p100_s"], f"p100 <= {GOAL_KILL}x bound(k-1), 100 % verified", timed,
            also={"100 % verified": s["verified"] == n}))
    if "switch" in sc:
        s = sc["switch"]
        out.append(comparisons.comparison(
            f"boot storm, {n} nodes, a switch at {s['switched_at_s']} s", "nodes", n, "verified, not mixed",
            s["verified"], "0 mixed or corrupt images", 1.0, higher_is_better=True,
            also={"0 mixed or corrupt": s["mixed_or_corrupt"] == 0},
            note=f"old {s['booted_old']}, new {s['booted_new']}"))
    if "cache" in sc:
        s = sc["cache"]
        out.append(comparisons.comparison(
            f"boot storm, {n} nodes, {s['caches']} rack caches (proxy_cache_lock)", "goal copies per cache",
            GOAL_CACHE_COPIES, "origin's copies per cache", s["origin_copies_per_cache"],
            f"origin sends <= {GOAL_CACHE_COPIES} copies per cache", 1.0,
            also={"100 % verified": s["verified"] == n}, unit="copies"))
    if "p2p" in sc:
        s = sc["p2p"]
        copies = s["server_wire_bytes"]["s0"] / (data["config"]["image_mib"] * MIB)
        out.append(comparisons.comparison(
            f"boot storm, {n} nodes, peer-to-peer (aria2c + opentracker, HTTP fallback)",
            f"{GOAL_P2P}x one-server HTTP bound", GOAL_P2P * s["bound_s"], "p100", s["p100_s"],
            f"p100 <= {GOAL_P2P}x bound(1), server <= {GOAL_P2P_COPIES:g} copies, 100 % complete", timed,
            also={"100 % verified": s["verified"] == n, f"server <= {GOAL_P2P_COPIES:g} copies": copies <= GOAL_P2P_COPIES},
            note=f"server sent {copies:.2f} copies; {s['fell_back_to_http']} nodes fell back to HTTP"))
    return out


def table(data: dict[str, Any]) -> str:
    lines = ["| scenario | servers | bound s | p50 s | p95 s | p100 s | p100/bound | booted | verified | "
             "mixed/corrupt | copies each server sent (wire) |", "|---" * 11 + "|"]
    for name, s in data["scenarios"].items():
        copies = ", ".join(f"{h} {c:g}" for h, c in s["server_copies"].items())
        ratio = s.get("ratio_to_bound")
        lines.append(f"| {name} | {s.get('servers', s.get('caches', '-'))} | {s['bound_s']} | {s['p50_s']} | "
                     f"{s['p95_s']} | {s['p100_s']} | {ratio if ratio is not None else '-'} | "
                     f"{s['succeeded']}/{s['nodes']} | {s['verified']} | {s['mixed_or_corrupt']} | {copies} |")
    return "\n".join(lines)


COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def plot(data: dict[str, Any], path: Path) -> None:
    """SVG: nodes with a verified image over time, one step line per scenario, the wire's bound dotted."""
    width, height, left, bottom, top, right = 760, 420, 60, 50, 40, 190
    scenarios = data["scenarios"]
    horizon = max([max(s["seconds"], default=0) for s in scenarios.values()] +
                  [s["bound_s"] for s in scenarios.values()]) * 1.05 or 1
    nodes = data["config"]["nodes"]
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(t: float) -> float:
        return left + plot_w * t / horizon

    def y(n: float) -> float:
        return top + plot_h * (1 - n / nodes)

    cfg = data["config"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="20" font-size="13">boot storm: {nodes} nodes, {cfg["image_mib"]} MiB image, nodes '
             f'{cfg["node_mbit"]:g} Mbit/s, servers {cfg["server_mbit"]:g} Mbit/s'
             f'{" (p2p at %gx)" % cfg["p2p_scale"] if "p2p" in scenarios and "p2p_scale" in cfg else ""}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>']
    step = next(v for v in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600) if horizon / v <= 10)
    for tick in range(0, int(horizon) + 1, step):
        parts.append(f'<text x="{x(tick):.1f}" y="{top + plot_h + 15}" text-anchor="middle">{tick}</text>')
    for frac in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{left - 6}" y="{y(nodes * frac) + 4:.1f}" text-anchor="end">{round(nodes * frac)}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 12}" text-anchor="middle">seconds after the storm\'s '
                 'start (dotted: the wire\'s bound of the scenario)</text>')
    parts.append(f'<text x="16" y="{top + plot_h / 2}" transform="rotate(-90 16 {top + plot_h / 2})" '
                 'text-anchor="middle">nodes with a verified image</text>')
    for index, (name, s) in enumerate(scenarios.items()):
        colour = COLOURS[index % len(COLOURS)]
        points = [f"{x(0):.1f},{y(0):.1f}"]
        for count, t in enumerate(s["seconds"], start=1):
            points += [f"{x(t):.1f},{y(count - 1):.1f}", f"{x(t):.1f},{y(count):.1f}"]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(points)}"/>')
        if name in ("k1", "k2", "k4", "kill", "cache"):
            parts.append(f'<line x1="{x(s["bound_s"]):.1f}" y1="{top}" x2="{x(s["bound_s"]):.1f}" '
                         f'y2="{top + plot_h}" stroke="{colour}" stroke-dasharray="2,3"/>')
        legend_y = top + 14 * index
        parts.append(f'<line x1="{width - right + 12}" y1="{legend_y}" x2="{width - right + 32}" y2="{legend_y}" '
                     f'stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{width - right + 38}" y="{legend_y + 4}">{name}: p100 {s["p100_s"]} s, '
                     f'bound {s["bound_s"]} s</text>')
    parts.append("</svg>\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--image-mib", type=int, default=2)
    parser.add_argument("--node-mbit", type=float, default=4.0)
    parser.add_argument("--server-mbit", type=float, default=40.0)
    parser.add_argument("--seed-mbit", type=float, help="upload limit of the server's seeder (default: node rate)")
    parser.add_argument("--p2p-scale", type=float, default=0.5,
                        help="the p2p scenario's rates (node, server, seeder) are the others' times this")
    parser.add_argument("--piece-kib", type=int, default=64,
                        help="the p2p torrent's piece size (default 64: 32 pieces of the 2 MiB image)")
    parser.add_argument("--seeder-stop-copies", type=int, default=2,
                        help="the server's seeder stops once every piece is held by this many nodes (0: never)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--quick", action="store_true", help="24 nodes (a smoke run)")
    parser.add_argument("--report-only", action="store_true", help="only redraw the table and plot from --output")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs of every node)")
    parser.add_argument("--plot", type=Path, help="write the plot (SVG or PNG) here")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "storm.json")
    args = parser.parse_args()
    if args.report_only:
        data = json.loads(args.output.read_text())
        if args.plot:
            plot(data, args.plot)
        print(table(data))
        return 0
    if args.quick:
        args.nodes = 24
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"--scenarios: unknown {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    missing = [t for t in ("nginx", "curl", "tc", "flock") + (("aria2c", "opentracker", "iptables") if "p2p" in names else ())
               if shutil.which(t) is None]
    if "p2p" in names and subprocess.run([SYSTEM_PYTHON, "-c", "import libtorrent"], capture_output=True,
                                         check=False).returncode != 0:
        missing.append("python3-libtorrent")
    if missing or os.geteuid() != 0:
        print(f"needs root and {', '.join(missing) or 'nothing else'} (scripts/setup.sh)", file=sys.stderr)
        return 2
    cfg = Config(args.nodes, args.image_mib, args.node_mbit, args.server_mbit, args.seed_mbit or args.node_mbit,
                 args.piece_kib, args.seeder_stop_copies, p2p_scale=args.p2p_scale)
    work = Path(tempfile.mkdtemp(prefix="storm-", dir=REPO / "build" if (REPO / "build").is_dir() else None))
    data: dict[str, Any] = {"config": {"nodes": cfg.nodes, "image_mib": cfg.image_mib, "node_mbit": cfg.node_mbit,
                                       "server_mbit": cfg.server_mbit, "seed_mbit": cfg.seed_mbit, "quick": args.quick,
                                       "piece_kib": cfg.piece_kib, "seeder_stop_copies": cfg.seeder_stop_copies,
                                       "p2p_scale": cfg.p2p_scale,
                                       "node_alone_s": round(cfg.node_seconds(), 2)},
                            "scenarios": {}, "host": {"cpus": os.cpu_count()}}
    began = time.monotonic()
    try:
        image = work / "image.squashfs"
        digest = make_image(image, cfg.image_mib)
        runners = {"k1": lambda: scenario_k(cfg, work, image, digest, 1),
                   "k2": lambda: scenario_k(cfg, work, image, digest, 2),
                   "k4": lambda: scenario_k(cfg, work, image, digest, 4),
                   "kill": lambda: scenario_kill(cfg, work, image, digest),
                   "switch": lambda: scenario_switch(cfg, work, image, digest),
                   "cache": lambda: scenario_cache(cfg, work, image, digest),
                   "p2p": lambda: scenario_p2p(cfg, work, image, digest)}
        for name in names:
            t0 = time.monotonic()
            print(f"[storm] {name}: {cfg.nodes} nodes ...", flush=True)
            data["scenarios"][name] = runners[name]()
            data["scenarios"][name]["wall_s"] = round(time.monotonic() - t0, 1)
            s = data["scenarios"][name]
            print(f"[storm] {name}: p50 {s['p50_s']} s, p100 {s['p100_s']} s (bound {s['bound_s']} s), "
                  f"verified {s['verified']}/{s['nodes']}, copies {s['server_copies']} ({s['wall_s']} s)", flush=True)
            print(f"[storm] {name}: cpu {json.dumps(s['cpu'])}", flush=True)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    data["wall_s"] = round(time.monotonic() - began, 1)
    data["comparisons"] = rows(data)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    if args.plot:
        plot(data, args.plot)
    print(table(data))
    print("\n" + comparisons.text_table(data["comparisons"]))
    print(f"\nJSON: {args.output}")
    return 0 if all(row["met"] is not False for row in data["comparisons"]) else 1


if __name__ == "__main__":
    sys.exit(main())
