"""Change planning and distributed builds end to end: playbooks/plan.yml on a site repository,
the generated GitLab CI pipeline checked against GitLab's schema and run by gitlab-ci-local,
a real registry (Debian's docker-registry on 127.0.0.1) and separate containers-storage roots
acting as CI runners.

Site repository (a git repository in tmp, roles of its own, image prefix of the test session):

    base (bootstrap as the default)     -> alpha (role alpha_marker) -> gamma (role gamma_marker)
                                              -> beta  (role marker)
                                              -> delta (role marker)

Its second commit changes role ``marker``: the plan rebuilds exactly the siblings beta and delta.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, layer_images

GITLAB_CI_LOCAL = REPO / ".tools" / "gitlab-ci-local" / "node_modules" / ".bin" / "gitlab-ci-local"
VENV_BIN = REPO / ".venv" / "bin"
DEFAULT_PREFIX = "localhost/hpc-stateless"

BASE = {
    "description": "Debian 12 minimal root that boots with systemd and can be configured by Ansible",
    "bootstrap": {
        "distro": "debian", "release": "bookworm", "variant": "minbase", "mirror": "http://deb.debian.org/debian",
        "packages": ["systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "iproute2", "ca-certificates"],
    },
    "roles": [],
}


def marker_role(variable: str, dest: str, mode: str = "0644") -> str:
    return (f"---\n- name: Write the marker\n  ansible.builtin.copy:\n    content: \"{{{{ {variable} }}}}\\n\"\n"
            f"    dest: {dest}\n    owner: root\n    group: root\n    mode: \"{mode}\"\n")


SITE_FILES = {
    "inventory/hosts.yml": "---\nall:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                           "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n",
    "inventory/group_vars/all/site.yml": "---\nmarker_text: from the inventory\ngamma_text: gamma\nalpha_text: alpha\n",
    "roles/marker/tasks/main.yml": marker_role("marker_text", "/etc/hpc-marker"),
    "roles/alpha_marker/tasks/main.yml": marker_role("alpha_text", "/etc/hpc-alpha"),
    "roles/gamma_marker/tasks/main.yml": marker_role("gamma_text", "/etc/hpc-gamma"),
}
LAYERS = {
    "base": BASE,
    "alpha": {"parent": "base", "roles": ["alpha_marker"]},
    "gamma": {"parent": "alpha", "roles": ["gamma_marker"]},
    "beta": {"parent": "base", "roles": ["marker"], "vars": {"marker_text": "beta"}},
    "delta": {"parent": "base", "roles": ["marker"]},
}
IMAGES = {"compute": {"layer": "gamma"}, "beta": {"layer": "beta"}, "delta": {"layer": "delta"}}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def site_env(site: Path, storage_conf: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "PYTHONPATH": str(REPO / ".collections"), "ANSIBLE_ROLES_PATH": str(site / "roles"),
           "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0"}
    env.pop("CONTAINERS_STORAGE_CONF", None)
    if storage_conf is not None:
        env["CONTAINERS_STORAGE_CONF"] = str(storage_conf)
    return env


def run_playbook(site: Path, playbook: str, *extra: str, storage_conf: Path | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(site / "inventory"), playbook, *extra]
    proc = subprocess.run(argv, cwd=site, env=site_env(site, storage_conf), capture_output=True, text=True,
                          check=False)
    log = REPO / "build" / "test-logs"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"plan-ci-{uuid.uuid4().hex[:8]}.log").write_text(" ".join(argv) + "\n" + proc.stdout + proc.stderr)
    if check:
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    return proc


class Runner:
    """A separate containers-storage root: what a CI runner on another machine has."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.conf = root / "storage.conf"
        self.conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{root}/graph"\nrunroot = "{root}/run"\n')

    def buildah(self, *args: str) -> str:
        return buildah("--root", f"{self.root}/graph", "--runroot", f"{self.root}/run", *args)

    def images(self) -> dict[str, str]:
        return {name: image["id"] for image in json.loads(self.buildah("images", "--json") or "[]") or []
                for name in image.get("names") or []}

    def labels(self, ref: str) -> dict[str, str]:
        return json.loads(self.buildah("inspect", "--type", "image", ref))["OCIv1"]["config"].get("Labels") or {}

    def remove(self) -> None:
        remove_storage(self.root)


