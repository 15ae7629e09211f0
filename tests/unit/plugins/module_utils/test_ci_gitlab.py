"""The jobs' shell of the GitLab pipeline, run by sh: the argv ansible-playbook gets and the
per-job containers-storage configuration; the diff jobs that follow rebuilt images' layer jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.utils.unsafe_proxy import AnsibleUnsafeText

from ansible_collections.hpc.stateless.plugins.module_utils._ci.gitlab import (
    ENTER_PROJECT,
    STORAGE_SETUP,
    VARS_FILE,
    Expand,
    diff_vars,
    gitlab_pipeline,
    job_vars_setup,
    pipeline_yaml,
    playbook_argv,
    playbook_vars,
    sh_line,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import (
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


# Stands in for ansible-playbook in the jobs' shell: prints its argv (NUL-separated) and copies the vars
# file it was given (-e @file) to $VARS_COPY.
FAKE_PLAYBOOK = """#!/bin/sh
for w in "$@"; do
  printf '%s\\0' "$w"
  case "$w" in @*) cp "${w#@}" "$VARS_COPY" ;; esac
done
"""


def run_job(script: list[str], tmp_path: Path, **env: str) -> tuple[list[str], dict]:
    """Run a job's script lines as GitLab's shell would (one shell), with ansible-playbook faked:
    the argv it got and the variables of its vars file, as Ansible loads them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ansible-playbook").write_text(FAKE_PLAYBOOK)
    (bin_dir / "ansible-playbook").chmod(0o755)
    copy = tmp_path / "vars.yml"
    proc = subprocess.run(["sh", "-ec", "\n".join(script)], check=True, capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path), "VARS_COPY": str(copy),
                               **env})
    argv = proc.stdout.split("\0")[:-1]
    assert not list(tmp_path.glob("tmp.*")), "the vars file outlives the job's shell"
    return argv, DataLoader().load_from_file(str(copy))


def test_playbook_argv_through_sh(tmp_path: Path):
    script = [job_vars_setup(playbook_vars(True)), sh_line(playbook_argv(["--diff", "-e", "motd='$(reboot)'"]))]
    argv, variables = run_job(script, tmp_path, **JOB_VARIABLES)
    assert argv[:3] == ["-i", "inventory dir", "hpc.stateless.layer"]
    assert argv[3] == "-e" and argv[4].startswith("@") and argv[5:] == ["--diff", "-e", "motd='$(reboot)'"]
    assert variables == {
        "hpc_stateless_build_layer": "compute",
        "hpc_stateless_registry": "r.example.org/hpc",
        "hpc_stateless_registry_tls_verify": "false",
        "hpc_stateless_image_prefix": "site-",
    }
    assert "hpc_stateless_image_prefix" not in playbook_vars(False)


def test_job_variables_are_one_string_each_and_never_templated(tmp_path: Path):
    """A job variable with spaces, '=', quotes and a Jinja expression reaches the playbook as that exact text,
    marked unsafe: with -e "k=$VAR" Ansible would split it into more variables and render the template."""
    hostile = "r.example.org/hpc x=1 '\"{{ lookup('pipe', 'id') }}\" $(reboot) `id` \\"
    script = [job_vars_setup(playbook_vars(False)), sh_line(playbook_argv([]))]
    _argv, variables = run_job(script, tmp_path, **{**JOB_VARIABLES, "HPC_STATELESS_REGISTRY": hostile})
    assert variables["hpc_stateless_registry"] == hostile
    assert isinstance(variables["hpc_stateless_registry"], AnsibleUnsafeText)
    assert set(variables) == {"hpc_stateless_build_layer", "hpc_stateless_registry", "hpc_stateless_registry_tls_verify"}


def test_a_real_playbook_reads_the_vars_file_literally(tmp_path: Path):
    """The real ansible-playbook: the variable's text arrives unrendered and unsplit."""
    playbook = tmp_path / "show.yml"
    out = tmp_path / "out.txt"
    playbook.write_text(f"""- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: {out}
        content: "{{{{ hpc_stateless_build_layer }}}}|{{{{ x | default('unset') }}}}"
        mode: "0644"
""")
    script = [job_vars_setup({"hpc_stateless_build_layer": "HPC_STATELESS_LAYER"}),
              sh_line(["ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook), "-e", Expand(f"@${VARS_FILE}")])]
    subprocess.run(["sh", "-ec", "\n".join(script)], check=True, capture_output=True, text=True,
                   env={**os.environ, "HPC_STATELESS_LAYER": "a x=1 {{ 6 * 7 }}", "ANSIBLE_PYTHON_INTERPRETER": sys.executable})
    assert out.read_text() == "a x=1 {{ 6 * 7 }}|unset"


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


def test_diff_job_argv_through_sh(tmp_path: Path):
    job = gitlab_pipeline(small_plan(), image_prefix="site-", extra_args=["-e", "x=1"],
                          diff_boot_root="/srv/tftp")["diff:compute"]
    env = {**JOB_VARIABLES, **job["variables"], "HPC_STATELESS_BOOT_ROOT": "/srv/my tftp", "CI_PROJECT_DIR": "/b/p"}
    argv, variables = run_job(job["script"], tmp_path, **env)
    assert argv[:5] == ["-i", "inventory dir", "hpc.stateless.diff", "-e", "hpc_stateless_diff_from=layer"]
    assert argv[5] == "-e" and argv[6].startswith("@") and argv[7:] == ["-e", "x=1"]
    assert variables == {
        "hpc_stateless_diff_images": "compute",
        "hpc_stateless_boot_root": "/srv/my tftp",
        "hpc_stateless_diff_dir": "/b/p/image-diff",
        "hpc_stateless_registry": "r.example.org/hpc",
        "hpc_stateless_registry_tls_verify": "false",
        "hpc_stateless_image_prefix": "site-",
    }
    assert "hpc_stateless_image_prefix" not in diff_vars(False)


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
    for script in (pipeline[".hpc_stateless_layer"]["script"][-1], pipeline["diff:slurm"]["script"][-1]):
        words = script.split(" ")
        assert words[:4] == ["buildah", "unshare", "--", "ansible-playbook"], script
    build = argv_of(pipeline[".hpc_stateless_layer"]["script"][-1], **JOB_VARIABLES)
    assert build[:4] == ["unshare", "--", "ansible-playbook", "-i"]


def test_root_runners_run_the_playbook_directly():
    pipeline = gitlab_pipeline(small_plan())
    assert pipeline[".hpc_stateless_layer"]["script"][-1].startswith("ansible-playbook ")
    assert "BUILDAH_ISOLATION" not in pipeline["variables"]
