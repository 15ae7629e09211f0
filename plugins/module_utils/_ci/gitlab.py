# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GitLab CI child pipeline of a change plan: one job per rebuilt layer.

Each job runs the single-layer playbook for its layer: the parent image is pulled from
``$HPC_STATELESS_REGISTRY``, the layer built, the result pushed back. A job needs its
parent's job only when the parent is rebuilt too; otherwise it starts at once and pulls
the parent an earlier pipeline pushed.

With a boot root to compare against, each image whose layer is rebuilt gets a ``diff:<image>``
job after its layer's job: it diffs the new layer image against the version the boot tree
serves (playbooks/diff.yml) and keeps the Markdown summary as an artifact
(``image-diff/<image>.md``) for a merge-request comment. It uses the layer job's storage
(same ``HPC_STATELESS_LAYER``) and pulls the layer from the registry when it runs elsewhere.

For runners that are not root (``rootless``: a rootless container, a Kubernetes pod, a shell runner's
own user) each playbook runs inside ``buildah unshare`` (every module then sees the container mounts
the others made) with chroot isolation; the runner needs subordinate ids and newuidmap/newgidmap
(docs/rootless.md).

The jobs' shell is written here once: the fixed part as sh text (:data:`STORAGE_SETUP`), the
playbook's variables as a vars file written from the job variables (:func:`job_vars_setup`: never
``-e "k=$VAR"``, which Ansible splits at spaces and templates), the command line as argv words quoted
by :func:`sh_line`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

try:
    import yaml
except ImportError:  # reported by the calling plugin
    yaml = None

from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import ChangePlan

_JOB_PREFIX = "layer:"
_DIFF_PREFIX = "diff:"
#: Where diff jobs write their Markdown summaries, relative to the job's checkout (the artifact).
DIFF_DIR = "image-diff"
_NOTHING_JOB = "hpc-stateless:nothing-to-build"
_TEMPLATE = ".hpc_stateless_layer"

#: The job starts in the project checkout (a runner may point elsewhere).
ENTER_PROJECT = 'cd "${HPC_STATELESS_PROJECT_DIR:-$CI_PROJECT_DIR}"'

#: A runner may keep each job's images apart (several jobs on one host): with
#: HPC_STATELESS_STORAGE_ROOT set, the job uses containers-storage of its own below it.
STORAGE_SETUP = r"""if [ -n "${HPC_STATELESS_STORAGE_ROOT:-}" ]; then
  store="$HPC_STATELESS_STORAGE_ROOT/$HPC_STATELESS_LAYER"
  mkdir -p "$store"
  printf '[storage]\ndriver = "overlay"\ngraphroot = "%s/graph"\nrunroot = "%s/run"\n' "$store" "$store" > "$store/storage.conf"
  export CONTAINERS_STORAGE_CONF="$store/storage.conf"
fi"""


#: The prefix of a job's playbook command on a rootless runner.
UNSHARE = ["buildah", "unshare", "--"]

#: The sh variable that holds the path of the job's vars file (see :func:`job_vars_setup`).
VARS_FILE = "hpc_stateless_vars"

# Writes one ``name: !unsafe "value"`` line per ``name=JOB_VARIABLE[/suffix]`` word: the value is the job
# variable's text (empty when unset) as a JSON string, which is a YAML double-quoted scalar. Python source
# for ``python3 -c`` inside sh single quotes: it must hold no single quote.
_VARS_WRITER = """import json, os, sys
for word in sys.argv[1:]:
    name, _, source = word.partition("=")
    env, slash, suffix = source.partition("/")
    print(name + ": !unsafe " + json.dumps(os.environ.get(env, "") + slash + suffix))"""


class Expand(str):
    """An argv word that references job variables (``$NAME``): double-quoted, so sh expands them.

    Only for words written here: the text must hold no ``"``, ``\\`` or backquote.
    """


Word = Union[str, Expand]


def sh_line(words: Sequence[Word]) -> str:
    """One sh command line of ``words``: :class:`Expand` words in double quotes, the others literal."""
    return " ".join(f'"{w}"' if isinstance(w, Expand) else shlex.quote(w) for w in words)