def remove_storage(root: Path) -> None:
    graph, run = f"{root}/graph", f"{root}/run"
    if Path(graph).exists():
        for container in json.loads(buildah("--root", graph, "--runroot", run, "containers", "--json") or "[]") or []:
            buildah("--root", graph, "--runroot", run, "rm", container["id"], check=False)
        buildah("--root", graph, "--runroot", run, "rmi", "--all", "--force", check=False)
        subprocess.run(["umount", "-R", graph], capture_output=True, check=False)  # shm/overlay leftovers, if any
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        assert not [line for line in handle if str(root) in line], f"mounts left under {root}"
    shutil.rmtree(root, ignore_errors=True)


def registry_tags(registry: str, repository: str) -> list[str]:
    host, _sep, path = registry.partition("/")
    name = f"{path}/{repository}" if path else repository
    try:
        with urllib.request.urlopen(f"http://{host}/v2/{name}/tags/list", timeout=10) as response:  # noqa: S310
            return sorted(json.load(response).get("tags") or [])
    except urllib.error.HTTPError:
        return []


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """Debian's docker-registry on 127.0.0.1, storage in tmp; yields the repository prefix."""
    executable = shutil.which("docker-registry")
    assert executable, "docker-registry is not installed (apt-get install docker-registry; scripts/setup.sh does)"
    workdir = tmp_path_factory.mktemp("registry")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = workdir / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }))
    log = open(workdir / "registry.log", "wb")  # noqa: SIM115 - closed after the process
    proc = subprocess.Popen([executable, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _attempt in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2):  # noqa: S310
                    break
            except OSError:
                assert proc.poll() is None, (workdir / "registry.log").read_text()
                time.sleep(0.1)
        else:
            raise AssertionError("docker-registry did not answer: " + (workdir / "registry.log").read_text())
        yield f"127.0.0.1:{port}/hpc-test"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory, image_prefix):
    """The site repository: initial commit, then a commit changing role marker (beta, delta)."""
    root = tmp_path_factory.mktemp("plan-ci") / "site"
    for rel, text in SITE_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "inventory/group_vars/all/layers.yml").write_text(yaml.safe_dump(
        {"hpc_stateless_image_prefix": image_prefix, "hpc_stateless_layers": LAYERS,
         "hpc_stateless_images": IMAGES}, sort_keys=False))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "initial")
    (root / "roles/marker/tasks/main.yml").write_text(marker_role("marker_text", "/etc/hpc-marker", "0640"))
    git(root, "commit", "-qam", "marker: tighter mode")
    return root


@pytest.fixture(scope="module")
def reference(site, image_prefix, registry):
    """Single-host build of the changed site with site.yml: the keys every runner must reach.

    The bootstrapped root is reused from the default prefix when the default build made it (same
    bootstrap spec, same key): images are named by content key, so a tag is all it takes. Only
    the bootstrap image: the default base layer applies roles this site's base does not, so its
    key differs. Then base is pushed to the registry, as an earlier pipeline would have left it.
    """
    for ref in layer_images(DEFAULT_PREFIX):
        name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
        if name == "bootstrap/base" and len(tag) == 64:
            buildah("tag", ref, f"{image_prefix}/{name}:{tag}")
    run_playbook(site, str(REPO / "site.yml"))
    keys = {}
    for ref in layer_images(image_prefix):
        name, _sep, tag = ref[len(image_prefix) + 1:].rpartition(":")
        if name in LAYERS and tag != "latest":
            keys[name] = tag
    assert sorted(keys) == sorted(LAYERS)
    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=base",
                        "-e", f"hpc_stateless_registry={registry}", "-e", "hpc_stateless_registry_tls_verify=false")
    assert "cached, nothing to build" in proc.stdout
    assert registry_tags(registry, "base") == [keys["base"]]
    return keys


@pytest.fixture()
def runners(tmp_path):
    made: list[Runner] = []

    def make(name: str) -> Runner:
        made.append(Runner(tmp_path / name))
        return made[-1]

    yield make
    for runner in made:
        runner.remove()


# --------------------------------------------------------------------------- plan.yml


