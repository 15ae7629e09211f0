"""Command lines of the layer lifecycle, without running buildah.

A fake executor (``_process.set_executor``) records argv and answers from a table: the
command line is tested here, the real runs are in tests/integration.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift, layer
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import container_name, layer_labels
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import (
    LayerBuilder,
    LayerError,
    commit_tmpdir,
    mounts_under,
)

KEY = "a" * 64
BUILDAH = "/usr/bin/buildah"


class FakeHost:
    """Stands in for the executor: records commands and environments, answers from ``replies``."""

    def __init__(self, replies: dict[tuple[str, ...], tuple[int, str, str]] | None = None) -> None:
        self.replies = replies or {}
        self.calls: list[list[str]] = []
        self.environ: list[dict[str, str]] = []

    # A working container's inspection: the host's ids (no user namespace), unless a test replies otherwise.
    DEFAULT_REPLIES = {(BUILDAH, "inspect", "--type", "container"): (0, "{}", "")}

    def __call__(self, argv, *, env, timeout, input, cwd, text):  # pylint: disable=redefined-builtin,unused-argument
        self.calls.append(list(argv))
        self.environ.append(env)
        # The longest matching prefix answers.
        replies = {**self.DEFAULT_REPLIES, **self.replies}
        for prefix, (rc, out, err) in sorted(replies.items(), key=lambda item: -len(item[0])):
            if tuple(argv[: len(prefix)]) == prefix:
                return _process.Result(argv, rc, out, err)
        return _process.Result(argv, 0, "", "")


@pytest.fixture
def host(monkeypatch):
    """Install a FakeHost (fill ``host.replies`` in the test); buildah resolves to /usr/bin/buildah."""
    fake = FakeHost()
    monkeypatch.setattr(_process, "which", lambda name, hint="": f"/usr/bin/{name}")
    old = _process.set_executor(fake)
    yield fake
    _process.set_executor(old)


@pytest.fixture(autouse=True)
def cache_root(monkeypatch, tmp_path):
    """The views of the package caches go below the test's directory, never the host's cache root."""
    root = tmp_path / "cache-root"
    monkeypatch.setattr(layer, "views_cache_root", lambda: str(root))
    return root


def builder(key: str | None = KEY) -> LayerBuilder:
    return LayerBuilder(Buildah(), "compute", key, "localhost/p")


def test_cache_hit_creates_nothing(host):
    result = builder().start("scratch", [], False)  # inspect answers rc=0: the keyed image exists
    assert result.cached and not result.changed
    assert [c[1] for c in host.calls] == ["inspect"]


def test_start_from_parent_uses_pull_never_and_names_container(host):
    host.replies = {
        (BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", f"localhost/p/compute:{KEY}"):
            (1, "", "no such image"),
        (BUILDAH, "containers"): (0, "[]", ""),
        (BUILDAH, "mount"): (0, "/var/lib/containers/storage/overlay/x/merged\n", ""),
    }
    result = builder().start("localhost/p/base:b", [], False)
    assert result.changed and result.mountpoint.endswith("/merged")
    assert [BUILDAH, "from", "--pull=never", "--quiet", "--name", container_name("localhost/p", "compute", KEY),
            "localhost/p/base:b"] in host.calls


def test_a_fresh_start_removes_the_layers_leftovers_of_every_key_then_builds_a_new_container(host):
    # The build starts every layer fresh (under its build lock): a killed run's container of this key, half built,
    # and one of an older key are removed, in the same module run; other layers' and prefixes' are kept.
    ours = [container_name("localhost/p", "compute", k) for k in (KEY, "1" * 64)]
    others = [container_name("localhost/p", "computer", "3" * 64), container_name("localhost/q", "compute", "4" * 64)]
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": n} for n in ours + others]), ""),
        (BUILDAH, "mount"): (0, "/var/lib/containers/storage/overlay/x/merged\n", ""),
    }
    result = builder().start("scratch", [], False, fresh=True)
    assert result.changed and result.removed == ours
    verbs = [c[1] for c in host.calls]
    assert [c[-1] for c in host.calls if c[1] == "rm"] == ours
    assert verbs.index("from") > max(i for i, v in enumerate(verbs) if v == "rm")
    assert not any(call[-1] in others for call in host.calls if call[1] in ("rm", "umount"))


def test_a_fresh_start_in_check_mode_names_the_leftovers_and_removes_nothing(host):
    leftover = container_name("localhost/p", "compute", "1" * 64)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": leftover}]), ""),
    }
    result = builder().start("scratch", [], True, fresh=True)
    assert result.removed == [leftover] and result.changed
    assert not [c for c in host.calls if c[1] in ("rm", "from", "mount")]


def test_a_missing_parent_is_refused_before_anything_is_created(host):
    host.replies = {(BUILDAH, "inspect"): (1, "", "no such image"), (BUILDAH, "containers"): (0, "[]", "")}
    with pytest.raises(LayerError, match="parent image localhost/p/base:b is not in local containers-storage"):
        builder().start("localhost/p/base:b", [], False)
    assert not [c for c in host.calls if c[1] == "from"]


def new_layer_replies(root) -> dict:
    """buildah's answers for a layer not built yet, no working container, mounted at ``root``."""
    return {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, "[]", ""),
        (BUILDAH, "mount"): (0, f"{root}\n", ""),
    }


