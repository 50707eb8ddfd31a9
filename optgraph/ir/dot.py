"""The stream assignment as a picture: Graphviz DOT text, rendered to SVG or PNG when possible.

    before: %a = exp(%x) : f32[4] !{stream = 1}   record ^e0 ..   wait ^e0 ..   %y = neg(%a) ..
    after:  "a" [label="%a\\nexp\\nf32[4]", fillcolor="#E69F00"];  "a" -> "y" [style=dashed, label="^e0"]

Every compute node is a box filled with its stream's colour and labelled with its name, op and
type (a fused node with its op count); inputs are grey ellipses, the outputs one grey box; data edges
are solid; each `wait` is a dashed edge from the last node its `record` covers to the first node
its stream runs after it (or to the outputs for the final join), labelled with the event. A legend
lists the streams. Weights are left out (they would crowd every picture).

`write_picture(graph, path)` writes `.dot` text anywhere; `.svg` and `.png` go through the
`graphviz` Python package and the Graphviz `dot` program, and say how to install them when absent.
Complexity O(V + E).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from optgraph.errors import InputError
from optgraph.ir.graph import Graph
from optgraph.output_files import write_atomic, write_atomic_bytes

# Okabe-Ito, readable for colour-blind viewers; streams beyond it cycle.
PALETTE = ("#56B4E9", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#0072B2", "#D55E00", "#999999")
RENDERED_FORMATS = ("svg", "png")
INSTALL_HINT = (
    "install it (Debian/Ubuntu: sudo apt-get install graphviz; macOS: brew install graphviz; "
    "conda: conda install graphviz), or write DOT text instead with -o {stem}.dot"
)


def _quote(text: str) -> str:
    return json.dumps(text)  # a DOT string: double quotes, backslash escapes


def stream_color(stream: int) -> str:
    return PALETTE[stream % len(PALETTE)]


def to_dot(graph: Graph) -> str:
    """DOT text of `graph` (see the module docstring)."""
    lines = [
        f"digraph {_quote(graph.name)} {{",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for i in graph.inputs:
        label = f"%{i.name}\\n{i.type}"
        lines.append(f'  {_quote("in:" + i.name)} [label="{label}", shape=ellipse, color=gray50];')
    streams = sorted({n.stream for n in graph.nodes} | {0})
    for node in graph.nodes:
        if node.is_event:
            continue
        op = node.op if node.body is None else f"fused ({len(node.body.nodes)} ops)"
        label = _quote(f"%{node.name}\n{op}\n{node.type}")  # JSON's \n is DOT's line break
        color = stream_color(node.stream)
        lines.append(
            f"  {_quote(node.name)} [label={label}, shape=box, style=filled, fillcolor="
            f'"{color}", tooltip="stream {node.stream}"];'
        )
    lines.append('  "out:" [label="outputs", shape=box, style=rounded, color=gray50];')
    producers = graph.producers()
    inputs = graph.input_names()
    for node in graph.nodes:
        if node.is_event:
            continue
        for operand in dict.fromkeys(node.operands):
            if operand in producers:
                lines.append(f"  {_quote(operand)} -> {_quote(node.name)};")
            elif operand in inputs:
                lines.append(f"  {_quote('in:' + operand)} -> {_quote(node.name)} [color=gray50];")
    for out in graph.output_names():
        source = out if out in producers else "in:" + out
        lines.append(f'  {_quote(source)} -> "out:" [color=gray50];')
    lines.extend(_event_edges(graph))
    lines.append("  subgraph cluster_legend {")
    lines.append('    label="streams"; fontname="Helvetica"; fontsize=10; color=gray70;')
    previous = None
    for s in streams:
        key = _quote(f"legend:{s}")
        lines.append(
            f'    {key} [label="stream {s}", shape=box, style=filled, fillcolor="{stream_color(s)}"];'
        )
        if previous is not None:
            lines.append(f"    {previous} -> {key} [style=invis];")
        previous = key
    lines.append('    "legend:event" [label="dashed edge: wait on a record", shape=plaintext];')
    lines.append(f'    {previous} -> "legend:event" [style=invis];')
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _event_edges(graph: Graph) -> list[str]:
    """Dashed edges: from the last node before each record on its stream to the first node after
    each wait on the waiting stream."""
    last_on: dict[int, str] = {}
    recorded: dict[str, str | None] = {}
    pending: dict[int, list[tuple[str, str | None]]] = {}  # stream -> waits not yet followed
    edges = []
    for node in graph.nodes:
        s = node.stream
        if node.op == "record":
            recorded[node.name] = last_on.get(s)
        elif node.op == "wait":
            pending.setdefault(s, []).append((node.name, recorded.get(node.name)))
        else:
            for event, source in pending.pop(s, []):
                if source is not None:
                    edges.append((source, node.name, event))
            last_on[s] = node.name
    for waits in pending.values():  # the final join: waits with nothing after them
        edges.extend((source, "out:", event) for event, source in waits if source is not None)
    return [
        f"  {_quote(a)} -> {_quote(b)} [style=dashed, color=gray30, constraint=false, label={_quote('^' + e)}];"
        for a, b, e in edges
    ]


def write_picture(graph: Graph, path: str | Path) -> Path:
    """Write `.dot` text, or render `.svg`/`.png` with Graphviz. Raises `InputError` when the
    format is unknown or Graphviz is missing (saying how to install it)."""
    target = Path(path)
    fmt = target.suffix.lower().lstrip(".")
    text = to_dot(graph)
    if fmt in ("dot", "gv"):
        return write_atomic(target, text)
    if fmt not in RENDERED_FORMATS:
        raise InputError(f"cannot draw '{target}': use a .dot, .svg or .png file name")
    hint = INSTALL_HINT.format(stem=target.with_suffix(""))
    if shutil.which("dot") is None:
        raise InputError(
            f"rendering '{target}' needs the Graphviz 'dot' program, which is not installed: {hint}"
        )
    try:
        import graphviz
    except ImportError:
        raise InputError(
            f"rendering '{target}' needs the graphviz Python package: pip install 'optgraph[viz]'"
        ) from None
    try:
        data = graphviz.Source(text).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise InputError(f"rendering '{target}' needs the Graphviz 'dot' program: {hint}") from None
    return write_atomic_bytes(target, data)
