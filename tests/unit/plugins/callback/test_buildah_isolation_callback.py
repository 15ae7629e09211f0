"""The buildah_isolation callback: the environment it sets and the connection plugins it loads before any worker forks.

Each task runs in a fork of the controller: a plugin the controller loaded is there in every fork, one it did not
is compiled again for each task. Checked in a fresh interpreter (this process may have imported the plugins already).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]

PROBE = """
import json, os, sys
from ansible.plugins.loader import callback_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible_collections.hpc.stateless.plugins.module_utils._build import rootless
rootless.is_rootless = lambda: False
prefix = "ansible_collections.hpc.stateless.plugins.connection."
before = sorted(name for name in sys.modules if name.startswith(prefix))
if len(sys.argv) > 2:  # a connection plugin that cannot be loaded
    from ansible.plugins import loader
    def refuse(*_args, **_kwargs):
        raise ImportError("no such module: " + sys.argv[2])
    loader.connection_loader.get = refuse
callback = callback_loader.get("hpc.stateless.buildah_isolation")
callback.set_options()
after = sorted(name for name in sys.modules if name.startswith(prefix))
print(json.dumps({"before": before, "after": after, "isolation": os.environ.get("BUILDAH_ISOLATION")}))
"""


def probe(env_isolation: str | None, *extra: str) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / ".collections"), "HOME": str(Path.home())}
    if env_isolation is not None:
        env["BUILDAH_ISOLATION"] = env_isolation
    proc = subprocess.run([sys.executable, "-c", PROBE, str(REPO / ".collections"), *extra], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_connection_plugins_are_loaded_in_the_controller_before_any_task():
    seen = probe(None)
    assert seen["before"] == []
    assert seen["after"] == ["ansible_collections.hpc.stateless.plugins.connection.buildah",
                             "ansible_collections.hpc.stateless.plugins.connection.nspawn"]


def test_buildah_isolation_defaults_to_chroot_and_keeps_a_value_already_set():
    assert probe(None)["isolation"] == "chroot"
    assert probe("oci")["isolation"] == "oci"


def test_a_connection_plugin_that_cannot_load_stops_no_run_here():
    """Only a task over that connection fails (and says why); a run that never uses it goes on."""
    seen = probe(None, "broken")
    assert seen["after"] == [] and seen["isolation"] == "chroot"
