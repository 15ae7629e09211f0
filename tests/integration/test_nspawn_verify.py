"""playbooks/verify.yml and the connection switch, with real builds and real boots.

- One ansible-playbook run builds a layer over containers.podman.buildah (site.yml) and
  verifies the same inventory host over hpc.stateless.nspawn (verify.yml): nobody edits
  the inventory in between.
- A layer whose role enables a failing unit fails verification, naming the unit, and passes
  once the unit is listed as allowed to fail.
- A packed tree is checked for /etc/image-release; a tree without it fails.
Each run boots one container per layer and must leave nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, layer_images, run_site
from nspawn_support import INVENTORY, TEST_PREFIX, build_test_layers, new_runtime_dir, remove_runtime_dir, wait_clean

VERIFY = "playbooks/verify.yml"


@pytest.fixture(scope="module")
def layers():
    return build_test_layers()


@pytest.fixture()
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


def verify(runtime_dir: str, extra: dict, inventory: Path = INVENTORY, playbook: str = VERIFY):
    # Every test boots (no record reuse); its verification records go to a directory of its own.
    records = tempfile.mkdtemp(prefix="hpc-verify-records-")
    variables = {"hpc_stateless_image_prefix": TEST_PREFIX, "ansible_nspawn_runtime_dir": runtime_dir,
                 "hpc_stateless_verify_force": True, "hpc_stateless_verify_record_dir": records, **extra}
    try:
        return run_site("-e", json.dumps(variables), inventory=inventory, playbook=playbook)
    finally:
        shutil.rmtree(records, ignore_errors=True)


@pytest.fixture()
def switched_inventory(tmp_path):
    """The test inventory plus a layer ``switched`` whose key is new on every run, so the
    run below really builds it over buildah before verifying it over nspawn."""
    shutil.copytree(INVENTORY, tmp_path / "inventory")
    layers_file = tmp_path / "inventory/group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    spec["hpc_stateless_layers"]["switched"] = {
        "parent": "base", "roles": ["nspawn_units"], "vars": {"nspawn_units_marker": uuid.uuid4().hex}}
    layers_file.write_text(yaml.safe_dump(spec))
    (tmp_path / "build_and_verify.yml").write_text(
        f"- name: Build\n  ansible.builtin.import_playbook: {REPO / 'site.yml'}\n"
        f"- name: Verify\n  ansible.builtin.import_playbook: {REPO / VERIFY}\n")
    yield tmp_path
    refs = [ref for ref in layer_images(TEST_PREFIX) if ref.startswith(f"{TEST_PREFIX}/switched:")]
    if refs:
        buildah("rmi", "--force", *refs, check=False)


def test_the_same_host_is_built_over_buildah_and_verified_over_nspawn(layers, switched_inventory, runtime_dir):
    proc = verify(runtime_dir, {"hpc_stateless_verify_layers": ["switched"]},
                  inventory=switched_inventory / "inventory", playbook=str(switched_inventory / "build_and_verify.yml"))
    out = proc.stdout
    assert proc.returncode == 0, out[-6000:] + proc.stderr[-2000:]
    assert "1 to build: switched" in out.replace("\n", " ")
    assert f"layer switched committed as {TEST_PREFIX}/switched:" in out
    # the verify play reached the freshly built image, booted, with the role's units active
    assert "ok: [switched] => {\n    \"changed\": false,\n    \"msg\": \"switched: systemd is running\"" in out
    assert ("hpc-nspawn-daemon.service active (running, result success); "
            "hpc-nspawn-once.service inactive (dead, result success)") in out
    assert "switched                   : ok=" in out and "failed=0" in out.split("switched                   :")[-1]
    assert wait_clean(runtime_dir) == {}


def test_a_failing_unit_fails_verification_with_its_name_and_log(layers, runtime_dir):
    proc = verify(runtime_dir, {"hpc_stateless_verify_layers": ["units_broken"]})
    assert proc.returncode != 0
    assert "units_broken: systemd is 'degraded'; failed units not allowed: ['hpc-nspawn-broken.service']" in proc.stdout
    assert "Failed to start hpc-nspawn-broken.service" in proc.stdout
    assert wait_clean(runtime_dir) == {}


def test_an_allowed_failed_unit_passes(layers, runtime_dir):
    proc = verify(runtime_dir, {"hpc_stateless_verify_layers": ["units_broken"],
                                "hpc_stateless_verify_allowed_failed_units": ["hpc-nspawn-broken.service"]})
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "units_broken: systemd is degraded" in proc.stdout
    assert "hpc-nspawn-daemon.service active (running, result success)" in proc.stdout
    assert wait_clean(runtime_dir) == {}


def test_unbuilt_layers_are_refused(layers, runtime_dir, tmp_path):
    shutil.copytree(INVENTORY, tmp_path / "inventory")
    layers_file = tmp_path / "inventory/group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    spec["hpc_stateless_layers"]["units"]["vars"] = {"nspawn_units_marker": "never built"}
    layers_file.write_text(yaml.safe_dump(spec))
    proc = verify(runtime_dir, {}, inventory=tmp_path / "inventory")
    assert proc.returncode != 0
    assert "layer units has no image for its current content key" in proc.stdout
    assert "run site.yml first, then verify again" in proc.stdout


@pytest.fixture()
def packed_tree(layers):
    """A directory tree of the ``units`` layer, as pack leaves it (the mount of a working container)."""
    name = f"hpc-nspawn-test-packed-{uuid.uuid4().hex[:6]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, layers["units"])
    try:
        yield Path(buildah("mount", name).strip())
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def tree_listing(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for top in ("etc", "var") for d, _s, files in os.walk(root / top)
            for f in files}


def test_a_packed_tree_needs_image_release(packed_tree, runtime_dir):
    release = packed_tree / "etc/image-release"
    release.write_text("IMAGE=units\nVERSION=20260101T000000Z\nLAYER=units\nLAYER_KEY=abc\n"
                       "BUILD_TIME=2026-01-01T00:00:00Z\n")
    before = tree_listing(packed_tree)
    trees = {"hpc_stateless_verify_layers": [], "hpc_stateless_verify_trees": {"units": str(packed_tree)}}
    # A directory tree cannot be mapped here: it boots as host root only when asked for by name.
    proc = verify(runtime_dir, trees)
    assert proc.returncode != 0
    assert "hpc_stateless_verify_trees (units) boots directory trees, which cannot be booted in a user namespace" \
        in proc.stdout, proc.stdout[-3000:]
    trees["hpc_stateless_verify_userns"] = False
    proc = verify(runtime_dir, trees)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "/etc/image-release has IMAGE, VERSION, LAYER, LAYER_KEY, BUILD_TIME" in proc.stdout
    assert tree_listing(packed_tree) == before, "booting wrote into the tree (it must run on an overlay)"
    assert wait_clean(runtime_dir) == {}

    release.write_text("IMAGE=units\nVERSION=20260101T000000Z\n")
    proc = verify(runtime_dir, trees)
    assert proc.returncode != 0
    assert "/etc/image-release lacks ['LAYER', 'LAYER_KEY', 'BUILD_TIME']" in proc.stdout

    release.unlink()
    proc = verify(runtime_dir, trees)
    assert proc.returncode != 0
    assert "there is no /etc/image-release" in proc.stdout
    assert wait_clean(runtime_dir) == {}


def test_a_tree_named_after_nothing_is_refused(runtime_dir, tmp_path):
    proc = verify(runtime_dir, {"hpc_stateless_verify_layers": [], "hpc_stateless_verify_trees": {"nothing": str(tmp_path)}})
    assert proc.returncode != 0
    assert "hpc_stateless_verify_trees: 'nothing' is neither an image of hpc_stateless_images" in proc.stdout
