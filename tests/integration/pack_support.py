"""Helpers of the pack integration tests: which image to pack, mounts, readers, a qemu boot.

The tests pack the default ``compute`` image (inventory/) when its layer is built and carries
a kernel; until the default DAG installs one, they fall back to a private DAG
(tests/integration/pack_inventory: base -> packkernel with linux-image-amd64) under the
fixed prefix below, which stays cached between sessions so a rerun builds nothing.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import select
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from conftest import REPO, buildah, run_site, tag_default_layers
from deploy_support import QEMU_AMD64

DEFAULT_INVENTORY = REPO / "inventory"
PACK_INVENTORY = REPO / "tests" / "integration" / "pack_inventory"
# The squashfs live DAG (base -> packkernel -> packdracut -> packlive) under PACK_PREFIX: test_pack_live.py.
DRACUT_INVENTORY = REPO / "tests" / "integration" / "pack_dracut_inventory"
PACK_PREFIX = "localhost/hpc-stateless-packtest"
OUTPUT_ROOT = Path(tempfile.gettempdir()) / "hpc-stateless-pack-tests"

# What the default excludes drop below the root (contents of these directories, the directories stay).
EMPTIED_DIRS = ("proc", "sys", "run", "tmp", "var/tmp", "boot", "var/lib/apt/lists", "var/log/journal",
                "var/cache/apt/archives/partial", "var/cache/dnf", "var/cache/yum", "var/cache/zypp")
DROPPED_NAMES = ("vmlinuz", "vmlinuz.old", "initrd.img", "initrd.img.old")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Printed by a transient unit ordered after multi-user.target (see IMAGE_RELEASE_TO_CONSOLE): the
# manager's own "Reached target" line is not reliable on a serial console (systemd holds its status
# output back while a unit uses the console, and shortens unit names to the console width).
MULTI_USER = r"multi-user\.target\s+loaded\s+active\s+active"


@dataclass(frozen=True)
class PackTarget:
    image: str
    inventory: Path
    extra: tuple[str, ...]
    output: Path
    version_dir: Path
    manifest: dict
    playbook_stdout: str
    why: str

    @property
    def source_image(self) -> str:
        return self.manifest["source"]["image"]

    def artifact(self, fmt: str) -> Path:
        return self.version_dir / f"{self.image}.{fmt}"


# Pinned: the default (git describe of this checkout) moves whenever someone commits mid-session.
# Debian-style, so every pack test also carries '~' and '+' through the version directory and the release file.
TEST_VERSION = "1.0~pack+test1"


# The default compute image passes pack's verification gate on the record make test's site.yml wrote
# (build -> verify -> pack). The private test layers (a kernel, dracut) are never booted by verify: they
# pass on the explicit override, which pack prints as a warning and records in the manifest.
TEST_LAYERS_UNVERIFIED = ("-e", json.dumps({"hpc_stateless_unverified_ok": "pack test: a private kernel test layer, "
                                                                           "not booted by verify"}))


def run_pack_playbook(inventory: Path, output: Path, *extra: str) -> subprocess.CompletedProcess:
    gate = () if inventory == DEFAULT_INVENTORY else TEST_LAYERS_UNVERIFIED
    return run_site("-e", f"hpc_stateless_pack_output_dir={output}", "-e", f"hpc_stateless_pack_version={TEST_VERSION}",
                    *gate, *extra, inventory=inventory, playbook="playbooks/pack.yml")


def _version_dir(output: Path, image: str) -> Path:
    found = [p for p in (output / image).iterdir() if not p.name.startswith(".")]
    assert len(found) == 1, f"expected one version directory under {output / image}, found {found}"
    return found[0]


@functools.lru_cache(maxsize=None)
def pack_target() -> PackTarget:
    """Pack the image the tests use with playbooks/pack.yml, once per session."""
    OUTPUT_ROOT.mkdir(parents=True, exist_ok=True)
    output = Path(tempfile.mkdtemp(prefix="playbook-", dir=OUTPUT_ROOT))
    default = run_pack_playbook(DEFAULT_INVENTORY, output, "-e", '{"hpc_stateless_pack_images": ["compute"]}')
    if default.returncode == 0:
        version_dir = _version_dir(output, "compute")
        return PackTarget("compute", DEFAULT_INVENTORY, (), output, version_dir,
                          json.loads((version_dir / "manifest.json").read_text()), default.stdout,
                          "default compute image")
    reason = next((line.strip() for line in default.stdout.splitlines() if '"msg"' in line or "fatal" in line),
                  "pack.yml failed")
    extra = ("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}")
    build = run_site(*extra, inventory=PACK_INVENTORY)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-2000:]
    packed = run_pack_playbook(PACK_INVENTORY, output, *extra)
    assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
    version_dir = _version_dir(output, "packtest")
    return PackTarget("packtest", PACK_INVENTORY, extra, output, version_dir,
                      json.loads((version_dir / "manifest.json").read_text()), packed.stdout,
                      f"private packkernel layer (the default compute image could not be packed: {reason[:300]})")


def pack_live_image(output: Path, times: dict[str, float]) -> Path:
    """Build (cached) and pack the squashfs live image of DRACUT_INVENTORY into ``output``; its version
    directory. ``times`` gets the seconds of ``build`` and ``pack``."""
    extra = ("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}")
    start = time.monotonic()
    # The default build's bootstrapped root is tagged into the prefix first: a fresh checkout bootstraps once.
    tag_default_layers(PACK_PREFIX, ("bootstrap/base",))
    built = run_site(*extra, inventory=DRACUT_INVENTORY)
    assert built.returncode == 0, built.stdout[-3000:]
    times["build"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    packed = run_pack_playbook(DRACUT_INVENTORY, output, *extra)
    assert packed.returncode == 0, packed.stdout[-3000:]
    times["pack"] = round(time.monotonic() - start, 1)
    return next(p for p in (output / "packlive").iterdir() if not p.name.startswith("."))


def keep_boot_logs(name: str, what: str, times: dict[str, float], console: str) -> None:
    """A boot test's step times and console under build/test-logs (``<name>-times.json``, ``<name>-console.log``)."""
    logs = REPO / "build" / "test-logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{name}-times.json").write_text(json.dumps(times, indent=2) + "\n")
    (logs / f"{name}-console.log").write_text(console)
    print(f"\n{what} (seconds; size in MiB):", json.dumps(times))


