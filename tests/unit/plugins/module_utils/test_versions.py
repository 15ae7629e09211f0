"""The default version of a pack names its content (_contract/versions.py, _git.version_facts)."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError, check_name
from ansible_collections.hpc.stateless.plugins.module_utils._contract.versions import (
    VersionFacts,
    build_difference,
    default_version,
    version_note,
)
from ansible_collections.hpc.stateless.plugins.module_utils._git import version_facts

KEY_A = "5d41a2b3c4d5" + "e" * 52
KEY_B = "0f00ba47c0de" + "1" * 52


def test_a_clean_tree_that_builds_the_image_is_named_by_its_describe():
    assert default_version(VersionFacts("v7"), KEY_A) == "v7"
    assert default_version(VersionFacts("v7-3-g3f2a9c0d1e4b"), KEY_A) == "v7-3-g3f2a9c0d1e4b"


def test_otherwise_the_version_carries_the_leaf_layer_key():
    facts = VersionFacts("v7", "the work tree differs from v7 (inventory/group_vars/all/zz.yml)")
    assert default_version(facts, KEY_A) == "v7+5d41a2b3c4d5"
    assert default_version(facts, KEY_B) == "v7+0f00ba47c0de"  # another build, another name
    assert default_version(facts, KEY_A) == default_version(facts, KEY_A)  # the same content, the same name
    assert default_version(VersionFacts("", "the project is not a git work tree"), KEY_A) == "5d41a2b3c4d5"


def test_the_versions_are_valid_names_and_sort_between_the_commit_and_the_next():
    dirty = default_version(VersionFacts("v7", "edited"), KEY_A)
    assert check_name("version", dirty) == dirty
    assert sorted(["v7-1-g3f2a9c0d1e4b", dirty, "v7"]) == ["v7", dirty, "v7-1-g3f2a9c0d1e4b"]


def test_a_describe_too_long_for_a_name_is_refused_by_the_name_rule():
    with pytest.raises(ArtifactError, match="is not a valid name"):
        default_version(VersionFacts("v" * 120, "edited"), KEY_A)
    with pytest.raises(ValueError, match="too short"):
        default_version(VersionFacts("v7", "edited"), "abc")


def test_the_note_says_why():
    assert "what that commit builds" in version_note(VersionFacts("v7"))
    assert version_note(VersionFacts("v7", "a.yml is outside the repository")).startswith(
        "versions are 'v7'+<leaf layer key>: a.yml is outside the repository")


MANIFEST = {"source": {"image": "localhost/p/slurm:" + KEY_A, "image_id": "1" * 64}, "layer": "slurm",
            "layer_keys": {"slurm": KEY_A}, "options": {"kernel_args": "console=ttyS0", "formats": ["cpio.zst"]}}


def test_the_same_build_has_no_difference():
    assert build_difference(MANIFEST, dict(MANIFEST["source"]), dict(MANIFEST["options"]), KEY_A) == []


def test_another_image_or_other_options_are_another_build():
    other = {"image": "localhost/p/slurm:" + KEY_B, "image_id": "2" * 64}
    found = build_difference(MANIFEST, other, {**MANIFEST["options"], "kernel_args": "quiet"}, KEY_B)
    assert found[0] == (f"it was packed from localhost/p/slurm:{KEY_A} ({'1' * 19}, layer key 5d41a2b3c4d5), this pack "
                        f"is of localhost/p/slurm:{KEY_B} ({'2' * 19}, layer key 0f00ba47c0de)")
    assert found[1] == "pack options differ: kernel_args"


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "site"
    (root / "inventory/group_vars/all").mkdir(parents=True)
    (root / "roles/motd/tasks").mkdir(parents=True)
    (root / "inventory/group_vars/all/layers.yml").write_text("a: 1\n")
    (root / "roles/motd/tasks/main.yml").write_text("---\n")
    (root / ".gitignore").write_text("build/\nlocal*.yml\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "site")
    git(root, "tag", "-a", "v7", "-m", "release")
    return root


def inputs(root):
    return [str(root / "inventory"), str(root / "roles/motd")]


def test_git_facts_of_a_clean_tree(repo):
    assert version_facts(str(repo), inputs(repo)) == ("v7", "")


def test_an_edit_of_a_tracked_file_or_an_untracked_vars_file_is_inexact(repo):
    (repo / "inventory/group_vars/all/layers.yml").write_text("a: 2\n")
    describe, inexact = version_facts(str(repo), inputs(repo))
    assert (describe, inexact) == ("v7", "the work tree differs from v7 (inventory/group_vars/all/layers.yml)")
    git(repo, "checkout", "--", "inventory/group_vars/all/layers.yml")
    (repo / "inventory/group_vars/all/zz.yml").write_text("a: 3\n")
    assert version_facts(str(repo), inputs(repo))[1] == "the work tree differs from v7 (inventory/group_vars/all/zz.yml)"


def test_an_ignored_vars_file_among_the_inputs_is_inexact_elsewhere_not(repo):
    (repo / "build").mkdir()
    (repo / "build/out.txt").write_text("x")
    assert version_facts(str(repo), inputs(repo)) == ("v7", "")
    (repo / "inventory/group_vars/all/local.yml").write_text("a: 4\n")
    assert version_facts(str(repo), inputs(repo))[1] == (
        "ignored files are inputs of the image (inventory/group_vars/all/local.yml)")


def test_an_inventory_outside_the_repository_is_inexact(repo, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    assert version_facts(str(repo), [*inputs(repo), str(tmp_path / "elsewhere")])[1] == (
        f"{tmp_path / 'elsewhere'} is outside the repository {repo}")


def test_outside_git_there_is_no_describe(tmp_path):
    assert version_facts(str(tmp_path), []) == ("", "the project is not a git work tree")
