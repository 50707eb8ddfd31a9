"""The public compile API: `optgraph.compile(graph, pipeline, target)` -> a runnable program.

    import optgraph as og
    program = og.compile(og.parse_file("model.ir"), target="cpu")
    outputs = program.run({"x": x}, weights=params)       # numpy in, numpy out

`target="cpu"` runs the lowered program on the planned executor (a NumPy byte arena at the planned
offsets, streams simulated in a seeded interleaving); `target="cuda"` hands the planned graph to
`optgraph.runtime.cuda`, imported only then. A pipeline that does not end in a memory plan gets
`analyze-lifetimes,plan-memory` appended: a program needs one.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optgraph.codegen.program import Program, lower
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph
from optgraph.passes.facts import FACTS
from optgraph.passes.manager import run_pipeline

TARGETS = ("cpu", "cuda")


@dataclass
class CompiledProgram:
    """A planned graph, its lowered program, and a way to run it on `target`."""

    graph: Graph
    program: Program
    target: str
    _cuda: Any = field(default=None, repr=False)

    def run(
        self,
        inputs: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
        *,
        seed: int | None = 0,
    ) -> dict[str, Any]:
        """Outputs by name. `weights=None` uses the reference's seeded random weights (seed 0).

        On cpu, `seed` picks the stream interleaving (None: issue order)."""
        if weights is None:
            from optgraph.runtime.reference import random_weights

            weights = random_weights(self.graph, seed=0)
        if self.target == "cuda":
            return self._cuda_runner().run(inputs, weights)
        from optgraph.runtime.planned import execute

        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        return execute(self.program, arrays, dict(weights), seed=seed).outputs

    def _cuda_runner(self) -> Any:
        if self._cuda is None:
            try:
                cuda = importlib.import_module("optgraph.runtime.cuda")
            except ImportError as err:
                raise OptGraphError(
                    f"target 'cuda': the CUDA runtime is not available ({err}); use target='cpu'"
                ) from None
            probe = getattr(cuda, "is_available", None)
            if callable(probe) and not probe():
                raise OptGraphError(
                    "target 'cuda': no usable CUDA GPU (CuPy missing or no device); "
                    "use target='cpu'"
                )
            factory = getattr(cuda, "CudaProgram", None)
            if factory is None:
                raise OptGraphError(
                    "target 'cuda': optgraph.runtime.cuda has no CudaProgram; use target='cpu'"
                )
            self._cuda = factory(self.graph)
        return self._cuda


def compile(graph: Graph, pipeline: str = "default", target: str = "cpu") -> CompiledProgram:
    """Run `pipeline` (then plan memory if it did not) and lower the result for `target`."""
    if target not in TARGETS:
        raise OptGraphError(f"unknown target '{target}' (expected one of {', '.join(TARGETS)})")
    planned = run_pipeline(graph, pipeline)
    if not FACTS["memory-planned"].holds(planned) or not FACTS["lifetimes-analyzed"].holds(planned):
        planned = run_pipeline(planned, "analyze-lifetimes,plan-memory")
    compiled = CompiledProgram(planned, lower(planned), target)
    if target == "cuda":
        compiled._cuda_runner()
    return compiled
