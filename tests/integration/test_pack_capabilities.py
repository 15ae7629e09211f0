"""File capabilities survive a cpio pack: booted under qemu, an unprivileged user gets them.

The newc format carries no extended attributes; pack records each file's ``security.capability``
and the packed copy restores them at boot (hpc-stateless-capabilities.service, before
sysinit.target). The test commits, on top of the default compute image's layer (or the pack
tests' private kernel layer), copies of the image's python3: one with ``cap_net_bind_service=ep``
(binding port 80 needs it), one with none, and one with the capability below a directory a user
owns, which pack must not restore. The cpio.zst (modules, docs and locales left out to keep the
boot short) boots under qemu (TCG, no network); a probe passed with ``systemd.run=`` runs every
copy as ``nobody`` and prints its ``CapEff`` from /proc/self/status and whether it could bind
port 80, and what ``getcap`` says of each file. One pack and one boot serve both tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, buildah, commit_changed_image, layer_images, run_site
from pack_support import (
    HEADLESS,
    IMAGE_RELEASE_TO_CONSOLE,
    MULTI_USER,
    NO_LOCAL_DISK_WAIT,
    NO_SECRET_DELIVERY,
    OUTPUT_ROOT,
    PACK_INVENTORY,
    PACK_PREFIX,
    boot_qemu,
    pack_module,
)

from ansible_collections.hpc.stateless.plugins.module_utils import _imagepath
from ansible_collections.hpc.stateless.plugins.module_utils._pack import capabilities as caps

DEFAULT_PREFIX = "localhost/hpc-stateless"
DEFAULT_LAYER = f"{DEFAULT_PREFIX}/slurm:latest"  # the layer of the default inventory's image compute
FALLBACK_LAYER = f"{PACK_PREFIX}/packkernel:latest"
TEST_PREFIX = "localhost/hpc-stateless-captest"
TOOLS = "usr/local/libexec/captest"
BIND = f"{TOOLS}/bind-tool"  # cap_net_bind_service=ep, restored at boot
PLAIN = f"{TOOLS}/plain-tool"  # no capability: proves the probe's user is unprivileged
USER_DIR = "home/captest"  # owned by uid 1000
UNTRUSTED = f"{USER_DIR}/bind-tool"  # cap_net_bind_service=ep below it: never restored
CAPABILITY = "cap_net_bind_service=ep"
NET_BIND_SERVICE = 1 << 10
# Left out of the test's pack: the boot needs no module, and a smaller archive boots faster under TCG.
EXCLUDE = ["usr/lib/modules/*", "usr/share/doc/*", "usr/share/man/*", "usr/share/locale/*"]

PROBE_PY = """import errno
import os
import socket
import sys

with open("/proc/self/status", encoding="ascii") as status:
    effective = next(line.split()[1] for line in status if line.startswith("CapEff:"))
try:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 80))
    bound = "ok"
except OSError as exc:
    bound = errno.errorcode.get(exc.errno, str(exc.errno))
print(f"CAPTEST run {sys.argv[1]} uid={os.getuid()} CapEff={effective} bind80={bound}", flush=True)
"""
PROBE_SH = f"""#!/bin/sh
# Run as root by kernel-command-line.service (systemd.run=); every tool runs as nobody.
unit={caps.UNIT_NAME}
echo "CAPTEST unit $(systemctl show -p ActiveState --value $unit) $(systemctl show -p Result --value $unit)"
echo "CAPTEST order $(systemctl show -p ActiveEnterTimestampMonotonic --value $unit) \\
$(systemctl show -p ActiveEnterTimestampMonotonic --value sysinit.target)"
for tool in /{BIND} /{PLAIN} /{UNTRUSTED}; do
    echo "CAPTEST getcap $tool $(getcap "$tool" | cut -d' ' -f2-)"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$tool" /{TOOLS}/probe.py "$tool"
done
echo "CAPTEST-""END"
"""
END = r"CAPTEST-END"  # the probe writes it in two pieces: the kernel's echo of the command line cannot match

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (buildah, setcap)"),
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs qemu-system-x86 (scripts/setup.sh)"),
    pytest.mark.skipif(shutil.which("setcap") is None, reason="needs setcap on the build host (libcap2-bin)"),
]


def kernel_layer() -> str:
    """The default compute image's layer when it is built; else the pack tests' private kernel layer."""
    if DEFAULT_LAYER in layer_images(DEFAULT_PREFIX):
        return DEFAULT_LAYER
    extra = ("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}")
    built = run_site(*extra, inventory=PACK_INVENTORY)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
    return FALLBACK_LAYER


def plant(root: str) -> None:
    """The tools, the probe, and (for the private layer, which has none) the build host's setcap."""
    python = _imagepath.resolve(root, "usr/bin/python3")
    assert python, "the layer has no python3"
    base = Path(root)
    (base / TOOLS).mkdir(parents=True)
    (base / USER_DIR).mkdir(parents=True)
    os.chown(base / USER_DIR, 1000, 1000)
    for rel in (BIND, PLAIN, UNTRUSTED):
        shutil.copy(python, base / rel)
    for rel in (BIND, UNTRUSTED):
        subprocess.run(["setcap", CAPABILITY, str(base / rel)], check=True)
    (base / TOOLS / "probe.py").write_text(PROBE_PY)
    (base / TOOLS / "probe").write_text(PROBE_SH)
    (base / TOOLS / "probe").chmod(0o755)
    if not any(_imagepath.is_file(root, rel) for rel in caps.SETCAP_PATHS):
        shutil.copy("/usr/sbin/setcap", base / "usr/sbin/setcap")


