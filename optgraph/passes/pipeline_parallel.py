"""`pipeline-parallel{stages=N, memory-budget=BYTES}`: cut the issue order into N contiguous stages,
one device each, passing what is live across a cut with `send`/`recv`.

    before: %l0.out = add(%a, %b) : f32[1,64]         %l1.in = rms_norm(%l0.out, %w) : f32[1,64]
    after:  %l0.out = add(%a, %b) : f32[1,64] !{device = 0}
            %l0.out.to1 = send(%l0.out) {to = 1} : f32[1,64] !{device = 0}
            %l0.out.d1 = recv(%l0.out.to1) {from = 0} : f32[1,64] !{device = 1}
            %l1.in = rms_norm(%l0.out.d1, %w) : f32[1,64] !{device = 1}

Where to cut: by default the stages balance the cost model's estimated time
(`analysis/schedule_estimate.node_seconds`): cut k goes near k/N of the total, and among the
positions within a quarter of a stage's time of that point the one with the fewest bytes live
across it wins (in a decoder: between layers or between a layer's attention and MLP, where only
the residual stream crosses; the nearest to the target breaks ties). With `memory-budget=BYTES`
the stages are filled instead, in issue order, until the next node's weights would take the
stage's weight bytes over the budget; the cut is then the cheapest position (fewest bytes across)
in the last quarter of the stage's weight bytes; fewer stages (devices) when fewer hold the
weights. It is an error when N stages cannot hold them, or one node's weights exceed the budget
(the message names the node).

Every node runs on its stage's device; a value read by a later stage is sent once to each stage
that reads it, the send and recv issued where that stage starts. Inputs and weights are placed on
the devices whose nodes read them (replicated where several stages do, as a tied embedding is).
Outputs are read where they are produced.

Does not handle: graphs already placed on devices, and events or streams (run it before
assign-streams). The stages run one after another for one input: what overlaps is successive
inputs (steps), which is the runtime's to schedule. Reference results are bit-identical.

Complexity O(V + E): one sweep for the live bytes across each position, one for the cuts, one to
rewrite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from optgraph.analysis.schedule_estimate import DEFAULT_DEVICE, node_seconds, profile_named
from optgraph.analysis.segments import parse_size
from optgraph.errors import VerifyError
from optgraph.ir.graph import NO_ANNOTATIONS, Graph, Node
from optgraph.ir.names import fresh_name
from optgraph.passes.base import Pass

MAX_STAGES = 1024


@dataclass(frozen=True)
class PipelineParallelPass(Pass):
    name: ClassVar[str] = "pipeline-parallel"
    summary: ClassVar[str] = "cut the issue order into N stages on N devices, send/recv across cuts"
    invalidates: ClassVar[tuple[str, ...]] = (
        "streams-assigned",
        "backends-assigned",
        "synced",
        "lifetimes-analyzed",
        "memory-planned",
    )
    stages: int = 2
    memory_budget: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.stages <= MAX_STAGES:
            raise ValueError(f"stages must be 1 to {MAX_STAGES}, got {self.stages}")
        if self.memory_budget and parse_size(self.memory_budget) <= 0:
            raise ValueError(f"memory-budget must be positive, got {self.memory_budget}")

    def run(self, graph: Graph) -> Graph:
        _refuse_placed(graph)
        if self.stages == 1 or len(graph.nodes) < 2:
            return graph
        if self.memory_budget:
            cuts = budget_cuts(graph, self.stages, parse_size(self.memory_budget))
        else:
            cuts = balanced_cuts(graph, self.stages)
        return place_stages(graph, cuts)


def _refuse_placed(graph: Graph) -> None:
    for node in graph.nodes:
        if node.ann.device is not None:
            raise VerifyError(
                f"pipeline-parallel: the graph is already placed on devices (%{node.name} has "
                f"device = {list(node.ann.device)})",
                node.span,
            )
        if node.is_event:
            raise VerifyError(
                f"pipeline-parallel: ^{node.name} is an event: run pipeline-parallel before "
                "insert-sync",
                node.span,
            )


def bytes_across(graph: Graph) -> list[int]:
    """For each position p (a cut before node p), the bytes of node results defined before p and
    read at or after p; position 0 and len(nodes) have none."""
    delta = [0] * (len(graph.nodes) + 2)
    producers = graph.producers()
    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for operand in node.operands:
            if operand in producers:
                last_use[operand] = i
    for name, last in last_use.items():
        node = graph.nodes[producers[name]]
        assert node.type is not None
        delta[producers[name] + 1] += node.type.nbytes
        delta[last + 1] -= node.type.nbytes
    across, running = [], 0
    for p in range(len(graph.nodes) + 1):
        running += delta[p]
        across.append(running)
    return across


def _cheapest(candidates: Sequence[int], across: Sequence[int], closeness: dict[int, float]) -> int:
    return min(candidates, key=lambda p: (across[p], closeness[p]))


def balanced_cuts(graph: Graph, stages: int) -> list[int]:
    """Cut positions (node indices where stages 1..N-1 start) balancing the estimated time."""
    seconds = node_seconds(graph, profile_named(DEFAULT_DEVICE))
    prefix = [0.0]
    for s in seconds:
        prefix.append(prefix[-1] + s)
    total, count = prefix[-1], len(graph.nodes)
    if count < stages:
        raise VerifyError(f"pipeline-parallel: {count} nodes cannot fill {stages} stages")
    across = bytes_across(graph)
    slack = total / (4 * stages)
    cuts: list[int] = []
    for k in range(1, stages):
        target = total * k / stages
        low, high = (cuts[-1] if cuts else 0) + 1, count - (stages - k)
        positions = range(low, high + 1)
        closeness = {p: abs(prefix[p] - target) for p in positions}
        near = [p for p in positions if closeness[p] <= slack]
        if not near:
            near = [min(positions, key=lambda p: closeness[p])]
        cuts.append(_cheapest(near, across, closeness))
    return cuts


def _weight_reads(graph: Graph) -> list[dict[str, int]]:
    """Per node, the weights it reads, with their bytes."""
    sizes = {w.name: w.type.nbytes for w in graph.weights}
    return [{o: sizes[o] for o in n.operands if o in sizes} for n in graph.nodes]


def budget_cuts(graph: Graph, stages: int, budget: int) -> list[int]:
    """Cut positions filling each stage's weights up to `budget` bytes, in issue order."""
    reads = _weight_reads(graph)
    across = bytes_across(graph)
    cuts: list[int] = []
    start, held = 0, dict[str, int]()
    filled = [0]  # filled[j]: the weight bytes nodes start .. start+j-1 read
    for i, node in enumerate(graph.nodes):
        extra = sum(b for w, b in reads[i].items() if w not in held)
        if sum(reads[i].values()) > budget:
            raise VerifyError(
                f"pipeline-parallel: %{node.name} reads {sum(reads[i].values())} bytes of "
                f"weights, over the memory budget of {budget} bytes per device",
                node.span,
            )
        if filled[-1] + extra > budget:
            floor = filled[-1] * 3 / 4
            positions = [start + j for j in range(1, len(filled)) if filled[j] >= floor]
            cut = min(positions, key=lambda p: (across[p], -p))
            start, held, filled = cut, {}, [0]
            for j in range(cut, i):
                held.update(reads[j])
                filled.append(sum(held.values()))
            extra = sum(b for w, b in reads[i].items() if w not in held)
            if filled[-1] + extra > budget:  # the cheap cut leaves too much: cut right here
                cut, start, held, filled = i, i, {}, [0]
                extra = sum(reads[i].values())
            cuts.append(cut)
            if len(cuts) >= stages:
                raise VerifyError(
                    f"pipeline-parallel: the weights do not fit {stages} stages of {budget} bytes "
                    f"(stage {stages + 1} would start at %{graph.nodes[cut].name})",
                    graph.nodes[cut].span,
                )
        held.update(reads[i])
        filled.append(filled[-1] + extra)
    return cuts


