"""A verify boot under qemu-user emulation: when it is one, what it binds in and what its record says."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.filter.verify_emulation import verify_emulation, verify_emulation_files
from ansible_collections.hpc.stateless.plugins.module_utils._contract.arch import host_arch
from ansible_collections.hpc.stateless.plugins.module_utils._verify import emulation


def test_an_image_of_another_architecture_boots_emulated():
    assert emulation.emulated("arm64", "amd64") and emulation.emulated("amd64", "arm64")
    assert not emulation.emulated("amd64", "amd64")
    # No architecture (a plan or packed tree that names none) is the build host's own.
    assert not emulation.emulated("", "amd64") and not emulation.emulated(None, "amd64")


def test_the_emulated_boot_binds_a_drop_in_that_empties_every_service_s_credentials():
    files = emulation.boot_files("arm64", "amd64")
    assert [f["path"] for f in files] == ["/run/systemd/system/service.d/90-hpc-stateless-verify-emulation.conf"]
    # systemd resets a list setting on an empty assignment: the units' LoadCredential= lines are dropped.
    lines = [line for line in files[0]["content"].splitlines() if line and not line.startswith("#")]
    assert lines == ["[Service]", "LoadCredential="]
    assert emulation.boot_files("amd64", "amd64") == []


def test_the_record_names_the_emulation_and_a_native_record_is_unchanged():
    assert emulation.settings("arm64", "amd64") == {"emulation": "qemu-user: arm64 on amd64"}
    assert emulation.settings("amd64", "amd64") == {}


def test_the_filters_ask_about_this_build_host():
    other = "arm64" if host_arch() != "arm64" else "amd64"
    assert verify_emulation(host_arch()) == {} and verify_emulation_files(host_arch()) == []
    assert verify_emulation(other) == {"emulation": f"qemu-user: {other} on {host_arch()}"}
    assert len(verify_emulation_files(other)) == 1
