"""Finding the kernel in an image tree and how a squashfs root boots."""

from __future__ import annotations

import gzip
import os
import struct

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._pack.kernel import (
    KernelError,
    bzimage_version,
    dracut_modules,
    find_kernel,
    image_initrd,
    kernel_arch,
    read_kernel_arch,
    squashfs_boot_method,
    version_key,
)


def fake_bzimage(path, version):
    """Just enough of an x86 boot sector + setup header for the version look-up."""
    data = bytearray(0x1000)
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x20E, 0x600)
    text = f"{version} (debian-kernel@lists.debian.org) #1 SMP".encode()
    data[0x800:0x800 + len(text)] = text
    path.write_bytes(bytes(data))


def test_newest_kernel_wins_in_natural_order(tmp_path):
    (tmp_path / "boot").mkdir()
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64"):
        (tmp_path / "boot" / f"vmlinuz-{version}").write_bytes(b"k")
    (tmp_path / "boot" / "vmlinuz").symlink_to("vmlinuz-6.1.0-9-amd64")
    kernel = find_kernel(str(tmp_path))
    assert kernel.version == "6.1.0-10-amd64" and kernel.origin == "/boot/vmlinuz-6.1.0-10-amd64"
    assert find_kernel(str(tmp_path), "6.1.0-9-amd64").version == "6.1.0-9-amd64"
    assert version_key("6.1.0-10") > version_key("6.1.0-9")


def test_el9_kernel_in_modules_dir(tmp_path):
    (tmp_path / "usr/lib/modules/5.14.0-362.el9.x86_64").mkdir(parents=True)
    (tmp_path / "usr/lib/modules/5.14.0-362.el9.x86_64/vmlinuz").write_bytes(b"k")
    assert find_kernel(str(tmp_path)).version == "5.14.0-362.el9.x86_64"


def test_missing_kernel_says_what_to_do(tmp_path):
    (tmp_path / "boot").mkdir()
    with pytest.raises(KernelError, match="linux-image-amd64.*kernel option"):
        find_kernel(str(tmp_path))
    (tmp_path / "boot" / "vmlinuz-1").write_bytes(b"k")
    with pytest.raises(KernelError, match="found: 1"):
        find_kernel(str(tmp_path), "2")


def test_kernel_from_the_build_host_reads_its_version(tmp_path):
    fake_bzimage(tmp_path / "bzImage", "6.9.1-custom")
    kernel = find_kernel(str(tmp_path / "empty-root"), host_path=str(tmp_path / "bzImage"))
    assert kernel.version == "6.9.1-custom" and kernel.origin.startswith("host:")
    assert bzimage_version(str(tmp_path / "bzImage")) == "6.9.1-custom"
    with pytest.raises(KernelError, match="does not exist"):
        find_kernel(str(tmp_path), host_path=str(tmp_path / "nope"))


def test_squashfs_boot_method(tmp_path):
    assert squashfs_boot_method(str(tmp_path)) is None
    (tmp_path / "usr/share/initramfs-tools/scripts").mkdir(parents=True)
    (tmp_path / "usr/share/initramfs-tools/scripts/live").write_text("")
    assert squashfs_boot_method(str(tmp_path)) == "live-boot"
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/dracut").write_text("")
    (tmp_path / "usr/lib/dracut/modules.d/90dmsquash-live").mkdir(parents=True)
    assert squashfs_boot_method(str(tmp_path)) == "dracut"
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/initrd.img-6.1").write_bytes(b"i")
    assert image_initrd(str(tmp_path), "6.1").endswith("boot/initrd.img-6.1")


def test_dracut_modules_add_livenet_only_with_what_it_needs(tmp_path):
    (tmp_path / "usr/lib/dracut/modules.d/90livenet").mkdir(parents=True)
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/sbin").mkdir(parents=True)
    (tmp_path / "usr/bin/curl").write_text("")
    modules, missing = dracut_modules(str(tmp_path))
    assert modules == ["dmsquash-live"] and missing == ["dhclient", "arping", "pgrep"]
    for name in ("usr/sbin/dhclient", "usr/bin/arping", "usr/bin/pgrep"):
        (tmp_path / name).write_text("")
    assert dracut_modules(str(tmp_path)) == (["dmsquash-live", "livenet", "network-legacy"], [])


def _host_kernel_dir(tmp_path, name):
    """A directory of the 'build host' (outside the image) holding a kernel an image link could point at."""
    outside = tmp_path / "host" / name
    outside.mkdir(parents=True)
    (outside / "vmlinuz-9.9-host").write_bytes(b"host kernel")
    (outside / "vmlinuz").write_bytes(b"host kernel")
    return outside


