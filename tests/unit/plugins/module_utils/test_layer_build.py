"""Command lines of the buildah client and the layer lifecycle, without running buildah.

A fake ``run_command`` records argv and answers from a table: the command line is tested
here, the real runs are in tests/integration.
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils.build.buildah import (
    Buildah,
    BuildahError,
    container_name,
    container_stem,
    image_ref,
)
from ansible_collections.hpc.stateless.plugins.module_utils.build.layer import (
    LayerBuilder,
    commit_tmpdir,
    layer_labels,
    mounts_under,
)

KEY = "a" * 64


class FakeModule:
    """Stands in for AnsibleModule: records commands, answers from ``replies``."""

    def __init__(self, replies: dict[tuple[str, ...], tuple[int, str, str]] | None = None) -> None:
        self.replies = replies or {}
        self.calls: list[list[str]] = []
        self.environ: list[dict[str, str]] = []

    def get_bin_path(self, name, required=False):
        return f"/usr/bin/{name}"

    def run_command(self, argv, environ_update=None):
        self.calls.append(list(argv))
        self.environ.append(environ_update or {})
        for prefix, reply in self.replies.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return reply
        return 0, "", ""

    def fail_json(self, **kwargs):
        raise RuntimeError(kwargs["msg"])


def test_names_are_derived_from_prefix_layer_and_key():
    name = container_name("localhost/p", "compute", KEY)
    assert re.fullmatch(r"hpc-stateless-compute-[0-9a-f]{6}-aaaaaaaaaaaa", name)
    assert container_name("localhost/p/", "compute", KEY) == name
    assert container_name("localhost/q", "compute", KEY) != name
    assert name.startswith(container_stem("localhost/p", "compute"))
    assert image_ref("localhost/hpc-stateless/", "compute", KEY) == f"localhost/hpc-stateless/compute:{KEY}"


def test_buildah_runs_with_chroot_isolation_by_default(monkeypatch):
    monkeypatch.delenv("BUILDAH_ISOLATION", raising=False)
    module = FakeModule()
    Buildah(module).run("images")
    assert module.environ[-1]["BUILDAH_ISOLATION"] == "chroot"
    assert module.environ[-1]["LANG"] == "C"


def test_environment_isolation_wins_over_default(monkeypatch):
    monkeypatch.setenv("BUILDAH_ISOLATION", "oci")
    module = FakeModule()
    Buildah(module).run("images")
    assert module.environ[-1]["BUILDAH_ISOLATION"] == "oci"


def test_layer_images_skips_an_image_removed_between_listing_and_inspect():
    listing = json.dumps([{"id": "gone", "names": ["localhost/p/a:1"]}, {"id": "kept", "names": ["localhost/p/b:2"]}])
    kept = json.dumps({"OCIv1": {"config": {"Labels": {"hpc.stateless.layer": "b"}}}})
    module = FakeModule({
        ("/usr/bin/buildah", "images"): (0, listing, ""),
        ("/usr/bin/buildah", "inspect", "--type", "image", "gone"): (125, "", "Error: gone: image not known"),
        ("/usr/bin/buildah", "inspect", "--type", "image", "kept"): (0, kept, ""),
    })
    assert Buildah(module).layer_images() == [
        {"id": "kept", "names": ["localhost/p/b:2"], "labels": {"hpc.stateless.layer": "b"}}]


def test_layer_images_raises_on_other_inspect_errors():
    module = FakeModule({
        ("/usr/bin/buildah", "images"): (0, json.dumps([{"id": "x", "names": []}]), ""),
        ("/usr/bin/buildah", "inspect"): (125, "", "Error: storage is corrupt"),
    })
    with pytest.raises(BuildahError, match="storage is corrupt"):
        Buildah(module).layer_images()


def test_failed_command_raises_with_argv_and_stderr():
    module = FakeModule({("/usr/bin/buildah", "from"): (125, "", "image not known")})
    with pytest.raises(BuildahError) as info:
        Buildah(module).from_image("localhost/x:1", "c")
    assert "image not known" in str(info.value)
    assert info.value.argv[:2] == ["/usr/bin/buildah", "from"]


def test_cache_hit_creates_nothing():
    module = FakeModule()  # inspect answers rc=0: the keyed image exists
    result = LayerBuilder(module, Buildah(module), "compute", KEY, "localhost/p").start("scratch", [], False)
    assert result.cached and not result.changed
    assert [c[1] for c in module.calls] == ["inspect"]


def test_start_from_parent_uses_pull_never_and_names_container():
    module = FakeModule({
        ("/usr/bin/buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", f"localhost/p/compute:{KEY}"):
            (1, "", "no such image"),
        ("/usr/bin/buildah", "containers"): (0, "[]", ""),
        ("/usr/bin/buildah", "mount"): (0, "/var/lib/containers/storage/overlay/x/merged\n", ""),
    })
    result = LayerBuilder(module, Buildah(module), "compute", KEY, "localhost/p").start("localhost/p/base:b", [], False)
    assert result.changed and result.mountpoint.endswith("/merged")
    assert ["/usr/bin/buildah", "from", "--pull=never", "--quiet", "--name", container_name("localhost/p", "compute", KEY),
            "localhost/p/base:b"] in module.calls


def test_commit_failure_removes_the_working_container(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    name = container_name("localhost/p", "compute", KEY)
    module = FakeModule({
        ("/usr/bin/buildah", "inspect"): (1, "", "no such image"),
        ("/usr/bin/buildah", "containers"): (0, json.dumps([{"containername": name}]), ""),
        ("/usr/bin/buildah", "commit"): (1, "", "no space left on device"),
        ("/usr/bin/buildah", "mount"): (0, "/nonexistent/merged\n", ""),
    })
    builder = LayerBuilder(module, Buildah(module), "compute", KEY, "localhost/p")
    with pytest.raises(BuildahError, match="no space left"):
        builder.commit(layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    assert ["/usr/bin/buildah", "rm", name] in module.calls


def test_absent_without_key_removes_the_layers_containers_of_this_prefix_only():
    ours = [container_name("localhost/p", "compute", k * 64) for k in "12"]
    others = [container_name("localhost/p", "computer", "3" * 64), container_name("localhost/q", "compute", "4" * 64)]
    module = FakeModule({("/usr/bin/buildah", "containers"): (0, json.dumps(
        [{"containername": n} for n in ours + others]), "")})
    result = LayerBuilder(module, Buildah(module), "compute", None, "localhost/p").absent(False)
    assert result.removed == ours
    assert ["/usr/bin/buildah", "rm", ours[0]] in module.calls
    assert not any(call[-1] in others for call in module.calls)


def test_commit_runs_with_a_tmpdir_of_its_own_and_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    name = container_name("localhost/p", "compute", KEY)
    module = FakeModule({
        ("/usr/bin/buildah", "inspect"): (1, "", "no such image"),
        ("/usr/bin/buildah", "containers"): (0, json.dumps([{"containername": name}]), ""),
        ("/usr/bin/buildah", "mount"): (0, "/nonexistent/merged\n", ""),
    })
    LayerBuilder(module, Buildah(module), "compute", KEY, "localhost/p").commit(
        layer_labels("compute", KEY, "base", "b", "abc"), [], False)
    commit = next(i for i, call in enumerate(module.calls) if call[1] == "commit")
    assert module.environ[commit]["TMPDIR"] == str(tmp_path / "hpc-stateless-commit" / name) == commit_tmpdir(name)
    assert not (tmp_path / "hpc-stateless-commit" / name).exists()


def test_absent_removes_what_a_killed_commit_left_in_its_tmpdir(tmp_path, monkeypatch):
    """buildah's temp copies of the layer diff stay when a commit is killed; the next run's cleanup removes them."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    live = container_name("localhost/p", "compute", "1" * 64)
    gone = container_name("localhost/p", "compute", "2" * 64)  # its container was removed, its tmpdir was not
    other = container_name("localhost/q", "compute", "1" * 64)
    for name in (live, gone, other):
        (tmp_path / "hpc-stateless-commit" / name / "buildah123").mkdir(parents=True)
    module = FakeModule({("/usr/bin/buildah", "containers"): (0, json.dumps([{"containername": live}]), "")})
    result = LayerBuilder(module, Buildah(module), "compute", None, "localhost/p").absent(False)
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
