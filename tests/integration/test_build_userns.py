"""A root build with ``hpc_stateless_build_userns: true``: the roles run as an unprivileged host uid, the image is right.

The project is the default base layer (tagged in from the default build) and a leaf layer whose role
(tests/roles/userns_escape) installs a package with apt from the host's package cache, tries to overwrite a root-
owned host file (through ``/proc/1/root`` and through a second ``chroot`` out of the build's), tries the host's disk
(a block device node of it made in the build, its raw bytes read through that node, through ``/proc/1/root/dev`` and
through the host's ``/dev`` after the second ``chroot``, and a mount of it), and writes a link in ``/`` itself (as
the kernel's postinst makes ``/vmlinuz``), a setuid and a setgid binary, a file of uid/gid 1234/4321, a binary with
``cap_net_bind_service`` and a file whose ACL names uid 1234 (buildah's commit carries no ACL: the test says so, so
a buildah that starts to is noticed). Built once mapped and once unmapped (the control: there the escape does reach
the host - the file is overwritten, and the host's own disk node opens as it does for host root - so the mapped
assertions can fail). The control cannot make the node or mount the disk either: ``buildah run`` gives the build
only containers.conf's default capabilities, which hold neither CAP_MKNOD nor CAP_SYS_ADMIN; root that reaches the
host's ``/`` needs neither, it opens the host's own node (on a host whose device cgroup refuses the disk even to
root, the control gets that refusal, EPERM, where the mapped build is refused by the node's owner and mode, EACCES).
The committed layer's own tar (``buildah push oci:``) is read: every owner as the container has it (none of root's
subordinate range), the bits and the v2 capability.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import tarfile
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, buildah, default_base_prefix, our_containers, read_from_image, run_site

from ansible_collections.hpc.stateless.plugins.module_utils._build import idshift

LEAF = "usernsleaf"
UNTOUCHED = "the host's own\n"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root builds: the integration suite runs as root")


def host_disk(path: Path) -> tuple[str, str] | None:
    """The block device holding ``path`` (else the host's ``/``) as ``("MAJOR:MINOR", name in /dev)``; None on a
    host where neither is on a block device (an overlay or tmpfs root)."""
    for where in (path, Path("/")):
        dev = os.stat(where).st_dev
        number = f"{os.major(dev)}:{os.minor(dev)}"
        uevent = Path("/sys/dev/block", number, "uevent")
        if os.major(dev) and uevent.is_file():
            fields = dict(line.split("=", 1) for line in uevent.read_text().splitlines() if "=" in line)
            if fields.get("DEVNAME") and Path("/dev", fields["DEVNAME"]).exists():
                return number, fields["DEVNAME"]
    return None


DISK = host_disk(Path(tempfile.gettempdir()))


def inventory(root: Path, run: str, marker: Path) -> Path:
    default = yaml.safe_load((REPO / "inventory" / "group_vars/all/layers.yml").read_text(encoding="utf-8"))
    spec = {"hpc_stateless_layers": {
        "base": default["hpc_stateless_layers"]["base"],
        LEAF: {"parent": "base", "roles": ["userns_escape"],
               "vars": {"userns_escape_marker": str(marker), "userns_escape_run": run,
                        # Without a block device the tries name none that exists.
                        "userns_escape_disk": DISK[0] if DISK else "0:0",
                        "userns_escape_disk_name": DISK[1] if DISK else "userns-escape-no-disk"}},
    }}
    path = root / run / "inventory"
    (path / "group_vars/all").mkdir(parents=True)
    (path / "hosts.yml").write_text((REPO / "inventory" / "hosts.yml").read_text(encoding="utf-8"))
    (path / "group_vars/all/layers.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def layer_tar_members(ref: str, work: Path) -> dict[str, tarfile.TarInfo]:
    """The entries of the image's top layer (the leaf's own changes) as committed, from ``buildah push oci:``."""
    out = work / "oci"
    buildah("push", "--quiet", ref, f"oci:{out}")
    index = json.loads((out / "index.json").read_text())
    digest = index["manifests"][0]["digest"].split(":", 1)[1]
    manifest = json.loads((out / "blobs/sha256" / digest).read_text())
    top = manifest["layers"][-1]["digest"].split(":", 1)[1]
    with tarfile.open(out / "blobs/sha256" / top, mode="r:*") as tar:
        return {member.name.lstrip("./"): member for member in tar.getmembers()}


def build(tmp_path: Path, prefix: str, userns: bool) -> dict:
    run = f"{'mapped' if userns else 'unmapped'}-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / f"{run}-marker"
    marker.write_text(UNTOUCHED)
    os.chmod(marker, 0o644)
    proc = run_site("-e", f"hpc_stateless_image_prefix={prefix}", "-e", json.dumps({"hpc_stateless_build_userns": userns}),
                    inventory=inventory(tmp_path, run, marker), playbook="playbooks/build.yml")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    ref = f"{prefix}/{LEAF}:latest"
    return {"marker": marker.read_text(), "tries": read_from_image(ref, "/srv/userns-escape"),
            "members": layer_tar_members(ref, tmp_path / run), "containers": our_containers(prefix)}


@pytest.fixture(scope="module")
def builds():
    with default_base_prefix("userns") as prefix, tempfile.TemporaryDirectory(prefix="hpc-userns-") as tmp:
        os.chmod(tmp, 0o755)
        yield {"mapped": build(Path(tmp), prefix, True), "unmapped": build(Path(tmp), prefix, False)}


def test_unmapped_build_reaches_the_host(builds):
    """The control: with the host's ids a role's second chroot overwrites the host file."""
    assert "chroot wrote" in builds["unmapped"]["tries"], builds["unmapped"]["tries"]
    assert builds["unmapped"]["marker"] != UNTOUCHED


def host_root_reads(path: str) -> str:
    """What host root gets reading the disk ``path``, in the words of the role's escape.py: ``read ext`` (its
    superblock), ``read N bytes`` or ``errnoN``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        return f"errno{exc.errno}"
    return "read ext" if head[1024 + 56:1024 + 58] == b"\x53\xef" else f"read {len(head)} bytes"


