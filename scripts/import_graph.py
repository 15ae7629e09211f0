# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The import graph of the collection's module_utils, read from the code, and the floors it must keep.

module_utils is arranged by stage; imports run one way, down to the contract and the private helpers,
never up or across to another package of the same floor. :data:`FLOORS` is the one statement of that
order: tests/unit/test_imports.py fails on any import that breaks it, and this script draws the graph
(docs/images/imports.svg) so the picture always matches the code::

    python3 scripts/import_graph.py          # the package graph as text, violations last
    python3 scripts/import_graph.py --dot FILE.dot   # Graphviz source; --svg FILE.svg renders it with dot
"""

from __future__ import annotations

import argparse
import ast
import collections
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLUGINS = REPO / "plugins"
PREFIX = "ansible_collections.hpc.stateless.plugins."
UTILS = "module_utils"
#: The unit holding module_utils' top-level private helpers (``_process.py``, ``_paths.py``, ...).
HELPERS = "(helpers)"

#: module_utils packages from the bottom floor up. A package may import only packages of lower floors
#: (and the top-level helpers); packages that share a floor never import each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    (HELPERS,),
    ("_contract",),
    ("_archive",),
    ("_layers",),
    ("_build",),
    ("_buildah_agent", "_nspawn"),
    ("_verify",),
    ("_pack",),
    ("_deploy",),
    ("_diff", "_ci"),
)
FLOOR_OF = {unit: level for level, units in enumerate(FLOORS) for unit in units}
#: What each package is for, for the picture.
ROLES = {
    HELPERS: "process runner, paths, fs (locks, mounts), time, git, image paths, project dir",
    "_contract": "names, labels, manifest, sums, signature, SBOM, package db, inventory schema",
    "_archive": "Debian versions, the apt sources' signed indexes, pending updates",
    "_layers": "DAG, content keys, change plan",
    "_build": "buildah client, bootstrap, layer build, registry, rootless",
    "_buildah_agent": "agent and holder of the buildah connection",
    "_nspawn": "systemd-nspawn sessions of the nspawn connection",
    "_verify": "the verification record and gate",
    "_pack": "cpio/squashfs writers, kernel, secrets, pruning",
    "_deploy": "publish, boot links, boot configs",
    "_diff": "what changed between two images",
    "_ci": "the GitLab pipeline writer",
}


@dataclass(frozen=True)
class Edge:
    """``source`` (a file of plugins/, dotted) imports ``target`` (a module_utils module, dotted)."""

    source: str
    target: str
    line: int


def unit_of(dotted: str) -> str | None:
    """The module_utils unit of ``module_utils.<pkg>.<mod>`` (the package) or of a top-level helper module;
    None outside module_utils."""
    parts = dotted.split(".")
    if parts[0] != UTILS or len(parts) < 2:
        return None
    if len(parts) == 2:
        return HELPERS
    return parts[1] if (PLUGINS / UTILS / parts[1]).is_dir() else HELPERS


def _named(base: str, names: list[str]) -> list[str]:
    """What ``from <base> import <names>`` imports: each name that is a module of plugins/, else ``base``."""
    found = []
    for name in names:
        # "from ...module_utils.pkg import mod" names a module; "from ...pkg.mod import name" a name in it.
        candidate = f"{base}.{name}" if base else name
        path = PLUGINS / candidate.replace(".", "/")
        found.append(candidate if path.with_suffix(".py").exists() or path.is_dir() else base)
    return found


def _import_string(node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("...")`` or ``__import__("...")`` call names, when it is a literal."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _imports_of(tree: ast.AST, package: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """The plugins/ modules ``tree`` imports (dotted below plugins/) with their lines. ``package`` is the dotted
    package of the file below plugins/ (for relative imports). Absolute and relative ``from``/``import``
    statements and literal ``importlib.import_module``/``__import__`` strings count, wherever they are."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            anchor = package[:len(package) - node.level + 1] if node.level <= len(package) else ()
            base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [(target, node.lineno) for target in _named(base, [a.name for a in node.names]) if target]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            names = [a.name for a in node.names]
            found += [(target, node.lineno) for target in _named(node.module[len(PREFIX):], names)]
        elif isinstance(node, ast.Import):
            found += [(a.name[len(PREFIX):], node.lineno) for a in node.names if a.name.startswith(PREFIX)]
        elif isinstance(node, ast.Call):
            named = _import_string(node)
            if named and named.startswith(PREFIX):
                found.append((named[len(PREFIX):], node.lineno))
    return found


def read_edges(root: Path = PLUGINS) -> list[Edge]:
    """Every import of a module_utils module by a file of plugins/, from the code."""
    return [edge for edge in read_all_edges(root) if edge.target.startswith(UTILS + ".")]