def pack_module(check_mode: bool = False, **params) -> tuple[int, dict]:
    """The real module through ``ansible localhost -m hpc.stateless.pack``; returns (rc, result)."""
    return run_module("hpc.stateless.pack", check_mode, **params)


def run_module(module: str, check_mode: bool = False, **params) -> tuple[int, dict]:
    """A module of the collection through ``ansible localhost -m <module>``; returns (rc, result)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
           "PYTHONPATH": str(REPO / ".collections"),
           "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot")}
    argv = [str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-i", str(REPO / "inventory"),
            "-m", module, "-a", json.dumps(params)]
    if check_mode:
        argv.append("--check")
    proc = subprocess.run(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=False)  # stdin: as conftest.run_site (the ansible CLI refuses a non-blocking one)
    try:
        result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError(f"unreadable ansible output (rc={proc.returncode}): {proc.stdout[-3000:]} "
                             f"{proc.stderr[-3000:]}") from None
    return proc.returncode, result


def small_root(base: Path, kernel: bool = True, extra: dict[str, bytes] | None = None) -> Path:
    """A tiny root tree with a (fake) kernel in /boot, /sbin -> usr/sbin and a /tmp to exclude."""
    root = base / f"root-{uuid.uuid4().hex[:6]}"
    files = {"etc/hostname": b"node\n", "usr/sbin/init": b"#!/bin/sh\n", "tmp/junk": b"x"}
    if kernel:
        files["boot/vmlinuz-6.1.0-99-amd64"] = b"not really a kernel"
    files.update(extra or {})
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "sbin").symlink_to("usr/sbin")
    return root


@contextlib.contextmanager
def mounted_image(ref: str):
    """The image's tree through a throw-away working container."""
    name = f"hpc-stateless-packtest-read-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, ref)
    try:
        yield Path(buildah("mount", name).strip())
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


