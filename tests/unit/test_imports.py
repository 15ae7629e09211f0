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


def test_module_utils_imports_nothing_else_of_plugins(graph):
    assert graph.outside_imports(graph.read_all_edges()) == []


def _problems(graph, tmp_path, source: str) -> list[str]:
    """The problems the checker reports for a tree of _contract/names.py (``source``), _pack/run.py and
    plugin_utils/controller.py."""
    plugins = tmp_path / "plugins"
    for pkg in ("module_utils/_contract", "module_utils/_pack", "plugin_utils"):
        (plugins / pkg).mkdir(parents=True)
        (plugins / pkg / "__init__.py").write_text("")
    (plugins / "module_utils" / "_pack" / "run.py").write_text("X = 1\n")
    (plugins / "plugin_utils" / "controller.py").write_text("X = 1\n")
    (plugins / "module_utils" / "_contract" / "names.py").write_text(source)
    real = graph.PLUGINS
    graph.PLUGINS = plugins
    try:
        return graph.violations(graph.read_edges(plugins)) + graph.outside_imports(graph.read_all_edges(plugins))
    finally:
        graph.PLUGINS = real


UP = "module_utils/_contract/names.py:{line} imports module_utils._pack.run: _contract (floor 1) imports up to _pack (floor 7)"


@pytest.mark.parametrize("source, line", [
    ("from ansible_collections.hpc.stateless.plugins.module_utils._pack.run import X\n", 1),
    ("from ansible_collections.hpc.stateless.plugins.module_utils._pack import run\n", 1),
    ("import ansible_collections.hpc.stateless.plugins.module_utils._pack.run\n", 1),
    ("from .._pack.run import X\n", 1),
    ("from .._pack import run\n", 1),
    ("import importlib\n\ndef f():\n"
     "    return importlib.import_module('ansible_collections.hpc.stateless.plugins.module_utils._pack.run')\n", 4),
    ("def f():\n    return __import__('ansible_collections.hpc.stateless.plugins.module_utils._pack.run')\n", 2),
], ids=["from-name", "from-module", "import", "relative-name", "relative-module", "import_module", "__import__"])
def test_the_checker_sees_an_upward_import(graph, tmp_path, source, line):
    """The test can fail: an import from the contract up to pack, in each form, is reported naming file and floors."""
    assert _problems(graph, tmp_path, source) == [UP.format(line=line)]


@pytest.mark.parametrize("source", [
    "from ansible_collections.hpc.stateless.plugins.plugin_utils.controller import X\n",
    "from ...plugin_utils import controller\n",
    "import importlib\nM = importlib.import_module('ansible_collections.hpc.stateless.plugins.plugin_utils.controller')\n",
], ids=["absolute", "relative", "import_module"])
def test_the_checker_sees_module_utils_importing_plugin_utils(graph, tmp_path, source):
    problems = _problems(graph, tmp_path, source)
    assert len(problems) == 1 and problems[0].startswith("module_utils/_contract/names.py:")
    assert "imports plugin_utils.controller: module_utils imports only module_utils" in problems[0]


def test_a_downward_relative_import_is_no_problem(graph, tmp_path):
    assert _problems(graph, tmp_path, "from . import labels\nfrom .. import _process\n") == []
