# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compliance of the hpc.stateless.hsn role: what the converged image holds."""

from __future__ import annotations

import configparser

import pytest

import compliance


@pytest.fixture(scope="module")
def hsn(role_vars):
    return role_vars("hsn")


@pytest.fixture(scope="module")
def debian(host):
    return host.system_info.distribution in ("debian", "ubuntu")


@pytest.fixture(scope="module")
def backend(hsn, debian):
    chosen = hsn["hsn_network_backend"]
    return ("networkd" if debian else "networkmanager") if chosen == "auto" else chosen


@pytest.fixture(scope="module")
def kernel_version(host):
    versions = compliance.lines(host.check_output("ls -1 /lib/modules 2>/dev/null; true"))
    if len(versions) != 1:
        pytest.skip(f"the image holds {len(versions)} kernels ({versions}); module checks need exactly one")
    return versions[0]


def _ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # keys are case-sensitive in systemd and NetworkManager files
    parser.read_string(text)
    return parser


def test_rdma_and_ucx_packages(host, debian):
    wanted = (["rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "infiniband-diags",
               "libucx0", "ucx-utils"] if debian else
              ["rdma-core", "libibverbs-utils", "librdmacm-utils", "infiniband-diags", "ucx", "ucx-ib"])
    missing = [name for name in wanted if not host.package(name).is_installed]
    assert not missing, f"packages not installed: {missing}"


@pytest.mark.parametrize("command", ["ibv_devinfo", "ucx_info"])
def test_rdma_tools_run(host, command):
    assert host.exists(command)


def test_vendor_packages(host, hsn):
    for stack in hsn["hsn_vendor_stacks"]:
        for name in stack.get("packages", []):
            assert host.package(name).is_installed, f"{name} of vendor stack {stack['name']} is not installed"


def test_vendor_repositories(host, hsn, debian):
    for stack in hsn["hsn_vendor_stacks"]:
        repo = stack.get("repository")
        if not repo:
            continue
        name = stack["name"]
        if debian:
            source = host.file(f"/etc/apt/sources.list.d/hsn-{name}.list")
            assert (source.user, source.mode) == ("root", 0o644)
            key = f"/etc/apt/keyrings/hsn-{name}.{'asc' if repo['key_url'].endswith('.asc') else 'gpg'}"
            assert host.file(key).is_file
            assert f"deb [signed-by={key}] {repo['url']} {repo['suite']} {' '.join(repo['components'])}" \
                in source.content_string
        else:
            assert f"baseurl = {repo['url']}" in host.file(f"/etc/yum.repos.d/hsn-{name}.repo").content_string


def test_modules_load_list(host, hsn):
    conf = host.file("/etc/modules-load.d/hpc-stateless-hsn.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    listed = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    vendor = [m for stack in hsn["hsn_vendor_stacks"] for m in stack.get("kernel_modules", [])]
    assert listed == list(dict.fromkeys(hsn["hsn_kernel_modules"] + vendor))


def test_modules_exist_in_the_image_kernel(host, hsn, kernel_version):
    vendor = [m for stack in hsn["hsn_vendor_stacks"] for m in stack.get("kernel_modules", [])]
    missing = [m for m in hsn["hsn_kernel_modules"] + vendor
               if host.run(f"modinfo -k {kernel_version} -F filename {m}").rc != 0]
    assert not missing, f"modules listed for boot but not in kernel {kernel_version}: {missing}"


def test_module_options(host, hsn):
    conf = host.file("/etc/modprobe.d/hpc-stateless-hsn.conf")
    vendor = [stack.get("kernel_module_options", {}) for stack in hsn["hsn_vendor_stacks"]]
    if not hsn["hsn_kernel_module_options"] and not any(vendor):
        assert not conf.exists, "no module options are configured, yet the file exists"
        return
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    text = conf.content_string
    for module, options in hsn["hsn_kernel_module_options"].items():
        assert f"options {module} {options}" in text.splitlines()


@pytest.mark.parametrize("index", [0, 1])
def test_interface_link_file(host, hsn, index):
    if index >= len(hsn["hsn_interfaces"]):
        pytest.skip("fewer interfaces configured")
    iface = hsn["hsn_interfaces"][index]
    link = host.file(f"/etc/systemd/network/10-hpc-stateless-{iface['name']}.link")
    assert (link.user, link.group, link.mode) == ("root", "root", 0o644)
    parsed = _ini(link.content_string)
    assert parsed["Link"]["Name"] == iface["name"]
    assert parsed["Link"]["MTUBytes"] == str(iface.get("mtu", hsn["hsn_mtu"]))
    keys = {"mac": "MACAddress", "path": "Path", "driver": "Driver", "original_name": "OriginalName"}
    assert dict(parsed["Match"]) == {keys[k]: v for k, v in iface["match"].items()}


@pytest.mark.parametrize("index", [0, 1])
def test_interface_configuration(host, hsn, backend, index):
    if index >= len(hsn["hsn_interfaces"]):
        pytest.skip("fewer interfaces configured")
    iface = hsn["hsn_interfaces"][index]
    method = iface.get("method", "dhcp")
    mtu = str(iface.get("mtu", hsn["hsn_mtu"]))
    if backend == "networkd":
        conf = host.file(f"/etc/systemd/network/20-hpc-stateless-{iface['name']}.network")
        assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
        text = conf.content_string
        parsed = _ini(text)
        assert parsed["Match"]["Name"] == iface["name"]
        assert parsed["Link"]["MTUBytes"] == mtu
        if method == "static":
            assert [line for line in text.splitlines() if line.startswith("Address=")] == \
                [f"Address={a}" for a in iface["addresses"]]
            assert parsed["Network"].get("Gateway") == iface.get("gateway")
        elif method == "dhcp":
            assert parsed["Network"]["DHCP"] == "ipv4"
    else:
        conf = host.file(f"/etc/NetworkManager/system-connections/hpc-stateless-{iface['name']}.nmconnection")
        assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o600), "NetworkManager ignores keyfiles others can read"
        parsed = _ini(conf.content_string)
        kind = iface.get("type", "ethernet")
        assert parsed["connection"]["interface-name"] == iface["name"]
        assert parsed["connection"]["type"] == kind
        assert parsed[kind]["mtu"] == mtu
        expected = {"dhcp": "auto", "static": "manual", "link-local": "link-local", "none": "disabled"}[method]
        assert parsed["ipv4"]["method"] == expected
        if method == "static":
            first = iface["addresses"][0] + (f",{iface['gateway']}" if iface.get("gateway") else "")
            assert parsed["ipv4"]["address1"] == first


def test_network_backend_enabled(host, hsn, backend):
    if not hsn["hsn_interfaces"]:
        pytest.skip("no HSN interfaces configured")
    unit = "systemd-networkd" if backend == "networkd" else "NetworkManager"
    assert host.service(unit).is_enabled


def test_networkmanager_parses_keyfiles(host, hsn, backend):
    if backend != "networkmanager" or not hsn["hsn_interfaces"]:
        pytest.skip("NetworkManager is not the backend")
    # nmcli --offline (NetworkManager >= 1.40) parses and validates a keyfile from stdin without a
    # running daemon, and prints it back normalized.
    for iface in hsn["hsn_interfaces"]:
        path = f"/etc/NetworkManager/system-connections/hpc-stateless-{iface['name']}.nmconnection"
        out = host.run(f"nmcli --offline connection modify connection.autoconnect yes < {path}")
        assert out.rc == 0, f"NetworkManager rejects {path}: {out.stderr}"
        assert f"interface-name={iface['name']}" in out.stdout.splitlines()