def test_a_failed_cache_bind_removes_the_working_container(host, tmp_path, cache_root):
    root = tmp_path / "merged"
    (root / "var" / "cache" / "apt" / "archives").mkdir(parents=True)
    name = container_name("localhost/p", "compute", KEY)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, "[]", ""),
        (BUILDAH, "mount", name): (0, f"{root}\n", ""),
        ("mount", "--bind"): (32, "", "mount: permission denied"),
    }
    caches = [{"path": "/var/cache/apt/archives", "host_path": str(tmp_path / "apt")}]
    with pytest.raises(_process.ProcessError, match="permission denied"):
        builder().start("scratch", caches, False)
    view = cache_root / ".builds" / name / "0-apt"
    assert ["mount", "--bind", str(view), str(root / "var/cache/apt/archives")] in host.calls
    assert [BUILDAH, "rm", name] in host.calls
    assert not (cache_root / ".builds" / name).exists()  # the view went with its container


def test_a_build_binds_a_view_of_the_cache_and_merges_its_downloads_at_commit(host, tmp_path, cache_root):
    """Two builds never share apt's lock: each binds its own view, an overlay over hard links of the pool's files
    (tests/unit/plugins/module_utils/test_build_caches.py mounts it for real; here the mount is recorded)."""
    pool = tmp_path / "apt"
    (pool / "partial").mkdir(parents=True)
    (pool / "old_1_amd64.deb").write_text("old")
    (pool / "lock").write_text("")
    (pool / "partial" / "half_1_amd64.deb").write_text("ha")
    root = tmp_path / "merged"
    (root / "var" / "cache" / "apt" / "archives").mkdir(parents=True)
    (root / "var" / "cache" / "dnf").mkdir(parents=True)
    (root / "var" / "lib" / "apt" / "lists").mkdir(parents=True)
    (root / "var" / "lib" / "apt" / "lists" / "x_Packages").write_text("".join(
        f"Package: {p}\nVersion: {v}\nArchitecture: amd64\nSize: {len(d)}\nSHA256: {hashlib.sha256(d).hexdigest()}\n\n"
        for p, v, d in (("old", "1", b"old"), ("new", "2", b"new"))))
    name = container_name("localhost/p", "compute", KEY)
    host.replies = new_layer_replies(root)
    package_caches = [{"path": "/var/cache/apt/archives", "host_path": str(pool)},
                      {"path": "/var/cache/zypp/packages", "host_path": str(tmp_path / "zypp")}]  # not in the image
    builder().start("scratch", package_caches, False)
    view = cache_root / ".builds" / name / "0-apt"
    assert ["mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={view}.lower,upperdir={view}.upper,workdir={view}.work", str(view)] in host.calls
    assert ["mount", "--bind", str(view), str(root / "var/cache/apt/archives")] in host.calls
    lower = cache_root / ".builds" / name / "0-apt.lower"
    assert sorted(p.name for p in lower.iterdir()) == ["old_1_amd64.deb"]  # no lock file, no partial download
    assert (lower / "old_1_amd64.deb").stat().st_ino == (pool / "old_1_amd64.deb").stat().st_ino
    assert not (cache_root / ".builds" / name / "1-zypp").exists()

    (cache_root / ".builds" / name / "0-apt.upper" / "new_2_amd64.deb").write_text("new")  # what apt downloaded
    host.replies[(BUILDAH, "containers")] = (0, json.dumps([{"containername": name}]), "")
    builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert (pool / "new_2_amd64.deb").read_text() == "new"
    assert sorted(p.name for p in pool.iterdir() if not p.name.startswith(".")) == [
        "lock", "new_2_amd64.deb", "old_1_amd64.deb", "partial"]
    assert not (cache_root / ".builds" / name).exists()


