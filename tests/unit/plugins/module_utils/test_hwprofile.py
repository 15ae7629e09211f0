"""Hardware profiles: which modules and firmware a profile keeps, the exclusions, depmod staging, the pack."""

from __future__ import annotations

import gzip
import lzma
import os
import stat
import struct
import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack import hwprofile as hw
from ansible_collections.hpc.stateless.plugins.module_utils._pack import run as pack_run
from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import Packer, PackError, PackRequest
from ansible_collections.hpc.stateless.plugins.module_utils._pack.tree import ExcludeRules, walk
from test_pack_newc import parse_newc  # noqa: E402 - sibling test module (rootdir-relative import)

KVER = "6.1.0-99-amd64"
MODDIR = f"usr/lib/modules/{KVER}"


def elf_module(modinfo: list[str]) -> bytes:
    """A minimal ELF64 little-endian relocatable file with a ``.modinfo`` and a ``.shstrtab`` section."""
    info = b"".join(item.encode() + b"\0" for item in modinfo)
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    info_off = 64
    strtab_off = info_off + len(info)
    shoff = strtab_off + len(shstrtab)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)
    sections = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    sections += struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, info_off, len(info), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 10, 3, 0, 0, strtab_off, len(shstrtab), 0, 0, 1, 0)
    return header + info + shstrtab + sections


# name -> (path below the modules directory, dependencies, firmware)
MODULES = {
    "e1000": ("kernel/drivers/net/ethernet/intel/e1000/e1000.ko", [], []),
    "virtio_net": ("kernel/drivers/net/virtio_net.ko", ["net_failover", "failover"], []),
    "net_failover": ("kernel/drivers/net/net_failover.ko", ["failover"], []),
    "failover": ("kernel/net/core/failover.ko", [], []),
    "iwlwifi": ("kernel/drivers/net/wireless/intel/iwlwifi/iwlwifi.ko.xz", ["cfg80211"], ["iwlwifi-8000C-*.ucode"]),
    "cfg80211": ("kernel/net/wireless/cfg80211.ko", [], ["regulatory.db"]),
    "bnx2": ("kernel/drivers/net/ethernet/broadcom/bnx2.ko", [], ["bnx2/bnx2-mips-09-6.2.1b.fw"]),
    "ext4": ("kernel/fs/ext4/ext4.ko", ["crc16"], []),
    "crc16": ("kernel/lib/crc16.ko", [], []),
    "crc32c_generic": ("kernel/crypto/crc32c_generic.ko", [], []),
    "loop": ("kernel/drivers/block/loop.ko", [], []),
}
ALIASES = [
    "alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000",
    "alias virtio:d00000001v* virtio_net",
    "alias pci:v00008086d000024F3sv*sd*bc*sc*i* iwlwifi",
    "alias pci:v000014E4d0000164Asv*sd*bc*sc*i* bnx2",
    "alias fs-ext4 ext4",
    "alias crypto-crc32c crc32c_generic",
]
FIRMWARE = {
    "iwlwifi-8000C-36.ucode": b"i" * 300,
    "regulatory.db": b"r" * 20,
    "bnx2/bnx2-mips-09-6.2.1b.fw": b"b" * 500,
    "radeon/R600_rlc.bin": b"x" * 4000,
    "intel/ibt-link.sfi": ("link", "ibt-real.sfi"),
    "intel/ibt-real.sfi": b"s" * 10,
}


def make_image(root, firmware=True):
    mod = root / MODDIR
    for name, (rel, _deps, fw) in MODULES.items():
        path = mod / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = elf_module([f"name={name}", "license=GPL", *(f"firmware={f}" for f in fw)])
        path.write_bytes(lzma.compress(data) if rel.endswith(".xz") else data)
    dep = "".join(f"{rel}: {' '.join(MODULES[d][0] for d in deps)}\n".replace(" \n", "\n")
                  for rel, deps, _fw in MODULES.values())
    (mod / "modules.dep").write_text(dep)
    (mod / "modules.alias").write_text("# Aliases extracted from modules themselves.\n" + "\n".join(ALIASES) + "\n")
    (mod / "modules.softdep").write_text("# Soft dependencies\nsoftdep ext4 pre: crypto-crc32c\n")
    (mod / "modules.builtin").write_text("kernel/drivers/block/virtio_blk.ko\n")
    (mod / "modules.builtin.modinfo").write_bytes(b"virtio_blk.license=GPL\0")
    (mod / "modules.order").write_text("".join(rel.replace(".xz", "") + "\n" for rel, _d, _f in MODULES.values()))
    if firmware:
        for rel, data in FIRMWARE.items():
            path = root / "usr/lib/firmware" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, tuple):
                path.symlink_to(data[1])
            else:
                path.write_bytes(data)
    (root / "lib").symlink_to("usr/lib")  # merged /usr, as Debian 12
    (root / "boot").mkdir()
    (root / f"boot/vmlinuz-{KVER}").write_bytes(b"kernel")
    (root / "etc").mkdir()
    (root / "etc/hostname").write_text("node\n")
    return root


