"""make faults: inject a failure, then assert what survives it.

Every test here is one fault case: it kills, fills, corrupts or misconfigures something for
real (SIGKILL of a whole process group, an ext4 file system on a loop device, a flipped byte,
a bad inventory) and checks what the build, pack and deploy steps left. The run ends with a
summary of cases run, survived (passed) and failed.

The shared pieces live in faults_site.py and faults_support.py. The integration suite's
support modules (pack_support.py, deploy_support.py) import from ``conftest``: this module
provides every name tests/integration/conftest.py does (not its fixtures and hooks).

Everything is built into an image prefix of the session's own, from the small DAG in
``FAULTS_LAYERS`` (the bootstrapped root of the default build is reused when its key matches,
as tests/integration/test_plan_ci.py does), and removed at the end.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import faults_site
from faults_site import FAULTS_LAYERS, Site, remove_prefix, run_site, seed_bootstrap, write_build_inventory

# The names tests/integration/*.py import from ``conftest``, for when this module is the one loaded.
for _name, _value in vars(faults_site.integration).items():
    if not _name.startswith(("_", "pytest_")) and not hasattr(_value, "_fixture_function_marker") \
            and not hasattr(_value, "_pytestfixturefunction"):
        globals().setdefault(_name, _value)


@pytest.hookimpl(tryfirst=True)  # before ``-m fault`` deselects
def pytest_collection_modifyitems(items):
    """Every case of this suite is a fault case: ``make faults`` selects it with the integration
    suite's cases marked ``fault``."""
    for item in items:
        if Path(item.fspath).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.fault)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    """The faults DAG built once into a prefix of this session; removed after the session."""
    prefix = f"localhost/hpc-stateless-faults-{uuid.uuid4().hex[:6]}"
    inventory = write_build_inventory(tmp_path_factory.mktemp("faults-site") / "inventory", FAULTS_LAYERS)
    the_site = Site(prefix, inventory)
    seed_bootstrap(prefix)
    try:
        built = run_site(*the_site.extra, inventory=inventory)
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
        yield the_site
    finally:
        remove_prefix(prefix)


# --------------------------------------------------------------------------- pack outputs to deploy


@pytest.fixture(scope="session")
def small_packs(tmp_path_factory) -> Path:
    """Versions v1 and v2 of image ``faults``, packed by the real module from small directory trees."""
    from faults_support import pack_dir  # pylint: disable=import-outside-toplevel

    out = tmp_path_factory.mktemp("small-packs")
    for version in ("v1", "v2"):
        rc, result = pack_dir(out, version, out.parent / f"{out.name}-trees")
        assert rc == 0, result.get("msg")
    return out


@pytest.fixture(scope="session")
def layer_pack(site, tmp_path_factory) -> Path:
    """The layer ``faulty`` packed by playbooks/pack.yml as version ``big`` (the base root plus 48 MiB of
    random data, ~120 MB of cpio.zst): large enough that copying it takes a moment."""
    out = tmp_path_factory.mktemp("layer-pack")
    packed = run_site(*site.extra, "-e", f"hpc_stateless_pack_output_dir={out}", "-e", "hpc_stateless_pack_version=big",
                      inventory=site.inventory, playbook="playbooks/pack.yml")
    assert packed.returncode == 0, packed.stdout[-4000:] + packed.stderr[-2000:]
    return out


# --------------------------------------------------------------------------- the summary


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # pylint: disable=unused-argument
    """Cases run, survived (passed) and failed, each case named (one summary for ``make faults``)."""
    if config.getoption("collectonly"):
        return
    outcomes: dict[str, str] = {}
    for key in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(key, []):
            nodeid = report.nodeid
            if "fault" not in report.keywords:  # this suite, and the integration cases marked ``fault``
                continue
            if report.outcome == "passed" and report.when != "call":
                continue
            # A failed setup or teardown fails the case even when its call passed.
            if outcomes.get(nodeid) in ("failed", "error") and report.outcome == "passed":
                continue
            outcomes[nodeid] = "failed" if report.outcome in ("failed", "error") else report.outcome
    if not outcomes:
        return
    survived = sorted(n for n, o in outcomes.items() if o == "passed")
    failed = sorted(n for n, o in outcomes.items() if o == "failed")
    skipped = sorted(n for n, o in outcomes.items() if o == "skipped")
    terminalreporter.section("fault injection: what survived")
    for nodeid in survived:
        terminalreporter.line(f"survived  {nodeid}")
    for nodeid in failed:
        terminalreporter.line(f"FAILED    {nodeid}")
    for nodeid in skipped:
        terminalreporter.line(f"skipped   {nodeid}")
    terminalreporter.line(f"cases run: {len(survived) + len(failed)}, survived: {len(survived)}, "
                          f"failed: {len(failed)}" + (f", skipped: {len(skipped)}" if skipped else ""))
