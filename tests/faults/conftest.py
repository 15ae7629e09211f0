"""make faults: inject a failure, then assert what survives it.

Every test here is one fault case: it kills, fills, corrupts or misconfigures something for
real (SIGKILL of a whole process group, an ext4 file system on a loop device, a flipped byte,
a bad inventory) and checks what the build, pack and deploy steps left. The run ends with a
summary of cases run, survived (passed) and failed.

The suite reuses the integration suite's helpers (tests/integration/conftest.py and its
support modules): they are loaded under their own module name, and the names those support
modules import from ``conftest`` are provided here too.

Everything is built into an image prefix of the session's own, from the small DAG in
``FAULTS_LAYERS`` (the bootstrapped root of the default build is reused when its key matches,
as tests/integration/test_plan_ci.py does), and removed at the end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

FAULTS = Path(__file__).resolve().parent
REPO = FAULTS.parents[1]
INTEGRATION = REPO / "tests" / "integration"
FAULTS_ROLE = FAULTS / "roles" / "faults_layer"
DEFAULT_PREFIX = "localhost/hpc-stateless"


def _load_integration_helpers():
    spec = importlib.util.spec_from_file_location("hpc_stateless_integration_helpers", INTEGRATION / "conftest.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {INTEGRATION / 'conftest.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_integration = _load_integration_helpers()
# The integration helpers, under the names tests/integration/*_support.py import from ``conftest``.
BUILDAH_ENV = _integration.BUILDAH_ENV
TEST_INVENTORY = _integration.TEST_INVENTORY
buildah = _integration.buildah
layer_images = _integration.layer_images
our_containers = _integration.our_containers
our_mounts = _integration.our_mounts
run_site = _integration.run_site
playbook_command = _integration._playbook_command  # pylint: disable=protected-access

sys.path[:0] = [str(INTEGRATION), str(REPO / "tests" / "unit" / "plugins" / "module_utils")]

# base: the bootstrap spec of the default and the integration inventories (same bootstrap key, so
# the default build's bootstrapped root is reused); faulty: tests/faults/roles/faults_layer.
FAULTS_LAYERS = {
    "base": {
        "bootstrap": {
            "distro": "debian", "release": "bookworm", "variant": "minbase",
            "mirror": "http://deb.debian.org/debian",
            "packages": ["systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "iproute2", "ca-certificates"],
        },
        "roles": [],
    },
    "faulty": {"parent": "base", "roles": [str(FAULTS_ROLE)]},
}
FAULTS_IMAGE = "faults"
FAULTS_IMAGES = {FAULTS_IMAGE: {"layer": "faulty", "formats": ["cpio.zst"]}}


@dataclass(frozen=True)
class Site:
    """The session's build site: an inventory of the faults DAG and the image prefix it builds into."""

    prefix: str
    inventory: Path

    @property
    def extra(self) -> tuple[str, ...]:
        return ("-e", f"hpc_stateless_image_prefix={self.prefix}")

    def inventory_with(self, directory: Path, layers: dict | None = None, **group_vars) -> Path:
        """A copy of the inventory with other layers and/or more group variables."""
        write_build_inventory(directory, layers if layers is not None else FAULTS_LAYERS, **group_vars)
        return directory


