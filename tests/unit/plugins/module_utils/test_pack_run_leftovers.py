"""What pack does with the leftovers of a killed pack in the image's output directory."""

from __future__ import annotations

import os
import subprocess

from ansible_collections.hpc.stateless.plugins.module_utils.pack.run import Packer, PackRequest


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_leftovers_of_a_killed_pack_are_removed_and_a_version_renamed_away_comes_back(tmp_path):
    image_dir = tmp_path / "out" / "img"
    dead, live = dead_pid(), os.getpid()
    for name in (f".v1.old-{dead}", f".v1.partial-{dead}", f".v2.old-{dead}", "v2", f".v3.partial-{live}"):
        (image_dir / name).mkdir(parents=True)
        (image_dir / name / "manifest.json").write_text(name)
    request = PackRequest(image="img", output_dir=str(tmp_path / "out"), formats=["cpio.zst"], source_path=str(tmp_path))
    Packer(request)._check_output_dir(str(image_dir), False)  # pylint: disable=protected-access
    # v1 was renamed away by a pack killed before its new v1 was renamed into place: it is restored.
    # v2 was replaced completely before the kill: the old copy goes. A running pack's directory stays.
    assert sorted(p.name for p in image_dir.iterdir()) == [f".v3.partial-{live}", "v1", "v2"]
    assert (image_dir / "v1" / "manifest.json").read_text() == f".v1.old-{dead}"
    assert (image_dir / "v2" / "manifest.json").read_text() == "v2"
