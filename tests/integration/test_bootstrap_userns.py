"""A root build's bootstrap runs mmdebstrap and every package script as an unprivileged host uid (rootfs ``userns``).

A package made here with dpkg-deb, ``hpc-escape-probe``, carries the escape tries of the layer test's role
(tests/roles/userns_escape/files/escape.py: a root-owned host file overwritten through ``/proc/1/root`` and through
a second ``chroot``, the host's disk as a node made in the tree, through ``/proc/1/root/dev`` and the host's
``/dev``, a mount of it) and runs them from its ``postinst``, with the uid and the user namespace it runs in.
mmdebstrap installs it (a local .deb given to ``--include``, which mmdebstrap's file-mirror-automount hook, one the
module always passes, binds into the tree at the same path for dpkg) with the default base layer's packages from the
real mirror, once mapped and once unmapped: the control, where the package script runs as host root and its second
chroot does overwrite the host file, so the mapped assertions can fail. The two trees are then compared entry by
entry (type, owner, group, mode, size, link target, device numbers, file capability): the mapping changes who ran
the scripts, not the image.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from pack_support import run_module
from rootless_support import BOOTSTRAP_VARYING, tree_entries
from test_build_userns import DISK

from ansible_collections.hpc.stateless.plugins.module_utils._build import caches, idshift
from ansible_collections.hpc.stateless.plugins.module_utils._build.bootstrap import default_cache_dir
from ansible_collections.hpc.stateless.plugins.module_utils._fs import mounts_below

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a root build's bootstrap: the integration suite runs as root")

UNTOUCHED = "the host's own\n"
ESCAPE = REPO / "tests" / "roles" / "userns_escape" / "files" / "escape.py"
TRIES = "var/lib/hpc-escape-probe/tries"
# What differs between the two roots: what differs between any two bootstraps, and the probe's results and leftovers.
VARYING = (*BOOTSTRAP_VARYING, TRIES, "tmp/")
POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
    mkdir -p /var/lib/hpc-escape-probe
    {{ echo "uid $(id -u)"; echo "uid_map $(head -n1 /proc/self/uid_map | tr -s ' ' | sed 's/^ //')";
      python3 /usr/share/hpc-escape-probe/escape.py {marker} {disk} {disk_name}; }} > /{tries} 2>&1 || true
fi
"""


def make_probe(debdir: Path, marker: Path) -> Path:
    """The probe package (architecture all, depends on python3), its postinst aimed at ``marker``."""
    tree = debdir / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr/share/hpc-escape-probe").mkdir(parents=True)
    shutil.copy(ESCAPE, tree / "usr/share/hpc-escape-probe/escape.py")
    (tree / "DEBIAN/control").write_text(
        "Package: hpc-escape-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: hpc.stateless tests <t@example.org>\n"
        "Depends: python3\nDescription: tries to reach the build host from a package script\n")
    disk, disk_name = DISK or ("0:0", "hpc-escape-no-disk")  # without a block device the tries name none that exists
    postinst = tree / "DEBIAN/postinst"
    postinst.write_text(POSTINST.format(marker=marker, disk=disk, disk_name=disk_name, tries=TRIES))
    os.chmod(postinst, 0o755)
    deb = debdir / "hpc-escape-probe_1.0_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(tree)
    os.chmod(deb, 0o644)
    return deb


