"""site.yml end to end with real buildah and debootstrap.

The tests share one build and run in file order: full build, no-op rerun, a change to a
variable one role reads, a change to a variable no role reads, a failing role.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import (
    BUILDAH_ENV,
    REPO,
    buildah,
    TEST_INVENTORY,
    image_labels,
    layer_images,
    our_containers,
    our_mounts,
    read_from_image,
    run_site,
)

LAYERS = ["base", "probe", "probe_child", "sibling"]


def by_layer(prefix: str) -> dict[str, dict[str, str]]:
    """``{layer: {key: image id}}`` for the test prefix (the ``latest`` tags left out)."""
    result: dict[str, dict[str, str]] = {}
    for ref, image_id in layer_images(prefix).items():
        layer, tag = ref[len(prefix) + 1:].rsplit(":", 1)
        if tag != "latest" and not layer.startswith("bootstrap/"):
            result.setdefault(layer, {})[tag] = image_id
    return result


def assert_clean(prefix: str) -> None:
    assert our_containers(prefix) == [], "working containers left behind"
    assert our_mounts() == [], "mounts left behind"


@pytest.fixture(scope="module")
def first_build(image_prefix):
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc


def test_full_build_commits_every_layer_with_labels(first_build, image_prefix):
    built = by_layer(image_prefix)
    assert sorted(built) == sorted(LAYERS)
    keys = {layer: next(iter(tags)) for layer, tags in built.items()}
    labels = image_labels(f"{image_prefix}/probe_child:{keys['probe_child']}")
    assert labels["hpc.stateless.layer"] == "probe_child"
    assert labels["hpc.stateless.key"] == keys["probe_child"]
    assert labels["hpc.stateless.parent"] == "probe"
    assert labels["hpc.stateless.parent-key"] == keys["probe"]
    assert labels["hpc.stateless.git-commit"], "git commit label is empty"
    # The bootstrapped root is cached on its own, so changing base's roles never bootstraps again.
    bootstrap = [ref for ref in layer_images(image_prefix) if ref.startswith(f"{image_prefix}/bootstrap/base:")]
    assert len(bootstrap) == 2, bootstrap  # keyed tag + latest
    assert image_labels(f"{image_prefix}/base:{keys['base']}")["hpc.stateless.layer"] == "base"
    assert "4 to build: base -> probe -> probe_child -> sibling" in first_build.stdout.replace("\n", " ")
    assert_clean(image_prefix)


def test_bootstrapped_root_keeps_no_downloaded_packages(first_build, image_prefix):
    """debootstrap leaves every .deb in the root's apt cache; every layer would carry ~50 MB of them."""
    ref = next(ref for ref in layer_images(image_prefix) if ref.startswith(f"{image_prefix}/bootstrap/base:"))
    container = buildah("from", "--pull=never", "--quiet", ref).strip()
    try:
        archives = Path(buildah("mount", container).strip()) / "var/cache/apt/archives"
        assert archives.is_dir(), "apt's archives directory belongs to the image"
        assert sorted(p.name for p in archives.glob("*.deb")) == []
    finally:
        buildah("umount", container, check=False)
        buildah("rm", container, check=False)


def test_roles_ran_inside_the_layer_with_its_own_facts(first_build, image_prefix):
    keys = {layer: next(iter(tags)) for layer, tags in by_layer(image_prefix).items()}
    probe = read_from_image(f"{image_prefix}/probe_child:{keys['probe_child']}", "/etc/hpc-stateless/probe.conf")
    assert "message=hello from the probe role" in probe
    # Facts come from the Debian 12 layer, whatever the build host runs.
    assert "distribution=Debian bookworm" in probe
    child = read_from_image(f"{image_prefix}/probe_child:{keys['probe_child']}", "/etc/hpc-stateless-sibling")
    assert child == "child of the probe layer\n"
    sibling = read_from_image(f"{image_prefix}/sibling:{keys['sibling']}", "/etc/hpc-stateless-sibling")
    assert sibling == "sibling layer\n"
    # The package the probe role installed is in the image, its download on the host cache.
    dpkg = read_from_image(f"{image_prefix}/probe:{keys['probe']}", "/var/lib/dpkg/status")
    assert "Package: file\n" in dpkg
    assert list(Path("/var/cache/hpc-stateless/apt").glob("file_*.deb"))


