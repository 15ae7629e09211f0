# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pytest-testinfra set-up shared by every Molecule scenario of hpc.stateless, and by verify.yml.

The image under test is, in order of preference:
  0. the image booted under systemd-nspawn by ``playbooks/verify.yml`` (``$HPC_STATELESS_TEST_TARGET``
     ``nsenter://<leader PID>``): every command runs with nsenter in the running container; or a live node
     checked by ``playbooks/compliance.yml`` (``ansible://<node>?ansible_inventory=<file>``): testinfra's ansible
     backend, one ssh per command with the SSH settings Ansible uses for the node (checks of the image at rest
     are skipped there, saying so: the node made its host keys, machine ID and secrets at boot);
  1. the scenario's instance (``$MOLECULE_INSTANCE_CONFIG``, written by ``_shared/create.yml``),
  2. the working container named by ``$HPC_STATELESS_TEST_CONTAINER``,
  3. a throw-away working container of the image ``$HPC_STATELESS_TEST_IMAGE``
     (removed after the session), e.g. ``localhost/hpc-stateless/slurm:latest``, or the directory
     ``$HPC_STATELESS_TEST_ROOT`` (a packed tree).

``role_vars(role)`` gives the values the role was applied with: its defaults, the scenario's
``vars/converge.yml`` and ``vars/<instance>.yml``, and - when ``$HPC_STATELESS_EXPECT_FROM_INVENTORY``
is 1 (molecule/default, verify) - the values the inventory (``$HPC_STATELESS_MOLECULE_INVENTORY``, default
``inventory/``) gives the role; checks of roles that no layer applies (or, with ``$HPC_STATELESS_TEST_ROLES``,
that the image's layer chain does not apply) are then skipped. verify also hands the values each role of the
image was applied with, read as the build read them (``$HPC_STATELESS_EXPECT_VALUES``: host_vars and extra
variables included); they win over that reading of the inventory's group_vars files.

Checks marked ``@pytest.mark.booted`` ask what only a running system answers (the sshd that runs, live
sysctl values, mounts, sockets, failed units); they run only against a booted image (verify.yml) and
are skipped, saying so, on a working container (Molecule).

An unbooted root is mounted once per session and every check runs through testinfra's chroot backend.
Waivers: ``waivers.yml`` of the scenario (``$MOLECULE_SCENARIO_DIRECTORY``) and of ``_shared``, and the
files of ``$HPC_STATELESS_WAIVERS`` (``:``-separated); a waiver without ``item`` skips the whole check
and shows its reason (``waived: <reason>``, which the verify record reads back).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

MOLECULE_DIR = Path(__file__).resolve().parent
PROJECT_DIR = MOLECULE_DIR.parent
sys.path.insert(0, str(MOLECULE_DIR / "_shared"))

import compliance  # noqa: E402  pylint: disable=wrong-import-position


def _scenario_dir() -> Path | None:
    value = os.environ.get("MOLECULE_SCENARIO_DIRECTORY")
    return Path(value) if value else None


def _waiver_files() -> list[Path]:
    files = [MOLECULE_DIR / "_shared" / "waivers.yml"]
    scenario = _scenario_dir()
    if scenario is not None:
        files.append(scenario / "waivers.yml")
    files += [Path(extra) for extra in os.environ.get("HPC_STATELESS_WAIVERS", "").split(":") if extra]
    return files


def _target() -> str:
    """``nsenter://<leader PID>`` of the booted image under test (verify.yml), ``ansible://<node>?...`` of a live
    node (compliance.yml), or ''."""
    return os.environ.get("HPC_STATELESS_TEST_TARGET", "")


def _booted() -> bool:
    return bool(_target())


def _live() -> bool:
    """A live node over SSH (playbooks/compliance.yml), not an image booted by verify.yml."""
    return _target().startswith("ansible://")


def _test_roles() -> set[str] | None:
    """Roles of the image's layer chain (``$HPC_STATELESS_TEST_ROLES``, comma-separated), or None."""
    value = os.environ.get("HPC_STATELESS_TEST_ROLES")
    if value is None:
        return None
    return {role.rsplit(".", 1)[-1] for role in value.split(",") if role}


def _instances() -> list[tuple[str, str | None]]:
    """``(instance name, working container)`` of every image under test; container None means
    "make one from $HPC_STATELESS_TEST_IMAGE" (or, booted, "enter the running container")."""
    if _booted():
        return [(os.environ.get("HPC_STATELESS_TEST_INSTANCE") or "booted", None)]
    config = os.environ.get("MOLECULE_INSTANCE_CONFIG")
    if config and Path(config).is_file():
        instances = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or []
        wanted = os.environ.get("HPC_STATELESS_TEST_INSTANCE")
        found = [(i["instance"], i["address"]) for i in instances if wanted in (None, i["instance"])]
        if not found:
            raise pytest.UsageError(f"{config}: no instance {wanted or ''}; run 'molecule create' first")
        return found
    container = os.environ.get("HPC_STATELESS_TEST_CONTAINER")
    return [(container or "image", container or None)]


_INSTANCES = _instances()


def _expectation_inventory() -> Path | None:
    """The inventory a built image is checked against (molecule/default), or None."""
    if os.environ.get("HPC_STATELESS_EXPECT_FROM_INVENTORY", "").lower() not in ("1", "true", "yes"):
        return None
    return Path(os.environ.get("HPC_STATELESS_MOLECULE_INVENTORY") or PROJECT_DIR / "inventory")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "booted: the check needs the image booted (verify.yml); skipped on a "
                                       "working container")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with its reason, every check that a waiver switches off as a whole, the checks that need a
    booted image when it is not booted, and - for a built image - the checks of roles that no layer of the
    inventory (or of the image's chain, ``$HPC_STATELESS_TEST_ROLES``) applies."""
    waivers = compliance.load_waivers(*_waiver_files())
    inventory = _expectation_inventory()
    chain = _test_roles()
    roles = chain if chain is not None else compliance.applied_roles(inventory) if inventory else set()
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        waiver = compliance.check_waiver(waivers, name)
        if waiver is not None:
            item.add_marker(pytest.mark.skip(reason=f"waived: {waiver.reason}"))
        if item.get_closest_marker("booted") is not None and not _booted():
            item.add_marker(pytest.mark.skip(reason="needs the booted image: verify.yml runs it"))
        role = Path(str(item.fspath)).parent.parent.name
        if (inventory or chain is not None) and (PROJECT_DIR / "roles" / role).is_dir() and role not in roles:
            item.add_marker(pytest.mark.skip(reason=f"role {role} is not applied to this image"))


if _booted():
    @pytest.fixture(scope="session")
    def instance() -> tuple[str, str | None]:
        """The booted image under test (one image per verify run, so the check ids carry no instance)."""
        return _INSTANCES[0]
else:
    @pytest.fixture(scope="session", params=_INSTANCES, ids=[name for name, _container in _INSTANCES])
    def instance(request: pytest.FixtureRequest) -> tuple[str, str | None]:
        """The instance under test (one test run per Molecule instance)."""
        return request.param


@pytest.fixture(scope="session")
def image_root(instance: tuple[str, str | None]) -> Iterator[str]:
    """Mount point of the image under test on the build host."""
    _name, container = instance
    root = os.environ.get("HPC_STATELESS_TEST_ROOT")
    if root:
        # a packed tree verify booted: its directory is the image at rest
        yield root
        return
    created = False
    if container is None:
        image = os.environ.get("HPC_STATELESS_TEST_IMAGE")
        if not image:
            pytest.fail("no image under test: run through 'molecule verify', or set "
                        "HPC_STATELESS_TEST_CONTAINER (a buildah working container) or "
                        "HPC_STATELESS_TEST_IMAGE (an image reference)")
        container = f"hpc-stateless-verify-{uuid.uuid4().hex[:8]}"
        compliance.buildah("from", "--pull=never", "--quiet", "--name", container, image)
        created = True
    try:
        with compliance.MountedContainer(container) as path:
            yield path
    finally:
        if created:
            compliance.buildah("rm", container)


@pytest.fixture(scope="session")
def host(request: pytest.FixtureRequest, instance: tuple[str, str | None]) -> Any:
    """The testinfra host of ``instance``: nsenter into the booted container (verify.yml), else the chroot
    backend on the working container's root; overrides testinfra's own fixture."""
    assert instance, "one host per instance under test"
    target = _target()
    if _live():
        import testinfra  # pylint: disable=import-outside-toplevel

        live = testinfra.get_host(target)
        try:
            probe = live.run("true")
        except RuntimeError as exc:  # testinfra's ssh backend: ssh itself failed (rc 255)
            raise RuntimeError(f"{target}: the node cannot be reached over ssh: {exc}") from None
        if probe.rc != 0:
            raise RuntimeError(f"{target}: 'true' failed on the node (rc {probe.rc}): {probe.stderr.strip()}")
        return live
    if target:
        scheme, _sep, leader = target.partition("://")
        if scheme != "nsenter" or not leader.isdigit():
            raise pytest.UsageError(f"HPC_STATELESS_TEST_TARGET={target!r}: expected nsenter://<leader PID>")
        return compliance.nsenter_host(int(leader), os.environ.get("HPC_STATELESS_NSENTER", "nsenter"))
    return compliance.chroot_host(request.getfixturevalue("image_root"))


@pytest.fixture(scope="session")
def at_rest(request: pytest.FixtureRequest, host: Any) -> Any:
    """The testinfra host of the image at rest, for checks of what the image holds rather than what the
    running system made at boot (host keys, machine ID, a munge key bound in for the boot): on a working
    container ``host`` itself; booted (verify.yml), the chroot backend on a throw-away working container
    of ``$HPC_STATELESS_TEST_IMAGE``, the image that was booted."""
    if not _booted():
        return host
    if _live():
        pytest.skip("needs the image at rest (before boot): a live node made its host keys, machine ID and secrets "
                    "at boot; verify.yml checks the image itself, compliance.yml's drift checks find changes since")
    if not os.environ.get("HPC_STATELESS_TEST_IMAGE") and not os.environ.get("HPC_STATELESS_TEST_ROOT"):
        raise pytest.UsageError("HPC_STATELESS_TEST_TARGET is set without HPC_STATELESS_TEST_IMAGE or "
                                "HPC_STATELESS_TEST_ROOT: the checks of the image at rest need what was booted")
    return compliance.chroot_host(request.getfixturevalue("image_root"))


@pytest.fixture(scope="session")
def booted() -> bool:
    """True when the image under test is booted (verify.yml), False on a working container."""
    return _booted()


@pytest.fixture(scope="session")
def waivers() -> list[compliance.Waiver]:
    return compliance.load_waivers(*_waiver_files())


def _applied_values() -> dict[str, dict[str, Any]] | None:
    """``$HPC_STATELESS_EXPECT_VALUES``: the values each role of the booted image was applied with, as verify read
    them (plugins/module_utils/_verify/suite.py, role_values), or None."""
    path = os.environ.get("HPC_STATELESS_EXPECT_VALUES")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"HPC_STATELESS_EXPECT_VALUES={path}: {exc}") from None
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise pytest.UsageError(f"HPC_STATELESS_EXPECT_VALUES={path}: expected {{role: {{variable: value}}}}")
    return found


@pytest.fixture(scope="session")
def role_vars(instance: tuple[str, str | None]) -> Callable[[str], dict[str, Any]]:
    """``role_vars('base')``: the role's defaults overlaid with what the scenario's converge
    applied to this instance (``vars/converge.yml``, then ``vars/<instance>.yml``)."""
    scenario = _scenario_dir() or MOLECULE_DIR / "default"
    # Scenarios that check a built image (molecule/default) expect what the inventory asked for.
    inventory = _expectation_inventory()

    applied = _applied_values()

    def load(role: str) -> dict[str, Any]:
        values = compliance.scenario_vars(PROJECT_DIR, role, scenario, instance[0])
        if applied is not None and role in applied:
            # verify read them as the build applied them (the layer hosts' variables, extra variables included)
            values.update(applied[role])
        elif inventory:
            # verify names the image's layers (root first) or the layer under test: that chain's values
            chain = [name for name in os.environ.get("HPC_STATELESS_TEST_CHAIN", "").split(",") if name] or None
            values.update(compliance.inventory_vars(inventory, role, os.environ.get("HPC_STATELESS_TEST_INSTANCE"),
                                                    chain))
        return values

    return load


@pytest.fixture(scope="session")
def sshd_settings(host: Any) -> dict[str, str]:
    """Effective sshd settings of the image, or {} when sshd is not installed."""
    if not host.exists("sshd") and not host.file("/usr/sbin/sshd").exists:
        return {}
    return compliance.sshd_effective(host)


@pytest.fixture(scope="session")
def sysctl_settings(host: Any) -> dict[str, str]:
    return compliance.effective_sysctl(host)