def read_all_edges(root: Path = PLUGINS) -> list[Edge]:
    """Every import of a module of plugins/ (module_utils, plugin_utils, ...) by a file of plugins/."""
    edges = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        source = ".".join(parts)
        package = parts if path.name == "__init__.py" else parts[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges += [Edge(source, target, line) for target, line in _imports_of(tree, package)]
    return edges


def outside_imports(edges: list[Edge]) -> list[str]:
    """Each import by module_utils of a part of plugins/ other than module_utils (plugin_utils, action, ...), as a
    sentence: module_utils is shipped inside every module's payload, which carries nothing else of plugins/."""
    return [f"{edge.source.replace('.', '/')}.py:{edge.line} imports {edge.target}: module_utils imports only "
            f"module_utils (a module's payload carries nothing else; move the shared code down into module_utils)"
            for edge in edges
            if edge.source.startswith(UTILS + ".") and not edge.target.startswith(UTILS + ".")
            and edge.target != UTILS]


def package_graph(edges: list[Edge]) -> dict[tuple[str, str], list[Edge]]:
    """Imports between module_utils units: ``{(importer, imported): [edges]}`` (within a unit left out)."""
    graph: dict[tuple[str, str], list[Edge]] = collections.defaultdict(list)
    for edge in edges:
        src, dst = unit_of(edge.source), unit_of(edge.target)
        if src is not None and dst is not None and src != dst:
            graph[(src, dst)].append(edge)
    return dict(graph)


def violations(edges: list[Edge]) -> list[str]:
    """Each import that runs up or across the floors, or into a unit no floor names, as a sentence."""
    problems = []
    for (src, dst), found in sorted(package_graph(edges).items()):
        first = found[0]
        where = f"{first.source.replace('.', '/')}.py:{first.line} imports {first.target}"
        if src not in FLOOR_OF or dst not in FLOOR_OF:
            unknown = src if src not in FLOOR_OF else dst
            problems.append(f"{where}: module_utils/{unknown} is on no floor (add it to FLOORS in scripts/import_graph.py)")
        elif FLOOR_OF[dst] >= FLOOR_OF[src]:
            way = "across" if FLOOR_OF[dst] == FLOOR_OF[src] else "up"
            problems.append(f"{where}: {src} (floor {FLOOR_OF[src]}) imports {way} to {dst} (floor {FLOOR_OF[dst]})")
    return problems


def mutual_pairs(edges: list[Edge]) -> list[tuple[str, str]]:
    """Pairs of units that import each other through some path (each pair once, sorted): a loop."""
    graph = package_graph(edges)
    succ: dict[str, set[str]] = collections.defaultdict(set)
    for src, dst in graph:
        succ[src].add(dst)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in succ[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reachable = {unit: reach(unit) for unit in list(succ)}
    return sorted((a, b) for a in reachable for b in reachable[a] if a < b and a in reachable.get(b, set()))


def dot(edges: list[Edge], title: str = "module_utils imports") -> str:
    """Graphviz source of the package graph: one rank per floor, bottom floor at the bottom."""
    graph = package_graph(edges)
    present = {u for u in FLOOR_OF if u == HELPERS or (PLUGINS / UTILS / u).is_dir()}
    units = sorted({u for pair in graph for u in pair} | present)
    looped = {u for pair in mutual_pairs(edges) for u in pair}
    bad = {(s, d) for (s, d) in graph
           if (s in looped and d in looped) or (s in FLOOR_OF and d in FLOOR_OF and FLOOR_OF[d] >= FLOOR_OF[s])}
    lines = ["digraph imports {", f'  label="{title}"; labelloc=t; rankdir=TB; newrank=true;',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", fontsize=11];',
             '  edge [color="#555555"];']
    for level, floor in enumerate(FLOORS):
        names = " ".join(f'"{u}"' for u in floor if u in units)
        if names:
            lines.append(f"  {{ rank=same; {names} }}  // floor {level}")
    for unit in units:
        role = ROLES.get(unit, "on no floor")
        fill = "" if unit in FLOOR_OF else ', fillcolor="#fde2e2"'
        lines.append(f'  "{unit}" [label="{unit}\\n{role}"{fill}];')
    # One rank per floor, the bottom floor at the bottom: an invisible edge from each unit to the floor below.
    floors = [[u for u in floor if u in units] for floor in FLOORS]
    floors = [floor for floor in floors if floor]
    for upper, lower in zip(floors[1:], floors):
        lines += [f'  "{u}" -> "{lower[0]}" [style=invis];' for u in upper]
    for (src, dst), found in sorted(graph.items()):
        style = ', color="#c0392b", penwidth=2' if (src, dst) in bad else ""
        lines.append(f'  "{src}" -> "{dst}" [label="{len(found)}", fontsize=9{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--dot", help="write the Graphviz source here")
    parser.add_argument("--svg", help="render the graph to this SVG file (needs Graphviz's dot)")
    parser.add_argument("--title", default="hpc.stateless module_utils: imports between packages (arrow = imports)")
    args = parser.parse_args(argv)
    edges = read_edges()
    source = dot(edges, args.title)
    if args.dot:
        Path(args.dot).write_text(source, encoding="utf-8")
    if args.svg:
        subprocess.run(["dot", "-Tsvg", "-o", args.svg], input=source, text=True, check=True)
    if not (args.dot or args.svg):
        for (src, dst), found in sorted(package_graph(edges).items()):
            print(f"{src:>16} -> {dst:<16} {len(found)}")
    problems = violations(edges) + outside_imports(read_all_edges())
    pairs = mutual_pairs(edges)
    print(f"{len(pairs)} pairs of packages import each other through some path" + (": " if pairs else ""), file=sys.stderr)
    for pair in pairs:
        print(f"  {pair[0]} <-> {pair[1]}", file=sys.stderr)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
