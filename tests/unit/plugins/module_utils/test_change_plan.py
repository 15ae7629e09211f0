"""Change planning: changed files -> layers to rebuild, against real roles, a real git
repository and Ansible's own inventory/variable loading.

The property that matters: a layer the plan calls unaffected keeps its content key. It is
checked on a set of generated changes by computing every key before and after the change.
"""

from __future__ import annotations

import json
import random
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.vars import host_group_vars
from ansible.vars.manager import VariableManager

from ansible_collections.hpc.stateless.plugins.module_utils._git import (
    GitError,
    GitRepository,
    GitRevisionReader,
)
from ansible_collections.hpc.stateless.plugins.module_utils._ci.gitlab import gitlab_pipeline, job_name, pipeline_yaml
from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import (
    DictReader,
    LayerFacts,
    layer_facts,
    normalise_changed_files,
    plan_changes,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import RoleIndex, compute_keys
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError
from ansible_collections.hpc.stateless.plugins.module_utils._layers.render import render_dot, render_table
from ansible_collections.hpc.stateless.plugins.module_utils._layers.scope import ChangePlanError, vars_file_scope

# --------------------------------------------------------------------------- a small site repository
#
# base (common) -> hsn (net, group fabric) -> compute (compute: include_role helper) -> slurm (slurm: meta dep munge)
#      `-> login (login, vars login_banner)
# images: compute = slurm, login = login

LAYERS = {
    "base": {"description": "root", "bootstrap": {"distro": "debian", "release": "bookworm"}, "roles": ["common"]},
    "hsn": {"parent": "base", "roles": ["net"], "groups": ["fabric"]},
    "compute": {"parent": "hsn", "roles": ["compute"]},
    "slurm": {"parent": "compute", "roles": ["slurm"]},
    "login": {"parent": "base", "roles": ["login"], "vars": {"login_banner": "welcome"}},
}
IMAGES = {"compute": {"layer": "slurm"}, "login": {"layer": "login"}}

SITE_VARS = """\
# site-wide settings
site_name: cluster-a
site_slogan: compute for all
net_mtu: 1500
net_enabled: true
compute_packages: [hwloc, numactl]
helper_value: 7
munge_key_path: /etc/munge/munge.key
slurm_conf:
  ClusterName: a
  SlurmctldHost: head
login_banner: from the inventory
unrelated_setting: nobody reads this
"""

FILES = {
    "inventory/hosts.yml": "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n",
    "inventory/group_vars/all/layers.yml": yaml.safe_dump(
        {"hpc_stateless_layers": LAYERS, "hpc_stateless_images": IMAGES}, sort_keys=False),
    "inventory/group_vars/all/site.yml": SITE_VARS,
    "inventory/group_vars/fabric.yml": "net_mtu: 9000\n",
    "roles/common/tasks/main.yml": """\
        - name: Message of the day
          ansible.builtin.copy:
            content: "{{ site_name }}: {{ common_banner }}"
            dest: /etc/motd
            mode: "0644"
        """,
    "roles/common/defaults/main.yml": "common_banner: \"{{ site_slogan }}\"\n",
    "roles/common/README.md": "# common\n",
    "roles/common/molecule/default/converge.yml": "- hosts: all\n",
    "roles/net/tasks/main.yml": """\
        - name: MTU
          ansible.builtin.copy:
            content: "{{ net_mtu }}"
            dest: /etc/mtu
            mode: "0644"
          when: net_enabled
        """,
    "roles/compute/tasks/main.yml": """\
        - name: Helper
          ansible.builtin.include_role:
            name: helper
        - name: Packages
          ansible.builtin.debug:
            msg: "{{ compute_packages }}"
        """,
    "roles/helper/tasks/main.yml": "- name: Helper\n  ansible.builtin.debug:\n    msg: \"{{ helper_value }}\"\n",
    "roles/login/tasks/main.yml": "- name: Banner\n  ansible.builtin.debug:\n    msg: \"{{ login_banner }}\"\n",
    "roles/slurm/meta/main.yml": "dependencies:\n  - role: munge\n",
    "roles/slurm/tasks/main.yml": "- name: Conf\n  ansible.builtin.debug:\n    msg: \"{{ slurm_conf }}\"\n",
    "roles/munge/tasks/main.yml": "- name: Key\n  ansible.builtin.debug:\n    msg: \"{{ munge_key_path }}\"\n",
    "roles/unused/tasks/main.yml": "- name: Nothing\n  ansible.builtin.debug:\n    msg: unused\n",
    "playbooks/build.yml": "- name: Build\n  hosts: localhost\n  tasks: []\n",
    "docs/index.md": "# docs\n",
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def edit_yaml(root: Path, rel: str, change) -> None:
    path = root / rel
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture()
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for rel, text in FILES.items():
        write(root, rel, text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "base")
    return root


class Site:
    """Keys and facts of a site repository, with Ansible's own inventory and variable loading."""

    def __init__(self, root: Path) -> None:
        data = yaml.safe_load((root / "inventory/group_vars/all/layers.yml").read_text())
        self.role_index = RoleIndex([str(root / "roles")], [])
        self.graph = LayerGraph.from_spec(data["hpc_stateless_layers"], data.get("hpc_stateless_images"),
                                          role_exists=self.role_index.exists)
        # Ansible caches which group_vars/host_vars files exist per process; each
        # ansible-playbook run is a new process, so start afresh like one.
        host_group_vars.FOUND.clear()
        host_group_vars.NAK.clear()
        loader = DataLoader()
        self.inventory = InventoryManager(loader=loader, sources=[str(root / "inventory")])
        self.inventory.add_group("hpc_stateless_layers")
        for name in self.graph.order():
            self.inventory.add_host(name, group="hpc_stateless_layers")
            for group in self.graph.spec(name)["groups"]:
                self.inventory.add_group(group)
                self.inventory.add_host(name, group=group)
        manager = VariableManager(loader=loader, inventory=self.inventory)

        def variables_for(name: str) -> dict:
            found = dict(manager.get_vars(host=self.inventory.get_host(name), include_hostvars=False))
            found.update(self.graph.spec(name)["vars"])
            return found

        self.keys = compute_keys(self.graph, self.role_index, variables_for)
        self.facts = layer_facts(self.graph, self.keys, self.role_index.path, str(root), self.groups_for)

    def groups_for(self, name: str) -> list[str]:
        return [g.name for g in self.inventory.get_host(name).get_groups()]


def plan_for(root: Path, since: str | None = "HEAD", files: list[str] | None = None, head: Site | None = None,
             **options):
    repo = GitRepository(str(root))
    base = repo.resolve(since) if since else None
    reader = GitRevisionReader(repo, base, f"{since} ({base[:12]})" if base else None)
    changed = files if files is not None else repo.changed_files(base or "HEAD")
    head = head or Site(root)
    return plan_changes(head.graph, head.facts, changed, reader,
                        inventory_sources=["inventory/hosts.yml"], **options)


def rebuilt(plan) -> set[str]:
    return set(plan.rebuild)


# --------------------------------------------------------------------------- roles


def test_role_file_rebuilds_its_layers_and_everything_below(site):
    write(site, "roles/net/tasks/main.yml", "- name: other\n  ansible.builtin.debug:\n    msg: \"{{ net_mtu }}\"\n")
    plan = plan_for(site)
    assert plan.rebuild == ["hsn", "compute", "slurm"]
    assert plan.layers["hsn"].reasons == ["role net changed (roles/net/tasks/main.yml)"]
    assert plan.layers["slurm"].reasons == ["parent compute rebuilds"]
    assert plan.images["compute"]["start"] == "hsn" and plan.images["login"]["start"] is None


def test_a_layer_whose_packages_moved_in_the_archive_rebuilds_with_its_children_and_no_file_changed(site):
    """The freshness check (_layers/freshness.py) gives reasons no file gives; plan.yml and the CI pipeline
    rebuild those layers too."""
    reason = "hsn: 1 security update (rdma-core 44.0-2 -> 44.0-2+deb12u1)"
    plan = plan_for(site, archive_reasons={"hsn": [reason]})
    assert plan.rebuild == ["hsn", "compute", "slurm"]
    assert plan.layers["hsn"].reasons == [reason]
    assert plan.layers["compute"].reasons == ["parent hsn rebuilds"]
    assert plan.layers["login"].action == "reuse" and plan.images["compute"]["start"] == "hsn"


def test_meta_dependency_and_static_include_role_count_as_the_layer_s_roles(site):
    write(site, "roles/munge/tasks/main.yml", "- name: Key\n  ansible.builtin.debug:\n    msg: changed\n")
    write(site, "roles/helper/defaults/main.yml", "helper_extra: 1\n")
    plan = plan_for(site)
    assert plan.layers["slurm"].reasons == ["role munge changed (roles/munge/tasks/main.yml)",
                                            "parent compute rebuilds"]
    assert "role helper changed (roles/helper/defaults/main.yml)" in plan.layers["compute"].reasons
    assert plan.rebuild == ["compute", "slurm"]


def test_role_docs_molecule_and_unused_roles_rebuild_nothing(site):
    write(site, "roles/common/README.md", "# common, documented better\n")
    write(site, "roles/common/molecule/default/converge.yml", "- hosts: all\n  tasks: []\n")
    write(site, "roles/unused/tasks/main.yml", "- name: still unused\n  ansible.builtin.debug:\n")
    write(site, "docs/index.md", "# more docs\n")
    plan = plan_for(site)
    assert plan.rebuild == []
    kinds = {f.path: (f.kind, f.layers) for f in plan.files}
    assert kinds["roles/common/README.md"] == ("role", [])
    assert kinds["roles/unused/tasks/main.yml"] == ("role", [])
    assert kinds["docs/index.md"] == ("other", [])
    assert "roles/common/README.md is not part of role common's content" in plan.layers["base"].why


def test_build_playbook_rebuilds_every_layer_unless_ignored(site):
    write(site, "playbooks/build.yml", "- name: Build differently\n  hosts: localhost\n  tasks: []\n")
    plan = plan_for(site)
    assert rebuilt(plan) == set(LAYERS)
    assert plan.files[0].kind == "playbook"
    plan = plan_for(site, playbook_changes="ignore")
    assert plan.rebuild == []
    assert "build playbook playbooks/build.yml changed (ignored)" in plan.layers["base"].why


# --------------------------------------------------------------------------- inventory values


def test_changed_variable_value_rebuilds_only_layers_whose_roles_read_it(site):
    (site / "inventory/group_vars/all/site.yml").write_text(SITE_VARS.replace("helper_value: 7", "helper_value: 8"))
    plan = plan_for(site)
    assert plan.rebuild == ["compute", "slurm"]
    assert plan.layers["compute"].reasons == [
        "variable helper_value changed (inventory/group_vars/all/site.yml)"]
    assert plan.files[0].detail == "group all: helper_value"


def test_comment_only_change_rebuilds_nothing_but_the_paper_mode_rebuilds_readers(site):
    (site / "inventory/group_vars/all/site.yml").write_text(
        SITE_VARS.replace("# site-wide settings", "# site-wide settings, reviewed") + "# trailing note\n")
    plan = plan_for(site)
    assert plan.rebuild == []
    assert plan.files[0].detail == "group all: no variable changed value"
    # The seed paper's behaviour: every variable of a changed file counts.
    paper = plan_for(site, variable_changes="files")
    # login sets login_banner itself, so the inventory value never reaches it; every other layer
    # reads a variable of the file.
    assert paper.rebuild == ["base", "hsn", "login", "compute", "slurm"] or set(paper.rebuild) == set(LAYERS)
    assert "in changed file" in paper.layers["base"].reasons[0]


def test_without_a_base_revision_every_variable_of_the_file_counts(site):
    plan = plan_for(site, since=None, files=["inventory/group_vars/fabric.yml"])
    assert plan.base is None
    assert plan.rebuild == ["hsn", "compute", "slurm"]


def test_group_variables_reach_only_layers_in_that_group(site):
    before = Site(site)
    write(site, "inventory/group_vars/fabric.yml", "net_mtu: 4000\n")
    plan = plan_for(site)
    assert plan.rebuild == ["hsn", "compute", "slurm"]
    # a value overridden by a group the layer is in does not change its key...
    (site / "inventory/group_vars/all/site.yml").write_text(SITE_VARS.replace("net_mtu: 1500", "net_mtu: 1400"))
    git(site, "checkout", "--", "inventory/group_vars/fabric.yml")
    plan = plan_for(site)
    head = Site(site)
    assert head.keys["hsn"].variables["net_mtu"] == 9000
    assert head.keys["hsn"].key == before.keys["hsn"].key
    # ...but the planner rebuilds it (over-approximation allowed), and only the layers that read
    # the variable: base and login do not.
    assert plan.rebuild == ["hsn", "compute", "slurm"]
    assert plan.layers["hsn"].reasons == ["variable net_mtu changed (inventory/group_vars/all/site.yml)"]


def test_layer_vars_win_over_the_inventory(site):
    (site / "inventory/group_vars/all/site.yml").write_text(
        SITE_VARS.replace("login_banner: from the inventory", "login_banner: changed"))
    plan = plan_for(site)
    assert plan.rebuild == []


def test_transitively_referenced_variable_rebuilds(site):
    (site / "inventory/group_vars/all/site.yml").write_text(
        SITE_VARS.replace("compute for all", "compute for some"))
    plan = plan_for(site)
    assert plan.rebuild == ["base", "hsn", "login", "compute", "slurm"] or set(plan.rebuild) == set(LAYERS)
    assert plan.layers["base"].reasons == ["variable site_slogan changed (inventory/group_vars/all/site.yml)"]


def test_variable_moved_to_another_file_of_the_same_group_changes_nothing(site):
    (site / "inventory/group_vars/all/site.yml").write_text(SITE_VARS.replace("helper_value: 7\n", ""))
    write(site, "inventory/group_vars/all/zz_more.yml", "helper_value: 7\n")
    plan = plan_for(site)
    assert plan.rebuild == []


def test_inline_inventory_host_variables_are_compared(site):
    write(site, "inventory/hosts.yml", """\
        all:
          hosts:
            localhost:
              ansible_connection: local
          children:
            fabric:
              vars:
                net_mtu: 1234
        """)
    plan = plan_for(site)
    assert plan.rebuild == ["hsn", "compute", "slurm"]
    assert "group fabric: net_mtu" in plan.files[0].detail


# --------------------------------------------------------------------------- layer definitions


def test_layer_definition_changes(site):
    layers = "inventory/group_vars/all/layers.yml"
    edit_yaml(site, layers, lambda d: d["hpc_stateless_layers"]["hsn"].update(description="fabric layer"))
    plan = plan_for(site)
    assert plan.rebuild == []
    assert "layer definition changed (description) but not its content key" in plan.layers["hsn"].why

    edit_yaml(site, layers, lambda d: d["hpc_stateless_layers"]["compute"]["roles"].append("login"))
    plan = plan_for(site)
    assert plan.rebuild == ["compute", "slurm"]
    assert plan.layers["compute"].reasons[0].startswith("layer definition changed: roles")

    git(site, "checkout", "--", layers)
    edit_yaml(site, layers, lambda d: d["hpc_stateless_layers"]["login"]["vars"].update(login_banner="hello"))
    edit_yaml(site, layers, lambda d: d["hpc_stateless_layers"]["hsn"].update(vars={"not_read": 1}))
    plan = plan_for(site)
    assert plan.rebuild == ["login"]
    assert plan.layers["login"].reasons == ["layer vars changed: login_banner (inventory/group_vars/all/layers.yml)"]

    git(site, "checkout", "--", layers)
    edit_yaml(site, layers, lambda d: d["hpc_stateless_layers"].update(extra={"parent": "login", "roles": []}))
    edit_yaml(site, layers, lambda d: d["hpc_stateless_images"].update(login={"layer": "login", "formats": ["squashfs"]}))
    plan = plan_for(site)
    assert plan.rebuild == ["extra"]
    assert plan.layers["extra"].reasons == ["new layer (inventory/group_vars/all/layers.yml)"]
    assert "image login definition changed" in plan.layers["login"].why


def test_image_types_restrict_the_rebuild(site):
    write(site, "roles/common/tasks/main.yml", "- name: changed\n  ansible.builtin.debug:\n")
    plan = plan_for(site, image_types=["login"])
    assert plan.rebuild == ["base", "login"]
    assert plan.layers["hsn"].action == "reuse"
    assert plan.layers["hsn"].why.startswith("not part of image types login")
    with pytest.raises(ChangePlanError, match="unknown image nope"):
        plan_for(site, image_types=["nope"])


# --------------------------------------------------------------------------- the property


def _mutations() -> list[tuple[str, callable]]:
    site_file = "inventory/group_vars/all/site.yml"

    def set_var(name, value):
        def apply(root):
            edit_yaml(root, site_file, lambda d: d.__setitem__(name, value))
        return f"set {name}={value!r}", apply

    def drop_var(name):
        def apply(root):
            edit_yaml(root, site_file, lambda d: d.pop(name))
        return f"drop {name}", apply

    def text(rel, content, label):
        return label, lambda root: write(root, rel, content)

    def layer(name, **changes):
        def apply(root):
            edit_yaml(root, "inventory/group_vars/all/layers.yml",
                      lambda d: d["hpc_stateless_layers"][name].update(changes))
        return f"layer {name} {changes}", apply

    found = [
        text("roles/common/tasks/main.yml", "- name: x\n  ansible.builtin.debug:\n", "edit common tasks"),
        text("roles/net/templates/x.j2", "{{ net_mtu }}\n", "add net template"),
        text("roles/helper/tasks/main.yml", "- name: y\n  ansible.builtin.debug:\n", "edit helper (include_role)"),
        text("roles/munge/defaults/main.yml", "munge_x: 1\n", "add munge defaults (meta dep)"),
        text("roles/slurm/meta/main.yml", "dependencies: []\n", "drop slurm's dependency"),
        text("roles/net/meta/main.yml", "dependencies: [helper]\n", "net gains a dependency"),
        text("roles/common/README.md", "# changed\n", "role README"),
        text("roles/login/molecule/x/converge.yml", "- hosts: all\n", "role molecule"),
        text("roles/unused/tasks/main.yml", "- name: z\n  ansible.builtin.debug:\n", "unused role"),
        text("docs/index.md", "# other\n", "docs"),
        text("playbooks/build.yml", "- name: Other\n  hosts: localhost\n  tasks: []\n", "build playbook"),
        text(site_file, SITE_VARS + "# just a comment\n", "comment only"),
        text(site_file, yaml.safe_dump(dict(reversed(list(yaml.safe_load(SITE_VARS).items()))), sort_keys=False),
             "reordered"),
        text("inventory/group_vars/fabric.yml", "net_mtu: 9001\n", "fabric mtu"),
        text("inventory/group_vars/fabric.yml", "net_mtu: 9000  # same\n", "fabric comment"),
        text("inventory/group_vars/login.yml", "login_banner: x\n", "group nobody is in"),
        text("inventory/host_vars/compute.yml", "helper_value: 99\n", "host_vars of a layer"),
        text("inventory/group_vars/all/zz.yml", "unrelated_setting: 2\nnew_var: 1\n", "new file, unread vars"),
        set_var("site_name", "cluster-b"),
        set_var("site_slogan", "different"),
        set_var("net_mtu", 1400),
        set_var("net_enabled", False),
        set_var("compute_packages", ["hwloc"]),
        set_var("helper_value", "7"),
        set_var("munge_key_path", "/etc/munge/other.key"),
        set_var("slurm_conf", {"ClusterName": "a", "SlurmctldHost": "head2"}),
        set_var("slurm_conf", {"SlurmctldHost": "head", "ClusterName": "a"}),
        set_var("login_banner", "overridden by the layer"),
        set_var("unrelated_setting", "still unread"),
        set_var("common_banner", "inventory beats role defaults"),
        drop_var("helper_value"),
        drop_var("unrelated_setting"),
        layer("hsn", description="new words"),
        layer("login", vars={"login_banner": "other"}),
        layer("login", vars={"login_banner": "welcome", "not_read": 1}),
        layer("compute", roles=["compute", "login"]),
        layer("hsn", groups=[]),
        layer("slurm", parent="hsn"),
        layer("base", bootstrap={"distro": "debian", "release": "trixie"}),
    ]
    return found


MUTATIONS = _mutations()
OVER_APPROXIMATED = {"set net_mtu=1400", "build playbook"}


@pytest.mark.parametrize("seed", range(4))
def test_unaffected_layers_keep_their_keys_over_generated_changes(site, seed):
    """For every generated change (single ones, then random combinations of three): a layer the
    plan calls unaffected has an unchanged key; and the plan is exact (rebuild == key changed)."""
    before = {n: k.key for n, k in Site(site).keys.items()}
    rng = random.Random(seed)
    cases = [[m] for m in MUTATIONS] if seed == 0 else [rng.sample(MUTATIONS, 3) for _case in range(12)]
    for case in cases:
        git(site, "checkout", "-q", "--", ".")
        git(site, "clean", "-qfd")
        for _label, apply in case:
            apply(site)
        labels = [label for label, _apply in case]
        head = Site(site)
        plan = plan_for(site, head=head)
        after = {n: k.key for n, k in head.keys.items()}
        changed_keys = {n for n in after if before.get(n) != after[n]}
        for name in plan.reuse:
            assert name in before and before[name] == after[name], (labels, name, plan.layers[name].why)
        # Exact, except where the planner knowingly over-approximates: a value overridden by a
        # group of higher precedence (net_mtu of group fabric), or the build playbook.
        if not any(label in OVER_APPROXIMATED for label in labels):
            assert rebuilt(plan) == changed_keys, (labels, plan.rebuild, sorted(changed_keys))
        else:
            assert rebuilt(plan) >= changed_keys, (labels, plan.rebuild, sorted(changed_keys))


# --------------------------------------------------------------------------- renderings


def test_table_json_and_dot(site):
    write(site, "roles/login/tasks/main.yml", "- name: new\n  ansible.builtin.debug:\n")
    plan = plan_for(site)
    table = render_table(plan)
    lines = table.splitlines()
    assert lines[0].split() == ["LAYER", "IMAGE", "TYPES", "ACTION", "WHY"]
    row = next(line for line in lines if line.strip().startswith("login"))
    assert row.split()[:3] == ["login", "login", "rebuild"]
    assert "base" in lines[1] and "compute,login" in lines[1] and "reuse" in lines[1]
    assert "1 of 5 layers rebuild (compared with HEAD (" in table
    data = json.loads(plan.to_json())
    assert data["rebuild"] == ["login"] and data["layers"]["login"]["images"] == ["login"]
    assert data["images"]["login"]["start"] == "login" and data["images"]["compute"]["start"] is None
    dot = render_dot(plan)
    assert '"layer:login" [label="login\\nrebuild", shape=box' in dot
    assert '"layer:base" [label="base", shape=ellipse, style=dotted' in dot
    assert '"layer:base" -> "layer:login" [penwidth=2];' in dot
    assert '"layer:login" -> "image:login"' in dot


def test_pipeline_jobs_follow_the_dag(site):
    write(site, "roles/net/tasks/main.yml", "- name: new\n  ansible.builtin.debug:\n")
    write(site, "roles/login/tasks/main.yml", "- name: new\n  ansible.builtin.debug:\n")
    plan = plan_for(site)
    pipeline = gitlab_pipeline(plan, registry="registry.example.org/hpc", inventory="inventory", tags=["buildah"])
    jobs = {k: v for k, v in pipeline.items() if k.startswith("layer:")}
    assert sorted(jobs) == ["layer:compute", "layer:hsn", "layer:login", "layer:slurm"]
    assert jobs["layer:hsn"]["needs"] == [] and jobs["layer:login"]["needs"] == []
    assert jobs["layer:compute"]["needs"] == [{"job": "layer:hsn"}]
    assert jobs["layer:slurm"]["needs"] == [{"job": "layer:compute"}]
    assert jobs["layer:slurm"]["variables"] == {"HPC_STATELESS_LAYER": "slurm", "HPC_STATELESS_IMAGE_TYPES": "compute"}
    assert pipeline["variables"]["HPC_STATELESS_REGISTRY"] == "registry.example.org/hpc"
    assert pipeline[".hpc_stateless_layer"]["tags"] == ["buildah"]
    assert "hpc_stateless_build_layer=HPC_STATELESS_LAYER" in pipeline[".hpc_stateless_layer"]["script"][0], "the layer comes from its job variable"
    assert pipeline[".hpc_stateless_layer"]["script"][-1].startswith("ansible-playbook ")
    text = pipeline_yaml(pipeline, plan)
    assert text.startswith("# GitLab CI child pipeline generated by hpc.stateless.plan")
    assert yaml.safe_load(text) == pipeline
    assert job_name("x") == "layer:x"


def test_empty_plan_pipeline_has_one_no_op_job(site):
    plan = plan_for(site)
    pipeline = gitlab_pipeline(plan)
    jobs = [k for k in pipeline if k not in ("stages", "variables")]
    assert jobs == ["hpc-stateless:nothing-to-build"]
    assert "nothing to build" in pipeline[jobs[0]]["script"][0]


# --------------------------------------------------------------------------- bad input


def test_unknown_revision_is_named(site):
    with pytest.raises(GitError, match=r"unknown git revision 'origin/nope' in .*site: fetch it"):
        GitRepository(str(site)).resolve("origin/nope")


def test_directory_outside_any_repository(tmp_path):
    with pytest.raises(GitError, match="is not inside a git work tree"):
        GitRepository(str(tmp_path))


def test_changed_file_outside_the_repository_is_named(site, tmp_path):
    with pytest.raises(ChangePlanError, match=r"\.\./elsewhere\.yml: changed file is outside the repository"):
        normalise_changed_files(str(site), ["roles/net/tasks/main.yml", "../elsewhere.yml"])
    with pytest.raises(ChangePlanError, match=r"/etc/passwd: changed file is outside"):
        normalise_changed_files(str(site), ["/etc/passwd"])
    assert normalise_changed_files(str(site), [str(site / "roles/x/../net/tasks/main.yml"), "./docs/index.md"]) == [
        "docs/index.md", "roles/net/tasks/main.yml"]


def test_inventory_file_that_does_not_parse_in_one_revision_is_named(site):
    rel = "inventory/group_vars/fabric.yml"
    head = Site(site)  # Ansible itself refuses the broken work tree: plan with the facts from before
    write(site, rel, "net_mtu: [9000\n")
    with pytest.raises(ChangePlanError, match=r"inventory/group_vars/fabric.yml at the work tree: cannot parse YAML"):
        plan_for(site, files=[rel], head=head)
    # broken at the base revision, fixed in the work tree
    git(site, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qam", "broken")
    write(site, rel, "net_mtu: 9000\n")
    with pytest.raises(ChangePlanError, match=r"inventory/group_vars/fabric.yml at HEAD \([0-9a-f]{12}\): cannot parse"):
        plan_for(site, files=[rel])
    write(site, rel, "- just\n- a list\n")
    with pytest.raises(ChangePlanError, match="expected a mapping of variable names"):
        plan_for(site, since=None, files=[rel], head=head)


def test_cycle_in_the_dag_is_named():
    with pytest.raises(LayerSpecError, match="cycle between layers a -> b -> a"):
        LayerGraph.from_spec({"a": {"parent": "b"}, "b": {"parent": "a"}, "r": {"bootstrap": {
            "distro": "debian", "release": "bookworm"}}})


def test_options_and_facts_are_checked():
    graph = LayerGraph.from_spec({"r": {"bootstrap": {"distro": "debian", "release": "bookworm"}}})
    with pytest.raises(ChangePlanError, match="no layer facts for r"):
        plan_changes(graph, {}, [])
    facts = {"r": LayerFacts("r", None)}
    with pytest.raises(ChangePlanError, match="variable_changes: must be one of values, files"):
        plan_changes(graph, facts, [], variable_changes="all")
    plan = plan_changes(graph, facts, ["x"], DictReader({}))
    assert plan.rebuild == [] and plan.files[0].kind == "other"


def test_vars_file_scope():
    assert vars_file_scope("inventory/group_vars/all.yml") == ("inventory/group_vars", "group", "all")
    assert vars_file_scope("inventory/group_vars/all/x/y.yaml") == ("inventory/group_vars", "group", "all")
    assert vars_file_scope("host_vars/node1") == ("host_vars", "host", "node1")
    assert vars_file_scope("inventory/group_vars/all/notes.txt") is None
    assert vars_file_scope("inventory/group_vars/.hidden.yml") is None
    assert vars_file_scope("roles/x/vars/main.yml") is None
