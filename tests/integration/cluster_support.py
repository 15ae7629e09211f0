"""A test cluster of booted images: a Slurm controller and compute nodes, each a systemd-nspawn
container booted from what a test boot tree serves, on a private network.

API (stable; the cluster and rollout tests and the rollout benchmark use it)
---------------------------------------------------------------------------
Fixture ``cluster`` (session scope, in tests/integration/conftest.py): a running :class:`Cluster`
with the controller ``slurmctl`` and compute nodes ``node001``, ``node002``; version ``A`` of both
images is deployed and booted. Stopped, with everything it made, at the end of the session.

``build_cluster_images()``       build the cluster layers, pack and deploy version ``A`` (once per
                                 process); returns a :class:`Release`.
``start_cluster(release, computes=2, name=...)``  a context manager for a cluster of N compute nodes
                                 (N <= 8) on a boot tree of its own; ``cluster.stop()`` on exit.
``Cluster``
  ``.boot_root``                 the boot tree (``<boot_root>/<image>`` -> ``images/<image>/<version>``)
  ``.pack_dir``                  the pack output (``hpc_stateless_pack_output_dir``)
  ``.controller``, ``.computes``, ``.nodes`` (``{name: Node}``)
  ``.deploy(version, **extra_vars)``  pack the compute image as ``version`` and deploy it into the
                                 boot tree (pack.yml + deploy.yml with the cluster inventory); no
                                 node reboots: nodes boot it when they next (re)boot
  ``.playbook(playbook, *args)``  run a playbook with the cluster inventory and ``inventory_file``
  ``.root_key``                  private key that logs in as root on every node over SSH (its ``.pub`` is
                                 delivered at boot to /root/.ssh/authorized_keys; test_compliance_live.py)
  ``.inventory_file``            hosts ``slurmctl`` and ``node0NN`` (group ``hpc_stateless_nodes``)
                                 reached with the ``cluster_node`` connection (nsenter into the node),
                                 plus ``localhost``; with the boot root and image variables set
  ``.wait_idle(names=None, timeout=240)``  until Slurm reports the nodes idle (polls sinfo)
  ``.sinfo()``                   ``{node: state}`` as ``sinfo`` prints it
``Node``
  ``.name``, ``.image``, ``.address``
  ``.run(command, input=None, timeout=120)`` -> ``Result(rc, stdout, stderr)``: a shell command inside
                                 the running node (raises NodeDown when it is not running)
  ``.release()``                 ``/etc/image-release`` as a dict (IMAGE, VERSION, ...)
  ``.boots``                     list of :class:`Boot` (version, seconds to boot, exit status) so far
  ``.wait_boot(count, timeout=300)``  until the node finished its ``count``-th boot; returns that Boot
  ``.reboot()``                  ``systemctl reboot`` inside the node (what Slurm's RebootProgram does)
  ``.state``                     ``booting``, ``running``, ``rebooting``, ``off`` or ``failed``

How a node boots (the harness plays the node firmware): resolve ``<boot_root>/<image>`` as PXE
does (its ``initrd`` is the served version's cpio artifact), unpack that artifact into a fresh
tmpfs, write what provisioning delivers at boot (host name, ``/etc/hosts``, the test munge key, root's SSH key;
none of them is in the image) and boot it with ``systemd-nspawn --boot --register=no --keep-unit``
in the node's network namespace. When the container reboots (systemd-nspawn exits 133), the
tmpfs is dropped and the node boots again from whatever the tree serves then; any other exit
powers the node off.

Network: one namespace per node, each with a veth whose peer is a port of a bridge in a "switch"
namespace; addresses 10.251.0.1 (controller) and 10.251.0.11+ (nodes). Nothing touches the host's
network. ``Cluster.stop()`` kills the containers, removes the tmpfs mounts, cgroups, namespaces
(their veths go with them) and the work directory, and says what it could not remove.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ansible_collections.hpc.stateless.plugins.module_utils._paths import write_atomic
from ansible_collections.hpc.stateless.plugins.module_utils._process import Result, run
from ansible_collections.hpc.stateless.plugins.module_utils._contract.manifest import read_manifest
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import MANIFEST_FILE, RELEASE_PATH
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import INITRD_LINK
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.cgroups import (
    cgroup_dirs_of,
    in_cgroups_argv,
    remove_cgroups,
    session_cgroups,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import (
    console_tail,
    container_env,
    host_env,
    nsenter_argv,
    nspawn_boot_argv,
    parse_notify,
)
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.process import keep_running, process_start
from conftest import REPO, run_site

INVENTORY = REPO / "tests" / "integration" / "inventory_cluster"
PACK_DIR = REPO / "build" / "cluster-test" / "images"
PLUGINS = REPO / "tests" / "integration" / "cluster_plugins"
COMPUTE_IMAGE, CONTROLLER_IMAGE = "cluster_compute", "cluster_controller"
CONTROLLER = "slurmctl"
MAX_COMPUTES = 8  # slurm_nodes of inventory_cluster: node[001-008]
FIRST_VERSION = "A"
SUBNET = "10.251.0"
REBOOT_STATUS = 133  # systemd-nspawn's exit status when the container rebooted
BOOT_TIMEOUT = 180.0
WORK_ROOT = "/var/tmp"
WORK_PREFIX = "hpc-cluster-"
NETNS_PREFIX = "hpccl-"


class NodeDown(Exception):
    """A command was sent to a node that is not running."""


def compute_name(index: int) -> str:
    return f"node{index:03d}"


# -- images ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Release:
    """Packed versions of the cluster images: ``pack_dir/<image>/<version>/``."""
    pack_dir: Path
    version: str


def playbook_args(pack_dir: Path, boot_root: Path, version: str, images: list[str]) -> list[str]:
    return ["-e", f"hpc_stateless_pack_output_dir={pack_dir}", "-e", f"hpc_stateless_boot_root={boot_root}",
            "-e", f"hpc_stateless_pack_version={version}",
            "-e", json.dumps({"hpc_stateless_pack_images": images, "hpc_stateless_deploy_images": images})]


def run_playbook(*extra: str, inventory: Path = INVENTORY, playbook: str = "site.yml") -> subprocess.CompletedProcess:
    """A playbook of the checkout with the cluster inventory and the ``cluster_node`` connection plugin;
    the log goes to build/test-logs like every test playbook's."""
    return run_site(*extra, inventory=inventory, playbook=playbook,
                    env_extra={"ANSIBLE_CONNECTION_PLUGINS": str(PLUGINS / "connection")}, log_prefix="cluster-")


