"""The hpc.stateless.plan action on the controller, driven with a real inventory and variable manager.

- Layer variables come from the layer's inventory host: group_vars of the groups it names and its
  host_vars, whether a play added the host (playbooks/tasks/plan_layers.yml), the task did not
  (a bare ``hpc.stateless.plan`` task) or the inventory is another one (Molecule's create).
- Bad input is a failed result with the message alone (no traceback), and an unreadable inventory
  file is named instead of being reported as a missing DAG.
- The git label of the build comes through the one process runner.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from ansible_collections.hpc.stateless.plugins.action import compliance_suite
from ansible_collections.hpc.stateless.plugins.action import plan as plan_action
from ansible_collections.hpc.stateless.plugins.module_utils import _git, _process
from ansible_collections.hpc.stateless.plugins.module_utils._build.listing import runnable_arches
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import layer_sources

# The action needs no connection (it plans on the controller); ActionBase only looks at its shell.
NO_CONNECTION = SimpleNamespace(_shell=SimpleNamespace(tmpdir="unused"))
HOSTS = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
LAYERS = """hpc_stateless_layers:
  root:
    bootstrap: {distro: debian, release: bookworm}
    roles: []
  accel:
    parent: root
    groups: [gpu]
    roles: [marker]
hpc_stateless_images: {}
marker_text: from group_vars/all
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture(scope="module", autouse=True)
def plugins():
    init_plugin_loader()


@pytest.fixture()
def site(tmp_path):
    """A site: the marker role reads marker_text; gpu and the accel host set their own value."""
    return write(tmp_path / "site", {
        "roles/marker/tasks/main.yml": "- name: Mark\n  ansible.builtin.copy:\n"
                                       "    content: \"{{ marker_text }}\"\n    dest: /etc/marker\n    mode: \"0644\"\n",
        "inventory/hosts.yml": HOSTS,
        "inventory/group_vars/all/layers.yml": LAYERS,
        "inventory/group_vars/gpu/marker.yml": "marker_text: from group_vars/gpu\n",
    })


class Run:
    """One ansible-playbook run's inventory and variables, as the action sees them in task_vars."""

    def __init__(self, inventory_dir: Path, playbook_dir: Path) -> None:
        self.loader = DataLoader()
        self.loader.set_basedir(str(playbook_dir))
        self.playbook_dir = playbook_dir
        self.inventory = InventoryManager(loader=self.loader, sources=[str(inventory_dir)])
        self.variables = VariableManager(loader=self.loader, inventory=self.inventory)

    def add_layer_host(self, name: str, groups: list[str]) -> None:
        """What ansible.builtin.add_host does for plan_layers.yml."""
        for group in groups:
            self.inventory.add_group(group)
            self.inventory.add_host(name, group=group)
        self.inventory.reconcile_inventory()

    def plan(self, **args) -> dict:
        task = Task()
        task.action = "hpc.stateless.plan"
        task.args = {"check_storage": False, **args}
        action = plan_action.ActionModule(task, NO_CONNECTION, PlayContext(), self.loader, Templar(self.loader), None)
        task_vars = {"hostvars": HostVars(self.inventory, self.variables, self.loader),
                     "inventory_hostname": "localhost", "playbook_dir": str(self.playbook_dir),
                     "ansible_inventory_sources": [str(s) for s in self.inventory._sources]}
        return action.run(task_vars=task_vars)


def accel_key(result: dict) -> str:
    assert not result.get("failed"), result.get("msg")
    return result["layers"]["accel"]["key"]


def test_group_variables_of_a_layer_host_reach_its_key(site):
    run = Run(site / "inventory", site)
    validated = run.plan(compute_keys=False)
    assert validated["layers"]["accel"]["host_groups"] == ["hpc_stateless_layers", "gpu"]
    run.add_layer_host("accel", validated["layers"]["accel"]["host_groups"])
    added = run.plan()
    assert "marker_text" in added["layers"]["accel"]["variables"]

    # A bare plan task (no add_host before it) and another run's inventory reach the same key.
    assert accel_key(Run(site / "inventory", site).plan()) == accel_key(added)
    elsewhere = write(site.parent / "molecule", {"inventory/hosts.yml": HOSTS})
    assert accel_key(Run(elsewhere / "inventory", site).plan(inventory=[str(site / "inventory")])) == accel_key(added)

    # ...and the group's value is in it: changing it (not the value of 'all') changes the key.
    (site / "inventory/group_vars/gpu/marker.yml").write_text("marker_text: changed in group_vars/gpu\n")
    assert accel_key(Run(site / "inventory", site).plan()) != accel_key(added)


