"""The project directory rule: where the stages write by default, never inside a collection install."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.hpc.stateless.plugins.module_utils._project import (
    inside_collection,
    project_dir,
    role_search_paths,
)


def tree(tmp_path: Path) -> dict[str, Path]:
    site = tmp_path / "site"
    (site / "playbooks").mkdir(parents=True)
    (site / "site.yml").write_text("---\n")
    (site / "playbooks" / "pack.yml").write_text("---\n")
    installed = tmp_path / "usr/share/ansible/collections/ansible_collections/hpc/stateless/playbooks"
    installed.mkdir(parents=True)
    return {"site": site, "installed": installed}


def test_the_top_level_playbook_names_the_project_even_when_it_imports_a_collection_playbook(tmp_path):
    paths = tree(tmp_path)
    # Ansible's playbook_dir in a playbook imported by FQCN is the collection's playbooks/ directory.
    assert project_dir(None, ["site.yml"], str(paths["installed"]), str(paths["site"])) == str(paths["site"])
    assert project_dir(None, [str(paths["site"] / "site.yml")], str(paths["installed"]), "/") == str(paths["site"])


def test_a_playbooks_directory_stands_for_its_parent(tmp_path):
    paths = tree(tmp_path)
    assert project_dir(None, ["playbooks/pack.yml"], str(paths["site"] / "playbooks"), str(paths["site"])) \
        == str(paths["site"])


def test_a_collection_playbook_run_by_its_fqcn_writes_into_the_current_directory(tmp_path):
    paths = tree(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    assert project_dir(None, ["hpc.stateless.site"], str(paths["installed"]), str(work)) == str(work)


def test_without_a_command_line_playbook_a_playbook_dir_outside_collections_counts(tmp_path):
    paths = tree(tmp_path)
    assert project_dir(None, [], str(paths["site"] / "playbooks"), "/") == str(paths["site"])


def test_the_setting_wins_and_is_made_absolute(tmp_path):
    paths = tree(tmp_path)
    assert project_dir("out", ["site.yml"], str(paths["installed"]), str(tmp_path)) == str(tmp_path / "out")


def test_inside_collection():
    assert inside_collection("/usr/share/ansible/collections/ansible_collections/hpc/stateless/playbooks")
    assert not inside_collection("/srv/site/playbooks")
    assert not inside_collection("/srv/ansible_collections")


def test_role_search_skips_the_collections_playbook_directory(tmp_path):
    paths = tree(tmp_path)
    found = role_search_paths(str(paths["site"]), ["playbooks/pack.yml"], str(paths["installed"]), str(paths["site"]))
    assert found == [str(paths["site"] / "playbooks/roles"), str(paths["site"] / "roles")]


def test_a_playbook_file_inside_a_collection_install_never_names_the_project(tmp_path):
    # ansible-playbook <install>/ansible_collections/hpc/stateless/playbooks/pack.yml, by its path.
    paths = tree(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    (paths["installed"] / "pack.yml").write_text("---\n")
    assert project_dir(None, [str(paths["installed"] / "pack.yml")], str(paths["installed"]), str(work)) == str(work)


def test_a_site_repository_named_playbooks_is_its_own_project(tmp_path):
    # git clone .../playbooks: the directory named playbooks is the repository, not a part of one.
    for marker in (".git", "ansible.cfg"):
        repo = tmp_path / marker.strip(".") / "playbooks"
        repo.mkdir(parents=True)
        (repo / "site.yml").write_text("---\n")
        (repo / marker).mkdir() if marker == ".git" else (repo / marker).write_text("[defaults]\n")
        assert project_dir(None, ["site.yml"], str(repo), str(repo)) == str(repo)
        assert role_search_paths(str(repo), ["site.yml"], str(repo), str(repo)) == [str(repo / "roles")]
