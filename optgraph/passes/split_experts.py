"""`split-experts{cpu-experts=0, cpu-moe=0}`: put some experts of each `moe` in host memory, to
run on the CPU, expert by expert (llama.cpp's `--n-cpu-moe N` and `-ot exps=CPU`).

    before: weight %gate : q4_k[8,64,256]   (and %up, %down)
            %y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[1,256]
    after:  (cpu-experts=2)
            weight %gate.e0_6 : q4_k[6,64,256]         weight %gate.e6_8 : q4_k[2,64,256] host
            %y.e0_6 = moe(%x, %logits, %gate.e0_6, %up.e0_6, %down.e0_6) {experts = [0, 6], k = 2}
            %y.e6_8 = moe(%x, %logits, %gate.e6_8, %up.e6_8, %down.e6_8) {experts = [6, 8], k = 2}
            %y = add(%y.e0_6, %y.e6_8) : f32[1,256]

- `cpu-moe=N`: every expert of the first N moe nodes (in issue order) goes to the host: their
  stacks are placed `host` as they are (the user's arrays unchanged), no node is rewritten;
- `cpu-experts=N`: of every other moe node, the last N experts go to the host: the node becomes
  a part over its first E - N experts (device stacks), then a part over the last N (`host`
  stacks; docs/ir.md, "moe": `experts = [lo, hi]`), then their sum under the node's name.
  N >= E places the node's whole stacks `host` instead.

The part over the device experts is issued first, so that with `split-backends` (which places a
moe reading host stacks on the CPU) the GPU part overlaps the CPU part: x and the router logits
are copied to the host once, the CPU part's result is copied back once, and the `add` on the
GPU waits for that copy alone.

The user keeps supplying the model's arrays: a piece is named after its stack and its experts
(`%gate.e6_8`: experts 6 and 7 of `%gate`; gpt-oss's expert biases, a row an expert, are cut
with their stacks) and `expert_weights(graph_before, graph_after,
weights)` cuts the pieces from the user's whole arrays when they are bound (views of rows along
the experts axis: whole blocks, whatever the dtype); `og.compile(...).run` and `optgraph run` do
it for the user.

Numerics: the sum of the two parts equals the whole node bit for bit when k <= 2, within f32
rounding of the reordered sum otherwise; an f16/bf16 node rounds each part to its dtype first.

Does not handle (an error naming the node): a moe whose expert stacks are not weights, or are
read by any other node. Runs before the scheduling passes (it writes new nodes: streams,
backends, events, live ranges and plans would be stale). Complexity O(V + W) (one sweep over
the nodes and weights, W weights), plus the nodes and weights it writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from optgraph.errors import VerifyError
from optgraph.ir.graph import Graph, Node, TensorType, Weight
from optgraph.ir.op_rules_moe import EXPERTS_AT, expert_range
from optgraph.ir.ops import attrs_with_defaults
from optgraph.passes.base import Pass

_PIECE = re.compile(r"^(?P<stack>.+)\.e(?P<lo>\d+)_(?P<hi>\d+)$")


def piece_name(stack: str, lo: int, hi: int) -> str:
    """The name of the piece of `stack` (or of a moe node's result) holding experts [lo, hi)."""
    return f"{stack}.e{lo}_{hi}"


@dataclass(frozen=True)
class SplitExpertsPass(Pass):
    name: ClassVar[str] = "split-experts"
    summary: ClassVar[str] = "put the experts of the first moe layers, or some of each, on the host"
    invalidates: ClassVar[tuple[str, ...]] = (
        "streams-assigned",
        "backends-assigned",
        "synced",
        "lifetimes-analyzed",
        "memory-planned",
    )
    cpu_experts: int = 0
    cpu_moe: int = 0

    def __post_init__(self) -> None:
        if self.cpu_experts < 0:
            raise ValueError(f"cpu-experts must be >= 0, got {self.cpu_experts}")
        if self.cpu_moe < 0:
            raise ValueError(f"cpu-moe must be >= 0, got {self.cpu_moe}")

    def run(self, graph: Graph) -> Graph:
        if self.cpu_experts == 0 and self.cpu_moe == 0:
            return graph
        readers = _stack_readers(graph)
        weights = {w.name: w for w in graph.weights}
        types = graph.value_types()
        on_host: set[str] = set()
        pieces: dict[str, list[Weight]] = {}  # a cut stack -> its pieces
        nodes: list[Node] = []
        seen = 0
        for node in graph.nodes:
            if node.op != "moe":
                nodes.append(node)
                continue
            stacks = node.operands[EXPERTS_AT:]
            lo, hi = expert_range(attrs_with_defaults(node), types[node.operands[1]].shape[1])
            seen += 1
            whole = seen <= self.cpu_moe or self.cpu_experts >= hi - lo
            if not whole and self.cpu_experts == 0:
                nodes.append(node)
                continue
            _check_stacks(node, stacks, weights, readers if not whole else None)
            if whole:
                on_host.update(stacks)
                nodes.append(node)
                continue
            cut = hi - self.cpu_experts
            gpu, cpu = (lo, cut), (cut, hi)
            for stack in stacks:
                pieces[stack] = [_piece(weights[stack], lo, part) for part in (gpu, cpu)]
            nodes.extend(_parts(node, (gpu, cpu)))
        taken = (
            graph.weight_names() | {n.name for n in graph.nodes} | {i.name for i in graph.inputs}
        )
        out: list[Weight] = []
        for w in graph.weights:
            if w.name in pieces:
                for piece in pieces[w.name]:
                    if piece.name in taken:
                        raise VerifyError(
                            f"split-experts: the piece '%{piece.name}' of weight '%{w.name}' "
                            "has the name of another value",
                            w.span,
                        )
                    out.append(piece)
            elif w.name in on_host:
                out.append(replace(w, placement="host"))
            else:
                out.append(w)
        return replace(graph, weights=tuple(out), nodes=tuple(nodes))


def _stack_readers(graph: Graph) -> dict[str, int]:
    """How many node operands read each weight."""
    count: dict[str, int] = {}
    for node in graph.nodes:
        for o in node.operands:
            count[o] = count.get(o, 0) + 1
    return count


def _check_stacks(
    node: Node,
    stacks: tuple[str, ...],
    weights: Mapping[str, Weight],
    readers: Mapping[str, int] | None,
) -> None:
    """Stacks are weights (to be placed or cut); cut ones (`readers` given) read once."""
    for stack in stacks:
        if stack not in weights:
            raise VerifyError(
                f"split-experts: moe '%{node.name}' reads its expert stack '%{stack}' from a "
                "node or an input; only weights can be cut by expert",
                node.span,
            )
        if readers is not None and readers[stack] != 1:
            raise VerifyError(
                f"split-experts: the expert stack '%{stack}' of moe '%{node.name}' is read "
                f"{readers[stack]} times; it can be cut for one moe only",
                node.span,
            )


def _piece(stack: Weight, first: int, part: tuple[int, int]) -> Weight:
    """The piece of `stack` (holding experts from `first` on) with the experts of `part`, on the
    device for the first part, on the host for the second."""
    lo, hi = part
    shape = (hi - lo, *stack.type.shape[1:])
    placement = "device" if lo == first else "host"
    return Weight(
        piece_name(stack.name, lo, hi),
        TensorType(stack.type.dtype, shape),
        placement,
        stack.ann,
        span=stack.span,
    )


def _parts(node: Node, parts: tuple[tuple[int, int], tuple[int, int]]) -> list[Node]:
    """The two parts of moe `node` and their sum under its name (each inheriting its span)."""
    assert node.type is not None
    written = []
    for lo, hi in parts:
        stacks = tuple(piece_name(s, lo, hi) for s in node.operands[EXPERTS_AT:])
        written.append(
            replace(
                node,
                name=piece_name(node.name, lo, hi),
                operands=node.operands[:EXPERTS_AT] + stacks,
                attrs={**node.attrs, "experts": (lo, hi)},
            )
        )
    total = Node(
        node.name, "add", (written[0].name, written[1].name), {}, node.type, span=node.span
    )
    return [*written, total]


def expert_weights(
    graph_before: Graph, graph_after: Graph, weights: Mapping[str, Any]
) -> dict[str, Any]:
    """`weights` (the user's arrays of `graph_before`), with every piece `graph_after` names and
    `weights` lacks cut from its stack: `%gate.e6_8` is experts 6..7 of `%gate` (rows counted
    from the experts `%gate`'s moe holds in `graph_before`). A view of the rows, no copy."""
    firsts: dict[str, int] = {}
    types = graph_before.value_types()
    for node in graph_before.nodes:
        if node.op == "moe":
            lo, _ = expert_range(attrs_with_defaults(node), types[node.operands[1]].shape[1])
            firsts.update(dict.fromkeys(node.operands[EXPERTS_AT:], lo))
    out = dict(weights)
    for w in graph_after.weights:
        match = _PIECE.match(w.name)
        if w.name in out or match is None:
            continue
        stack, lo, hi = match["stack"], int(match["lo"]), int(match["hi"])
        if stack in firsts and stack in weights:
            first = firsts[stack]
            out[w.name] = weights[stack][lo - first : hi - first]
    return out


__all__ = ["SplitExpertsPass", "expert_weights", "piece_name"]
