"""The plan of a run after its build (_layers/built.py, filter hpc.stateless.plan_after_build): what verify and
pack of the same run take instead of planning again, and when they must plan again."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.filter.plan_after_build import plan_after_build as plan_filter
from ansible_collections.hpc.stateless.plugins.module_utils._layers.built import BuiltPlanError, plan_after_build

PREFIX = "localhost/hpc-stateless"


def entry(name, parent, key, cached, **more):
    """A layer of the plan as hpc.stateless.plan gives it with storage checked."""
    found = {"name": name, "parent": parent, "key": key, "image": f"{PREFIX}/{name}:{key}", "cached": cached,
             "latest_current": cached, "freshness": {"cached": cached, "reason": "" if cached else "inputs changed"}}
    if not cached:
        found["why"] = "inputs changed"
    found.update(more)
    return found


def plan(stale=("slurm",)):
    layers = {
        "base": entry("base", None, "b1", "base" not in stale, bootstrap_cached=True,
                      bootstrap_image=f"{PREFIX}/bootstrap/base:s1"),
        "compute": entry("compute", "base", "c1", "compute" not in stale),
        "slurm": entry("slurm", "compute", "d1", "slurm" not in stale),
    }
    order = ["base", "compute", "slurm"]
    return {"order": order, "layers": layers, "stale": [n for n in order if n in stale], "leaves": ["slurm"],
            "images": {"compute": {"layer": "slurm"}}, "versions": {"compute": "v1-d1"}}


def images(before, names):
    return {name: before["layers"][name]["image"] for name in names}


def test_every_stale_layer_committed_makes_the_plan_a_later_stage_would_reach():
    before = plan(stale=("compute", "slurm"))
    kept = copy.deepcopy(before)
    after = plan_after_build(before, images(before, ["compute", "slurm"]))
    assert before == kept  # the build's own plan is not changed in place
    assert after["after_build"] is True and after["stale"] == [] and after["built"] == ["compute", "slurm"]
    for name in ("compute", "slurm"):
        assert after["layers"][name]["cached"] is True and "why" not in after["layers"][name]
        # The verdict that had the layer built stays; the commit moved :latest to the image.
        assert after["layers"][name]["freshness"] == before["layers"][name]["freshness"]
    assert all(layer["latest_current"] for layer in after["layers"].values())
    # Keys, images and versions are the build's: nothing a later stage reads is planned otherwise.
    for field in ("order", "leaves", "images", "versions"):
        assert after[field] == before[field]
    assert {n: (e["key"], e["image"]) for n, e in after["layers"].items()} == \
        {n: (e["key"], e["image"]) for n, e in before["layers"].items()}


def test_a_rebuilt_root_has_its_bootstrap_cached_too():
    before = plan(stale=("base", "compute", "slurm"))
    before["layers"]["base"]["bootstrap_cached"] = False
    after = plan_after_build(before, images(before, ["base", "compute", "slurm"]))
    assert after["layers"]["base"]["bootstrap_cached"] is True


def test_a_run_with_every_layer_cached_is_taken_too():
    before = plan(stale=())
    before["layers"]["slurm"]["latest_current"] = False  # build.yml moves :latest of a cached layer
    after = plan_after_build(before, {})
    assert after["after_build"] is True and after["built"] == [] and after["stale"] == []
    assert after["layers"]["slurm"]["latest_current"] is True


def test_a_stale_layer_without_its_image_leaves_the_plan_so_the_stage_plans_again():
    before = plan(stale=("compute", "slurm"))
    after = plan_after_build(before, images(before, ["compute"]))
    assert after == before and "after_build" not in after


def test_an_image_of_another_key_is_an_error_naming_layer_and_both_images():
    before = plan()
    with pytest.raises(BuiltPlanError, match=rf"layer slurm: the build committed {PREFIX}/slurm:other, "
                                             rf"the plan named {PREFIX}/slurm:d1"):
        plan_after_build(before, {"slurm": f"{PREFIX}/slurm:other"})
    with pytest.raises(AnsibleFilterError, match="layer slurm"):
        plan_filter(before, {"slurm": f"{PREFIX}/slurm:other"})


@pytest.mark.parametrize("bad, committed", [
    ({"layers": {}}, {}),                # planned without storage: no stale list
    ("plan", {}),
    (plan(), ["slurm"]),
])
def test_what_is_no_plan_or_no_mapping_is_refused(bad, committed):
    with pytest.raises(BuiltPlanError, match="plan_after_build: expects"):
        plan_after_build(bad, committed)


def hostvars(before, commit=None, lock=None):
    """The run's hostvars as build.yml passes them (plain mappings here; Ansible's HostVars is a Mapping too):
    each layer host holds what tasks/build_layer.yml registered, ``commit`` and ``lock`` by layer."""
    found = {"localhost": {"hpc_stateless_plan": before}}
    for name in before["layers"]:
        found[name] = {"inventory_hostname": name}
        if name in (commit or {}):
            found[name]["_hpc_stateless_commit"] = commit[name]
        if name in (lock or {}):
            found[name]["_hpc_stateless_build_lock"] = lock[name]
    return found


def test_the_run_hostvars_give_the_images_the_build_committed_or_waited_for():
    """The rule build.yml's Jinja held: a commit that succeeded names the image, else a build lock that found the
    layer cached (another build committed it while this one waited)."""
    before = plan(stale=("compute", "slurm"))
    image = images(before, ["compute", "slurm"])
    given = hostvars(before, commit={"slurm": {"image": image["slurm"], "changed": True}},
                     lock={"compute": {"cached": True, "image": image["compute"]}, "slurm": {"cached": False}})
    after = plan_filter(before, given)
    assert after["after_build"] is True and after["built"] == ["compute", "slurm"]
    assert after == plan_after_build(before, image)


@pytest.mark.parametrize("commit, lock", [
    ({"slurm": {"image": "x", "failed": True}}, {}),          # the commit failed
    ({}, {"slurm": {"cached": False, "image": "x"}}),         # the lock did not find it cached
    ({}, {}),                                                 # the layer's build never ran
    ({"slurm": {"skipped": True}}, {}),                       # the commit task was skipped
])
def test_a_stale_layer_the_build_left_without_an_image_keeps_the_plan(commit, lock):
    before = plan(stale=("slurm",))
    assert plan_filter(before, hostvars(before, commit=commit, lock=lock)) == before
