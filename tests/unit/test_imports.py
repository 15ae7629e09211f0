"""The shape of module_utils holds: imports run down the floors of scripts/import_graph.py (FLOORS), never up
or across, and no two packages import each other through any path. The floors are read from the script, the
imports from the code, so the test and the picture in docs/images/imports.svg cannot disagree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_graph.py"


@pytest.fixture(scope="module")
def graph():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module
    spec.loader.exec_module(module)
    return module


def test_every_package_is_on_a_floor(graph):
    packages = {p.parent.name for p in (graph.PLUGINS / graph.UTILS).glob("*/__init__.py")}
    assert packages <= set(graph.FLOOR_OF), f"module_utils packages on no floor: {sorted(packages - set(graph.FLOOR_OF))}"


def test_imports_run_only_down_the_floors(graph):
    edges = graph.read_edges()
    assert len(edges) > 100, "the reader found (almost) no imports: it no longer reads the code"
    assert graph.violations(edges) == []


def test_no_two_packages_import_each_other(graph):
    assert graph.mutual_pairs(graph.read_edges()) == []


def test_the_contract_imports_no_stage(graph):
    imported = {dst for (src, dst) in graph.package_graph(graph.read_edges()) if src == "_contract"}
    assert imported <= {graph.HELPERS}, imported


def test_the_checker_sees_an_upward_import(graph, tmp_path):
    """The test can fail: an import from the contract up to pack is reported, naming file and floors."""
    plugins = tmp_path / "plugins"
    for pkg in ("_contract", "_pack"):
        (plugins / "module_utils" / pkg).mkdir(parents=True)
    (plugins / "module_utils" / "_pack" / "run.py").write_text("X = 1\n")
    (plugins / "module_utils" / "_contract" / "names.py").write_text(
        "from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import X\n")
    real = graph.PLUGINS
    graph.PLUGINS = plugins
    try:
        problems = graph.violations(graph.read_edges(plugins))
    finally:
        graph.PLUGINS = real
    assert problems == ["module_utils/_contract/names.py:1 imports module_utils._pack.run: "
                        "_contract (floor 1) imports up to _pack (floor 7)"]
