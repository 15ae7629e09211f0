"""Verification is a stage of site.yml and a gate of pack and deploy, with real builds, boots and packs.

- A layer whose role enables a unit that fails at boot: site.yml (build -> verify -> pack -> deploy)
  stops at verify, the record names the failed check, nothing is packed, the served boot tree is
  unchanged.
- pack.yml refuses a layer image verify never passed, naming the command that runs it; verify.yml then
  boots it once and records it, a second verify reuses the record (no boot), and pack passes the gate
  with the checks in the manifest. The emergency override packs an unverified image with a warning
  and the reason in the manifest, and deploy serves it saying so.
- deploy.yml refuses a pack whose manifest records no verification; the boot tree does not change.

The layers are the cached test layers of the nspawn tests (tests/integration/inventory_nspawn) and
the private kernel layer of the pack tests (tests/integration/pack_inventory): nothing is built when
they are cached. Each pack leaves /usr out (hpc_stateless_pack_exclude), so it takes seconds.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import run_site
from deploy_support import find_kernel, write_inventory, write_pack
from nspawn_support import INVENTORY as NSPAWN_INVENTORY
from nspawn_support import TEST_PREFIX as NSPAWN_PREFIX
from nspawn_support import build_test_layers, new_runtime_dir, remove_runtime_dir, wait_clean
from pack_support import PACK_INVENTORY, PACK_PREFIX

SMALL_PACK = {"hpc_stateless_images": {"packtest": {"layer": "packkernel", "formats": ["cpio.zst"]}},
              "hpc_stateless_pack_exclude": ["usr/*"], "hpc_stateless_pack_version": "gate1"}
REASON = "gate test: the verify host is down"


def tree(root: Path) -> dict[str, str]:
    """Every entry below ``root``: symlinks by target, files by content, directories by name."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            found[rel] = path.read_text(errors="replace")
        else:
            found[rel] = "dir"
    return found


@pytest.fixture()
def runtime_dir():
    path = new_runtime_dir()
    yield path
    remove_runtime_dir(path)


@pytest.fixture()
def served_tree(tmp_path) -> Path:
    """A boot tree that serves version v0 of image ``broken`` (what nodes boot now)."""
    root = tmp_path / "tftpboot"
    (root / "images" / "broken" / "v0").mkdir(parents=True)
    (root / "images" / "broken" / "v0" / "manifest.json").write_text('{"version": "v0"}\n')
    os.symlink("images/broken/v0", root / "broken")
    return root


