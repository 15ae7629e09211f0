"""The plan's freshness rule (issue 27): which key each layer's image has when the archive moved.

Layer images in storage are given as hpc.stateless.layer_info lists them (a stand-in for buildah: the real
listing is tested in tests/integration), and the archive as a fake view answering ``candidate`` the way
_archive/index.py's ArchiveView does (the real view, its fetching and signatures, are tested in
test_archive_*.py and the end-to-end tests/integration/test_freshness.py). Keys are computed by the real
``compute_keys`` over a real layer DAG.
"""

from __future__ import annotations

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._archive.index import ArchiveError
from ansible_collections.hpc.stateless.plugins.module_utils._contract import labels
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sources import Source, layer_sources
from ansible_collections.hpc.stateless.plugins.module_utils._layers.content_key import RoleIndex, compute_keys
from ansible_collections.hpc.stateless.plugins.module_utils._layers.freshness import (
    NO_RECORD,
    ArchiveViews,
    FreshnessCheck,
    Storage,
    rebuilt_for_updates,
    updated_key,
)
from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph

PREFIX = "localhost/t"
LAYERS = {
    "base": {"bootstrap": {"distro": "debian", "release": "bookworm"}},
    "hsn": {"parent": "base"},
    "compute": {"parent": "hsn"},
    "slurm": {"parent": "compute"},
}
# What each layer installed at its first build; every layer's record holds its parent's packages too.
INSTALLED = {
    "base": {"openssl": "3.0.20-1", "tzdata": "2025a-0"},
    "hsn": {"rdma-core": "44.0-2"},
    "compute": {"nhc-tools": "1.0"},
    "slurm": {"slurmd": "22.05.8-4"},
}
SECURITY = Source("security", "http://deb.debian.org/debian-security", "bookworm-security", ("main",), None, "base")
RELEASE = Source("release", "http://deb.debian.org/debian", "bookworm", ("main",), None, "base")


class FakeView:
    """Answers what ArchiveView answers: the newest version of a package and the source offering it."""

    def __init__(self, offers: dict[str, tuple[str, Source]] | None = None, fail: str = "") -> None:
        self.offers = offers or {}
        self.fail = fail
        self.loads = 0

    def restricted(self, _sources):
        return self

    def candidate(self, name: str, security: bool = False):
        found = self.offers.get(name)
        return None if found is None or (security and found[1].kind != "security") else found


def as_offered(view: FakeView, installed: dict[str, dict[str, str]]) -> FakeView:
    for packages in installed.values():
        for name, version in packages.items():
            view.offers.setdefault(name, (version, RELEASE))
    return view


class Site:
    """Storage (layer images as layer_info lists them) and the plan over it."""

    def __init__(self) -> None:
        self.images: list[dict] = []
        self.clock = 0.0
        self.graph = LayerGraph.from_spec(LAYERS)

    def plan(self, view: FakeView | None, policy: str = "any",
             own_views: dict[str, FakeView] | None = None) -> tuple[dict, FreshnessCheck]:
        def view_for(layer: str):
            if own_views and layer in own_views:
                return own_views[layer]
            if view is not None and view.fail:
                raise ArchiveError(view.fail, RELEASE)
            if view is not None:
                view.loads += 1
            return view

        check = FreshnessCheck(Storage(self.images), PREFIX, policy, view_for)
        keys = compute_keys(self.graph, RoleIndex([], []), lambda name: {}, settle=check.settle)
        return keys, check

    def build(self, keys: dict, check: FreshnessCheck, versions: dict[str, dict[str, str]]) -> None:
        """What build.yml does for each stale layer: commit under the planned key with the records."""
        packages: dict[str, str] = {}
        for name, key in keys.items():
            packages = {**packages, **versions[name]}
            verdict = check.verdicts[name]
            if verdict.cached:
                continue
            self.clock += 1
            parent = key.parent
            record = labels.layer_labels(name, key.key, parent, key.parent_key, None,
                                         labels.record_labels(packages, []), inputs_key=key.inputs_key)
            self.images.append({"id": f"id{len(self.images)}", "names": [f"{PREFIX}/{name}:{key.key}"],
                                "labels": record, "created": self.clock})


def built_site() -> tuple[Site, dict]:
    site = Site()
    keys, check = site.plan(None)
    assert [check.verdicts[n].cached for n in keys] == [False] * 4
    site.build(keys, check, INSTALLED)
    return site, keys


def test_a_layer_never_built_is_stale_and_its_key_is_its_inputs_key():
    site = Site()
    keys, check = site.plan(FakeView())
    assert all(k.key == k.inputs_key for k in keys.values())
    assert check.verdicts["base"].reason == f"inputs changed: no image of the layer built from key {keys['base'].key[:12]}"
    assert check.verdicts["hsn"].reason == "parent base rebuilds"


def test_keys_are_stable_when_nothing_moved():
    site, first = built_site()
    view = as_offered(FakeView(), INSTALLED)
    keys, check = site.plan(view)
    assert {n: k.key for n, k in keys.items()} == {n: k.key for n, k in first.items()}
    assert all(v.cached and not v.reason for v in check.verdicts.values())
    assert view.loads == 4  # asked once per layer, one view loaded


