"""optgraph: a graph-optimization compiler toolkit for GPU inference.

The small public API::

    import optgraph as og
    g = og.parse_file("model.ir")
    og.verify(g)                                  # raises VerifyError listing every problem
    g = og.run_pipeline(g, "dce,cse")
    text = og.print_graph(g)
    program = og.compile(g, target="cpu")         # default pipeline, planned arena
    outputs = program.run({"x": x}, weights=params)
"""

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.graph import Graph
from optgraph.ir.parser import parse, parse_file
from optgraph.ir.printer import print_graph
from optgraph.ir.verify import verify
from optgraph.passes.manager import run_pipeline
from optgraph.program import CompiledProgram, compile

Program = CompiledProgram

__all__ = [
    "CompiledProgram",
    "Graph",
    "OptGraphError",
    "Program",
    "Span",
    "compile",
    "from_onnx",
    "from_torch",
    "parse",
    "parse_file",
    "print_graph",
    "run_pipeline",
    "verify",
]