def test_site_stops_at_verify_when_a_unit_fails_at_boot(tmp_path, runtime_dir, served_tree):
    build_test_layers()
    inventory = tmp_path / "inventory"
    shutil.copytree(NSPAWN_INVENTORY, inventory)
    layers_file = inventory / "group_vars/all/layers.yml"
    spec = yaml.safe_load(layers_file.read_text())
    spec["hpc_stateless_images"] = {"broken": {"layer": "units_broken", "formats": ["cpio.zst"]}}
    spec["hpc_stateless_site_stages"] = ["build", "verify", "pack", "deploy"]
    layers_file.write_text(yaml.safe_dump(spec))
    before = tree(served_tree)
    records, out = tmp_path / "records", tmp_path / "images"
    proc = run_site("-e", json.dumps({
        "hpc_stateless_image_prefix": NSPAWN_PREFIX, "ansible_nspawn_runtime_dir": runtime_dir,
        "hpc_stateless_verify_layers": ["units_broken"], "hpc_stateless_verify_record_dir": str(records),
        "hpc_stateless_pack_output_dir": str(out), "hpc_stateless_boot_root": str(served_tree)}), inventory=inventory)
    stdout = proc.stdout
    assert proc.returncode != 0, stdout[-4000:]
    assert "units_broken: systemd is 'degraded'; failed units not allowed: ['hpc-nspawn-broken.service']" in stdout
    # the run ended at verify: the pack and deploy plays never started
    assert "TASK [Pack each image from its layer's image]" not in stdout
    assert "TASK [Publish each image's packed version next to the served one]" not in stdout
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))
    assert tree(served_tree) == before
    record = json.loads(next(records.glob("units_broken-*.json")).read_text())
    assert record["passed"] is False
    failed = [c for c in record["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["systemd state"]
    assert "hpc-nspawn-broken.service" in failed[0]["detail"]
    assert wait_clean(runtime_dir) == {}


@pytest.fixture(scope="module")
def packkernel():
    """The private kernel layer of the pack tests, built or found cached."""
    built = run_site("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}", inventory=PACK_INVENTORY)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]


def _run(playbook: str, records: Path, **variables) -> tuple[int, str]:
    proc = run_site("-e", json.dumps({"hpc_stateless_image_prefix": PACK_PREFIX,
                                      "hpc_stateless_verify_record_dir": str(records), **variables}),
                    inventory=PACK_INVENTORY, playbook=playbook)
    # Messages are JSON-escaped, warnings wrapped at the terminal width: compare them unwrapped.
    return proc.returncode, " ".join((proc.stdout + proc.stderr).replace('\\"', '"').split())


def _manifest(out: Path) -> dict:
    return json.loads((out / "packtest" / "gate1" / "manifest.json").read_text())


def test_pack_refuses_until_verified_then_records_the_verification(packkernel, tmp_path, runtime_dir):
    records, out = tmp_path / "records", tmp_path / "images"
    rc, output = _run("playbooks/pack.yml", records, hpc_stateless_pack_output_dir=str(out), **SMALL_PACK)
    assert rc != 0
    assert "refused: layer packkernel (content key " in output and ") was never verified: no record " in output
    assert "Run: ansible-playbook playbooks/verify.yml -e '{\"hpc_stateless_verify_layers\": [\"packkernel\"]}'" in output
    assert "set hpc_stateless_unverified_ok to the reason" in output
    assert not out.exists() or not any(out.iterdir())

    rc, output = _run("playbooks/verify.yml", records, ansible_nspawn_runtime_dir=runtime_dir)
    assert rc == 0, output[-5000:]
    assert "packkernel: systemd is running" in output
    # one record, and the JUnit report of its checks beside it
    names = sorted(p.name for p in records.iterdir())
    assert [name.split("-")[0] for name in names if name.endswith(".json")] == ["packkernel"], names
    assert [name for name in names if not name.endswith(".json")] == [
        name.removesuffix(".json") + ".junit.xml" for name in names if name.endswith(".json")], names
    rc, output = _run("playbooks/verify.yml", records, ansible_nspawn_runtime_dir=runtime_dir)
    assert rc == 0, output[-5000:]
    assert "passed verification at" in output and "not booted again" in output
    assert "TASK [Read the state of the container's systemd]" not in output

    rc, output = _run("playbooks/pack.yml", records, hpc_stateless_pack_output_dir=str(out), **SMALL_PACK)
    assert rc == 0, output[-5000:]
    verification = _manifest(out)["verification"]
    assert verification["status"] == "passed" and verification["layer"] == "packkernel"
    names = {c["name"] for c in verification["checks"]}
    own = {"systemd state", "units enabled by roles are active"}
    # verify's own checks, and the compliance suite's (ids <role or _shared>/<file>::<test>)
    assert own <= names and len(names) > len(own) and all("::" in name for name in names - own), names
    assert "verification: passed" in output
    assert wait_clean(runtime_dir) == {}


def test_override_packs_with_a_warning_and_deploy_serves_it_saying_so(packkernel, tmp_path):
    records, out, root = tmp_path / "records", tmp_path / "images", tmp_path / "tftpboot"
    rc, output = _run("playbooks/pack.yml", records, hpc_stateless_pack_output_dir=str(out),
                      hpc_stateless_unverified_ok=REASON, **SMALL_PACK)
    assert rc == 0, output[-5000:]
    assert f"OVERRIDE: hpc_stateless_unverified_ok is set ({REASON})" in output
    assert f"packing image packtest UNVERIFIED on override (hpc_stateless_unverified_ok: '{REASON}')" in output
    verification = _manifest(out)["verification"]
    assert (verification["status"], verification["override_reason"]) == ("overridden", REASON)
    assert "was never verified" in verification["unverified_because"]

    rc, output = _run("playbooks/deploy.yml", records, hpc_stateless_pack_output_dir=str(out),
                      hpc_stateless_boot_root=str(root), hpc_stateless_boot_copy_loader=False, **SMALL_PACK)
    assert rc == 0, output[-5000:]
    assert f"image packtest version gate1: verification overridden - OVERRIDE at pack time: {REASON}" in output
    assert os.readlink(root / "packtest").endswith("gate1")


def test_deploy_refuses_a_pack_without_verification_and_changes_nothing(tmp_path):
    out, root = tmp_path / "out", tmp_path / "tftpboot"
    inventory = write_inventory(tmp_path / "inventory", {"broken": {"layer": "test", "formats": ["cpio.zst"]}},
                                hpc_stateless_boot_root=str(root), hpc_stateless_pack_output_dir=str(out),
                                hpc_stateless_boot_copy_loader=False, hpc_stateless_unverified_ok="")
    # hand-made packs: their manifests record no verification; v0 is served on the override first
    write_pack(out, "broken", "v0", find_kernel())
    served = run_site("-e", "hpc_stateless_deploy_version=v0", "-e", json.dumps({"hpc_stateless_unverified_ok": "seed"}),
                      inventory=inventory, playbook="playbooks/deploy.yml")
    assert served.returncode == 0, served.stdout[-4000:]
    write_pack(out, "broken", "v1", find_kernel())
    before = tree(root)
    proc = run_site("-e", "hpc_stateless_deploy_version=v1", inventory=inventory, playbook="playbooks/deploy.yml")
    assert proc.returncode != 0
    assert ("image broken version v1 (" + str(out / "broken" / "v1") + "): refused, its manifest records no "
            "verification (packed without the verify gate, or by an older release).") in proc.stdout.replace("\n", " ")
    assert "The boot tree is unchanged." in proc.stdout
    assert tree(root) == before and os.readlink(root / "broken").endswith("v0")

    overridden = run_site("-e", "hpc_stateless_deploy_version=v1",
                          "-e", json.dumps({"hpc_stateless_unverified_ok": "rollback to a pre-gate pack"}),
                          inventory=inventory, playbook="playbooks/deploy.yml")
    assert overridden.returncode == 0, overridden.stdout[-4000:]
    assert ("verification none - OVERRIDE at deploy (hpc_stateless_unverified_ok): rollback to a pre-gate pack"
            in overridden.stdout)
    assert os.readlink(root / "broken").endswith("v1")