def check_playbook(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        raise AssertionError(f"{what} failed (rc={proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")


_RELEASE: Release | None = None


def build_cluster_images() -> Release:
    """Build the cluster layers and pack version A of both images; once per process. Layers are kept between
    runs (an unchanged one is not rebuilt), the packs are not: the tests pack fixed versions (A, B, C), and a
    version packed by an earlier run of a changed checkout holds another build, which pack rightly refuses to
    replace."""
    global _RELEASE  # pylint: disable=global-statement
    if _RELEASE is None:
        pack_dir = PACK_DIR
        shutil.rmtree(pack_dir, ignore_errors=True)
        images = [COMPUTE_IMAGE, CONTROLLER_IMAGE]
        # build, verify (the gate of pack), pack; deploy goes to each cluster's own boot tree (start_cluster)
        proc = run_playbook(*playbook_args(pack_dir, pack_dir / "unused-boot-root", FIRST_VERSION, images),
                            "-e", json.dumps({"hpc_stateless_site_stages": ["build", "verify", "pack"]}))
        check_playbook(proc, "building and packing the cluster images (site.yml, inventory_cluster)")
        _RELEASE = Release(pack_dir, FIRST_VERSION)
    return _RELEASE


def cluster_session() -> Iterator[Cluster]:
    """The body of the session fixture ``cluster`` (conftest.py)."""
    with start_cluster(build_cluster_images()) as cluster:
        yield cluster


# -- network --------------------------------------------------------------------------------

def _ip(*args: str) -> None:
    run(["ip", *args], hint="the test cluster needs iproute2 and root (network namespaces)")


def _in_ns(ns: str, *args: str) -> None:
    _ip("netns", "exec", ns, "ip", *args)


class Network:
    """A switch namespace with a bridge and one namespace per node, cabled with veth pairs."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.switch = f"{NETNS_PREFIX}{tag}-sw"
        self.namespaces: list[str] = []

    def create(self) -> None:
        self._add(self.switch)
        _in_ns(self.switch, "link", "add", "br0", "type", "bridge")
        _in_ns(self.switch, "link", "set", "br0", "up")

    def _add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        _in_ns(ns, "link", "set", "lo", "up")

    def attach(self, index: int, address: str) -> str:
        """A namespace for one node, its ``cl0`` cabled to the switch; returns its path."""
        ns = f"{NETNS_PREFIX}{self.tag}-{index}"
        self._add(ns)
        port = f"p{index}"
        _ip("link", "add", port, "netns", self.switch, "type", "veth", "peer", "name", "cl0", "netns", ns)
        _in_ns(self.switch, "link", "set", port, "master", "br0", "up")
        _in_ns(ns, "address", "add", f"{address}/24", "dev", "cl0")
        _in_ns(ns, "link", "set", "cl0", "up")
        return f"/run/netns/{ns}"

    def remove(self) -> list[str]:
        problems = []
        for ns in reversed(self.namespaces):
            result = run(["ip", "netns", "delete", ns], check=False)
            if result.rc != 0 and os.path.exists(f"/run/netns/{ns}"):
                problems.append(f"netns {ns}: {result.stderr.strip()}")
        self.namespaces.clear()
        return problems


# -- nodes ----------------------------------------------------------------------------------

@dataclass
class Boot:
    """One boot of a node: the version it booted, how long until systemd was up, how it ended.

    ``started``, ``ready`` and ``ended`` are ``time.monotonic()`` stamps: the firmware began (unpack),
    systemd-nspawn reported READY, systemd-nspawn exited (None while the boot runs).
    ``seconds`` = ready - started."""
    number: int
    version: str
    seconds: float = 0.0
    system_state: str = ""
    exit_status: int | None = None
    started: float = 0.0
    ready: float | None = None
    ended: float | None = None


@dataclass
class Node:
    """One node of the cluster and its firmware loop (a thread of the test process)."""
    cluster: "Cluster"
    name: str
    image: str
    address: str
    netns: str
    state: str = "off"
    boots: list[Boot] = field(default_factory=list)
    error: str = ""
    leader_pid: int | None = None
    _proc: subprocess.Popen | None = None
    _thread: threading.Thread | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _release_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def dir(self) -> Path:
        return self.cluster.work / "nodes" / self.name

    @property
    def root(self) -> Path:
        return self.dir / "root"

    @property
    def machine(self) -> str:
        return f"{self.name}-{self.cluster.tag}"

    # -- commands --------------------------------------------------------------------------
    def run(self, command: str, input: str | None = None, timeout: float = 120.0) -> Result:
        """``command`` run by ``/bin/sh -c`` inside the running node, as root."""
        leader = self.leader_pid
        if leader is None:
            raise NodeDown(f"{self.name} is {self.state}, not running{': ' + self.error if self.error else ''}")
        argv = nsenter_argv("nsenter", leader, ["/bin/sh", "-c", command])
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=container_env(), text=True)
        keep_running(proc)  # nsenter stops with its child when the container freezes it at shutdown
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return Result(argv, 124, "", f"{command!r} on {self.name} timed out after {timeout:.0f}s")
        return Result(argv, proc.returncode, out, err)

    def release(self) -> dict[str, str]:
        result = self.run(f"cat /{RELEASE_PATH}")
        return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)

    def reboot(self) -> None:
        self.run("systemctl reboot")

    def wait_boot(self, count: int, timeout: float = 300.0) -> Boot:
        """Wait until the node finished booting ``count`` times (1 = its first boot)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.boots) < count:
                if self.state in ("off", "failed"):
                    raise AssertionError(f"{self.name} is {self.state} after {len(self.boots)} boots: {self.error}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{self.name}: boot {count} not done within {timeout:.0f}s "
                                         f"(state {self.state}, {len(self.boots)} boots)\n{self.console()}")
                self._changed.wait(min(remaining, 1.0))
            return self.boots[count - 1]

    def console(self, lines: int = 25) -> str:
        try:
            return console_tail((self.dir / "console.log").read_text(errors="replace"), lines)
        except OSError:
            return "(no console log)"

    # -- firmware --------------------------------------------------------------------------
    def power_on(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state = "booting"
        self._thread = threading.Thread(target=self._firmware, name=f"firmware-{self.name}", daemon=True)
        self._thread.start()

    def _set(self, state: str, error: str = "") -> None:
        with self._changed:
            self.state = state
            if error:
                self.error = error
            self._changed.notify_all()

    def _firmware(self) -> None:
        try:
            while not self.cluster.stopping:
                self._set("booting")
                status = self._boot_once()
                if status != REBOOT_STATUS or self.cluster.stopping:
                    self._set("off", "" if self.cluster.stopping else f"systemd-nspawn exited with {status}")
                    return
                self._set("rebooting")
        except Exception as exc:  # noqa: BLE001 - the node is down; the test that waits for it says why
            self._set("failed", f"{type(exc).__name__}: {exc}")
        finally:
            self._release_boot()

    def _resolve(self) -> tuple[Path, str]:
        """What PXE loads for this node: the served version's initrd (the cpio artifact)."""
        served = self.cluster.boot_root / self.image
        version_dir = Path(os.path.realpath(served))
        manifest = read_manifest(str(version_dir / MANIFEST_FILE))
        return version_dir / INITRD_LINK, str(manifest["version"])

    def _boot_once(self) -> int:
        initrd, version = self._resolve()
        started = time.monotonic()
        boot = Boot(number=len(self.boots) + 1, version=version, started=started)
        self._unpack(initrd)
        self._provision()
        argv = fresh_clock_argv() + nspawn_boot_argv("systemd-nspawn", str(self.root), self.machine,
                                                     hostname=self.name, network=self.netns)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = f"\0hpc-cluster-{self.cluster.tag}-{self.name}"
        notify.bind(address)
        try:
            with open(self.dir / "console.log", "ab") as console:
                console.write(f"\n--- boot {boot.number}: {self.image} {version}\n".encode())
                console.flush()
                self._proc = subprocess.Popen(in_cgroups_argv(self.cluster.cgroups[self.name], argv),
                                              stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
                                              env=dict(host_env(), NOTIFY_SOCKET="@" + address[1:],
                                                       # the node's network stack is its own, as on a machine: its
                                                       # net.* sysctls apply at boot (systemd-nspawn makes
                                                       # /proc/sys/net writable only for its own private network)
                                                       SYSTEMD_NSPAWN_API_VFS_WRITABLE="network"),
                                              cwd="/")
            self._wait_ready(notify, started)
        finally:
            notify.close()
        boot.ready = time.monotonic()
        boot.seconds = round(boot.ready - started, 2)
        self._write_leader()
        boot.system_state = self.run("systemctl is-system-running --wait", timeout=60).stdout.strip()
        with self._changed:
            self.boots.append(boot)
            self.state = "running"
            self._changed.notify_all()
        boot.exit_status = self._proc.wait()
        boot.ended = time.monotonic()
        self._release_boot()
        return boot.exit_status

    def _wait_ready(self, notify: socket.socket, started: float) -> None:
        notify.settimeout(0.5)
        while True:
            with contextlib.suppress(socket.timeout):
                fields = parse_notify(notify.recv(4096))
                if "X_NSPAWN_LEADER_PID" in fields:
                    self.leader_pid = int(fields["X_NSPAWN_LEADER_PID"])
                if fields.get("READY") == "1" and self.leader_pid:
                    return
            if self._proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {self._proc.returncode} while booting\n"
                                   f"{self.console()}")
            if self.cluster.stopping:
                raise RuntimeError("the cluster stopped while the node booted")
            if time.monotonic() - started > BOOT_TIMEOUT:
                raise RuntimeError(f"not booted within {BOOT_TIMEOUT:.0f}s\n{self.console()}")

    def _unpack(self, initrd: Path) -> None:
        """A fresh tmpfs holding the artifact, as the kernel unpacks an initramfs into RAM."""
        self.root.mkdir(exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", "mode=0755", f"hpc-cluster-{self.name}", str(self.root)])
        self.cluster.mounts.add(str(self.root))
        with open(initrd, "rb") as artifact:
            zstd = subprocess.Popen(["zstd", "-dcq"], stdin=artifact, stdout=subprocess.PIPE)
            cpio = subprocess.run(["cpio", "-idm", "--quiet", "--no-absolute-filenames"], stdin=zstd.stdout,
                                  cwd=self.root, capture_output=True, check=False)
            zstd.stdout.close()
            zstd_rc = zstd.wait()
        if zstd_rc != 0 or cpio.returncode != 0:
            raise RuntimeError(f"unpacking {initrd} failed: zstd rc={zstd_rc}, cpio rc={cpio.returncode}: "
                               f"{cpio.stderr.decode(errors='replace')[-500:]}")

    def _provision(self) -> None:
        """What the site delivers at boot, never in the image: host name, hosts, the munge key, root's
        authorized SSH key (the cluster's own, :attr:`Cluster.root_key`)."""
        etc = self.root / "etc"
        (etc / "hostname").write_text(self.name + "\n")
        (etc / "hosts").write_text(self.cluster.hosts_text())
        key = etc / "munge" / "munge.key"
        key.parent.mkdir(exist_ok=True)
        key.write_bytes(self.cluster.munge_key)
        key.chmod(0o400)  # munge-key-wait gives it to the munge user
        ssh = self.root / "root" / ".ssh"
        ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
        (ssh / "authorized_keys").write_text(self.cluster.root_key.with_suffix(".pub").read_text(encoding="utf-8"))
        (ssh / "authorized_keys").chmod(0o600)

    def _write_leader(self) -> None:
        """``<node dir>/leader``: pid and start time of the container's init (connection plugin)."""
        write_atomic(str(self.dir / "leader"), f"{self.leader_pid} {process_start(self.leader_pid)}\n", sync=False)

    def _release_boot(self) -> None:
        """After the container exited (or to stop it): no leader, no root, no process."""
        with self._release_lock:
            self._release_boot_locked()

    def _release_boot_locked(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.dir / "leader").unlink()
        proc, leader = self._proc, self.leader_pid
        self.leader_pid = None
        if proc is not None and proc.poll() is None:
            if leader:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leader, signal.SIGKILL)  # the container's init: its whole pid namespace goes
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        self._proc = None
        if str(self.root) in self.cluster.mounts:
            run(["umount", str(self.root)], check=False)
            if not _is_mount(self.root):
                self.cluster.mounts.discard(str(self.root))

    def stop(self) -> None:
        """Power off (the cluster is stopping: the firmware boots nothing more) and clean up."""
        self._release_boot()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._release_boot()  # whatever a boot that was under way when we stopped had made


