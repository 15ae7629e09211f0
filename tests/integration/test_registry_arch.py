"""One layer for two architectures: built side by side, pushed under ONE tag as a manifest list.

A layer tree of one root, ``twoarch``, with ``arch: [amd64, arm64]`` and no roles (the cheapest layer that is built for
real: a minbase root, the arm64 one through qemu-user's binfmt handler, which scripts/setup.sh installs), is built
with build.yml: layers ``twoarch`` (amd64) and ``twoarch-arm64``. The name is this file's own: the session's tests
share one image prefix, and other files build a layer ``base`` under it. hpc.stateless.layer_registry pushes both to
Debian's docker-registry on 127.0.0.1 as one manifest list; the list is read back (the registry's HTTP API) and each
architecture pulled from the one tag, its labels and image config saying its architecture.
"""

from __future__ import annotations

import json
import stat
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from conftest import BUILDAH_ENV, REPO, buildah, image_labels, run_site
from rootless_support import tree_entries

from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift
# The fixture registry (docker-registry on 127.0.0.1), used by pytest by name.
from test_plan_ci import registry  # noqa: F401  # pylint: disable=unused-import

LAYER = "twoarch"
ROOT = {
    "arch": ["amd64", "arm64"],
    "bootstrap": {"distro": "debian", "release": "bookworm", "variant": "minbase",
                  "mirror": "http://deb.debian.org/debian"},
    "roles": [],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory, image_prefix):
    """The site (inventory only) and the plan of its build."""
    site = tmp_path_factory.mktemp("arch") / "inventory"
    (site / "group_vars" / "all").mkdir(parents=True)
    (site / "hosts.yml").write_text("---\nall:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                                    "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n")
    (site / "group_vars" / "all" / "layers.yml").write_text(yaml.safe_dump(
        {"hpc_stateless_image_prefix": image_prefix, "hpc_stateless_layers": {LAYER: ROOT},
         "hpc_stateless_images": {}}, sort_keys=False))
    proc = run_site(inventory=site, playbook="playbooks/build.yml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return site


def manifest_list(registry: str, repository: str, tag: str) -> dict:
    """The manifest the registry serves for ``repository:tag``, read over its HTTP API (OCI index or Docker list)."""
    host, _sep, path = registry.partition("/")
    request = urllib.request.Request(
        f"http://{host}/v2/{path}/{repository}/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.index.v1+json, "
                           "application/vnd.docker.distribution.manifest.list.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - 127.0.0.1
        assert "list" in response.headers["Content-Type"] or "index" in response.headers["Content-Type"]
        return json.load(response)


def push_list(registry: str, key: str, variants: dict[str, str]) -> subprocess.CompletedProcess:
    """hpc.stateless.layer_registry: ``variants`` of the layer as one manifest list, tag site-1."""
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={REPO / '.venv' / 'bin' / 'python'}",
         "-m", "hpc.stateless.layer_registry", "-a", json.dumps({
             "name": LAYER, "key": key, "variants": variants, "tag": "site-1",
             "registry": registry, "tls_verify": False, "state": "pushed"})],
        cwd=REPO, env={**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, check=False)


def test_two_architectures_of_one_layer_build_side_by_side_and_share_one_tag(built, image_prefix, registry):  # noqa: F811
    images = {arch: [ref for ref in buildah("images", "--format", "{{.Name}}:{{.Tag}}").split()
                     if ref.startswith(f"{image_prefix}/{name}:") and not ref.endswith(":latest")]
              for arch, name in (("amd64", LAYER), ("arm64", f"{LAYER}-arm64"))}
    assert all(len(refs) == 1 for refs in images.values()), images
    refs = {arch: found[0] for arch, found in images.items()}
    keys = {arch: ref.rsplit(":", 1)[1] for arch, ref in refs.items()}
    assert keys["amd64"] != keys["arm64"]
    for arch, ref in refs.items():
        assert image_labels(ref)["hpc.stateless.arch"] == arch
        config = json.loads(buildah("inspect", "--type", "image", ref))["OCIv1"]
        assert config["architecture"] == arch

    swapped = push_list(registry, keys["amd64"], {"amd64": refs["arm64"], "arm64": refs["amd64"]})
    assert swapped.returncode != 0
    assert f"layer image {refs['arm64']} is arm64, not amd64" in swapped.stdout
    push = push_list(registry, keys["amd64"], refs)
    assert push.returncode == 0, push.stdout + push.stderr
    remote = f"{registry}/{LAYER}:site-1"

    listing = manifest_list(registry, LAYER, "site-1")
    platforms = sorted((m["platform"]["architecture"], m["platform"].get("variant", ""))
                       for m in listing["manifests"])
    assert platforms == [("amd64", ""), ("arm64", "v8")]

    for arch in ("amd64", "arm64"):
        image_id = buildah("pull", "--quiet", "--tls-verify=false", "--arch", arch, f"docker://{remote}").split()[-1]
        try:
            assert image_labels(image_id)["hpc.stateless.arch"] == arch
            assert image_labels(image_id)["hpc.stateless.key"] == keys[arch]
        finally:
            buildah("rmi", remote, check=False)


def test_each_architecture_is_bootstrapped_in_a_user_namespace(built, image_prefix):
    """The build passes hpc_stateless_build_userns (true by default) to the bootstrap: the record says mapped, and
    the committed root has the ids, setuid bits and device nodes of a bootstrap by host root (arm64's scripts ran
    under qemu-user in the namespace)."""
    uids, gids = idshift.root_ranges()
    for name in (LAYER, f"{LAYER}-arm64"):
        container = f"hpc-stateless-read-{name}"
        buildah("from", "--pull=never", "--quiet", "--name", container, f"{image_prefix}/{name}:latest")
        try:
            root = Path(buildah("mount", container).strip())
            assert json.loads((root / "var/lib/hpc-stateless/rootfs.json").read_text())["mode"] == "mapped", name
            entries = tree_entries(root)
        finally:
            buildah("umount", container, check=False)
            buildah("rm", container, check=False)
        assert not [rel for rel, entry in entries.items() if entry[1] >= uids.start or entry[2] >= gids.start], name
        passwd, null = entries["usr/bin/passwd"], entries["dev/null"]
        assert (stat.S_IMODE(passwd[0]), passwd[1], passwd[2]) == (0o4755, 0, 0), name
        assert stat.S_ISCHR(null[0]) and null[5] == (1, 3) and stat.S_IMODE(null[0]) == 0o666, name
