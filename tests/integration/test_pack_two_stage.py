# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An image beyond 4 GiB: refused as a cpio initramfs, booted in two stages from a server list whose first is dead.

The squashfs live image test_pack_live boots (pack_dracut_inventory, packed once by pack.yml for both: the
session fixture live_pack): its initrd carries the first stage (dracut module hpcfetch). Its tree gets a
4.25 GiB file (sparse on the build host, zeros in the image: the squashfs stays small) and a marker of
random bytes, and is packed again from that directory by the real module: as cpio it is refused, naming
squashfs two-stage boot; as squashfs it is packed with the first pack's kernel and initrd. nginx
(Debian's) serves that squashfs under ``/sha256/<its hash>``; the guest (qemu TCG, user networking) boots
with ``hpc.servers=<a port nothing listens on>,<nginx>`` and ``hpc.image=<hash>``; a oneshot prints the big
file's size and the marker from the booted root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pytest
from deploy_support import GUEST_HOST_ADDRESS
from pack_support import HEADLESS, IMAGE_RELEASE_TO_CONSOLE, MULTI_USER, boot_qemu, keep_boot_logs, pack_module
from storm_support import ARTIFACT_DIR, free_port, publish, served

BIG = 4 * 2**30 + 2**28  # 4.25 GiB: beyond newc's 32-bit size field and the kernel's 4 GB initramfs
BIG_PATH = "opt/hpc-big/zeros"
MARKER_PATH = "opt/hpc-big/marker"

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or shutil.which("nginx") is None
                                or shutil.which("unsquashfs") is None,
                                reason="needs qemu-system-x86, nginx and squashfs-tools (scripts/setup.sh)")


def test_image_beyond_4gib_is_refused_as_cpio_and_boots_in_two_stages_past_a_dead_server(tmp_path, live_pack):
    live, pack_times = live_pack
    times = dict(pack_times)
    first_stage = json.loads((live / "manifest.json").read_text())["initrd"].get("first_stage")
    assert first_stage and first_stage["module"] == "hpcfetch", first_stage
    assert "root=hpcfetch" in first_stage["kernel_args"], first_stage

    # The same root with a 4.25 GiB file (sparse here) and a marker only this image has.
    start = time.monotonic()
    tree = tmp_path / "tree"
    subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-d", str(tree), str(live / "packlive.squashfs")],
                   check=True, capture_output=True)
    (tree / BIG_PATH).parent.mkdir(parents=True)
    with open(tree / BIG_PATH, "wb") as handle:
        handle.truncate(BIG)
    marker = os.urandom(12).hex()
    (tree / MARKER_PATH).write_text(marker + "\n")
    common = {"image": "big", "source_path": str(tree), "version": "v1", "kernel": str(live / "vmlinuz")}

    rc, result = pack_module(output_dir=str(tmp_path / "cpio"), formats=["cpio.zst"], **common)
    assert rc != 0, result
    assert f"/{BIG_PATH} ({BIG} bytes)" in result["msg"] and "4 GiB - 1" in result["msg"], result["msg"]
    assert "Pack it as squashfs" in result["msg"] and "boot it in two stages" in result["msg"], result["msg"]
    assert not (tmp_path / "cpio" / "big").exists()  # refused before anything was written
    times["cpio_refused"] = round(time.monotonic() - start, 1)

    start = time.monotonic()
    rc, result = pack_module(output_dir=str(tmp_path / "sq"), formats=["squashfs"], initrd=str(live / "initrd.img"),
                             **common)
    assert rc == 0, result.get("msg")
    version_dir = tmp_path / "sq" / "big" / "v1"
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["uncompressed_size"] > BIG, manifest["uncompressed_size"]
    squashfs = version_dir / "big.squashfs"
    times["squashfs_pack"] = round(time.monotonic() - start, 1)
    times["squashfs_mib"] = round(squashfs.stat().st_size / 2**20, 1)
    shutil.rmtree(tree)

    start = time.monotonic()
    root = tmp_path / "served"
    digest = publish(root, squashfs)
    dead = free_port()  # nothing listens there: the guest's connection is refused
    with served(tmp_path / "nginx", root, listen=f"127.0.0.1:{free_port()}") as nginx:
        port = nginx.listen.rsplit(":", 1)[1]
        servers = f"http://{GUEST_HOST_ADDRESS}:{dead},http://{GUEST_HOST_ADDRESS}:{port}"
        probe = (f"systemd.run=\"/bin/sh -c 'echo BIG-SIZE=$(stat -c %s /{BIG_PATH}); "
                 f"echo MARKER=$(cat /{MARKER_PATH})'\"")
        append = (f"console=ttyS0 panic=-1 {first_stage['kernel_args']} hpc.servers={servers} hpc.image={digest} "
                  f"{IMAGE_RELEASE_TO_CONSOLE} {probe}")
        console = boot_qemu(live / "vmlinuz", version_dir / "initrd.img", append,
                            [rf"BIG-SIZE={BIG}\b", f"MARKER={marker}", MULTI_USER], timeout=480,
                            extra=("-netdev", "user,id=n0", "-device", "e1000,netdev=n0", *HEADLESS))
        nginx.stop()
        log = (tmp_path / "nginx" / "access.log").read_text()
    times["boot"] = round(time.monotonic() - start, 1)
    keep_boot_logs("pack-two-stage", "two-stage boot of an image beyond 4 GiB", times, console)

    assert re.search(rf"BIG-SIZE={BIG}\b", console), console[-4000:]
    assert f"MARKER={marker}" in console, console[-4000:]
    assert re.search(MULTI_USER, console), console[-4000:]
    # The image came whole from the second server, under its hash (the first refused the connection).
    assert re.search(rf"^/{ARTIFACT_DIR}/{digest} 200 \d+$", log, re.MULTILINE), log