def fresh_clock_argv() -> list[str]:
    """A time namespace whose boot and monotonic clocks start near 0, like a machine that just booted.

    A container shares the host's kernel, so without it /proc/uptime (and sysinfo()) inside the node
    is the host's: slurmd reports the same BootTime after a reboot, and slurmctld, which tells a
    finished reboot by a newer BootTime, takes the node down after its timeout instead of resuming it
    (the rolling update checks BootTime too)."""
    with open("/proc/uptime", encoding="utf-8") as handle:
        offset = int(float(handle.read().split()[0])) - 1
    return ["unshare", "--time", "--fork", f"--boottime=-{offset}", f"--monotonic=-{offset}", "--"]


def _is_mount(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        return any(line.split()[4] == str(path) for line in handle)


# -- the cluster ----------------------------------------------------------------------------

class Cluster:
    """A controller and compute nodes booted from a boot tree of their own (see the module doc)."""

    def __init__(self, release: Release, computes: int = 2, name: str = "", boot_root: Path | None = None) -> None:
        if not 1 <= computes <= MAX_COMPUTES:
            raise ValueError(f"computes={computes}: slurm.conf of inventory_cluster has node001..node00{MAX_COMPUTES}")
        self.tag = name or uuid.uuid4().hex[:6]
        self.release = release
        self.pack_dir = release.pack_dir
        self.work = Path(WORK_ROOT) / f"{WORK_PREFIX}{self.tag}"
        # a boot tree of its own, deployed at start; or boot from another cluster's (served as it is)
        self.boot_root = boot_root or self.work / "tftpboot"
        self.own_boot_root = boot_root is None
        self.inventory_file = self.work / "hosts.yml"
        self.munge_key = os.urandom(1024)
        self.network = Network(self.tag)
        self.mounts: set[str] = set()
        self.cgroups: dict[str, list[str]] = {}
        self.stopping = False
        self.controller = Node(self, CONTROLLER, CONTROLLER_IMAGE, f"{SUBNET}.1", "")
        self.computes = [Node(self, compute_name(i), COMPUTE_IMAGE, f"{SUBNET}.{10 + i}", "")
                         for i in range(1, computes + 1)]
        self.nodes = {node.name: node for node in (self.controller, *self.computes)}

    def hosts_text(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        # every node of slurm.conf, booted or not: slurmctld resolves them all at start and waits
        # 10 s for each name it cannot resolve
        lines += [f"{SUBNET}.1 {CONTROLLER}"]
        lines += [f"{SUBNET}.{10 + i} {compute_name(i)}" for i in range(1, MAX_COMPUTES + 1)]
        return "\n".join(lines) + "\n"

    # -- playbooks -------------------------------------------------------------------------
    def playbook(self, playbook: str, *args: str) -> subprocess.CompletedProcess:
        """``playbook`` (relative to the checkout) with the cluster inventory and the node inventory."""
        return run_playbook("-i", str(self.inventory_file), "-e", f"hpc_stateless_boot_root={self.boot_root}",
                            "-e", f"hpc_stateless_pack_output_dir={self.pack_dir}", *args, playbook=playbook)

    def deploy(self, version: str, images: tuple[str, ...] = (COMPUTE_IMAGE,), **extra_vars: object) -> None:
        """Pack ``images`` as ``version`` and deploy it into the boot tree (pack writes nothing when that
        version is up to date with its layer image)."""
        variables = {"hpc_stateless_pack_version": version, "hpc_stateless_deploy_images": list(images),
                     "hpc_stateless_pack_images": list(images), **extra_vars}
        proc = self.playbook("playbooks/pack.yml", "-e", json.dumps(variables))
        check_playbook(proc, f"packing {', '.join(images)} {version}")
        proc = self.playbook("playbooks/deploy.yml", "-e", json.dumps(variables))
        check_playbook(proc, f"deploying {', '.join(images)} {version}")

    def write_inventory(self) -> None:
        nodes = {node.name: {"ansible_connection": "cluster_node",
                             "ansible_cluster_node_dir": str(node.dir),
                             "ansible_python_interpreter": "/usr/bin/python3",
                             "hpc_stateless_boot_image": node.image}
                 for node in self.nodes.values()}
        computes = {node.name: None for node in self.computes}
        local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
        data = {"all": {"hosts": {**nodes, "localhost": local},
                        "children": {"hpc_stateless_nodes": {"hosts": computes},
                                     "slurm_controller": {"hosts": {CONTROLLER: None}}}}}
        self.inventory_file.write_text(json.dumps(data, indent=1))

    # -- life cycle ------------------------------------------------------------------------
    @property
    def root_key(self) -> Path:
        """The private key that logs in as root on every node over SSH (``<key>.pub`` is delivered at boot into
        /root/.ssh/authorized_keys, as a site's provisioning would, never in the image). Made for this cluster
        in its work directory, removed with it."""
        return self.work / "ssh" / "id_ed25519"

    def start(self) -> None:
        sweep_stale()
        self.work.mkdir(mode=0o700)
        # whose cluster this is: sweep_stale() of a later run removes it once this process is gone
        (self.work / "owner").write_text(f"{os.getpid()} {process_start(os.getpid())}\n")
        self.root_key.parent.mkdir(mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hpc-stateless test cluster {self.tag}", "-f",
             str(self.root_key)], hint="the test cluster's root key needs ssh-keygen (openssh-client)")
        self.write_inventory()
        if self.own_boot_root:
            self._deploy_first()
        self.network.create()
        for index, node in enumerate(self.nodes.values()):
            node.netns = self.network.attach(index, node.address)
            self.cgroups[node.name] = session_cgroups(f"cluster-{self.tag}-{node.name}")
        for node in self.nodes.values():
            node.power_on()
        for node in self.nodes.values():
            node.wait_boot(1, timeout=BOOT_TIMEOUT + 120)

    def _deploy_first(self) -> None:
        proc = run_playbook("-e", f"hpc_stateless_boot_root={self.boot_root}",
                            "-e", f"hpc_stateless_pack_output_dir={self.pack_dir}",
                            "-e", f"hpc_stateless_pack_version={self.release.version}",
                            "-e", json.dumps({"hpc_stateless_deploy_images": [COMPUTE_IMAGE, CONTROLLER_IMAGE]}),
                            playbook="playbooks/deploy.yml")
        check_playbook(proc, f"deploying version {self.release.version} into {self.boot_root}")

    def sinfo(self) -> dict[str, str]:
        result = self.controller.run("sinfo --noheader --Node --format='%N %T'")
        return dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, names: list[str] | None = None, timeout: float = 240.0) -> dict[str, str]:
        """Poll sinfo until the nodes (all compute nodes by default) are idle; returns the states."""
        names = names or [node.name for node in self.computes]
        deadline = time.monotonic() + timeout
        while True:
            states = {}
            with contextlib.suppress(NodeDown):
                states = self.sinfo()
            if all(states.get(name) == "idle" for name in names):
                return states
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes {names} not idle after {timeout:.0f}s: sinfo says {states}")
            time.sleep(0.5)

    def stop(self) -> list[str]:
        """Stop every node and remove everything the cluster made; returns what was left."""
        self.stopping = True
        for node in self.nodes.values():
            node.stop()
        problems = [f"mount {path} is still mounted" for path in sorted(self.mounts)]
        for name, dirs in self.cgroups.items():
            busy = remove_cgroups(dirs)
            if busy:
                problems.append(f"cgroups of {name} still in use: {', '.join(busy)}")
        problems += self.network.remove()
        if not problems:
            shutil.rmtree(self.work, ignore_errors=True)
        return problems