def test_a_layer_that_ran_apt_keeps_none_of_apts_build_files(first_build, image_prefix):
    """The probe role installs a package: the build's own apt configuration and apt's package cache
    (_build/aptconf.py; stale after any install) are not in the image, what apt installed is. The parsed lists
    (srcpkgcache.bin) are the base layer's file, unchanged: the probe's apt started from it and wrote no copy."""
    keys = {layer: next(iter(tags)) for layer, tags in by_layer(image_prefix).items()}
    roots = {}
    containers = []
    try:
        for layer in ("base", "probe"):
            containers.append(buildah("from", "--pull=never", "--quiet", f"{image_prefix}/{layer}:{keys[layer]}").strip())
            roots[layer] = Path(buildah("mount", containers[-1]).strip())
        root = roots["probe"]
        assert (root / "etc/apt/apt.conf.d").is_dir()
        assert not (root / "etc/apt/apt.conf.d/00hpc-stateless-build").exists()
        assert sorted(p.name for p in (root / "var/cache/apt").glob("*.bin")) == ["srcpkgcache.bin"]
        lists = [(roots[layer] / "var/cache/apt/srcpkgcache.bin").stat() for layer in ("base", "probe")]
        assert lists[0].st_size > 1_000_000 and (lists[0].st_mtime_ns, lists[0].st_size) == \
            (lists[1].st_mtime_ns, lists[1].st_size)
        assert not list((root / "var/lib/apt/lists").glob("*_Translation-*"))
        assert "Package: file\n" in (root / "var/lib/dpkg/status").read_text(encoding="utf-8")
    finally:
        for container in containers:
            buildah("umount", container, check=False)
            buildah("rm", container, check=False)


def test_noop_rerun_builds_nothing(first_build, image_prefix):
    before = by_layer(image_prefix)
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "0 to build" in proc.stdout
    assert "hpc_stateless_stale" not in proc.stdout or "skipping: no hosts matched" in proc.stdout
    assert by_layer(image_prefix) == before
    assert_clean(image_prefix)


def test_changed_role_variable_rebuilds_that_layer_and_descendants_only(first_build, image_prefix):
    before = by_layer(image_prefix)
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}", "-e", '{"probe_message": "changed message"}')
    assert proc.returncode == 0, proc.stdout[-4000:]
    after = by_layer(image_prefix)
    new = {layer for layer in after if set(after[layer]) - set(before.get(layer, {}))}
    assert new == {"probe", "probe_child"}
    assert after["base"] == before["base"] and after["sibling"] == before["sibling"]
    new_child = (set(after["probe_child"]) - set(before["probe_child"])).pop()
    probe = read_from_image(f"{image_prefix}/probe_child:{new_child}", "/etc/hpc-stateless/probe.conf")
    assert "message=changed message" in probe
    assert_clean(image_prefix)


def test_unrelated_variable_changes_no_key(first_build, image_prefix):
    before = by_layer(image_prefix)
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}",
                    "-e", "unrelated_setting=something else entirely")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "0 to build" in proc.stdout
    assert by_layer(image_prefix) == before


def test_later_play_of_the_same_run_sees_the_keys_the_build_made(first_build, image_prefix, tmp_path):
    """A build leaves facts, include_vars results and registered variables (the probe role
    registers ``_probe_apt`` and reads it) on the layer hosts; pack and verify plan again in the
    same run and must reach the keys the build committed, or they refuse the new layer as stale."""
    playbook = tmp_path / "build_then_plan.yml"
    playbook.write_text(
        "- name: Build\n  ansible.builtin.import_playbook: hpc.stateless.build\n"
        "- name: Plan again\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: Plan\n      hpc.stateless.plan:\n      register: again\n"
        "    - name: Report\n      ansible.builtin.debug:\n        msg: \"stale after build: {{ again.stale }}\"\n")
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}", "-e", '{"probe_message": "same run"}',
                    playbook=str(playbook))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 to build: probe -> probe_child" in proc.stdout, proc.stdout[-4000:]
    assert "stale after build: []" in proc.stdout, proc.stdout[-4000:]
    assert_clean(image_prefix)


