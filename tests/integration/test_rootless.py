"""Build and pack as an unprivileged user (rootless buildah), compared with root's build of the same DAG.

The test runs as root: it makes the build user (USER, with subordinate ids and an overlay storage.conf),
builds tests/integration/rootless_inventory (base -> owners) and packs it once as root and once as
that user, then lists both packed cpio archives with GNU ``cpio -tv``. Both sides start with no layer
image of it and build both layers; base reuses the cached bootstrap: for the user, its own copy of root's
bootstrap image (copied once through an OCI archive and kept in the user's storage between runs).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, TEST_EXTRA_VARS, run_site
from rootless_support import (USER, as_user, buildah_as, copy_images, ensure_storage_conf, ensure_user, playbook_env,
                              tag_root_bootstrap, tags)

NO_IDS_USER = "hpcnoids"
PREFIX = "localhost/hpc-stateless-rootless"
INVENTORY = REPO / "tests" / "integration" / "rootless_inventory"
OUTPUT_ROOT = Path(tempfile.gettempdir()) / "hpc-stateless-rootless-tests"
VERSION = "1.0"
# systemd-nspawn needs root, so a rootless build cannot verify: both sides pack with the gate's explicit
# override (docs/rootless.md), the same flags for root and the user.
STAGES = ("-e", '{"hpc_stateless_site_stages": ["build", "pack"]}', "-e", f"hpc_stateless_image_prefix={PREFIX}",
          "-e", f"hpc_stateless_pack_version={VERSION}",
          "-e", "hpc_stateless_unverified_ok=rootless test: systemd-nspawn needs root")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates a user: the integration suite runs as root")


def user_playbook(user: str, project: Path, *extra: str) -> subprocess.CompletedProcess:
    """site.yml of this checkout run by ``user`` the way a user runs it (the callback enters buildah
    unshare); outputs go to ``project``."""
    argv = ["ansible-playbook", "-i", str(INVENTORY), str(REPO / "site.yml"),
            "-e", f"hpc_stateless_project_dir={project}", *TEST_EXTRA_VARS, *extra]
    proc = as_user(user, argv, playbook_env(), cwd=REPO)
    log = REPO / "build" / "test-logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"rootless-{user}.log").write_text(" ".join(argv) + "\n" + proc.stdout + proc.stderr)
    return proc


def remove_layer_images(user: str | None) -> None:
    """The base and owners images of PREFIX in the storage of ``user`` (root: None) removed, every name of them,
    ``:latest`` too (an image keeps living under any name left); the bootstrap cache is kept. Both sides start
    from the same storage: a layer rebuilt for archive updates is keyed by the updates of the image it
    replaces, so the keys compared below are equal only when both sides have the same history."""
    listing = buildah_as(user, "images", "--json")
    stale = [f"{PREFIX}/{layer}:{tag}" for layer in ("base", "owners")
             for tag in sorted(tags(listing, f"{PREFIX}/{layer}") | {"latest"})
             if f'"{PREFIX}/{layer}:{tag}"' in listing]
    if stale:
        buildah_as(user, "rmi", "--force", *stale)


@pytest.fixture(scope="module")
def build_user() -> str:
    """USER with subordinate ids and overlay storage, its layer images removed."""
    account = ensure_user(USER)
    ensure_storage_conf(account)
    remove_layer_images(USER)
    return USER


def cpio_listing(archive: Path) -> dict[str, str]:
    """``{path: 'mode owner group [major, minor]'}`` of a cpio.zst, from GNU ``cpio -tv`` (numbers for ids
    with no name on this host)."""
    data = subprocess.run(["zstd", "-dc", str(archive)], capture_output=True, check=True).stdout
    listing = subprocess.run(["cpio", "-tv", "--quiet"], input=data, capture_output=True, check=True).stdout
    entries = {}
    for line in listing.decode("utf-8", "replace").splitlines():
        fields = line.split()
        mode, owner, group = fields[0], fields[2], fields[3]
        name = line.split(" -> ")[0].split()[-1]
        device = f" {fields[4]}{fields[5]}" if mode[0] in "cb" else ""
        entries[name] = f"{mode} {owner} {group}{device}"
    return entries


def squashfs_listing(image: Path) -> dict[str, str]:
    """``{path: 'mode uid/gid'}`` of a squashfs, from ``unsquashfs -lln`` (numeric owners)."""
    listing = subprocess.run(["unsquashfs", "-lln", "-d", "", str(image)], capture_output=True, text=True,
                             check=True).stdout
    entries = {}
    for line in listing.splitlines():
        match = re.match(r"(\S+) (\d+/\d+) .* \d{4}-\d\d-\d\d \d\d:\d\d /(.+)$", line)
        if match:
            entries[match.group(3).split(" -> ")[0]] = f"{match.group(1)} {match.group(2)}"
    return entries


@pytest.fixture(scope="module")
def packs(build_user) -> dict[str, dict]:
    """The DAG built and packed by root and by the build user: ``{'root'|'user': {listing, manifest, stdout}}``."""
    OUTPUT_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="run-", dir=OUTPUT_ROOT))
    os.chmod(tmp, 0o755)
    tag_root_bootstrap(PREFIX)
    remove_layer_images(None)
    root_project, user_project = tmp / "root", tmp / "user"
    root_project.mkdir()
    user_project.mkdir()
    os.chown(user_project, pwd.getpwnam(USER).pw_uid, -1)
    root = run_site(*STAGES, "-e", f"hpc_stateless_project_dir={root_project}", inventory=INVENTORY)
    assert root.returncode == 0, root.stdout[-4000:] + root.stderr[-2000:]
    copy_images(f"{PREFIX}/bootstrap/base", USER, tmp)
    user = user_playbook(USER, user_project, *STAGES)
    assert user.returncode == 0, user.stdout[-6000:] + user.stderr[-2000:]
    result = {}
    for side, project, stdout in (("root", root_project, root.stdout), ("user", user_project, user.stdout)):
        version_dir = project / "build" / "images" / "owners" / VERSION
        result[side] = {"listing": cpio_listing(version_dir / "owners.cpio.zst"), "stdout": stdout,
                        "squashfs": squashfs_listing(version_dir / "owners.squashfs"),
                        "manifest": json.loads((version_dir / "manifest.json").read_text())}
    yield result
    shutil.rmtree(tmp, ignore_errors=True)


def assert_same_apart_from_root_devices(user: dict[str, str], root: dict[str, str]) -> None:
    """Every entry of the two listings alike, but the device nodes of root's image (see the cpio test)."""
    devices = {name for name, entry in root.items() if entry[0] in "cb"}
    differ = {name for name in set(user) | set(root) if user.get(name) != root.get(name)}
    assert differ <= devices, sorted(differ - devices)[:20]
    assert len(user) > 5000