@contextlib.contextmanager
def start_cluster(release: Release, computes: int = 2, name: str = "", boot_root: Path | None = None
                  ) -> Iterator[Cluster]:
    """A running cluster, stopped and removed on exit whatever happened; fails when teardown
    could not remove everything. ``boot_root``: boot from that tree instead of deploying one."""
    cluster = Cluster(release, computes, name, boot_root)
    try:
        cluster.start()
        yield cluster
    finally:
        problems = cluster.stop()
        if problems:
            raise AssertionError("the test cluster left: " + "; ".join(problems))


def _nspawn_processes(path: str) -> list[int]:
    """systemd-nspawn processes booting a root under ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"systemd-nspawn") and any(path.encode() in arg for arg in argv):
                found.append(int(pid))
    return found


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in task.read_text().split()]
    return found


def sweep_stale() -> list[str]:
    """Remove what clusters of test processes that are gone left (a killed pytest run cannot tear
    down): their containers, tmpfs roots, namespaces and work directories. Returns what it removed."""
    removed = []
    for work in Path(WORK_ROOT).glob(f"{WORK_PREFIX}*"):
        info = os.lstat(work)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue  # made by another user in /var/tmp: nothing of it is ours to read, kill or remove
        try:
            pid, start = (work / "owner").read_text().split()
        except (OSError, ValueError):
            continue  # not a cluster's work directory
        if process_start(int(pid)) == start:
            continue  # a live cluster
        for nspawn in _nspawn_processes(str(work)):
            for pid in [*_children(nspawn), nspawn]:  # the container's init first: its pid namespace goes
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while _nspawn_processes(str(work)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for mount in leftovers(work.name[len(WORK_PREFIX):]).get("mounts", []):
            run(["umount", "--lazy", mount], check=False)
        tag = work.name[len(WORK_PREFIX):]
        if os.path.isdir("/run/netns"):
            for ns in os.listdir("/run/netns"):
                if ns.startswith(f"{NETNS_PREFIX}{tag}-"):
                    run(["ip", "netns", "delete", ns], check=False)
        for node in (work / "nodes").glob("*"):
            remove_cgroups(cgroup_dirs_of(f"cluster-{tag}-{node.name}"))
        shutil.rmtree(work, ignore_errors=True)
        removed.append(str(work))
    return removed


def leftovers(tag: str = "") -> dict[str, list[str]]:
    """What clusters (of ``tag``, or any) left on this host: namespaces, mounts, processes, work dirs."""
    prefix = f"{NETNS_PREFIX}{tag}"
    found: dict[str, list[str]] = {}
    found["netns"] = sorted(n for n in os.listdir("/run/netns") if n.startswith(prefix)) \
        if os.path.isdir("/run/netns") else []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        found["mounts"] = [line.split()[4] for line in handle
                           if line.split()[4].startswith(f"{WORK_ROOT}/{WORK_PREFIX}{tag}")]
    found["processes"] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            if "systemd-nspawn" in cmdline and f"{WORK_ROOT}/{WORK_PREFIX}{tag}" in cmdline:
                found["processes"].append(f"{pid}: {cmdline.strip()}")
    found["work_dirs"] = sorted(str(p) for p in Path(WORK_ROOT).glob(f"{WORK_PREFIX}{tag}*"))
    return {kind: items for kind, items in found.items() if items}
