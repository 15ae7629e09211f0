"""Bad layer definitions fail site.yml before anything is built, naming the key at fault."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import TEST_INVENTORY, our_containers, our_mounts, run_site

BASE = {
    "bootstrap": {"distro": "debian", "release": "bookworm", "variant": "minbase"},
    "roles": [],
}

CASES = {
    "unknown parent": (
        {"base": BASE, "compute": {"parent": "bsae"}},
        ["hpc_stateless_layers.compute.parent", "bsae"],
    ),
    "cycle": (
        {"base": BASE, "a": {"parent": "c"}, "b": {"parent": "a"}, "c": {"parent": "b"}},
        ["cycle", "a", "b", "c"],
    ),
    "parent and bootstrap": (
        {"base": {**BASE, "parent": "base"}},
        ["hpc_stateless_layers.base", "parent", "bootstrap"],
    ),
    "missing role": (
        {"base": BASE, "compute": {"parent": "base", "roles": ["no_such_role"]}},
        ["hpc_stateless_layers.compute.roles[0]", "no_such_role"],
    ),
    "unknown distro": (
        {"base": {**BASE, "bootstrap": {"distro": "slackware", "release": "15"}}},
        ["hpc_stateless_layers.base.bootstrap.distro", "slackware"],
    ),
    "typo in a key": (
        {"base": BASE, "compute": {"parnet": "base"}},
        ["hpc_stateless_layers.compute", "parnet"],
    ),
}


@pytest.mark.fault
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_layer_definition_is_named(case, tmp_path):
    layers, expected = CASES[case]
    inventory = tmp_path / "inventory"
    shutil.copytree(TEST_INVENTORY, inventory)
    (inventory / "group_vars" / "all" / "layers.yml").write_text(
        yaml.safe_dump({"hpc_stateless_layers": layers}))
    proc = run_site("-e", "hpc_stateless_image_prefix=localhost/hpc-stateless-bad-input", inventory=inventory)
    assert proc.returncode != 0
    first_failure = proc.stdout[proc.stdout.index("FAILED!"):]
    for fragment in expected:
        assert fragment in first_failure, f"{fragment!r} not in {first_failure[:600]}"
    assert our_containers("localhost/hpc-stateless-bad-input") == []
    assert our_mounts() == []
