"""Helpers of the deploy integration tests: a small bootable test image, pack-format output, qemu PXE boots.

The test image is a real kernel (the host's /boot/vmlinuz-*, else the vmlinuz of a Debian
linux-image package from the apt cache, else one downloaded with ``apt-get download``) and a
tiny cpio initramfs of busybox-static whose /init prints a marker, /etc/image-release and
/proc/cmdline to the serial console and powers off. It is written in the pack output format
through the artifact contract (manifest.json, SHA256SUMS), so bootlink treats it exactly like a packed image.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    KERNEL_FILE,
    MANIFEST_FILE,
    SUMS_FILE,
    artifact_file,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import sha256_bytes, sha256_file, sums_text

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "test-cache" / "deploy"
MARKER = "HPC-STATELESS-PXE-BOOTED"
PXELINUX_DIRS = ("/usr/lib/PXELINUX", "/usr/lib/syslinux/modules/bios")

INIT_SCRIPT = """#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys
/bin/busybox mount -t proc proc /proc
echo "{marker} begin"
/bin/busybox cat /etc/image-release
echo "CMDLINE=$(/bin/busybox cat /proc/cmdline)"
echo "{marker} end"
/bin/busybox poweroff -f
"""

# qemu (TCG) for an amd64 guest: the default CPU model with RDRAND, which TCG emulates, so the guest kernel (Debian's
# trusts the CPU's RNG) seeds its random pool at once. Without it, under a loaded host, a getrandom() early in a boot
# waited long enough for a soft lockup report of a udev worker, and the boot timed out.
QEMU_AMD64 = ("qemu-system-x86_64", "-accel", "tcg", "-cpu", "qemu64,+rdrand")


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, **kwargs)


def find_kernel() -> Path:
    """A bootable x86_64 kernel (see module docstring); cached under build/test-cache."""
    for candidate in sorted(glob.glob("/boot/vmlinuz-*"), reverse=True):
        if os.access(candidate, os.R_OK):
            return Path(candidate)
    cached = sorted(CACHE.glob("vmlinuz-*"))
    if cached:
        return cached[-1]
    CACHE.mkdir(parents=True, exist_ok=True)
    debs = sorted(glob.glob("/var/cache/apt/archives/linux-image-[0-9]*.deb")) + \
        sorted(glob.glob(str(CACHE / "linux-image-[0-9]*.deb")))
    if not debs:
        depends = _run(["apt-cache", "depends", "--important", "linux-image-amd64"], text=True).stdout
        match = re.search(r"Depends: (linux-image-[0-9][^\s]*)", depends)
        if not match:
            raise RuntimeError("cannot find the kernel package linux-image-amd64 depends on (apt-cache depends)")
        _run(["apt-get", "download", match.group(1)], cwd=CACHE)
        debs = sorted(glob.glob(str(CACHE / "linux-image-[0-9]*.deb")))
    unpack = CACHE / "unpack"
    shutil.rmtree(unpack, ignore_errors=True)
    unpack.mkdir()
    tar = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", debs[-1]], stdout=subprocess.PIPE)
    _run(["tar", "-x", "-C", str(unpack), "--wildcards", "./boot/vmlinuz-*"], stdin=tar.stdout)
    tar.wait()
    kernel = sorted(unpack.glob("boot/vmlinuz-*"))[-1]
    dest = CACHE / kernel.name
    shutil.copyfile(kernel, dest)
    shutil.rmtree(unpack, ignore_errors=True)
    return dest


def marker_initramfs(dest: Path, release: str) -> int:
    """Write a zstd cpio initramfs (busybox + /init + /etc/image-release) to ``dest``; return its tree size."""
    stage = dest.parent / (dest.name + ".stage")
    shutil.rmtree(stage, ignore_errors=True)
    for sub in ("bin", "sbin", "etc", "dev", "proc", "sys"):
        (stage / sub).mkdir(parents=True)
    shutil.copyfile("/bin/busybox", stage / "bin" / "busybox")
    os.chmod(stage / "bin" / "busybox", 0o755)
    (stage / "bin" / "sh").symlink_to("busybox")
    (stage / "init").write_text(INIT_SCRIPT.format(marker=MARKER))
    os.chmod(stage / "init", 0o755)
    (stage / "sbin" / "init").symlink_to("../init")  # rdinit=/sbin/init, as for a packed systemd image
    (stage / "etc" / "image-release").write_text(release)
    if os.geteuid() == 0:
        os.mknod(stage / "dev" / "console", 0o600 | stat.S_IFCHR, os.makedev(5, 1))
    names = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    cpio = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"], cwd=stage,
                          input=("\n".join(names) + "\n").encode(), capture_output=True, check=True).stdout
    size = sum(p.lstat().st_size for p in stage.rglob("*") if p.is_file() and not p.is_symlink())
    dest.write_bytes(subprocess.run(["zstd", "-q", "-3", "-c"], input=cpio, capture_output=True, check=True).stdout)
    shutil.rmtree(stage)
    return size


def write_pack(output_dir: Path, image: str, version: str, kernel: Path, created: str = "2026-01-01T00:00:00Z",
               uncompressed_size: int | None = None) -> Path:
    """A version directory in the pack output format holding the marker image, written through the
    artifact contract as pack writes it; returns it."""
    directory = output_dir / image / version
    directory.mkdir(parents=True)
    release = (f"IMAGE={image}\nVERSION={version}\nLAYER=test\nLAYER_KEY={'0' * 64}\n"
               f"BUILD_TIME={created}\n")
    artifact = directory / artifact_file(image, "cpio.zst")
    tree = marker_initramfs(artifact, release)
    shutil.copyfile(kernel, directory / KERNEL_FILE)
    files = {name: sha256_file(str(directory / name)) for name in (KERNEL_FILE, artifact.name)}
    manifest = pm.build_manifest(
        image=image, version=version, created=pm.parse_iso_utc(created), layer="test", layer_keys={"test": "0" * 64},
        kernel={"file": KERNEL_FILE, "version": kernel.name.removeprefix("vmlinuz-")},
        artifacts=[{"file": artifact.name, "format": "cpio.zst", "size": artifact.stat().st_size,
                    "sha256": files[artifact.name]}],
        uncompressed_size=uncompressed_size if uncompressed_size is not None else tree,
        packages=[{"name": "busybox-static", "version": "test"}])
    (directory / MANIFEST_FILE).write_bytes(pm.manifest_bytes(manifest))
    files[MANIFEST_FILE] = sha256_bytes(pm.manifest_bytes(manifest))  # listed, as pack lists it
    (directory / SUMS_FILE).write_text(sums_text(files))
    return directory


def install_pxelinux(boot_root: Path) -> None:
    """Copy pxelinux.0 and ldlinux.c32 (Debian pxelinux + syslinux-common) into ``boot_root``."""
    for name in ("pxelinux.0", "ldlinux.c32"):
        for directory in PXELINUX_DIRS:
            if os.path.isfile(os.path.join(directory, name)):
                shutil.copyfile(os.path.join(directory, name), boot_root / name)
                break
        else:
            raise RuntimeError(f"{name} not found in {PXELINUX_DIRS}: apt-get install pxelinux syslinux-common")


def pxe_boot(boot_root: Path, mac: str, log: Path, bootfile: str = "pxelinux.0", timeout: float = 180.0,
             memory_mib: int = 512, until: str = f"{MARKER} end",
             stamps: dict[str, float] | None = None, stamp_files: tuple[Path, ...] = ()) -> tuple[str, float]:
    """Boot a qemu TCG guest over PXE from ``boot_root`` (qemu's built-in TFTP); return (console, seconds).

    ``bootfile`` is a path in ``boot_root`` or a URL (``http://10.0.2.2:<port>/...``, which the
    NIC's iPXE ROM fetches itself). The guest stops at ``until`` (a regex on the console) or is
    killed at ``timeout``; the console text is returned either way. With ``stamps``
    (``{regex: 0.0}``), each regex's value becomes the seconds after qemu's start at which it
    first appeared on the console or in one of ``stamp_files`` (e.g. an HTTP server's access log;
    -1 if never).
    """
    argv = [*QEMU_AMD64, "-m", str(memory_mib), "-nodefaults", "-no-reboot",
            "-display", "none", "-serial", f"file:{log}", "-boot", "n",
            "-netdev", f"user,id=n0,tftp={boot_root},bootfile={bootfile}",
            "-device", f"e1000,netdev=n0,mac={mac}"]
    pending = dict.fromkeys(stamps or {}, -1.0)
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None and time.monotonic() - start < timeout:
            text = log.read_text(errors="replace") if log.exists() else ""
            watched = text + "".join(f.read_text(errors="replace") for f in stamp_files if f.exists())
            for regex in [r for r, seen in pending.items() if seen < 0 and re.search(r, watched)]:
                pending[regex] = round(time.monotonic() - start, 2)
            if re.search(until, text):
                if until == f"{MARKER} end":
                    proc.wait(timeout=20)  # poweroff -f follows the marker
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    seconds = time.monotonic() - start
    if stamps is not None:
        stamps.update(pending)
    return (log.read_text(errors="replace") if log.exists() else ""), seconds


def access_log(log_dir: Path, expect: list[tuple[str, str]], wait: float = 10.0) -> list[tuple[str, str]]:
    """(path, status) of every GET in :func:`http_server`'s access log, once every ``expect`` pair
    is in it or ``wait`` seconds passed (lighttpd flushes the log about once a second)."""
    deadline = time.monotonic() + wait
    while True:
        path = log_dir / "lighttpd-access.log"
        served = re.findall(r'"GET (\S+) HTTP/[0-9.]+" (\d{3})', path.read_text() if path.exists() else "")
        if all(pair in served for pair in expect) or time.monotonic() > deadline:
            return served
        time.sleep(0.2)


GUEST_HOST_ADDRESS = "10.0.2.2"  # the host as qemu's user networking shows it to the guest
LIGHTTPD_CONF = """server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{log}/lighttpd-error.log"
server.modules = ("mod_accesslog")
accesslog.filename = "{log}/lighttpd-access.log"
debug.log-request-header = "enable"
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(root: Path, log_dir: Path) -> Iterator[int]:
    """lighttpd (Debian package, scripts/setup.sh) serving ``root`` on 127.0.0.1; yields its port.

    A guest on qemu's user network reaches it as ``http://10.0.2.2:<port>``. Symlinks are
    followed (the boot root's ``<image>`` links). Its logs stay in ``log_dir``: the access log
    (``lighttpd-access.log``, written in batches, within about a second: see :func:`access_log`)
    and the error log, which also gets each request line as it arrives (``rqst: GET /path ...``).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    conf = log_dir / "lighttpd.conf"
    conf.write_text(LIGHTTPD_CONF.format(root=root, port=port, log=log_dir))
    proc = subprocess.Popen(["lighttpd", "-D", "-f", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                errors = (log_dir / "lighttpd-error.log")
                raise RuntimeError(f"lighttpd did not listen on 127.0.0.1:{port} ({conf}): "
                                   f"{proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ''}"
                                   f"{errors.read_text() if errors.exists() else ''}")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def release_of(console: str) -> dict[str, str]:
    """KEY=value lines the marker init printed between its markers."""
    block = console.split(f"{MARKER} begin", 1)[-1].split(f"{MARKER} end", 1)[0]
    return dict(line.strip().split("=", 1) for line in block.splitlines() if "=" in line)


def write_inventory(directory: Path, images: dict, nodes: dict[str, dict] | None = None, **group_vars) -> Path:
    """An inventory: localhost (local connection) + nodes in group hpc_stateless_nodes; returns the directory."""
    import sys  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    directory.mkdir(parents=True, exist_ok=True)
    # The packs these tests deploy are hand-made marker images or directory trees, with no layer image that
    # verify could boot: they are served on deploy's explicit override (printed by deploy.yml). A test of the
    # gate itself passes hpc_stateless_unverified_ok="" (no override).
    group_vars.setdefault("hpc_stateless_unverified_ok", "deploy test: marker or directory packs, no layer image to verify")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"all": {"vars": {"hpc_stateless_images": images, **group_vars}, "hosts": {"localhost": local},
                     "children": {"hpc_stateless_nodes": {"hosts": nodes or {}}}}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return directory
