"""Scratch bytes a node's work needs besides its result (role "scratch"), placed for the runtime.

Only the tensor-core prefill attention takes scratch today (`prefill_gemm`: its float32
scores). The runtime allocates the arena and the unplanned value buffers before any capture, so
scratch placed in either is never allocated while a CUDA graph is captured.

    %a = attention(...) !{stream = 0}, %b = attention(...) !{stream = 1}, arena 4096 bytes
    ->  a: Location("arena", "", 4096), b: Location("arena", "", 4096 + a's region); arena grows
"""

from __future__ import annotations

from optgraph.codegen.cuda_dispatch import scratch_bytes
from optgraph.codegen.plan.collective_steps import COLLECTIVE_OPS
from optgraph.codegen.plan.steps import Location
from optgraph.ir.graph import Graph

ALIGNMENT = 256


def align(nbytes: int, alignment: int = ALIGNMENT) -> int:
    return -(-nbytes // alignment) * alignment


def place_scratch(
    graph: Graph, arena: int, value_bytes: dict[str, int]
) -> tuple[dict[str, Location], int]:
    """Each node's scratch (`cuda_dispatch.scratch_bytes`, role "scratch") and the arena's new
    size. Planned graphs: past the planned arena, one region per stream as large as its largest
    need (a stream runs its nodes one after another; two streams never share one). Unplanned
    graphs: a `value` buffer of its own (added to `value_bytes`). Either way the runtime
    allocates it with the arena or the values, before any capture."""
    types = graph.value_types()
    needs: dict[str, tuple[int, int]] = {}
    for node in graph.nodes:
        if node.is_event or node.op in COLLECTIVE_OPS or node.ann.backend == "cpu":
            continue
        nbytes = scratch_bytes(node, [types[o] for o in node.operands])
        if nbytes:
            needs[node.name] = (node.stream, nbytes)
    if not needs:
        return {}, arena
    if not any(n.ann.offset is not None for n in graph.nodes):
        for name, (_, nbytes) in needs.items():
            value_bytes[f"{name}#scratch"] = nbytes
        return {name: Location("value", f"{name}#scratch", 0) for name in needs}, arena
    largest: dict[int, int] = {}
    for stream, nbytes in needs.values():
        largest[stream] = max(largest.get(stream, 0), nbytes)
    base: dict[int, int] = {}
    cursor = align(arena)
    for stream in sorted(largest):
        base[stream] = cursor
        cursor += align(largest[stream])
    return {
        name: Location("arena", "", base[stream]) for name, (stream, _) in needs.items()
    }, cursor
