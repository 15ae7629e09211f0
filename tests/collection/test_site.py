"""A site's own repository uses the installed collection: build -> pack -> deploy of a layer with the
site's own role, into the site's tree, and the site's Molecule scenario for that role.

Real tools throughout (ansible-galaxy, buildah, zstd, cpio, molecule, testinfra). The site's base
layer has the default inventory's bootstrap spec and role, so its content key is the default
build's: the test tags the cached default base images into its own prefix (a name only) and builds
just the site's layer. Run it after the default layers are built (make build), through the
integration lock. Everything it creates under its prefix is removed at the end; the default images
are only untagged from the site prefix, never removed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _integration_helpers():
    """The buildah helpers of tests/integration (loaded under a name of their own: both are conftests)."""
    spec = importlib.util.spec_from_file_location("integration_helpers", REPO / "tests/integration/conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HELPERS = _integration_helpers()
buildah, layer_images, our_containers, read_from_image = (
    _HELPERS.buildah, _HELPERS.layer_images, _HELPERS.our_containers, _HELPERS.read_from_image)
BIN = REPO / ".venv" / "bin"
DEFAULT_PREFIX = "localhost/hpc-stateless"
PREFIX = "localhost/site-test"
SITE_TAG = "v7"
MOTD = "site-test: built from the site's own role"
# Where hpc.stateless.molecule_create starts the scenario's instances.
MOLECULE_PREFIX = "localhost/hpc-stateless-molecule/mysite_motd"

SITE_ROLE_TASKS = """---
- name: Write the site's message of the day
  ansible.builtin.copy:
    content: "{{ mysite_motd_text }}\\n"
    dest: /etc/mysite-motd
    owner: root
    group: root
    mode: "0644"
"""

SITE_ROLE_TEST = f'''"""The site's own check of its role."""


def test_the_motd_is_written(host):
    motd = host.file("/etc/mysite-motd")
    assert motd.exists and motd.mode == 0o644
    assert motd.content_string == {MOTD!r} + "\\n"
