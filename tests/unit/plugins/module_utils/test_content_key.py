"""Content keys of layers, computed from real roles written to tmp_path.

The properties that matter: a key changes exactly when something that can change the
layer's content changes (its roles' files, the values of variables they read, its parent),
and stays put otherwise (docs, tests, unrelated variables, facts, descriptions, dict order).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import (
    UNDEFINED_MARKER,
    LayerKey,
    RoleError,
    RoleIndex,
    RoleNotFoundError,
    canonical_value,
    compute_keys,
    keyed_spec,
    layer_key,
    referenced_variables,
    resolve_variable_values,
    role_digest,
    template_variables,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- a small role tree

ROLE_FILES = {
    "common/tasks/main.yml": """
        - name: Message of the day
          ansible.builtin.template:
            src: motd.j2
            dest: /etc/motd
          when: common_motd | bool
        - name: Facts are not inventory
          ansible.builtin.debug:
            msg: "{{ ansible_hostname }} {{ ansible_facts['os_family'] }}"
        """,
    "common/templates/motd.j2": "Welcome to {{ site_name }}: {{ common_banner }}\n",
    "common/defaults/main.yml": """
        common_motd: true
        common_banner: "{{ site_slogan }}"
        """,
    "common/README.md": "# common\n",
    "common/molecule/default/converge.yml": "- hosts: all\n",
    "common/tests/test.yml": "- hosts: localhost\n",
    "webdep/tasks/main.yml": """
        - name: Dependency
          ansible.builtin.copy:
            content: "{{ webdep_value }}"
            dest: /etc/webdep
        """,
    "web/meta/main.yml": """
        galaxy_info:
          author: someone
        dependencies:
          - role: webdep
        """,
    "web/tasks/main.yml": """
        - name: Web config
          ansible.builtin.template:
            src: web.conf.j2
            dest: /etc/web.conf
        - name: Optional
          ansible.builtin.debug:
            msg: enabled
          when: web_enabled
        """,
    "web/templates/web.conf.j2": "port={{ web_port }}\n",
    "helper/tasks/main.yml": """
        - name: Helper
          ansible.builtin.copy:
            src: data.txt
            dest: /etc/data.txt
        """,
    "helper/files/data.txt": "v1\n",
    "extra/tasks/main.yml": """
        - name: Use the helper
          ansible.builtin.include_role:
            name: helper
        """,
}

#   base [common] -> compute [web (-> webdep)] -> gpu []
#                 -> login [extra (-> helper)]
LAYERS = {
    "base": {"bootstrap": {"distro": "debian", "release": "12"}, "roles": ["common"], "description": "Base"},
    "compute": {"parent": "base", "roles": ["web"]},
    "gpu": {"parent": "compute"},
    "login": {"parent": "base", "roles": ["extra"]},
}

VARS = {
    "site_name": "Cluster",
    "site_slogan": "fast",
    "web_port": 8080,
    "web_enabled": True,
    "webdep_value": "x",
    "unrelated": "anything",
    "ansible_hostname": "builder",
}


@pytest.fixture
def roles(tmp_path) -> Path:
    root = tmp_path / "roles"
    for rel, text in ROLE_FILES.items():
        write(root / rel, text)
    return root


def key_map(roles_dir: Path, layers=None, variables=None, per_layer=None) -> dict[str, str]:
    """Fresh RoleIndex and graph, then {layer: key}."""
    return {name: k.key for name, k in compute(roles_dir, layers, variables, per_layer).items()}


def compute(roles_dir: Path, layers=None, variables=None, per_layer=None) -> dict[str, LayerKey]:
    index = RoleIndex([str(roles_dir)], [])
    graph = LayerGraph.from_spec(LAYERS if layers is None else layers, role_exists=index.exists)
    base_vars = VARS if variables is None else variables
    return compute_keys(graph, index, lambda name: {**base_vars, **(per_layer or {}).get(name, {})})


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


# --------------------------------------------------------------------------- compute_keys


def test_same_input_same_keys(roles):
    """Two independent computations over the same files and variables agree."""
    first, second = key_map(roles), key_map(roles)
    assert first == second
    assert all(len(k) == 64 and int(k, 16) >= 0 for k in first.values())
    assert len(set(first.values())) == 4


def test_keys_do_not_depend_on_dict_order(roles):
    """Reordering layers, variables and nested mappings leaves every key unchanged."""
    variables = {**VARS, "site_slogan": {"a": 1, "b": [1, {"x": 1, "y": 2}]}}
    reordered = dict(reversed(list(variables.items())))
    reordered["site_slogan"] = {"b": [1, {"y": 2, "x": 1}], "a": 1}
    assert list(reordered) != list(variables)
    layers = dict(reversed(list(LAYERS.items())))
    assert key_map(roles, layers, reordered) == key_map(roles, LAYERS, variables)


def test_keys_come_in_build_order_and_chain_to_the_parent(roles):
    """compute_keys returns layers parents-first; each records its parent's key and role closure."""
    keys = compute(roles)
    assert list(keys) == ["base", "compute", "gpu", "login"]
    assert keys["base"].parent is None and keys["base"].parent_key is None
    assert keys["gpu"].parent == "compute" and keys["gpu"].parent_key == keys["compute"].key
    assert keys["compute"].roles == ["webdep", "web"]
    assert keys["login"].roles == ["helper", "extra"]
    assert keys["gpu"].roles == []
    assert keys["compute"].as_dict()["key"] == keys["compute"].key


