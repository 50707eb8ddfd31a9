"""`tensor-parallel{ways=N}`: split a transformer across N devices, Megatron-style.

    before: %q = matmul(%x, %wq) : f32[1,64]      ... %o = matmul(%a, %wo) : f32[1,64]
    after:  %q.d0 = matmul(%x, %wq.d0) : f32[1,32] !{device = 0}    (and %q.d1 on device 1)
            %o.d0 = matmul(%a.d0, %wo.d0) : f32[1,64] !{device = 0}  (and %o.d1)
            %o = all_reduce(%o.d0, %o.d1) {group = [0, 1]} : f32[1,64] !{device = [0, 1]}

Found from the graph, not from names (`analysis/tensor_shards`; the pieces written for each
device: `analysis/device_pieces`): a matmul with a weight is column-parallel when its result
reaches attention, another matmul with a weight (MLP gate/up) or an output (logits, by
vocabulary); attention runs on each device's heads, query heads
[i*H/N, (i+1)*H/N) with KV heads [i*KV/N, (i+1)*KV/N) (the grouped-query mapping kept; with
N a multiple of KV, device i reads KV head i // (N/KV)), its per-head mask and sinks sliced
alike; a split input times a weight cut by rows
(o, down) is row-parallel, then `all_reduce`; the embedding is cut along hidden, then
`all_gather`. Elementwise ops keep a split where wanted or free; norms, the residual stream and
the rest run replicated. A KV-cache input whose KV heads N divides is cut by KV head: device i
holds heads [i*KV/N, (i+1)*KV/N) as its own input piece `%l0.k_cache.d<i>`, writes its new rows
there and attention reads it, with no collective; the updated cache is output as its pieces.
Elsewhere (N a multiple of KV; a cache that is not an input, or is read by more than its write)
the cache stays whole on every device, its new rows gathered where they were split.
docs/passes.md has the reasons for each choice.

Weights are cut once, at compile time: pieces are named (`%l0.wq.d1`, device 1) and
`shard_weights(graph_before, graph_after, weights)` cuts them from the user's arrays; a fused
q|k|v weight sliced into q, k and v is cut per slice. A value's piece on device i is `%v.d<i>`.
Cache inputs likewise: `shard_inputs` cuts the user's whole caches, `join_outputs` joins the
split outputs under the original names, so the user passes and reads whole arrays.

Does not handle: head counts N devices cannot share and MLP widths they cannot cut evenly (errors
naming the node), batched weights, graphs already placed or fused (run it first). Results equal
the original's but for the order of the row-parallel sums.

Complexity O(V + E) plus the O(V·N) nodes it writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from optgraph.analysis.device_pieces import DevicePieces
from optgraph.analysis.tensor_shards import (
    PieceLayout,
    ShardRecipe,
    Split,
    aligned_axis,
    segments_of,
    slice_bounds,
    split_demand,
    splittable_caches,
    stored_segments,
    view_split,
)
from optgraph.errors import VerifyError
from optgraph.ir.graph import Graph, Node
from optgraph.ir.op_rules_attention import attention_operands
from optgraph.ir.ops import attrs_with_defaults, get_op
from optgraph.passes.base import Pass

if TYPE_CHECKING:  # `optgraph passes` and the other light commands load no NumPy
    import numpy as np

MAX_WAYS = 1024


@dataclass(frozen=True)
class TensorParallelPass(Pass):
    name: ClassVar[str] = "tensor-parallel"
    summary: ClassVar[str] = "split attention heads, MLPs, embedding and logits across N devices"
    invalidates: ClassVar[tuple[str, ...]] = (
        "streams-assigned",
        "backends-assigned",
        "synced",
        "lifetimes-analyzed",
        "memory-planned",
    )
    ways: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.ways <= MAX_WAYS:
            raise ValueError(f"ways must be 1 to {MAX_WAYS}, got {self.ways}")

    def run(self, graph: Graph) -> Graph:
        if self.ways == 1:
            return graph
        return split_graph(graph, self.ways)[0]


class TensorSplitter(DevicePieces):
    """One sweep in issue order: each node is written replicated, split (one piece per device),
    or row-parallel (partial sums and an all_reduce), by the layout of its operands."""

    def __init__(self, graph: Graph, ways: int) -> None:
        super().__init__(graph, ways)
        self.demand = split_demand(graph, ways)
        self.required = split_demand(graph, ways, outputs=False)  # else only an output wants it
        self.cuts = slice_bounds(graph)
        self.cache_inputs = splittable_caches(graph, ways)
        self.split_caches: set[str] = set()  # cache writes into a cache input cut by KV head

    def run(self) -> Graph:
        for node in self.graph.nodes:
            if node.op == "attention":  # before any other message: heads are the usual cause
                self._check_heads(node)
        for node in self.graph.nodes:
            self._visit(node)
        if not self.pieces:
            first = self.graph.nodes[0] if self.graph.nodes else None
            raise VerifyError(
                f"tensor-parallel: nothing to split in graph {self.graph.name}: no attention and "
                "no matmul with a weight that feeds attention, another such matmul or an output",
                None if first is None else first.span,
            )
        for output in self.graph.outputs:
            if output.name in self.split_caches:
                self.output_pieces(output.name)
            else:
                self.replicated(output.name, output.span)
        return self.assembled()

    def _visit(self, node: Node) -> None:
        category = getattr(get_op(node.op), "category", "")
        if node.is_event:
            raise VerifyError("tensor-parallel: run it before insert-sync (events)", node.span)
        if node.op == "matmul" and self._matmul(node):
            return
        if node.op == "get_rows" and self._get_rows(node):
            return
        if node.op in ("reshape", "transpose", "slice") and self._view(node):
            return
        if node.op == "kv_cache_write" and self._cache_write(node):
            return
        if (category == "elementwise" or node.op == "kv_cache_write") and self._elementwise(node):
            return
        if node.op in ("rope", "attention") and self._heads(node):
            return
        operands = tuple(self.replicated(o, node.span) for o in node.operands)
        self.emit(replace(node, operands=operands), self.everywhere)
        self.has_replica.add(node.name)

    def _matmul(self, node: Node) -> bool:
        a, b = node.operands
        attrs = attrs_with_defaults(node)
        ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
        if b not in self.weights or self.types[b].rank != 2 or node.type is None:
            return False
        rank_a = self.types[a].rank
        split_a = self.split_of(a)
        if split_a is not None and split_a.axis == rank_a - (2 if ta else 1):  # row-parallel
            weight = self.weightpieces_of(b, Split(1 if tb else 0, split_a.segments))
            partials = []
            for i in range(self.ways):
                name = self.fresh(f"{node.name}.d{i}")
                piece = Node(name, "matmul", (self.pieces[a][1][i], weight[i]), node.attrs,
                             node.type, span=node.span)  # fmt: skip
                self.emit(piece, (i,))
                partials.append(name)
            total = Node(node.name, "all_reduce", tuple(partials), {"group": self.everywhere},
                         node.type, span=node.span)  # fmt: skip
            self.emit(total, self.everywhere)
            self.has_replica.add(node.name)
            return True
        if split_a is not None or node.name not in self.demand:
            return False
        n_axis = 0 if tb else 1
        split = Split(node.type.rank - 1, segments_of(self.types[b].shape[n_axis],
                                                      self.cuts.get(node.name)))  # fmt: skip
        if not split.is_even(self.ways):
            if node.name not in self.required:  # a logits head: run it whole
                return False
            cut = f" (cut by slices into {list(split.segments)})" if len(split.segments) > 1 else ""
            raise VerifyError(
                f"tensor-parallel: matmul %{node.name} has {node.type.shape[-1]} output "
                f"columns{cut}, which {self.ways} devices cannot share evenly",
                node.span,
            )
        weight = self.weightpieces_of(b, Split(n_axis, split.segments))
        self.emit_split(node, split, self.per_device([self.replicated(a, node.span), weight]),
                         None)  # fmt: skip
        return True

    def _get_rows(self, node: Node) -> bool:
        table, ids = node.operands
        if table not in self.weights or node.type is None:
            return False
        width = self.types[table].shape[-1]
        if self.types[table].rank != 2 or width % self.ways:
            return False
        if stored_segments(self.types[table], Split(1, (width,)), self.ways) is None:
            return False  # a quantized table whose blocks the devices cannot share: whole
        pieces = self.weightpieces_of(table, Split(1, (width,)))
        operands = self.per_device([pieces, self.replicated(ids, node.span)])
        self.emit_split(node, Split(node.type.rank - 1, (width,)), operands, None)
        return True

    def _view(self, node: Node) -> bool:
        (source,) = node.operands
        split = self.split_of(source)
        moved = None if split is None else view_split(node, split, self.types[source], self.ways)
        if moved is None:
            return False
        pieces = self.pieces[source][1]
        self.emit_split(node, moved[0], self.per_device([pieces]), [moved[1]] * self.ways)
        return True

    def _elementwise(self, node: Node) -> bool:
        """Elementwise ops and kv_cache_write: split like their first split operand."""
        assert node.type is not None
        rank = node.type.rank
        first = next((o for o in node.operands if self.split_of(o) is not None), None)
        if first is None or (node.op == "kv_cache_write" and first != node.operands[0]):
            return False  # a whole cache stays whole: its new rows are gathered (a few bytes)
        split = self.split_of(first)
        assert split is not None
        axis = split.axis + rank - self.types[first].rank
        wanted = [aligned_axis(axis, rank, self.types[o]) for o in node.operands]
        # keep a split only where it is wanted downstream or costs nothing (operands already
        # split, or weights cut at compile time): the residual stream stays replicated
        free = all(
            k is None or self.split_of(o) is not None or o in self.weights
            for o, k in zip(node.operands, wanted)
        )
        if node.name not in self.demand and not free:
            return False
        if not all(
            self.can_piece(o, Split(k, split.segments))
            for o, k in zip(node.operands, wanted)
            if k is not None
        ):
            return False
        operands: list[str | tuple[str, ...]] = [
            self.replicated(o, node.span)
            if k is None
            else self.pieces_of(o, Split(k, split.segments))
            for o, k in zip(node.operands, wanted)
        ]
        self.emit_split(node, Split(axis, split.segments), self.per_device(operands), None)
        return True

    def _cache_write(self, node: Node) -> bool:
        """New rows split by KV head into a cache input that `ways` divides by head: the cache
        input is cut by KV head too, so each device writes (and keeps) only its heads' rows and no
        collective is needed; attention then reads each device's piece."""
        cache, new = node.operands[:2]
        split = self.split_of(new)
        if cache not in self.cache_inputs or split != Split(1, (self.types[cache].shape[1],)):
            return False
        self.inputpieces_of(cache, split)
        written = self._elementwise(node)  # every operand is now split or whole on each device
        assert written, node.name
        self.split_caches.add(node.name)
        return True

    def _heads(self, node: Node) -> bool:
        """rope and attention on each device's heads ([B,S,H,D] and [B,H,S,D] respectively)."""
        split = self.split_of(node.operands[0])
        head_axis = 2 if node.op == "rope" else 1
        if split is None or split.axis != head_axis or len(split.segments) != 1:
            return False
        # k and v of attention split like q, and so do a per-head mask [B,Hq,Sq,Skv] and the sinks
        # [Hq] after them; rope's positions, kv_len and a mask broadcast over heads are whole on
        # every device
        kv = [] if node.op == "rope" else list(node.operands[1:3])
        rest = node.operands[1:] if node.op == "rope" else node.operands[3:]
        sinks = {} if node.op == "rope" else {_sinks_at(node): 0}  # the sinks' axis 0: Hq
        per_head = [
            None if node.op == "rope" else sinks.get(i, aligned_axis(1, 4, self.types[o]))
            for i, o in enumerate(rest, start=3)
        ]
        rest_splits = [None if k is None else Split(k, (self.types[o].shape[k],))
                       for o, k in zip(rest, per_head)]  # fmt: skip
        few_kv = bool(kv) and self.types[kv[0]].shape[1] % self.ways != 0
        if few_kv and not all(o in self.has_replica for o in kv):
            return False
        wanted = [] if few_kv else [(o, Split(1, (self.types[o].shape[1],))) for o in kv]
        wanted += [(o, r) for o, r in zip(rest, rest_splits) if r is not None]
        if not all(self.can_piece(o, r) for o, r in wanted):
            return False
        operands: list[str | tuple[str, ...]] = [self.pieces[node.operands[0]][1]]
        if few_kv:
            operands += [self._kv_headslices(o) for o in kv]
        else:
            operands += [self.pieces_of(o, Split(1, (self.types[o].shape[1],))) for o in kv]
        operands += [
            self.replicated(o, node.span) if r is None else self.pieces_of(o, r)
            for o, r in zip(rest, rest_splits)
        ]
        self.emit_split(node, split, self.per_device(operands), None)
        return True

    def _kv_headslices(self, value: str) -> tuple[str, ...]:
        """Fewer KV heads than devices (ways a multiple of them): device i reads KV head
        i // (ways / kv_heads) of the replicated k or v, the one its query heads map to."""
        copies = self.ways // self.types[value].shape[1]
        return self.slices(value, 1, [(i // copies, i // copies + 1) for i in range(self.ways)])

    def _check_heads(self, node: Node) -> None:
        q_heads = self.types[node.operands[0]].shape[1]
        kv_heads = self.types[node.operands[1]].shape[1]
        if q_heads % self.ways or (kv_heads % self.ways and self.ways % kv_heads):
            raise VerifyError(
                f"tensor-parallel: attention %{node.name} has {q_heads} query heads and "
                f"{kv_heads} KV heads, which {self.ways} devices cannot share: ways must divide "
                "the query heads, and divide the KV heads or be a multiple of them, so that the "
                "query heads of each device read whole KV heads of their own",
                node.span,
            )


def _refuse_placed(graph: Graph) -> None:
    for node in graph.nodes:
        if node.ann.device is not None:
            raise VerifyError(
                f"tensor-parallel: the graph is already placed on devices (%{node.name} has "
                f"device = {list(node.ann.device)})",
                node.span,
            )
        if node.op == "fused":
            raise VerifyError(
                f"tensor-parallel: %{node.name} is fused: run tensor-parallel before fuse",
                node.span,
            )


def split_graph(graph: Graph, ways: int) -> tuple[Graph, PieceLayout]:
    """The graph over `ways` devices, the recipe of every weight and input piece it names and
    how its split outputs join."""
    _refuse_placed(graph)
    splitter = TensorSplitter(graph, ways)
    return splitter.run(), splitter.layout()


def piece_layout(graph_before: Graph, graph_after: Graph) -> PieceLayout:
    """The layout tensor-parallel gave `graph_after` (recomputed from `graph_before` and the
    device count); empty where `graph_after` names every input, weight and output of
    `graph_before` as they are (placed by hand, or whole by pipeline-parallel)."""
    before = graph_before.input_names() | graph_before.weight_names()
    after = graph_after.input_names() | graph_after.weight_names()
    renamed = not after <= before
    after_outputs = set(graph_after.output_names())
    renamed |= any(o not in after_outputs for o in graph_before.output_names())
    ways = graph_after.device_count()
    if not renamed or ways < 2:
        return PieceLayout({}, {})
    return split_graph(graph_before, ways)[1]


def shard_weights(
    graph_before: Graph,
    graph_after: Graph,
    weights: dict[str, np.ndarray],
    layout: PieceLayout | None = None,
) -> dict[str, np.ndarray]:
    """The arrays `graph_after` names, from the user's `weights` of `graph_before`: pieces cut by
    the recipe tensor-parallel used (`piece_layout`, recomputed unless given), other weights
    passed through. Cost: one copy of each piece."""
    missing = any(w.name not in weights for w in graph_after.weights)
    if layout is None:
        ways = graph_after.device_count()
        layout = split_graph(graph_before, ways)[1] if missing and ways > 1 else PieceLayout({}, {})
    return layout.cut(graph_after.weights, weights, "weight")


def shard_inputs(
    graph_before: Graph,
    graph_after: Graph,
    inputs: dict[str, np.ndarray],
    layout: PieceLayout | None = None,
) -> dict[str, np.ndarray]:
    """The inputs `graph_after` names, from the user's `inputs` of `graph_before`: each device's
    KV heads of a cache cut by head, other inputs passed through. Cost: one copy of each piece."""
    if layout is None:
        layout = piece_layout(graph_before, graph_after)
    return layout.cut(graph_after.inputs, inputs, "input")


def join_outputs(
    graph_before: Graph,
    graph_after: Graph,
    outputs: dict[str, np.ndarray],
    layout: PieceLayout | None = None,
) -> dict[str, np.ndarray]:
    """`graph_before`'s outputs by name from `graph_after`'s: a split output (a KV cache cut by
    head) joined from its pieces along its axis, the others as they are."""
    if layout is None:
        layout = piece_layout(graph_before, graph_after)
    return layout.join(graph_before.output_names(), outputs)


def _sinks_at(node: Node) -> int | None:
    """Where an attention node's sinks sit among its operands (None: absent)."""
    attrs = attrs_with_defaults(node)
    masked, sinks = bool(attrs["masked"]), bool(attrs["sinks"])
    return attention_operands(len(node.operands), masked, sinks).sinks


__all__ = [
    "PieceLayout",
    "ShardRecipe",
    "Split",
    "TensorParallelPass",
    "join_outputs",
    "piece_layout",
    "shard_inputs",
    "shard_weights",
    "split_graph",
]