'''


def site_env() -> dict[str, str]:
    """A fresh user's shell: no ANSIBLE_* settings and no PYTHONPATH of the checkout."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "MOLECULE_", "HPC_STATELESS_")) and k not in ("PYTHONPATH", "BUILDAH_ISOLATION")}
    env.update(PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PY_COLORS="0")
    return env


def run(argv: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, env=site_env(), capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return proc


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its type, size, mode and mtime: any write shows."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            found[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


def read_from_cpio(archive: Path, path: str) -> str:
    unpacked = subprocess.run(f"zstd -dc {archive} | cpio -i --quiet --to-stdout '*{path.lstrip('/')}'",
                              shell=True, capture_output=True, check=True)
    return unpacked.stdout.decode()


def write_site(site: Path, collections: Path) -> None:
    default_layers = yaml.safe_load((REPO / "inventory/group_vars/all/layers.yml").read_text())
    base = default_layers["hpc_stateless_layers"]["base"]
    files = {
        "ansible.cfg": f"[defaults]\ninventory = inventory\ncollections_path = {collections}\n",
        ".gitignore": "build/\n",
        "inventory/hosts.yml": yaml.safe_dump({"all": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}),
        "inventory/group_vars/all/layers.yml": yaml.safe_dump({
            "hpc_stateless_image_prefix": PREFIX,
            # The default base layer (same bootstrap spec and role: the same key) and the site's own.
            "hpc_stateless_layers": {"base": base, "site": {"parent": "base", "roles": ["mysite_motd", "hpc.stateless.slurm"]}},
            "hpc_stateless_images": {"site": {"layer": "site", "formats": ["cpio.zst"], "kernel_args": "console=ttyS0"}},
            # The whole chain as docs/site.md shows it: the site layer boots under verify before it is packed
            # (a throw-away munge key for that boot; slurmd needs a controller, which a lone node has not).
            "hpc_stateless_site_stages": ["build", "verify", "pack", "deploy"],
            "hpc_stateless_verify_test_secrets": ["/etc/munge/munge.key"],
            "hpc_stateless_verify_allowed_failed_units": ["slurmd.service"],
            # Lynis costs ~35 s of this boot: make build scores the default image (the same base and
            # slurm role) and test_verify_lynis.py holds that verdict; what is the installed collection's
            # own, its waiver file, is read below (test_the_installed_collection_reads_its_own_lynis_waivers).
            "hpc_stateless_verify_lynis": False,
            # The same for OpenSCAP (~15 s): test_verify_openscap.py holds the default image's verdict.
            "hpc_stateless_verify_openscap": False,
        }),
        "roles/mysite_motd/defaults/main.yml": f"---\nmysite_motd_text: {MOTD!r}\n",
        "roles/mysite_motd/tasks/main.yml": SITE_ROLE_TASKS,
        "site.yml": "---\n- name: The whole chain of our images\n  ansible.builtin.import_playbook: hpc.stateless.site\n",
    }
    for rel, content in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(content)
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=site", "-c", "user.email=site@example.org", "commit", "-qm", "our site"],
                 ["-c", "user.name=site", "-c", "user.email=site@example.org", "tag", "-a", SITE_TAG, "-m", "release"]):
        run(["git", *argv], site)


def seed_base() -> None:
    """Tag the default build's base layer and bootstrapped root into the site prefix (names only)."""
    for ref in sorted(layer_images(DEFAULT_PREFIX)):
        name, _sep, tag = ref[len(DEFAULT_PREFIX) + 1:].rpartition(":")
        if name in ("base", "bootstrap/base") and re.fullmatch(r"[0-9a-f]{64}", tag):
            buildah("tag", ref, f"{PREFIX}/{name}:{tag}")


def remove_site_images() -> None:
    for name in our_containers(PREFIX):
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)
    for ref in sorted(layer_images(PREFIX)):
        buildah("rmi", ref, check=False)


def read_only_bind(path: Path) -> bool:
    """Make ``path`` a read-only bind mount (root ignores file modes); False where mounts are not allowed."""
    if subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True, check=False).returncode != 0:
        return False
    if subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", str(path)], capture_output=True, check=False)
        return False
    return True


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not any(ref.startswith(f"{DEFAULT_PREFIX}/base:") for ref in sorted(layer_images(DEFAULT_PREFIX))):
        pytest.fail("the default base layer is not built: run 'make build' (ansible-playbook site.yml) first")
    top = tmp_path_factory.mktemp("site")
    dist, install, repo = top / "dist", top / "usr-share-ansible-collections", top / "mysite"
    for directory in (dist, install, repo):
        directory.mkdir()
    for _attempt in range(3):  # another writer in the checkout can change a file between build and install
        run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(dist)], REPO)
        tarball = sorted(dist.glob("hpc-stateless-*.tar.gz"))[0]
        # Offline, with dependencies: ansible.posix and community.general come from the `ansible` package.
        installed = run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--force", "-p", str(install),
                         str(tarball)], top, check=False)
        if installed.returncode == 0:
            break
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "ansible.posix" in installed.stdout and "community.general" in installed.stdout
    subprocess.run(["chmod", "-R", "a-w", str(install)], check=True)
    bound = read_only_bind(install)
    before = snapshot(install)
    write_site(repo, install)
    seed_base()
    try:
        first = run([str(BIN / "ansible-playbook"), "site.yml"], repo)
        second = run([str(BIN / "ansible-playbook"), "site.yml"], repo)
        yield {"repo": repo, "install": install, "before": before, "first": first, "second": second,
               "collection": install / "ansible_collections/hpc/stateless", "version": site_version(first)}
    finally:
        if bound:
            subprocess.run(["umount", str(install)], capture_output=True, check=False)
        subprocess.run(["chmod", "-R", "u+w", str(install)], check=False)
        remove_site_images()


def site_version(first: subprocess.CompletedProcess) -> str:
    """The version the site's image is packed under: the describe of the site repository, SITE_TAG. When the archive
    moved since the default base was built (a security update of its packages: the base layer is rebuilt for it, and
    stays so until its inputs change), the version carries the leaf key too, and the plan says why - a version never
    names two builds, and the commit's first build may have been packed as SITE_TAG already (docs/freshness.md)."""
    match = re.search(r"versions are '([^']*)'(\+<leaf layer key>)?: ([^\"]*)", first.stdout)
    assert match, first.stdout[-4000:]
    describe, keyed, why = match.groups()
    assert describe == SITE_TAG, match.group(0)  # git describe of the site repository, not of the collection
    if not keyed:
        return SITE_TAG
    assert "was rebuilt for archive updates" in why, match.group(0)  # the one reason a clean, tagged tree is keyed
    found = re.search(rf"image site ({re.escape(SITE_TAG)}\+[0-9a-f]{{12}})\b", first.stdout)
    assert found, first.stdout[-4000:]
    return found.group(1)


def plan_line(proc: subprocess.CompletedProcess) -> str:
    found = re.search(r'"msg": "(\d+ layers, \d+ to build: [^"]*)"', proc.stdout)
    assert found, proc.stdout[-4000:]
    return found.group(1)


def test_the_site_layer_alone_is_built_from_the_cached_base(site):
    assert plan_line(site["first"]) == "2 layers, 1 to build: site"


def test_the_site_role_and_our_role_ran_in_the_layer_and_are_in_the_packed_archive(site):
    refs = [r for r in sorted(layer_images(PREFIX)) if r.startswith(f"{PREFIX}/site:") and not r.endswith(":latest")]
    assert len(refs) == 1, refs
    assert read_from_image(refs[0], "/etc/mysite-motd") == MOTD + "\n"
    assert "ClusterName=" in read_from_image(refs[0], "/etc/slurm/slurm.conf")  # hpc.stateless.slurm, by FQCN
    archive = site["repo"] / "build/images/site" / site["version"] / "site.cpio.zst"
    assert archive.is_file(), sorted(str(p) for p in (site["repo"] / "build").rglob("*"))
    assert read_from_cpio(archive, "/etc/mysite-motd") == MOTD + "\n"


def test_artifacts_and_boot_tree_are_in_the_site_tree_with_the_site_version(site):
    repo = site["repo"]
    manifest = json.loads((repo / "build/images/site" / site["version"] / "manifest.json").read_text())
    assert manifest["version"] == site["version"]  # git describe of the site repository, not of the collection
    # packed through the verification gate: the site layer booted under verify first, once
    assert manifest["verification"]["status"] == "passed", manifest["verification"]
    # one record (and the JUnit report of its checks beside it)
    records = sorted(p.name for p in (repo / "build/verify").iterdir())
    assert [name.split("-")[0] for name in records if name.endswith(".json")] == ["site"], records
    assert [name.removesuffix(".junit.xml") for name in records if name.endswith(".junit.xml")] == [
        name.removesuffix(".json") for name in records if name.endswith(".json")], records
    assert "not booted again" in site["second"].stdout
    served = repo / "build/tftpboot/site"
    assert json.loads((served / "manifest.json").read_text())["version"] == site["version"]
    assert (served / "vmlinuz").is_file() and (repo / "build/tftpboot/pxelinux.cfg/default").is_file()


def test_verify_and_pack_take_the_plan_of_the_runs_build(site):
    """Keys are computed once per run: verify and pack of site.yml take the build's plan (filter
    hpc.stateless.plan_after_build) - after a build of the site layer and after a run with every layer cached."""
    for run_output in (site["first"].stdout, site["second"].stdout):
        assert run_output.count("TASK [Compute the content keys with each layer host's variables]") == 1
        planned = re.findall(r"TASK \[Plan the layers as the build does \(same variables, same keys\), unless this "
                             r"run's build did\] \**\n(\w+)", run_output)
        assert planned == ["skipping", "skipping"], planned


LYNIS_FILTERS_PLAYBOOK = """---
- name: The verify gate's Lynis filters of the installed collection
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write the profile and the verdict on a report with one finding
      ansible.builtin.copy:
        content: >-
          {{ {'profile': [] | hpc.stateless.lynis_profile,
              'verdict': lookup('ansible.builtin.file', report) | hpc.stateless.lynis_verdict([], 80)} | to_json }}
        dest: "{{ out }}"
        mode: "0644"
"""


def test_the_installed_collection_reads_its_own_lynis_waivers(site, tmp_path):
    # site.yml runs without Lynis here (make build scores the default image with it); what is the
    # installed collection's own is its waiver file, beside the filters in the install: its skipped tests
    # reach the profile and its waivers excuse a finding, read from the install, not from the checkout.
    waivers = site["collection"] / "roles/hpc_stateless/files/lynis-waivers.yml"
    (tmp_path / "lynis.yml").write_text(LYNIS_FILTERS_PLAYBOOK)
    (tmp_path / "report.dat").write_text("hardening_index=90\nwarning[]=LYNIS|A newer version is available|-|-|\n"
                                         "warning[]=AUTH-9999|Not waived by any file|-|-|\n")
    out = tmp_path / "filters.json"
    run([str(BIN / "ansible-playbook"), str(tmp_path / "lynis.yml"), "-e",
         json.dumps({"report": str(tmp_path / "report.dat"), "out": str(out)})], site["repo"])
    shown = json.loads(out.read_text())
    assert "skip-test=KRNL-6000" in shown["profile"] and f"({waivers})" in shown["profile"], shown["profile"]
    checks = {check["id"]: check for check in shown["verdict"]["checks"]}
    assert checks["lynis/LYNIS"]["result"] == "waived", checks
    assert shown["verdict"]["unwaived"] == ["warning AUTH-9999: Not waived by any file"], shown["verdict"]
    assert snapshot(site["install"]) == site["before"]


def test_nothing_is_written_under_the_collection_install_and_no_container_is_left(site):
    assert not (site["collection"] / "build").exists()
    assert our_containers(PREFIX) == []
    assert snapshot(site["install"]) == site["before"]


def test_a_second_run_builds_and_packs_nothing(site):
    assert plan_line(site["second"]) == "2 layers, 0 to build: nothing (every layer is cached)"
    assert f"image site {site['version']} (up to date)" in site["second"].stdout


def test_a_site_role_missing_from_every_search_path_names_the_setting(site, tmp_path):
    repo = tmp_path / "norole"
    shutil.copytree(site["repo"], repo, ignore=shutil.ignore_patterns("build", "roles"))
    proc = run([str(BIN / "ansible-playbook"), "site.yml"], repo, check=False)
    assert proc.returncode != 0
    assert "role 'mysite_motd' not found" in proc.stdout
    assert f"put the role in {repo}/roles or add its directory to roles_path" in " ".join(proc.stdout.split())


def test_check_mode_of_a_stale_site_reports_and_writes_nothing(site, tmp_path):
    # A changed site role makes its layer stale: --check names it and stops each later stage cleanly
    # instead of starting a working container it cannot create in check mode.
    repo = tmp_path / "stale"
    shutil.copytree(site["repo"], repo, ignore=shutil.ignore_patterns("build"))
    tasks = repo / "roles/mysite_motd/tasks/main.yml"
    tasks.write_text(tasks.read_text().replace("mode: \"0644\"", "mode: \"0640\""))
    images = sorted(layer_images(PREFIX))
    proc = run([str(BIN / "ansible-playbook"), "--check", "site.yml"], repo, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert plan_line(proc) == "2 layers, 1 to build: site (check mode: not built)"
    assert "check mode: layers site are not built yet, nothing is packed" in proc.stdout
    assert "check mode: site not packed yet, nothing is deployed" in proc.stdout
    assert not (repo / "build").exists()
    assert sorted(layer_images(PREFIX)) == images and our_containers(PREFIX) == []


def test_the_site_molecule_scenario_converges_is_idempotent_and_passes_testinfra(site):
    repo = site["repo"]
    run([str(BIN / "ansible-playbook"), "hpc.stateless.molecule_scaffold", "-e", "hpc_stateless_scaffold_role=mysite_motd",
         "-e", "hpc_stateless_scaffold_layer=site"], repo)
    scenario = repo / "molecule/mysite_motd"
    assert sorted(p.name for p in scenario.iterdir()) == ["converge.yml", "create.yml", "destroy.yml", "molecule.yml", "tests"]
    (scenario / "tests/test_mysite_motd.py").write_text(SITE_ROLE_TEST)
    proc = run([str(BIN / "molecule"), "test", "-s", "mysite_motd"], repo, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-8000:]
    assert "[mysite_motd > idempotence] Executed: Successful" in log, log[-8000:]
    # The site's own check (it replaced the scaffold's first one) ran and passed.
    assert re.search(r"collected 1 item.*\b1 passed\b", log, re.S), log[-8000:]
    assert our_containers(MOLECULE_PREFIX) == [], "the scenario's destroy left working containers"
    assert snapshot(site["install"]) == site["before"]
