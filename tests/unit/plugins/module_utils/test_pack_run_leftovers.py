"""What pack does with the leftovers of a killed pack: in the image's output directory, and its working container."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import container_name, owner_instance
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import Packer, PackRequest


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_a_killed_pack_are_removed_and_a_version_renamed_away_comes_back(tmp_path):
    image_dir = tmp_path / "out" / "img"
    dead, live = dead_pid(), os.getpid()
    for name in (f".v1.old-{dead}", f".v1.partial-{dead}", f".v2.old-{dead}", "v2", f".v3.partial-{live}"):
        (image_dir / name).mkdir(parents=True)
        (image_dir / name / "manifest.json").write_text(name)
    request = PackRequest(image="img", output_dir=str(tmp_path / "out"), formats=["cpio.zst"], source_path=str(tmp_path))
    Packer(request)._check_output_dir(str(image_dir), False)  # pylint: disable=protected-access
    # v1 was renamed away by a pack killed before its new v1 was renamed into place: it is restored.
    # v2 was replaced completely before the kill: the old copy goes. A running pack's directory stays.
    assert sorted(p.name for p in image_dir.iterdir()) == [f".v3.partial-{live}", "v1", "v2"]
    assert (image_dir / "v1" / "manifest.json").read_text() == f".v1.old-{dead}"
    assert (image_dir / "v2" / "manifest.json").read_text() == "v2"


class Executor:
    """The process runner's executor for buildah: records argv, answers from ``replies`` by argv prefix."""

    def __init__(self, replies):
        self.replies, self.calls = replies, []

    def __call__(self, argv, *, env, timeout, input, cwd, text):  # pylint: disable=redefined-builtin,unused-argument
        self.calls.append(argv[1:])
        for prefix, out in self.replies.items():
            if tuple(argv[1:1 + len(prefix)]) == prefix:
                return _process.Result(argv, 0, out, "")
        return _process.Result(argv, 0, "", "")


@pytest.fixture
def host(monkeypatch):
    def install(replies):
        fake = Executor(replies)
        _process.set_executor(fake)
        return fake

    monkeypatch.setattr(_process, "which", lambda name, hint="": f"/usr/bin/{name}")
    yield install
    _process.set_executor(None)


def test_a_source_image_is_mounted_in_a_container_named_after_its_prefix_and_our_pid(host, tmp_path):
    dead, live = dead_pid(), os.getpid()
    stale = container_name("localhost/q", "pack", owner_instance(dead))  # a killed pack of another prefix
    mine = container_name("localhost/p", "pack", owner_instance(live))  # a killed pack that had our pid
    running = container_name("localhost/p", "pack", owner_instance(os.getppid()))
    layer_called_pack = container_name("localhost/p", "pack", "1" * 64)
    listing = json.dumps([{"containername": n} for n in (stale, mine, running, layer_called_pack)])
    inspect = json.dumps({"FromImageID": "id", "OCIv1": {"config": {"Labels": {}}}})
    fake = host({("containers",): listing, ("inspect",): inspect, ("mount",): f"{tmp_path}\n"})
    request = PackRequest(image="img", output_dir=str(tmp_path / "out"), formats=["cpio.zst"],
                          source_image="localhost/p/base:k")
    packer = Packer(request, Buildah())
    source = packer._open_source()  # pylint: disable=protected-access
    packer._close_source(source)  # pylint: disable=protected-access
    removed = [c[1] for c in fake.calls if c[0] == "rm"]
    assert removed == [stale, mine, mine]
    assert ["from", "--pull=never", "--quiet", "--name", mine, "id"] in fake.calls  # the inspected image, by its ID
    assert source.root == str(tmp_path) and source.container == mine
