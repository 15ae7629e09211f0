# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A verify boot of an image of another architecture than the build host's, under qemu-user emulation.

systemd-nspawn starts the image's own systemd, an arm64 program on an x86_64 host, through the qemu-user binfmt
handler (docs/arch.md); so is every program it starts. One thing of a real boot fails there: the service manager,
emulated, cannot set up a unit's credentials directory, so every unit with ``LoadCredential=`` fails at step
CREDENTIALS (exit status 243, "Failed to set up credentials: Invalid argument") before its program runs. In Debian
12 (systemd 252) these are systemd-tmpfiles-setup, systemd-tmpfiles-setup-dev, systemd-sysusers and systemd-sysctl
- the system would be "degraded" for a fault of the emulator, not of the image: the same image booted by its own
kernel under qemu-system-aarch64 starts all four (tests/integration/test_arm64_boot.py).

The emulated boot therefore gets one drop-in for every service (``service.d``) that empties the credential list
(``LoadCredential=``): the units run their programs and are judged like any other. What those lines load
(``tmpfiles.extra``, ``sysctl.extra``, ``passwd.*``) comes from the service manager's own credentials, which a verify
boot never passes, so nothing is lost. The drop-in is bound in under /run for that boot only (verify_boot_files),
never written into the image, and the verification record names the emulation in its settings.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import host_arch

#: Where the emulated boot's drop-in is bound in (a runtime unit directory: gone with the boot).
DROPIN_PATH = "/run/systemd/system/service.d/90-hpc-stateless-verify-emulation.conf"
DROPIN = ("# hpc.stateless verify: this boot runs under qemu-user emulation, where systemd cannot set up a unit's\n"
          "# credentials directory; no credentials are passed to a verify boot (docs/verify.md, arm64).\n"
          "[Service]\nLoadCredential=\n")


def emulated(arch: Any, host: str | None = None) -> bool:
    """Whether an image of ``arch`` (Debian's name; "" or None: the build host's) boots under emulation here."""
    return bool(arch) and str(arch) != (host or host_arch())


def settings(arch: Any, host: str | None = None) -> dict[str, str]:
    """What the verification record's settings add for an emulated boot (``emulation``); {} for a native one."""
    if not emulated(arch, host):
        return {}
    return {"emulation": f"qemu-user: {arch} on {host or host_arch()}"}


def boot_files(arch: Any, host: str | None = None) -> list[dict[str, str]]:
    """The files of an emulated boot (hpc.stateless.verify_boot_files ``files``): the drop-in; [] when native."""
    return [{"path": DROPIN_PATH, "content": DROPIN}] if emulated(arch, host) else []