@pytest.fixture(scope="module")
def booted():
    """(manifest, pack warnings, console, times) of the test image packed as cpio.zst and booted once."""
    times: dict[str, float] = {}
    start = time.monotonic()
    ref = f"{TEST_PREFIX}/capabilities:{uuid.uuid4().hex[:8]}"
    commit_changed_image(kernel_layer(), ref, plant, f"hpc-stateless-captest-{uuid.uuid4().hex[:8]}")
    OUTPUT_ROOT.mkdir(parents=True, exist_ok=True)
    output = Path(tempfile.mkdtemp(prefix="capabilities-", dir=OUTPUT_ROOT))
    try:
        times["image"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        rc, result = pack_module(image="captest", source_image=ref, output_dir=str(output), version="caps1",
                                 formats=["cpio.zst"], kernel_args="console=ttyS0", exclude=EXCLUDE)
        assert rc == 0, result.get("msg")
        times["pack"] = round(time.monotonic() - start, 1)
        version_dir = Path(result["version_dir"])
        manifest = json.loads((version_dir / "manifest.json").read_text())
        start = time.monotonic()
        # Masked: the local storage units' 30 s wait for a disk (this boot tests capabilities); no display adapter.
        append = (f"console=ttyS0 panic=-1 {NO_SECRET_DELIVERY} {NO_LOCAL_DISK_WAIT} {IMAGE_RELEASE_TO_CONSOLE} "
                  f"systemd.run=/{TOOLS}/probe")
        console = boot_qemu(version_dir / "vmlinuz", version_dir / "captest.cpio.zst", append, [MULTI_USER, END],
                            timeout=300, extra=HEADLESS)
        times["boot"] = round(time.monotonic() - start, 1)
    finally:
        shutil.rmtree(output, ignore_errors=True)
        buildah("rmi", ref, check=False)
    log = REPO / "build" / "test-logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / "pack-capabilities-console.log").write_text(console)
    (log / "pack-capabilities-times.json").write_text(json.dumps(times, indent=2) + "\n")
    print("\ncapabilities pack and boot (seconds):", json.dumps(times))
    return manifest, result.get("warnings") or [], console, times


def runs(console: str) -> dict[str, tuple[int, int, str]]:
    """``{tool: (uid, CapEff, bind result)}`` the probe printed."""
    found = re.findall(r"CAPTEST run (\S+) uid=(\d+) CapEff=([0-9a-f]+) bind80=(\w+)", console)
    return {tool: (int(uid), int(effective, 16), bound) for tool, uid, effective, bound in found}


def getcaps(console: str) -> dict[str, str]:
    """``{tool: what getcap printed}`` ('' for no capability)."""
    return {tool: shown.strip() for tool, shown in re.findall(r"CAPTEST getcap (\S+)[ \t]*([^\r\n]*)", console)}


def test_an_unprivileged_user_gets_the_capability_on_a_cpio_node(booted):
    manifest, _warnings, console, times = booted
    assert re.search(END, console) and re.search(MULTI_USER, console), console[-4000:]
    assert {"path": "/" + BIND, "capabilities": CAPABILITY} in manifest["capabilities"]
    assert getcaps(console)["/" + BIND] == CAPABILITY, console[-4000:]
    uid, effective, bound = runs(console)["/" + BIND]
    assert uid == 65534 and effective == NET_BIND_SERVICE and bound == "ok", console[-4000:]
    # The same program without the capability: the user is unprivileged indeed.
    assert getcaps(console)["/" + PLAIN] == ""
    assert runs(console)["/" + PLAIN] == (65534, 0, "EACCES")
    # Restored by the unit, which was done before sysinit.target was reached.
    assert re.search(r"CAPTEST unit active success", console), console[-4000:]
    unit_done, sysinit_done = (int(n) for n in re.search(r"CAPTEST order (\d+) (\d+)", console).groups())
    assert 0 < unit_done <= sysinit_done
    assert times["pack"] + times["boot"] < 240, times


@pytest.mark.fault
def test_a_capability_below_a_user_writable_directory_is_not_restored(booted):
    manifest, warnings, console, _times = booted
    entry = next(e for e in manifest["capabilities"] if e["path"] == "/" + UNTRUSTED)
    assert entry[caps.NOT_RESTORED_KEY] == f"/{USER_DIR} is owned by uid 1000", entry
    assert any(f"/{UNTRUSTED} ({CAPABILITY}): /{USER_DIR} is owned by uid 1000" in w for w in warnings), warnings
    assert getcaps(console)["/" + UNTRUSTED] == "", console[-4000:]
    assert runs(console)["/" + UNTRUSTED] == (65534, 0, "EACCES"), console[-4000:]
