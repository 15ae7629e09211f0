# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The buildah client: the command line of every method, its environment, errors and names.

Each row of ``CASES`` calls one method with canned output from a fake executor and states the
argv buildah must get and what the method must return; the real runs are in tests/integration.
"""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build import buildah as buildah_module
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah, BuildahError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import (
    LABEL_PREFIX,
    container_name,
    container_owner,
    container_stem,
    image_prefix_of,
    image_ref,
    layer_keys_of,
    owner_instance,
)

B = "/usr/bin/buildah"
LABELS = {"hpc.stateless.layer": "base"}
INSPECT = json.dumps({"FromImageID": "abc", "OCIv1": {"config": {"Labels": LABELS}}})


class Executor:
    """Answers each command with the next canned (rc, stdout, stderr); records argv and environment."""

    def __init__(self, *replies: tuple[int, str, str]) -> None:
        self.replies = list(replies)
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []

    def __call__(self, argv, *, env, timeout, input, cwd, text):  # pylint: disable=redefined-builtin,unused-argument
        self.calls.append(argv)
        self.envs.append(env)
        rc, out, err = self.replies.pop(0) if self.replies else (0, "", "")
        return _process.Result(argv, rc, out, err)


@pytest.fixture
def executor(monkeypatch):
    def install(*replies):
        fake = Executor(*replies)
        _process.set_executor(fake)
        return fake

    monkeypatch.setattr(_process, "which", lambda name, hint="": f"/usr/bin/{name}")
    yield install
    _process.set_executor(None)


# method, arguments, canned replies, expected argv of each call, expected return value
CASES = [
    ("image_exists", ("localhost/p/base:k",), [(0, "abc\n", "")],
     [[B, "inspect", "--type", "image", "--format", "{{.FromImageID}}", "localhost/p/base:k"]], True),
    ("image_exists", ("localhost/p/base:k",), [(125, "", "image not known")],
     [[B, "inspect", "--type", "image", "--format", "{{.FromImageID}}", "localhost/p/base:k"]], False),
    ("image_id", ("r",), [(0, "sha\n", "")], [[B, "inspect", "--type", "image", "--format", "{{.FromImageID}}", "r"]],
     "sha"),
    ("image_labels", ("r",), [(0, INSPECT, "")], [[B, "inspect", "--type", "image", "r"]], LABELS),
    ("inspect_image", ("r",), [(0, INSPECT, "")], [[B, "inspect", "--type", "image", "r"]], json.loads(INSPECT)),
    ("tag", ("r", "n1", "n2"), [], [[B, "tag", "r", "n1", "n2"]], None),
    ("rmi", ("r",), [(1, "", "image in use")], [[B, "rmi", "r"]], False),
    ("containers", (), [(0, json.dumps([{"containername": "c"}]), "")], [[B, "containers", "--json"]],
     [{"containername": "c"}]),
    ("container_names", ("hpc-stateless-a-",),
     [(0, json.dumps([{"containername": n} for n in ("hpc-stateless-a-1", "hpc-stateless-ab-2", "x")]), "")],
     [[B, "containers", "--json"]], ["hpc-stateless-a-1"]),
    ("container_exists", ("c1",), [(0, json.dumps([{"containername": "c10"}]), "")], [[B, "containers", "--json"]],
     False),
    ("from_image", ("localhost/p/base:k", "c"), [(0, "c\n", "")],
     [[B, "from", "--pull=never", "--quiet", "--name", "c", "localhost/p/base:k"]], "c"),
    ("mount", ("c",), [(0, "/var/lib/containers/storage/overlay/x/merged\n", "")], [[B, "mount", "c"]],
     "/var/lib/containers/storage/overlay/x/merged"),
    ("mounts", (), [(0, "c1 /m/1\nc2 /m/2\n", "")], [[B, "mount"]], {"c1": "/m/1", "c2": "/m/2"}),
    ("mounts", (), [(125, "", "storage busy")], [[B, "mount"]], {}),
    ("remove", ("c",), [(125, "", "not mounted"), (125, "", "container not known")], [[B, "umount", "c"], [B, "rm", "c"]],
     None),
    ("config_labels", ("c", {"b": "2", "a": "1"}), [], [[B, "config", "--label", "a=1", "--label", "b=2", "c"]], None),
    ("config_labels", ("c", {}), [], [], None),
    ("config_arch", ("c", "arm64"), [], [[B, "config", "--arch", "arm64", "--variant", "v8", "c"]], None),
    ("config_arch", ("c", "amd64"), [], [[B, "config", "--arch", "amd64", "c"]], None),
    ("push_manifest_list", ("l", ["p/base:k1", "p/base-arm64:k2"], "reg/hpc/base:t", False),
     [(1, "", ""), (0, "", ""), (0, "", ""), (0, "", ""), (0, "", ""), (0, "", "")],
     [[B, "manifest", "exists", "l"], [B, "manifest", "create", "l"],
      [B, "manifest", "add", "l", "containers-storage:p/base:k1"],
      [B, "manifest", "add", "l", "containers-storage:p/base-arm64:k2"],
      [B, "manifest", "push", "--all", "--quiet", "--tls-verify=false", "l", "docker://reg/hpc/base:t"],
      [B, "manifest", "rm", "l"]], None),
    ("commit", ("c", "localhost/p/base:k"), [(0, "Getting image source\nsha256\n", "")],
     [[B, "commit", "--quiet", "--rm", "c", "localhost/p/base:k"]], "sha256"),
    ("pull", ("reg:5000/hpc/base:k", False, "/auth.json"), [(0, "id\n", "")],
     [[B, "pull", "--quiet", "--tls-verify=false", "--authfile", "/auth.json", "docker://reg:5000/hpc/base:k"]], "id"),
    ("push", ("localhost/p/base:k", "reg/hpc/base:k"), [],
     [[B, "push", "--quiet", "--tls-verify=true", "localhost/p/base:k", "docker://reg/hpc/base:k"]], None),
]


@pytest.mark.parametrize("method, args, replies, argvs, expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_argv_and_result(executor, method, args, replies, argvs, expected):
    fake = executor(*replies)
    assert getattr(Buildah(), method)(*args) == expected
    assert fake.calls == argvs


def test_run_in_passes_volumes_and_environment_before_the_container(executor):
    fake = executor()
    Buildah().run_in("c", ["dracut", "--kver", "6.1"], volumes={"/out": "/run/out"}, environment={"SOURCE_DATE_EPOCH": "1"})
    assert fake.calls == [[B, "run", "--volume", "/out:/run/out", "--env", "SOURCE_DATE_EPOCH=1", "c", "--",
                           "dracut", "--kver", "6.1"]]


def test_storage_options_come_first(executor):
    fake = executor()
    Buildah(storage_root="/srv/storage", storage_runroot="/run/s").rm("c")
    assert fake.calls == [[B, "--root", "/srv/storage", "--runroot", "/run/s", "rm", "c"]]


def test_commit_gets_its_tmpdir_in_the_environment(executor):
    fake = executor()
    Buildah().commit("c", "r", tmpdir="/var/tmp/x")
    assert fake.envs[0]["TMPDIR"] == "/var/tmp/x"


@pytest.mark.parametrize("given, environment, expected", [
    (None, None, "chroot"), (None, "oci", "oci"), ("rootless", "oci", "rootless")])
def test_isolation_is_the_callers_then_the_environments_then_chroot(executor, monkeypatch, given, environment, expected):
    if environment:
        monkeypatch.setenv("BUILDAH_ISOLATION", environment)
    else:
        monkeypatch.delenv("BUILDAH_ISOLATION", raising=False)
    fake = executor()
    client = Buildah(isolation=given)
    client.run("images")
    assert fake.envs[0]["BUILDAH_ISOLATION"] == expected == client.env["BUILDAH_ISOLATION"]
    assert fake.envs[0]["LANG"] == fake.envs[0]["LC_ALL"] == "C"


def test_a_failure_is_a_process_error_with_argv_and_stderr(executor):
    executor((125, "", "Error: image not known\n"))
    with pytest.raises(BuildahError) as info:
        Buildah().from_image("localhost/x:1", "c")
    assert isinstance(info.value, _process.ProcessError)
    assert info.value.argv[:2] == [B, "from"] and info.value.rc == 125 and info.value.gone
    assert "image not known" in str(info.value)


def test_run_without_check_returns_the_failure(executor):
    executor((2, "", "bad"))
    result = Buildah().run("rm", "c", check=False)
    assert (result.rc, result.stderr) == (2, "bad")


@pytest.fixture(autouse=True)
def labels_cache(monkeypatch, tmp_path):
    """The labels cache of layer_images goes below the test's directory, never the host's cache root."""
    path = tmp_path / "cache" / "image-labels.json"
    monkeypatch.setattr(buildah_module, "labels_cache_path", lambda: str(path))
    return path


def test_missing_buildah_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    client = Buildah(executable=str(tmp_path / "buildah"))  # building the client never fails
    with pytest.raises(_process.ToolMissing, match="apt-get install buildah"):
        client.containers()


def test_layer_images_skips_an_image_removed_between_listing_and_inspect(executor):
    listing = json.dumps([{"id": "gone", "names": ["localhost/p/a:1"]}, {"id": "kept", "names": ["localhost/p/b:2"], "created": 7}])
    fake = executor((0, listing, ""), (125, "", "Error: gone: image not known"), (0, INSPECT, ""))
    assert Buildah().layer_images() == [{"id": "kept", "names": ["localhost/p/b:2"], "labels": LABELS, "created": 7}]
    assert fake.calls[0] == [B, "images", "--json", "--filter", f"label={LABEL_PREFIX}layer"]


def test_layer_images_raises_on_other_inspect_errors(executor):
    executor((0, json.dumps([{"id": "x", "names": []}]), ""), (125, "", "Error: storage is corrupt"))
    with pytest.raises(BuildahError, match="storage is corrupt"):
        Buildah().layer_images()


def test_layer_images_inspects_each_image_id_once_and_forgets_removed_ones(executor, labels_cache):
    """An ID is the digest of the image's configuration, labels included: a later listing needs no inspect."""
    two = json.dumps([{"id": "i1", "names": ["localhost/p/a:1"], "created": 1},
                      {"id": "i2", "names": ["localhost/p/b:2"], "created": 2}])
    fake = executor((0, two, ""), (0, INSPECT, ""), (0, INSPECT, ""))
    first = Buildah().layer_images()
    assert [c[1] for c in fake.calls] == ["images", "inspect", "inspect"]
    assert json.loads(labels_cache.read_text()) == {"i1": LABELS, "i2": LABELS}

    one = json.dumps([{"id": "i2", "names": ["localhost/p/b:2", "localhost/p/b:latest"], "created": 2}])
    fake = executor((0, one, ""))
    assert Buildah().layer_images() == [{"id": "i2", "names": ["localhost/p/b:2", "localhost/p/b:latest"],
                                         "labels": LABELS, "created": 2}]
    assert [c[1] for c in fake.calls] == ["images"]  # the names come from the listing, the labels from the cache
    assert first[1]["labels"] == LABELS
    assert json.loads(labels_cache.read_text()) == {"i2": LABELS}  # i1 was removed: it left the cache


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"i1": "no labels"}', '{"i1": {"k": 1}}'])
def test_layer_images_inspects_again_when_the_cache_is_unusable(executor, labels_cache, content):
    labels_cache.parent.mkdir(parents=True)
    labels_cache.write_text(content)
    fake = executor((0, json.dumps([{"id": "i1", "names": []}]), ""), (0, INSPECT, ""))
    assert Buildah().layer_images()[0]["labels"] == LABELS
    assert [c[1] for c in fake.calls] == ["images", "inspect"]
    assert json.loads(labels_cache.read_text()) == {"i1": LABELS}