def test_unmapped_build_reaches_the_host_disk_as_host_root_does(builds):
    """The control: after the second chroot, the build opens the host's own disk node and gets exactly what host
    root gets (its superblock read; on a host whose device cgroup refuses even root the disk - this one: EPERM -
    that refusal, not the mapped build's EACCES). Making a node or mounting is refused even here: buildah run
    gives the build containers.conf's default capabilities, without CAP_MKNOD and CAP_SYS_ADMIN."""
    if DISK is None:
        pytest.skip("the host's / and temporary directory are on no block device: no disk to read")
    tries = builds["unmapped"]["tries"]
    assert f"hostdisk {host_root_reads('/dev/' + DISK[1])}\n" in tries, tries
    assert "mknod errno1" in tries and "mount errno1" in tries, tries


def test_mapped_build_cannot_touch_the_host_file(builds):
    tries = builds["mapped"]["tries"]
    assert builds["mapped"]["marker"] == UNTOUCHED, tries
    assert "wrote" not in tries, tries
    # Both ways were really tried: each line says which errno stopped it.
    assert "proc1root errno" in tries and "chroot errno" in tries, tries


def test_mapped_build_cannot_reach_the_host_disk(builds):
    """No node of the disk (EPERM), no mount of it (EPERM), its raw bytes neither through /proc/1/root (EACCES)
    nor through the host's own node after the second chroot (EACCES: the node is root's, mode 0600)."""
    tries = builds["mapped"]["tries"]
    assert "mknod errno1" in tries and "mount errno1" in tries, tries
    assert "proc1disk errno13" in tries, tries
    if DISK is not None:
        assert "hostdisk errno13" in tries, tries
    assert "read" not in tries and "mounted" not in tries and "made" not in tries, tries


@pytest.mark.parametrize("side", ["mapped", "unmapped"])
def test_committed_layer_holds_the_containers_ids_bits_and_capability(builds, side):
    members = builds[side]["members"]
    uids, _gids = idshift.root_ranges()
    shifted = sorted(name for name, m in members.items() if m.uid >= uids.start or m.gid >= uids.start)
    assert not shifted, shifted[:20]
    setuid = members["usr/local/bin/userns-setuid"]
    assert (stat.S_IMODE(setuid.mode), setuid.uid) == (0o4755, 0)
    setgid = members["usr/local/bin/userns-setgid"]
    assert (stat.S_IMODE(setgid.mode), setgid.uid, setgid.gid) == (0o2755, 0, 4321)
    numeric = members["srv/userns-numeric"]
    assert (stat.S_IMODE(numeric.mode), numeric.uid, numeric.gid) == (0o600, 1234, 4321)
    assert members["usr/bin/m4"].uid == 0
    link = members["userns-link"]  # written into "/" itself, which the layer's upper directory is
    assert (link.issym(), link.linkname, link.uid, link.gid) == (True, "srv/userns-escape", 0, 0)
    capability = members["usr/local/bin/userns-cap"].pax_headers["SCHILY.xattr.security.capability"]
    magic, permitted = struct.unpack_from("<II", capability.encode("latin-1"))
    assert magic == 0x02000001 and permitted == 1 << 10, capability  # v2, effective, cap_net_bind_service
    # buildah 1.28's commit carries no POSIX ACL into the layer, mapped or not: the file is there, its ACL is not.
    assert "SCHILY.xattr.system.posix_acl_access" not in members["srv/userns-acl"].pax_headers


def test_no_working_container_left(builds):
    assert not builds["mapped"]["containers"] and not builds["unmapped"]["containers"]