def bootstrap(work: Path, side: str) -> dict:
    """The default base layer's root with the probe, bootstrapped ``side`` (mapped or unmapped)."""
    marker = work / f"{side[0]}-marker"  # one length for both: the postinst is the same size
    marker.write_text(UNTOUCHED)
    os.chmod(marker, 0o644)
    debdir = work / "deb"  # one path for both sides: the trees hold the same names
    debdir.mkdir(exist_ok=True)
    deb = make_probe(debdir, marker)
    base = yaml.safe_load((REPO / "inventory/group_vars/all/layers.yml").read_text())["hpc_stateless_layers"]["base"]
    keys = dict(base["bootstrap"])
    keys["packages"] = [*keys["packages"], str(deb)]
    root = work / side
    root.mkdir()
    rc, result = run_module("hpc.stateless.rootfs", path=str(root), bootstrap=keys, layer="escapeprobe",
                            userns=side == "mapped")
    assert rc == 0 and result.get("changed"), (result.get("msg", result), result.get("stderr_lines", [])[:8])
    view = caches.bootstrap_view(default_cache_dir("debootstrap"), str(root))
    return {"root": root, "marker": marker.read_text(), "tries": (root / TRIES).read_text(), "result": result,
            "view_left": os.path.lexists(view), "mounts": mounts_below(str(root))}


@pytest.fixture(scope="module")
def roots():
    work = Path(tempfile.mkdtemp(prefix="hpc-bootstrap-userns-", dir="/var/tmp"))
    os.chmod(work, 0o755)  # the mapped root reads the probe package from here
    try:
        yield {side: bootstrap(work, side) for side in ("mapped", "unmapped")}
    finally:
        shutil.rmtree(work)


def test_unmapped_package_script_reaches_the_host(roots):
    """The control: run as host root, the package script's second chroot overwrites the host file."""
    tries = roots["unmapped"]["tries"]
    assert "uid 0\n" in tries and "uid_map 0 0 4294967295\n" in tries, tries
    assert "chroot wrote" in tries and roots["unmapped"]["marker"] != UNTOUCHED, tries


def test_mapped_package_script_runs_as_roots_subordinate_uid_and_cannot_touch_the_host(roots):
    uids, _gids = idshift.root_ranges()
    tries = roots["mapped"]["tries"]
    assert "uid 0\n" in tries and f"uid_map 0 {uids.start} {uids.count}\n" in tries, tries
    assert roots["mapped"]["marker"] == UNTOUCHED, tries
    # Every way was tried, and each says what stopped it: no node, no mount (EPERM), no host file or disk (EACCES).
    assert "proc1root errno13" in tries and "chroot errno13" in tries, tries
    assert "mknod errno1" in tries and "mount errno1" in tries and "proc1disk errno13" in tries, tries
    assert "wrote" not in tries and "read" not in tries and "mounted" not in tries, tries


def test_the_mapped_root_is_the_unmapped_one(roots):
    """Owners, groups, modes (setuid bits), sizes, links, /dev's nodes and file capabilities: entry by entry."""
    mapped, unmapped = tree_entries(roots["mapped"]["root"], VARYING), tree_entries(roots["unmapped"]["root"], VARYING)
    assert len(mapped) > 5000
    differing = sorted(rel for rel in set(mapped) | set(unmapped) if mapped.get(rel) != unmapped.get(rel))
    assert not differing, [(rel, mapped.get(rel), unmapped.get(rel)) for rel in differing[:10]]
    uids, gids = idshift.root_ranges()
    assert not [rel for rel, entry in mapped.items() if entry[1] >= uids.start or entry[2] >= gids.start]
    # apt's lists parsed in the namespace, the caches given back to root.
    parsed = os.lstat(roots["mapped"]["root"] / "var/cache/apt/srcpkgcache.bin")
    assert parsed.st_size > 1_000_000 and (parsed.st_uid, parsed.st_gid) == (0, 0)
    passwd = mapped["usr/bin/passwd"]
    assert (stat.S_IMODE(passwd[0]), passwd[1], passwd[2]) == (0o4755, 0, 0)
    assert mapped["dev/null"][5] == (1, 3) and stat.S_ISCHR(mapped["dev/null"][0])


def test_records_say_how_and_nothing_is_left(roots):
    assert roots["mapped"]["result"]["record"]["mode"] == "mapped"
    assert roots["unmapped"]["result"]["record"]["mode"] == "root"
    for side in ("mapped", "unmapped"):
        assert not roots[side]["view_left"] and roots[side]["mounts"] == [], side
