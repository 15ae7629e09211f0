"""Helpers of the hardware-profile test and benchmark: the qemu profile, a cpio boot that probes the guest.

The qemu profile is what a guest of the default ``pc`` machine (and ``q35``) shows in
``/sys/devices/**/modalias`` - captured once by booting the full compute image (see
docs/pack.md, "Hardware profile") and committed as fixtures/qemu.modaliases - plus the
virtio and e1000 drivers named explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pack_support import MULTI_USER, NO_SECRET_DELIVERY, boot_qemu

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "qemu.modaliases"
QEMU_MODULES = ["virtio_net", "virtio_blk", "virtio_pci", "e1000"]
KEPT_PROBE = "virtio_net"  # kept (named), not loaded by udev on a pc machine with an e1000 NIC
PRUNED_PROBE = "bnx2"  # a Broadcom NIC driver: no qemu device, not in the profile
# A modalias line bnx2 claims (BCM5706): the node-side check must name bnx2 as missing.
PRUNED_DEVICE = "pci:v000014E4d0000164Asv00000000sd00000000bc02sc00i00"


def qemu_profile() -> dict:
    return {"modules": list(QEMU_MODULES), "modaliases_file": str(FIXTURE)}


# Runs once multi-user.target is reached (a transient unit ordered after it), output on the console.
# No '"' (kernel command line), no '$' or '%' (unit file expansion) in the script. The markers are
# printed upper-cased by tr, so the kernel's echo of its command line never matches them.
def _mark(name: str) -> str:
    return f"echo hwp-{name.lower()} | tr a-z A-Z"


# udevadm settle: the modules udev loads for the guest's devices (e1000) are loaded before lsmod looks, however
# early multi-user.target is reached (it does not wait for udev's coldplug).
_PROBE = (f"{_mark('BEGIN')}; cat /proc/uptime; grep -E ^Mem /proc/meminfo; udevadm settle --timeout=120; "
          f"modprobe {KEPT_PROBE} && {_mark('KEPT-LOADED')}; lsmod; "
          f"modprobe {PRUNED_PROBE} || {_mark('PRUNED-ABSENT')}; "
          f"/usr/local/sbin/hpc-hwprofile-check && {_mark('CHECK-CLEAN')}; "
          f"echo {PRUNED_DEVICE} > /run/hwp.modaliases; "
          f"/usr/local/sbin/hpc-hwprofile-check /run/hwp.modaliases || {_mark('CHECK-FOUND')}; {_mark('END')}")
PROBE_ARGS = ("systemd.unit=multi-user.target systemd.wants=kernel-command-line.service "
              'systemd.run="/usr/bin/systemd-run --no-block --property=After=multi-user.target '
              "--property=StandardOutput=journal+console /usr/bin/systemctl list-units --no-pager --no-legend "
              'multi-user.target" '
              'systemd.run="/usr/bin/systemd-run --no-block --property=After=multi-user.target '
              f"--property=StandardOutput=journal+console /bin/sh -c '{_PROBE}'\" "
              "systemd.run_success_action=none")


_JOURNAL_PREFIX = re.compile(r"^\[\s*[0-9.]+\]\s+[\w.@-]+\[\d+\]:\s?", re.M)


@dataclass
class GuestProbe:
    console: str
    uptime_at_multi_user: float
    mem_total: int  # bytes
    mem_available: int

    @property
    def ram_used(self) -> int:
        return self.mem_total - self.mem_available

    def section(self) -> str:
        """What the probe printed, without the journal's ``[  76.5] sh[231]: `` line prefixes."""
        match = re.search(r"HWP-BEGIN(.*?)HWP-END", self.console, re.S)
        return _JOURNAL_PREFIX.sub("", match.group(1).replace("\r", "")) if match else ""


def boot_and_probe(kernel: Path, initrd: Path, timeout: float = 600, machine: str = "pc", args: str = "",
                   extra: tuple[str, ...] = ()) -> GuestProbe:
    """Boot the cpio image (as test_pack.py does) and read the probe's output from the console; ``args`` are
    further kernel arguments, ``extra`` further qemu options (the test's, pack_support.NO_LOCAL_DISK_WAIT and
    HEADLESS; the benchmark boots the image as it is)."""
    console = boot_qemu(kernel, initrd, f"console=ttyS0 panic=-1 {NO_SECRET_DELIVERY} {args} {PROBE_ARGS}",
                        [MULTI_USER, r"HWP-END"], timeout, extra=("-machine", machine, *extra))
    probe = GuestProbe(console, 0.0, 0, 0)
    section = probe.section()
    uptime = re.search(r"^([0-9.]+) [0-9.]+$", section, re.M)
    total = re.search(r"^MemTotal:\s+(\d+) kB", section, re.M)
    available = re.search(r"^MemAvailable:\s+(\d+) kB", section, re.M)
    if not (uptime and total and available):
        raise AssertionError(f"the guest printed no probe (multi-user not reached?): {console[-4000:]}")
    probe.uptime_at_multi_user = float(uptime.group(1))
    probe.mem_total, probe.mem_available = int(total.group(1)) * 1024, int(available.group(1)) * 1024
    return probe
