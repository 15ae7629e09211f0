"""Name resolution fails for ~10 s, as it does on the build hosts: the archive check the plan runs and a
bootstrap both retry and succeed.

What is simulated, and why: the outage is made in a mount namespace of the step's own (``unshare --mount``),
whose ``/etc/resolv.conf`` names a resolver on 127.0.0.1 where nothing listens (glibc answers "Temporary failure
in name resolution" at once, as during the real outages) and whose ``/etc/hosts`` lacks the mirror's name; after
:data:`OUTAGE` seconds the test writes the name into that hosts file in place, and resolution works again. The
host's own resolver, its files and the network outside are not touched, and no query leaves the machine. The
mirror is the real local apt repository of tests/integration/apt_repo_support.py on loopback, under a name of
its own (``mirror.hpc-test.invalid``); gpgv, apt and mmdebstrap are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    BootstrapSpec,
    mmdebstrap_argv,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from apt_repo_support import AptRepo  # noqa: E402  pylint: disable=wrong-import-position

#: Seconds without name resolution: the outages seen on build hosts lasted about this long.
OUTAGE = 10.0
NAME = "mirror.hpc-test.invalid"

#: The plan's archive check (plugins/action/plan.py loads this view of every layer's sources), in a process of
#: its own so that it resolves names inside the namespace.
PLAN_CHECK = """
import json, sys
from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import ArchiveView, pending_updates
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source
source = Source("security", sys.argv[1], "bookworm-security", ("main",), sys.argv[2], "base")
view = ArchiveView.load([source], arch="amd64", cache_dir=sys.argv[3])
print(json.dumps({"network": view.network, "updates": [str(u) for u in pending_updates(view, {"openssl": "3.0.20-1"})]}))
"""


@pytest.fixture(name="outage")
def fixture_outage(tmp_path):
    """``run(argv)``: ``argv`` in a mount namespace whose name resolution fails for OUTAGE seconds."""
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    hosts.write_text("127.0.0.1 localhost\n", encoding="utf-8")
    resolv.write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:1\n", encoding="utf-8")

    def restore() -> None:
        time.sleep(OUTAGE)
        with open(hosts, "w", encoding="utf-8") as handle:  # in place: the bind mount holds this inode
            handle.write(f"127.0.0.1 localhost\n127.0.0.1 {NAME}\n")

    def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
        timer = threading.Thread(target=restore, daemon=True)
        started = time.monotonic()
        timer.start()
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"',
             str(hosts), str(resolv), *argv], capture_output=True, text=True, check=False, env=env, timeout=300)
        timer.join()
        return proc, time.monotonic() - started
    return run


@pytest.fixture(name="mirror")
def fixture_mirror(tmp_path):
    repo = AptRepo(tmp_path / "repo", suites=("bookworm-security",))
    repo.add_package("openssl", "3.0.22-1")
    repo.publish()
    with repo.serve() as uri:
        yield repo, uri.replace("127.0.0.1", NAME)
    repo.close()


def test_the_plans_archive_check_retries_through_an_outage(outage, mirror, tmp_path):
    repo, uri = mirror
    env = dict(os.environ, PYTHONPATH=str(REPO / ".collections"))
    proc, seconds = outage([sys.executable, "-c", PLAN_CHECK, uri, str(repo.keyring), str(tmp_path / "cache")], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)
    assert answer["updates"] == ["openssl 3.0.20-1 -> 3.0.22-1"]
    assert set(answer["network"].values()) == {"fetched"}
    assert seconds >= OUTAGE  # it did wait the outage out
    print(f"\narchive check through a {OUTAGE:g} s resolver outage: {seconds:.1f} s")


def test_a_bootstrap_retries_through_an_outage(outage, mirror, tmp_path):
    """The bootstrap's own steps: the mirror probe (source_problem), then mmdebstrap with the product's argv
    (variant extract of one small package: apt's download path, without a whole Debian from outside)."""
    repo, uri = mirror
    spec = BootstrapSpec(path=str(tmp_path / "root"), distro="debian", release="bookworm-security", mirror=uri,
                         variant="extract", packages=("openssl",), keyring=str(repo.keyring), updates=False,
                         security=False, cache_dir=str(tmp_path / "cache"))
    os.makedirs(spec.cache_dir)
    probe = ("import sys, json\n"
             "from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import BootstrapSpec, "
             "source_problem\n"
             f"spec = BootstrapSpec(path='/x', distro='debian', release='bookworm-security', mirror={uri!r}, "
             "updates=False, security=False)\n"
             "print(json.dumps(source_problem(spec.sources[0])))\n")
    env = dict(os.environ, PYTHONPATH=str(REPO / ".collections"))
    proc, seconds = outage([sys.executable, "-c", probe], env)
    assert proc.returncode == 0 and json.loads(proc.stdout) is None, proc.stdout + proc.stderr
    assert seconds >= OUTAGE

    proc, seconds = outage(mmdebstrap_argv(spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "root/usr/share/openssl/version").read_text(encoding="utf-8") == "3.0.22-1\n"
    assert seconds >= OUTAGE
    print(f"\nbootstrap through a {OUTAGE:g} s resolver outage: {seconds:.1f} s")
