"""Boot servers for the integration tests: each a network namespace with its own address, reached by Ansible over
ssh (a real sshd started inside the namespace), serving HTTP with the nginx the role hpc.stateless.boot_server
starts there.

Why ssh: it is how Ansible reaches a real boot server (its ``ssh`` connection plugin, modules shipped and run by the
server's own Python), so deploy.yml's remote path - the copy of the release, the checks on the server, the failure
of one host ending the play on all - runs as on a site. The namespaces share the host's file system (each server's
boot root is its own directory), so a server's disk is made small by a tmpfs mounted on its boot root.

The host reaches each namespace through a veth pair (10.199.<n>.1 on the host, 10.199.<n>.2 in the namespace); qemu's
user network connects from the host, so a guest reaches every server at its namespace address.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSHD_CONFIG = """ListenAddress {address}
Port 22
HostKey {base}/host_key
PidFile {base}/sshd.pid
AuthorizedKeysFile {base}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
"""


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


@dataclass
class BootServer:
    name: str
    index: int
    base: Path
    netns: str = ""
    sshd: subprocess.Popen | None = None
    mounts: list[Path] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"10.199.{self.index}.2"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def root(self) -> Path:
        return self.base / "www"

    @property
    def tftp(self) -> Path:
        return self.base / "tftp"

    @property
    def state(self) -> Path:
        return self.base / "nginx"

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(["ip", "netns", "exec", self.netns, *argv], check=check)

    def http_get(self, path: str) -> tuple[int, bytes]:
        """(status, body) of GET <server><path>, asked from inside the server's namespace (curl)."""
        proc = subprocess.run(["ip", "netns", "exec", self.netns, "curl", "-s", "-o", "-", "-w", "\n%{http_code}",
                               "--max-time", "10", f"{self.url}{path}"], capture_output=True, check=False)
        body, _newline, code = proc.stdout.rpartition(b"\n")
        return int(code or 0), body

    def stop_sshd(self) -> None:
        """Make the server unreachable over ssh: its sshd and the sessions it holds (an Ansible ControlPersist
        master keeps one open), found among the processes of its namespace."""
        if self.sshd is not None:
            self.sshd.terminate()
            self.sshd.wait(timeout=10)
        pids = _run(["ip", "netns", "pids", self.netns], check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(int(pid), signal.SIGTERM)

    def stop_nginx(self) -> None:
        pid = self.state / "nginx.pid"
        if pid.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid.read_text().strip()), signal.SIGTERM)
            deadline = time.monotonic() + 10
            while pid.exists() and time.monotonic() < deadline:
                time.sleep(0.1)


def _wait_port(address: str, port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on {address}:{port}: "
                               f"{proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ''}")
        time.sleep(0.1)


@contextlib.contextmanager
def boot_servers(base: Path, count: int, disk_bytes: dict[str, int] | None = None
                 ) -> Iterator[tuple[list[BootServer], Path]]:
    """``count`` boot servers, each in its own namespace with sshd; yields them and the ssh private key.

    ``disk_bytes`` ({server name: bytes}) gives a server's boot root a tmpfs of that size, mounted before its sshd
    starts: ``ip netns exec`` gives sshd a mount namespace of its own, copied from the host's when it starts."""
    key = base / "id_ed25519"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)])
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    tag = uuid.uuid4().hex[:6]
    servers = [BootServer(f"bs{n}", 100 + n + (int(tag, 16) % 50) * 2, base / f"bs{n}") for n in (1, 2)][:count]
    try:
        for server in servers:
            server.base.mkdir(parents=True)
            if server.name in (disk_bytes or {}):
                server.root.mkdir()
                _run(["mount", "-t", "tmpfs", "-o", f"size={disk_bytes[server.name]},mode=0755", "tmpfs",
                      str(server.root)])
                server.mounts.append(server.root)
            server.netns = f"hpcbs{server.index}-{tag}"
            host_if, ns_if = f"hb{server.index}{tag}"[:15], f"nb{server.index}{tag}"[:15]
            _run(["ip", "netns", "add", server.netns])
            _run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if])
            _run(["ip", "link", "set", ns_if, "netns", server.netns])
            _run(["ip", "addr", "add", f"10.199.{server.index}.1/24", "dev", host_if])
            _run(["ip", "link", "set", host_if, "up"])
            server.exec("ip", "addr", "add", f"{server.address}/24", "dev", ns_if)
            server.exec("ip", "link", "set", ns_if, "up")
            server.exec("ip", "link", "set", "lo", "up")
            server.exec("ip", "route", "add", "default", "via", f"10.199.{server.index}.1")
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(server.base / "host_key")])
            (server.base / "authorized_keys").write_text((base / "id_ed25519.pub").read_text())
            (server.base / "sshd_config").write_text(SSHD_CONFIG.format(address=server.address, base=server.base))
            server.sshd = subprocess.Popen(["ip", "netns", "exec", server.netns, "/usr/sbin/sshd", "-D", "-e", "-f",
                                            str(server.base / "sshd_config")],
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _wait_port(server.address, 22, server.sshd, f"sshd of {server.name}")
        yield servers, key
    finally:
        for server in servers:
            server.stop_nginx()
            if server.sshd is not None:
                server.sshd.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.sshd.wait(timeout=10)
            for mount in reversed(server.mounts):
                _run(["umount", "-l", str(mount)], check=False)
            if server.netns:
                _run(["ip", "netns", "delete", server.netns], check=False)  # removes the veth pair with it
