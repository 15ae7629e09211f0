"""The filters hpc.stateless.image_release and image_release_keys: the functions, and one playbook that resolves
them by their FQCN as the collection's playbooks do."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.stateless.plugins.filter.image_release import FilterModule
from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import RELEASE_KEYS, image_release

FILTERS = FilterModule().filters()
REPO = Path(__file__).resolve().parents[4]


def test_a_release_reads_as_pack_wrote_it():
    text = image_release("compute", "v2", "slurm", "k" * 64, 0, {"SITE": "Lab 2"})
    expected = {"IMAGE": "compute", "VERSION": "v2", "LAYER": "slurm", "LAYER_KEY": "k" * 64,
                "BUILD_TIME": "1970-01-01T00:00:00Z", "SITE": "Lab 2"}
    assert FILTERS["image_release"](text.decode()) == expected
    assert FILTERS["image_release"](text) == expected


def test_null_is_an_empty_release_and_other_input_an_error():
    assert FILTERS["image_release"](None) == {}
    with pytest.raises(AnsibleFilterError, match="image_release: expects the text of an /etc/image-release, got list"):
        FILTERS["image_release"]([1])


def test_the_key_list_whatever_the_input():
    assert FILTERS["image_release_keys"]() == FILTERS["image_release_keys"]("x") == list(RELEASE_KEYS)


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg:
          release: "{{ content | b64decode | hpc.stateless.image_release }}"
          missing: "{{ none | hpc.stateless.image_release_keys | reject('in', partial | hpc.stateless.image_release) | list }}"
"""


def test_a_playbook_calls_them_by_their_fqcn(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    content = base64.b64encode(image_release("compute", "v2", "slurm", "k" * 64, 0, {"SITE": "it's"})).decode()
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"), "ANSIBLE_LOCALHOST_WARNING": "0"}
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", str(tmp_path / "play.yml"), "-e", json.dumps(
                               {"content": content, "partial": "IMAGE=compute\nVERSION=v1\n"})],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msg = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    assert msg["release"]["SITE"] == "it's" and msg["release"]["IMAGE"] == "compute"
    assert msg["missing"] == ["LAYER", "LAYER_KEY", "BUILD_TIME"]