def test_user_builds_the_layer_itself_with_roots_content_key(packs):
    assert re.search(r"layer owners committed as " + re.escape(PREFIX) + r"/owners:[0-9a-f]{64}", packs["user"]["stdout"])
    assert packs["user"]["manifest"]["source"]["image"] == packs["root"]["manifest"]["source"]["image"]


def test_owners_and_modes_in_the_packed_cpio_match_the_root_build(packs):
    user, root = packs["user"]["listing"], packs["root"]["listing"]
    assert user["usr/local/bin/owners-setuid"] == "-rwsr-xr-x root root"
    assert user["usr/bin/passwd"] == "-rwsr-xr-x root root"
    assert user["srv/owners-sticky"] == "drwxrwxrwt root root"
    assert user["srv/owners-nobody"] == "-rw-r----- nobody nogroup"
    assert user["srv/owners-numeric"] == "-rw------- 1234 4321"
    # Device nodes: a rootless storage cannot hold them (no mknod in a user namespace), so the user's
    # image has none and /dev is the kernel's devtmpfs at boot; pack writes the one the kernel opens
    # before that, /dev/console.
    assert user["dev/console"].startswith("c") and user["dev/console"].endswith(" 5,1")
    assert {name for name, entry in user.items() if entry[0] in "cb"} == {"dev/console"}
    assert_same_apart_from_root_devices(user, root)


def test_user_without_subordinate_ids_gets_the_line_to_add(tmp_path):
    account = ensure_user(NO_IDS_USER, subids=False)
    for path in ("/etc/subuid", "/etc/subgid"):
        text = Path(path).read_text(encoding="utf-8")
        assert not any(line.startswith(f"{NO_IDS_USER}:") for line in text.splitlines()), \
            f"{NO_IDS_USER} must have no subordinate ids in {path} for this test"
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, account.pw_uid, -1)
    proc = user_playbook(NO_IDS_USER, project, *STAGES)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"user {NO_IDS_USER} has no subordinate uids in /etc/subuid" in said, said[-2000:]
    assert re.search(rf"add the line '{NO_IDS_USER}:\d+:65536' to /etc/subgid", said), said[-2000:]
    assert "Traceback" not in said


def test_owners_and_modes_in_the_packed_squashfs_match_the_root_build(packs):
    user, root = packs["user"]["squashfs"], packs["root"]["squashfs"]
    assert user["usr/local/bin/owners-setuid"] == "-rwsr-xr-x 0/0"
    assert user["srv/owners-nobody"] == "-rw-r----- 65534/65534"
    assert user["srv/owners-numeric"] == "-rw------- 1234/4321"
    assert user["srv/owners-sticky"] == "drwxrwxrwt 0/0"
    assert_same_apart_from_root_devices(user, root)