def test_host_variables_of_a_layer_host_reach_its_key(site, tmp_path):
    # Another copy of the site: Ansible caches which vars files a directory holds for the process.
    without = accel_key(Run(site / "inventory", site).plan())
    scoped = tmp_path / "scoped"
    subprocess.run(["cp", "-a", str(site), str(scoped)], check=True)
    write(scoped, {"inventory/host_vars/accel/marker.yml": "marker_text: from host_vars/accel\n"})
    run = Run(scoped / "inventory", scoped)
    run.add_layer_host("accel", ["hpc_stateless_layers", "gpu"])
    added = run.plan()
    assert accel_key(added) != without
    assert accel_key(Run(scoped / "inventory", scoped).plan()) == accel_key(added)
    # The root layer's roles read nothing: its key does not move.
    assert added["layers"]["root"]["key"] == Run(site / "inventory", site).plan()["layers"]["root"]["key"]


def test_the_planning_hosts_view_is_used_only_without_an_inventory(site):
    """Without any inventory (no hostvars) the layer sees the planning host's variables: here
    none, so the key differs from the inventory's, where group gpu sets marker_text."""
    run = Run(site / "inventory", site)
    layers = run.plan(compute_keys=False)["layers"]
    spec = {name: {k: layers[name][k] for k in ("roles", "groups", "vars")} for name in layers}
    # The plan's bootstrap carries the layer's architecture, which the inventory writes on the layer itself.
    spec["root"]["bootstrap"] = {k: v for k, v in layers["root"]["bootstrap"].items() if k != "arch"}
    spec["accel"]["parent"] = "root"
    task = Task()
    task.args = {"layers": spec, "images": {}, "check_storage": False}
    loader = DataLoader()
    action = plan_action.ActionModule(task, NO_CONNECTION, PlayContext(), loader, Templar(loader), None)
    bare = action.run(task_vars={"playbook_dir": str(site)})
    assert accel_key(bare) != accel_key(run.plan())


@pytest.mark.parametrize(("layers", "expected"), [
    ({"a": {"parent": "missing", "roles": []}}, "unknown parent layer 'missing'"),
    ({"a": {"parent": "b"}, "b": {"parent": "a"}}, "cycle"),
])
def test_a_bad_dag_is_a_failed_result_without_a_traceback(site, layers, expected):
    result = Run(site / "inventory", site).plan(layers=layers, compute_keys=False)
    assert result["failed"] is True
    assert expected in result["msg"]
    assert "exception" not in result


def test_an_unknown_git_revision_is_a_failed_result_without_a_traceback(site):
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    result = Run(site / "inventory", site).plan(changed_files=[], since="origin/nope")
    assert result["failed"] is True
    assert "unknown git revision 'origin/nope'" in result["msg"]
    assert "exception" not in result


def test_an_unreadable_inventory_file_is_named_not_reported_as_a_missing_dag(site):
    write(site, {"inventory/group_vars/all/broken.yml": "marker_text: [unclosed\n"})
    result = Run(site / "inventory", site).plan(compute_keys=False)
    assert result["failed"] is True
    assert "hpc_stateless_layers is not defined" not in result["msg"]
    assert "broken.yml" in result["msg"]
    assert "exception" not in result


def test_a_missing_dag_says_so(tmp_path):
    inventory = write(tmp_path, {"inventory/hosts.yml": HOSTS}) / "inventory"
    result = Run(inventory, tmp_path).plan(compute_keys=False)
    assert result["failed"] is True
    assert result["msg"].startswith("hpc_stateless_layers is not defined")


def test_a_missing_inventory_option_is_named(site, tmp_path):
    result = Run(site / "inventory", site).plan(inventory=[str(tmp_path / "nowhere")], compute_keys=False)
    assert result["failed"] is True
    assert f"inventory: {tmp_path / 'nowhere'} does not exist" in result["msg"]


def test_the_git_label_is_git_describe_of_the_playbook_directory(site):
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    subprocess.run(["git", "-C", str(site), "-c", "user.name=t", "-c", "user.email=t@example.org",
                    "commit", "-q", "--allow-empty", "-m", "first"], check=True)
    described = subprocess.run(["git", "-C", str(site), "describe", "--always", "--dirty", "--abbrev=12"],
                               capture_output=True, text=True, check=True).stdout.strip()
    result = Run(site / "inventory", site).plan(compute_keys=False)
    assert result["git_commit"] == described and len(described) >= 12