def test_absent_removes_the_views_a_killed_build_left(host, cache_root):
    live = container_name("localhost/p", "compute", "1" * 64)
    gone = container_name("localhost/p", "compute", "2" * 64)  # killed: its container was removed by hand
    other = container_name("localhost/q", "compute", "1" * 64)
    for name in (live, gone, other):
        (cache_root / ".builds" / name / "0-apt").mkdir(parents=True)
    host.replies = {(BUILDAH, "containers"): (0, json.dumps([{"containername": live}]), "")}
    builder(None).absent(False)
    assert sorted(p.name for p in (cache_root / ".builds").iterdir()) == [other]


def test_commit_failure_removes_the_working_container(host, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    name = container_name("localhost/p", "compute", KEY)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": name}]), ""),
        (BUILDAH, "commit"): (1, "", "no space left on device"),
        (BUILDAH, "mount"): (0, "/nonexistent/merged\n", ""),
    }
    with pytest.raises(BuildahError, match="no space left"):
        builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert [BUILDAH, "rm", name] in host.calls


def test_a_root_layer_without_roles_commits_its_bootstrap_container_once_as_both_images(host, tmp_path, monkeypatch):
    """The bootstrap container (started under the bootstrap prefix and key) is committed as the layer, with the
    layer's labels, and the same image is tagged as the bootstrap image: one commit of the tree, not two."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    boot_key = "b" * 64
    boot = container_name("localhost/p/bootstrap", "base", boot_key)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": boot}]), ""),
        (BUILDAH, "mount"): (0, "/nonexistent/merged\n", ""),
        (BUILDAH, "commit"): (0, "sha256:1234\n", ""),
    }
    refs = [f"localhost/p/bootstrap/base:{boot_key}", "localhost/p/bootstrap/base:latest"]
    result = LayerBuilder(Buildah(), "base", KEY, "localhost/p", container=boot).commit(
        layer_labels("base", KEY, None, None, None), ["latest"], False, refs)
    assert result.changed and result.container == boot
    commits = [call for call in host.calls if call[1] == "commit"]
    assert len(commits) == 1
    assert commits[0][-2:] == [boot, f"localhost/p/base:{KEY}"]
    config = next(call for call in host.calls if call[1] == "config")
    assert f"hpc.stateless.key={KEY}" in config and config[-1] == boot
    assert [BUILDAH, "tag", f"localhost/p/base:{KEY}", "localhost/p/base:latest"] in host.calls
    assert [BUILDAH, "tag", f"localhost/p/base:{KEY}", *refs] in host.calls


def test_a_cache_hit_tags_the_missing_references_only(host):
    boot_ref = "localhost/p/bootstrap/base:" + "b" * 64
    host.replies = {
        (BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", boot_ref): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, "[]", ""),
    }
    result = LayerBuilder(Buildah(), "base", KEY, "localhost/p").commit({}, ["latest"], False,
                                                                        [boot_ref, "localhost/p/bootstrap/base:latest"])
    assert result.cached and result.changed
    assert [c for c in host.calls if c[1] in ("tag", "commit")] == [[BUILDAH, "tag", f"localhost/p/base:{KEY}", boot_ref]]
    host.calls.clear()
    host.replies = {(BUILDAH, "containers"): (0, "[]", "")}
    result = LayerBuilder(Buildah(), "base", KEY, "localhost/p").commit({}, ["latest"], True, [boot_ref])
    assert result.cached and not result.changed
    assert [c for c in host.calls if c[1] in ("tag", "commit")] == []


def test_commit_without_a_working_container_says_to_start_first(host):
    host.replies = {(BUILDAH, "inspect"): (1, "", "no such image"), (BUILDAH, "containers"): (0, "[]", "")}
    with pytest.raises(LayerError, match="run this module with state=started first"):
        builder().commit({}, [], False)


def test_absent_without_key_removes_the_layers_containers_of_this_prefix_only(host):
    ours = [container_name("localhost/p", "compute", k * 64) for k in "12"]
    others = [container_name("localhost/p", "computer", "3" * 64), container_name("localhost/q", "compute", "4" * 64)]
    host.replies = {(BUILDAH, "containers"): (0, json.dumps([{"containername": n} for n in ours + others]), "")}
    result = builder(None).absent(False)
    assert result.removed == ours
    assert [BUILDAH, "rm", ours[0]] in host.calls
    assert not any(call[-1] in others for call in host.calls)


def test_absent_releases_the_cache_binds_of_a_mounted_container_first(host, tmp_path, monkeypatch):
    name = container_name("localhost/p", "compute", KEY)
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda /m/merged/var/cache/apt/archives ext4 rw 0 0\n")
    monkeypatch.setattr(layer, "mounts_under", lambda root: mounts_under(root, str(mounts)))
    host.replies = {
        (BUILDAH, "containers"): (0, json.dumps([{"containername": name}]), ""),
        (BUILDAH, "mount"): (0, f"{name} /m/merged\nother /o/merged\n", ""),
        ("umount", "/m/merged/var/cache/apt/archives"): (32, "", "target is busy"),
    }
    builder().absent(False)
    commands = [c[:3] for c in host.calls if c[0] != BUILDAH or c[1] in ("umount", "rm")]
    assert commands == [["umount", "/m/merged/var/cache/apt/archives"], ["umount", "-l", "/m/merged/var/cache/apt/archives"],
                        [BUILDAH, "umount", name], [BUILDAH, "rm", name]]


def test_commit_runs_with_a_tmpdir_of_its_own_and_removes_it(host, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    name = container_name("localhost/p", "compute", KEY)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": name}]), ""),
        (BUILDAH, "mount"): (0, "/nonexistent/merged\n", ""),
    }
    builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    commit = next(i for i, call in enumerate(host.calls) if call[1] == "commit")
    assert host.environ[commit]["TMPDIR"] == str(tmp_path / "hpc-stateless-commit" / name) == commit_tmpdir(name)
    assert not (tmp_path / "hpc-stateless-commit" / name).exists()


def test_absent_removes_what_a_killed_commit_left_in_its_tmpdir(host, tmp_path, monkeypatch):
    """buildah's temp copies of the layer diff stay when a commit is killed; the next run's cleanup removes them."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    live = container_name("localhost/p", "compute", "1" * 64)
    gone = container_name("localhost/p", "compute", "2" * 64)  # its container was removed, its tmpdir was not
    other = container_name("localhost/q", "compute", "1" * 64)
    for name in (live, gone, other):
        (tmp_path / "hpc-stateless-commit" / name / "buildah123").mkdir(parents=True)
    host.replies = {(BUILDAH, "containers"): (0, json.dumps([{"containername": live}]), "")}
    result = builder(None).absent(False)
    assert result.removed == [live]
    assert sorted(p.name for p in (tmp_path / "hpc-stateless-commit").iterdir()) == [other]


