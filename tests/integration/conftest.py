"""Helpers for integration tests that run site.yml against real buildah and debootstrap."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import container_owner

REPO = Path(__file__).resolve().parents[2]
TEST_INVENTORY = REPO / "tests" / "integration" / "inventory"
BUILDAH_ENV = {**os.environ, "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot")}


#: make test runs this suite on two pytest-xdist workers (``-n 2 --dist loadgroup``): every test of a file runs on
#: one worker (its module fixtures built once), and the files of a group below on the same worker, one after the
#: other, because they share something of the host that the product does not share between builds: the test
#: cluster of booted images and the Slurm ports of its daemons (cluster), the build user and its storage
#: (rootless_support's hpcbuild) and two cores' worth of TCG for one qemu guest at a time (qemu). Everything
#: else a test makes is its own (an image prefix, a project, a runtime or boot directory) or is the host's
#: state that builds share by design (apt caches, buildah storage, verify records: their locks are the product's).
WORKER_GROUPS = {
    "cluster": ("test_cluster_jobs.py", "test_cluster_rollout.py", "test_compliance_drift.py",
                "test_compliance_live.py", "test_compliance_openscap.py", "test_nspawn_slurm.py"),
    "qemu-and-build-user": ("test_pack.py", "test_pack_live.py", "test_pack_two_stage.py", "test_pack_capabilities.py",
                            "test_pack_hwprofile.py",
                            "test_deploy_pxe.py", "test_deploy_http.py", "test_rootless.py", "test_rootfs_rpm.py"),
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's worker group (xdist_group): its WORKER_GROUPS group, or its own file."""
    group_of = {name: group for group, names in WORKER_GROUPS.items() for name in names}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of.get(item.path.name, item.path.name)))


#: Extra variables of every playbook a test runs, before the test's own (a later ``-e`` wins, so a test can
#: turn a setting back on). Lynis costs 45-60 s of each verify boot on the 2-core CI host, OpenSCAP ~15 s: both
#: score the default image in ``make build`` (inventory/), and test_verify_lynis.py and test_verify_openscap.py
#: hold those verdicts; the test projects verify their images with the compliance suite alone.
TEST_EXTRA_VARS = ("-e", "hpc_stateless_verify_lynis=false", "-e", "hpc_stateless_verify_openscap=false")


def playbook_command(extra: tuple[str, ...], inventory: Path, playbook: str) -> tuple[list[str], dict[str, str]]:
    env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_NOCOLOR": "1"}
    return [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(REPO / playbook),
            *TEST_EXTRA_VARS, *extra], env


def run_site(*extra: str, inventory: Path = TEST_INVENTORY, playbook: str = "site.yml",
             env_extra: dict[str, str] | None = None, log_prefix: str = "") -> subprocess.CompletedProcess:
    """Run a playbook of the checkout the way a user does, and capture its output; the log goes to
    build/test-logs/<log_prefix><8 hex>.log. ``env_extra`` is added to the playbook's environment."""
    argv, env = playbook_command(extra, inventory, playbook)
    env.update(env_extra or {})
    # stdin /dev/null: ansible-playbook refuses a non-blocking one, which a program an earlier test started (a qemu,
    # a buildah run) may have left on the inherited file description; a module-scoped fixture runs before the
    # autouse blocking_standard_streams.
    proc = subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=False)
    log = REPO / "build" / "test-logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{log_prefix}{uuid.uuid4().hex[:8]}.log").write_text(" ".join(argv) + "\n" + proc.stdout + proc.stderr)
    return proc


def listing_raced(args: tuple[str, ...], proc: subprocess.CompletedProcess) -> bool:
    """Whether ``buildah <args>`` was a listing that failed whole because another build removed a container or
    image while buildah read it (the product's Buildah._listing asks again the same way): ask again."""
    return args[:1] in (("containers",), ("images",)) and proc.returncode != 0 and "not known" in proc.stderr


