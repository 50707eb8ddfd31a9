"""`split-experts{cpu-experts=0, cpu-moe=0, budget=0, gpu-min-batch=32, overflow=error}`: put
some experts of each `moe` in host memory, to run on the CPU, expert by expert (llama.cpp's
`--n-cpu-moe N` and `-ot exps=CPU`).

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
  N >= E places the node's whole stacks `host` instead;
- `budget=SIZE` (e.g. `24GiB`, read like plan-prefetch's): chooses `cpu-moe=N` itself, the
  smallest N whose device bytes fit (see "Budget" below); not with the two options above
  (0, the default: no budget).

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

Budget: the device bytes of a step are counted as plan-prefetch counts them
(`segments.DeviceMemory.peak`): the weights GPU nodes read (every weight but the host stacks, each
aligned), every input, and the arena of the activations, each of the three rounded up as the
allocator does. The arena is measured, not bounded: the memory planner (`analysis.arena_plan.plan`, the
best of its orderings) is run on the graph as given, on one stream. Whole layers on the host change
no node, so that is the arena of the graph this pass returns; what later passes add is not known
here and not counted: more streams (less reuse), the copies split-backends writes around each CPU
moe (x and the router logits in, the result out). A moe of `gpu-min-batch` tokens or more
(split-backends' option, the same default) is never placed: split-backends would run it on the
GPU and copy its host stacks in, which frees no device byte (a prefill's experts are streamed by
plan-prefetch instead). `overflow=stream` (what `--vram-budget` sets): when no N fits, every
placeable layer goes to the host and plan-prefetch, after planning, streams the rest or fails.

The rule: whole layers, the first ones first (`cpu-moe=N` for the smallest N that fits, hence the
fewest host bytes among whole-layer placements), never some experts of every layer. That is the
knob llama.cpp users tune (`--n-cpu-moe`), it changes no node (the user's arrays are used as
they are, and the arena above is exact for the result), and only the N host layers wait for the
host (two host-device waits each) where cutting every layer makes every layer wait. The choice
is reported as a `CpuMoeChoice` warning (N, host bytes, device bytes); a budget that all
placeable experts on the host still exceed is an `ExpertBudgetError` at the first moe naming the
budget and the smallest device footprint (`overflow=error`). A graph with no moe is returned as
it is.

Does not handle (an error naming the node): a moe whose expert stacks are not weights, or are
read by any other node. Runs before the scheduling passes (it writes new nodes: streams,
backends, events, live ranges and plans would be stale). Complexity O(V + W) (one sweep over
the nodes and weights, W weights), plus the nodes and weights it writes; with `budget`, plus
one memory plan of the graph (plan-memory's complexity) and O(L) over its L moe layers.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.arena_plan import plan
from optgraph.analysis.segments import (
    BUFFER_ROUNDING,
    DeviceMemory,
    device_resident_weights,
    format_size,
    parse_size,
)
from optgraph.errors import OptGraphError, VerifyError
from optgraph.ir.graph import Graph, Node, TensorType, Weight
from optgraph.ir.op_rules_moe import EXPERTS_AT, expert_range
from optgraph.ir.ops import attrs_with_defaults
from optgraph.passes.base import Pass

_PIECE = re.compile(r"^(?P<stack>.+)\.e(?P<lo>\d+)_(?P<hi>\d+)$")


class ExpertBudgetError(OptGraphError):
    """Even with every moe's experts on the host, a step does not fit the budget."""


class CpuMoeChoice(UserWarning):
    """What `split-experts{budget}` chose: a note on the placement, not a fault."""


def is_piece(name: str) -> bool:
    """Whether `name` is a piece's name (`piece_name`'s form: `%gate.e6_8`)."""
    return _PIECE.match(name) is not None


def piece_name(stack: str, lo: int, hi: int) -> str:
    """The name of the piece of `stack` (or of a moe node's result) holding experts [lo, hi)."""
    return f"{stack}.e{lo}_{hi}"


@dataclass(frozen=True)
class SplitExpertsPass(Pass):
    name: ClassVar[str] = "split-experts"
    summary: ClassVar[str] = (
        "put the experts of the first moe layers (as many as a budget needs), or some of each, "
        "on the host"
    )
    invalidates: ClassVar[tuple[str, ...]] = (
        "streams-assigned",
        "backends-assigned",
        "synced",
        "lifetimes-analyzed",
        "memory-planned",
    )
    cpu_experts: int = 0
    cpu_moe: int = 0
    budget: str = "0"  # 0: no budget (the two counts above decide)
    gpu_min_batch: int = 32  # split-backends' option: a moe of as many tokens runs on the GPU
    overflow: str = "error"  # or "stream": no N fits: every placeable layer, plan-prefetch after

    def __post_init__(self) -> None:
        if self.cpu_experts < 0:
            raise ValueError(f"cpu-experts must be >= 0, got {self.cpu_experts}")
        if self.cpu_moe < 0:
            raise ValueError(f"cpu-moe must be >= 0, got {self.cpu_moe}")
        if self.gpu_min_batch < 0:
            raise ValueError(f"gpu-min-batch must be >= 0, got {self.gpu_min_batch}")
        if self.overflow not in ("error", "stream"):
            raise ValueError(f"overflow must be error or stream, got '{self.overflow}'")
        if parse_size(self.budget) > 0 and (self.cpu_experts or self.cpu_moe):
            raise ValueError(
                "budget chooses cpu-moe itself: give budget, or cpu-moe/cpu-experts, not both"
            )

    def run(self, graph: Graph) -> Graph:
        budget = parse_size(self.budget)
        if budget > 0:
            n = cpu_moe_for_budget(graph, budget, self.gpu_min_batch, self.overflow)
            return replace(self, budget="0", cpu_moe=n).run(graph)
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