@pytest.fixture
def image(tmp_path):
    return make_image(tmp_path / "root")


def profile(**value):
    return hw.HardwareProfile.from_option(value)


def test_modinfo_reads_every_firmware_field_of_plain_and_xz_modules(image):
    data = hw._module_bytes(str(image), f"{MODDIR}/{MODULES['iwlwifi'][0]}")
    assert hw.modinfo_field(data, "firmware") == ["iwlwifi-8000C-*.ucode"]
    assert hw.modinfo_field(data, "name") == ["iwlwifi"]
    assert hw.modinfo_field(b"not an elf file", "firmware") == []


def test_named_modules_keep_their_dependencies_transitively(image):
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["virtio-net"]))
    assert plan.modules_rel == MODDIR  # the real path, not through the /lib symlink
    assert plan.kept == ["failover", "loop", "net_failover", "virtio_net"]  # loop: a boot-path module
    assert f"{MODDIR}/{MODULES['e1000'][0]}" in plan.excluded
    assert f"{MODDIR}/{MODULES['virtio_net'][0]}" not in plan.excluded
    assert f"{MODDIR}/kernel/drivers/net/ethernet" in plan.excluded  # nothing kept below it
    assert f"{MODDIR}/kernel/drivers/net" not in plan.excluded
    assert f"{MODDIR}/kernel" not in plan.excluded and MODDIR not in plan.excluded
    assert plan.removed["modules"]["files"] == len(MODULES) - 4


def test_modaliases_match_alias_globs_and_unmatched_lines_are_reported(image):
    lines = ["pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00",
             "pci:v00008086d000024F3sv00008086sd00000010bc02sc80i00",
             "acpi:PNP0A03:", "platform:serial8250"]
    plan = hw.plan_pruning(str(image), KVER, profile(modaliases=lines))
    assert plan.matched == {lines[0]: ["e1000"], lines[1]: ["iwlwifi"]}
    assert plan.unmatched_modaliases == sorted(lines[2:])
    assert {"e1000", "iwlwifi", "cfg80211"} <= set(plan.kept) and "bnx2" not in plan.kept


def test_firmware_named_by_kept_modules_is_kept_and_the_rest_removed(image):
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["iwlwifi"], firmware=["intel/ibt-link.sfi"]))
    assert plan.firmware_kept == ["intel/ibt-link.sfi", "intel/ibt-real.sfi", "iwlwifi-8000C-36.ucode",
                                  "regulatory.db"]  # a kept symlink keeps its target
    assert {"usr/lib/firmware/radeon", "usr/lib/firmware/bnx2", "usr/lib/firmware/radeon/R600_rlc.bin"} <= plan.excluded
    assert plan.removed["firmware"] == {"files": 2, "bytes": 4500}
    assert plan.kept_size["firmware"]["files"] == 4


def test_softdeps_and_force_are_kept(image):
    plan = hw.plan_pruning(str(image), KVER, profile(force=["ext4"]))
    assert {"ext4", "crc16", "crc32c_generic"} <= set(plan.kept)  # crc32c_generic through softdep pre: crypto-crc32c


def test_unknown_module_names_the_key_and_builtin_modules_are_accepted(image):
    with pytest.raises(hw.HardwareProfileError, match=r"hardware_profile\.force: unknown module 'e1001'"):
        hw.plan_pruning(str(image), KVER, profile(modules=["e1000"], force=["e1001"]))
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["virtio_blk"]))
    assert plan.builtin_named == ["virtio_blk"]


@pytest.mark.parametrize("value, message", [
    ({"modules": "e1000"}, r"hardware_profile\.modules must be a list"),
    ({"modlues": ["e1000"]}, r"unknown key\(s\) modlues"),
    ({"modaliases_file": "/nonexistent/node.modaliases"}, r"modaliases_file /nonexistent/node\.modaliases"),
])
def test_bad_profiles_name_the_key(value, message):
    with pytest.raises(hw.HardwareProfileError, match=message):
        hw.HardwareProfile.from_option(value)