def test_the_git_label_runs_through_the_process_runner(tmp_path):
    calls = []

    def executor(argv, **kwargs):
        calls.append((argv, kwargs["env"].get("LC_ALL"), kwargs["timeout"]))
        return _process.Result(argv, 0, "v1.2-3-gabcdef012345-dirty\n", "")

    old = _process.set_executor(executor)
    try:
        assert _git.describe_work_tree(str(tmp_path)) == "v1.2-3-gabcdef012345-dirty"
    finally:
        _process.set_executor(old)
    assert calls == [(["git", "-C", str(tmp_path), "describe", "--always", "--dirty", "--abbrev=12"], "C", 30)]


def test_outside_a_work_tree_the_git_label_is_empty(tmp_path):
    assert _git.describe_work_tree(str(tmp_path)) == ""


def test_a_site_role_beside_the_top_level_playbook_is_found_when_the_play_is_a_collections(site, tmp_path, monkeypatch):
    """A site's site.yml imports hpc.stateless.build: playbook_dir is the collection's playbooks/,
    the site's roles/ is found through the top-level playbook, and the build is told its directory."""
    from ansible import context
    from ansible.module_utils.common.collections import ImmutableDict

    (site / "site.yml").write_text("---\n")
    installed = write(tmp_path / "coll/ansible_collections/hpc/stateless", {"playbooks/build.yml": "---\n"})
    monkeypatch.chdir(site)
    monkeypatch.setattr(context, "CLIARGS", ImmutableDict(args=("site.yml",)))
    result = Run(site / "inventory", installed / "playbooks").plan()
    assert not result.get("failed"), result.get("msg")
    assert result["project_dir"] == str(site)
    assert result["layers"]["accel"]["role_refs"] == [str(site / "roles/marker")]


def test_the_suite_expects_the_values_the_build_applied_host_vars_and_extra_variables_included(site, monkeypatch):
    """verify's compliance suite reads each role's values as the plan reads a layer for its key (LayerHosts): the
    layer's groups, its host_vars and extra variables, then its own vars - not the inventory's group_vars files
    alone, which missed the last three (an -e edit failed the slurm check that had built it). A vaulted value
    reaches the checks as the digest of its ciphertext, never as the secret."""
    from ansible.parsing.vault import VaultLib, VaultSecret
    from ansible.utils.vars import load_extra_vars

    secret = VaultSecret(b"unit-test-vault")
    ciphertext = VaultLib([("default", secret)]).encrypt("s3cret").decode()
    write(site, {
        "inventory/host_vars/accel.yml": "marker_mode: from host_vars\nmarker_secret: !vault |\n"
                                         + "".join(f"  {line}\n" for line in ciphertext.splitlines()),
        "inventory/group_vars/all/layers.yml": LAYERS.replace("    roles: [marker]\n",
                                                              "    roles: [marker]\n    vars: {marker_size: 3}\n"),
    })
    # -e marker_text='from -e': ansible-core keeps the parsed extra variables on load_extra_vars for the run
    monkeypatch.setattr(load_extra_vars, "extra_vars", {"marker_text": "from -e"}, raising=False)
    run = Run(site / "inventory", site)
    run.loader.set_vault_secrets([("default", secret)])
    plan = run.plan(compute_keys=False)
    run.add_layer_host("accel", plan["layers"]["accel"]["host_groups"])
    action = compliance_suite.ActionModule(Task(), NO_CONNECTION, PlayContext(), run.loader, Templar(run.loader), None)
    values = action._role_values(plan["layers"], "accel", {"hostvars": HostVars(run.inventory, run.variables, run.loader),
                                                           "inventory_hostname": "accel"})
    marker = values["marker"]
    assert (marker["marker_text"], marker["marker_mode"], marker["marker_size"]) == ("from -e", "from host_vars", 3)
    assert set(marker["marker_secret"]) == {"__vault_sha256__"} and "s3cret" not in str(values)


