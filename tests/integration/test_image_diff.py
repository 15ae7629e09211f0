"""hpc.stateless.image_diff on real images: two layer images made from the built base layer that
differ in real dpkg packages (installed with dpkg from .deb files built here) and in files, packed
by hpc.stateless.pack (cpio.zst and squashfs), the first deployed with hpc.stateless.bootlink.
The module and playbooks/diff.yml are run as a user runs them; each way of naming the two versions
(boot tree + newest pack, two pack directories, two layer images) must give the same answer. The
diff job of the generated GitLab pipeline runs under gitlab-ci-local against the default compute
image's current layer image (built by site.yml, as the pack tests need it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import REPO, buildah, leftover_owned_containers, our_mounts, run_site
from pack_support import pack_module, run_module

from ansible_collections.hpc.stateless.plugins.module_utils._ci.gitlab import gitlab_pipeline, pipeline_yaml
from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import REBUILD, ChangePlan, LayerDecision

BASE = "localhost/hpc-stateless/base:latest"
IMAGE = "difftest"
KEYS = {"v1": {"base": "a" * 64, "difftest": "1" * 64}, "v2": {"base": "a" * 64, "difftest": "2" * 64}}


def deb(out: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real .deb without maintainer scripts."""
    tree = out / f"{name}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: tests <t@example.org>\n"
        f"Description: image diff test package\n")
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out)], check=True,
                   capture_output=True)
    return out / f"{name}_{version}_all.deb"