def test_variables_recorded_are_the_referenced_ones(roles):
    """LayerKey.variables holds exactly the non-fact variables the layer's roles read."""
    keys = compute(roles)
    assert keys["base"].variables == {
        "common_banner": UNDEFINED_MARKER, "common_motd": UNDEFINED_MARKER,
        "site_name": "Cluster", "site_slogan": "fast",
    }
    assert keys["compute"].variables == {"web_enabled": True, "web_port": 8080, "webdep_value": "x"}
    assert keys["gpu"].variables == {}


def test_role_file_change_rekeys_layer_and_descendants_only(roles):
    """Editing a role's template changes its layer and the layers below, not the parent or a sibling."""
    before = key_map(roles)
    write(roles / "web/templates/web.conf.j2", "port={{ web_port }}\nworkers=4\n")
    assert changed(before, key_map(roles)) == {"compute", "gpu"}


def test_root_role_change_rekeys_everything(roles):
    """Editing the root layer's role changes every layer's key."""
    before = key_map(roles)
    write(roles / "common/tasks/extra.yml", "- ansible.builtin.debug: {msg: hi}\n")
    assert changed(before, key_map(roles)) == {"base", "compute", "gpu", "login"}


def test_meta_dependency_change_propagates(roles):
    """A file change in a meta/main.yml dependency changes the layer applying the dependent role."""
    before = key_map(roles)
    write(roles / "webdep/files/new.conf", "new\n")
    assert changed(before, key_map(roles)) == {"compute", "gpu"}


def test_include_role_dependency_change_propagates(roles):
    """A file change in a role named by include_role changes the including layer."""
    before = key_map(roles)
    write(roles / "helper/files/data.txt", "v2\n")
    assert changed(before, key_map(roles)) == {"login"}


def test_docs_and_role_tests_do_not_count(roles):
    """README, molecule/, tests/, __pycache__ and editor leftovers do not reach any key."""
    before = key_map(roles)
    write(roles / "common/README.md", "# rewritten\n")
    write(roles / "common/README.rst", "new\n")
    write(roles / "common/molecule/default/verify.yml", "- hosts: all\n")
    write(roles / "common/tests/inventory", "localhost\n")
    write(roles / "web/library/__pycache__/mod.cpython-311.pyc", "x")
    write(roles / "web/library/mod.pyc", "x")
    write(roles / "web/templates/web.conf.j2~", "backup")
    write(roles / "web/templates/.web.conf.j2.swp", "swap")
    assert key_map(roles) == before


def test_changing_a_referenced_template_variable(roles):
    """A variable read in a template: changing its value changes the key of layers applying it."""
    before = key_map(roles)
    assert changed(before, key_map(roles, variables={**VARS, "web_port": 9090})) == {"compute", "gpu"}
    assert changed(before, key_map(roles, variables={**VARS, "site_name": "Other"})) == set(LAYERS)


def test_changing_a_variable_read_in_when(roles):
    """A variable read only in a `when:` condition reaches the key."""
    before = key_map(roles)
    assert changed(before, key_map(roles, variables={**VARS, "web_enabled": False})) == {"compute", "gpu"}


def test_changing_a_variable_read_by_role_defaults(roles):
    """A variable read only through a role default (common_banner -> site_slogan) reaches the key."""
    before = key_map(roles)
    assert changed(before, key_map(roles, variables={**VARS, "site_slogan": "slow"})) == set(LAYERS)


def test_changing_a_variable_read_through_inventory_indirection(roles):
    """web_port: '{{ base_port }}' in the inventory: changing base_port changes the key."""
    variables = {**VARS, "web_port": "{{ base_port + 1 }}", "base_port": 8000}
    before = key_map(roles, variables=variables)
    after = key_map(roles, variables={**variables, "base_port": 9000})
    assert changed(before, after) == {"compute", "gpu"}