def test_a_role_found_nowhere_names_the_setting_to_add(site, tmp_path, monkeypatch):
    from ansible import context
    from ansible.module_utils.common.collections import ImmutableDict

    elsewhere = write(tmp_path / "elsewhere", {"site.yml": "---\n"})
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(context, "CLIARGS", ImmutableDict(args=("site.yml",)))
    result = Run(site / "inventory", elsewhere).plan(compute_keys=False)
    assert result["failed"] is True
    assert "role 'marker' not found" in result["msg"]
    assert f"put the role in {elsewhere}/roles or add its directory to roles_path" in result["msg"]


def test_the_default_version_is_the_describe_of_a_clean_tree_else_it_carries_the_leaf_key(site):
    images = site / "inventory/group_vars/all/layers.yml"
    images.write_text(images.read_text().replace("hpc_stateless_images: {}", "hpc_stateless_images: {gpu: {layer: accel}}"))
    git = ["git", "-C", str(site), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(site)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "site"], check=True)
    subprocess.run([*git, "tag", "-a", "v7", "-m", "v7"], check=True)
    run = Run(site / "inventory", site)
    run.add_layer_host("accel", ["hpc_stateless_layers", "gpu"])
    clean = run.plan()
    assert clean["versions"] == {"gpu": "v7"}, clean.get("version_notes")
    (site / "inventory/group_vars/gpu/marker.yml").write_text("marker_text: edited, not committed\n")
    edited = Run(site / "inventory", site)
    edited.add_layer_host("accel", ["hpc_stateless_layers", "gpu"])
    result = edited.plan()
    assert result["versions"] == {"gpu": f"v7+{accel_key(result)[:12]}"}
    assert accel_key(result) != accel_key(clean)
    assert "the work tree differs from v7 (inventory/group_vars/gpu/marker.yml)" in result["version_notes"]["gpu"]


def _bare_action(check_mode: bool = False):
    task = Task()
    task.check_mode = check_mode
    loader = DataLoader()
    return plan_action.ActionModule(task, NO_CONNECTION, PlayContext(), loader, Templar(loader), None)


def test_the_plan_passes_the_archive_cache_it_is_given_and_leaves_the_default_to_the_archive_view():
    """The default (root's, or the user's inside `buildah unshare`) is the archive view's rule (default_cache_dir).
    A wait for another run's read of the cache is a warning on the playbook's output."""
    warn = plan_action.display.warning
    assert _bare_action()._archive_options({"freshness_cache_dir": None}) == {"on_wait": warn}
    assert _bare_action()._archive_options({"freshness_cache_dir": "/srv/c"}) == {"cache_dir": "/srv/c", "on_wait": warn}


def test_a_plan_in_check_mode_reads_a_private_copy_of_the_archive_cache(tmp_path):
    """Check mode writes nothing: the view gets hard links of the cache's files in a directory of its own,
    removed after the plan; the cache's lock is not copied."""
    cache = tmp_path / "cache"
    write(cache, {"packages/abc.json": "{}", "lock": ""})
    action = _bare_action(check_mode=True)
    copy = Path(action._archive_options({"freshness_cache_dir": str(cache)})["cache_dir"])
    assert copy != cache and (copy / "packages/abc.json").stat().st_ino == (cache / "packages/abc.json").stat().st_ino
    assert not (copy / "lock").exists()
    action._drop_check_cache()
    assert not copy.exists() and (cache / "packages/abc.json").exists()


class _FakeBuildah:
    """A stand-in for buildah's listing (the unit test has no storage): two images, one container."""

    def layer_images(self):
        labels = {"hpc.stateless.layer": "base", "hpc.stateless.key": "k1", "hpc.stateless.parent": ""}
        return [{"id": "i1", "names": ["localhost/p/base:k1"], "labels": labels, "created": 1}]

    def container_names(self, stem):
        return [f"{stem}base-k1"]


@pytest.mark.parametrize("transport, become, environment, in_process", [
    ("local", False, [], True),
    ("local", False, None, True),
    ("local", False, [{}], True),       # what a play that sets no environment hands the action
    ("ansible.builtin.local", False, [], True),
    ("ssh", False, [], False),          # a remote build host: the module runs there
    ("local", True, [], False),         # become: the module runs as the become user
    ("local", False, [{"X": "1"}], False),  # a task environment reaches the module, not this process
    ("local", False, [{}, "{{ proxy_env }}"], False),  # a templated one may set variables: the module too
])
def test_the_listing_runs_in_the_plans_process_only_for_a_local_build_host(monkeypatch, transport, become,
                                                                           environment, in_process):
    action = _bare_action()
    action._connection = SimpleNamespace(transport=transport, _shell=NO_CONNECTION._shell)
    action._play_context.become = become
    action._task.environment = environment
    calls = []
    monkeypatch.setattr(action, "_execute_module", lambda **kw: calls.append(kw["module_name"]) or {"images": []})
    monkeypatch.setattr(plan_action, "Buildah", _FakeBuildah)
    result = action._layer_listing({})
    if in_process:
        assert not calls
        assert result["keys"] == {"base": ["k1"]} and result["images"][0]["layer"] == "base"
        assert result["containers"] == ["hpc-stateless-base-k1"]
    else:
        assert calls == ["hpc.stateless.layer_info"]


