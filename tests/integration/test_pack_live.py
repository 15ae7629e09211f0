"""Opt-in: a squashfs image booted over HTTP by the dracut live initrd pack builds.

Slow the first time (a dracut layer on top of packkernel, ~5 min; dracut itself ~2 min per
pack) and the boot downloads ~190 MB inside a TCG guest, so it runs only with
``HPC_STATELESS_PACK_LIVE=1``; ``make test`` covers squashfs through unsquashfs and a loop
mount (test_pack.py).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading

import pytest

from conftest import REPO, run_site
from pack_support import IMAGE_RELEASE_TO_CONSOLE, PACK_PREFIX, boot_qemu, run_pack_playbook

pytestmark = pytest.mark.skipif(os.environ.get("HPC_STATELESS_PACK_LIVE") != "1",
                                reason="opt-in (HPC_STATELESS_PACK_LIVE=1): builds a dracut layer and boots a "
                                       "squashfs over HTTP under qemu, several minutes")
DRACUT_INVENTORY = REPO / "tests" / "integration" / "pack_dracut_inventory"


def test_dracut_initrd_boots_the_squashfs_over_http(tmp_path):
    extra = ("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}")
    built = run_site(*extra, inventory=DRACUT_INVENTORY)
    assert built.returncode == 0, built.stdout[-3000:]
    packed = run_pack_playbook(DRACUT_INVENTORY, tmp_path, *extra)
    assert packed.returncode == 0, packed.stdout[-3000:]
    version_dir = next(p for p in (tmp_path / "packlive").iterdir() if not p.name.startswith("."))
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["initrd"]["generator"] == "dracut" and "root=live:" in manifest["initrd"]["kernel_args"]

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(version_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://10.0.2.2:{server.server_address[1]}/packlive.squashfs"
        append = (f"console=ttyS0 panic=-1 root=live:{url} rd.live.image rd.live.overlay.overlayfs=1 "
                  f"rd.neednet=1 ip=dhcp {IMAGE_RELEASE_TO_CONSOLE}")
        console = boot_qemu(version_dir / "vmlinuz", version_dir / "initrd.img", append,
                            ["IMAGE=packlive", re.escape(f"VERSION={manifest['version']}")], timeout=420,
                            extra=("-netdev", "user,id=n0", "-device", "e1000,netdev=n0"))
    finally:
        server.shutdown()
        shutil.rmtree(version_dir, ignore_errors=True)
    # The release file exists only in the squashfs: printing it proves the switch to that root.
    assert "IMAGE=packlive" in console and f"VERSION={manifest['version']}" in console, console[-4000:]