@pytest.mark.fault
def test_failing_role_leaves_no_container_mount_or_image(first_build, image_prefix, tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(TEST_INVENTORY, inventory)
    layers_file = inventory / "group_vars" / "all" / "layers.yml"
    data = yaml.safe_load(layers_file.read_text())
    data["hpc_stateless_layers"]["broken"] = {"parent": "base", "roles": ["always_fails"]}
    data["hpc_stateless_layers"]["below_broken"] = {"parent": "broken", "roles": ["sibling_marker"]}
    layers_file.write_text(yaml.safe_dump(data))
    before = by_layer(image_prefix)
    proc = run_site("-e", f"hpc_stateless_image_prefix={image_prefix}", inventory=inventory)
    assert proc.returncode != 0
    assert "layer broken failed at task 'Fail on purpose'" in proc.stdout.replace("\n", " ")
    after = by_layer(image_prefix)
    assert "broken" not in after and "below_broken" not in after
    assert after == before
    assert_clean(image_prefix)


def test_buildah_connection_returns_status_and_both_streams(first_build, image_prefix):
    """hpc.stateless.buildah passes results through files in the container: exit status, stdout and
    stderr must arrive intact, and nothing of the mechanism may stay in the layer."""
    keys = {layer: next(iter(tags)) for layer, tags in by_layer(image_prefix).items()}
    name = f"hpc-stateless-conn-{keys['base'][:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, f"{image_prefix}/base:{keys['base']}")
    try:
        env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "ansible"), "-i", f"{name},", "all", "-c", "hpc.stateless.buildah",
             "-m", "ansible.builtin.raw", "-a", "echo to-stdout; echo to-stderr >&2; exit 3"],
            cwd=REPO, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode != 0
        assert "rc=3" in proc.stdout and "to-stdout" in proc.stdout and "to-stderr" in proc.stdout, proc.stdout
        root = buildah("mount", name).strip()
        assert not list(Path(root, "tmp").glob(".hpc-stateless-exec-*"))
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def test_buildah_connection_pipelines_modules_through_a_file(first_build, image_prefix):
    """A module's code reaches the container as standard input read from a file (pipelining): no module
    file is put into a remote temp directory, the result is the same as without pipelining, and neither
    the input nor the result files stay in the layer."""
    keys = {layer: next(iter(tags)) for layer, tags in by_layer(image_prefix).items()}
    name = f"hpc-stateless-pipe-{keys['base'][:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, f"{image_prefix}/base:{keys['base']}")
    try:
        env = {**BUILDAH_ENV, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        runs = {}
        for pipelining in ("true", "false"):
            runs[pipelining] = subprocess.run(
                [str(REPO / ".venv" / "bin" / "ansible"), "-vvv", "-i", f"{name},", "all", "-c", "hpc.stateless.buildah",
                 "-e", f"ansible_hpc_stateless_buildah_pipelining={pipelining}",
                 "-m", "ansible.builtin.command", "-a", "cat /etc/debian_version"],
                cwd=REPO, env=env, capture_output=True, text=True, check=False)
            assert runs[pipelining].returncode == 0, runs[pipelining].stdout[-3000:]
        debian_version = Path(buildah("mount", name).strip(), "etc", "debian_version").read_text().strip()
        for proc in runs.values():
            assert f"rc=0 >>\n{debian_version}\n" in proc.stdout, proc.stdout[-3000:]
        assert "Pipelining is enabled." in runs["true"].stdout
        assert "AnsiballZ_command.py" not in runs["true"].stdout, "the module was put into the container as a file"
        assert "PUT " in runs["false"].stdout and "AnsiballZ_command.py" in runs["false"].stdout
        root = buildah("mount", name).strip()
        assert not list(Path(root, "tmp").glob(".hpc-stateless-exec-*"))
        assert not list(Path(root, "root", ".ansible", "tmp").glob("ansible-tmp-*"))
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)