def test_layer_images_works_where_the_cache_cannot_be_written(executor, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(buildah_module, "labels_cache_path", lambda: str(blocker / "image-labels.json"))
    executor((0, json.dumps([{"id": "i1", "names": []}]), ""), (0, INSPECT, ""))
    assert Buildah().layer_images()[0]["labels"] == LABELS


KEY = "a" * 64


def test_container_names_are_purpose_scope_tag_and_instance():
    name = container_name("localhost/p", "compute", KEY)
    assert re.fullmatch(r"hpc-stateless-compute-[0-9a-f]{6}-aaaaaaaaaaaa", name)
    assert container_name("localhost/p/", "compute", KEY) == name
    assert container_name("localhost/q", "compute", KEY) != name
    assert name.startswith(container_stem("localhost/p", "compute"))


def test_a_process_owned_container_names_its_pid_and_is_never_a_layers():
    pack = container_name("localhost/p", "pack", owner_instance(4321))
    assert re.fullmatch(r"hpc-stateless-pack-[0-9a-f]{6}-pid4321", pack)
    assert container_owner(pack, "pack") == 4321
    # a layer called "pack" whose key starts with digits only is not a pack run's container
    assert container_owner(container_name("localhost/p", "pack", "1" * 64), "pack") is None
    assert container_owner(container_name("localhost/p", "compute", owner_instance(1)), "pack") is None


def test_image_reference_and_its_prefix():
    assert image_ref("localhost/hpc-stateless/", "compute", KEY) == f"localhost/hpc-stateless/compute:{KEY}"
    assert image_prefix_of("localhost/p/base:k") == "localhost/p"
    assert image_prefix_of("base:k") == ""


class Labels:
    """Stands in for the buildah client's image_labels: the chain of layer images is a dict here."""

    def __init__(self, images: dict[str, dict[str, str]]) -> None:
        self.images = images
        self.asked: list[str] = []

    def image_labels(self, ref: str) -> dict[str, str]:
        self.asked.append(ref)
        if ref not in self.images:
            raise _process.ProcessError(["buildah", "inspect", ref], 125, "", "image not known")
        return self.images[ref]


def layer(name: str, key: str, parent: str = "", parent_key: str = "") -> dict[str, str]:
    labels = {LABEL_PREFIX + "layer": name, LABEL_PREFIX + "key": key}
    if parent:
        labels.update({LABEL_PREFIX + "parent": parent, LABEL_PREFIX + "parent-key": parent_key})
    return labels


def test_layer_keys_walk_the_parent_labels_to_the_root_layer():
    images = Labels({"localhost/p/hsn:k2": layer("hsn", "k2", "base", "k1"), "localhost/p/base:k1": layer("base", "k1")})
    keys = layer_keys_of(images, "localhost/p/compute:k3", layer("compute", "k3", "hsn", "k2"))
    assert keys == {"compute": "k3", "hsn": "k2", "base": "k1"}
    assert images.asked == ["localhost/p/hsn:k2", "localhost/p/base:k1"]


def test_a_parent_that_cannot_be_read_is_named_with_its_key_and_ends_the_walk():
    images = Labels({})
    assert layer_keys_of(images, "localhost/p/compute:k3", layer("compute", "k3", "hsn", "k2")) == \
        {"compute": "k3", "hsn": "k2"}
    assert layer_keys_of(None, "compute:k3", layer("compute", "k3", "hsn", "k2")) == {"compute": "k3", "hsn": "k2"}
    assert layer_keys_of(images, "x:y", {LABEL_PREFIX + "layer": "compute"}) == {}  # no key: not a layer image


def test_a_loop_of_parent_labels_ends():
    images = Labels({"localhost/p/a:k": layer("a", "k", "a", "k")})
    assert layer_keys_of(images, "localhost/p/a:k", layer("a", "k", "a", "k")) == {"a": "k"}
    assert len(images.asked) == 64


def test_containers_asks_again_when_a_container_went_away_while_listed(executor):
    # Another build removed a container between buildah's listing and its read of that container's state.
    gone = (125, "", "Error: reading build containers: container not known")
    listing = json.dumps([{"containername": "hpc-stateless-a-1"}])
    fake = executor(gone, gone, (0, listing, ""))
    assert Buildah().container_names("hpc-stateless-") == ["hpc-stateless-a-1"]
    assert fake.calls == [[B, "containers", "--json"]] * 3


def test_layer_images_asks_again_when_an_image_went_away_while_listed(executor, tmp_path, monkeypatch):
    # The same race for images (a make test run on two workers: "locating image with ID ...: image not known").
    monkeypatch.setattr(buildah_module, "labels_cache_path", lambda: tmp_path / "labels.json")
    gone = (125, "", 'Error: locating image with ID "60d1": image not known')
    fake = executor(gone, (0, "[]", ""))
    assert Buildah().layer_images() == []
    assert fake.calls == [[B, "images", "--json", "--filter", f"label={LABEL_PREFIX}layer"]] * 2


def test_containers_gives_up_after_the_last_attempt_and_on_other_errors(executor):
    gone = (125, "", "Error: reading build containers: container not known")
    executor(*[gone] * buildah_module.LISTING_ATTEMPTS)
    with pytest.raises(BuildahError, match="container not known"):
        Buildah().containers()
    executor((125, "", "Error: storage is corrupt"))
    with pytest.raises(BuildahError, match="storage is corrupt"):
        Buildah().containers()
