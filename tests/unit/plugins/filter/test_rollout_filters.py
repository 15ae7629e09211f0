"""The rolling update's filters (plugins/filter/rollout.py) and hpc.stateless.layer_seal: what they hand to Jinja,
their errors, and one playbook that calls them by their FQCN with real hostvars, as the collection's playbooks do.

The rules behind them are tested in tests/unit/plugins/module_utils/test_rollout.py and test_layer_seal.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable
from jinja2 import Undefined

from ansible_collections.hpc.stateless.plugins.filter import layer_seal as seal_plugin, rollout as rollout_plugin
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import image_release

FILTERS = {**rollout_plugin.FilterModule().filters(), **seal_plugin.FilterModule().filters()}
REPO = Path(__file__).resolve().parents[4]


def slurped(data: bytes) -> dict:
    return {"content": base64.b64encode(data).decode(), "encoding": "base64"}


def test_every_filter_has_its_documentation_next_to_it():
    docs = Path(rollout_plugin.__file__).parent
    assert sorted(name for name in FILTERS if not (docs / f"{name}.yml").is_file()) == []


def test_a_node_is_compared_with_what_its_image_serves():
    node = FILTERS["roll_node"](slurped(image_release("compute", "v1", "slurm", "k" * 64, 0)), served={"compute": "v2"},
                                images={"compute": {}}, boot_root="/tftp", release_file="/etc/image-release",
                                image="", default_image=None)
    assert node == {"image": "compute", "target": "v2", "unreachable": False, "pending": True,
                    "reason": "runs compute v1, served is v2", "release": node["release"]}
    assert node["release"]["VERSION"] == "v1"


def test_the_plan_reads_each_nodes_state_from_hostvars():
    hostvars = {"n1": {"hpc_stateless_roll_node": {"pending": True, "reason": "runs compute v1, served is v2"}},
                "n2": {"hpc_stateless_roll_node": {"pending": False, "reason": ""}}, "n3": {}}
    plan = FILTERS["roll_plan"](["n2", "n1", "n3"], hostvars, canary_size=1, batch_size=10, max_fail_percentage=0)
    assert plan["canary"] == ["n1"] and plan["serial"] == [1, 10]
    assert plan["summary"] == "1 of 3 nodes need a reboot; n1: runs compute v1, served is v2 (canary)"
    with pytest.raises(AnsibleFilterError, match="^roll_plan: hpc_stateless_roll_canary_size: -1 is not"):
        FILTERS["roll_plan"](["n1"], hostvars, canary_size=-1, batch_size=10, max_fail_percentage=0)
    with pytest.raises(AnsibleFilterError, match="^roll_plan: expects a list of host names, got str"):
        FILTERS["roll_plan"]("n1", hostvars, canary_size=1, batch_size=10, max_fail_percentage=0)


def test_the_canary_names_its_failures_the_images_to_roll_back_and_the_message():
    hostvars = {"n1": {"hpc_stateless_roll_node": {"image": "compute"}, "hpc_stateless_roll_failure": "down"},
                "n2": {"hpc_stateless_roll_node": {"image": "compute"}}}
    before = FILTERS["roll_canary"](["n1", "n2"], hostvars)
    assert before["failed"] == ["n1"] and before["images"] == ["compute"]
    after = FILTERS["roll_canary"](["n1", "n2"], hostvars,
                                   {"results": [{"item": "compute", "old_current": "v2", "current": "v1"}]})
    assert after["msg"] == ("canary failed - n1: down; boot links rolled back: compute v2 -> v1; roll stopped, "
                            "no further node rebooted")
    assert FILTERS["roll_canary"](["n2"], hostvars, {"skipped": True, "results": []})["msg"] == ""


def test_slurm_filters_and_their_errors():
    argv = FILTERS["slurm_reboot_argv"]("n1", method="scontrol", scontrol="scontrol", image="compute", version="v2",
                                        reason=None)
    assert argv[4] == "reason=hpc.stateless rolling update to compute v2"
    with pytest.raises(AnsibleFilterError, match="^slurm_reboot_argv: hpc_stateless_roll_method: 'x' is not one of"):
        FILTERS["slurm_reboot_argv"]("n1", method="x", scontrol="scontrol", image="c", version="v")
    check = FILTERS["slurm_reboot_check"]("NodeName=n1 State=IDLE BootTime=2026-03-04T10:02:13",
                                          boot_time_before="2026-01-01T00:00:00", requested_at="2026-03-04T10:00:00")
    assert check["done"] and check["ok"] and check["boot_time"] == "2026-03-04T10:02:13"
    assert FILTERS["slurm_reboot_check"]("NodeName=n1 State=IDLE BootTime=None")["boot_time"] == "None"


def test_served_versions_and_a_failed_node():
    manifest = json.dumps({"image": "compute", "version": "v2", "artifacts": []}).encode()
    assert FILTERS["roll_served"]([{**slurped(manifest), "item": "compute"}, {"item": "gpu", "failed": True}],
                                  "/tftp") == {"compute": "v2"}
    with pytest.raises(AnsibleFilterError, match="^roll_served: /tftp/compute/manifest.json: unreadable manifest"):
        FILTERS["roll_served"]([{**slurped(b"{"), "item": "compute"}], "/tftp")
    assert FILTERS["roll_failure"]("Wait until the node answers", {"msg": "timed out"}, {"skipped": True}) == \
        "Wait until the node answers: timed out"
    assert not FILTERS["roll_release_check"]({}, image="compute", version="v2")["ok"]


@pytest.mark.parametrize("name, call", [
    ("roll_served", lambda f, u: f(u, "/tftp")),
    ("roll_node", lambda f, u: f(u, served={}, images={}, boot_root="/tftp", release_file="/etc/image-release")),
    ("roll_plan", lambda f, u: f(u, {}, canary_size=1, batch_size=1, max_fail_percentage=0)),
    ("slurm_reboot_check", lambda f, u: f(u)),
    ("roll_release_check", lambda f, u: f(u, image="c", version="v")),
    ("roll_canary", lambda f, u: f(u, {})),
])
def test_an_undefined_input_stays_an_undefined_variable(name, call):
    """What Jinja raises itself for an undefined variable (and what ansible-lint's template check expects)."""
    with pytest.raises(AnsibleUndefinedVariable, match=f"^{name}: its input is undefined"):
        call(FILTERS[name], Undefined())


def test_the_seal_filter_decides_and_labels():
    assert FILTERS["layer_seal"]("compute", True, "") == {
        "layer": "compute", "sealed": True, "skip_reason": "", "labels": {},
        "report": "layer compute sealed (hpc.stateless.base tasks_from=seal)"}
    skipped = FILTERS["layer_seal"]("login", "no", "shared host key (ticket 42)")
    assert skipped["labels"] == {"hpc.stateless.seal-skipped": "shared host key (ticket 42)"}
    with pytest.raises(AnsibleFilterError, match="^layer login: hpc_stateless_seal is false without"):
        FILTERS["layer_seal"]("login", False, "")
    with pytest.raises(AnsibleFilterError, match="^layer_seal: expects the layer name, got None"):
        FILTERS["layer_seal"](None)


PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Each node's state
      ansible.builtin.set_fact:
        hpc_stateless_roll_node: >-
          {{ {'content': release | b64encode} | hpc.stateless.roll_node(served={'compute': 'v2'}, images={'compute': {}},
               boot_root='/tftp', release_file='/etc/image-release') }}
    - name: The plan
      run_once: true
      ansible.builtin.debug:
        msg: "{{ ansible_play_hosts | hpc.stateless.roll_plan(hostvars, canary_size=1, batch_size=1,
                 max_fail_percentage=0) }}"
"""


def test_a_playbook_calls_them_by_their_fqcn_with_hostvars(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"hosts": {
        "n1": {"release": "IMAGE=compute\nVERSION=v1\n"}, "n2": {"release": "IMAGE=compute\nVERSION=v2\n"}},
        "vars": {"ansible_connection": "local"}}}))
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"), "ANSIBLE_LOCALHOST_WARNING": "0"}
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                           str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msg = json.loads(proc.stdout)["plays"][0]["tasks"][1]["hosts"]["n1"]["msg"]
    assert msg["pending"] == ["n1"] and msg["canary"] == ["n1"]
    assert msg["summary"] == "1 of 2 nodes need a reboot; n1: runs compute v1, served is v2 (canary)"