def make_image(ref: str, debs: list[Path], purge: list[str], files: dict[str, bytes], kernel: str,
               chmod: dict[str, int]) -> None:
    name = f"hpc-stateless-difftest-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, BASE)
    try:
        root = Path(buildah("mount", name).strip())
        # The image's own dpkg (chroot): the host's dpkg --root resolves the users and groups of the
        # image's statoverride file (e.g. chrony's _chrony) on the host, where they do not exist.
        for package in debs:
            shutil.copyfile(package, root / "tmp" / package.name)
            subprocess.run(["chroot", str(root), "dpkg", "-i", f"/tmp/{package.name}"], check=True,
                           capture_output=True, stdin=subprocess.DEVNULL)
            (root / "tmp" / package.name).unlink()
        for package in purge:
            subprocess.run(["chroot", str(root), "dpkg", "--purge", package], check=True, capture_output=True,
                           stdin=subprocess.DEVNULL)
        for rel, data in {**files, f"boot/vmlinuz-{kernel}": b"stand-in kernel " + kernel.encode()}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        for rel, mode in chmod.items():
            (root / rel).chmod(mode)
        buildah("umount", name)
        buildah("commit", "--quiet", "--rm", name, ref)
    except BaseException:
        buildah("rm", name, check=False)
        raise


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Two layer images, both packed; v1 deployed (served). Removed again afterwards."""
    if not buildah("images", "--quiet", BASE, check=False).strip():
        pytest.fail(f"{BASE} is not built: run ansible-playbook site.yml first")
    work = tmp_path_factory.mktemp("difftest")
    prefix = f"localhost/hpc-stateless-difftest-{uuid.uuid4().hex[:6]}"
    refs = {"v1": f"{prefix}/{IMAGE}:v1", "v2": f"{prefix}/{IMAGE}:v2"}
    debs = work / "debs"
    debs.mkdir()
    try:
        make_image(refs["v1"], [deb(debs, "hpc-difftest", "1.0-1", {"usr/share/hpc-difftest/data": b"a" * 1000}),
                                deb(debs, "hpc-difftest-old", "2.0", {"usr/share/hpc-difftest-old/x": b"old"})],
                   [], {"etc/difftest.conf": b"setting=1\n", "etc/difftest-gone": b"bye\n"}, "6.1.0-98-amd64", {})
        make_image(refs["v2"], [deb(debs, "hpc-difftest", "1.1-1", {"usr/share/hpc-difftest/data": b"b" * 300_000}),
                                deb(debs, "hpc-difftest-new", "0.1", {"usr/share/hpc-difftest-new/y": b"new"})],
                   [], {"etc/difftest.conf": b"setting=2\n", "etc/difftest-added": b"hi\n"}, "6.1.0-99-amd64",
                   {"etc/difftest.conf": 0o600})
        out, boot = work / "images", work / "tftp"
        for version, ref in refs.items():
            rc, packed = pack_module(image=IMAGE, source_image=ref, output_dir=str(out), version=version,
                                     layer=IMAGE, layer_keys=KEYS[version], formats=["cpio.zst", "squashfs"],
                                     dracut=False, kernel_args=f"console=ttyS0 difftest={version}")
            assert rc == 0, packed.get("msg")
            if version == "v1":
                rc, deployed = run_module("hpc.stateless.bootlink", boot_root=str(boot), image=IMAGE,
                                          src=packed["version_dir"], state="switched", lock_timeout=0)
                assert rc == 0, deployed.get("msg")
        yield {"refs": refs, "out": out, "boot": boot, "work": work}
    finally:
        for ref in refs.values():
            buildah("rmi", ref, check=False)


def check_result(result: dict) -> None:
    packages = result["packages"]
    assert packages["known"] is True
    assert packages["added"] == [{"name": "hpc-difftest-new", "version": "0.1"}]
    assert packages["upgraded"] == [{"name": "hpc-difftest", "old": "1.0-1", "new": "1.1-1"}]
    assert packages["removed"] == [{"name": "hpc-difftest-old", "version": "2.0"}]
    assert packages["downgraded"] == []
    added = [f["path"] for f in result["files"]["added"]]
    removed = [f["path"] for f in result["files"]["removed"]]
    assert "/etc/difftest-added" in added and "/usr/share/hpc-difftest-new/y" in added
    assert "/etc/difftest-gone" in removed
    changed = {c["path"]: c for c in result["files"]["changed"]}
    assert changed["/etc/difftest.conf"]["changed"] == ["content", "mode"]
    assert (changed["/etc/difftest.conf"]["old_mode"], changed["/etc/difftest.conf"]["new_mode"]) == ("0644", "0600")
    assert changed["/usr/share/hpc-difftest/data"]["delta"] == 299_000
    assert result["files"]["largest_growths"][0]["path"] == "/usr/share/hpc-difftest/data"
    assert result["kernel"] == {"old": "6.1.0-98-amd64", "new": "6.1.0-99-amd64", "changed": True}


def test_served_version_against_the_newest_pack(versions):
    dest = versions["work"] / "served.md"
    rc, result = run_module("hpc.stateless.image_diff", boot_root=str(versions["boot"]), image=IMAGE,
                            output_dir=str(versions["out"]), markdown_dest=str(dest))
    assert rc == 0, result.get("msg")
    check_result(result)
    assert result["old"]["label"] == f"{IMAGE} v1 (served) in {versions['boot']}"
    assert result["kernel_args"] == {"old": "console=ttyS0 difftest=v1", "new": "console=ttyS0 difftest=v2",
                                     "changed": True}
    assert result["layers"]["rebuilt"] == [{"layer": IMAGE, "old": "1" * 64, "new": "2" * 64}]
    # BUILD_TIME is the image's creation time: the same second for both images or not
    assert set(result["release"]["changed"]) - {"BUILD_TIME"} == {"LAYER_KEY", "VERSION"}
    text = dest.read_text()
    assert text == result["markdown"]
    assert text.startswith(f"### Image diff: {IMAGE} v1 (served) in {versions['boot']} → {IMAGE} v2\n")
    assert "| packages | 1 | 1 | 1 | 0 | 0 |" in text
    assert "- `hpc-difftest` 1.0-1 → 1.1-1" in text and "- `hpc-difftest-new` 0.1" in text
    assert "Kernel: `6.1.0-98-amd64` → `6.1.0-99-amd64`" in text and "Layers rebuilt: difftest" in text


def image_has(ref: str, path: str) -> bool:
    name = f"hpc-stateless-difftest-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--quiet", "--name", name, ref)
    try:
        return os.path.lexists(Path(buildah("mount", name).strip(), path))
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


def test_squashfs_artifacts_give_the_same_answer_as_cpio(versions):
    dirs = {"old_dir": str(versions["out"] / IMAGE / "v1"), "new_dir": str(versions["out"] / IMAGE / "v2")}
    rc, cpio = run_module("hpc.stateless.image_diff", **dirs)
    assert rc == 0, cpio.get("msg")
    rc, squashfs = run_module("hpc.stateless.image_diff", format="squashfs", **dirs)
    assert rc == 0, squashfs.get("msg")
    assert squashfs["old"]["source"].endswith(f"{IMAGE}.squashfs")
    check_result(squashfs)
    # Pack adds /dev/console and /init to the cpio alone when the image lacks them (an initramfs
    # needs both): one entry more in the cpio for each the image does not have.
    for side, version in (("old", "v1"), ("new", "v2")):
        cpio_only = sum(not image_has(versions["refs"][version], path) for path in ("dev/console", "init"))
        assert cpio["files"][side]["entries"] == squashfs["files"][side]["entries"] + cpio_only
        assert cpio["files"][side]["bytes"] == squashfs["files"][side]["bytes"]
    for key in ("added", "removed", "changed", "largest_growths", "delta"):
        assert squashfs["files"][key] == cpio["files"][key]


def test_two_layer_images_read_the_package_database_and_leave_no_container(versions):
    rc, result = run_module("hpc.stateless.image_diff", old_image=versions["refs"]["v1"],
                            new_image=versions["refs"]["v2"])
    assert rc == 0, result.get("msg")
    check_result(result)
    assert result["kernel_args"] == {"old": None, "new": None, "changed": False}
    assert any("no kernel command line" in note for note in result["notes"])
    assert not leftover_owned_containers("diff-old", "diff-new")
    assert not our_mounts()


def test_playbook_prints_the_table_and_writes_the_markdown(versions):
    diff_dir = versions["work"] / "diff"
    proc = run_site("-e", f"hpc_stateless_boot_root={versions['boot']}",
                    "-e", f"hpc_stateless_pack_output_dir={versions['out']}",
                    "-e", f"hpc_stateless_diff_images={IMAGE}", "-e", f"hpc_stateless_diff_dir={diff_dir}",
                    inventory=REPO / "inventory", playbook="playbooks/diff.yml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert '"packages upgraded: 1",' in proc.stdout
    assert '"    hpc-difftest 1.0-1 -> 1.1-1",' in proc.stdout
    assert '"  - hpc-difftest-old 2.0",' in proc.stdout
    assert '"kernel: 6.1.0-98-amd64 -> 6.1.0-99-amd64",' in proc.stdout
    markdown = (diff_dir / f"{IMAGE}.md").read_text()
    assert "- `hpc-difftest-old` 2.0" in markdown
    shutil.rmtree(diff_dir)


def test_a_version_not_published_is_named(versions):
    rc, result = run_module("hpc.stateless.image_diff", boot_root=str(versions["boot"]), image=IMAGE,
                            old_version="v0", output_dir=str(versions["out"]))
    assert rc != 0
    assert result["msg"] == (f"{versions['boot']}/images/{IMAGE}/v0: version v0 of image {IMAGE} is not published "
                             f"in {versions['boot']} (published: v1)")


GITLAB_CI_LOCAL = REPO / ".tools" / "gitlab-ci-local" / "node_modules" / ".bin" / "gitlab-ci-local"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def test_gitlab_ci_local_runs_the_diff_job_and_keeps_the_markdown(versions, tmp_path):
    """The served compute is our v1 pack (base + two test packages); the job diffs the default compute
    image's layer image against it: the test packages are removed, the default layers' packages added."""
    assert GITLAB_CI_LOCAL.exists(), "gitlab-ci-local is not installed in .tools/ (scripts/setup.sh installs it)"
    layers = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "layers.yml").read_text())
    layer = layers["hpc_stateless_images"]["compute"]["layer"]
    boot = tmp_path / "tftp"
    rc, packed = pack_module(image="compute", source_image=versions["refs"]["v1"], output_dir=str(tmp_path / "out"),
                             version="v1", layer=IMAGE, layer_keys=KEYS["v1"], dracut=False)
    assert rc == 0, packed.get("msg")
    rc, deployed = run_module("hpc.stateless.bootlink", boot_root=str(boot), image="compute",
                              src=packed["version_dir"], state="switched", lock_timeout=0)
    assert rc == 0, deployed.get("msg")
    plan = ChangePlan(base="HEAD~1", variable_changes="values", files=[], images={"compute": {"layer": layer}},
                      layers={layer: LayerDecision(layer, action=REBUILD, images=["compute"])})
    project = tmp_path / "pipeline"
    project.mkdir()
    (project / ".gitlab-ci.yml").write_text(pipeline_yaml(gitlab_pipeline(plan, diff_boot_root=str(boot)), plan))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "child pipeline")
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
           "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PYTHONPATH": str(REPO / ".collections"),
           "BUILDAH_ISOLATION": os.environ.get("BUILDAH_ISOLATION", "chroot"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("CONTAINERS_STORAGE_CONF", None)
    proc = subprocess.run([str(GITLAB_CI_LOCAL), "--shell-isolation=false", "--variable",
                           f"HPC_STATELESS_PROJECT_DIR={REPO}", "diff:compute"], cwd=project, env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0 and "PASS  diff:compute" in proc.stdout, proc.stdout[-5000:] + proc.stderr[-2000:]
    kept = list((project / ".gitlab-ci-local" / "artifacts").glob("*/image-diff/compute.md"))
    assert len(kept) == 1, "the Markdown is not among the job's artifacts"
    markdown = kept[0].read_text()
    shown = str(boot).replace("_", "\\_")  # Markdown: underscores escaped in the heading
    assert markdown.startswith(f"### Image diff: compute v1 (served) in {shown} → localhost/")
    assert "<details><summary>Packages removed (2)</summary>" in markdown
    assert "- `hpc-difftest` 1.0-1\n- `hpc-difftest-old` 2.0" in markdown
    assert "Kernel command line: _empty_ → _unknown_" in markdown  # a layer image has none; not a change
    assert "Layers rebuilt: base  \nLayers removed: difftest  \nLayers added: " in markdown
