"""The built collection tarball installs and works from another directory."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"

PLAYBOOK = """
- name: Use the installed collection
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Plan a DAG without touching storage
      hpc.stateless.plan:
        layers:
          base: {bootstrap: {distro: debian, release: bookworm}}
          compute: {parent: base, roles: [hpc_stateless_user_role]}
        check_storage: false
      register: plan
    - name: Check the plan
      ansible.builtin.assert:
        that:
          - plan.order == ['base', 'compute']
          - plan.layers.compute.key | length == 64
          - plan.layers.compute.parent_image == 'localhost/hpc-stateless/base:' ~ plan.layers.base.key
"""


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{argv} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_tarball_installs_and_runs_elsewhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "PYTHONPATH"}
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(tmp_path)], REPO, env)
    tarball = next(tmp_path.glob("hpc-stateless-*.tar.gz"))
    names = tarfile.open(tarball).getnames()
    assert "plugins/modules/layer.py" in names and "plugins/action/plan.py" in names
    assert not any(n.startswith((".venv", ".collections", "build/", "benchmarks/")) for n in names), \
        "build_ignore missed files"
    # What a site imports by FQCN: the chain, each stage, Molecule's create/destroy and the scaffold.
    fqcn_playbooks = ("site", "build", "verify", "pack", "deploy", "diff", "plan", "layer", "rolling_update",
                      "molecule_create", "molecule_destroy", "molecule_scaffold")
    for playbook in fqcn_playbooks:
        assert f"playbooks/{playbook}.yml" in names

    collections = tmp_path / "collections"
    run([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "--offline", "--no-deps", "-p", str(collections),
         str(tarball)], tmp_path, env)
    elsewhere = tmp_path / "site"
    (elsewhere / "roles" / "hpc_stateless_user_role" / "tasks").mkdir(parents=True)
    (elsewhere / "roles" / "hpc_stateless_user_role" / "tasks" / "main.yml").write_text("---\n[]\n")
    (elsewhere / "play.yml").write_text(PLAYBOOK)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "play.yml"], elsewhere, env)
    # A site playbook imports our build playbook by its FQCN, as the README shows.
    (elsewhere / "site.yml").write_text("- name: Build our layers\n  ansible.builtin.import_playbook: hpc.stateless.build\n")
    listed = run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--list-tasks", "site.yml"], elsewhere, env)
    assert "Compute the content keys with each layer host's variables" in listed.stdout
    # Every other playbook a site may import resolves by its FQCN from the install and parses.
    (elsewhere / "all.yml").write_text("".join(
        f"- name: Import {name}\n  ansible.builtin.import_playbook: hpc.stateless.{name}\n" for name in fqcn_playbooks))
    run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", "all.yml"], elsewhere, env)
    doc = run([str(BIN / "ansible-doc"), "hpc.stateless.layer"], elsewhere, env)
    assert "creates a working container from the parent image" in " ".join(doc.stdout.split())