def test_unrelated_variable_does_not_change_keys(roles):
    """A variable no role reads can change (or appear) without changing any key."""
    before = key_map(roles)
    assert key_map(roles, variables={**VARS, "unrelated": "other", "brand_new": 1}) == before
    assert key_map(roles, variables={k: v for k, v in VARS.items() if k != "unrelated"}) == before


def test_facts_are_ignored(roles):
    """ansible_* variables come from the built image, not the inventory: not keyed."""
    before = key_map(roles)
    after = key_map(roles, variables={**VARS, "ansible_hostname": "other", "ansible_facts": {"x": 1}})
    assert after == before
    assert not any(name.startswith("ansible_") for k in compute(roles).values() for name in k.variables)


def test_undefined_and_defined_variables_differ(roles):
    """Missing, null and empty values of a referenced variable give three different keys."""
    missing = {k: v for k, v in VARS.items() if k != "web_port"}
    variants = (missing, {**missing, "web_port": None}, {**missing, "web_port": ""})
    keys = [key_map(roles, variables=v)["compute"] for v in variants]
    assert len(set(keys)) == 3
    assert compute(roles, variables=missing)["compute"].variables["web_port"] == UNDEFINED_MARKER


def test_variables_count_only_for_the_layer_whose_roles_read_them(roles):
    """A layer host's variable matters only if that layer's own roles read it: web_port on the
    compute host rekeys compute (and gpu through the parent key), on the gpu host nothing."""
    before = key_map(roles)
    assert changed(before, key_map(roles, per_layer={"compute": {"web_port": 1}})) == {"compute", "gpu"}
    assert changed(before, key_map(roles, per_layer={"gpu": {"web_port": 1}})) == set()
    assert changed(before, key_map(roles, per_layer={"login": {"site_name": "Login"}})) == set()


def test_description_does_not_change_keys(roles):
    """description is documentation only."""
    layers = {**LAYERS, "base": {**LAYERS["base"], "description": "Something else entirely"},
              "gpu": {**LAYERS["gpu"], "description": "GPU"}}
    assert key_map(roles, layers) == key_map(roles)


def test_bootstrap_tool_does_not_change_keys(roles):
    """The bootstrap tool is provenance (recorded in the root and its label), not content: choosing
    debootstrap or naming the default mmdebstrap keeps every key, so cached layers stay valid."""
    for tool in ("debootstrap", "mmdebstrap"):
        layers = {**LAYERS, "base": {**LAYERS["base"], "bootstrap": {**LAYERS["base"]["bootstrap"], "tool": tool}}}
        assert key_map(roles, layers) == key_map(roles)


def test_unreferenced_layer_vars_do_not_change_keys(roles):
    """The spec's vars enter the key only through variables the roles read."""
    layers = {**LAYERS, "compute": {**LAYERS["compute"], "vars": {"nobody_reads_this": 1}}}
    assert key_map(roles, layers) == key_map(roles)


def test_spec_changes_that_matter_change_keys(roles):
    """groups, the role list and the bootstrap change the key of the layer and its descendants."""
    before = key_map(roles)
    grouped = {**LAYERS, "compute": {**LAYERS["compute"], "groups": ["hpc"]}}
    assert changed(before, key_map(roles, grouped)) == {"compute", "gpu"}
    more_roles = {**LAYERS, "gpu": {**LAYERS["gpu"], "roles": ["helper"]}}
    assert changed(before, key_map(roles, more_roles)) == {"gpu"}
    other_release = {**LAYERS, "base": {**LAYERS["base"], "bootstrap": {"distro": "debian", "release": "13"}}}
    assert changed(before, key_map(roles, other_release)) == set(LAYERS)


def test_jinja_in_the_spec_is_keyed(roles):
    """A variable templated into the layer spec (bootstrap mirror) reaches the key."""
    layers = {**LAYERS, "base": {**LAYERS["base"], "bootstrap": {
        "distro": "debian", "release": "12", "mirror": "{{ mirror_url }}"}}}
    before = key_map(roles, layers, {**VARS, "mirror_url": "http://a"})
    after = key_map(roles, layers, {**VARS, "mirror_url": "http://b"})
    assert changed(before, after) == set(LAYERS)


def test_missing_layer_role_names_the_roles_entry(roles):
    """A listed role that does not resolve is reported at hpc_stateless_layers.<layer>.roles[i]."""
    graph = LayerGraph.from_spec({"base": {**LAYERS["base"], "roles": ["common", "ghost"]}})
    with pytest.raises(RoleNotFoundError) as info:
        compute_keys(graph, RoleIndex([str(roles)], []), lambda name: VARS)
    assert info.value.path == "hpc_stateless_layers.base.roles[1]"
    assert "'ghost' not found" in info.value.problem and str(roles) in info.value.problem


# --------------------------------------------------------------------------- role errors