def test_labels_carry_key_parent_and_commit():
    labels = layer_labels("compute", KEY, "base", "b" * 64, "v1-3-gabc", {"site": "x"})
    assert labels["hpc.stateless.key"] == KEY and labels["hpc.stateless.parent"] == "base"
    assert labels["hpc.stateless.git-commit"] == "v1-3-gabc" and labels["site"] == "x"


def test_mounts_under_lists_deepest_first(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "overlay /m/merged overlay rw 0 0\n"
        "/dev/vda /m/merged/var/cache/apt/archives ext4 rw 0 0\n"
        "/dev/vda /m/merged/var ext4 rw 0 0\n"
        "/dev/vda /m/mergedother ext4 rw 0 0\n")
    assert mounts_under("/m/merged", str(mounts)) == ["/m/merged/var/cache/apt/archives", "/m/merged/var"]


def test_apt_builds_with_the_builds_configuration_and_the_image_keeps_none_of_it(host, tmp_path, monkeypatch):
    """started writes _build/aptconf.py's file; committed removes it and apt's package cache before the tree is
    recorded and committed, so neither is in the image (issue 29: stale after every install); the parsed lists
    (srcpkgcache.bin) stay for the children."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = tmp_path / "merged"
    (root / "etc" / "apt" / "apt.conf.d").mkdir(parents=True)
    (root / "var" / "cache" / "apt").mkdir(parents=True)
    name = container_name("localhost/p", "compute", KEY)
    host.replies = new_layer_replies(root)
    builder().start("scratch", [], False)
    conf = root / "etc" / "apt" / "apt.conf.d" / "00hpc-stateless-build"
    assert conf.is_file()
    (root / "var" / "cache" / "apt" / "pkgcache.bin").write_bytes(b"cache")  # what apt wrote in the build
    (root / "var" / "cache" / "apt" / "srcpkgcache.bin").write_bytes(b"lists")
    seen = []
    monkeypatch.setattr(layer.records, "read_records",
                        lambda mount: seen.append(sorted(os.listdir(os.path.join(mount, "var/cache/apt")))) or {})
    host.replies[(BUILDAH, "containers")] = (0, json.dumps([{"containername": name}]), "")
    builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert seen == [["srcpkgcache.bin"]]  # the package cache gone before the tree was recorded
    assert not conf.exists()
    assert any(call[:2] == [BUILDAH, "commit"] for call in host.calls)


def test_the_build_connections_ansible_tmp_is_no_part_of_the_image(host, tmp_path, monkeypatch):
    """committed removes /root/.ansible/tmp (the build connection's remote_tmp, a killed task's payload in it)
    before the tree is committed, and keeps the empty /root/.ansible (a run-time place of the drift check); a task
    of the roles could not, since the connection makes it again for each task (the seal was not idempotent under
    Molecule)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = tmp_path / "merged"
    (root / "etc").mkdir(parents=True)
    payload = root / "root" / ".ansible" / "tmp" / "ansible-tmp-1795924660.4-77-1"
    payload.mkdir(parents=True)
    (payload / "AnsiballZ_apt.py").write_text("killed mid-run\n")
    name = container_name("localhost/p", "compute", KEY)
    host.replies = new_layer_replies(root)
    builder().start("scratch", [], False)
    seen = []
    monkeypatch.setattr(layer.records, "read_records", lambda mount: seen.append(sorted(os.listdir(
        os.path.join(mount, "root")))) or {})
    host.replies[(BUILDAH, "containers")] = (0, json.dumps([{"containername": name}]), "")
    builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert seen == [[".ansible"]]  # its tmp gone before the tree was recorded and committed
    assert os.listdir(root / "root" / ".ansible") == []
    assert any(call[:2] == [BUILDAH, "commit"] for call in host.calls)


