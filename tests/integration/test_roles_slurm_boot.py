# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boot the default DAG's slurm image under systemd-nspawn: the munge key is delivered at boot.

The image holds no munge key. Booted, munge.service waits in its ExecStartPre (munge-key-wait);
once a key is put in place it gets owner munge and mode 0400, munged starts and a credential
round-trips. The local storage unit does not run in a container. The container has no network
(--private-network), so slurmd and the reboot-on-drain check reach nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import buildah, layer_images, run_site

IMAGE_PREFIX = "localhost/hpc-stateless"
IMAGE = f"{IMAGE_PREFIX}/slurm:latest"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for systemd-nspawn"),
    pytest.mark.skipif(not shutil.which("systemd-nspawn") or not shutil.which("nsenter"),
                       reason="needs systemd-nspawn (systemd-container) and nsenter (util-linux)"),
]


class Booted:
    """A booted systemd-nspawn container of a working container's root."""

    def __init__(self, root: str, machine: str) -> None:
        self.root = root
        self.log = Path(f"/var/tmp/{machine}.log")
        with self.log.open("xb") as log:  # a name in /var/tmp: never through what another user put there
            self.nspawn = subprocess.Popen(
                ["systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", "--private-network",
                 "--machine", machine, "--directory", root],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.init_pid = self._find_init()

    def _find_init(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children").read_text().split():
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
            time.sleep(0.2)
        raise AssertionError(f"systemd did not start in the container: {self.log.read_text()[-2000:]}")

    def run(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", "-t", str(self.init_pid), "-m", "-u", "-i", "-n", "-p", "sh", "-c", command],
                              capture_output=True, text=True, check=False, timeout=60)

    def wait_for(self, command: str, expected: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.run(command).stdout.strip()
            if out == expected:
                return out
            time.sleep(0.5)
        raise AssertionError(f"{command!r} gave {out!r}, not {expected!r}, within {timeout}s")

    def stop(self) -> None:
        if self.nspawn.poll() is None:
            self.run("systemctl poweroff")
            try:
                self.nspawn.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.nspawn.pid, 9)
                self.nspawn.wait(timeout=10)
        self.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def slurm_image() -> str:
    # Another image of a slurm layer (e.g. tests/integration/inventory_roles built with its own prefix).
    if os.environ.get("HPC_STATELESS_SLURM_TEST_IMAGE"):
        return os.environ["HPC_STATELESS_SLURM_TEST_IMAGE"]
    proc = run_site()  # the default inventory: a no-op when make test's site.yml built it
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # The default DAG has a slurm layer: site.yml passing without it is a failure, not a reason to skip.
    assert IMAGE in layer_images(IMAGE_PREFIX), f"site.yml passed but left no slurm layer image {IMAGE}"
    return IMAGE


@pytest.fixture(scope="module")
def booted(slurm_image) -> Iterator[Booted]:
    name = f"hpc-stateless-slurmboot-{uuid.uuid4().hex[:6]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, slurm_image)
    machine = None
    try:
        root = buildah("mount", name).strip()
        machine = Booted(root, name)
        yield machine
    finally:
        if machine is not None:
            machine.stop()
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def test_munge_waits_for_a_key_that_is_not_in_the_image(booted):
    assert not Path(booted.root, "etc/munge/munge.key").exists()
    booted.wait_for("systemctl show -p ActiveState --value munge.service", "activating")
    journal = booted.run("journalctl -u munge.service --no-pager").stdout
    assert "munge-key-wait: waiting up to" in journal


def test_local_storage_is_skipped_in_a_container(booted):
    booted.wait_for("systemctl show -p ConditionResult --value hpc-local-storage.service", "no")


def test_delivered_key_starts_munge(booted):
    key = Path(booted.root, "etc/munge/munge.key")
    key.write_bytes(os.urandom(1024))
    key.chmod(0o644)
    booted.wait_for("systemctl is-active munge.service", "active", timeout=30)
    assert booted.run("stat -c %U:%a /etc/munge/munge.key").stdout.strip() == "munge:400"
    assert "STATUS:          Success (0)" in booted.run("munge -n | unmunge").stdout