def test_meta_dependency_cycle_names_the_cycle(tmp_path):
    """a -> b -> a through meta dependencies is a RoleError naming the cycle."""
    write(tmp_path / "a/meta/main.yml", "dependencies: [b]\n")
    write(tmp_path / "b/meta/main.yml", "dependencies: [{role: a}]\n")
    with pytest.raises(RoleError) as info:
        RoleIndex([str(tmp_path)], []).closure(["a"])
    assert "role dependency cycle: a -> b -> a" in str(info.value)


def test_include_role_cycle_names_the_cycle(tmp_path):
    """A three-role cycle through include_role/import_role is reported with every member."""
    write(tmp_path / "x/tasks/main.yml", "- ansible.builtin.include_role: {name: y}\n")
    write(tmp_path / "y/tasks/main.yml", "- block:\n    - import_role: {name: z}\n")
    write(tmp_path / "z/handlers/main.yml", "- include_role: name=x\n")
    with pytest.raises(RoleError, match="x -> y -> z -> x"):
        RoleIndex([str(tmp_path)], []).closure(["x"])


def test_cycle_fails_compute_keys(tmp_path):
    """compute_keys reports a role cycle as a RoleError (a LayerSpecError)."""
    write(tmp_path / "a/meta/main.yml", "dependencies: [b]\n")
    write(tmp_path / "b/meta/main.yml", "dependencies: [a]\n")
    graph = LayerGraph.from_spec({"base": {**LAYERS["base"], "roles": ["a"]}})
    with pytest.raises(LayerSpecError, match="a -> b -> a"):
        compute_keys(graph, RoleIndex([str(tmp_path)], []), lambda name: {})


def test_bad_yaml_names_the_file(roles):
    """Unparsable YAML in a role is a RoleError whose path is that file."""
    bad = write(roles / "web/tasks/main.yml", "- name: x\n  debug: [unclosed\n")
    with pytest.raises(RoleError) as info:
        key_map(roles)
    assert info.value.path == str(bad)
    assert "cannot parse YAML" in info.value.problem


def test_bad_meta_yaml_names_the_file(roles):
    """Unparsable meta/main.yml fails while following dependencies, naming the file."""
    bad = write(roles / "web/meta/main.yml", "dependencies: [webdep\n")
    with pytest.raises(RoleError) as info:
        key_map(roles)
    assert info.value.path == str(bad)


def test_bad_jinja_in_template_names_the_file(roles):
    """A template with a Jinja syntax error is a RoleError whose path is the template."""
    bad = write(roles / "web/templates/web.conf.j2", "port={{ web_port \n")
    with pytest.raises(RoleError) as info:
        key_map(roles)
    assert info.value.path == str(bad)
    assert "Jinja syntax error" in info.value.problem and "line 1" in info.value.problem


def test_bad_jinja_in_when_names_file_and_task(roles):
    """A broken `when:` expression is reported with its file and task name."""
    write(roles / "web/tasks/main.yml", "- name: Broken check\n  debug: {msg: x}\n  when: web_port >\n")
    with pytest.raises(RoleError) as info:
        key_map(roles)
    assert str(roles / "web/tasks/main.yml") in info.value.path
    assert "Broken check" in info.value.path


def test_missing_dependency_names_the_meta_entry(tmp_path):
    """A meta dependency that resolves nowhere names the meta file and entry."""
    meta = write(tmp_path / "a/meta/main.yml", "dependencies: [ok, ghost]\n")
    write(tmp_path / "ok/tasks/main.yml", "[]\n")
    with pytest.raises(RoleNotFoundError) as info:
        RoleIndex([str(tmp_path)], []).dependencies("a")
    assert info.value.path == f"{meta}: dependencies[1]"
    assert "'ghost' not found" in info.value.problem


def test_bad_dependency_entry(tmp_path):
    """A meta dependency that is neither a name nor a mapping with one is rejected."""
    write(tmp_path / "a/meta/main.yml", "dependencies: [[nested]]\n")
    with pytest.raises(RoleError, match=r"dependencies\[0\].*expected a role name"):
        RoleIndex([str(tmp_path)], []).dependencies("a")


# --------------------------------------------------------------------------- RoleIndex


def test_role_index_lookup(tmp_path):
    """exists/path resolve in search order; a miss lists every searched candidate."""
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "shared").mkdir(parents=True)
    (second / "shared").mkdir(parents=True)
    (second / "only2").mkdir()
    index = RoleIndex([str(first), str(second)], [str(tmp_path / "colls")])
    assert index.exists("shared") and index.exists("only2") and not index.exists("nope")
    assert index.path("shared") == str(first / "shared")
    assert index.search_hint == f"{first}, {second}, {tmp_path / 'colls'}"
    with pytest.raises(RoleNotFoundError) as info:
        index.path("nope")
    assert str(first / "nope") in str(info.value) and str(second / "nope") in str(info.value)


