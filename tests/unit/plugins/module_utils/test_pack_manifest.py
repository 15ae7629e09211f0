"""The manifest contract (written and read) and the size report (package lists: test_pkgdb.py; /etc/image-release: test_release.py)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError


@pytest.mark.parametrize("text, epoch", [
    ("2023-11-14T22:13:20Z", 1_700_000_000),
    ("2023-11-14T22:13:20.123456789Z", 1_700_000_000),
    ("2023-11-14T23:13:20+01:00", 1_700_000_000),
    ("2023-11-14 22:13:20.5 +0000", 1_700_000_000),
])
def test_parse_iso_utc(text, epoch):
    assert pm.parse_iso_utc(text) == epoch


def test_size_report_ranks_packages_and_directories():
    packages = [{"name": f"p{i}", "version": "1", "size": i} for i in range(30)]
    dirs = [{"path": f"/d{i}", "bytes": 100 - i} for i in range(25)]
    report = pm.size_report(1234, 3, packages, dirs, [(5, "a"), (9, "b")])
    assert [p["name"] for p in report["largest_packages"]][:3] == ["p29", "p28", "p27"]
    assert len(report["largest_packages"]) == 20 and len(report["largest_directories"]) == 20
    assert report["largest_files"][0] == {"path": "/b", "bytes": 9}
    text = pm.format_size_report(report)
    assert text.splitlines()[0] == "uncompressed: 1.2 KiB in 3 files" and "p29" in text


def written_manifest(**changes) -> dict:
    params = dict(image="compute", version="1.0~rc1", created=1_700_000_000, layer="slurm",
                  layer_keys={"slurm": "b", "base": "a"}, kernel={"file": "vmlinuz", "version": "6.1"},
                  artifacts=[{"file": "compute.cpio.zst", "format": "cpio.zst", "size": 1, "sha256": "0" * 64}],
                  uncompressed_size=99, packages=[{"name": "bash", "version": "5", "size": 1}])
    params.update(changes)
    return pm.build_manifest(**params)


def test_manifest_has_the_keys_deploy_reads():
    data = written_manifest()
    for key in ("image", "version", "created", "layer", "layer_keys", "kernel", "artifacts", "uncompressed_size",
                "packages"):
        assert key in data
    assert data["created"] == "2023-11-14T22:13:20Z"
    assert data["packages"] == [{"name": "bash", "version": "5"}]
    assert list(data["layer_keys"]) == ["base", "slurm"]
    assert json.loads(pm.manifest_bytes(data)) == data


def test_what_pack_writes_deploy_reads_back(tmp_path):
    data = written_manifest()
    (tmp_path / "manifest.json").write_bytes(pm.manifest_bytes(data))
    assert pm.read_manifest(str(tmp_path / "manifest.json")) == data


@pytest.mark.parametrize("changes, message", [
    ({"version": "1.0 rc1"}, r"the manifest pack writes: version '1.0 rc1' is not a valid name"),
    ({"image": "previous"}, r"image 'previous' is not a valid name"),
    ({"artifacts": [{"file": "../x.cpio.zst"}]}, r"artifacts\[0\]\.file: '\.\./x\.cpio\.zst' must be a plain file name"),
    ({"kernel": {"file": "boot/vmlinuz"}}, r"kernel\.file: 'boot/vmlinuz' must be a plain file name"),
    ({"uncompressed_size": -1}, r"'uncompressed_size' must be a byte count, got -1"),
])
def test_pack_cannot_write_a_manifest_deploy_would_refuse(changes, message):
    with pytest.raises(ArtifactError, match=message):
        written_manifest(**changes)


@pytest.mark.parametrize("content, message", [
    ("", r"manifest.json: unreadable manifest"),
    ("[]", r"manifest.json: manifest is not a JSON object"),
    ('{"image": "compute", "version": "v1"}', r"manifest.json: key 'artifacts' is missing or not a list"),
    ('{"image": "compute", "version": 7, "artifacts": []}', r"key 'version' is missing or not a str"),
])
def test_read_manifest_names_the_file_and_key(tmp_path, content, message):
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(ArtifactError, match=message):
        pm.read_manifest(str(tmp_path / "manifest.json"))


def _version(image_dir, name, created, mtime):
    path = image_dir / name
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"created": created}))
    os.utime(path / "manifest.json", (mtime, mtime))
    return str(path)


def test_newest_version_dir_is_one_rule_for_deploy_and_diff(tmp_path):
    """Layer build time first, then the pack's own time; partial, hidden and manifest-less dirs never count."""
    assert pm.newest_version_dir(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError):
        pm.newest_version_dir(str(tmp_path / "missing"))
    older_layer = _version(tmp_path, "b-old-layer", "2026-11-01T00:00:00Z", 2_000_000_000)
    assert pm.newest_version_dir(str(tmp_path)) == older_layer
    first = _version(tmp_path, "a-first", "2026-11-20T00:00:00Z", 1_000_000_000)
    second = _version(tmp_path, "c-second", "2026-11-20T00:00:00Z", 1_000_000_100)
    assert pm.newest_version_dir(str(tmp_path)) == second
    os.utime(os.path.join(first, "manifest.json"), (1_000_000_200, 1_000_000_200))  # packed again later
    assert pm.newest_version_dir(str(tmp_path)) == first
    _version(tmp_path, ".partial-z", "2027-01-01T00:00:00Z", 1_000_000_300)
    (tmp_path / "z-no-manifest").mkdir()
    assert pm.newest_version_dir(str(tmp_path)) == first


def test_deploy_and_diff_pick_the_same_newest_pack(tmp_path):
    from ansible_collections.hpc.stateless.plugins.module_utils._diff import sides
    from ansible_collections.hpc.stateless.plugins.module_utils._deploy import bootlink

    image_dir = tmp_path / "compute"
    newest = _version(image_dir, "v2", "2026-11-21T00:00:00Z", 1_000_000_000)  # the newer layer
    _version(image_dir, "v1", "2026-11-20T00:00:00Z", 1_000_000_500)  # copied later with cp -r
    assert bootlink.find_packed(str(image_dir), None) == newest
    assert sides.newest_pack(str(tmp_path), "compute") == newest