def job_vars_setup(sources: Mapping[str, str]) -> str:
    """sh lines that write the playbook variables ``sources`` (``{variable: "JOB_VARIABLE[/suffix]"}``) to a
    temporary vars file named by ``$hpc_stateless_vars``, removed when the job's shell exits.

    Job variables may be set by whoever triggers the pipeline. ``-e "name=$VALUE"`` would let Ansible split
    the value at spaces into more variables and render any ``{{ }}`` in it as a template; read from this
    file, each value is one string, tagged ``!unsafe`` so Ansible never templates it.
    """
    words = [f"{name}={source}" for name, source in sources.items()]
    return "\n".join([
        f'{VARS_FILE}="$(mktemp)"',
        f"trap 'rm -f \"${VARS_FILE}\"' EXIT",
        sh_line(["python3", "-c", _VARS_WRITER, *words]) + f' > "${VARS_FILE}"',
    ])


def _vars_argv() -> list[Word]:
    return ["-e", Expand(f"@${VARS_FILE}")]


def playbook_vars(image_prefix: bool) -> dict[str, str]:
    """The single-layer playbook's variables and the job variables they come from."""
    sources = {
        "hpc_stateless_build_layer": "HPC_STATELESS_LAYER",
        "hpc_stateless_registry": "HPC_STATELESS_REGISTRY",
        "hpc_stateless_registry_tls_verify": "HPC_STATELESS_REGISTRY_TLS_VERIFY",
    }
    if image_prefix:
        sources["hpc_stateless_image_prefix"] = "HPC_STATELESS_IMAGE_PREFIX"
    return sources


def diff_vars(image_prefix: bool) -> dict[str, str]:
    """The diff playbook's variables and the job variables they come from."""
    sources = {
        "hpc_stateless_diff_images": "HPC_STATELESS_DIFF_IMAGE",
        "hpc_stateless_boot_root": "HPC_STATELESS_BOOT_ROOT",
        "hpc_stateless_diff_dir": f"CI_PROJECT_DIR/{DIFF_DIR}",
        "hpc_stateless_registry": "HPC_STATELESS_REGISTRY",
        "hpc_stateless_registry_tls_verify": "HPC_STATELESS_REGISTRY_TLS_VERIFY",
    }
    if image_prefix:
        sources["hpc_stateless_image_prefix"] = "HPC_STATELESS_IMAGE_PREFIX"
    return sources


def playbook_argv(extra_args: Iterable[str]) -> list[Word]:
    """The single-layer playbook run of a job; its variables come from the vars file of :func:`playbook_vars`."""
    argv: list[Word] = ["ansible-playbook", "-i", Expand("$HPC_STATELESS_INVENTORY"), Expand("$HPC_STATELESS_PLAYBOOK")]
    return argv + _vars_argv() + list(extra_args)


def diff_argv(extra_args: Iterable[str]) -> list[Word]:
    """The diff playbook run of a diff job: the new layer image of one image against the served version."""
    argv: list[Word] = ["ansible-playbook", "-i", Expand("$HPC_STATELESS_INVENTORY"), "hpc.stateless.diff",
                        "-e", "hpc_stateless_diff_from=layer"]
    return argv + _vars_argv() + list(extra_args)


def job_name(layer: str) -> str:
    return f"{_JOB_PREFIX}{layer}"


def diff_job_name(image: str) -> str:
    return f"{_DIFF_PREFIX}{image}"


def job_command(argv: Sequence[Word], rootless: bool) -> str:
    """The script line of ``argv``; on a rootless runner inside ``buildah unshare``."""
    return sh_line([*UNSHARE, *argv] if rootless else argv)


def _diff_jobs(plan: ChangePlan, image_prefix: bool, extra_args: list[str], tags: list[str],
               rootless: bool = False) -> dict[str, Any]:
    """One diff job per image whose layer is rebuilt, after that layer's job."""
    jobs: dict[str, Any] = {}
    for image in sorted(plan.images):
        layer = (plan.images[image] or {}).get("layer")
        if layer not in plan.rebuild:
            continue
        job: dict[str, Any] = {
            "stage": "diff",
            "needs": [{"job": job_name(layer)}],
            "variables": {"HPC_STATELESS_LAYER": layer, "HPC_STATELESS_DIFF_IMAGE": image},
            "before_script": [ENTER_PROJECT, STORAGE_SETUP],
            "script": [job_vars_setup(diff_vars(image_prefix)), job_command(diff_argv(extra_args), rootless)],
            "artifacts": {"name": f"image-diff-{image}", "when": "always", "paths": [f"{DIFF_DIR}/"]},
        }
        if tags:
            job["tags"] = tags
        jobs[diff_job_name(image)] = job
    return jobs


