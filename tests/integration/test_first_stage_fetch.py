# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The first stage's fetch (hpc-fetch of the dracut module hpcfetch) against real nginx on loopback.

The same script the initramfs runs (and benchmarks/storm_bench.py runs on every simulated node):
failover past a dead server, a wrong file refused by its hash, a cut transfer resumed, the memory
check, bad arguments, wget where curl is missing, and a swarm that gives nothing left for HTTP. A few
seconds in all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO
from storm_support import ARTIFACT_DIR, FETCH_SCRIPT, fetch_argv, free_port, publish, served

sys.path.insert(0, str(REPO / "benchmarks"))
from storm_bench import make_torrent  # noqa: E402  pylint: disable=wrong-import-position,import-error

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx (scripts/setup.sh)")


def run(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **(env or {})})


@pytest.fixture(name="image")
def image_fixture(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "image.squashfs"
    path.write_bytes(os.urandom(3 << 20))
    good = tmp_path / "good"
    return path, publish(good, path)


def dead_server() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused


def test_fails_over_past_a_dead_server_and_verifies(tmp_path, image):
    path, digest = image
    out = tmp_path / "out" / "root.squashfs"
    out.parent.mkdir()
    with served(tmp_path / "nginx", tmp_path / "good") as nginx:
        done = run(fetch_argv([dead_server(), f"http://{nginx.listen}"], digest, out, "-w", "0"))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == path.read_bytes()
    assert "failed (round 1 of 5); trying the next server" in done.stderr, done.stderr
    assert f"fetched sha256:{digest} from http://{nginx.listen}/" in done.stderr, done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["root.squashfs"]


def test_refuses_a_file_whose_hash_is_not_the_one_named(tmp_path, image):
    path, digest = image
    bad = tmp_path / "bad" / ARTIFACT_DIR / digest
    bad.parent.mkdir(parents=True)
    bad.write_bytes(os.urandom(3 << 20))  # same name, other bytes: a corrupt or hostile server
    out = tmp_path / "root.squashfs"
    with served(tmp_path / "n1", tmp_path / "bad") as evil, served(tmp_path / "n2", tmp_path / "good") as good:
        done = run(fetch_argv([f"http://{evil.listen}", f"http://{good.listen}"], f"sha256:{digest}", out, "-w", "0"))
    assert done.returncode == 0, done.stderr
    assert f"refused the image from http://{evil.listen}/: its sha256 is" in done.stderr, done.stderr
    assert out.read_bytes() == path.read_bytes()


def test_resumes_a_cut_transfer_from_the_next_server(tmp_path, image):
    path, digest = image
    out = tmp_path / "root.squashfs"
    Path(f"{out}.part").write_bytes(path.read_bytes()[: 1 << 20])  # what a server sent before it died
    with served(tmp_path / "nginx", tmp_path / "good") as nginx:
        done = run(fetch_argv([f"http://{nginx.listen}"], digest, out))
        nginx.stop()
        log = (tmp_path / "nginx" / "access.log").read_text()
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == path.read_bytes()
    assert f"/{ARTIFACT_DIR}/{digest} 206 " in log, log  # a range request: only the rest was sent
    assert nginx.bytes_sent(f"/{ARTIFACT_DIR}/") < (2 << 20) + 4096, log


def test_every_server_down_fails_after_the_rounds_leaving_nothing(tmp_path, image):
    _path, digest = image
    out = tmp_path / "root.squashfs"
    done = run(fetch_argv([dead_server(), dead_server()], digest, out, "-r", "2", "-w", "0", "-c", "1"))
    assert done.returncode == 4, done.stderr
    assert f"no server delivered sha256:{digest} after 2 rounds" in done.stderr, done.stderr
    assert list(tmp_path.glob("root.squashfs*")) == []


def test_a_node_that_cannot_hold_the_image_stops_before_downloading(tmp_path, image):
    _path, digest = image
    out = tmp_path / "root.squashfs"
    with served(tmp_path / "nginx", tmp_path / "good") as nginx:
        done = run(fetch_argv([f"http://{nginx.listen}"], digest, out, "-m", str(1 << 30)))  # a 1 PiB reserve
        nginx.stop()
    assert done.returncode == 3, done.stderr
    assert "cannot be held in RAM" in done.stderr, done.stderr
    assert nginx.bytes_sent(f"/{ARTIFACT_DIR}/") < 1024  # the HEAD request only
    assert list(tmp_path.glob("root.squashfs*")) == []


@pytest.mark.parametrize("args, message", [
    (["-s", "http://a/", "-i", "sha256:1234", "-o", "x"], "hpc.image (-i) must be <64 lowercase hex>"),
    (["-s", "http://a/,http://a", "-i", "a" * 64, "-o", "x"], "hpc.servers (-s) names http://a/ twice"),
    (["-s", "tftp://a/", "-i", "a" * 64, "-o", "x"], "'tftp://a/' is not an http:// or https:// base URL"),
    (["-s", "", "-i", "a" * 64, "-o", "x"], "hpc.servers (-s) names no server"),
    (["-s", "http://a/", "-i", "a" * 64, "-o", "x", "-r", "x"], "'x' is not a whole number"),
])
def test_bad_arguments_name_the_argument_at_fault(tmp_path, args, message):
    done = run(["sh", str(FETCH_SCRIPT), *args])
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_wget_where_the_initramfs_has_no_curl(tmp_path, image):
    path, digest = image
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "wget", "sha256sum", "df", "wc", "tr", "dirname", "mv", "rm", "sleep", "mkdir"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    out = tmp_path / "root.squashfs"
    with served(tmp_path / "nginx", tmp_path / "good") as nginx:
        done = run([str(bin_dir / "sh"), str(FETCH_SCRIPT), "-s", f"{dead_server()},http://{nginx.listen}",
                    "-i", digest, "-o", str(out), "-w", "0", "-c", "2"], env={"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == path.read_bytes()


@pytest.mark.skipif(shutil.which("aria2c") is None, reason="needs aria2 (scripts/setup.sh)")
def test_a_swarm_that_gives_no_byte_is_left_for_http_after_the_stall_time(tmp_path, image):
    """The torrent's tracker does not answer: no peer, no byte. The node falls back on that lack of progress
    (-l 3 s of it), not after a fixed time, and fetches over HTTP; nothing of the swarm is left behind."""
    path, digest = image
    torrent = tmp_path / "image.torrent"
    torrent.write_bytes(make_torrent(path, f"http://127.0.0.1:{free_port()}/announce")[0])
    torrent_hex = publish(tmp_path / "good", torrent)
    out = tmp_path / "out" / "root.squashfs"
    out.parent.mkdir()
    with served(tmp_path / "nginx", tmp_path / "good") as nginx:
        done = run(fetch_argv([f"http://{nginx.listen}"], digest, out, "-t", torrent_hex, "-l", "3"))
    assert done.returncode == 0, done.stderr
    assert "the swarm gave no byte for 3 s (0 KiB of the image held): fetching over HTTP" in done.stderr, done.stderr
    assert f"fetched sha256:{digest} from http://{nginx.listen}/" in done.stderr, done.stderr
    assert out.read_bytes() == path.read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["root.squashfs"]


@pytest.mark.skipif(shutil.which("aria2c") is None or shutil.which("opentracker") is None or subprocess.run(
    ["/usr/bin/python3", "-c", "import libtorrent"], capture_output=True, check=False).returncode != 0,
    reason="needs aria2, opentracker, python3-libtorrent (scripts/setup.sh)")
def test_a_node_takes_the_image_from_the_swarm_as_soon_as_it_is_complete(tmp_path, image):
    """A real swarm on loopback: opentracker and the storm's super-seeding seeder (libtorrent). The node looks at its
    bytes only every 30 s (HPC_FETCH_POLL_S) and the swarm may stall 30 s: aria2c's completion hook wakes it, so it
    has the image, fetched peer-to-peer and verified, within seconds, and leaves its seeder's process id."""
    path, digest = image
    shared = Path(tempfile.mkdtemp(prefix="swarm-"))  # opentracker reads its whitelist as nobody
    procs = []
    try:
        shared.chmod(0o755)
        tracker_port, peer_port = free_port(), free_port()
        torrent = shared / "image.torrent"
        meta, info_hash = make_torrent(path, f"http://127.0.0.1:{tracker_port}/announce")
        torrent.write_bytes(meta)
        torrent_hex = publish(tmp_path / "good", torrent)
        (shared / "whitelist").write_text(info_hash + "\n")
        (shared / "whitelist").chmod(0o644)
        seed_dir = shared / "seed"
        seed_dir.mkdir()
        os.link(path, seed_dir / path.name)
        tracker = ["opentracker", "-i", "127.0.0.1", "-p", str(tracker_port), "-P",
                   str(tracker_port), "-d", "/", "-w", str(shared / "whitelist")]
        seeder = ["/usr/bin/python3", str(REPO / "benchmarks" / "storm_seeder.py"), "--torrent", str(torrent),
                  "--dir", str(seed_dir), "--listen", f"127.0.0.1:{peer_port}", "--upload-bytes", str(8 << 20),
                  "--stop-copies", "0"]
        for argv in (tracker, seeder):
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                                          stderr=subprocess.DEVNULL))
        out = tmp_path / "out" / "root.squashfs"
        out.parent.mkdir()
        with served(tmp_path / "nginx", tmp_path / "good") as nginx:
            started = time.monotonic()
            done = run(fetch_argv([f"http://{nginx.listen}"], digest, out, "-t", torrent_hex, "-l", "30"),
                       env={"HPC_FETCH_POLL_S": "30", "HPC_FETCH_SEED_S": "1", "HPC_FETCH_TRACKER_S": "1"})
            took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert f"fetched sha256:{digest} peer-to-peer" in done.stderr, done.stderr
        assert took < 20, (took, done.stderr)  # not the 30 s poll
        assert out.read_bytes() == path.read_bytes()
        seeding = int((out.parent / "root.squashfs.seeder").read_text())
        deadline = time.monotonic() + 30  # it seeds HPC_FETCH_SEED_S (1 s), then ends: nothing is left running
        while time.monotonic() < deadline and Path(f"/proc/{seeding}").exists():
            time.sleep(0.2)
        assert not Path(f"/proc/{seeding}").exists()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(shared, ignore_errors=True)
