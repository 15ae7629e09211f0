"""The jobs' shell of the GitLab pipeline, run by sh: the argv ansible-playbook gets and the
per-job containers-storage configuration."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils.ci.gitlab import (
    STORAGE_SETUP,
    Expand,
    playbook_argv,
    sh_line,
)

JOB_VARIABLES = {
    "HPC_STATELESS_INVENTORY": "inventory dir", "HPC_STATELESS_PLAYBOOK": "hpc.stateless.layer",
    "HPC_STATELESS_LAYER": "compute", "HPC_STATELESS_REGISTRY": "r.example.org/hpc",
    "HPC_STATELESS_REGISTRY_TLS_VERIFY": "false", "HPC_STATELESS_IMAGE_PREFIX": "site-",
}


def run_sh(script: str, **env: str) -> str:
    return subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], **env}, check=True,
                          capture_output=True, text=True).stdout


def argv_of(line: str, **env: str) -> list[str]:
    """The argv sh builds from a command line (its first word replaced by a printer)."""
    words = line.split(" ", 1)[1]
    return run_sh(f"set -- {words}; for w in \"$@\"; do printf '%s\\0' \"$w\"; done", **env).split("\0")[:-1]


def test_sh_line_expands_only_the_words_written_here():
    line = sh_line(["echo", Expand("$HOME/x"), "$HOME", "it's", "a b"])
    assert argv_of(line, HOME="/h") == ["/h/x", "$HOME", "it's", "a b"]


def test_playbook_argv_through_sh():
    line = sh_line(playbook_argv(True, ["--diff", "-e", "motd='$(reboot)'"]))
    assert line.startswith("ansible-playbook ")
    assert argv_of(line, **JOB_VARIABLES) == [
        "-i", "inventory dir", "hpc.stateless.layer",
        "-e", "hpc_stateless_build_layer=compute",
        "-e", "hpc_stateless_registry=r.example.org/hpc",
        "-e", "hpc_stateless_registry_tls_verify=false",
        "-e", "hpc_stateless_image_prefix=site-",
        "--diff", "-e", "motd='$(reboot)'",
    ]
    assert "hpc_stateless_image_prefix" not in sh_line(playbook_argv(False, []))


def test_storage_setup_gives_each_layer_its_own_storage(tmp_path: Path):
    script = STORAGE_SETUP + '\nprintf "%s" "${CONTAINERS_STORAGE_CONF:-unset}"'
    conf = run_sh(script, HPC_STATELESS_STORAGE_ROOT=str(tmp_path), HPC_STATELESS_LAYER="compute")
    assert conf == f"{tmp_path}/compute/storage.conf"
    assert Path(conf).read_text() == (f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp_path}/compute/graph"\n'
                                      f'runroot = "{tmp_path}/compute/run"\n')
    assert run_sh(script, HPC_STATELESS_LAYER="compute") == "unset"
