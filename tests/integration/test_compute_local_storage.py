# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The boot-time local storage script of hpc.stateless.compute, run for real against loop devices.

Each test attaches a sparse file with ``losetup --partscan`` and runs
roles/compute/files/hpc-local-storage on it with sfdisk, mkfs.ext4, mkswap and blkid of the
host. Labels are unique per test, so the default whole-system label search (SEARCH=all) finds
only this test's file systems even when other tests run at the same time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "compute" / "files" / "hpc-local-storage"
TOOLS = ("losetup", "sfdisk", "partx", "blkid", "mkfs.ext4", "mkswap", "wipefs", "mount")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for loop devices"),
    pytest.mark.skipif(any(shutil.which(tool) is None for tool in TOOLS),
                       reason=f"needs {', '.join(TOOLS)} (packages util-linux, fdisk, e2fsprogs, mount)"),
    pytest.mark.skipif(not Path("/dev/loop-control").exists(), reason="no loop device support"),
]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


class LoopDisk:
    """A sparse file attached as a partitionable loop device; detached by :meth:`close`."""

    def __init__(self, directory: Path, size_mib: int) -> None:
        self.image = directory / f"disk-{uuid.uuid4().hex[:6]}.img"
        with self.image.open("wb") as handle:
            handle.truncate(size_mib * 1024 * 1024)
        self.device = run("losetup", "--find", "--show", "--partscan", str(self.image)).stdout.strip()

    def partitions(self) -> list[str]:
        name = Path(self.device).name
        found = []
        for entry in sorted(Path("/sys/class/block", name).glob(f"{name}p*/partition")):
            found.append((int(entry.read_text()), f"/dev/{entry.parent.name}"))
        return [device for _number, device in sorted(found)]

    def probe(self, device: str) -> dict[str, str]:
        out = run("blkid", "-p", "-o", "export", device, check=False).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def layout(self) -> list[dict[str, str]]:
        """What each partition holds: TYPE, LABEL, UUID, PART_ENTRY_NAME..."""
        return [self.probe(device) for device in self.partitions()]

    def close(self) -> None:
        for device in self.partitions():
            run("umount", device, check=False)
            run("swapoff", device, check=False)
        run("losetup", "--detach", self.device, check=False)
        self.image.unlink(missing_ok=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[LoopDisk]:
    loop = LoopDisk(tmp_path, 300)
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture
def labels() -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    return {"scratch": f"t{tag}-scr", "swap": f"t{tag}-swp", "log": f"t{tag}-log"}


def write_config(path: Path, **settings: object) -> Path:
    path.write_text("# written by test_compute_local_storage.py\n"
                    + "".join(f'{key}="{value}"\n' for key, value in settings.items()))
    return path


def storage(config: Path, *args: str) -> subprocess.CompletedProcess:
    return run(str(SCRIPT), "-c", str(config), *args, check=False)


def base_config(tmp_path: Path, disk: LoopDisk, labels: dict[str, str], **extra: object) -> Path:
    settings: dict[str, object] = {
        "DISKS": f"/dev/hpc-no-such-disk {disk.device}",
        "DISK_WAIT": 1,
        "SCRATCH_LABEL": labels["scratch"],
        "SWAP_LABEL": labels["swap"],
        "LOG_LABEL": labels["log"],
        "SWAP_SIZE_MIB": 32,
        "LOG_SIZE_MIB": 0,
    }
    settings.update(extra)
    return write_config(tmp_path / "local-storage.conf", **settings)


def test_first_run_creates_second_run_changes_nothing(tmp_path, disk, labels):
    config = base_config(tmp_path, disk, labels, LOG_SIZE_MIB=40, LOG_SEED=str(REPO / "roles" / "compute"),
                         SCRATCH_ROOT_MODE="1777")

    first = storage(config)
    assert first.returncode == 0, first.stderr
    layout = disk.layout()
    assert [(p.get("TYPE"), p.get("LABEL"), p.get("PART_ENTRY_NAME")) for p in layout] == [
        ("swap", labels["swap"], labels["swap"]),
        ("ext4", labels["log"], labels["log"]),
        ("ext4", labels["scratch"], labels["scratch"]),
    ]
    assert int(layout[0]["PART_ENTRY_SIZE"]) * 512 == 32 * 1024 * 1024
    assert int(layout[1]["PART_ENTRY_SIZE"]) * 512 == 40 * 1024 * 1024
    assert f"created {labels['swap']} {labels['scratch']} {labels['log']} on {disk.device}" in first.stdout

    table = run("sfdisk", "--dump", disk.device).stdout
    second = storage(config)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout
    assert disk.layout() == layout, "the second run changed a file system"
    assert run("sfdisk", "--dump", disk.device).stdout == table, "the second run changed the partition table"


def test_new_filesystems_are_prepared(tmp_path, disk, labels):
    seed = tmp_path / "seed"
    (seed / "sub").mkdir(parents=True)
    (seed / "sub" / "kept.log").write_text("from the image\n")
    config = base_config(tmp_path, disk, labels, LOG_SIZE_MIB=40, LOG_SEED=str(seed), SCRATCH_ROOT_MODE="1777")
    assert storage(config).returncode == 0

    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    _swap, log, scratch = disk.partitions()
    run("mount", log, str(mountpoint))
    try:
        assert (mountpoint / "sub" / "kept.log").read_text() == "from the image\n"
    finally:
        run("umount", str(mountpoint))
    run("mount", scratch, str(mountpoint))
    try:
        assert oct(mountpoint.stat().st_mode & 0o7777) == "0o1777"
    finally:
        run("umount", str(mountpoint))


def test_existing_labels_are_kept_when_the_layout_grows(tmp_path, disk, labels):
    assert storage(base_config(tmp_path, disk, labels)).returncode == 0
    before = disk.layout()
    assert [p["LABEL"] for p in before] == [labels["swap"], labels["scratch"]]

    # The site now asks for a log file system too: the disk carries our labels, so it is not touched.
    grown = storage(base_config(tmp_path, disk, labels, LOG_SIZE_MIB=40))
    assert grown.returncode == 0
    assert f"but {labels['log']} missing; not repartitioning {disk.device}" in grown.stderr
    assert "wipefs" in grown.stderr
    assert disk.layout() == before


def test_labels_are_found_without_a_swap(tmp_path, disk, labels):
    config = base_config(tmp_path, disk, labels, SWAP_SIZE_MIB=0)
    assert storage(config).returncode == 0
    assert [(p["TYPE"], p["LABEL"]) for p in disk.layout()] == [("ext4", labels["scratch"])]
    assert "nothing to do" in storage(config).stdout


def test_missing_disk_is_logged_and_not_an_error(tmp_path, labels):
    config = write_config(tmp_path / "c.conf", DISKS="/dev/hpc-no-such-disk /dev/hpc-nor-this", DISK_WAIT=1,
                          SCRATCH_LABEL=labels["scratch"], SWAP_LABEL=labels["swap"], SWAP_SIZE_MIB=32)
    result = storage(config)
    assert result.returncode == 0
    assert "no local disk found among '/dev/hpc-no-such-disk /dev/hpc-nor-this' after 1s" in result.stdout
    assert "The node boots without them (their fstab entries are nofail)" in result.stdout


def test_disk_with_other_data_is_left_alone_unless_claimed(tmp_path, disk, labels):
    run("mkfs.ext4", "-q", "-F", "-L", "foreign", disk.device)
    config = base_config(tmp_path, disk, labels)
    left = storage(config)
    assert left.returncode == 0
    assert f"{disk.device} holds other data (" in left.stdout and "TYPE=ext4" in left.stdout
    assert "left alone" in left.stdout and "compute_local_storage_claim_nonempty" in left.stdout
    assert disk.probe(disk.device).get("LABEL") == "foreign"
    assert disk.partitions() == []

    claimed = storage(base_config(tmp_path, disk, labels, CLAIM_NONEMPTY="yes"))
    assert claimed.returncode == 0, claimed.stderr
    assert [p["LABEL"] for p in disk.layout()] == [labels["swap"], labels["scratch"]]
    assert disk.probe(disk.device).get("LABEL") is None, "the old whole-disk file system was not wiped"


def test_disk_in_use_is_never_partitioned(tmp_path, disk, labels):
    run("mkfs.ext4", "-q", "-F", "-L", "busy", disk.device)
    mountpoint = tmp_path / "busy"
    mountpoint.mkdir()
    run("mount", disk.device, str(mountpoint))
    try:
        result = storage(base_config(tmp_path, disk, labels, CLAIM_NONEMPTY="yes"))
        assert result.returncode == 0
        assert f"{disk.device} is in use ({disk.device}:{mountpoint})" in result.stderr
    finally:
        run("umount", str(mountpoint))
    assert disk.probe(disk.device).get("LABEL") == "busy"


def test_search_on_the_disk_only(tmp_path, disk, labels):
    config = base_config(tmp_path, disk, labels, SEARCH="disk")
    assert storage(config).returncode == 0
    assert f"found {labels['swap']}={disk.partitions()[0]}" in storage(config).stdout


def test_dry_run_changes_nothing(tmp_path, disk, labels):
    result = storage(base_config(tmp_path, disk, labels), "-n")
    assert result.returncode == 0
    assert "dry run: would run: sfdisk" in result.stdout
    assert f"dry run: would have created {labels['swap']} {labels['scratch']}" in result.stdout
    assert disk.partitions() == [] and disk.probe(disk.device) == {}


def test_too_small_disk_is_reported(tmp_path, disk, labels):
    result = storage(base_config(tmp_path, disk, labels, SWAP_SIZE_MIB=400))
    assert result.returncode == 1
    assert "has 300 MiB, the layout needs at least 466 MiB" in result.stderr
    assert disk.partitions() == []


@pytest.mark.parametrize(("setting", "message"), [
    ({"SWAP_SIZE_MIB": "lots"}, "SWAP_SIZE_MIB must be a whole number, got 'lots'"),
    ({"SCRATCH_FSTYPE": "btrfs"}, "SCRATCH_FSTYPE must be ext4 or xfs, got 'btrfs'"),
    ({"SCRATCH_LABEL": "much-too-long-label"}, "is longer than the 16 characters a ext4 label can hold"),
    ({"SCRATCH_FSTYPE": "xfs", "SCRATCH_LABEL": "local-scratch"}, "longer than the 12 characters a xfs label"),
    ({"SEARCH": "everywhere"}, "SEARCH must be all or disk"),
    ({"SCRATCH_ROOT_MODE": "rwx"}, "SCRATCH_ROOT_MODE must be an octal mode"),
])
def test_bad_configuration_names_the_key(tmp_path, setting, message):
    config = write_config(tmp_path / "bad.conf", DISKS="/dev/hpc-no-such-disk", **setting)
    result = storage(config)
    assert result.returncode == 2
    assert message in result.stderr
    assert str(config) in result.stderr


def test_unknown_key_and_missing_config(tmp_path):
    config = tmp_path / "unknown.conf"
    config.write_text("DISKS=/dev/x\nSCRATCH_SIZE=10\n")
    result = storage(config)
    assert result.returncode == 2
    assert f"{config} line 2: unknown key SCRATCH_SIZE" in result.stderr

    missing = storage(tmp_path / "absent.conf")
    assert missing.returncode == 2
    assert "absent.conf is missing or unreadable" in missing.stderr
