"""Where a norm's statistics are handed from the product storing its row (`cuda_norm_stats`).

Decided once at lowering (`cuda_plan.lower_cuda`), with `cuda_row_prologue.NORM_STATS` on. A value
h qualifies when its producing node lowers to one one-row product kernel storing h as it is
(`cuda_fused.gemv_region` / `gemv_matmul`, no rope or cache fold), on the GPU, and at least one
reader is a fused one-row product whose prologue norm (rms_norm, layer_norm) takes h (or a view of
all of it, at offset 0, with the same row length) as a parameter. The producer then stores P
per-tile partials (P: its tiles) for that norm, and each such reader combines them instead of
reducing the row (readers of h whose norm is of the other kind, in a graph that has both, keep
their reduction: the partials are stored for the first reader's kind):

    %h = fused(%a, %wo, %r) { matmul, add }            -> KernelStep(h): writes h, stats(h)
    %u = fused(%h, %g, %wu) { rms_norm(%p0, %p1), matmul } -> KernelStep(u): reads h, stats(h)

Everything else keeps the per-block statistics: a norm of the embedding row (get_rows), of a
cuBLAS product's result, of a row computed by elementwise prologue nodes.

Storage: one region per value, never shared (m × P × `WIDTH[norm]` floats), placed like `scratch_space` places
scratch: past the planned arena (256-byte aligned), or, on an unplanned graph, a `value` buffer
of its own (key `<h>#norm_stats`); the runtime allocates both before any capture. The producer's
step lists the region among its `writes`, each reader's among its `reads`, so `merge_launches`
never merges a reader with its producer and extent checks see the flow.
Complexity: O(V) plus one producer kernel text per qualifying value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from optgraph.analysis.fusion_rules import PRODUCT, plan_body
from optgraph.codegen import cuda_fused, cuda_row_prologue
from optgraph.codegen.cuda_norm_stats import (
    HANDED_NORMS,
    NO_ROW_STATS,
    READ_ROLE,
    WIDTH,
    WRITE_ROLE,
    RowStats,
)
from optgraph.codegen.cuda_steps import Extent, Location
from optgraph.codegen.scratch_space import align
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots


@dataclass(frozen=True)
class NormStats:
    """The handed statistics of a lowering: `regions` {h: where its partials live}, `norms`
    {h: the norm they are for}, `partials` {h: P}, `rows` {h: m}, `readers` {reader node: the h
    whose partials it reads}."""

    regions: dict[str, Location] = field(default_factory=dict)
    norms: dict[str, str] = field(default_factory=dict)
    partials: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    readers: dict[str, str] = field(default_factory=dict)

    def kernel_stats(self, node: str) -> RowStats:
        """What `node`'s kernel does with statistics (nothing for most nodes)."""
        h = self.readers.get(node)
        if node not in self.regions and h is None:
            return NO_ROW_STATS
        return RowStats(self.norms.get(node, ""), self.partials[h] if h is not None else 0)

    def roles(self, node: str) -> dict[str, Location]:
        """The kernel roles of `node`'s partials: `stats_out` (its own), `stats_in` (read)."""
        roles = {WRITE_ROLE: self.regions[node]} if node in self.regions else {}
        h = self.readers.get(node)
        if h is not None:
            roles[READ_ROLE] = self.regions[h]
        return roles

    def extent(self, h: str) -> Extent:
        return Extent.of(self.regions[h], self.nbytes(h))

    def nbytes(self, h: str) -> int:
        return 4 * self.rows[h] * self.partials[h] * WIDTH[self.norms[h]]

    def reads(self, node: str) -> tuple[Extent, ...]:
        h = self.readers.get(node)
        return (self.extent(h),) if h is not None else ()

    def writes(self, node: str) -> tuple[Extent, ...]:
        return (self.extent(node),) if node in self.regions else ()


def handed_row(
    node: Node, types: Mapping[str, TensorType], roots: Mapping[str, tuple[str, int]]
) -> tuple[str, str] | None:
    """(value, norm op) when `node` could take that value's statistics from its producer: a
    fused one-row product whose prologue norm reads a parameter bound to the value (or to a
    view of all of it at offset 0 with the same row length); else None."""
    if node.op != "fused" or node.body is None or node.ann.backend == "cpu":
        return None
    body = node.body
    operand_types = [types[o] for o in node.operands]
    try:
        plan = plan_body(body, operand_types)
    except ValueError:
        return None
    if plan.kind != PRODUCT or not plan.prologue:
        return None
    by_name = {n.name: n for n in body.nodes}
    norms = [by_name[p] for p in plan.prologue if by_name[p].op in HANDED_NORMS]
    if len(norms) != 1 or norms[0].operands[0] not in body.params:
        return None
    value = node.operands[body.params.index(norms[0].operands[0])]
    root, offset = roots.get(value, (value, 0))
    same = types[root].numel == types[value].numel
    if offset or not same or types[root].shape[-1] != types[value].shape[-1]:
        return None
    return root, norms[0].op


def _producer_tiles(node: Node, types: Mapping[str, TensorType], norm: str) -> int | None:
    """P, the tiles of `node`'s one-row product kernel when it stores its result unfolded with
    partials for `norm`; None when `node` lowers to anything else."""
    if node.ann.backend == "cpu" or node.type is None or node.is_event:
        return None
    operand_types = [types[o] for o in node.operands]
    writes = RowStats(write=norm)
    if node.op == "fused":
        launches = cuda_fused.gemv_region(node, operand_types, stats=writes)
    elif node.op == "matmul":
        launches = cuda_fused.gemv_matmul(node, operand_types, stats=writes)
    else:
        return None
    if not launches or len(launches) != 1:
        return None
    return launches[0].grid[0]


def place_norm_stats(
    graph: Graph,
    locations: Mapping[str, Location],
    arena: int,
    value_bytes: dict[str, int],
) -> tuple[NormStats, int]:
    """The handed statistics of `graph` and the arena's new size (see the module docstring);
    unplanned graphs get a `value` buffer per region (added to `value_bytes`)."""
    if not cuda_row_prologue.NORM_STATS:
        return NormStats(), arena
    types = graph.value_types()
    by_name = {n.name: n for n in graph.nodes if not n.is_event}
    roots = alias_roots(graph)
    wanted: dict[str, list[str]] = defaultdict(list)
    kinds: dict[str, str] = {}
    for node in graph.nodes:
        found = handed_row(node, types, roots) if not node.is_event else None
        if found is not None and kinds.setdefault(found[0], found[1]) == found[1]:
            wanted[found[0]].append(node.name)
    stats = NormStats()
    planned = any(n.ann.offset is not None for n in graph.nodes)
    cursor = align(arena)
    for h, readers in wanted.items():
        producer = by_name.get(h)
        if producer is None or h in roots or locations[h].space not in ("arena", "value"):
            continue
        tiles = _producer_tiles(producer, types, kinds[h])
        if tiles is None:
            continue
        stats.norms[h], stats.partials[h] = kinds[h], tiles
        stats.rows[h] = types[h].numel // types[h].shape[-1]
        stats.readers.update((r, h) for r in readers)
        if planned:
            stats.regions[h] = Location("arena", "", cursor)
            cursor += align(stats.nbytes(h))
        else:
            key = f"{h}#norm_stats"
            value_bytes[key] = stats.nbytes(h)
            stats.regions[h] = Location("value", key, 0)
    return stats, (cursor if stats.regions and planned else arena)
