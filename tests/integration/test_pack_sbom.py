"""The SBOM pack writes, from real package databases, checked by cyclonedx-python-lib's validator.

* dpkg: the real hpc.stateless.pack module on a built Debian layer image with a kernel (the
  default compute image, else the pack tests' private packkernel layer), packed twice;
* rpm: roots installed by the rootfs module with Debian's dnf (EL: /var/lib/rpm) and zypper (SUSE:
  /usr/lib/sysimage/rpm) from the local signed repository that test_rootfs_rpm.py builds, read by
  the pkgdb reader (the build host's rpm) into an SBOM;
* no database: a plain directory packed, the SBOM says why it lists no packages.

The image packs exclude most of the tree from the archive (the package database is read from the
image, not from the archive), so the two packs stay small.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from conftest import buildah, run_site
from pack_support import PACK_INVENTORY, PACK_PREFIX, pack_module, small_root
from test_rootfs_rpm import TOOLS as RPM_TOOLS
from test_rootfs_rpm import rpm_repo, run_rootfs  # noqa: F401 pylint: disable=unused-import # rpm_repo: a fixture

from ansible_collections.hpc.stateless.plugins.module_utils._contract import pkgdb, sbom

CANDIDATES = ("localhost/hpc-stateless/compute:latest", f"{PACK_PREFIX}/packkernel:latest")
ARCHIVE_EXCLUDES = ["usr/*", "var/*", "opt/*", "etc/*"]


def validate(data: bytes) -> dict:
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode("utf-8"))
    assert error is None, f"{error.data.message} at {list(error.data.absolute_path)}"
    return json.loads(data)


def properties(component: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def _has_kernel(ref: str) -> bool:
    if not buildah("inspect", "--type", "image", ref, check=False):
        return False
    name = f"hpc-stateless-sbomtest-{os.getpid()}"
    buildah("from", "--pull=never", "--quiet", "--name", name, ref)
    try:
        boot = Path(buildah("mount", name).strip()) / "boot"
        return any(p.name.startswith("vmlinuz-") for p in boot.iterdir()) if boot.is_dir() else False
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)


@pytest.fixture(scope="module")
def kernel_image() -> str:
    """A built Debian layer image with a kernel; the pack tests' private layer is built when none is."""
    for ref in CANDIDATES:
        if _has_kernel(ref):
            return ref
    build = run_site("-e", f"hpc_stateless_image_prefix={PACK_PREFIX}", inventory=PACK_INVENTORY)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-2000:]
    return CANDIDATES[-1]


def _pack(ref: str, out: Path, force: bool = False) -> tuple[Path, dict]:
    rc, result = pack_module(image="sbomtest", source_image=ref, output_dir=str(out), version="1.0~sbom+test1",
                             formats=["cpio.zst"], levels={"cpio.zst": 1}, exclude=ARCHIVE_EXCLUDES, force=force)
    assert rc == 0, result.get("msg")
    return Path(result["version_dir"]), result


def test_pack_writes_a_valid_reproducible_sbom_listed_in_sha256sums(kernel_image, tmp_path):
    version_dir, result = _pack(kernel_image, tmp_path)
    first = (version_dir / "sbom.cdx.json").read_bytes()
    assert result["sbom"] == str(version_dir / "sbom.cdx.json")
    doc = validate(first)
    manifest = result["manifest"]
    listed = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=version_dir,
                            capture_output=True, text=True, check=True).stdout
    assert "sbom.cdx.json: OK" in listed
    assert not any("SBOM" in w for w in result.get("warnings", [])), result["warnings"]

    image = doc["metadata"]["component"]
    assert (image["name"], image["version"]) == ("sbomtest", "1.0~sbom+test1")
    image_props = properties(image)
    assert manifest["layer_keys"], "the source image carries layer labels"
    for layer, key in manifest["layer_keys"].items():
        assert image_props[f"hpc.stateless:layer_key:{layer}"] == key
    assert image_props["hpc.stateless:source_image_id"] == manifest["source"]["image_id"]
    assert image_props["hpc.stateless:package_database"] == "dpkg"
    assert doc["metadata"]["timestamp"] == manifest["created"]

    by_name: dict[str, list[dict]] = {}
    for component in doc["components"]:
        by_name.setdefault(component["name"], []).append(component)
    (bash,) = by_name["bash"]
    assert bash["purl"].startswith("pkg:deb/debian/bash@") and "arch=amd64" in bash["purl"]
    assert bash["licenses"], "bash's machine-readable copyright is kept by the base role"
    assert properties(bash)["hpc.stateless:source_package"] == "bash"
    (kernel,) = by_name["vmlinuz"]
    assert kernel["version"] == manifest["kernel"]["version"]
    assert kernel["hashes"] == [{"alg": "SHA-256", "content": manifest["kernel"]["sha256"]}]
    assert f"linux-image-{manifest['kernel']['version']}" in by_name
    # the manifest's package list comes from the same reader
    packages = {(p["name"], p.get("architecture")) for p in manifest["packages"]}
    assert packages == {(c["name"], properties(c)["hpc.stateless:architecture"])
                        for c in doc["components"] if c["type"] == "library"}
    with_licenses = sum(1 for c in doc["components"] if c.get("licenses"))
    print(f"{kernel_image}: {len(packages)} packages, {with_licenses} with licenses")

    again, _result = _pack(kernel_image, tmp_path, force=True)
    assert (again / "sbom.cdx.json").read_bytes() == first
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=again, check=True)


