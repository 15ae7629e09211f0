"""Shared pieces of the nspawn integration tests (tests/integration/test_nspawn*.py).

The tests build their layers once into a prefix of their own (kept cached between runs, as
any layer is) from tests/integration/inventory_nspawn, and give every test module a runtime
directory of its own, so "nothing left behind" can be checked without seeing other builds
or containers that run on the same host.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from ansible import constants as C
from ansible.playbook.play_context import PlayContext

from ansible_collections.hpc.stateless.plugins.connection import nspawn as nspawn_plugin
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.container import container_stem
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import stop_sessions
from conftest import REPO, buildah, run_site, tag_default_layers

TEST_PREFIX = "localhost/hpc-stateless-nspawn-test"
INVENTORY = REPO / "tests" / "integration" / "inventory_nspawn"
PLUGIN = "hpc.stateless.nspawn"


@functools.lru_cache(maxsize=None)
def build_test_layers() -> dict[str, str]:
    """Build (or find cached) the nspawn test layers once per session: ``{layer: image ref}``. Their base has the
    default inventory's bootstrap spec: the default build's bootstrapped root is tagged into the test prefix first
    (a name only, same content key), so a fresh checkout bootstraps once, in ``make build``, not again here."""
    tag_default_layers(TEST_PREFIX, ("bootstrap/base",))
    proc = run_site("-e", f"hpc_stateless_image_prefix={TEST_PREFIX}", inventory=INVENTORY)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {layer: f"{TEST_PREFIX}/{layer}:latest" for layer in ("base", "units", "units_broken")}


def new_runtime_dir() -> str:
    path = f"/var/tmp/hpc-nspawn-test-{uuid.uuid4().hex[:8]}"
    os.makedirs(path, mode=0o700)
    return path


def leftovers(runtime_dir: str) -> dict[str, list[str]]:
    """What sessions under ``runtime_dir`` left: directories, mounts, processes, containers."""
    found: dict[str, list[str]] = {"sessions": [], "mounts": [], "processes": [], "containers": []}
    if os.path.isdir(runtime_dir):
        found["sessions"] = sorted(os.listdir(runtime_dir))
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        found["mounts"] = [line.split()[4] for line in handle if line.split()[4].startswith(runtime_dir)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        # supervisors name their session dir; booted containers bind their hostname file from it
        if runtime_dir in cmdline and int(pid) != os.getpid():
            found["processes"].append(f"{pid}: {cmdline.strip()}")
    stem = container_stem(runtime_dir)
    found["containers"] = [line.split()[-1] for line in buildah("containers", "--noheading").splitlines()
                           if line.split() and line.split()[-1].startswith(stem)]
    return {kind: items for kind, items in found.items() if items}


def wait_clean(runtime_dir: str, timeout: float = 30.0) -> dict[str, list[str]]:
    """Leftovers once the supervisors had ``timeout`` seconds to tear down (they do so when the
    ansible-playbook run that owns them exits)."""
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(runtime_dir)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def remove_runtime_dir(runtime_dir: str) -> None:
    """Stop whatever a failed test left, then remove the directory (never hides a leak: the tests
    assert on leftovers before this runs)."""
    stop_sessions(runtime_dir)
    for pid_line in leftovers(runtime_dir).get("processes", []):
        pid = int(pid_line.split(":", 1)[0])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(runtime_dir, ignore_errors=True)


def connection(runtime_dir: str, host: str = "nspawn-test", **options: Any) -> nspawn_plugin.Connection:
    """The plugin as Ansible loads it, with ``ansible_nspawn_<option>`` variables set.

    Used to drive the connection from Python (the owner of its session is then this test
    process, so tests stop sessions themselves with ``reset()``).
    """
    C.config.initialize_plugin_configuration_definitions(
        "connection", PLUGIN, yaml.safe_load(nspawn_plugin.DOCUMENTATION)["options"])
    conn = nspawn_plugin.Connection(PlayContext(), None)
    conn._load_name = PLUGIN
    variables = {"inventory_hostname": host, "ansible_nspawn_runtime_dir": runtime_dir}
    for name, value in options.items():
        variables[name if name.startswith("ansible_") else f"ansible_nspawn_{name}"] = value
    conn.set_options(var_options=variables)
    return conn


def run(conn: nspawn_plugin.Connection, command: str, in_data: bytes | None = None) -> tuple[int, str, str]:
    rc, out, err = conn.exec_command(command, in_data=in_data, sudoable=False)
    return rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
