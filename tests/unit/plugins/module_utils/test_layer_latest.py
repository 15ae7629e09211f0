"""``:latest`` names the image of the current configuration: a cache hit moves it (_build/layer.py)."""

from __future__ import annotations

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils import _process
from ansible_collections.hpc.stateless.plugins.module_utils._build.buildah import Buildah
from ansible_collections.hpc.stateless.plugins.module_utils._build.layer import LayerBuilder

KEY = "a" * 64
BUILDAH = "/usr/bin/buildah"
IMAGE = f"localhost/p/slurm:{KEY}"
LATEST = "localhost/p/slurm:latest"


class Storage:
    """A fake buildah over a name -> image ID table: inspect answers from it, tag writes it."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = dict(names)
        self.calls: list[list[str]] = []

    def __call__(self, argv, *, env, timeout, input, cwd, text):  # pylint: disable=redefined-builtin,unused-argument
        self.calls.append(list(argv))
        if argv[1] == "inspect":
            ref = argv[-1]
            if ref not in self.names:
                return _process.Result(argv, 125, "", f"{ref}: image not known")
            return _process.Result(argv, 0, self.names[ref] + "\n" if "--format" in argv else "{}", "")
        if argv[1] == "tag":
            for name in argv[3:]:
                self.names[name] = self.names[argv[2]]
        if argv[1] == "containers":
            return _process.Result(argv, 0, "[]", "")
        return _process.Result(argv, 0, "", "")

    def tags(self) -> list[list[str]]:
        return [c[2:] for c in self.calls if c[1] == "tag"]


@pytest.fixture
def storage(monkeypatch):
    fake = Storage({IMAGE: "1" * 64, LATEST: "2" * 64})  # :latest names the build of another configuration
    monkeypatch.setattr(_process, "which", lambda name, hint="": f"/usr/bin/{name}")
    old = _process.set_executor(fake)
    yield fake
    _process.set_executor(old)


def commit(check_mode: bool = False):
    return LayerBuilder(Buildah(), "slurm", KEY, "localhost/p").commit({}, ["latest"], check_mode)


def test_a_cache_hit_moves_latest_to_the_current_image(storage):
    result = commit()
    assert result.cached and result.changed
    assert storage.tags() == [[IMAGE, LATEST]]
    assert storage.names[LATEST] == "1" * 64


def test_latest_that_names_the_current_image_is_left_alone(storage):
    storage.names[LATEST] = "1" * 64
    result = commit()
    assert result.cached and not result.changed and storage.tags() == []


def test_a_missing_latest_is_tagged_and_check_mode_tags_nothing(storage):
    assert not commit(check_mode=True).changed and storage.tags() == []
    del storage.names[LATEST]
    assert commit().changed and storage.tags() == [[IMAGE, LATEST]]
