"""The lowered program: everything decided about running a planned graph, made once.

`optgraph.compile` (the API layer) plans a graph and lowers it (`lower_cuda.lower_for_cuda`); the
CUDA runtime only binds arrays, allocates, captures, updates and replays what it is given, and
never runs a pass or lowers. This module holds the data types only, so the runtime imports no
lowering code. `lower_for_cuda(graph, options)` returns a `LoweredProgram`:

- `graph`, `options`: the planned graph and the `LoweringOptions` it was lowered with (the
  runtime reads its launch options, `pdl`, `use_graph`, ..., from there);
- `main`: a `LoweredVariant` for the graph's own input types: its `CudaPlan` (kernels, launches
  and merged launches, arena and weight offsets, events, copies, prefetch slots) and, for a
  streamed program (`prefetch` nodes), the `fallback` variant whose weights are copied
  synchronously through one slot, used when the arena with its prefetch slots cannot be
  allocated;
- `in_place`: the {output: input} pairs that may be computed in the input's buffer
  (`in_place_outputs.in_place_candidates`), which the runtime matches against `out=` arrays.

New input shapes, and runs that bind an output to its input's array, need another variant; the
runtime asks a `Relower` callback for it (given by the API layer, which re-runs the pipeline),
so it still never lowers itself.

    before: %y = exp(%x) : f32[4,64] !{offset = 0, size = 1024}  (a planned graph)
    after:  LoweredProgram(main=LoweredVariant(plan=CudaPlan(steps=[KernelStep(y, og_exp_…)],
            arena_bytes=1024, ...), fallback=None), in_place={}, options=LoweringOptions())
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.cpu_node_schedule import Piece
from optgraph.codegen.plan.steps import CollectiveStep, CudaPlan
from optgraph.ir.graph import Graph, TensorType


@dataclass(frozen=True)
class LoweredVariant:
    """One specialization: fixed input types and in-place outputs, its graph and its plan.

    `fallback`: the same program with its streamed weights copied synchronously through one
    prefetch slot (a smaller arena), for when this plan's arena cannot be allocated; None for a
    program that streams nothing. `cpu_schedule`: see the field."""

    graph: Graph
    plan: CudaPlan
    in_place: Mapping[str, str] = field(default_factory=dict)
    fallback: LoweredVariant | None = None
    # A split program run with `cpu_nodes="calling-thread"`: the calling thread's pieces
    # (`cpu_node_schedule`); empty where the CPU nodes are host functions in the one graph,
    # or where there are none.
    cpu_schedule: tuple[Piece, ...] = ()


@dataclass(frozen=True)
class LoweredProgram:
    """A planned graph lowered for the CUDA runtime (see the module docstring)."""

    graph: Graph
    options: LoweringOptions
    main: LoweredVariant
    in_place: Mapping[str, str]


# What the runtime asks for a variant it has not got: (input types, in-place pairs) -> variant.
Relower = Callable[[Mapping[str, TensorType], Mapping[str, str]], LoweredVariant]


@dataclass(frozen=True)
class RankPrograms:
    """A several-device graph lowered per rank: `ranks[r]` is device r's program; `outputs`:
    the rank each output is read from; `groups`: the communicators a run needs; `relowers[r]`:
    rank r's variant for in-place outputs (a picklable callback: it travels to the rank)."""

    graph: Graph
    ranks: tuple[LoweredProgram, ...]
    outputs: Mapping[str, int]
    groups: tuple[tuple[int, ...], ...]
    relowers: tuple[Relower, ...] = ()

    @property
    def world(self) -> int:
        return len(self.ranks)

    def collectives(self, rank: int) -> list[CollectiveStep]:
        """Rank `rank`'s collective steps in issue order."""
        steps = self.ranks[rank].main.plan.steps
        return [s for s in steps if isinstance(s, CollectiveStep)]
