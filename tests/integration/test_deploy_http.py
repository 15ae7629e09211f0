"""iPXE over HTTP: deploy.yml renders HTTP iPXE scripts (hpc_stateless_boot_url), qemu boots them from lighttpd.

lighttpd (Debian package, scripts/setup.sh) serves the boot root on 127.0.0.1; the guest sees
the host as 10.0.2.2 (qemu user networking). DHCP's filename is the URL of ipxe/boot.ipxe,
which the NIC's iPXE ROM (ipxe-qemu) fetches over HTTP; it chains ipxe/nodes/<mac>.ipxe (or,
on a 404, ipxe/images/<default>.ipxe), which loads <image>/vmlinuz and <image>/initrd over HTTP.
qemu's TFTP server points at an empty directory, so nothing can come over TFTP. The image is
the deploy tests' marker image (a real kernel + busybox initramfs, deploy_support.py).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import REPO, run_site
from deploy_support import (
    GUEST_HOST_ADDRESS,
    MARKER,
    access_log,
    find_kernel,
    http_server,
    pxe_boot,
    release_of,
    write_inventory,
    write_pack,
)

IMAGE = "httptest"
VERSION = "1.0~http+site1"
NODE_MAC = "52:54:00:12:34:57"
OTHER_MAC = "52:54:00:75:43:21"  # no own script: boot.ipxe falls back to the default image's

pytestmark = pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None or shutil.which("lighttpd") is None
                                or not os.path.exists("/usr/lib/ipxe/qemu/pxe-e1000.rom"),
                                reason="needs qemu-system-x86, ipxe-qemu and lighttpd (scripts/setup.sh)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("http")
    root = base / "www"
    root.mkdir()
    (base / "no-tftp").mkdir()
    with http_server(root, base / "lighttpd") as port:
        url = f"http://{GUEST_HOST_ADDRESS}:{port}"
        inventory = write_inventory(
            base / "inventory",
            images={IMAGE: {"layer": "base", "formats": ["cpio.zst"], "kernel_args": "panic=-1 console=ttyS0"}},
            nodes={"n1": {"hpc_stateless_boot_mac": NODE_MAC, "hpc_stateless_boot_kernel_args": "hpc_node=n1"}},
            hpc_stateless_boot_root=str(root),
            hpc_stateless_boot_url=url,
            hpc_stateless_pack_output_dir=str(base / "out"),
            hpc_stateless_boot_lock_timeout=0,
        )
        write_pack(base / "out", IMAGE, VERSION, find_kernel(), created="2026-03-01T00:00:00Z")
        proc = run_site(inventory=inventory, playbook="playbooks/deploy.yml")
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        yield {"base": base, "root": root, "url": url, "logs": base / "lighttpd"}


def boot(site, name: str, mac: str) -> dict[str, str]:
    console, seconds = pxe_boot(site["base"] / "no-tftp", mac, site["base"] / f"{name}.log",
                                bootfile=f"{site['url']}/ipxe/boot.ipxe", timeout=240)
    assert f"{MARKER} end" in console, console[-3000:]
    log = REPO / "build" / "test-logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"http-boot-{name}.json").write_text(json.dumps({"seconds": round(seconds, 1)}) + "\n")
    return release_of(console)


def test_node_script_loads_kernel_and_initrd_over_http(site):
    script = (site["root"] / "ipxe" / "nodes" / f"{NODE_MAC.replace(':', '-')}.ipxe").read_text()
    assert f"kernel {site['url']}/{IMAGE}/vmlinuz " in script
    assert f"initrd --name initrd {site['url']}/{IMAGE}/initrd" in script

    release = boot(site, "ipxe-http-node", NODE_MAC)
    assert release["IMAGE"] == IMAGE and release["VERSION"] == VERSION
    cmdline = release["CMDLINE"].split()
    assert "hpc_node=n1" in cmdline and "initrd=initrd" in cmdline and "rdinit=/sbin/init" in cmdline
    node_script = f"/ipxe/nodes/{NODE_MAC.replace(':', '-')}.ipxe"
    expected = [(path, "200") for path in ("/ipxe/boot.ipxe", node_script, f"/{IMAGE}/vmlinuz", f"/{IMAGE}/initrd")]
    served = access_log(site["logs"], expected)
    for pair in expected:
        assert pair in served, (pair, served)


def test_unknown_mac_falls_back_to_the_default_image_script(site):
    release = boot(site, "ipxe-http-default", OTHER_MAC)
    assert release["VERSION"] == VERSION
    assert "hpc_node=n1" not in release["CMDLINE"].split()  # the image's script, not n1's
    expected = [(f"/ipxe/nodes/{OTHER_MAC.replace(':', '-')}.ipxe", "404"), (f"/ipxe/images/{IMAGE}.ipxe", "200")]
    served = access_log(site["logs"], expected)
    for pair in expected:
        assert pair in served, (pair, served)