@pytest.mark.parametrize("parent,has_cache,userns,parsed", [
    (None, False, False, True),  # a bootstrapped root: parsed once, for every child
    (None, True, False, False),  # a root whose roles ran apt already wrote it
    ("base", False, False, False),  # a child never writes a copy its parent lacks
    # A mapped build's bootstrap container is not mapped: the tree's apt-cache would run as host root (the rootfs
    # module parsed the lists in its user namespace).
    (None, False, True, False),
])
def test_a_root_layer_commits_its_apt_lists_parsed(host, tmp_path, monkeypatch, parent, has_cache, userns, parsed):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = tmp_path / "merged"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "apt-cache").write_text("#!/bin/sh\n")
    (root / "var" / "lib" / "apt" / "lists").mkdir(parents=True)
    (root / "var" / "lib" / "apt" / "lists" / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages"
     ).write_text("Package: a\n")
    (root / "var" / "cache" / "apt").mkdir(parents=True)
    if has_cache:
        (root / "var" / "cache" / "apt" / "srcpkgcache.bin").write_bytes(b"lists")
    name = container_name("localhost/p", "compute", KEY)
    host.replies = new_layer_replies(root)
    builder().start("scratch", [], False)
    monkeypatch.setattr(layer.records, "read_records", lambda mount: {})
    host.replies[(BUILDAH, "containers")] = (0, json.dumps([{"containername": name}]), "")
    monkeypatch.setattr(layer.rootless, "is_rootless", lambda: False)
    builder().commit(layer_labels("compute", KEY, parent, "b" if parent else None, "abc"), [], False, userns=userns)
    runs = [call for call in host.calls if call[1] == "run"]
    assert runs == ([[BUILDAH, "run", name, "--", "apt-cache", "gencaches"]] if parsed else [])
    assert any(call[:2] == [BUILDAH, "commit"] for call in host.calls)