def test_directory_without_package_database_packs_with_a_stated_reason(tmp_path):
    tree = small_root(tmp_path)
    rc, result = pack_module(image="small", source_path=str(tree), output_dir=str(tmp_path / "out"), version="v1",
                             source_date_epoch=1_700_000_000)
    assert rc == 0, result.get("msg")
    version_dir = Path(result["version_dir"])
    doc = validate((version_dir / "sbom.cdx.json").read_bytes())
    assert [c["name"] for c in doc["components"]] == ["vmlinuz"]
    props = properties(doc["metadata"]["component"])
    assert props["hpc.stateless:package_database"] == "none"
    assert props["hpc.stateless:package_database_reason"].startswith("no package database in the image")
    assert result["manifest"]["packages"] == []
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=version_dir, check=True)


_rpm_missing = sorted({package for tool, package in RPM_TOOLS.items() if not shutil.which(tool)})


@pytest.mark.skipif(bool(_rpm_missing), reason=f"needs the Debian packages {', '.join(_rpm_missing)} "
                                               "(scripts/setup.sh)")
@pytest.mark.skipif(os.geteuid() != 0, reason="dnf --installroot and zypper --root need root")
@pytest.mark.parametrize("distro, release, vendor, db_dir", [
    ("rocky", "9", "rocky", "/var/lib/rpm"),
    ("opensuse-leap", "15.6", "opensuse", "/usr/lib/sysimage/rpm"),
])
def test_rpm_root_from_the_signed_local_repository(rpm_repo, tmp_path, distro, release, vendor,  # noqa: F811
                                                   db_dir):
    root = tmp_path / "root"
    result, code = run_rootfs({"path": str(root), "distro": distro, "release": release, "mirror": str(rpm_repo.dir),
                               "keyring": str(rpm_repo.key), "packages": ["hpc-test-release"],
                               "cache_dir": str(tmp_path / "cache")}, tmp_path)
    assert code == 0, result.get("msg")
    (root / "etc" / "os-release").write_text(f'NAME="test"\nID="{distro}"\nVERSION_ID="{release}.1"\n')

    assert pkgdb.rpm_db_dir(str(root)) == db_dir
    db = pkgdb.read_package_db(str(root))
    assert (db.kind, db.reason) == ("rpm", "")
    # gpg-pubkey (the imported key) is in the database but is not software
    assert [(p.name, p.version, p.architecture, p.source, p.licenses) for p in db.packages] == [
        ("hpc-test-base", "1.0-1", "noarch", "hpc-test-base", ("GPL-3.0-or-later",)),
        ("hpc-test-release", "1.0-1", "noarch", "hpc-test-release", ("GPL-3.0-or-later",)),
    ]
    kernel = {"file": "vmlinuz", "version": "5.14.0-test", "origin": "/boot/vmlinuz-5.14.0-test", "sha256": "0" * 64}
    data = sbom.sbom_bytes(sbom.build_sbom(image="elnode", version="1.0", created=1_700_000_000, layer="base",
                                           layer_keys={"base": "a" * 64}, kernel=kernel, db=db,
                                           source={"path": str(root)}))
    doc = validate(data)
    assert [c.get("purl") for c in doc["components"]] == [
        f"pkg:rpm/{vendor}/hpc-test-base@1.0-1?arch=noarch&distro={distro}-{release}.1",
        f"pkg:rpm/{vendor}/hpc-test-release@1.0-1?arch=noarch&distro={distro}-{release}.1",
        None,  # the kernel file
    ]
    assert doc["components"][0]["licenses"] == [{"license": {"name": "GPL-3.0-or-later",
                                                             "acknowledgement": "declared"}}]
    assert properties(doc["metadata"]["component"])["hpc.stateless:package_database"] == "rpm"