def test_modaliases_file_is_read_with_comments_and_duplicates_dropped(tmp_path):
    path = tmp_path / "node.modaliases"
    path.write_text("# node01\npci:v1\n\npci:v1\nvirtio:d1\n")
    loaded = hw.HardwareProfile.from_option({"modaliases_file": str(path), "modaliases": ["acpi:X:"]})
    assert loaded.modaliases == ("acpi:X:", "pci:v1", "virtio:d1")
    assert hw.HardwareProfile.from_option({}) is None and hw.HardwareProfile.from_option(None) is None


def test_image_without_modules_is_an_error(tmp_path):
    root = tmp_path / "bare"
    root.mkdir()
    with pytest.raises(hw.HardwareProfileError, match=f"no /usr/lib/modules/{KVER}"):
        hw.plan_pruning(str(root), KVER, profile(modules=["e1000"]))


def test_staging_holds_only_kept_modules_and_a_filtered_order(image, tmp_path):
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["iwlwifi"]))
    staged = hw.stage_modules(str(image), plan, str(tmp_path / "staging"))
    assert staged == str(tmp_path / "staging" / "lib" / "modules" / KVER)
    found = sorted(os.path.relpath(os.path.join(d, f), staged) for d, _s, files in os.walk(staged) for f in files)
    assert found == sorted([MODULES["iwlwifi"][0], MODULES["cfg80211"][0], MODULES["loop"][0], "modules.builtin",
                            "modules.builtin.modinfo", "modules.order"])
    assert (tmp_path / "staging/lib/modules" / KVER / "modules.order").read_text().splitlines() == [
        MODULES["iwlwifi"][0].replace(".xz", ""), MODULES["cfg80211"][0], MODULES["loop"][0]]
    # What depmod would write; depmod itself (kmod) is not installed on this build host.
    (tmp_path / "staging/lib/modules" / KVER / "modules.dep").write_text("kernel/drivers/block/loop.ko:\n")
    outputs = hw.depmod_outputs(str(image), plan, str(tmp_path / "staging"))
    assert sorted(outputs) == [f"{MODDIR}/modules.alias.unpruned", f"{MODDIR}/modules.dep", f"{MODDIR}/modules.order"]
    assert outputs[f"{MODDIR}/modules.alias.unpruned"] == (image / MODDIR / "modules.alias").read_bytes()


def test_exclude_rules_take_exact_paths():
    rules = ExcludeRules(["tmp/*"], {"usr/lib/modules/x/kernel/a.ko"})
    assert rules.excluded("usr/lib/modules/x/kernel/a.ko") and rules.excluded("tmp/junk")
    assert not rules.excluded("usr/lib/modules/x/kernel/b.ko")


def test_walk_with_the_plan_leaves_the_pruned_files_out(image):
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["e1000"]))
    walked = {e.rel for e in walk(str(image), ExcludeRules([], plan.excluded))}
    assert f"{MODDIR}/{MODULES['e1000'][0]}" in walked
    assert not [rel for rel in walked if rel.endswith((".ko", ".ko.xz")) and "e1000" not in rel and "loop" not in rel]
    assert "usr/lib/firmware" in walked and "usr/lib/firmware/radeon" not in walked


def _pack(image, out, **extra):
    req = PackRequest(image="node", output_dir=str(out), formats=["cpio.gz"], version="1.0", source_path=str(image),
                      source_date_epoch=1_700_000_000, **extra)
    packer = Packer(req)
    return packer, packer.run(False)


def test_without_a_profile_the_pack_is_unchanged(image, tmp_path):
    _p, plain = _pack(image, tmp_path / "a")
    _p, empty = _pack(image, tmp_path / "b", hardware_profile={})
    for name in ("node.cpio.gz", "manifest.json", "SHA256SUMS"):
        assert (tmp_path / "a/node/1.0" / name).read_bytes() == (tmp_path / "b/node/1.0" / name).read_bytes()
    assert "hardware_profile" not in plain["manifest"] and "hardware_profile" not in plain["manifest"]["options"]
    assert "pruned_by_hardware_profile" not in plain["size_report"]
    assert empty["uncompressed_size"] == plain["uncompressed_size"]


def test_pack_without_depmod_on_the_host_fails_and_leaves_nothing(image, tmp_path, monkeypatch):
    # A build host without kmod: depmod is looked up on PATH and in the sbin directories, so hiding it by
    # PATH alone would depend on whether this host has kmod (dracut pulls it in). Only depmod goes missing.
    real_find = pack_run.find_binary
    monkeypatch.setattr(pack_run, "find_binary", lambda name: None if name == "depmod" else real_find(name))
    with pytest.raises(PackError, match="depmod is not installed on the build host"):
        _pack(image, tmp_path / "out", hardware_profile={"modules": ["e1000"]})
    assert not (tmp_path / "out" / "node").exists()