def test_a_commit_tmpdir_another_user_made_first_is_refused_and_nothing_is_written_there(host, tmp_path, monkeypatch):
    """$TMPDIR/hpc-stateless-commit has a fixed name in a directory every user can write: made first by another
    user (here: given to uid 65534), root neither commits into it nor removes anything below it."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    name = container_name("localhost/p", "compute", KEY)
    planted = tmp_path / "hpc-stateless-commit"
    (planted / name / "keep").mkdir(parents=True)
    os.chown(planted, 65534, 65534)
    host.replies = {
        (BUILDAH, "inspect"): (1, "", "no such image"),
        (BUILDAH, "containers"): (0, json.dumps([{"containername": name}]), ""),
        (BUILDAH, "mount"): (0, "/nonexistent/merged\n", ""),
    }
    with pytest.raises(LayerError, match=f"{planted} belongs to uid 65534, not to this user .*; or set TMPDIR"):
        builder().commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert not any(call[1] == "commit" for call in host.calls)
    assert [BUILDAH, "rm", name] in host.calls  # the working container goes, as after any failed commit
    assert (planted / name / "keep").is_dir()  # nothing below another user's directory is removed


def test_a_start_in_a_user_namespace_maps_roots_subordinate_range_and_a_scratch_start_does_not(
        host, monkeypatch, tmp_path):
    ranges = (idshift.IdRange(165536, 65536), idshift.IdRange(300000, 65536))
    monkeypatch.setattr(idshift, "root_ranges", lambda: ranges)
    monkeypatch.setattr(layer.rootless, "is_rootless", lambda: False)
    merged = tmp_path / "merged"
    merged.mkdir(mode=0o555)
    host.replies = {
        (BUILDAH, "inspect", "--type", "image"): (1, "", "no such image"),
        (BUILDAH, "inspect", "--type", "image", "--format", "{{.FromImageID}}", "localhost/p/base:b"): (0, "x", ""),
        (BUILDAH, "containers"): (0, "[]", ""),
        (BUILDAH, "mount"): (0, f"{merged}\n", ""),
    }
    builder().start("localhost/p/base:b", [], False, userns=True)
    assert [BUILDAH, "from", "--pull=never", "--quiet", "--userns-uid-map", "0:165536:65536", "--userns-gid-map",
            "0:300000:65536", "--name", container_name("localhost/p", "compute", KEY), "localhost/p/base:b"] \
        in host.calls
    # The tree's "/" (the upper directory, host root's as containers-storage makes it) is the mapped root's.
    assert (merged.stat().st_uid, merged.stat().st_gid) == (165536, 300000)
    os.chown(merged, 0, 0)
    host.calls.clear()
    builder().start("scratch", [], False, userns=True)
    assert not [c for c in host.calls if "--userns-uid-map" in c]
    # A rootless build (buildah unshare): container root is the user already.
    monkeypatch.setattr(layer.rootless, "is_rootless", lambda: True)
    host.calls.clear()
    builder().start("localhost/p/base:b", [], False, userns=True)
    assert [c for c in host.calls if c[1] == "from"] and not [c for c in host.calls if "--userns-uid-map" in c]
    assert merged.stat().st_uid == 0  # neither a scratch nor a rootless start gives "/" away


def test_root_without_a_subordinate_range_is_refused_naming_the_line(host, monkeypatch):
    def missing():
        raise idshift.IdShiftError("add the line 'root:165536:65536' to /etc/subuid")
    monkeypatch.setattr(idshift, "root_ranges", missing)
    monkeypatch.setattr(layer.rootless, "is_rootless", lambda: False)
    with pytest.raises(LayerError, match="layer compute: add the line 'root:165536:65536' to /etc/subuid"):
        builder().start("localhost/p/base:b", [], False, userns=True)
    assert not [c for c in host.calls if c[1] == "from"]