def test_collection_roles_resolve_by_fqcn_and_siblings(tmp_path):
    """ns.coll.role finds a collection role; its plain-name dependency resolves to the sibling's FQCN."""
    roles_dir = tmp_path / "colls/ansible_collections/ns/coll/roles"
    write(roles_dir / "app/meta/main.yml", "dependencies: [lib]\n")
    write(roles_dir / "lib/tasks/main.yml", "- debug: {msg: lib}\n")
    write(tmp_path / "roles/lib/tasks/main.yml", "- debug: {msg: the other lib}\n")
    index = RoleIndex([str(tmp_path / "roles")], [str(tmp_path / "colls")])
    assert index.path("ns.coll.app") == str(roles_dir / "app")
    assert index.dependencies("ns.coll.app") == ["ns.coll.lib"]
    assert index.closure(["ns.coll.app"]) == ["ns.coll.lib", "ns.coll.app"]
    assert index.path("ns.coll.lib") == str(roles_dir / "lib")


def test_closure_orders_dependencies_first_and_once(tmp_path):
    """A diamond (top -> left, right -> bottom) lists bottom once, before its users."""
    write(tmp_path / "top/meta/main.yml", "dependencies: [left, right]\n")
    write(tmp_path / "left/meta/main.yml", "dependencies: [bottom]\n")
    write(tmp_path / "right/tasks/main.yml", "- include_role: {name: bottom}\n")
    write(tmp_path / "bottom/tasks/main.yml", "[]\n")
    index = RoleIndex([str(tmp_path)], [])
    assert index.closure(["top"]) == ["bottom", "left", "right", "top"]
    assert index.closure(["right", "top"]) == ["bottom", "right", "left", "top"]


def test_templated_include_role_is_not_a_dependency(tmp_path):
    """include_role with a templated name cannot be followed statically and is skipped."""
    write(tmp_path / "a/tasks/main.yml", "- include_role: {name: '{{ which }}'}\n")
    assert RoleIndex([str(tmp_path)], []).dependencies("a") == []
    assert "which" in referenced_variables(str(tmp_path / "a"))


# --------------------------------------------------------------------------- role_digest


def test_role_digest_tracks_content_names_and_exec_bit(tmp_path):
    """Content, file names and the executable bit count; the same tree hashes the same."""
    role = tmp_path / "r"
    script = write(role / "files/run.sh", "echo hi\n")
    base = role_digest(str(role))
    assert role_digest(str(role)) == base
    script.chmod(0o755)
    executable = role_digest(str(role))
    assert executable != base
    script.chmod(0o644)
    assert role_digest(str(role)) == base
    script.write_text("echo bye\n")
    assert role_digest(str(role)) != base
    script.write_text("echo hi\n")
    script.rename(role / "files/other.sh")
    assert role_digest(str(role)) != base


def test_role_digest_is_independent_of_location(tmp_path):
    """Two copies of a role in different directories hash the same."""
    for where in ("one/r", "two/deeper/r"):
        write(tmp_path / where / "tasks/main.yml", "[]\n")
    assert role_digest(str(tmp_path / "one/r")) == role_digest(str(tmp_path / "two/deeper/r"))


def test_role_digest_hashes_symlinks_by_target(tmp_path):
    """A symlink counts by its target string, not by the content it points to."""
    role = tmp_path / "r"
    target = write(tmp_path / "outside.txt", "one\n")
    (role / "files").mkdir(parents=True)
    os.symlink(str(target), role / "files/link")
    base = role_digest(str(role))
    target.write_text("two\n")
    assert role_digest(str(role)) == base
    (role / "files/link").unlink()
    os.symlink(str(tmp_path / "elsewhere.txt"), role / "files/link")
    assert role_digest(str(role)) != base


def test_role_digest_exclusions_are_top_level_only(tmp_path):
    """README/tests/molecule are skipped at the role top, but count deeper down."""
    role = tmp_path / "r"
    write(role / "tasks/main.yml", "[]\n")
    base = role_digest(str(role))
    write(role / "README.md", "x")
    write(role / "tests/test.yml", "x")
    write(role / "molecule/default/molecule.yml", "x")
    assert role_digest(str(role)) == base
    write(role / "files/tests/data", "x")
    with_nested_tests = role_digest(str(role))
    assert with_nested_tests != base
    write(role / "files/README", "x")
    assert role_digest(str(role)) != with_nested_tests


