"""Variables scoped to a layer's inventory host reach the same content key in every stage.

A layer with ``groups: [gpu]`` applies roles that read one variable from ``group_vars/gpu`` and
one from ``host_vars/accel`` (tests/integration/inventory_scoped). Build, verify, pack and plan
each run on their own, as a user runs them, from a site playbook that imports the collection's
playbook by its FQCN. Each must compute the key the build committed: verify boots the layer, pack
packs it, plan rebuilds nothing. Changing either scoped variable makes the layer stale for all
of them.

The layer's parent is the default inventory's ``base``, tagged into the test's own prefix from
the default build (images are named by content key), so only the small ``accel`` layer is built.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, layer_images, read_from_image, run_site
from nspawn_support import new_runtime_dir, remove_runtime_dir, wait_clean

SCOPED_INVENTORY = REPO / "tests" / "integration" / "inventory_scoped"
DEFAULT_INVENTORY = REPO / "inventory"
DEFAULT_PREFIX = "localhost/hpc-stateless"
GROUP_FILE = "inventory/group_vars/gpu/units.yml"
HOST_FILE = "inventory/host_vars/accel/marker.yml"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def prefix():
    prefix = f"localhost/hpc-stateless-scoped-{uuid.uuid4().hex[:6]}"
    yield prefix
    refs = list(layer_images(prefix))
    if refs:
        buildah("rmi", "--force", *refs, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory, prefix):
    """A site repository (git) with the scoped inventory, the default base layer and one
    playbook per stage that imports the collection's playbook by its FQCN."""
    root = tmp_path_factory.mktemp("scoped-site")
    shutil.copytree(SCOPED_INVENTORY, root / "inventory")
    layers_file = root / "inventory/group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    default = yaml.safe_load((DEFAULT_INVENTORY / "group_vars/all/layers.yml").read_text())
    spec["hpc_stateless_layers"]["base"] = default["hpc_stateless_layers"]["base"]
    layers_file.write_text(yaml.safe_dump(spec))
    for stage in ("build", "verify", "pack", "plan"):
        (root / f"{stage}.yml").write_text(
            f"- name: Run the {stage} stage\n  ansible.builtin.import_playbook: hpc.stateless.{stage}\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "scoped layer variables")
    # The default build's base (and its bootstrapped root, which verify boots for its baseline).
    for ref in layer_images(DEFAULT_PREFIX):
        name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
        if name in ("base", "bootstrap/base") and len(tag) == 64:
            buildah("tag", ref, f"{prefix}/{name}:{tag}")
    return root


def stage(site: Path, prefix: str, name: str, **extra) -> subprocess.CompletedProcess:
    variables = {"hpc_stateless_image_prefix": prefix, **extra}
    return run_site("-e", json.dumps(variables), inventory=site / "inventory", playbook=str(site / f"{name}.yml"))


def accel_keys(prefix: str) -> list[str]:
    return sorted(ref.rsplit(":", 1)[1] for ref in layer_images(prefix)
                  if ref.startswith(f"{prefix}/accel:") and not ref.endswith(":latest"))


@pytest.fixture(scope="module")
def built(site, prefix):
    proc = stage(site, prefix, "build")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    # Only accel: base came from the default build under the same key.
    assert "1 to build: accel" in proc.stdout.replace("\n", " "), proc.stdout[-5000:]
    keys = accel_keys(prefix)
    assert len(keys) == 1, keys
    return keys[0]


@pytest.fixture()
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


def test_the_build_applies_group_and_host_variables(built, prefix):
    image = f"{prefix}/accel:{built}"
    assert read_from_image(image, "/etc/hpc-nspawn-marker") == "from group_vars/gpu\n"
    assert read_from_image(image, "/etc/hpc-stateless-sibling") == "from host_vars/accel\n"


def test_verify_finds_the_built_layer_and_boots_it(built, site, prefix, runtime_dir):
    proc = stage(site, prefix, "verify", ansible_nspawn_runtime_dir=runtime_dir)
    assert "has no image for its current content key" not in proc.stdout, proc.stdout[-5000:]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "accel: systemd is " in proc.stdout
    assert "hpc-nspawn-daemon.service active (running" in proc.stdout
    assert wait_clean(runtime_dir) == {}


def test_pack_packs_the_built_layer(built, site, prefix, tmp_path):
    proc = stage(site, prefix, "pack", hpc_stateless_pack_output_dir=str(tmp_path),
                 hpc_stateless_pack_version="scoped-1")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "accel/scoped-1/manifest.json").read_text())
    assert manifest["layer"] == "accel"
    assert manifest["layer_keys"]["accel"] == built
    assert manifest["source"]["image"] == f"{prefix}/accel:{built}"


def test_plan_rebuilds_nothing_until_a_scoped_variable_changes(built, site, prefix, tmp_path, runtime_dir):
    out = tmp_path / "plan"
    proc = stage(site, prefix, "plan", hpc_stateless_plan_since="HEAD", hpc_stateless_plan_output_dir=str(out))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert json.loads((out / "plan.json").read_text())["rebuild"] == []

    (site / GROUP_FILE).write_text("---\nnspawn_units_marker: changed in group_vars/gpu\n")
    (site / HOST_FILE).write_text("---\nsibling_marker_text: changed in host_vars/accel\n")
    try:
        proc = stage(site, prefix, "plan", hpc_stateless_plan_since="HEAD", hpc_stateless_plan_output_dir=str(out))
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        plan = json.loads((out / "plan.json").read_text())
        assert plan["rebuild"] == ["accel"]
        reasons = " ".join(plan["layers"]["accel"]["reasons"])
        assert f"variable nspawn_units_marker changed ({GROUP_FILE})" in reasons, reasons
        assert f"variable sibling_marker_text changed ({HOST_FILE})" in reasons, reasons
        # The stages that plan from storage see the layer's key move too: verify refuses it.
        proc = stage(site, prefix, "verify", ansible_nspawn_runtime_dir=runtime_dir)
        assert proc.returncode != 0
        assert "layer accel has no image for its current content key" in proc.stdout, proc.stdout[-5000:]
    finally:
        git(site, "checkout", "--", "inventory")


def test_a_bad_dag_fails_with_its_message_alone(site, prefix, tmp_path):
    """The plan answers bad input with a failed result: no "exception occurred" line above it."""
    shutil.copytree(site / "inventory", tmp_path / "inventory")
    layers_file = tmp_path / "inventory/group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    spec["hpc_stateless_layers"]["accel"]["parent"] = "bsae"
    layers_file.write_text(yaml.safe_dump(spec))
    proc = run_site("-e", f"hpc_stateless_image_prefix={prefix}", inventory=tmp_path / "inventory",
                    playbook=str(site / "verify.yml"))
    assert proc.returncode != 0
    assert "hpc_stateless_layers.accel.parent: unknown parent layer 'bsae'" in proc.stdout, proc.stdout[-3000:]
    assert "exception occurred" not in proc.stdout + proc.stderr