def test_a_failed_local_listing_is_a_failed_answer_naming_buildah(monkeypatch):
    class Broken(_FakeBuildah):
        def layer_images(self):
            raise _process.ProcessError(["buildah", "images"], 125, "storage is locked")

    action = _bare_action()
    action._connection = SimpleNamespace(transport="local", _shell=NO_CONNECTION._shell)
    monkeypatch.setattr(plan_action, "Buildah", Broken)
    result = action._layer_listing({})
    assert result["failed"] and "buildah" in result["msg"]


# -- architectures ------------------------------------------------------------------------------


def test_a_layer_of_an_architecture_the_build_host_cannot_run_is_refused_at_plan():
    """No binfmt handler for arm64 on an amd64 host: the plan names the layers, the architecture, the packages."""
    root = {"arch": ["amd64", "arm64"], "bootstrap": {"distro": "debian", "release": "bookworm"}}
    graph = LayerGraph.from_spec({"base": root, "hpc": {"parent": "base"}}, host_arch="amd64")
    plan_action.check_emulation(graph, ["amd64", "arm64"])  # emulated: fine
    with pytest.raises(plan_action.PlanError) as err:
        plan_action.check_emulation(graph, ["amd64"])
    message = str(err.value)
    assert message.startswith("layer base-arm64, hpc-arm64: architecture arm64, which this amd64 build host can "
                              "neither run nor emulate")
    assert "apt-get install qemu-user-static binfmt-support" in message and "update-binfmts --enable" in message
    native = LayerGraph.from_spec({"base": {"arch": "arm64", "bootstrap": {"distro": "debian", "release": "12"}}})
    plan_action.check_emulation(native, ["arm64"])  # a native arm64 build host needs nothing


def test_the_build_host_runs_its_own_architecture_and_the_enabled_qemu_handlers(tmp_path):
    """binfmt_misc as the kernel shows it: only an enabled qemu-<machine> handler under an enabled binfmt_misc."""
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n")
    (tmp_path / "qemu-s390x").write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/s390x-binfmt-P\n")
    assert runnable_arches(str(tmp_path), native="amd64") == ["amd64", "arm64"]
    (tmp_path / "status").write_text("disabled\n")
    assert runnable_arches(str(tmp_path), native="amd64") == ["amd64"]
    assert runnable_arches(str(tmp_path / "unmounted"), native="arm64") == ["arm64"]


def test_the_plan_names_each_layers_origin_and_gives_the_expanded_specs(site):
    """A stage that reads a layer's chain (apt sources at build, pack's freshness) finds base-arm64 by its origin in
    hpc_stateless_layers, or by its own name in layer_specs."""
    layers = {"root": {"arch": ["amd64", "arm64"], "bootstrap": {"distro": "debian", "release": "bookworm"}},
              "accel": {"parent": "root", "roles": [], "sources": [{"uri": "http://repo.example.org/debian",
                                                                   "suite": "stable", "components": ["main"]}]}}
    planned = Run(site / "inventory", site).plan(compute_keys=False, layers=layers)
    assert not planned.get("failed"), planned.get("msg")
    assert set(planned["order"]) == {"root", "root-arm64", "accel", "accel-arm64"}
    assert {name: (entry["origin"], entry["arch"]) for name, entry in planned["layers"].items()} == {
        "root": ("root", "amd64"), "root-arm64": ("root", "arm64"),
        "accel": ("accel", "amd64"), "accel-arm64": ("accel", "arm64")}
    assert planned["layer_specs"]["accel-arm64"]["parent"] == "root-arm64"
    assert [s.uri for s in layer_sources("accel-arm64", planned["layer_specs"])] == \
        [s.uri for s in layer_sources("accel", layers)]