def test_a_boot_or_modules_directory_linked_out_of_the_image_is_not_searched(tmp_path):
    root = tmp_path / "root"
    (root / "usr/lib/modules").mkdir(parents=True)
    (root / "boot").symlink_to(_host_kernel_dir(tmp_path, "boot"))  # absolute: the image's /<host path>, not the host's
    (root / "usr/lib/modules/9.9-host").symlink_to(_host_kernel_dir(tmp_path, "modules"))
    with pytest.raises(KernelError, match="no kernel in the image"):
        find_kernel(str(root))
    # The same links resolved inside the image find the image's kernel, and it is read from there.
    (root / "boot").unlink()
    (root / "boot").symlink_to("/usr/lib/images")
    (root / "usr/lib/images").mkdir()
    (root / "usr/lib/images/vmlinuz-6.1").write_bytes(b"image kernel")
    kernel = find_kernel(str(root))
    assert (kernel.version, kernel.origin) == ("6.1", "/usr/lib/images/vmlinuz-6.1")
    fd = kernel.open(str(root))
    with open(fd, "rb") as handle:
        assert handle.read() == b"image kernel"


def test_image_initrd_resolves_its_links_inside_the_image(tmp_path):
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    root = tmp_path / "root"
    (root / "boot").mkdir(parents=True)
    (root / "boot/initrd.img-6.1").symlink_to(outside / "passwd")
    assert image_initrd(str(root), "6.1") is None
    (root / "boot/initrd.img-6.1").unlink()
    (root / "boot/initrd.img-6.1").symlink_to("/boot/initrd.img-6.1.real")
    (root / "boot/initrd.img-6.1.real").write_bytes(b"i")
    assert image_initrd(str(root), "6.1") == "/boot/initrd.img-6.1.real"


def x86_header(protocol: int, xloadflags: int) -> bytes:
    """An x86 boot sector + setup header: "HdrS", the boot protocol version and xloadflags (bit 0: 64-bit)."""
    data = bytearray(0x1000)
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", data, 0x206, protocol)
    data[0x236] = xloadflags
    return bytes(data)


def arm64_header(efi_stub: bool = True) -> bytes:
    """An arm64 Image header (Documentation/arch/arm64/booting.rst): code0 ("MZ" with an EFI stub), text_offset,
    image_size, flags, reserved, the magic "ARM\\x64" at 0x38, the PE header offset."""
    data = bytearray(0x1000)
    if efi_stub:
        data[0:2] = b"MZ"
    struct.pack_into("<QQQ", data, 8, 0, 0x2000000, 0xA)
    data[0x38:0x3C] = b"ARM\x64"
    struct.pack_into("<I", data, 0x3C, 0x40)
    return bytes(data)


@pytest.mark.parametrize("head, arch", [
    (x86_header(0x20F, 1), "amd64"),
    (x86_header(0x20F, 0), "i386"),  # a 32-bit bzImage
    (x86_header(0x20B, 1), "i386"),  # a protocol before 2.12 has no xloadflags
    (arm64_header(), "arm64"),
    (arm64_header(efi_stub=False), "arm64"),
    (gzip.compress(arm64_header()), "arm64"),  # Debian arm64's vmlinuz when gzip'd
    (gzip.compress(x86_header(0x20F, 1)), "amd64"),
    (b"\x1f\x8b" + b"not gzip" * 8, None),
    (b"MZ\0\0zimg" + bytes(0x100), None),  # an EFI zboot image is not read
    (b"", None),
    (bytes(0x1000), None),
])
def test_kernel_arch_from_the_header(head, arch):
    assert kernel_arch(head) == arch


def test_read_kernel_arch_leaves_the_offset(tmp_path):
    path = tmp_path / "vmlinuz"
    path.write_bytes(arm64_header() + b"rest of the kernel")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 5, os.SEEK_SET)
        assert read_kernel_arch(fd) == "arm64"
        assert os.lseek(fd, 0, os.SEEK_CUR) == 5
    finally:
        os.close(fd)


def test_pack_refuses_a_kernel_of_another_architecture_than_the_image_before_writing(tmp_path):
    from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import (  # pylint: disable=import-outside-toplevel
        Packer, PackError, PackRequest)
    root = tmp_path / "root"
    (root / "boot").mkdir(parents=True)
    (root / "boot" / "vmlinuz-6.1.0-57-arm64").write_bytes(arm64_header())
    host_kernel = tmp_path / "bzImage"
    host_kernel.write_bytes(x86_header(0x20F, 1))
    out = tmp_path / "out"
    packer = Packer(PackRequest(image="grace", output_dir=str(out), formats=["cpio.zst"], version="1.0",
                                source_path=str(root)))
    image_kernel = find_kernel(str(root))
    assert packer._check_kernel_arch(image_kernel, str(root), "arm64") == "arm64"  # pylint: disable=protected-access
    # a tree that names no architecture: nothing to compare, the kernel's is still read for the manifest
    assert packer._check_kernel_arch(image_kernel, str(root), "") == "arm64"  # pylint: disable=protected-access
    with pytest.raises(PackError, match=r"image grace: kernel /boot/vmlinuz-6.1.0-57-arm64 \(from the image\) is an "
                                        r"arm64 kernel, but the image is amd64 .*linux-image-amd64"):
        packer._check_kernel_arch(image_kernel, str(root), "amd64")  # pylint: disable=protected-access
    with pytest.raises(PackError, match=r"host:.*bzImage \(from the kernel option\) is an amd64 kernel, but the image "
                                        r"is arm64"):
        packer._check_kernel_arch(find_kernel(str(root), host_path=str(host_kernel)), str(root), "arm64")  # pylint: disable=protected-access
    assert not out.exists()