def test_pack_with_a_profile_records_it_and_overlays_depmod_data(image, tmp_path, monkeypatch):
    # A stand-in for kmod's depmod, first on PATH whether or not this host has kmod: it lists the staged modules.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "depmod").write_text('#!/bin/sh\ncd "$2/lib/modules/$3" && find kernel -name "*.ko*" | sort '
                                   '| sed "s/$/:/" > modules.dep\n')
    (bindir / "depmod").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    packer, result = _pack(image, tmp_path / "out", hardware_profile={"modules": ["e1000"],
                                                                      "modaliases": ["acpi:NOPE:"]})
    entry = result["manifest"]["hardware_profile"]
    assert entry["kept_modules"] == ["e1000", "loop"] and entry["unmatched_modaliases"] == ["acpi:NOPE:"]
    assert entry["removed"]["modules"]["files"] == len(MODULES) - 2
    assert result["manifest"]["options"]["hardware_profile"]["modules"] == ["e1000"]
    assert result["size_report"]["pruned_by_hardware_profile"]["firmware"]["files"] == len(FIRMWARE)
    assert "removed by the hardware profile: modules 9 files" in result["size_report_text"]
    assert any("1 modalias line(s) match no module" in w for w in packer.warnings)
    assert len((image / MODDIR / "modules.dep").read_text().splitlines()) == len(MODULES)  # the source is untouched
    _p, plain = _pack(image, tmp_path / "plain")
    assert result["uncompressed_size"] < plain["uncompressed_size"]
    listing = _cpio_listing(tmp_path / "out/node/1.0/node.cpio.gz")
    assert listing[f"{MODDIR}/modules.dep"] == (b"kernel/drivers/block/loop.ko:\n"
                                                b"kernel/drivers/net/ethernet/intel/e1000/e1000.ko:\n")
    assert stat.S_IMODE(listing[hw.NODE_CHECK_PATH + ":mode"]) == 0o755
    assert f"{MODDIR}/{MODULES['bnx2'][0]}" not in listing


def _cpio_listing(path) -> dict:
    members = parse_newc(gzip.decompress(path.read_bytes()))
    return {**{m["name"].decode(): m["data"] for m in members},
            **{m["name"].decode() + ":mode": m["mode"] for m in members}}


def test_node_check_names_modules_left_out_for_the_nodes_devices(tmp_path):
    moddir = tmp_path / "modules"
    moddir.mkdir()
    (moddir / "modules.dep").write_text("kernel/drivers/net/ethernet/intel/e1000/e1000.ko:\n")
    (moddir / "modules.alias.unpruned").write_text("\n".join(ALIASES) + "\nalias usb:v0BDAp8179d*dc*dsc*dp*ic*isc*ip*in* "
                                                   "r8188eu\nalias of:N*T*Cfsl,imx[0-9]*-uart r-imx\n")
    script = tmp_path / "hpc-hwprofile-check"
    script.write_text(hw.NODE_CHECK_SCRIPT)
    script.chmod(0o755)
    devices = tmp_path / "node.modaliases"

    def check(*lines):
        devices.write_text("".join(line + "\n" for line in lines))
        return subprocess.run(["sh", str(script), str(devices)], env={**os.environ, "HPC_HWPROFILE_MODULES": str(moddir)},
                              capture_output=True, text=True, check=False)

    clean = check("pci:v00008086d0000100Esv00001AF4sd00001100bc02sc00i00", "acpi:PNP0501:")
    assert (clean.returncode, clean.stdout) == (0, "")
    missing = check("pci:v000014E4d0000164Asv00000000sd00000000bc02sc00i00",
                    "usb:v0BDAp8179d0000dc00dsc00dp00icFFiscFFipFFin00", "of:NuartT(null)Cfsl,imx6q-uart")
    assert missing.returncode == 1
    assert missing.stdout.splitlines() == [
        "missing module bnx2 (needed by pci:v000014E4d0000164Asv00000000sd00000000bc02sc00i00)",
        "missing module r8188eu (needed by usb:v0BDAp8179d0000dc00dsc00dp00icFFiscFFipFFin00)",
        "missing module r_imx (needed by of:NuartT(null)Cfsl,imx6q-uart)"]