def test_only_the_moved_layer_and_its_descendants_get_new_keys():
    site, first = built_site()
    view = as_offered(FakeView({"rdma-core": ("44.0-2+deb12u1", SECURITY)}), INSTALLED)
    keys, check = site.plan(view)
    assert keys["base"].key == first["base"].key and check.verdicts["base"].cached
    moved = check.verdicts["hsn"]
    assert not moved.cached and moved.reason == "hsn: 1 security update (rdma-core 44.0-2 -> 44.0-2+deb12u1)"
    assert keys["hsn"].inputs_key == first["hsn"].key
    assert keys["hsn"].key == updated_key(first["hsn"].key, moved.updates) != first["hsn"].key
    for child in ("compute", "slurm"):
        assert keys[child].key != first[child].key and check.verdicts[child].reason.startswith("parent ")
    assert check.archive_reasons() == {"hsn": [moved.reason]}  # what the change plan adds
    # The image of a chain holding hsn is not what the commit alone builds: its default version says so.
    assert rebuilt_for_updates(["base", "hsn", "compute", "slurm"], keys) == ["hsn"]
    assert rebuilt_for_updates(["base", "hsn", "compute", "slurm"], first) == []

    # The rebuild installs the new version: the next plan reuses it, and the children built on it.
    site.build(keys, check, {**INSTALLED, "hsn": {"rdma-core": "44.0-2+deb12u1"}})
    again, check = site.plan(view)
    assert {n: k.key for n, k in again.items()} == {n: k.key for n, k in keys.items()}
    assert all(v.cached for v in check.verdicts.values())


def test_a_rebuild_that_did_not_install_the_update_is_kept_and_named_not_rebuilt_again():
    site, _first = built_site()
    view = as_offered(FakeView({"rdma-core": ("44.0-2+deb12u1", SECURITY)}), INSTALLED)
    keys, check = site.plan(view)
    site.build(keys, check, INSTALLED)  # apt kept 44.0-2 (a pin)
    again, check = site.plan(view)
    assert again["hsn"].key == keys["hsn"].key and check.verdicts["hsn"].cached
    assert check.warnings == ["hsn was rebuilt for 1 security update (rdma-core 44.0-2 -> 44.0-2+deb12u1) and still "
                              "lacks them (pinned or held packages, or a role installing a fixed version?)"]


def test_a_package_of_the_parent_is_the_parents_update_not_the_childs():
    site, first = built_site()
    view = as_offered(FakeView({"openssl": ("3.0.22-1", SECURITY)}), INSTALLED)
    keys, check = site.plan(view)
    assert check.verdicts["base"].reason == "base: 1 security update (openssl 3.0.20-1 -> 3.0.22-1)"
    assert check.verdicts["hsn"].reason == "parent base rebuilds"  # not "hsn: ... openssl"
    assert all(keys[n].key != first[n].key for n in keys)


def test_a_childs_own_source_offering_a_package_of_its_parent_does_not_make_it_stale():
    """hsn's vendor source offers a newer openssl than base's sources: hsn's rebuild would not upgrade a package
    of its parent (roles install, they do not upgrade), so it is not hsn's update to rebuild for."""
    site, first = built_site()
    vendor = as_offered(FakeView({"openssl": ("3.0.99-1", RELEASE)}), INSTALLED)
    keys, check = site.plan(as_offered(FakeView(), INSTALLED), own_views={"hsn": vendor})
    assert {n: k.key for n, k in keys.items()} == {n: k.key for n, k in first.items()}
    assert check.verdicts["hsn"].cached


def test_policy_security_ignores_an_update_that_is_not_one():
    site, first = built_site()
    view = as_offered(FakeView({"tzdata": ("2026a-0", RELEASE)}), INSTALLED)
    keys, check = site.plan(view, "security")
    assert {n: k.key for n, k in keys.items()} == {n: k.key for n, k in first.items()}
    keys, check = site.plan(view, "any")
    assert check.verdicts["base"].reason == "base: 1 update (tzdata 2025a-0 -> 2026a-0)"


def test_policy_never_rebuilds_nothing_and_warns_naming_the_layer_and_the_lag():
    site, first = built_site()
    view = as_offered(FakeView({"slurmd": ("22.05.8-4+deb12u2", SECURITY)}), INSTALLED)
    keys, check = site.plan(view, "never")
    assert {n: k.key for n, k in keys.items()} == {n: k.key for n, k in first.items()}
    assert check.warnings == ["slurm lags behind its archive: 1 security update (slurmd 22.05.8-4 -> "
                              "22.05.8-4+deb12u2) (hpc_stateless_freshness_policy never: not rebuilt)"]
    assert [str(u) for u in check.verdicts["slurm"].lag] == ["slurmd 22.05.8-4 -> 22.05.8-4+deb12u2"]