@contextlib.contextmanager
def loop_mounted(image: Path, fstype: str = "squashfs"):
    target = Path(tempfile.mkdtemp(prefix="mnt-", dir=OUTPUT_ROOT))
    subprocess.run(["mount", "-o", "loop,ro", "-t", fstype, str(image), str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)
        target.rmdir()


def expected_entries(root: Path, overlay: set[str]) -> set[str]:
    """Paths pack must write, derived with find(1) and the documented default excludes (not our walk)."""
    out = subprocess.run(["find", ".", "-mindepth", "1"], cwd=root, capture_output=True, check=True).stdout
    entries = set()
    for raw in out.split(b"\n"):
        if not raw:
            continue
        rel = os.fsdecode(raw[2:])
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if any(rel.startswith(d + "/") for d in EMPTIED_DIRS) or rel in DROPPED_NAMES:
            continue
        if parent == "var/cache/apt" and rel.endswith(".bin"):
            continue
        if parent == "var/cache/apt/archives" and rel.endswith(".deb"):
            continue
        if parent == "var/cache/debconf" and rel.endswith("-old"):
            continue
        entries.add(rel)
    return entries | overlay


IMAGE_RELEASE_TO_CONSOLE = ('systemd.unit=multi-user.target systemd.wants=kernel-command-line.service '
                            'systemd.run="/bin/cat /etc/image-release" '
                            'systemd.run="/usr/bin/systemd-run --no-block --property=After=multi-user.target '
                            '--property=StandardOutput=journal+console '
                            '/usr/bin/systemctl list-units --no-pager --no-legend multi-user.target" '
                            'systemd.run_success_action=none')
# The compute image's munge waits (up to 5 min) for a key that deploy delivers at boot; there is
# no key in a test boot, so the unit is masked (slurmd then fails; multi-user is still reached).
NO_SECRET_DELIVERY = "systemd.mask=munge.service"


def _no_local_disk_wait() -> str:
    """Kernel arguments that mask the compute role's node-local storage units (names from its defaults).

    A qemu test guest has no local disk: hpc-local-storage.service waits ``compute_local_storage_disk_wait``
    (30 s) for one, and the LABEL= fstab entries of scratch and swap (``x-systemd.device-timeout``, 30 s)
    hold local-fs.target and swap.target as long - half of a TCG boot of the compute image. The boots that
    test something else (a hardware profile, file capabilities) mask them; test_pack.py boots the image as
    a diskless node boots it, and test_compute_local_storage.py runs the script on real disks.
    """
    defaults = yaml.safe_load((REPO / "roles/compute/defaults/main.yml").read_text(encoding="utf-8"))
    paths = {"mount": [defaults["compute_local_scratch_mountpoint"]], "swap": []}
    if defaults["compute_local_swap_size_mib"] > 0:
        paths["swap"].append(f"/dev/disk/by-label/{defaults['compute_local_swap_label']}")
    if defaults["compute_local_log_size_mib"] > 0:
        paths["mount"].append(defaults["compute_local_log_mountpoint"])
    units = ["hpc-local-storage.service"]
    for suffix, found in paths.items():
        for path in found:
            escaped = subprocess.run(["systemd-escape", "--path", path], capture_output=True, text=True,
                                     check=True).stdout.strip()
            units.append(f"{escaped}.{suffix}")
    return " ".join(f"systemd.mask={unit}" for unit in units)


NO_LOCAL_DISK_WAIT = _no_local_disk_wait()
# No display adapter: the guest is watched on its serial console only, and a framebuffer console (bochs-drm,
# fbcon) would draw every console line once more in emulated instructions.
HEADLESS = ("-vga", "none")


# The emulated machine of each image architecture (TCG): its qemu and machine options, and its serial console.
# arm64: qemu's generic "virt" board (PL011 serial ttyAMA0, virtio-mmio, a device tree), booted from the kernel
# Image directly (qemu reads its header, gzip'd or not), and a Cortex-A57 (cheaper to emulate than -cpu max).
QEMU_MACHINES = {
    "amd64": (QEMU_AMD64, "ttyS0"),
    "arm64": (("qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57", "-accel", "tcg"), "ttyAMA0"),
}


def boot_qemu(kernel: Path, initrd: Path, append: str, expect: list[str], timeout: float = 170,
              extra: tuple[str, ...] = (), arch: str = "amd64") -> str:
    """Boot under qemu (TCG) as a machine of ``arch`` (:data:`QEMU_MACHINES`) and return the serial console once
    every ``expect`` regex matched.

    ``IMAGE_RELEASE_TO_CONSOLE`` on the command line prints /etc/image-release from a oneshot
    unit that multi-user.target pulls in, and the state of multi-user.target from a transient
    unit ordered after it; the VM is killed as soon as all markers were seen.
    """
    argv = [*QEMU_MACHINES[arch][0], "-m", "4G", "-smp", "2", "-nographic", "-no-reboot",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append, *extra]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    console = b""
    deadline = time.monotonic() + timeout
    try:
        if proc.stdout is None:
            raise AssertionError("qemu has no stdout pipe")
        while time.monotonic() < deadline:
            ready, _w, _x = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                console += chunk
                text = ANSI.sub("", console.decode("utf-8", "replace"))
                if all(re.search(marker, text) for marker in expect):
                    break
    finally:
        proc.kill()
        proc.wait()
    return ANSI.sub("", console.decode("utf-8", "replace"))


def boot_cpio(kernel: Path, initrd: Path, expect: list[str], timeout: float = 240, arch: str = "amd64") -> str:
    """The cpio image as the root: no root=, no initrd of its own."""
    console = QEMU_MACHINES[arch][1]
    return boot_qemu(kernel, initrd, f"console={console} panic=-1 {NO_SECRET_DELIVERY} {IMAGE_RELEASE_TO_CONSOLE}",
                     expect, timeout, extra=HEADLESS if arch == "amd64" else (), arch=arch)