def buildah(*args: str, check: bool = True) -> str:
    # A fresh /dev/null as stdin: `buildah run` with chroot isolation makes its stdin non-blocking, and an
    # inherited one would stay so for every later ansible-playbook of the session ("Non-blocking file handles").
    for _attempt in range(5):
        proc = subprocess.run(["buildah", *args], env=BUILDAH_ENV, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, check=False)
        if not listing_raced(args, proc):
            break
    if check and proc.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def commit_changed_image(base: str, ref: str, change, name: str) -> str:
    """Commit ``change(root)`` applied to a working container ``name`` of ``base`` as image ``ref``;
    a failed change leaves no container or mount behind."""
    buildah("from", "--pull=never", "--quiet", "--name", name, base)
    try:
        change(buildah("mount", name).strip())
        buildah("umount", name)
        buildah("commit", "--quiet", "--rm", name, ref)
    except BaseException:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)
        raise
    return ref


def layer_images(prefix: str) -> dict[str, str]:
    """``{image reference: image id}`` for every image under ``prefix``."""
    found = {}
    for image in json.loads(buildah("images", "--json") or "[]") or []:
        for name in image.get("names") or []:
            if name.startswith(prefix + "/"):
                found[name] = image["id"]
    return found


DEFAULT_PREFIX = "localhost/hpc-stateless"


def tag_default_layers(prefix: str, names: tuple[str, ...] = ("base", "bootstrap/base")) -> None:
    """Tag the default build's content-keyed images of layers ``names`` into the test's own ``prefix``, so a
    test's plan finds them cached under their content keys and builds only its own layers."""
    for ref in layer_images(DEFAULT_PREFIX):
        name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
        if name in names and len(tag) == 64:
            buildah("tag", ref, f"{prefix}/{name}:{tag}")


def remove_prefix_images(prefix: str) -> None:
    """Remove every image under ``prefix`` (the test's own; the default build's images stay)."""
    refs = list(layer_images(prefix))
    if refs:
        buildah("rmi", "--force", *refs, check=False)


@contextlib.contextmanager
def default_base_prefix(stem: str) -> Iterator[str]:
    """A test's own image prefix (``localhost/hpc-stateless-<stem>-<random>``) holding the default build's base layer
    and bootstrapped root under their content keys (:func:`tag_default_layers`): the test builds only its own layers.
    Its images are removed afterwards."""
    prefix = f"{DEFAULT_PREFIX}-{stem}-{uuid.uuid4().hex[:6]}"
    tag_default_layers(prefix)
    try:
        yield prefix
    finally:
        remove_prefix_images(prefix)


