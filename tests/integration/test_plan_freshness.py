"""After the default build, the plan asks the real archive about every layer and still builds nothing (issue 27).

Runs against the layers `make build` left under the default prefix and the default inventory's real apt sources
(deb.debian.org: bookworm, bookworm-updates, bookworm-security). This machine's archive does not move, so a
plan right after the build is a real no-op: every layer's newest image built from its inputs is asked, none
lags, and every key is the key of an image that exists. The plan runs in check mode (it builds and writes
nothing, the archive cache included); the test prints what the check cost.
"""

from __future__ import annotations

import json
import time

from conftest import DEFAULT_PREFIX, REPO, image_labels, run_site

from ansible_collections.hpc.stateless.plugins.module_utils._contract.labels import packages_of, repositories_of

PLAYBOOK = """---
- name: Plan as build.yml does, and keep the plan
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The collection's settings
      ansible.builtin.import_role:
        name: hpc.stateless.hpc_stateless
    - name: Plan the layers
      ansible.builtin.import_tasks: {repo}/playbooks/tasks/plan_layers.yml
    - name: Keep the plan
      ansible.builtin.copy:
        content: "{{{{ hpc_stateless_plan | to_json }}}}"
        dest: {out}
        mode: "0644"
      check_mode: false
"""


def plan(tmp_path, name: str) -> tuple[dict, float]:
    playbook = tmp_path / f"{name}.yml"
    out = tmp_path / f"{name}.json"
    playbook.write_text(PLAYBOOK.format(repo=REPO, out=out))
    started = time.monotonic()
    proc = run_site("--check", inventory=REPO / "inventory", playbook=str(playbook))
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text()), seconds


def test_the_default_build_is_fresh_and_its_labels_say_what_it_holds(tmp_path):
    first, first_seconds = plan(tmp_path, "plan")
    assert first["stale"] == [], {n: first["layers"][n].get("why") for n in first["stale"]}
    assert first["freshness"]["warnings"] == []
    for name, layer in first["layers"].items():
        asked = layer["freshness"]
        # Each layer's image was asked (not skipped): the image built from its inputs, with no update pending.
        assert asked["image"] == layer["image"] and asked["updates"] == [] and asked["lag"] == [], (name, asked)
        labels = image_labels(layer["image"])
        assert labels["hpc.stateless.inputs-key"] == layer["inputs_key"]
        assert packages_of(labels), name
    base = image_labels(first["layers"]["base"]["image"])
    states = repositories_of(base)
    assert {s["suite"] for s in states} == {"bookworm", "bookworm-updates", "bookworm-security"}, states
    assert all(s["uri"].startswith("http://deb.debian.org/") and len(s["sha256"]) == 64 for s in states)
    packages = packages_of(base)
    assert "openssl" in packages and "systemd" in packages

    # One view over the three suites was read for all four layers.
    network = first["freshness"]["network"]
    assert set(network) == {"http://deb.debian.org/debian bookworm", "http://deb.debian.org/debian bookworm-updates",
                            "http://deb.debian.org/debian-security bookworm-security"}, network
    assert set(network.values()) <= {"none", "304", "same", "fetched"}
    print(f"\nno-op plan with the archive check: {first_seconds:.1f} s, of which the check "
          f"{first['freshness']['seconds']:.2f} s ({first['freshness']['network']}); prefix {DEFAULT_PREFIX}")