def gitlab_pipeline(
    plan: ChangePlan,
    registry: str = "",
    inventory: str = "inventory",
    playbook: str = "hpc.stateless.layer",
    image_prefix: str = "",
    tags: Iterable[str] = (),
    extra_args: Iterable[str] = (),
    tls_verify: bool = True,
    diff_boot_root: str = "",
    rootless: bool = False,
) -> dict[str, Any]:
    """GitLab CI child pipeline: one job per rebuilt layer, ``needs:`` following the DAG.

    With nothing to rebuild the pipeline holds one job that says so (GitLab rejects a
    pipeline without jobs). With ``diff_boot_root`` (the boot tree as the runners see it),
    a diff job per image whose layer is rebuilt follows its layer's job. With ``rootless`` the jobs run
    their playbook inside ``buildah unshare`` with ``BUILDAH_ISOLATION=chroot``.
    """
    extra_args = list(extra_args)
    variables = {
        "HPC_STATELESS_REGISTRY": registry,
        "HPC_STATELESS_INVENTORY": inventory,
        "HPC_STATELESS_PLAYBOOK": playbook,
        "HPC_STATELESS_REGISTRY_TLS_VERIFY": "true" if tls_verify else "false",
    }
    if image_prefix:
        variables["HPC_STATELESS_IMAGE_PREFIX"] = image_prefix
    if diff_boot_root:
        variables["HPC_STATELESS_BOOT_ROOT"] = diff_boot_root
    if rootless:
        variables["BUILDAH_ISOLATION"] = "chroot"
    pipeline: dict[str, Any] = {"stages": ["build"], "variables": variables}
    rebuild = plan.rebuild
    if not rebuild:
        since = f" since {plan.base}" if plan.base else ""
        message = f"No layer is affected by this change{since}: nothing to build."
        pipeline[_NOTHING_JOB] = {"stage": "build", "script": [sh_line(["echo", message])]}
        return pipeline
    template: dict[str, Any] = {
        "stage": "build",
        "before_script": [ENTER_PROJECT, STORAGE_SETUP],
        "script": [job_vars_setup(playbook_vars(bool(image_prefix))), job_command(playbook_argv(extra_args), rootless)],
    }
    tags = list(tags)
    if tags:
        template["tags"] = tags
    pipeline[_TEMPLATE] = template
    for name in rebuild:
        decision = plan.layers[name]
        parent = decision.parent
        needs = [{"job": job_name(parent)}] if parent is not None and parent in rebuild else []
        pipeline[job_name(name)] = {
            "extends": _TEMPLATE,
            "variables": {"HPC_STATELESS_LAYER": name,
                          "HPC_STATELESS_IMAGE_TYPES": ",".join(decision.images)},
            "needs": needs,
        }
    if diff_boot_root:
        diff_jobs = _diff_jobs(plan, bool(image_prefix), list(extra_args), tags, rootless)
        if diff_jobs:
            pipeline["stages"].append("diff")
            pipeline.update(diff_jobs)
    return pipeline


def _str_representer(dumper: Any, value: str) -> Any:
    """Multi-line strings (the jobs' sh blocks) as YAML literal blocks, so they read as sh."""
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


if yaml is not None:
    class _PipelineDumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
        """SafeDumper with sh blocks written literally."""

    _PipelineDumper.add_representer(str, _str_representer)
    # Settings from an inventory or role defaults arrive as str subclasses (Ansible's YAML strings).
    _PipelineDumper.add_multi_representer(str, _str_representer)


def pipeline_yaml(pipeline: Mapping[str, Any], plan: ChangePlan) -> str:
    """The pipeline as YAML text with a header saying what it builds and why."""
    header = ["# GitLab CI child pipeline generated by hpc.stateless.plan: do not edit.",
              f"# Compared with: {plan.base or 'no base revision'}; "
              f"{len(plan.rebuild)} of {len(plan.layers)} layers rebuild."]
    for name in plan.rebuild:
        header.append(f"#   {name}: {plan.layers[name].why}")
    body = yaml.dump(dict(pipeline), Dumper=_PipelineDumper, sort_keys=False, default_flow_style=False,
                     width=1000)
    return "\n".join(re.sub(r"[\r\n]+", " ", h) for h in header) + "\n" + body