def test_role_digest_skips_symlinked_readme_and_test_dirs(tmp_path):
    """A top-level README or tests/ that is a symlink is excluded like a real one."""
    role = tmp_path / "r"
    write(role / "tasks/main.yml", "[]\n")
    docs = write(tmp_path / "docs/r.md", "docs\n")
    base = role_digest(str(role))
    os.symlink(str(docs), role / "README.md")
    os.symlink(str(tmp_path / "docs"), role / "tests")
    assert role_digest(str(role)) == base


# --------------------------------------------------------------------------- variables


@pytest.mark.parametrize(("text", "expected"), [
    ("plain text", set()),
    ("{{ a }} {{ b.c }} {{ d['e'] }}", {"a", "b", "d"}),
    ("{{ a | default(b) }}{% if c is defined %}{{ d }}{% endif %}", {"a", "b", "c", "d"}),
    ("{% set x = y %}{{ x }}", {"y"}),
    ("{% for i in items %}{{ i }}{{ loop.index }}{% endfor %}", {"items"}),
    ("{{ lookup('vars', 'via_lookup') }}", {"lookup", "via_lookup"}),
    ("{{ lookup('ansible.builtin.vars', 'fq_lookup') }}", {"lookup", "fq_lookup"}),
    ("{{ query('vars', 'q1', 'q2') }}", {"query", "q1", "q2"}),
    ("{{ vars['by_item'] }}{{ vars.by_attr }}", {"vars", "by_item", "by_attr"}),
    ("{{ hostvars[inventory_hostname]['hv'] }}", {"hostvars", "inventory_hostname", "hv"}),
    ("{% do l.append(1) %}{% for x in y %}{% break %}{% endfor %}", {"l", "y"}),
    ("{{ x | bool }}{{ y | ansible.builtin.to_json }}{{ z | regex_replace('a', 'b') }}", {"x", "y", "z"}),
    ("{{ r is succeeded }}{{ s is ansible.builtin.match('x') }}", {"r", "s"}),
])
def test_template_variables(text, expected):
    """Free variables of a template, including literal vars/hostvars look-ups and
    expressions using filters/tests that only Ansible defines."""
    assert template_variables(text) == expected


def test_template_syntax_error_names_source():
    """A Jinja syntax error is a RoleError whose path is the given source."""
    with pytest.raises(RoleError) as info:
        template_variables("{% if %}", "roles/x/templates/t.j2")
    assert info.value.path == "roles/x/templates/t.j2"


def test_referenced_variables_reads_every_place(tmp_path):
    """Templates (nested), task conditionals, assert `that`, handlers, meta, defaults and vars are read;
    files/ and docs are not."""
    role = tmp_path / "r"
    write(role / "templates/sub/conf.j2", "{{ in_template }}")
    write(role / "templates/README.j2", "{{ in_readme_template }}")
    write(role / "tasks/main.yml", """
        - name: T
          command: "echo {{ in_args }}"
          when: in_when
          changed_when: [in_changed_when, "other is defined"]
          failed_when: false
          until: in_until
        - assert:
            that: in_assert > 1
            fail_msg: "{{ in_fail_msg }}"
        - "{{ in_key }}": x
        """)
    write(role / "handlers/main.yml", "- name: H\n  service: {name: x}\n  when: in_handler\n")
    write(role / "meta/main.yml", "dependencies: [{role: d, when: in_meta}]\n")
    write(role / "defaults/main.yml", "a: '{{ in_defaults }}'\nb: plain_name_not_expression\n")
    write(role / "vars/main.yml", "c: '{{ in_vars }}'\n")
    write(role / "files/static.txt", "{{ not_templated }}")
    write(role / "README.md", "{{ in_readme }}")
    assert referenced_variables(str(role)) == {
        "in_template", "in_readme_template", "in_args", "in_when", "in_changed_when", "other",
        "in_until", "in_assert", "in_fail_msg", "in_key", "in_handler", "in_meta", "in_defaults",
        "in_vars",
    }


def test_bare_strings_outside_conditionals_are_not_expressions(tmp_path):
    """Only conditionals are expressions: a bare word in a module argument is not a variable."""
    write(tmp_path / "r/tasks/main.yml", "- debug: {msg: just_text}\n  when: cond\n")
    assert referenced_variables(str(tmp_path / "r")) == {"cond"}


def test_unsafe_strings_are_not_templated(tmp_path):
    """`!unsafe` values are never templated by Ansible: their braces are neither variables nor errors."""
    write(tmp_path / "r/defaults/main.yml", """
        alert: !unsafe '{{ $labels.instance }} is down'
        rules: !unsafe
          - '{{ $value }}'
        real: '{{ kept }}'
        """)
    assert referenced_variables(str(tmp_path / "r")) == {"kept"}


