"""optgraph: a graph-optimization compiler toolkit for GPU inference.

The small public API::

    import optgraph as og
    g = og.parse_file("model.ir")
    og.verify(g)                                  # raises VerifyError listing every problem
    g = og.run_pipeline(g, "dce,cse")
    text = og.print_graph(g)
    program = og.compile(g, target="cpu")         # default pipeline, planned arena
    outputs = program.run({"x": x}, weights=params)
    program = og.compile(g, target="cuda", options=og.LoweringOptions(merge_launches=False))
    model = og.load("checkpoint-dir", device="cpu")   # or a .gguf; text in, text out
    model.generate("Hello", max_new_tokens=32).text

The names are loaded on first use (PEP 562 `__getattr__`): `import optgraph` alone imports
nothing heavy, so `optgraph --help` and `optgraph passes` start quickly.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optgraph.api.generation import load
    from optgraph.api.programs import CompiledProgram, compile
    from optgraph.codegen.lowering_options import LoweringOptions
    from optgraph.errors import OptGraphError, Span
    from optgraph.frontends.gguf import from_gguf
    from optgraph.frontends.onnx import from_onnx
    from optgraph.frontends.torch_export import from_torch
    from optgraph.ir.graph import Graph
    from optgraph.ir.parser import parse, parse_file
    from optgraph.ir.printer import print_graph
    from optgraph.ir.verify import verify
    from optgraph.passes.manager import run_pipeline

    Program = CompiledProgram

# Public name -> (module, name in that module).
_EXPORTS: dict[str, tuple[str, str]] = {
    "CompiledProgram": ("optgraph.api.programs", "CompiledProgram"),
    "Graph": ("optgraph.ir.graph", "Graph"),
    "LoweringOptions": ("optgraph.codegen.lowering_options", "LoweringOptions"),
    "OptGraphError": ("optgraph.errors", "OptGraphError"),
    "Program": ("optgraph.api.programs", "CompiledProgram"),
    "Span": ("optgraph.errors", "Span"),
    "compile": ("optgraph.api.programs", "compile"),
    "from_gguf": ("optgraph.frontends.gguf", "from_gguf"),
    "from_onnx": ("optgraph.frontends.onnx", "from_onnx"),
    "from_torch": ("optgraph.frontends.torch_export", "from_torch"),
    "load": ("optgraph.api.generation", "load"),
    "parse": ("optgraph.ir.parser", "parse"),
    "parse_file": ("optgraph.ir.parser", "parse_file"),
    "print_graph": ("optgraph.ir.printer", "print_graph"),
    "run_pipeline": ("optgraph.passes.manager", "run_pipeline"),
    "verify": ("optgraph.ir.verify", "verify"),
}

__all__ = [
    "CompiledProgram",
    "Graph",
    "LoweringOptions",
    "OptGraphError",
    "Program",
    "Span",
    "compile",
    "from_gguf",
    "from_onnx",
    "from_torch",
    "load",
    "parse",
    "parse_file",
    "print_graph",
    "run_pipeline",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use, and keep the name for later lookups."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'optgraph' has no attribute '{name}'") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
