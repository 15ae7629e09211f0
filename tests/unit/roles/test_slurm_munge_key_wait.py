# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/slurm/files/munge-key-wait (munge.service ExecStartPre), run for real on temporary files.

The key owner is the user running the tests (root in CI builds, anyone locally), so chown works
without privileges.
"""

from __future__ import annotations

import getpass
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "slurm" / "files" / "munge-key-wait"
OWNER = getpass.getuser()
KEY_BYTES = os.urandom(1024)


def wait(key: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "-k", str(key), "-u", OWNER, *args],
                          capture_output=True, text=True, check=False)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_key_fails_with_a_clear_message(tmp_path):
    key = tmp_path / "munge.key"
    started = time.monotonic()
    result = wait(key, "-t", "0", "-s", str(tmp_path / "delivery"))
    assert result.returncode == 1
    assert time.monotonic() - started < 5
    assert f"no munge key at {key} after 0s (nor at {tmp_path / 'delivery'})" in result.stderr
    assert "It is not baked into the image: deliver it at boot" in result.stderr
    assert not key.exists()


def test_present_key_gets_owner_and_mode(tmp_path):
    key = tmp_path / "munge.key"
    key.write_bytes(KEY_BYTES)
    key.chmod(0o644)
    result = wait(key, "-t", "0")
    assert result.returncode == 0, result.stderr
    assert mode(key) == 0o400
    assert "set owner" in result.stdout
    again = wait(key, "-t", "0")
    assert again.returncode == 0 and again.stdout == "", "a correct key must be left as it is"


def test_key_is_installed_from_a_delivery_path(tmp_path):
    key = tmp_path / "etc" / "munge.key"
    key.parent.mkdir()
    delivered = tmp_path / "run" / "credentials"
    delivered.mkdir(parents=True)
    (delivered / "munge.key").write_bytes(KEY_BYTES)
    result = wait(key, "-t", "0", "-s", str(tmp_path / "absent"), "-s", str(delivered))
    assert result.returncode == 0, result.stderr
    assert key.read_bytes() == KEY_BYTES
    assert mode(key) == 0o400
    assert f"installed {key} from {delivered}/munge.key" in result.stdout
    assert [p.name for p in key.parent.iterdir()] == ["munge.key"], "a temporary file was left behind"


def test_waits_for_a_key_that_arrives_later(tmp_path):
    key = tmp_path / "munge.key"

    def deliver() -> None:
        time.sleep(1.5)
        key.write_bytes(KEY_BYTES)

    writer = threading.Thread(target=deliver)
    writer.start()
    result = wait(key, "-t", "20")
    writer.join()
    assert result.returncode == 0, result.stderr
    assert "waiting up to 20s for the munge key" in result.stdout
    assert mode(key) == 0o400


def test_short_key_is_refused(tmp_path):
    key = tmp_path / "munge.key"
    key.write_bytes(b"too short")
    result = wait(key, "-t", "0")
    assert result.returncode == 2
    assert "has 9 bytes, munged needs at least 32" in result.stderr


@pytest.mark.parametrize("args", [("-t", "soon"), ("-x",)])
def test_bad_usage(tmp_path, args):
    result = wait(tmp_path / "munge.key", *args)
    assert result.returncode == 2