def test_unknown_yaml_tags_are_read_as_data(tmp_path):
    """Ansible tags such as !vault do not break parsing."""
    write(tmp_path / "r/vars/main.yml", "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nx: '{{ y }}'\n")
    assert referenced_variables(str(tmp_path / "r")) == {"y"}


def test_resolve_follows_references_transitively():
    """Values referencing other variables pull those in, through several hops."""
    variables = {"a": "{{ b }}-x", "b": ["{{ c }}"], "c": {"k": "{{ d }}"}, "d": 4, "e": "unrelated"}
    assert resolve_variable_values({"a"}, variables) == {"a": "{{ b }}-x", "b": ["{{ c }}"],
                                                         "c": {"k": "{{ d }}"}, "d": 4}


def test_resolve_terminates_on_reference_cycles():
    """a -> b -> a between inventory variables does not loop."""
    assert resolve_variable_values(["a"], {"a": "{{ b }}", "b": "{{ a }}"}) == {"a": "{{ b }}", "b": "{{ a }}"}


def test_resolve_skips_facts_and_marks_undefined():
    """ansible_* and Ansible's own names are dropped; missing names get UNDEFINED_MARKER."""
    values = resolve_variable_values(
        ["x", "ansible_distribution", "inventory_hostname", "groups", "item", "missing"],
        {"x": "{{ ansible_hostname }}{{ y }}", "ansible_distribution": "Debian", "y": 1},
    )
    assert values == {"x": "{{ ansible_hostname }}{{ y }}", "y": 1, "missing": UNDEFINED_MARKER}
    assert list(values) == sorted(values)


def test_resolve_does_not_follow_unsafe_values():
    """A value marked unsafe (like AnsibleUnsafeText) is not scanned for references."""

    class Unsafe(str):
        __UNSAFE__ = True

    assert resolve_variable_values(["a"], {"a": Unsafe("{{ b }}"), "b": 1}) == {"a": "{{ b }}"}


def test_canonical_value():
    """Equal content gives equal canonical data; vault values become a digest of the ciphertext."""

    class Vaulted:
        def __init__(self, ciphertext):
            self._ciphertext = ciphertext

    assert canonical_value({"b": 1, "a": (1, 2)}) == {"a": [1, 2], "b": 1}
    assert list(canonical_value({"b": 1, "a": 2})) == ["a", "b"]
    assert canonical_value({3, 1, 2}) == [1, 2, 3]
    vaulted = canonical_value(Vaulted(b"cipher"))
    assert set(vaulted) == {"__vault_sha256__"} and "cipher" not in str(vaulted)
    assert canonical_value(Vaulted(b"cipher")) == vaulted != canonical_value(Vaulted(b"other"))


# --------------------------------------------------------------------------- layer_key / keyed_spec

SPEC = {"parent": "base", "bootstrap": None, "roles": ["web"], "vars": {"v": 1}, "groups": ["g"],
        "description": "d"}


def test_keyed_spec_drops_vars_and_description():
    """keyed_spec keeps what shapes the image and drops vars/description."""
    assert keyed_spec(SPEC) == {"parent": "base", "bootstrap": None, "roles": ["web"], "groups": ["g"]}


def test_layer_key_inputs():
    """layer_key changes with the parent key, the keyed spec, role digests and variable values only."""
    roles = [("web", "0" * 64)]
    base = layer_key("p" * 64, SPEC, roles, {"x": 1})
    assert base == layer_key("p" * 64, dict(reversed(list(SPEC.items()))), list(roles), {"x": 1})
    assert base == layer_key("p" * 64, {**SPEC, "vars": {"w": 2}, "description": "other"}, roles, {"x": 1})
    others = {
        layer_key(None, SPEC, roles, {"x": 1}),
        layer_key("q" * 64, SPEC, roles, {"x": 1}),
        layer_key("p" * 64, {**SPEC, "groups": []}, roles, {"x": 1}),
        layer_key("p" * 64, SPEC, [("web", "1" * 64)], {"x": 1}),
        layer_key("p" * 64, SPEC, [("other", "0" * 64)], {"x": 1}),
        layer_key("p" * 64, SPEC, roles + [("more", "0" * 64)], {"x": 1}),
        layer_key("p" * 64, SPEC, roles, {"x": 2}),
        layer_key("p" * 64, SPEC, roles, {"x": "1"}),
        layer_key("p" * 64, SPEC, roles, {"x": True}),
        layer_key("p" * 64, SPEC, roles, {"x": 1, "y": UNDEFINED_MARKER}),
    }
    assert base not in others and len(others) == 10


def test_role_order_matters():
    """Roles apply in order, so swapping two roles changes the key."""
    a, b = ("a", "0" * 64), ("b", "1" * 64)
    assert layer_key(None, SPEC, [a, b], {}) != layer_key(None, SPEC, [b, a], {})


