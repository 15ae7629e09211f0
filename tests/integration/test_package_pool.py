"""One build cannot poison the packages another build installs from the shared package pool.

A build's package scripts and roles run as root in its working container, where the view of the pool is bound
over /var/cache/apt/archives. Here a real working container of the default base layer (buildah, the real
overlay view of plugins/module_utils/_build/caches.py) plays the hostile build: it rewrites a pooled .deb in
place (the size apt checks unchanged), drops a forged .deb and a link to the container's /etc/shadow among the
downloads, and is committed. The pool must be as before. A second build then finds, in its view, the genuine
package (apt installs it without a download) and not a file planted in the pool that its own apt lists do not
vouch for.

The pool is the test's own directory (a copy of two packages of the host's pool, whose names the base layer's
apt lists give): the host's pool, which other builds use, is never touched.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import DEFAULT_PREFIX, remove_prefix_images

from ansible_collections.hpc.stateless.plugins.module_utils._build import caches
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import LayerBuilder
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import layer_labels

HOST_POOL = Path("/var/cache/hpc-stateless/apt")
VIEWS = Path("/var/cache/hpc-stateless/.builds")
PARENT = f"{DEFAULT_PREFIX}/base:latest"
VICTIM = "libyaml-0-2_0.2.5-1_amd64.deb"  # in the base layer's lists, not installed in it, needs nothing else
PLANTED = "libnuma1_2.0.16-1_amd64.deb"
ARCHIVES = "/var/cache/apt/archives"
POISON = f"""
set -e
test -f {ARCHIVES}/{VICTIM}
printf 'EVIL' | dd of={ARCHIVES}/{VICTIM} bs=1 seek=100 conv=notrunc status=none
printf 'forged' > {ARCHIVES}/forged_1_amd64.deb
ln -s /etc/shadow {ARCHIVES}/shadow_1_amd64.deb
"""


def prefix_tag(prefix: str) -> str:
    """The part of a working container's name that says which image prefix it builds for (_contract/labels.py)."""
    return hashlib.sha256(prefix.encode("utf-8")).hexdigest()[:6]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def pool(tmp_path):
    """The test's own pool: a copy of the victim and of a package that will be poisoned by hand."""
    for name in (VICTIM, PLANTED):
        if not (HOST_POOL / name).is_file():
            pytest.fail(f"{HOST_POOL / name} is missing: run the default build first (make build)")
    directory = Path(f"/var/cache/hpc-stateless-test-pool-{uuid.uuid4().hex[:8]}") / "apt"
    directory.mkdir(parents=True)
    shutil.copyfile(HOST_POOL / VICTIM, directory / VICTIM)
    yield directory
    shutil.rmtree(directory.parent, ignore_errors=True)
    digest = hashlib.sha256(str(directory).encode("utf-8")).hexdigest()[:12]
    (VIEWS / f"{caches.HASHES_PREFIX}{digest}.json").unlink(missing_ok=True)  # the hashes kept for this pool


@pytest.fixture
def prefix():
    name = f"{DEFAULT_PREFIX}-pool-{uuid.uuid4().hex[:6]}"
    yield name
    remove_prefix_images(name)


def build(prefix: str, layer: str, pool: Path, script: str) -> tuple[LayerBuilder, subprocess.CompletedProcess]:
    key = hashlib.sha256(f"{layer}{uuid.uuid4()}".encode()).hexdigest()
    builder = LayerBuilder(Buildah(), layer, key, prefix)
    builder.start(PARENT, [{"path": ARCHIVES, "host_path": str(pool)}], False)
    try:
        proc = subprocess.run(["buildah", "run", builder.container, "--", "sh", "-c", script],
                              capture_output=True, text=True, check=False, timeout=300)
        builder.commit(layer_labels(layer, key, "base", "0" * 64, "test"), [], False)
    finally:
        builder.absent(False)
    return builder, proc


def test_a_hostile_build_changes_nothing_of_the_pool_and_the_next_build_takes_only_what_its_lists_vouch_for(
        pool, prefix):
    genuine = sha256(pool / VICTIM)
    _builder, proc = build(prefix, "poisoner", pool, POISON)
    assert proc.returncode == 0, proc.stderr
    assert sha256(pool / VICTIM) == genuine, "the build rewrote the pooled package in place"
    assert sorted(p.name for p in pool.iterdir()) == [VICTIM], "the build added files to the pool"

    # A pool poisoned before (same name and size as the archive's file, other bytes): never offered to apt.
    size = (HOST_POOL / PLANTED).stat().st_size
    (pool / PLANTED).write_bytes(b"!<arch>\n" + b"\0" * (size - 8))
    _builder, proc = build(prefix, "consumer", pool, f"""
        set -e
        test ! -e {ARCHIVES}/{PLANTED}
        apt-get install --no-download --yes --no-install-recommends libyaml-0-2
        dpkg -s libyaml-0-2 | grep -qx 'Status: install ok installed'
    """)
    # --no-download: apt installed the pool's genuine file from the view, or it failed
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in pool.iterdir()) == [PLANTED, VICTIM] and sha256(pool / VICTIM) == genuine
    # Nothing of either build is left: no view, no overlay.
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        assert not [line for line in handle if "/.builds/hpc-stateless-" in line and prefix_tag(prefix) in line]
    assert not [p for p in VIEWS.glob("*") if prefix_tag(prefix) in p.name]