def apt_leaf_inventory(root: Path, leaf: str, run: str) -> Path:
    """A project's inventory: the default base layer and its own leaf layer ``leaf``, whose role (tests/roles/site_apt_leaf)
    installs a package with apt; ``run`` makes the leaf's content key the run's own."""
    default = yaml.safe_load((REPO / "inventory" / "group_vars/all/layers.yml").read_text(encoding="utf-8"))
    spec = {
        "hpc_stateless_layers": {
            "base": default["hpc_stateless_layers"]["base"],
            leaf: {"parent": "base", "roles": ["site_apt_leaf"], "vars": {"site_apt_leaf_project": f"{leaf}-{run}"}},
        },
        "hpc_stateless_images": {leaf: {"layer": leaf, "formats": ["cpio.zst"]}},
    }
    inventory = root / leaf / "inventory"
    (inventory / "group_vars/all").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text((REPO / "inventory" / "hosts.yml").read_text(encoding="utf-8"))
    (inventory / "group_vars/all/layers.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return inventory


def image_labels(ref: str) -> dict[str, str]:
    data = json.loads(buildah("inspect", "--type", "image", ref))
    return data["OCIv1"]["config"].get("Labels") or {}


def _prefix_tag(prefix: str) -> str:
    """The part of a working-container name that says which image prefix it builds for."""
    return hashlib.sha256(prefix.rstrip("/").encode("utf-8")).hexdigest()[:6]


def our_containers(prefix: str | None = None) -> list[str]:
    """Working containers of ours; with ``prefix``, only those building into that prefix
    (other builds may run on the same host at the same time)."""
    names = [c["containername"] for c in json.loads(buildah("containers", "--json") or "[]") or []
             if c["containername"].startswith("hpc-stateless-")]
    if prefix is not None:
        names = [n for n in names if re.fullmatch(rf"hpc-stateless-.+-{_prefix_tag(prefix)}-[0-9a-f]{{12}}", n)]
    return names


def leftover_owned_containers(*purposes: str) -> list[str]:
    """Working containers of a run (pack's, the diff's: named ``<purpose>-<tag>-pid<pid>`` of its process,
    _contract/labels.py) whose process is gone, a zombie included (as pack judges its own stale containers):
    leaked. One whose process runs is another test's run at work (make test runs two workers)."""
    leaked = []
    for name in our_containers():
        owner = next((pid for pid in (container_owner(name, p) for p in purposes) if pid is not None), None)
        if owner is None:
            continue
        info = _process.proc_stat(owner)
        if info is None or not info.running:
            leaked.append(name)
    return leaked


def leftover_pack_containers() -> list[str]:
    return leftover_owned_containers("pack")


#: The host's default containers-storage, the one ``buildah mount`` lists; a test's own storage (test_plan_ci's
#: CI runners under its tmp_path) is that test's to check.
DEFAULT_OVERLAY = "/var/lib/containers/storage/overlay/"


def _our_mount_targets() -> list[str]:
    """Package-cache binds and container-root mounts in the default storage, from /proc/self/mountinfo."""
    targets = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            root, target = fields[3], fields[4].replace("\\040", " ")
            if target.startswith(DEFAULT_OVERLAY) and (root.startswith("/var/cache/hpc-stateless") or "/merged" in target):
                targets.append(target)
    return targets


def our_mounts() -> list[str]:
    """Leaked mounts: package-cache binds and container-root mounts that belong to no live
    working container (a live build elsewhere on the host is not a leak). A mount counts only when it was there
    before and after buildah listed the live ones: another build mounting or unmounting meanwhile (make test runs
    two workers) is not taken for a leak."""
    before = set(_our_mount_targets())
    live = [line.split(None, 1)[1].strip() for line in buildah("mount").splitlines() if " " in line]
    return [target for target in _our_mount_targets() if target in before
            and not any(target == m or target.startswith(m + "/") for m in live)]


def read_from_image(ref: str, path: str) -> str:
    """Read one file from an image through a throw-away working container."""
    name = f"hpc-stateless-read-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, ref)
    try:
        root = buildah("mount", name).strip()
        return Path(root, path.lstrip("/")).read_text(encoding="utf-8")
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


@pytest.fixture(autouse=True)
def blocking_standard_streams():
    """Each test starts with blocking standard streams: ansible-playbook refuses to run with a non-blocking stdin,
    and a program a test started (a qemu, a server) may have made the shared file description non-blocking."""
    for fd in (0, 1, 2):
        try:
            os.set_blocking(fd, True)
        except OSError:  # closed (CI runs without standard input)
            pass
    yield


@pytest.fixture(scope="session")
def image_prefix():
    """A prefix of our own, so the test builds everything for real and removes it after."""
    prefix = f"localhost/hpc-stateless-test-{uuid.uuid4().hex[:6]}"
    yield prefix
    refs = list(layer_images(prefix))
    if refs:
        buildah("rmi", "--force", *refs, check=False)


@pytest.fixture(scope="session")
def live_pack(tmp_path_factory):
    """The squashfs live image of pack_dracut_inventory, built (cached) and packed once per worker: its version
    directory and the seconds of its build and pack. test_pack_live and test_pack_two_stage boot it (both in the
    qemu group, so on one worker); they read it and change only copies."""
    from pack_support import pack_live_image  # pylint: disable=import-outside-toplevel

    output = tmp_path_factory.mktemp("live-pack")
    times: dict[str, float] = {}
    yield pack_live_image(output, times), times
    shutil.rmtree(output, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    """The test cluster of booted images (tests/integration/cluster_support.py): controller
    ``slurmctl``, compute nodes ``node001`` and ``node002``, one per session for every test that
    asks for it; stopped, and checked to leave nothing behind, at the end of the session."""
    from cluster_support import cluster_session  # pylint: disable=import-outside-toplevel

    yield from cluster_session()
