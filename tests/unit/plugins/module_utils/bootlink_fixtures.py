"""Pack output for the bootlink/bootconfig unit tests: real files in the pack format, small contents."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible_collections.hpc.stateless.plugins.module_utils._contract import manifest as pm
from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import (
    INITRD_FILE,
    KERNEL_FILE,
    MANIFEST_FILE,
    SUMS_FILE,
    artifact_file,
)
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import sha256_bytes, sums_text


def make_pack(output: Path, image: str = "compute", version: str = "v1", *, payload: bytes = b"",
              created: str = "2026-01-01T00:00:00Z", uncompressed_size: int = 300 * 2**20,
              squashfs: bool = False, extra_files: dict[str, bytes] | None = None) -> Path:
    """``<output>/<image>/<version>/`` with vmlinuz, the artifact(s), SHA256SUMS and manifest.json,
    written through the artifact contract as pack writes them."""
    directory = output / image / version
    directory.mkdir(parents=True)
    cpio, squash = artifact_file(image, "cpio.zst"), artifact_file(image, "squashfs")
    files = {KERNEL_FILE: b"KERNEL " + version.encode() + payload, cpio: b"CPIO " + version.encode() + payload * 3}
    if squashfs:
        files[squash] = b"SQUASHFS " + version.encode() + payload
        files[INITRD_FILE] = b"LIVE INITRD " + version.encode()
    files.update(extra_files or {})
    for name, content in files.items():
        (directory / name).write_bytes(content)
    artifacts = [{"file": cpio, "format": "cpio.zst", "size": len(files[cpio]), "sha256": sha256_bytes(files[cpio])}]
    initrd = None
    if squashfs:
        artifacts.append({"file": squash, "format": "squashfs", "size": len(files[squash]),
                          "sha256": sha256_bytes(files[squash])})
        initrd = {"file": INITRD_FILE, "generator": "dracut",
                  "kernel_args": "root=live:<URL of the squashfs> rd.live.image rd.neednet=1 ip=dhcp",
                  "size": len(files[INITRD_FILE]), "sha256": sha256_bytes(files[INITRD_FILE])}
    manifest = pm.build_manifest(image=image, version=version, created=pm.parse_iso_utc(created), layer="slurm",
                                 layer_keys={"slurm": "a" * 64}, kernel={"file": KERNEL_FILE, "version": "6.1.0-test"},
                                 artifacts=artifacts, uncompressed_size=uncompressed_size,
                                 packages=[{"name": "bash", "version": "5.2"}], kernel_args="", initrd=initrd)
    files[MANIFEST_FILE] = pm.manifest_bytes(manifest)
    (directory / MANIFEST_FILE).write_bytes(files[MANIFEST_FILE])
    # SHA256SUMS lists manifest.json too, as pack writes it.
    (directory / SUMS_FILE).write_text(sums_text({name: sha256_bytes(content) for name, content in files.items()}))
    return directory


def rewrite_manifest(directory: Path, change: Callable[[dict[str, Any]], None], relist: bool = False) -> None:
    """Edit ``directory``'s manifest.json with ``change(manifest)``; ``relist`` puts its new digest into SHA256SUMS
    (a consistent pack with another manifest) instead of leaving the file that SHA256SUMS vouches for changed."""
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    change(manifest)
    data = pm.manifest_bytes(manifest)
    (directory / MANIFEST_FILE).write_bytes(data)
    if relist:
        lines = [f"{sha256_bytes(data)}  {MANIFEST_FILE}" if line.endswith(f"  {MANIFEST_FILE}") else line
                 for line in (directory / SUMS_FILE).read_text().splitlines()]
        (directory / SUMS_FILE).write_text("\n".join(lines) + "\n")


def tree_snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` -> symlink target, file content digest or 'dir' (to compare trees)."""
    snapshot: dict[str, str] = {}
    if not root.exists():
        return snapshot
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            snapshot[rel] = "-> " + str(path.readlink())
        elif path.is_dir():
            snapshot[rel] = "dir"
        elif path.name != ".hpc-stateless.lock":
            snapshot[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return snapshot
