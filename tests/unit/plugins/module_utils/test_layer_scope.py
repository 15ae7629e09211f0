"""Inventory scopes read from text of one revision, as Ansible loads them."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._layers.scope import (
    ChangePlanError,
    files_by_scope,
    inventory_source_scopes,
    is_yaml_inventory,
    load_vars_file,
)


def test_files_by_scope_follows_ansible_load_order():
    files = [
        "inv/group_vars/all/z.yml", "inv/group_vars/all/a.yml", "inv/group_vars/all.yaml",
        "inv/group_vars/all.yml", "inv/group_vars/all", "inv/group_vars/gpu.json",
        "inv/group_vars/all/notes.txt", "inv/group_vars/.hidden.yml", "inv/group_vars/all/.swp.yml",
    ]
    assert files_by_scope(files, "inv/group_vars") == {
        "all": ["inv/group_vars/all", "inv/group_vars/all.yml", "inv/group_vars/all.yaml",
                "inv/group_vars/all/a.yml", "inv/group_vars/all/z.yml"],
        "gpu": ["inv/group_vars/gpu.json"],
    }


def test_load_vars_file():
    assert load_vars_file("a: 1\nb: [x]\n", "g/all.yml", "HEAD") == {"a": 1, "b": ["x"]}
    assert load_vars_file("# only a comment\n", "g/all.yml", "HEAD") == {}
    with pytest.raises(ChangePlanError, match=r"^g/all.yml at HEAD: expected a mapping of variable names"):
        load_vars_file("- a\n", "g/all.yml", "HEAD")
    with pytest.raises(ChangePlanError, match=r"^g/all.yml at the work tree: cannot parse YAML"):
        load_vars_file("a: [1\n", "g/all.yml", "the work tree")


def test_inventory_source_scopes_nested_groups():
    text = """\
all:
  vars: {site: a}
  children:
    compute:
      vars: {mtu: 9000}
      hosts:
        node1: {rack: 3}
        node2:
      children:
        gpu:
          hosts:
            node2: {gpus: 4}
"""
    scopes, members = inventory_source_scopes(text, "inv/hosts.yml", "HEAD")
    assert scopes[("group", "all")] == {"site": "a"}
    assert scopes[("group", "compute")] == {"mtu": 9000}
    assert scopes[("host", "node1")] == {"rack": 3}
    assert scopes[("host", "node2")] == {"gpus": 4}
    assert members == {"node1": {"all", "compute"}, "node2": {"all", "compute", "gpu"}}
    assert inventory_source_scopes("", "inv/hosts.yml", "HEAD") == ({}, {})


def test_inventory_source_scopes_names_the_bad_group():
    with pytest.raises(ChangePlanError, match=r"inv/hosts.yml at HEAD: group 'compute' is not a mapping"):
        inventory_source_scopes("all:\n  children:\n    compute: [node1]\n", "inv/hosts.yml", "HEAD")
    with pytest.raises(ChangePlanError, match="expected a YAML inventory"):
        inventory_source_scopes("- node1\n", "inv/hosts.yml", "HEAD")


def test_is_yaml_inventory():
    assert is_yaml_inventory("inventory/hosts.yml") and is_yaml_inventory("inventory/hosts.json")
    assert not is_yaml_inventory("inventory/hosts.ini") and not is_yaml_inventory("inventory/hosts")