def write_build_inventory(directory: Path, layers: dict, **group_vars) -> Path:
    (directory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text((TEST_INVENTORY / "hosts.yml").read_text())
    (directory / "group_vars" / "all" / "layers.yml").write_text(yaml.safe_dump(
        {"hpc_stateless_layers": layers, "hpc_stateless_images": FAULTS_IMAGES, **group_vars}))
    return directory


def start_playbook(*extra: str, inventory: Path, playbook: str = "site.yml", log: Path,
                   env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a playbook in a session (and process group) of its own, output to ``log``, so a test can
    stop and SIGKILL everything it started at once."""
    argv, base_env = playbook_command(extra, inventory, playbook)
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=REPO, env={**base_env, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _seed_bootstrap(prefix: str) -> None:
    """Tag the default build's bootstrapped roots into ``prefix`` (a name only: removing it later
    untags, the default's image stays). The build uses the one whose key matches."""
    for ref in layer_images(DEFAULT_PREFIX):
        name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
        if name == "bootstrap/base" and len(tag) == 64:
            buildah("tag", ref, f"{prefix}/{name}:{tag}", check=False)


def remove_prefix(prefix: str) -> None:
    """Remove the working containers and images of ``prefix`` (images shared by name only are untagged)."""
    for name in our_containers(prefix):
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)
    refs = list(layer_images(prefix))
    if refs:
        buildah("rmi", "--force", *refs, check=False)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    """The faults DAG built once into a prefix of this session; removed after the session."""
    prefix = f"localhost/hpc-stateless-faults-{uuid.uuid4().hex[:6]}"
    inventory = write_build_inventory(tmp_path_factory.mktemp("faults-site") / "inventory", FAULTS_LAYERS)
    the_site = Site(prefix, inventory)
    _seed_bootstrap(prefix)
    try:
        built = run_site(*the_site.extra, inventory=inventory)
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
        yield the_site
    finally:
        remove_prefix(prefix)


@contextlib.contextmanager
def small_fs(mountpoint: Path, size_mib: int, *mkfs_args: str):
    """A real ext4 file system of ``size_mib`` MiB on a loop device at ``mountpoint``; unmounted
    and deleted on the way out, whatever happened inside."""
    image = mountpoint.parent / f".{mountpoint.name}-{uuid.uuid4().hex[:6]}.img"
    subprocess.run(["truncate", "-s", f"{size_mib}M", str(image)], check=True)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", *mkfs_args, str(image)], check=True)
        mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True)
        try:
            yield mountpoint
        finally:
            for _attempt in range(50):
                if subprocess.run(["umount", str(mountpoint)], check=False).returncode == 0:
                    break
                time.sleep(0.1)  # a killed writer may still hold a file open for a moment
            else:
                subprocess.run(["umount", "-l", str(mountpoint)], check=False)
    finally:
        image.unlink(missing_ok=True)


# --------------------------------------------------------------------------- the summary


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # pylint: disable=unused-argument
    """Cases run, survived (passed) and failed, each case named."""
    if config.getoption("collectonly"):
        return
    outcomes: dict[str, str] = {}
    for key in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(key, []):
            nodeid = report.nodeid
            if not nodeid.startswith("tests/faults/"):
                continue
            if report.outcome == "passed" and report.when != "call":
                continue
            # A failed setup or teardown fails the case even when its call passed.
            if outcomes.get(nodeid) in ("failed", "error") and report.outcome == "passed":
                continue
            outcomes[nodeid] = "failed" if report.outcome in ("failed", "error") else report.outcome
    if not outcomes:
        return
    survived = sorted(n for n, o in outcomes.items() if o == "passed")
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    skipped = sorted(n for n, o in outcomes.items() if o == "skipped")
    terminalreporter.section("fault injection: what survived")
    for nodeid in survived:
        terminalreporter.line(f"survived  {nodeid}")
    for nodeid in failed:
        terminalreporter.line(f"FAILED    {nodeid}")
    for nodeid in skipped:
        terminalreporter.line(f"skipped   {nodeid}")
    terminalreporter.line(f"cases run: {len(survived) + len(failed)}, survived: {len(survived)}, "
                          f"failed: {len(failed)}" + (f", skipped: {len(skipped)}" if skipped else ""))


# --------------------------------------------------------------------------- pack outputs to deploy


@pytest.fixture(scope="session")
def small_packs(tmp_path_factory) -> Path:
    """Versions v1 and v2 of image ``faults``, packed by the real module from small directory trees."""
    from faults_support import pack_dir  # pylint: disable=import-outside-toplevel

    out = tmp_path_factory.mktemp("small-packs")
    for version in ("v1", "v2"):
        rc, result = pack_dir(out, version, out.parent / f"{out.name}-trees")
        assert rc == 0, result.get("msg")
    return out


@pytest.fixture(scope="session")
def layer_pack(site, tmp_path_factory) -> Path:
    """The layer ``faulty`` packed by playbooks/pack.yml as version ``big`` (the base root plus 48 MiB of
    random data, ~120 MB of cpio.zst): large enough that copying it takes a moment."""
    out = tmp_path_factory.mktemp("layer-pack")
    packed = run_site(*site.extra, "-e", f"hpc_stateless_pack_output_dir={out}", "-e", "hpc_stateless_pack_version=big",
                      inventory=site.inventory, playbook="playbooks/pack.yml")
    assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
    return out
