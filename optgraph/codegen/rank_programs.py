"""One lowered program per device (rank) of a device-annotated graph (issue #15, docs/multi-gpu.md).

A planned several-device graph holds every device's work in one issue order (docs/ir.md,
"Devices"). `lower_ranks(graph, options)` cuts it into one single-device *rank graph* per device
and lowers each with `lower_cuda.lower_for_cuda` (each all_reduce then offered the residual add
after it: `codegen/decode/residual_adds.py`), so a rank runs on the ordinary CUDA runtime:
its own nodes in the global issue order, its streams and events, its arena (the planned offsets
are per-device already), and each collective as a `CollectiveStep` (`codegen/plan/collective_steps.py`)
on its node's stream.

`rank_graph(graph, r)`:
- keeps the inputs, weights and nodes whose devices include r, each node's `device` set to r
  (a replicated node runs once on each of its devices);
- gives each collective this rank's operand only: `all_reduce`/`all_gather` the operand of
  `group.index(r)`, `recv` none (its operand, the `send`, is on the other device);
- keeps the outputs whose producing value's first device is r (where outputs are read from):
  rank r gets its own pieces of a cache cut by head, as inputs and as outputs, and nothing of
  the other ranks' pieces.

    %p = matmul(%x, %wo.d1) : f32[1,64] !{device = 1, offset = 0}
    %s = all_reduce(%p0, %p) {group = [0, 1]} : f32[1,64] !{device = [0, 1], offset = 256}
    -> rank 1: %p = matmul(%x, %wo.d1) !{device = 1, offset = 0}
               %s = all_reduce(%p) {group = [0, 1]} !{device = 1, offset = 256}

Every rank issues its collectives in the global issue order, so two ranks meet each
communicator's calls in the same order (NCCL's requirement). `RankPrograms.groups` lists the
communicators a run needs: every collective's group, and the whole world for `send`/`recv`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial

from optgraph.codegen.cuda_source import CodegenError
from optgraph.codegen.decode.residual_adds import offer_residual_adds
from optgraph.codegen.lower_cuda import lower_for_cuda, lower_variant
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.collective_steps import COLLECTIVE_OPS
from optgraph.codegen.plan.lowered import LoweredProgram, LoweredVariant, RankPrograms
from optgraph.codegen.plan.steps import CollectiveStep
from optgraph.ir.graph import Graph, Node, TensorType

POINT_TO_POINT = ("send", "recv")


def _local_operands(node: Node, rank: int) -> tuple[str, ...]:
    if node.op in ("all_reduce", "all_gather"):
        group = node.attr("group")
        assert isinstance(group, tuple)
        return (node.operands[group.index(rank)],)
    if node.op == "recv":
        return ()
    return node.operands


def rank_graph(graph: Graph, rank: int) -> Graph:
    """Device `rank`'s single-device view of `graph` (see the module docstring)."""
    nodes = []
    for node in graph.nodes:
        if rank not in node.devices:
            continue
        if node.op in COLLECTIVE_OPS:
            node = replace(node, operands=_local_operands(node, rank))
        nodes.append(node.with_ann(device=(rank,)))
    inputs = tuple(i for i in graph.inputs if rank in i.ann.devices)
    weights = tuple(w for w in graph.weights if rank in w.ann.devices)
    owner = output_ranks(graph)
    outputs = tuple(o for o in graph.outputs if owner[o.name] == rank)
    return replace(graph, inputs=inputs, weights=weights, nodes=tuple(nodes), outputs=outputs)


def output_ranks(graph: Graph) -> dict[str, int]:
    """The rank each output is read from: the first device of the value. A split output (a KV
    cache cut by head) is one output per piece, `%c.d<i>` on device i, so each piece is read
    from its own rank and the caller joins them (`program_devices.whole_outputs`)."""
    devices = graph.value_devices()
    return {o.name: devices[o.name][0] for o in graph.outputs}


def communicator_groups(ranks: tuple[LoweredProgram, ...]) -> tuple[tuple[int, ...], ...]:
    """Every distinct collective group of the programs, and the world where any send/recv is."""
    groups: set[tuple[int, ...]] = set()
    for program in ranks:
        for step in program.main.plan.steps:
            if isinstance(step, CollectiveStep):
                p2p = step.kind in POINT_TO_POINT
                groups.add(tuple(range(len(ranks))) if p2p else step.group)
    return tuple(sorted(groups))


def relower_rank(
    graph: Graph,
    options: LoweringOptions,
    types: Mapping[str, TensorType],
    in_place: Mapping[str, str],
) -> LoweredVariant:
    """A rank program's variant with outputs in their inputs' buffers (KV caches bound in
    place); other input types are refused: a split graph is compiled for its shapes."""
    if dict(types) != {i.name: i.type for i in graph.inputs}:
        raise CodegenError(
            f"graph '{graph.name}': a program on several devices runs the input types it was "
            "compiled for only; compile it again for other shapes"
        )
    return _with_residual_adds(lower_variant(graph, options, in_place))


def _with_residual_adds(variant: LoweredVariant) -> LoweredVariant:
    return replace(variant, plan=offer_residual_adds(variant.graph, variant.plan))


def lower_rank(graph: Graph, options: LoweringOptions) -> LoweredProgram:
    """One rank graph lowered, each all_reduce offered the residual add after it."""
    program = lower_for_cuda(graph, options)
    return replace(program, main=_with_residual_adds(program.main))


def lower_ranks(graph: Graph, options: LoweringOptions | None = None) -> RankPrograms:
    """`graph` (planned, device-annotated) lowered to one program per device."""
    options = options or LoweringOptions()
    world = graph.device_count()
    ranks = tuple(lower_rank(rank_graph(graph, r), options) for r in range(world))
    relowers = tuple(partial(relower_rank, p.graph, options) for p in ranks)
    return RankPrograms(graph, ranks, output_ranks(graph), communicator_groups(ranks), relowers)
