"""Lynis in the verify gate on the default image (issue 28): playbooks/tasks/verify_lynis.yml in a boot of
the slurm layer's :latest (what `make build` built), through the same playbook benchmarks/lynis_bench.py uses.
The default image scores at least 80 with every finding waived or hardened away, every check of the record
has an id and a result, and afterwards the image holds nothing of Lynis and no container or mount is left.
One boot, about 60 s (Lynis itself ~45 s on the 2-core host)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import REPO, buildah, our_mounts

from ansible_collections.hpc.stateless.plugins.module_utils._nspawn.container import container_stem

sys.path.insert(0, str(REPO / "benchmarks"))
import lynis_bench  # noqa: E402  pylint: disable=wrong-import-position,import-error

IMAGE = "localhost/hpc-stateless/slurm:latest"
LYNIS_PATHS = ("usr/sbin/lynis", "usr/share/lynis", "etc/lynis", "run/hpc-stateless-lynis")


def image_paths(ref: str, paths: tuple[str, ...]) -> list[str]:
    name = "hpc-stateless-lynis-look"
    buildah("rm", name, check=False)
    buildah("from", "--pull=never", "--quiet", "--name", name, ref)
    try:
        root = Path(buildah("mount", name).strip())
        return [p for p in paths if (root / p).exists() or (root / p).is_symlink()]
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


@pytest.mark.skipif(not Path("/usr/sbin/lynis").exists(), reason="Lynis is not installed on the build host (make setup)")
def test_the_default_image_scores_80_with_every_finding_waived_and_keeps_no_lynis(tmp_path):
    if buildah("inspect", "--type", "image", IMAGE, check=False) == "":
        pytest.fail(f"{IMAGE} is not built: run `make build` first")
    runtime = tmp_path / "nspawn"  # the boot's own session directory: its working container's name says so
    result = lynis_bench.lynis_runs({"ours": IMAGE}, tmp_path, {"ansible_nspawn_runtime_dir": str(runtime)})["ours"]

    assert result["score"] >= 80, result["message"]
    assert result["unwaived"] == [], result["message"]
    assert result["passed"] is True
    checks = {check["id"]: check for check in result["checks"]}
    assert checks["lynis/hardening-index"]["result"] == "passed"
    assert {checks[f"lynis/{test}"]["result"] for test in ("KRNL-6000", "KRNL-5830", "FILE-6344", "PKGS-7392")} == {"skipped"}
    assert all(c["result"] in ("passed", "waived", "skipped") for c in checks.values())
    assert all(c["waiver"] for c in checks.values() if c["result"] in ("waived", "skipped"))
    # findings the roles now harden are gone (they were in the report before the hardening)
    for fixed in ("AUTH-9230", "AUTH-9262", "AUTH-9286", "AUTH-9328", "BANN-7126", "BANN-7130", "USB-1000", "STRG-1846",
                  "NETW-3200", "DEB-0280", "PKGS-7370"):
        assert not any(i == f"lynis/{fixed}" or i.startswith(f"lynis/{fixed}/") for i in checks), fixed

    assert image_paths(IMAGE, LYNIS_PATHS) == []
    stem = container_stem(str(runtime))
    assert [c for c in buildah("containers", "--format", "{{.ContainerName}}").split() if c.startswith(stem)] == []
    assert our_mounts() == []
