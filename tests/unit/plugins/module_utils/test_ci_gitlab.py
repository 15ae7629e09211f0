"""The jobs' shell of the GitLab pipeline, run by sh: the argv ansible-playbook gets and the
per-job containers-storage configuration; the diff jobs that follow rebuilt images' layer jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils.ci.gitlab import (
    ENTER_PROJECT,
    STORAGE_SETUP,
    Expand,
    diff_argv,
    gitlab_pipeline,
    pipeline_yaml,
    playbook_argv,
    sh_line,
)
from ansible_collections.hpc.stateless.plugins.module_utils.layers.change_plan import (
    REBUILD,
    REUSE,
    ChangePlan,
    LayerDecision,
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


def small_plan() -> ChangePlan:
    """base (reused) -> compute (rebuilt) -> slurm (rebuilt); images compute and slurm, login on base."""
    layers = {
        "base": LayerDecision("base", action=REUSE, images=["compute", "login", "slurm"]),
        "compute": LayerDecision("compute", action=REBUILD, parent="base", depth=1, images=["compute", "slurm"]),
        "slurm": LayerDecision("slurm", action=REBUILD, parent="compute", depth=2, images=["slurm"]),
    }
    images = {"compute": {"layer": "compute"}, "login": {"layer": "base"}, "slurm": {"layer": "slurm"}}
    return ChangePlan(base="HEAD~1", variable_changes="values", files=[], layers=layers, images=images)


def test_diff_jobs_follow_the_layer_jobs_of_rebuilt_images():
    pipeline = gitlab_pipeline(small_plan(), registry="r.example.org/hpc", tags=["hpc"],
                               diff_boot_root="/srv/tftp")
    assert pipeline["stages"] == ["build", "diff"]
    assert pipeline["variables"]["HPC_STATELESS_BOOT_ROOT"] == "/srv/tftp"
    assert sorted(k for k in pipeline if k.startswith("diff:")) == ["diff:compute", "diff:slurm"]
    job = pipeline["diff:slurm"]
    assert job["stage"] == "diff" and job["needs"] == [{"job": "layer:slurm"}] and job["tags"] == ["hpc"]
    assert job["variables"] == {"HPC_STATELESS_LAYER": "slurm", "HPC_STATELESS_DIFF_IMAGE": "slurm"}
    assert job["artifacts"] == {"name": "image-diff-slurm", "when": "always", "paths": ["image-diff/"]}
    assert job["before_script"] == [ENTER_PROJECT, STORAGE_SETUP]
    assert pipeline["diff:compute"]["needs"] == [{"job": "layer:compute"}]
    assert "diff:login" not in pipeline, "login's layer is reused: nothing new to diff"


def test_without_a_boot_root_there_is_no_diff_stage():
    pipeline = gitlab_pipeline(small_plan())
    assert pipeline["stages"] == ["build"]
    assert not [k for k in pipeline if k.startswith("diff:")]


def test_diff_job_argv_through_sh():
    job = gitlab_pipeline(small_plan(), image_prefix="site-", extra_args=["-e", "x=1"],
                          diff_boot_root="/srv/tftp")["diff:compute"]
    env = {**JOB_VARIABLES, **job["variables"], "HPC_STATELESS_BOOT_ROOT": "/srv/my tftp", "CI_PROJECT_DIR": "/b/p"}
    assert argv_of(job["script"][0], **env) == [
        "-i", "inventory dir", "hpc.stateless.diff",
        "-e", "hpc_stateless_diff_from=layer",
        "-e", "hpc_stateless_diff_images=compute",
        "-e", "hpc_stateless_boot_root=/srv/my tftp",
        "-e", "hpc_stateless_diff_dir=/b/p/image-diff",
        "-e", "hpc_stateless_registry=r.example.org/hpc",
        "-e", "hpc_stateless_registry_tls_verify=false",
        "-e", "hpc_stateless_image_prefix=site-",
        "-e", "x=1",
    ]
    assert sh_line(diff_argv(False, [])).count("hpc_stateless_image_prefix") == 0


def test_pipeline_with_diff_jobs_validates_against_gitlab_schema(tmp_path: Path):
    plan = small_plan()
    path = tmp_path / "pipeline.yml"
    path.write_text(pipeline_yaml(gitlab_pipeline(plan, registry="r", tags=["hpc"], diff_boot_root="/srv/tftp"), plan))
    checker = Path(sys.executable).with_name("check-jsonschema")
    proc = subprocess.run([str(checker), "--builtin-schema", "vendor.gitlab-ci", str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "diff:slurm:" in path.read_text()


def test_rootless_runners_run_each_playbook_inside_buildah_unshare():
    pipeline = gitlab_pipeline(small_plan(), registry="r.example.org/hpc", diff_boot_root="/srv/tftp", rootless=True)
    assert pipeline["variables"]["BUILDAH_ISOLATION"] == "chroot"
    for script in (pipeline[".hpc_stateless_layer"]["script"][0], pipeline["diff:slurm"]["script"][0]):
        words = script.split(" ")
        assert words[:4] == ["buildah", "unshare", "--", "ansible-playbook"], script
    build = argv_of(pipeline[".hpc_stateless_layer"]["script"][0], **JOB_VARIABLES)
    assert build[:4] == ["unshare", "--", "ansible-playbook", "-i"]
    assert "hpc_stateless_build_layer=compute" in build


def test_root_runners_run_the_playbook_directly():
    pipeline = gitlab_pipeline(small_plan())
    assert pipeline[".hpc_stateless_layer"]["script"][0].startswith("ansible-playbook ")
    assert "BUILDAH_ISOLATION" not in pipeline["variables"]