def cpu_moe_for_budget(
    graph: Graph, budget: int, gpu_min_batch: int = 32, overflow: str = "error"
) -> int:
    """The smallest N such that, with every expert of the first N moe nodes on the host, a step
    needs at most `budget` device bytes (module docstring, "Budget"); 0 without a moe. Only
    moe nodes of fewer than `gpu_min_batch` tokens are placed (split-backends runs the others on
    the GPU, copying host stacks in: no byte saved). Warns `CpuMoeChoice` with the choice; when
    no N fits, raises `ExpertBudgetError` (`overflow="error"`) or places every placeable layer
    and leaves the rest to plan-prefetch (`overflow="stream"`)."""
    moes = [n for n in graph.nodes if n.op == "moe"]
    if not moes:
        return 0
    weights = {w.name: w for w in graph.weights}
    for node in moes:
        _check_stacks(node, node.operands[EXPERTS_AT:], weights, None)
    placeable = next(
        (i for i, n in enumerate(moes) if n.type is None or n.type.shape[0] >= gpu_min_batch),
        len(moes),
    )
    on_gpu = ""
    if placeable < len(moes):
        first = moes[placeable]
        tokens = first.type.shape[0] if first.type is not None else 0
        on_gpu = (
            f" (from moe '%{first.name}' on, {tokens} tokens: at gpu-min-batch="
            f"{gpu_min_batch} or more split-backends runs a moe on the GPU, its experts copied in)"
        )
    resident = device_resident_weights(graph)
    arena = plan(graph).arena_bytes
    inputs = sum(align_up(max(i.type.nbytes, 1)) for i in graph.inputs)
    kept = sum(align_up(weights[name].type.nbytes) for name in resident)
    moved: set[str] = set()
    host = 0
    for n in range(placeable + 1):
        if n > 0:
            for stack in moes[n - 1].operands[EXPERTS_AT:]:
                if stack in resident and stack not in moved:
                    moved.add(stack)
                    kept -= align_up(weights[stack].type.nbytes)
                    host += weights[stack].type.nbytes
        peak = DeviceMemory(arena, 0, kept, 0, inputs).peak
        if peak <= budget or (n == placeable and overflow == "stream"):
            why = on_gpu if n == placeable else ""
            _note(budget, (n, len(moes)), host, (peak, arena), peak <= budget, why)
            return n
    placed = f"all {len(moes)}" if placeable == len(moes) else f"{placeable} of {len(moes)}"
    raise ExpertBudgetError(
        f"split-experts: budget {format_size(budget)} is too small: with the experts of "
        f"{placed} moe layers on the host{on_gpu} the step still needs {peak:,} bytes "
        f"({format_size(peak)}) on the device: weights {kept:,}, arena {arena:,} (planned on one "
        f"stream) and inputs {inputs:,}, each rounded up to {BUFFER_ROUNDING} bytes",
        moes[0].span,
    )


def _note(
    budget: int, chosen: tuple[int, int], host: int, device: tuple[int, int], fits: bool, why: str
) -> None:
    """Warn `CpuMoeChoice` with the layers chosen (N of L), the device bytes (peak, arena)."""
    n, layers = chosen
    peak, arena = device
    placed = (
        f"the experts of the first {n} of {layers} moe layers on the host "
        f"(cpu-moe={n}: {format_size(host)})"
        if n
        else "every expert on the device (cpu-moe=0)"
    ) + why
    rest = "" if fits else "; over the budget: plan-prefetch streams the rest"
    warnings.warn(
        f"split-experts: budget {format_size(budget)}: {placed}; the step needs {peak:,} bytes "
        f"on the device (arena {arena:,} planned on one stream){rest}",
        CpuMoeChoice,
        stacklevel=3,
    )


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


__all__ = [
    "CpuMoeChoice",
    "ExpertBudgetError",
    "SplitExpertsPass",
    "cpu_moe_for_budget",
    "expert_weights",
    "is_piece",
    "piece_name",
]
