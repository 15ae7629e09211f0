"""SHA256SUMS: the one writer is what sha256sum checks, the one reader is strict and names file and line."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import (
    parse_sums,
    read_sums,
    sha256_bytes,
    sha256_file,
    sums_text,
)

DIGEST = "ab" * 32


def test_written_sums_pass_sha256sum_and_read_back(tmp_path):
    (tmp_path / "a.cpio.zst").write_bytes(b"a")
    (tmp_path / "vmlinuz").write_bytes(b"k")
    files = {name: sha256_file(str(tmp_path / name)) for name in ("vmlinuz", "a.cpio.zst")}
    assert files["vmlinuz"] == sha256_bytes(b"k")
    text = sums_text(files)
    (tmp_path / "SHA256SUMS").write_text(text)
    subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "SHA256SUMS"], cwd=tmp_path, check=True)
    assert text.splitlines()[0].endswith("  a.cpio.zst")
    assert read_sums(str(tmp_path / "SHA256SUMS")) == files


def test_binary_marker_upper_case_and_blank_lines_are_read():
    parsed = parse_sums(f"{DIGEST.upper()} *vmlinuz\n\n{DIGEST}  x.cpio.zst\n")
    assert parsed == {"vmlinuz": DIGEST, "x.cpio.zst": DIGEST}


@pytest.mark.parametrize("text, message", [
    (f"{DIGEST}  vmlinuz\nnot a line\n", r"^/v/SHA256SUMS:2: not a sha256sum line .*'not a line'"),
    (f"{DIGEST[:-1]}  vmlinuz\n", r"^/v/SHA256SUMS:1: not a sha256sum line"),
    (f"{DIGEST}  ../etc/passwd\n", r"^/v/SHA256SUMS:1: '\.\./etc/passwd' must be a plain file name"),
    (f"{DIGEST}  .hidden\n", r"^/v/SHA256SUMS:1: '\.hidden' must be a plain file name"),
    (f"{DIGEST}  vmlinuz\n{DIGEST}  vmlinuz\n", r"^/v/SHA256SUMS:2: vmlinuz is listed twice"),
    ("\n\n", r"^/v/SHA256SUMS: lists no files"),
])
def test_the_reader_refuses_anything_else_naming_file_and_line(text, message):
    with pytest.raises(ArtifactError, match=message):
        parse_sums(text, "/v/SHA256SUMS")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ArtifactError, match=r"SHA256SUMS: missing; the pack step writes SHA256SUMS"):
        read_sums(str(tmp_path / "SHA256SUMS"))


def test_the_writer_refuses_paths():
    with pytest.raises(ArtifactError, match="must be a plain file name"):
        sums_text({"sub/vmlinuz": DIGEST})
