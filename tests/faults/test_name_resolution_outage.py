"""Name resolution fails for ~10 s, as it does on the build hosts: a plan and a bootstrap each retry and succeed.

What is simulated, and why: the outage is made in a mount namespace of the step's own (``unshare --mount``),
whose ``/etc/resolv.conf`` names a resolver on 127.0.0.1 where nothing listens (glibc answers "Temporary failure
in name resolution" at once, as during the real outages) and whose ``/etc/hosts`` lacks the mirror's name; after
:data:`OUTAGE` seconds the test writes, in place, the mirror's name into that hosts file and the host's own
resolver lines into that resolv.conf (glibc reads both again when they change), and resolution works again. The
host's own files are not touched. The bootstrap reads the real local apt repository of
tests/integration/apt_repo_support.py on loopback, under a name of its own (``mirror.hpc-test.invalid``: no
query for it leaves the machine); the plan is the real ``ansible-playbook`` plan of the default inventory, whose
sources are deb.debian.org (as tests/integration/test_plan_freshness.py reads them), over the default build's
images. gpgv, apt and mmdebstrap are the real ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import default_cache_dir
from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import (
    MODE_MAPPED,
    BootstrapSpec,
    bootstrap_commands,
)
from ansible_collections.hpc.stateless.plugins.module_utils._build.caches import new_bootstrap_view, remove_tree

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from apt_repo_support import AptRepo  # noqa: E402  pylint: disable=wrong-import-position

#: Seconds without name resolution: the outages seen on build hosts lasted about this long.
OUTAGE = 10.0
NAME = "mirror.hpc-test.invalid"


@pytest.fixture(name="outage")
def fixture_outage(tmp_path):
    """``run(argv)``: ``argv`` in a mount namespace whose name resolution fails for the first OUTAGE seconds."""
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    real_resolver = Path("/etc/resolv.conf").read_text(encoding="utf-8")

    def cut() -> None:
        hosts.write_text("127.0.0.1 localhost\n", encoding="utf-8")
        resolv.write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:1\n", encoding="utf-8")

    def restore() -> None:
        time.sleep(OUTAGE)
        # In place: each bind mount holds its file's inode.
        with open(hosts, "w", encoding="utf-8") as handle:
            handle.write(f"127.0.0.1 localhost\n127.0.0.1 {NAME}\n")
        with open(resolv, "w", encoding="utf-8") as handle:
            handle.write(real_resolver)

    def run(argv: list[str], env: dict[str, str] | None = None,
            cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float]:
        cut()
        timer = threading.Thread(target=restore, daemon=True)
        started = time.monotonic()
        timer.start()
        proc = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"',
             str(hosts), str(resolv), *argv], capture_output=True, text=True, check=False, env=env, cwd=cwd,
            timeout=600)
        seconds = time.monotonic() - started  # the step's own time: it outlasted the outage only by waiting it out
        timer.join()
        return proc, seconds
    return run


@pytest.fixture(name="shared")
def fixture_shared():
    """A directory any uid may search, for what the mapped bootstrap reads (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="hpc-outage-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture(name="mirror")
def fixture_mirror(shared):
    repo = AptRepo(shared / "repo", suites=("bookworm-security",))
    repo.add_package("openssl", "3.0.22-1")
    repo.publish()
    with repo.serve() as uri:
        yield repo, uri.replace("127.0.0.1", NAME)
    repo.close()


def test_a_bootstrap_retries_through_an_outage(outage, mirror, shared):
    """The bootstrap's own steps: the mirror probe (source_problem), then mmdebstrap with the product's command
    line as a root build runs it by default, in a user namespace of root's subordinate range (variant extract of
    one small package: apt's download path, without a whole Debian from outside)."""
    repo, uri = mirror
    ranges = idshift.root_ranges()
    spec = BootstrapSpec(path=str(shared / "root"), distro="debian", release="bookworm-security", mirror=uri,
                         variant="extract", packages=("openssl",), keyring=str(repo.keyring), updates=False,
                         security=False, cache_dir=str(shared / "cache"), mode=MODE_MAPPED, id_ranges=ranges)
    os.makedirs(spec.cache_dir)
    os.makedirs(spec.path)
    os.chown(spec.path, ranges[0].start, ranges[1].start)  # as the rootfs module gives it to the mapped root
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

    # The overlay's directories, as the product makes them for the mapped root.
    view = new_bootstrap_view(spec.cache_dir, spec.path, (ranges[0].start, ranges[1].start))
    try:
        [argv] = bootstrap_commands(spec)
        proc, seconds = outage(argv)
    finally:
        remove_tree(view)
    assert proc.returncode == 0, proc.stderr[-3000:]
    version = shared / "root/usr/share/openssl/version"
    assert version.read_text(encoding="utf-8") == "3.0.22-1\n"
    assert os.stat(version).st_uid == ranges[0].start  # written by the namespace's root
    assert seconds >= OUTAGE
    print(f"\nbootstrap through a {OUTAGE:g} s resolver outage: {seconds:.1f} s")


def test_a_plan_retries_through_an_outage(outage, tmp_path):
    """The default inventory's plan (check mode: it builds and writes nothing) over a copy of the archive cache
    whose records are all past max_age, so that it asks deb.debian.org again while names do not resolve."""
    from conftest import playbook_command  # pylint: disable=import-outside-toplevel
    from test_plan_freshness import PLAYBOOK  # pylint: disable=import-outside-toplevel
    cache = tmp_path / "archive"
    if os.path.isdir(default_cache_dir()):
        shutil.copytree(default_cache_dir(), cache, ignore=shutil.ignore_patterns("lock"))
    for record in (cache / "releases").glob("*.json") if cache.is_dir() else ():
        data = json.loads(record.read_text(encoding="utf-8"))
        data["checked"] = 0  # long ago: the plan asks the mirror (a conditional GET)
        record.write_text(json.dumps(data), encoding="utf-8")
    playbook, out = tmp_path / "plan.yml", tmp_path / "plan.json"
    playbook.write_text(PLAYBOOK.format(repo=REPO, out=out), encoding="utf-8")  # the plan as build.yml runs it
    argv, env = playbook_command(("--check", "-e", f"hpc_stateless_freshness_cache_dir={cache}"), REPO / "inventory",
                                 str(playbook))
    proc, seconds = outage(argv, {**os.environ, **env}, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    plan = json.loads(out.read_text(encoding="utf-8"))
    network = plan["freshness"]["network"]
    assert network and "none" not in network.values(), network  # every source was asked during the outage
    assert seconds >= OUTAGE
    print(f"\nplan through a {OUTAGE:g} s resolver outage: {seconds:.1f} s ({network})")
