"""The build seals every layer after its roles, a site's as much as ours (playbooks/tasks/build_layer.yml).

A site layer whose only role installs openssh-server (tests/roles/site_openssh: the package's script
makes the SSH host keys, and the role removes nothing), on top of the default base layer: the build
removes the keys after the role, and pack - whose secret check refuses SSH host keys - packs it. The
same layer opted out of the seal without a reason stops before anything is built, naming the layer;
with a reason it keeps its keys, carries the reason as an image label and in the build output, and
pack refuses it, naming the key files.

The default base layer is tagged into the test's own prefix from the default build (images are named
by content key), so only the small site layer is built.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, default_base_prefix, image_labels, layer_images, our_containers, run_site
from pack_support import mounted_image

DEFAULT_INVENTORY = REPO / "inventory"
LAYER = "sshsite"
REASON = "site test: login nodes share one host key (ticket 42)"
UNVERIFIED_OK = {"hpc_stateless_unverified_ok": "seal test: a site layer verify never booted"}


@pytest.fixture(scope="module", name="prefix")
def fixture_prefix():
    with default_base_prefix("seal") as prefix:
        yield prefix


def write_inventory(root: Path, layer_vars: dict | None = None) -> Path:
    """The default inventory's base layer and the site layer ``sshsite`` on it, as a site writes them."""
    default = yaml.safe_load((DEFAULT_INVENTORY / "group_vars/all/layers.yml").read_text(encoding="utf-8"))
    site = {"parent": "base", "roles": ["site_openssh"], **({"vars": layer_vars} if layer_vars else {})}
    spec = {
        "hpc_stateless_layers": {"base": default["hpc_stateless_layers"]["base"], LAYER: site},
        "hpc_stateless_images": {LAYER: {"layer": LAYER, "formats": ["cpio.zst"]}},
    }
    inventory = root / "inventory"
    (inventory / "group_vars/all").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text((DEFAULT_INVENTORY / "hosts.yml").read_text(encoding="utf-8"))
    (inventory / "group_vars/all/layers.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return inventory


def build(inventory: Path, prefix: str) -> subprocess.CompletedProcess:
    return run_site("-e", f"hpc_stateless_image_prefix={prefix}", inventory=inventory, playbook="playbooks/build.yml")


def pack(inventory: Path, prefix: str, output: Path) -> subprocess.CompletedProcess:
    variables = {"hpc_stateless_image_prefix": prefix, "hpc_stateless_pack_output_dir": str(output),
                 "hpc_stateless_pack_version": "seal-1", **UNVERIFIED_OK}
    return run_site("-e", json.dumps(variables), inventory=inventory, playbook="playbooks/pack.yml")


def site_images(prefix: str) -> list[str]:
    return sorted(ref for ref in layer_images(prefix) if ref.startswith(f"{prefix}/{LAYER}:") and not ref.endswith(":latest"))


def host_keys(image: str) -> list[str]:
    with mounted_image(image) as root:
        return sorted(path.name for path in (root / "etc/ssh").glob("ssh_host_*"))


def cpio_names(archive: Path) -> list[str]:
    decompress = subprocess.Popen(["zstd", "-dc", str(archive)], stdout=subprocess.PIPE)
    listing = subprocess.run(["cpio", "-t", "--quiet"], stdin=decompress.stdout, capture_output=True, check=True)
    assert decompress.wait() == 0
    return listing.stdout.decode().splitlines()


@pytest.fixture(scope="module", name="sealed")
def fixture_sealed(prefix, tmp_path_factory):
    """The site layer built with the default seal: ``(inventory, image, build output)``."""
    inventory = write_inventory(tmp_path_factory.mktemp("seal-site"))
    proc = build(inventory, prefix)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert f"1 to build: {LAYER}" in proc.stdout.replace("\n", " "), \
        "the default base layer is not in local storage under its current key: run `make build` first\n" + proc.stdout[-3000:]
    images = site_images(prefix)
    assert len(images) == 1, images
    return inventory, images[0], proc.stdout


def test_a_site_layer_that_installs_openssh_server_is_built_without_host_keys(sealed):
    _inventory, image, stdout = sealed
    assert "site_openssh : Check that the package made host keys" in stdout  # the role saw its keys made
    assert f"layer {LAYER} sealed (hpc.stateless.base tasks_from=seal)" in stdout
    assert host_keys(image) == []
    with mounted_image(image) as root:
        assert (root / "etc/machine-id").read_text() == ""
        assert (root / "usr/sbin/sshd").exists()
    assert "hpc.stateless.seal-skipped" not in image_labels(image)


def test_pack_packs_the_sealed_site_layer(sealed, prefix, tmp_path):
    inventory, _image, _stdout = sealed
    proc = pack(inventory, prefix, tmp_path)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "refusing to pack secrets" not in proc.stdout
    names = cpio_names(tmp_path / LAYER / "seal-1" / f"{LAYER}.cpio.zst")
    assert "usr/sbin/sshd" in names
    assert [name for name in names if name.startswith("etc/ssh/ssh_host_")] == []


def test_an_opt_out_without_a_reason_stops_the_build_naming_the_layer(sealed, prefix, tmp_path):
    inventory = write_inventory(tmp_path, {"hpc_stateless_seal": False})
    proc = build(inventory, prefix)
    assert proc.returncode != 0
    assert f"layer {LAYER}: hpc_stateless_seal is false without hpc_stateless_seal_skip_reason" in proc.stdout, \
        proc.stdout[-3000:]
    assert "site_openssh : " not in proc.stdout  # stopped before the layer's roles
    assert len(site_images(prefix)) == 1  # nothing committed
    assert our_containers(prefix) == []


def test_an_opt_out_with_a_reason_keeps_the_keys_records_it_and_pack_refuses(sealed, prefix, tmp_path):
    inventory = write_inventory(tmp_path, {"hpc_stateless_seal": False, "hpc_stateless_seal_skip_reason": REASON})
    proc = build(inventory, prefix)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert f"layer {LAYER} NOT sealed (hpc_stateless_seal: false): {REASON}" in proc.stdout
    # The opt-out is part of the content key: a layer of its own, next to the sealed one.
    unsealed = [ref for ref in site_images(prefix) if ref != sealed[1]]
    assert len(unsealed) == 1, site_images(prefix)
    assert image_labels(unsealed[0])["hpc.stateless.seal-skipped"] == REASON
    keys = host_keys(unsealed[0])
    assert "ssh_host_ed25519_key" in keys, keys

    refused = pack(inventory, prefix, tmp_path / "out")
    assert refused.returncode != 0
    assert "refusing to pack secrets" in refused.stdout, refused.stdout[-3000:]
    assert "/etc/ssh/ssh_host_ed25519_key (SSH host private key)" in refused.stdout
