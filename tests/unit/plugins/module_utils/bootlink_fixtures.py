"""Pack output for the bootlink/bootconfig unit tests: real files in the pack format, small contents."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def make_pack(output: Path, image: str = "compute", version: str = "v1", *, payload: bytes = b"",
              created: str = "2026-01-01T00:00:00Z", uncompressed_size: int = 300 * 2**20,
              squashfs: bool = False, extra_files: dict[str, bytes] | None = None) -> Path:
    """``<output>/<image>/<version>/`` with vmlinuz, the artifact(s), SHA256SUMS and manifest.json."""
    directory = output / image / version
    directory.mkdir(parents=True)
    files = {"vmlinuz": b"KERNEL " + version.encode() + payload,
             f"{image}.cpio.zst": b"CPIO " + version.encode() + payload * 3}
    if squashfs:
        files[f"{image}.squashfs"] = b"SQUASHFS " + version.encode() + payload
        files["initrd.img"] = b"LIVE INITRD " + version.encode()
    files.update(extra_files or {})
    for name, content in files.items():
        (directory / name).write_bytes(content)
    (directory / "SHA256SUMS").write_text(
        "".join(f"{hashlib.sha256(content).hexdigest()}  {name}\n" for name, content in sorted(files.items())))
    artifacts = [{"file": f"{image}.cpio.zst", "format": "cpio.zst", "size": len(files[f"{image}.cpio.zst"]),
                  "sha256": hashlib.sha256(files[f"{image}.cpio.zst"]).hexdigest()}]
    manifest = {"image": image, "version": version, "created": created, "layer": "slurm",
                "layer_keys": {"slurm": "a" * 64},
                "kernel": {"file": "vmlinuz", "version": "6.1.0-test"},
                "artifacts": artifacts, "uncompressed_size": uncompressed_size,
                "packages": [{"name": "bash", "version": "5.2"}], "kernel_args": "", "initrd": None}
    if squashfs:
        artifacts.append({"file": f"{image}.squashfs", "format": "squashfs",
                          "size": len(files[f"{image}.squashfs"]),
                          "sha256": hashlib.sha256(files[f"{image}.squashfs"]).hexdigest()})
        manifest["initrd"] = {"file": "initrd.img", "generator": "dracut",
                              "kernel_args": "root=live:<URL of the squashfs> rd.live.image rd.neednet=1 ip=dhcp",
                              "size": len(files["initrd.img"]),
                              "sha256": hashlib.sha256(files["initrd.img"]).hexdigest()}
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return directory


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