def test_the_plan_refuses_unknown_keys_of_an_images_hardware_profile():
    from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import LayerGraph, LayerSpecError
    layers = {"base": {"bootstrap": {"distro": "debian", "release": "bookworm"}}}
    graph = LayerGraph.from_spec(layers, {"node": {"layer": "base", "hardware_profile": {"modules": ["e1000"]}}})
    assert graph.images["node"]["hardware_profile"] == {"modules": ["e1000"]}
    with pytest.raises(LayerSpecError, match=r"hpc_stateless_images\.node\.hardware_profile.*modaliasfile"):
        LayerGraph.from_spec(layers, {"node": {"layer": "base", "hardware_profile": {"modaliasfile": "x"}}})
    with pytest.raises(LayerSpecError, match=r"hardware_profile"):
        LayerGraph.from_spec(layers, {"node": {"layer": "base", "hardware_profile": ["e1000"]}})


def test_module_data_is_read_inside_the_image_and_never_through_a_link(image, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "shadow").write_bytes(b"root:$6$host-secret:19000::::::\n")
    plan = hw.plan_pruning(str(image), KVER, profile(modules=["e1000"]))
    staging = tmp_path / "staging"
    hw.stage_modules(str(image), plan, str(staging))
    (staging / "lib/modules" / KVER / "modules.dep").write_text("kernel/drivers/block/loop.ko:\n")
    (image / MODDIR / "modules.alias").unlink()
    (image / MODDIR / "modules.alias").symlink_to(host / "shadow")  # packed as modules.alias.unpruned before
    with pytest.raises(hw.HardwareProfileError, match=f"/{MODDIR}/modules.alias: not a regular file but a symbolic"):
        hw.depmod_outputs(str(image), plan, str(staging))
    with pytest.raises(hw.HardwareProfileError, match="modules.alias"):
        hw.plan_pruning(str(image), KVER, profile(modules=["e1000"]))


def test_module_paths_of_modules_dep_stay_below_the_modules_directory(image, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.ko").write_bytes(elf_module(["name=secret", "firmware=x"]))
    escape = "../" * 12 + str(host / "secret.ko").lstrip("/")
    with open(image / MODDIR / "modules.dep", "a", encoding="utf-8") as handle:
        handle.write(f"{escape}:\n")
    with pytest.raises(hw.HardwareProfileError, match="not a path below its modules directory"):
        hw.plan_pruning(str(image), KVER, profile(modules=["secret"]))


def test_files_pack_adds_are_secret_scanned_like_the_images(image, tmp_path, monkeypatch):
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # The image's alias table ends in a private key; depmod regenerates it, so the walk leaves it out and
    # only its unpruned copy, which pack adds itself, carries the key.
    with open(image / MODDIR / "modules.alias", "ab") as handle:
        handle.write(key.read_bytes())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "depmod").write_text('#!/bin/sh\ncd "$2/lib/modules/$3" && find kernel -name "*.ko*" | sort '
                                   '| sed "s/$/:/" > modules.dep && : > modules.alias\n')
    (bindir / "depmod").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with pytest.raises(PackError, match=f"refusing to pack secrets: /{MODDIR}/modules.alias.unpruned "
                                        r"\(OpenSSH private key block"):
        _pack(image, tmp_path / "out", hardware_profile={"modules": ["e1000"]})
    assert not (tmp_path / "out" / "node").exists()


@pytest.mark.parametrize(("suffix", "content", "why"), [
    (".ko.gz", gzip.compress(b"\x7fELF" + bytes(4000))[:40] + b"\xa5" * 40, "cannot decompress: Error -3"),
    (".ko.xz", lzma.compress(b"\x7fELF" + bytes(4000))[:30] + b"\xa5" * 40, "cannot decompress: Corrupt input data"),
    (".ko.xz", lzma.compress(b"\x7fELF" + bytes(4000))[:-30], "cannot decompress: it is truncated"),
    (".ko.xz", lzma.compress(b"\x7fELF" + bytes(8 << 20)), "cannot decompress: it expands past 4 MiB"),
    (".ko.zst", b"\x28\xb5\x2f\xfd" + b"\xa5" * 40, "cannot decompress: "),
], ids=["gzip-damaged", "xz-damaged", "xz-truncated", "xz-bomb", "zstd-damaged"])
def test_a_damaged_or_oversized_module_is_named_not_a_crash(tmp_path, monkeypatch, suffix, content, why):
    monkeypatch.setattr(hw, "MODULE_MAX_SIZE", 4 << 20)
    rel = f"{MODDIR}/kernel/drivers/net/bad{suffix}"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(content)
    with pytest.raises(hw.HardwareProfileError, match=f"^/{rel}: {why}"):
        hw._module_bytes(str(tmp_path), rel)  # pylint: disable=protected-access
