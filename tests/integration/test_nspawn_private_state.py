"""An ordinary local user cannot steer root's nspawn sessions through their runtime directory.

Root acts on what a session's files name: it kills the supervisor's pid, unmounts the overlay, removes the working
container with buildah and enters the container's namespaces. A real unprivileged user (made with ``useradd`` as
tests/integration/rootless_support.py makes the rootless build user) plants a dead session in a directory of its
own, whose spec names a program of the user as buildah; root's clean-up of that directory must refuse it, naming it,
and never run the program. Nothing boots: the refusal comes first (a few seconds in all).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import uuid
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.commands import NspawnError
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.session import Session, stop_sessions
from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.spec import SessionSpec
from rootless_support import USER, as_user, ensure_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates a user: the integration suite runs as root")

PLANT = """
set -e
mkdir -m {mode} "$1" "$1/$5"
printf '#!/bin/sh\\nid -u >> "%s"\\n' "$2" > "$3"
chmod 755 "$3"
printf '%s' "$4" > "$1/$5/spec.json"
printf '%s' '{{"status": "stopped", "container": "planted"}}' > "$1/$5/state.json"
"""


@pytest.fixture()
def planted():
    """A runtime directory the user made under /var/tmp (as it could make /var/tmp/hpc-nspawn), with a dead session
    whose spec names the user's program."""
    ensure_user()
    token = uuid.uuid4().hex[:8]
    home, runtime = Path(f"/var/tmp/hpc-nspawn-tools-{token}"), Path(f"/var/tmp/hpc-nspawn-planted-{token}")
    program, marker = home / "buildah", home / "ran"
    as_user(USER, ["mkdir", "-m", "0755", str(home)])
    victim = SessionSpec("victim", image="localhost/x/y:z", runtime_dir=str(runtime), owner_pid=2 ** 22 + 1,
                         owner_start="1")
    spec = victim.to_dict()
    spec.update(nspawn=str(program), nsenter=str(program), buildah=str(program))
    yield runtime, marker, victim.id, lambda mode: as_user(USER, ["sh", "-c", PLANT.format(mode=mode), "plant",
                                                                  str(runtime), str(marker), str(program),
                                                                  json.dumps(spec), victim.id])
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.parametrize("mode", ["0755", "0777"])
def test_roots_clean_up_refuses_a_runtime_directory_of_another_user_and_runs_nothing_of_it(planted, mode):
    runtime, marker, session, plant = planted
    proc = plant(mode)
    assert proc.returncode == 0, proc.stderr
    assert os.stat(runtime).st_uid != 0
    for act in (lambda: stop_sessions(str(runtime)),
                lambda: Session(SessionSpec("victim", image="localhost/x/y:z", runtime_dir=str(runtime))).ensure()):
        try:
            with pytest.raises(NspawnError, match=f"the nspawn runtime directory \\(ansible_nspawn_runtime_dir\\): "
                                                  f"{runtime} belongs to uid {os.stat(runtime).st_uid}, not to this "
                                                  "user \\(uid 0\\): another user made it first"):
                act()
        finally:
            assert not marker.exists(), f"root ran the planted program as uid {marker.read_text().strip()}"
    assert (runtime / session / "spec.json").exists()  # nothing of it removed either


def test_roots_default_runtime_directory_is_one_no_other_user_can_make_or_write():
    from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.state import (
        checked_runtime_dir,
        default_runtime_dir,
    )

    path = checked_runtime_dir(default_runtime_dir())
    assert path == "/run/hpc-stateless/nspawn"
    for directory in (path, os.path.dirname(path)):
        info = os.lstat(directory)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and stat.S_IMODE(info.st_mode) & 0o022 == 0
    proc = as_user(ensure_user().pw_name, ["mkdir", "-p", os.path.join(path, "planted")])
    assert proc.returncode != 0 and "Permission denied" in proc.stderr