def test_plan_playbook_writes_table_json_picture_and_pipeline(site, tmp_path):
    out = tmp_path / "plan"
    proc = run_playbook(site, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD~1",
                        "-e", f"hpc_stateless_plan_output_dir={out}", "-e", "hpc_stateless_registry=r.example.org/hpc")
    table = (out / "plan.txt").read_text()
    rows = {line.split()[0]: line.split()[2] for line in table.splitlines()[1:6]}
    assert rows == {"base": "reuse", "alpha": "reuse", "gamma": "reuse", "beta": "rebuild", "delta": "rebuild"}
    assert "role marker changed (roles/marker/tasks/main.yml)" in table
    assert "2 of 5 layers rebuild (compared with HEAD~1 (" in table
    assert "2 of 5 layers rebuild" in proc.stdout
    data = json.loads((out / "plan.json").read_text())
    assert data["rebuild"] == ["beta", "delta"]
    assert data["files"] == [{"path": "roles/marker/tasks/main.yml", "kind": "role", "layers": ["beta", "delta"],
                              "detail": "role marker"}]
    assert data["images"]["compute"]["rebuild"] == [] and data["images"]["beta"]["start"] == "beta"
    svg = (out / "plan.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "beta" in svg and "rebuild" in svg
    assert (out / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pipeline = yaml.safe_load((out / "pipeline.yml").read_text())
    assert sorted(k for k in pipeline if k.startswith("layer:")) == ["layer:beta", "layer:delta"]
    assert pipeline["variables"]["HPC_STATELESS_REGISTRY"] == "r.example.org/hpc"
    assert pipeline["variables"]["HPC_STATELESS_INVENTORY"] == "inventory"


def test_pipelines_validate_against_gitlab_schema(site, tmp_path):
    out = tmp_path / "plan"
    run_playbook(site, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD~1",
                 "-e", f"hpc_stateless_plan_output_dir={out}")
    empty = tmp_path / "empty"
    run_playbook(site, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD",
                 "-e", f"hpc_stateless_plan_output_dir={empty}")
    everything = tmp_path / "all"
    run_playbook(site, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD~1",
                 "-e", '{"hpc_stateless_plan_changed_files": ["playbooks/build.yml"]}',
                 "-e", f"hpc_stateless_plan_output_dir={everything}")
    empty_pipeline = yaml.safe_load((empty / "pipeline.yml").read_text())
    assert [k for k in empty_pipeline if k not in ("stages", "variables")] == ["hpc-stateless:nothing-to-build"]
    full = yaml.safe_load((everything / "pipeline.yml").read_text())
    assert full["layer:gamma"]["needs"] == [{"job": "layer:alpha"}]
    assert full["layer:alpha"]["needs"] == [{"job": "layer:base"}]
    documented = REPO / "docs" / "examples" / "gitlab-ci.yml"  # the parent pipeline of docs/ci.md
    for path in (out / "pipeline.yml", empty / "pipeline.yml", everything / "pipeline.yml", documented):
        proc = subprocess.run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci",
                               str(path)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # ...and the schema check does fail on a broken pipeline
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump({"layer:x": {"needs": "layer:y", "script": 3}}))
    proc = subprocess.run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(broken)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0


@pytest.mark.parametrize(("extra", "expected"), [
    (["-e", "hpc_stateless_plan_since=origin/nope"], "unknown git revision 'origin/nope'"),
    (["-e", '{"hpc_stateless_plan_changed_files": ["../outside.yml"]}'], "../outside.yml: changed file is outside"),
])
def test_plan_playbook_bad_input(site, tmp_path, extra, expected):
    proc = run_playbook(site, str(REPO / "playbooks/plan.yml"), *extra,
                        "-e", f"hpc_stateless_plan_output_dir={tmp_path / 'out'}", check=False)
    assert proc.returncode != 0
    assert expected in proc.stdout.replace("\n", " ")
    assert not (tmp_path / "out").exists()


def test_plan_playbook_names_inventory_file_broken_in_the_base_revision(site, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(site), str(clone)], check=True)
    vars_file = clone / "inventory/group_vars/all/site.yml"
    vars_file.write_text("marker_text: [unclosed\n")
    git(clone, "commit", "-qam", "broken vars")
    vars_file.write_text(SITE_FILES["inventory/group_vars/all/site.yml"])
    proc = run_playbook(clone, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD",
                        "-e", f"hpc_stateless_plan_output_dir={tmp_path / 'out'}", check=False)
    assert proc.returncode != 0
    assert "inventory/group_vars/all/site.yml at HEAD (" in proc.stdout
    assert "cannot parse YAML" in proc.stdout


# --------------------------------------------------------------------------- registry and runners


