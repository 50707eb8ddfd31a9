"""The public compile API: `optgraph.compile(graph, pipeline, target)` -> a runnable program.

    import optgraph as og
    program = og.compile(og.parse_file("model.ir"), target="cpu")
    outputs = program.run({"x": x}, weights=params)       # numpy in, numpy out

`target="cpu"` runs the lowered program on the planned executor (a NumPy byte arena at the planned
offsets, streams simulated in a seeded interleaving); `target="cuda"` hands the planned graph to
`optgraph.runtime.cuda`, imported only then. A pipeline that does not end in a memory plan gets
`analyze-lifetimes,plan-memory` appended: a program needs one.

- **Weights.** `run(inputs)` without weights uses `default_weights()`: the reference's seeded
  random weights (seed 0), made once per program and then the very same arrays on every run, so
  the CUDA runtime uploads them once (it skips an upload of the arrays it uploaded last). They
  are read-only: to run other values, pass them.
- **New input shapes** (cuda): the runtime asks `specialize(input_types)` for a graph, which is
  the source graph re-typed for those inputs and put through the same pipeline, memory plan
  included: each shape gets its own plan, kernels and CUDA graph (`RuntimeCounters.
  specializations` counts them). A graph that cannot take the shapes (a `reshape` with a static
  `shape`, say) raises an `InputError` naming each changed input with its compiled and new type,
  rather than running anything else. The cpu target runs the compiled shapes only.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optgraph.codegen.program import Program, lower
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph, TensorType
from optgraph.passes.facts import FACTS
from optgraph.passes.manager import run_pipeline

TARGETS = ("cpu", "cuda")


def plan_graph(graph: Graph, pipeline: str) -> Graph:
    """`graph` through `pipeline`, then through a memory plan if the pipeline did not end in one."""
    planned = run_pipeline(graph, pipeline)
    if not FACTS["memory-planned"].holds(planned) or not FACTS["lifetimes-analyzed"].holds(planned):
        planned = run_pipeline(planned, "analyze-lifetimes,plan-memory")
    return planned


@dataclass
class CompiledProgram:
    """A planned graph, its lowered program, and a way to run it on `target`.

    `source` and `pipeline` are what `graph` was compiled from: `specialize` repeats that for new
    input shapes (without a `source`, the CUDA runtime's default applies: `graph` re-typed and
    run unplanned). `merge_launches` (cuda): independent kernels of a stream as one launch."""

    graph: Graph
    program: Program
    target: str
    source: Graph | None = None
    pipeline: str = "default"
    merge_launches: bool = True
    _cuda: Any = field(default=None, repr=False)
    _default_weights: dict[str, np.ndarray] | None = field(default=None, repr=False)

    def run(
        self,
        inputs: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
        *,
        seed: int | None = 0,
    ) -> dict[str, Any]:
        """Outputs by name. `weights=None` uses `default_weights()` (made once, then reused).

        On cpu, `seed` picks the stream interleaving (None: issue order)."""
        if weights is None:
            weights = self.default_weights()
        if self.target == "cuda":
            outputs: dict[str, Any] = self._cuda_runner().run(inputs, weights)
            return outputs
        from optgraph.runtime.planned import execute

        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        return execute(self.program, arrays, dict(weights), seed=seed).outputs

    def default_weights(self) -> dict[str, np.ndarray]:
        """The reference's seeded random weights (seed 0) for `graph`, made on first use and the
        same read-only arrays from then on."""
        if self._default_weights is None:
            from optgraph.runtime.reference import random_weights

            weights = random_weights(self.graph, seed=0)
            for array in weights.values():
                array.flags.writeable = False
            self._default_weights = weights
        return self._default_weights

    def specialize(self, input_types: Mapping[str, TensorType]) -> Graph:
        """The planned graph for new input types: `source` re-typed, then `pipeline` (and a memory
        plan). Raises `InputError` naming each changed input with both types when the graph
        cannot take them or the pipeline fails on them."""
        from optgraph.runtime.cuda_graph_cache import retype_graph, shape_change

        if self.source is None:
            raise OptGraphError("this program has no source graph to re-specialize")
        retyped = retype_graph(self.source, input_types)  # names the inputs and both types
        try:
            return plan_graph(retyped, self.pipeline)
        except OptGraphError as err:
            change = shape_change(self.source, input_types)
            raise InputError(
                f"graph '{self.source.name}' cannot take {change}: {self.pipeline!r} failed: "
                f"{err.message}",
                err.span,
            ) from None

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
            hook = self.specialize if self.source is not None else None
            self._cuda = factory(self.graph, specialize=hook, merge_launches=self.merge_launches)
        return self._cuda


def compile(
    graph: Graph, pipeline: str = "default", target: str = "cpu", *, merge_launches: bool = True
) -> CompiledProgram:
    """Run `pipeline` (then plan memory if it did not) and lower the result for `target`.

    `merge_launches` (target cuda): False runs one launch per kernel (see
    `codegen/merge_launches.py`); the cpu target ignores it."""
    if target not in TARGETS:
        raise OptGraphError(f"unknown target '{target}' (expected one of {', '.join(TARGETS)})")
    planned = plan_graph(graph, pipeline)
    compiled = CompiledProgram(
        planned, lower(planned), target, source=graph, pipeline=pipeline,
        merge_launches=merge_launches,
    )  # fmt: skip
    if target == "cuda":
        compiled._cuda_runner()
    return compiled
