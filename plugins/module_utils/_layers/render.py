# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Renderings of a :class:`~.change_plan.ChangePlan` for people: a text table and a Graphviz DOT picture."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._layers.change_plan import REBUILD, ChangePlan


def render_table(plan: ChangePlan) -> str:
    """Human table: layer (indented below its parent), image types, rebuild/reuse, why."""
    rows = [("LAYER", "IMAGE TYPES", "ACTION", "WHY")]
    children: dict[str | None, list[str]] = {}
    for name, decision in plan.layers.items():
        children.setdefault(decision.parent, []).append(name)
    tree: list[str] = []
    pending = sorted(children.get(None, []), reverse=True)
    while pending:  # depth first, so the indentation reads as the DAG
        name = pending.pop()
        tree.append(name)
        pending.extend(sorted(children.get(name, []), reverse=True))
    for name in tree:
        decision = plan.layers[name]
        rows.append(("  " * decision.depth + name, ",".join(decision.images) or "-", decision.action, decision.why))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows]
    summary = (f"{len(plan.rebuild)} of {len(plan.layers)} layers rebuild"
               + (f" (compared with {plan.base})" if plan.base else "")
               + (": " + " -> ".join(plan.rebuild) if plan.rebuild else ""))
    starts = [f"{i}: from {p['start']}" for i, p in plan.images.items() if p["start"] and p["selected"]]
    if starts:
        summary += "\nimage types affected: " + "; ".join(starts)
    return "\n".join(lines) + "\n" + summary + "\n"


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(plan: ChangePlan, title: str = "hpc.stateless layer plan") -> str:
    """Graphviz DOT of the DAG: rebuilt layers are filled boxes, reused layers dotted ovals,
    images are folders linked from the layer they are packed from (bold when affected)."""
    lines = [
        "digraph hpc_stateless_plan {",
        f"  label={_dot_id(title + (' vs ' + plan.base if plan.base else ''))};",
        "  labelloc=t; rankdir=TB; fontname=Helvetica;",
        "  node [fontname=Helvetica]; edge [fontname=Helvetica];",
    ]
    for name, decision in plan.layers.items():
        label = name + ("\nrebuild" if decision.action == REBUILD else "")
        if decision.action == REBUILD:
            style = 'shape=box, style="filled,bold", fillcolor="#f4a261"'
        else:
            style = 'shape=ellipse, style=dotted'
        tooltip = _dot_id(decision.why)
        lines.append(f"  {_dot_id('layer:' + name)} [label={_dot_id(label)}, {style}, tooltip={tooltip}];")
    for name, decision in plan.layers.items():
        if decision.parent is not None:
            attrs = " [penwidth=2]" if decision.action == REBUILD else " [style=dotted]"
            lines.append(f"  {_dot_id('layer:' + decision.parent)} -> {_dot_id('layer:' + name)}{attrs};")
    for image, info in plan.images.items():
        affected = bool(info["rebuild"]) and info["selected"]
        style = 'shape=folder, style=bold, color="#e76f51"' if affected else "shape=folder, color=gray50"
        lines.append(f"  {_dot_id('image:' + image)} [label={_dot_id('image ' + image)}, {style}];")
        lines.append(f"  {_dot_id('layer:' + info['layer'])} -> {_dot_id('image:' + image)} [arrowhead=none, "
                     f"style={'bold' if affected else 'dashed'}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