def test_second_runner_builds_a_child_from_the_parent_the_first_pushed(
        site, reference, registry, runners, image_prefix):
    first, second = runners("runner-a"), runners("runner-b")
    common = ["-e", f"hpc_stateless_registry={registry}", "-e", "hpc_stateless_registry_tls_verify=false"]
    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=alpha", *common,
                        storage_conf=first.conf)
    assert f"building from {image_prefix}/base:{reference['base']}" in proc.stdout
    assert f"pushed to {registry}/alpha:{reference['alpha']}" in proc.stdout
    assert set(first.images()) == {f"{image_prefix}/alpha:{reference['alpha']}",
                                   f"{image_prefix}/alpha:latest", f"{image_prefix}/base:{reference['base']}"}
    assert reference["alpha"] in registry_tags(registry, "alpha")

    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=gamma", *common,
                        storage_conf=second.conf)
    assert f"building from {image_prefix}/alpha:{reference['alpha']}" in proc.stdout
    images = second.images()
    assert f"{image_prefix}/gamma:{reference['gamma']}" in images
    assert f"{image_prefix}/base:{reference['base']}" not in images, "the second runner built base itself"
    labels = second.labels(f"{image_prefix}/gamma:{reference['gamma']}")
    assert labels["hpc.stateless.key"] == reference["gamma"]
    assert labels["hpc.stateless.parent-key"] == reference["alpha"]
    assert reference["gamma"] in registry_tags(registry, "gamma")
    # nothing of the runners' work leaked into the default storage beyond what site.yml built
    assert not [c for c in json.loads(buildah("containers", "--json") or "[]") or []
                if c["containername"].startswith("hpc-stateless-gamma-")]


def test_gitlab_ci_local_runs_the_generated_pipeline(site, reference, registry, tmp_path, image_prefix):
    assert GITLAB_CI_LOCAL.exists(), "gitlab-ci-local is not installed in .tools/ (scripts/setup.sh installs it)"
    out = tmp_path / "plan"
    run_playbook(site, str(REPO / "playbooks/plan.yml"), "-e", "hpc_stateless_plan_since=HEAD~1",
                 "-e", f"hpc_stateless_plan_output_dir={out}", "-e", f"hpc_stateless_registry={registry}",
                 "-e", "hpc_stateless_registry_tls_verify=false")
    project = tmp_path / "pipeline"
    project.mkdir()
    shutil.copy(out / "pipeline.yml", project / ".gitlab-ci.yml")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "child pipeline")
    storage_root = tmp_path / "runners"
    try:
        proc = subprocess.run(
            [str(GITLAB_CI_LOCAL), "--shell-isolation=false", "--concurrency", "2",
             "--variable", f"HPC_STATELESS_PROJECT_DIR={site}",
             "--variable", f"HPC_STATELESS_STORAGE_ROOT={storage_root}"],
            cwd=project, env=site_env(site), capture_output=True, text=True, check=False, timeout=1500)
        log = REPO / "build" / "test-logs"
        log.mkdir(parents=True, exist_ok=True)
        (log / f"gitlab-ci-local-{uuid.uuid4().hex[:8]}.log").write_text(proc.stdout + proc.stderr)
        output = proc.stdout
        assert proc.returncode == 0, output[-6000:] + proc.stderr[-2000:]
        assert "PASS  layer:beta" in output and "PASS  layer:delta" in output
        lines = output.splitlines()
        started = [i for i, line in enumerate(lines) if " starting shell" in line]
        finished = [i for i, line in enumerate(lines) if line.split(" ")[0].startswith("layer:") and " finished in " in line]
        assert len(started) == 2 and max(started) < min(finished), "sibling jobs did not run at the same time"
        for layer in ("beta", "delta"):
            runner = Runner.__new__(Runner)
            runner.root = storage_root / layer
            images = runner.images()
            assert sorted(images) == sorted([f"{image_prefix}/base:{reference['base']}",
                                             f"{image_prefix}/{layer}:{reference[layer]}",
                                             f"{image_prefix}/{layer}:latest"]), images
            assert f"building from {image_prefix}/base:{reference['base']}" in output
            assert reference[layer] in registry_tags(registry, layer)
    finally:
        for layer in ("beta", "delta"):
            if (storage_root / layer).exists():
                remove_storage(storage_root / layer)


def test_layer_playbook_bad_input(site, registry, runners):
    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=nope", check=False)
    assert proc.returncode != 0
    assert "unknown layer nope (hpc_stateless_build_layer); known layers: base, alpha" in proc.stdout
    runner = runners("runner-empty")
    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=gamma",
                        "-e", f"hpc_stateless_registry={registry}/nothing-here",
                        "-e", "hpc_stateless_registry_tls_verify=false", storage_conf=runner.conf, check=False)
    assert proc.returncode != 0
    assert f"cannot pull layer alpha ({registry}/nothing-here/alpha:" in proc.stdout
    assert "Build and push it first" in proc.stdout
    assert runner.images() == {}
    assert json.loads(runner.buildah("containers", "--json") or "[]") in ([], None)
    proc = run_playbook(site, "hpc.stateless.layer", "-e", "hpc_stateless_build_layer=gamma",
                        storage_conf=runner.conf, check=False)
    assert proc.returncode != 0
    assert "is not in local storage: build it first (site.yml), or give hpc_stateless_registry" in proc.stdout
