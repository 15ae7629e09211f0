# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The boot-storm benchmark's quick mode (24 nodes) as a check of what it proves beyond timing.

benchmarks/storm_bench.py --quick with the scenarios whose outcome is not a time: one server killed
mid-storm (every node still boots a verified image), a switch mid-storm (0 mixed or corrupt images,
both releases booted), rack caches with proxy_cache_lock (the origin sends <= 1.1 copies per cache).
Real nginx in network namespaces, tc-limited links, the first stage's own hpc-fetch on every node.
The full run (>= 200 nodes, every scenario, the time goals) is ``make bench`` (docs/scale.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nginx") is None,
                                reason="needs root (network namespaces) and nginx (scripts/setup.sh)")


def test_quick_storm_boots_every_node_with_a_verified_unmixed_image(tmp_path):
    output = tmp_path / "storm.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "storm_bench.py"), "--quick",
                           "--scenarios", "kill,switch,cache", "--output", str(output)],
                          capture_output=True, text=True, timeout=900, check=False, cwd=REPO)
    assert output.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(output.read_text())
    kill, switch, cache = (data["scenarios"][name] for name in ("kill", "switch", "cache"))
    for name, scenario in data["scenarios"].items():
        assert scenario["verified"] == scenario["nodes"] == 24, (name, scenario)
    assert kill["server_copies"]["s0"] < 24  # killed mid-storm: the others served the rest
    assert switch["mixed_or_corrupt"] == 0, switch
    assert switch["booted_old"] > 0 and switch["booted_new"] > 0, switch
    assert cache["origin_copies_per_cache"] <= 1.1, cache
    assert done.returncode == 0, done.stdout[-3000:]