def test_an_unreadable_archive_fails_the_plan_unless_the_policy_is_never():
    site, first = built_site()
    view = FakeView(fail="cannot reach deb.debian.org")
    with pytest.raises(ArchiveError, match="base: apt source http://deb.debian.org/debian bookworm: cannot reach"):
        site.plan(view)
    keys, check = site.plan(view, "never")
    assert keys["slurm"].key == first["slurm"].key
    assert check.warnings[0].startswith("base: the archive cannot be read, so its lag is unknown (policy never: "
                                        "kept): base: apt source http://deb.debian.org/debian bookworm: cannot reach")
    assert check.warnings[1:] == [f"{n}: the archive cannot be read, so its lag is unknown (policy never: kept) - "
                                  "see above" for n in ("hsn", "compute", "slurm")]


def test_an_unreachable_archive_is_asked_once_per_run():
    specs = {name: LayerGraph.from_spec(LAYERS).spec(name) for name in LAYERS}
    calls = []

    def load(sources, *, arch, **_options):
        calls.append(arch)
        raise ArchiveError("cannot reach deb.debian.org", RELEASE)

    views = ArchiveViews(specs, load)
    for name in LAYERS:
        with pytest.raises(ArchiveError, match="cannot reach"):
            views.for_layer(name)
    assert len(calls) == 1


def test_an_image_without_a_package_record_is_rebuilt_once_never_taken_as_fresh():
    site = Site()
    keys, check = site.plan(None)
    site.build(keys, check, INSTALLED)
    for image in site.images:  # as built before the records
        del image["labels"][labels.PACKAGES_LABEL]
        del image["labels"][labels.INPUTS_KEY_LABEL]
    view = as_offered(FakeView(), INSTALLED)
    again, check = site.plan(view)
    assert again["base"].key == updated_key(keys["base"].key, [NO_RECORD])
    assert "no package record" in check.verdicts["base"].reason
    site.build(again, check, INSTALLED)
    settled, check = site.plan(view)
    assert all(v.cached for v in check.verdicts.values())
    kept, check = Site.plan(site, view, "never")
    assert kept["base"].key == settled["base"].key


def test_an_image_left_with_only_latest_is_no_cache_of_its_key():
    # Its key tag removed (buildah rmi of a name keeps an image that has another), the image is still in
    # storage as <layer>:latest with the labels of its build. It must not count: trusting it left the root
    # layer "cached" under a key no image carried, so the root was built again from the bootstrap of its
    # inputs key, never asked whether the archive moved (the rootless CI failure of 2026-11-28).
    site, first = built_site()
    base = next(image for image in site.images if image["names"][0].startswith(f"{PREFIX}/base:"))
    base["names"] = [f"{PREFIX}/base:latest"]
    keys, check = site.plan(as_offered(FakeView(), INSTALLED))
    verdict = check.verdicts["base"]
    assert not verdict.cached and keys["base"].key == first["base"].key
    assert verdict.reason == f"inputs changed: no image of the layer built from key {first['base'].key[:12]}"


def test_a_root_rebuilt_for_updates_bootstraps_again_when_its_bootstrap_lags():
    storage = Storage([{"id": "b", "names": [f"{PREFIX}/bootstrap/base:kb0"], "created": 1,
                        "labels": {**labels.layer_labels("base", "kb0", None, None, None),
                                   **labels.record_labels({"openssl": "3.0.20-1"}, [])}}])
    view = FakeView({"openssl": ("3.0.22-1", SECURITY)})
    check = FreshnessCheck(storage, PREFIX, "any", lambda layer: view)
    verdict = check.settle_bootstrap("base", "kb0")
    assert not verdict.cached and verdict.key == updated_key("kb0", verdict.updates)
    assert verdict.reason == "bootstrapped root of base: 1 security update (openssl 3.0.20-1 -> 3.0.22-1)"
    view.offers["openssl"] = ("3.0.20-1", RELEASE)
    assert check.settle_bootstrap("base", "kb0").key == "kb0"


def test_one_view_is_loaded_for_every_layer_of_an_architecture():
    specs = {name: LayerGraph.from_spec(LAYERS).spec(name) for name in LAYERS}
    loaded: list[tuple[list, str]] = []

    def load(sources, *, arch, **_options):
        loaded.append((list(sources), arch))
        return FakeView()

    views = ArchiveViews(specs, load, cache_dir="/nowhere")
    for name in LAYERS:
        assert views.for_layer(name) is not None
    assert len(loaded) == 1
    sources, _arch = loaded[0]
    assert set(sources) == set(layer_sources("slurm", specs))
    assert [s.suite for s in layer_sources("base", specs)] == ["bookworm", "bookworm-updates", "bookworm-security"]
    rpm = ArchiveViews({"el": {"bootstrap": {"distro": "rocky", "release": "9", "mirror": "http://m/"}}}, load)
    assert rpm.for_layer("el") is None and len(loaded) == 1


def test_an_unknown_policy_is_named():
    with pytest.raises(ValueError, match="hpc_stateless_freshness_policy: 'sometimes' is not one of any, security, never"):
        FreshnessCheck(Storage([]), PREFIX, "sometimes", lambda layer: None)
