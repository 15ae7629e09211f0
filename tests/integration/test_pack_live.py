"""A squashfs image booted over HTTP by the dracut live initrd pack builds; writes land on overlayfs in RAM.

The DAG (pack_dracut_inventory: base -> packkernel -> packdracut -> packlive) is built under the
pack tests' image prefix, so its layers stay cached between runs like the pack tests' own
(base and packkernel are theirs); a cached run builds nothing. Its base has the default
inventory's bootstrap spec: the default build's bootstrapped root is tagged into that prefix
first (a name only), so a fresh checkout bootstraps once, in ``make build``, not again here. Kept small to stay inside the
``make test`` budget: the packlive layer narrows dracut to a qemu guest's drivers and leaves out the other
network and md RAID drivers dracut's own modules would add (test role test_dracut_conf: 141 modules instead of 406) and the image leaves the kernel's
modules, docs, man pages and locales out of the squashfs (the initrd carries the drivers).

lighttpd (Debian package, scripts/setup.sh) serves the version directory on 127.0.0.1; the
guest (qemu TCG, user networking, e1000) reaches it as 10.0.2.2. The kernel command line is the
one the manifest records for the initrd, with the URL filled in. On the booted node a oneshot
writes a file, prints /proc/mounts and reads the file back from the overlay's upper directory.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from deploy_support import GUEST_HOST_ADDRESS, access_log, http_server
from pack_support import HEADLESS, IMAGE_RELEASE_TO_CONSOLE, MULTI_USER, boot_qemu, keep_boot_logs

URL_PLACEHOLDER = "<URL of the squashfs>"
PROBE = "/root/hpc-overlay-probe"
UPPER = "/run/overlayfs"  # dracut dmsquash-live's overlayfs upper directory
# The write, the mount table and the read back from the upper directory, on the console.
OVERLAY_PROBE = (f"systemd.run=\"/bin/sh -c 'echo written-on-the-node >{PROBE}; echo MOUNTS-BEGIN; cat /proc/mounts; "
                 f"echo MOUNTS-END; wc -c {UPPER}{PROBE}'\"")

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or shutil.which("lighttpd") is None,
                                reason="needs qemu-system-x86 and lighttpd (scripts/setup.sh)")


# The probe's output reaches the console through the journal: "[   79.1] sh[770]: <line>".
JOURNAL_PREFIX = r"^(?:\[\s*[0-9.]+\]\s+)?\S+\[\d+\]: "


def mounts_of(console: str) -> list[tuple[str, str, str, str]]:
    """(device, mount point, type, options) of the /proc/mounts the probe printed (between marker
    lines of their own: the kernel also echoes the command line, markers included)."""
    text = re.sub(JOURNAL_PREFIX, "", console.replace("\r", ""), flags=re.MULTILINE)
    block = re.search(r"^MOUNTS-BEGIN\s*$(.*?)^MOUNTS-END\s*$", text, re.MULTILINE | re.DOTALL)
    found = []
    for line in (block.group(1) if block else "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1].startswith("/"):
            found.append((fields[0], fields[1], fields[2], fields[3]))
    return found


def mount_holding(path: str, mounts: list[tuple[str, str, str, str]]) -> tuple[str, str, str, str]:
    """The mount whose mount point is the longest prefix of ``path`` (the last one wins on a tie)."""
    best = None
    for mount in mounts:
        point = mount[1].rstrip("/") + "/"
        if (path.rstrip("/") + "/").startswith(point) and (best is None or len(mount[1]) >= len(best[1])):
            best = mount
    assert best is not None, (path, mounts)
    return best


def test_dracut_initrd_boots_the_squashfs_over_http_with_writes_in_ram(tmp_path, live_pack):
    version_dir, pack_times = live_pack
    times = dict(pack_times)
    manifest = json.loads((version_dir / "manifest.json").read_text())
    assert manifest["initrd"]["generator"] == "dracut", manifest["initrd"]
    args = manifest["initrd"]["kernel_args"]
    assert f"root=live:{URL_PLACEHOLDER}" in args and "rd.live.overlay.overlayfs=1" in args, args
    squashfs = version_dir / "packlive.squashfs"
    times["squashfs_mib"] = round(squashfs.stat().st_size / 2**20, 1)

    start = time.monotonic()
    with http_server(version_dir, tmp_path / "lighttpd") as port:
        url = f"http://{GUEST_HOST_ADDRESS}:{port}/{squashfs.name}"
        append = (f"console=ttyS0 panic=-1 {args.replace(URL_PLACEHOLDER, url)} "
                  f"{IMAGE_RELEASE_TO_CONSOLE} {OVERLAY_PROBE}")
        console = boot_qemu(version_dir / "vmlinuz", version_dir / "initrd.img", append,
                            ["IMAGE=packlive", re.escape(f"VERSION={manifest['version']}"),
                             rf"(?m){JOURNAL_PREFIX}MOUNTS-END\s*$", rf"\d+ {UPPER}{PROBE}", MULTI_USER], timeout=420,
                            extra=("-netdev", "user,id=n0", "-device", "e1000,netdev=n0", *HEADLESS))
        served = access_log(tmp_path / "lighttpd", [(f"/{squashfs.name}", "200")])
    times["boot"] = round(time.monotonic() - start, 1)
    keep_boot_logs("pack-live", "squashfs live boot", times, console)

    # The release file exists only in the squashfs: printing it proves the switch to that root.
    assert "IMAGE=packlive" in console and f"VERSION={manifest['version']}" in console, console[-4000:]
    assert re.search(MULTI_USER, console), console[-4000:]
    assert (f"/{squashfs.name}", "200") in served, served
    mounts = mounts_of(console)
    root = mount_holding("/", mounts)
    assert root[2] == "overlay", mounts
    options = dict(o.split("=", 1) for o in root[3].split(",") if "=" in o)
    assert options.get("upperdir") == UPPER, root
    # Writes go to the upper directory, on a tmpfs (RAM); the root's files come from the squashfs.
    assert mount_holding(options["upperdir"], mounts)[2] == "tmpfs", mounts
    assert mount_holding(options["lowerdir"].split(":")[0], mounts)[2] == "squashfs", mounts
    # The file written through / is in the upper directory: len("written-on-the-node\n") bytes.
    assert re.search(rf"{JOURNAL_PREFIX}20 {UPPER}{PROBE}\s*$", console, re.MULTILINE), console[-4000:]