def place_stages(graph: Graph, cuts: Sequence[int]) -> Graph:
    """Every node on the device of its stage (stage k starts at node cuts[k-1]), with a send and
    a recv where a stage reads a value of an earlier one."""
    stage_of: list[int] = []
    for i in range(len(graph.nodes)):
        stage_of.append(sum(1 for c in cuts if c <= i))
    producers = graph.producers()
    taken = set(graph.value_types())
    received: dict[tuple[str, int], str] = {}
    readers: dict[str, set[int]] = {}
    nodes: list[Node] = []
    for i, node in enumerate(graph.nodes):
        stage = stage_of[i]
        if i in cuts:  # the transfers this stage needs, where it starts
            nodes += _transfers(graph, stage_of, i, producers, received, taken)
        operands = []
        for operand in node.operands:
            readers.setdefault(operand, set()).add(stage)
            operands.append(received.get((operand, stage), operand))
        nodes.append(
            replace(node, operands=tuple(operands), ann=replace(node.ann, device=(stage,)))
        )
    inputs = tuple(replace(x, ann=replace(x.ann, device=_devices(readers, x.name)))
                   for x in graph.inputs)  # fmt: skip
    weights = tuple(replace(w, ann=replace(w.ann, device=_devices(readers, w.name)))
                    for w in graph.weights)  # fmt: skip
    return replace(graph, inputs=inputs, weights=weights, nodes=tuple(nodes))


def _devices(readers: dict[str, set[int]], name: str) -> tuple[int, ...] | None:
    stages = readers.get(name)
    return tuple(sorted(stages)) if stages else None


def _transfers(
    graph: Graph,
    stage_of: Sequence[int],
    start: int,
    producers: dict[str, int],
    received: dict[tuple[str, int], str],
    taken: set[str],
) -> list[Node]:
    """send/recv pairs for the values of earlier stages that the stage starting at `start` reads,
    in the order the values were defined."""
    stage = stage_of[start]
    wanted: dict[str, int] = {}
    for i in range(start, len(graph.nodes)):
        if stage_of[i] != stage:
            break
        for operand in graph.nodes[i].operands:
            p = producers.get(operand)
            if p is not None and stage_of[p] != stage:
                wanted[operand] = p
    out: list[Node] = []
    for value, p in sorted(wanted.items(), key=lambda item: item[1]):
        source = graph.nodes[p]
        send = fresh_name(f"{value}.to{stage}", taken)
        recv = fresh_name(f"{value}.d{stage}", taken)
        out.append(Node(send, "send", (value,), {"to": stage}, source.type, span=source.span,
                        ann=replace(NO_ANNOTATIONS, device=(stage_of[p],))))  # fmt: skip
        out.append(Node(recv, "recv", (send,), {"from": stage_of[p]}, source.type,
                        span=source.span, ann=replace(NO_ANNOTATIONS, device=(stage,))))  # fmt: skip
        received[(value, stage)] = recv
    return out