# --------------------------------------------------------------------------- the variables cache

def cached_keys(roles_dir: Path, cache: Path, variables=None) -> dict[str, str]:
    index = RoleIndex([str(roles_dir)], [])
    graph = LayerGraph.from_spec(LAYERS, role_exists=index.exists)
    chosen = VARS if variables is None else variables
    return {name: k.key for name, k in compute_keys(graph, index, lambda name: chosen, variables_cache=str(cache)).items()}


def test_the_variables_cache_gives_the_keys_of_a_parse_and_is_read_instead_of_parsing(roles, tmp_path):
    cache = tmp_path / "cache"
    parsed = key_map(roles)
    assert cached_keys(roles, cache) == parsed  # the first run writes the entries
    entries = sorted(cache.iterdir())
    assert len(entries) == 5  # one per role: common, web, webdep, extra, helper
    assert cached_keys(roles, cache) == parsed  # the second reads them
    # An entry is what the run trusts: one naming another variable moves the key of its role's layers.
    web_digest = role_digest(str(roles / "web"))
    (web_entry,) = [entry for entry in entries if entry.name.startswith(web_digest)]
    web_entry.write_text('["web_port", "web_enabled", "unrelated"]', encoding="utf-8")
    assert changed(parsed, cached_keys(roles, cache)) == {"compute", "gpu"}


def test_an_edited_role_is_parsed_again_and_a_bad_entry_is_rewritten(roles, tmp_path):
    cache = tmp_path / "cache"
    before = cached_keys(roles, cache)
    write(roles / "web/templates/web.conf.j2", "port={{ web_port }}\nsite={{ site_name }}\n")
    after = cached_keys(roles, cache)
    assert changed(before, after) == {"compute", "gpu"}
    assert after == key_map(roles)
    assert len(list(cache.iterdir())) == 6  # the edited role's new digest
    for entry in cache.iterdir():
        entry.write_text("not json", encoding="utf-8")
    assert cached_keys(roles, cache) == after
    current = {role_digest(str(roles / role)) for role in ("common", "web", "webdep", "extra", "helper")}
    rewritten = {entry.name.split("-")[0] for entry in cache.iterdir() if entry.read_text(encoding="utf-8").startswith("[")}
    assert rewritten == current  # the entry of the web role before the edit is read by no one, and left


def test_a_role_with_a_symbolic_link_is_never_cached(roles, tmp_path):
    """The digest covers a link's target string, not the file it names: what that file reads is parsed each run."""
    cache = tmp_path / "cache"
    outside = write(tmp_path / "elsewhere" / "web.conf.j2", "port={{ web_port }}\n")
    (roles / "web/templates/web.conf.j2").unlink()
    (roles / "web/templates/web.conf.j2").symlink_to(outside)
    before = cached_keys(roles, cache)
    assert not [entry for entry in cache.iterdir() if entry.name.startswith(role_digest(str(roles / "web")))]
    outside.write_text("port={{ web_port }}\nsite={{ site_name }}\n", encoding="utf-8")
    assert changed(before, cached_keys(roles, cache)) == {"compute", "gpu"}


def test_an_unwritable_cache_only_costs_the_parse(roles, tmp_path):
    blocker = write(tmp_path / "cache", "a file where the directory should be\n")
    assert cached_keys(roles, blocker) == key_map(roles)


# --------------------------------------------------------------------------- architectures


def with_arch(arch) -> dict:
    """LAYERS with the root layer's ``arch`` set to ``arch``."""
    return {**LAYERS, "base": {**LAYERS["base"], "arch": arch}}


def test_keys_differ_by_architecture_and_by_nothing_else(roles):
    """One tree built for amd64 and arm64: each layer's two keys differ, and each is the key the same tree gets
    for that one architecture, so neither the expanded name (compute-arm64) nor the other architecture enters it."""
    both = key_map(roles, with_arch(["amd64", "arm64"]))
    amd64, arm64 = key_map(roles, with_arch("amd64")), key_map(roles, with_arch("arm64"))
    assert set(both) == {*LAYERS, *(f"{name}-arm64" for name in LAYERS)}
    for name in LAYERS:
        assert both[name] == amd64[name]
        assert both[f"{name}-arm64"] == arm64[name]
        assert amd64[name] != arm64[name]


def test_a_root_without_arch_is_keyed_as_the_build_hosts(roles):
    index = RoleIndex([str(roles)], [])
    for host in ("amd64", "arm64"):
        graph = LayerGraph.from_spec(LAYERS, role_exists=index.exists, host_arch=host)
        keys = compute_keys(graph, index, lambda name: VARS)
        assert {name: k.key for name, k in keys.items()} == key_map(roles, with_arch(host))
