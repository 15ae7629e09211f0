"""The fault suite's site: its layer DAG, inventories, playbook runs and the integration helpers.

The integration suite's helpers (tests/integration/conftest.py) are loaded under a module name of
their own and re-exported here; the fault cases import from this module (a unique name), never
from ``conftest``, so they work whichever ``conftest`` pytest has loaded last.
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


integration = _load_integration_helpers()
# The integration helpers the fault cases use.
BUILDAH_ENV = integration.BUILDAH_ENV
TEST_INVENTORY = integration.TEST_INVENTORY
buildah = integration.buildah
commit_changed_image = integration.commit_changed_image
layer_images = integration.layer_images
tag_default_layers = integration.tag_default_layers
default_base_prefix = integration.default_base_prefix
remove_prefix_images = integration.remove_prefix_images
apt_leaf_inventory = integration.apt_leaf_inventory
our_containers = integration.our_containers
our_mounts = integration.our_mounts
run_site = integration.run_site
playbook_command = integration.playbook_command
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
    # The faulty layer exists to be packed and deployed under faults, never booted: it passes pack's
    # verification gate on the explicit override (a warning per pack, recorded in the manifest).
    group_vars.setdefault("hpc_stateless_unverified_ok", "fault test: the faulty layer is packed to be broken, not booted")
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


def seed_bootstrap(prefix: str) -> None:
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
