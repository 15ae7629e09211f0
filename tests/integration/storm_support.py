# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot servers and simulated nodes for the first stage's fetch (hpc-fetch of the dracut module hpcfetch).

Used by tests/integration/test_first_stage_fetch.py (nginx on loopback) and benchmarks/storm_bench.py
(nginx in network namespaces, each node in its own namespace behind a ``tc``-limited link). Both run
the very script the initramfs runs, :data:`FETCH_SCRIPT`, and real nginx (Debian's, scripts/setup.sh).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import sha256_file

REPO = Path(__file__).resolve().parents[2]
DRACUT_MODULE = REPO / "roles" / "hpc_stateless" / "files" / "dracut" / "95hpcfetch"
FETCH_SCRIPT = DRACUT_MODULE / "hpc-fetch.sh"
ARTIFACT_DIR = "sha256"  # <server>/sha256/<hex>: docs/scale.md

# One nginx: static files from <root>, an access log with the bytes sent per request; with ``upstream``
# a cache in front of it (proxy_cache_lock: one fill per file however many nodes ask at once).
NGINX_CONF = """\
{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format storm '$request_uri $status $bytes_sent';
    access_log {prefix}/access.log storm;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 30;
    default_type application/octet-stream;
{cache_zone}
    server {{
        listen {listen};
        root {root};
{location}
    }}
}}
"""
CACHE_ZONE = "    proxy_cache_path {prefix}/cache levels=1:2 keys_zone=boot:10m max_size=4g inactive=1h use_temp_path=off;"
CACHE_LOCATION = """\
        location /{artifacts}/ {{
            proxy_pass {upstream};
            proxy_cache boot;
            proxy_cache_valid 200 1h;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 1h;
            proxy_cache_lock_age 1h;
            proxy_read_timeout 1h;
        }}"""


def publish(root: Path, source: Path) -> str:
    """Put ``source`` under ``root``/sha256/<its hash> (a hard link when it can); returns the hash."""
    digest = sha256_file(str(source))
    target = root / ARTIFACT_DIR / digest
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)
    return digest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Nginx:
    """nginx serving ``root`` on ``listen`` (``addr:port``), in network namespace ``netns`` when given;
    with ``upstream`` (a base URL) a caching proxy of it instead of a file server."""

    def __init__(self, prefix: Path, root: Path, listen: str, netns: Optional[str] = None,
                 upstream: Optional[str] = None) -> None:
        self.prefix, self.root, self.listen, self.netns = prefix, root, listen, netns
        prefix.mkdir(parents=True, exist_ok=True)
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (prefix / sub).mkdir(exist_ok=True)
        location = CACHE_LOCATION.format(artifacts=ARTIFACT_DIR, upstream=upstream.rstrip("/")) if upstream else ""
        zone = CACHE_ZONE.format(prefix=prefix) if upstream else ""
        self.conf = prefix / "nginx.conf"
        # Workers as root when started by root: the served trees are the tests' private temporary directories.
        user = "user root;\n" if os.geteuid() == 0 else ""
        self.conf.write_text(NGINX_CONF.format(user=user, prefix=prefix, listen=listen, root=root, location=location,
                                               cache_zone=zone))
        self.proc: Optional[subprocess.Popen] = None

    def argv(self) -> list[str]:
        base = ["nginx", "-p", str(self.prefix), "-c", str(self.conf), "-g", "daemon off;"]
        return ["ip", "netns", "exec", self.netns, *base] if self.netns else base

    def start(self, timeout: float = 15.0) -> "Nginx":
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        host, port = self.listen.rsplit(":", 1)
        deadline = time.monotonic() + timeout
        while not self._answers(host, int(port)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.poll() is not None and self.proc.stderr else ""
                log = self.prefix / "error.log"
                raise RuntimeError(f"nginx did not listen on {self.listen} ({self.conf}): {err}"
                                   f"{log.read_text() if log.exists() else ''}")
            time.sleep(0.1)
        return self

    def _answers(self, host: str, port: int) -> bool:
        if self.netns:
            probe = ["ip", "netns", "exec", self.netns, "curl", "-s", "-o", "/dev/null", "--max-time", "1",
                     f"http://{host}:{port}/"]
            return subprocess.run(probe, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return True
        return False

    def kill(self) -> None:
        """SIGKILL master and workers (a server that dies: its clients' connections are reset)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def bytes_sent(self, prefix_uri: str = "/") -> int:
        """Bytes nginx logged as sent for requests under ``prefix_uri`` (finished requests only)."""
        log = self.prefix / "access.log"
        total = 0
        for line in log.read_text().splitlines() if log.exists() else []:
            fields = line.split()
            if len(fields) == 3 and fields[0].startswith(prefix_uri) and fields[2].isdigit():
                total += int(fields[2])
        return total


@contextlib.contextmanager
def served(prefix: Path, root: Path, netns: Optional[str] = None, listen: Optional[str] = None,
           upstream: Optional[str] = None) -> Iterator[Nginx]:
    server = Nginx(prefix, root, listen or f"127.0.0.1:{free_port()}", netns, upstream).start()
    try:
        yield server
    finally:
        server.stop()


def fetch_argv(servers: Sequence[str], image: str, out: Path, *extra: str) -> list[str]:
    """The first stage's fetch as the initramfs runs it (``hpc-fetch -s ... -i ... -o ...``)."""
    return ["sh", str(FETCH_SCRIPT), "-s", ",".join(servers), "-i", image, "-o", str(out), *extra]
