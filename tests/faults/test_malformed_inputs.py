"""Malformed inventories: each run fails with an error naming the key at fault, and what was built
or served before is untouched (same image names and IDs, same boot tree, nothing left behind)."""

from __future__ import annotations

import copy

import pytest

from bootlink_fixtures import tree_snapshot
from faults_site import FAULTS_LAYERS, layer_images, our_containers, our_mounts, run_site
from faults_support import copy_version, deploy, deploy_site, failure_of, GOOD_MAC, served


def layers_with(**changes) -> dict:
    """FAULTS_LAYERS with ``{layer: {key: value}}`` changes (value None drops the key)."""
    layers = copy.deepcopy(FAULTS_LAYERS)
    for layer, fields in changes.items():
        spec = layers.setdefault(layer, {})
        for key, value in fields.items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
    return layers


CASES = {
    "DAG cycle": (
        layers_with(faulty={"parent": "loop_b"}, loop_a={"parent": "faulty", "roles": []},
                    loop_b={"parent": "loop_a", "roles": []}),
        ["hpc_stateless_layers: cycle between layers", "faulty", "loop_a", "loop_b"],
    ),
    "unknown parent": (
        layers_with(faulty={"parent": "bsae"}),
        ["hpc_stateless_layers.faulty.parent", "'bsae'"],
    ),
    "unknown distro": (
        layers_with(base={"bootstrap": {**FAULTS_LAYERS["base"]["bootstrap"], "distro": "slackware"}}),
        ["hpc_stateless_layers.base.bootstrap.distro", "slackware"],
    ),
    "roles of the wrong type": (
        layers_with(faulty={"roles": "faults_layer"}),
        ["hpc_stateless_layers.faulty.roles", "expected a list, got string"],
    ),
    "layer vars of the wrong type": (
        layers_with(faulty={"vars": ["faults_layer_run=second"]}),
        ["hpc_stateless_layers.faulty.vars", "expected a mapping, got list"],
    ),
}


def assert_nothing_changed(site, images_before: dict[str, str]) -> None:
    assert layer_images(site.prefix) == images_before, "images were built, removed or retagged"
    assert our_containers(site.prefix) == [], "working containers left behind"
    assert our_mounts() == [], "mounts left behind"


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_layer_dag_is_named(case, site, tmp_path):
    layers, expected = CASES[case]
    images_before = layer_images(site.prefix)
    proc = run_site(*site.extra, inventory=site.inventory_with(tmp_path / "inventory", layers))
    assert proc.returncode != 0
    failure = failure_of(proc.stdout)
    for fragment in expected:
        assert fragment in failure, f"{fragment!r} not in {failure[:1500]}"
    assert "Plan the layer build" in proc.stdout and "Build stale layers" not in proc.stdout
    assert_nothing_changed(site, images_before)


def test_role_variable_of_the_wrong_type_is_named(site, tmp_path):
    """Only the role's argument validation can tell: the layer is planned and started, then refused."""
    layers = layers_with(typed={"parent": "base", "roles": ["hpc.stateless.base"],
                                "vars": {"base_sshd_max_auth_tries": "many"}})
    images_before = layer_images(site.prefix)
    proc = run_site(*site.extra, inventory=site.inventory_with(tmp_path / "inventory", layers))
    assert proc.returncode != 0
    failure = failure_of(proc.stdout)
    assert "layer typed failed at task" in failure and "base_sshd_max_auth_tries" in failure, failure[:3000]
    assert "Its working container was removed" in failure
    assert_nothing_changed(site, images_before)


def test_bad_mac_is_refused_before_anything_is_published(small_packs, tmp_path):
    site = deploy_site(tmp_path)
    copy_version(small_packs, "v1", site["out"])
    copy_version(small_packs, "v2", site["out"])
    assert deploy(site, "v1").returncode == 0
    before = tree_snapshot(site["root"])

    bad = deploy_site(tmp_path / "bad", boot_root=site["root"],
                      nodes={"n1": {"hpc_stateless_boot_mac": GOOD_MAC},
                             "n2": {"hpc_stateless_boot_mac": "52:54:00:zz:00:02"}})
    copy_version(small_packs, "v2", bad["out"])
    proc = deploy(bad, "v2")
    assert proc.returncode != 0
    assert "nodes[1] (n2).mac: '52:54:00:zz:00:02' is not a MAC address" in failure_of(proc.stdout)
    assert tree_snapshot(site["root"]) == before and served(site["root"]) == "v1"
