"""`assign-streams`: put every node on a CUDA stream, and issue concurrent work early.

    before: %a = exp(%x) : f32[4]      %b = tanh(%x) : f32[4]      %y = add(%a, %b) : f32[4]
    after:  %a = exp(%x) : f32[4] !{stream = 0}   %b = tanh(%x) : f32[4] !{stream = 1}
            %y = add(%a, %b) : f32[4] !{stream = 0}        (insert-sync then adds the events)

Policies (`max-streams=N` caps the number of streams; stream 0 is the one the graph ends on):

- `chains` (default): Nimble's maximum logical concurrency, then a cost-aware merge. The data DAG
  plus a virtual end node (which joins every stream) is transitively reduced; a maximum matching of
  the reduced edges links nodes into a minimum path cover (`chain_cover`), so any two independent
  nodes lie on different chains. Then the fork cost model (`fork_cost`: kernel times on the
  `device` roofline with its measured launch figures, merged launches, waits; the constants are
  options `kernel-us`, `wait-us`, `spacing-us`, `merged-launches`) keeps on a shared stream every
  branch whose fork does not pay: chains that do not pay alone and feed one another are joined
  into one branch, and a branch that still does not pay stays on its producer's stream (or, reading
  only graph inputs, on the stream it joins). `min-branch-us=T` (T >= 0) replaces the model by the
  earlier plain threshold (T = 0: every chain may fork). Then a
  list schedule in ASAP order places each group of chains, when its first node is reached, on a
  free stream where it starts earliest (ties: its producer's stream, then the stream that became
  free last); when all N streams hold unfinished groups, it shares the stream whose remaining work
  overlaps it least. Streams only ever hold whole chains, so the cross-stream edges are a subset of
  the cross-chain reduced edges: insert-sync's waits never exceed Nimble's count.
- `fanout`: the ggml pattern for any width, every branch forked (no cost model): a node's first
  single-input consumer continues on its stream, every further consumer (and every root after the
  first, the graph start being a fork) opens a new stream while fewer than N are busy; a join runs
  on the lowest stream among its inputs. A stream is freed once every edge leaving it has been
  consumed. Why the drawing can need a wait more than Nimble's count (5 of 2,000 layered random
  graphs in outside testing): its continuations are not a maximum matching of the reduced DAG. A
  join continues the lowest stream among its inputs even where that stream's input reaches it
  only along a redundant edge (another input descends from it) or has already been continued, so
  the chain of the input it really extends ends there; and the first consumer always takes the
  continuation, greedily. Where that happens (its waits, counted as insert-sync would by
  `stream_waits`, exceed Nimble's count), every chain of a minimum path cover whose matching starts
  from ggml's continuations goes on the stream ggml drew for its first node instead: streams then
  hold whole chains and the waits never exceed Nimble's count. Elsewhere the drawing is kept, by
  design: under the stream cap a branch with no free stream stays on its producer's stream, and
  such a drawing often needs fewer waits than whole chains placed on ggml's streams would.
- `single`: everything on stream 0, issue order unchanged.

Issue order: for `chains` and `fanout` the nodes are reissued by their start in the estimated
schedule (ties by ASAP order, then input order), which interleaves branches so concurrent work is
launched early; this is always a topological order. Nodes of weights alone (a weight's view or
cast) are issued just before their first reader (`late_weight_nodes`), not at the head. A result on one stream keeps the given
order (the same program as `max-streams=1`, and the order whose merged launches the cost
model assumed). Existing `record`/`wait` nodes are dropped (they belong to a previous
assignment); other annotations are kept, so its contract refuses a graph carrying live ranges,
arena offsets or a backend split, which new streams would make wrong.

Does not handle: splitting one op across streams, memory pressure of concurrent branches (the
memory planner sees the assignment and pays for it), measured rather than estimated costs.

Complexity: O((V + E)·C) for the chain labels (C = greedy chains, near the width), O(E·√V) for the
matching, O(V + E) for the fork cost model, O(V·N) for the merge, O(V log V) for the reordering;
`fanout` takes the labels and the matching (for Nimble's count) but no cost model or merge, and
adds O(V·N + E) for ggml's drawing, O((V + E)·N) for counting its waits (`stream_waits`), and
where they exceed Nimble's count a second cover and O(V + E) for placing its chains.
No V×V structure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from optgraph.analysis.chain_cover import PathCover, path_cover
from optgraph.analysis.fork_cost import (
    ForkModel,
    Groups,
    kernel_times,
    prune_by_cost,
    prune_by_threshold,
)
from optgraph.analysis.schedule_estimate import (
    asap,
    data_predecessors,
    kept_data_predecessors,
    list_schedule,
    node_seconds,
    profile_named,
)
from optgraph.analysis.stream_waits import waits_needed
from optgraph.ir.graph import EVENT_OPS, Annotations, Graph, Node
from optgraph.ir.limits import MAX_STREAM_ID
from optgraph.passes.base import Pass

POLICIES = ("chains", "fanout", "single")


def _consumers(preds: Sequence[Sequence[int]]) -> list[list[int]]:
    succs: list[list[int]] = [[] for _ in preds]
    for v, ps in enumerate(preds):
        for p in ps:
            succs[p].append(v)
    return succs


def end_predecessors(preds: Sequence[Sequence[int]], outputs: Sequence[int]) -> list[int]:
    """The virtual end node's inputs: every node nobody consumes, and every output."""
    consumed = [False] * len(preds)
    for ps in preds:
        for p in ps:
            consumed[p] = True
    return sorted({v for v in range(len(preds)) if not consumed[v]} | set(outputs))


def nimble_syncs(graph: Graph) -> int:
    """Nimble's synchronization count, |reduced edges| - |matching|, of the graph plus its end.

    The end (which joins every stream) is counted as a node, since Nimble must join too; this is
    the figure insert-sync's waits are compared with.
    """
    nodes = [n for n in graph.nodes if not n.is_event]
    plain = graph.with_nodes(nodes)
    preds = data_predecessors(plain)
    index = {n.name: i for i, n in enumerate(nodes)}
    outputs = [index[o] for o in graph.output_names() if o in index]
    return path_cover(preds + [end_predecessors(preds, outputs)]).nimble_syncs


Prune = Callable[[PathCover, Sequence[float], Groups], None]


def chain_streams(
    preds: Sequence[Sequence[int]],
    seconds: Sequence[float],
    outputs: Sequence[int],
    max_streams: int,
    prune: Prune | None = None,
    latency: float = 0.0,
    early: Sequence[float] | None = None,
) -> tuple[list[int], list[float]]:
    """Streams (0 = the end's stream) and estimated starts for nodes in ASAP order. `prune`
    (cover, ASAP finishes, groups) merges the chains that should not fork into other groups.
    `early`: the nodes' ASAP starts (`asap(preds, seconds)`), where the caller has them."""
    n = len(preds)
    succs = _consumers(preds)
    if early is None:
        early = asap(preds, seconds)
    finish_asap = [s + d for s, d in zip(early, seconds)]
    bottom = [0.0] * (n + 1)  # longest estimated path from each node to the end
    for v in range(n - 1, -1, -1):
        ws = succs[v]
        if not ws:
            bottom[v] = seconds[v] + 0.0
        elif len(ws) == 1:
            bottom[v] = seconds[v] + bottom[ws[0]]
        else:
            bottom[v] = seconds[v] + max([bottom[w] for w in ws])
    cover = path_cover(list(preds) + [end_predecessors(preds, outputs)], bottom)
    chain_of = cover.chain_of
    end_chain = chain_of[n]
    groups = Groups(len(cover.chains))
    if prune is not None:
        prune(cover, finish_asap, groups)

    # Each node's group (groups no longer change) and each group's nodes and work.
    group_of_chain = [groups.find(c) for c in range(len(cover.chains))]
    group_of = [group_of_chain[chain_of[v]] for v in range(n)]
    remaining = [0] * len(cover.chains)
    work = [0.0] * len(cover.chains)
    for v in range(n):
        g = group_of[v]
        remaining[g] += 1
        work[g] += seconds[v]
    stream_of_group = [-1] * len(cover.chains)
    open_groups = [0] * max_streams
    free_at = [0.0] * max_streams
    left = [0.0] * max_streams  # unscheduled work of the groups on each stream
    streams = [0] * n
    start = [0.0] * n
    finish = [0.0] * n

    def ready_on(v: int, t: int) -> float:
        """When node v's inputs are visible on stream t (a cross-stream wait adds latency)."""
        ready = 0.0
        for p in preds[v]:
            at = finish[p] + (latency if streams[p] != t else 0.0)
            ready = max(ready, at)
        return ready

    for v in range(n):
        g = group_of[v]
        s = stream_of_group[g]
        if s < 0:
            producer = max(preds[v], key=lambda p: (finish[p], p), default=None)
            near = -1 if producer is None else streams[producer]
            free = [t for t in range(max_streams) if open_groups[t] == 0]
            if free:
                s = min(
                    free,
                    key=lambda t: (max(ready_on(v, t), free_at[t]), t != near, -free_at[t], t),
                )
            else:
                s = min(
                    range(max_streams),
                    key=lambda t: (min(left[t], work[g]), t != near, left[t], t),
                )
            stream_of_group[g] = s
            open_groups[s] += 1
            left[s] += work[g]
        streams[v] = s
        ready = ready_on(v, s)
        at = free_at[s]
        start[v] = max(at, ready)
        finish[v] = free_at[s] = start[v] + seconds[v]
        left[s] -= seconds[v]
        remaining[g] -= 1
        if remaining[g] == 0:
            open_groups[s] -= 1

    end_stream = streams[cover.chains[end_chain][-2]] if len(cover.chains[end_chain]) > 1 else 0
    if n and len(cover.chains[end_chain]) == 1:
        end_stream = streams[max(range(n), key=lambda v: (finish[v], v))]
    return _renumbered(streams, end_stream), start


def _renumbered(streams: list[int], first: int) -> list[int]:
    """Stream `first` becomes 0, the others 1, 2, ... in order of first use."""
    names = {first: 0}
    for s in streams:
        if s not in names:
            names[s] = len(names)
    return [names[s] for s in streams]


def ggml_streams(preds: Sequence[Sequence[int]], max_streams: int) -> list[int]:
    """The ggml fork/join pattern as first drawn: a node's first single-input consumer
    continues on its stream, every further consumer (and every root after the first) opens a
    new stream while fewer than N are busy, a join runs on the lowest stream among its inputs,
    a stream is freed once every edge leaving it has been consumed. O(V·N + E) (a fork looks
    for a free stream among N). `fanout_streams`
    keeps it unless it needs more waits than Nimble's count."""
    n = len(preds)
    succs = _consumers(preds)
    streams = [0] * n
    busy = {0}
    pending = [0] * max_streams  # edges out of each stream not yet consumed
    continued = [False] * n
    start_continued = False

    def fork(parent: int) -> int:
        for t in range(max_streams):
            if t not in busy:
                busy.add(t)
                return t
        return parent

    for v in range(n):
        ps = preds[v]
        if not ps:
            s = 0 if not start_continued else fork(0)
            start_continued = True
        elif len(ps) == 1:
            p = ps[0]
            s = streams[p] if not continued[p] else fork(streams[p])
            continued[p] = True
        else:
            s = min(streams[p] for p in ps)
        streams[v] = s
        busy.add(s)
        for p in ps:
            pending[streams[p]] -= 1
        pending[s] += len(succs[v])
        for t in {s, *(streams[p] for p in ps)}:
            if t != 0 and pending[t] == 0:
                busy.discard(t)
    return streams


def fanout_streams(
    preds: Sequence[Sequence[int]], outputs: Sequence[int], max_streams: int
) -> list[int]:
    """The `fanout` policy (see the module docstring): ggml's drawing (`ggml_streams`) when
    it needs no more waits than Nimble's count (`stream_waits.waits_needed`: insert-sync's
    count), else every chain of a minimum path cover that prefers ggml's continuations on the
    stream ggml drew for the chain's first node (the end's chain's stream becomes 0): streams
    then hold whole chains, which bounds the waits by Nimble's count as for `chains`.
    O((V + E)·k) for the drawing and its count (k streams), O((V + E)·C + E·√V) for a cover
    (Nimble's count; the preferring one only where the drawing needs more)."""
    n = len(preds)
    ends = end_predecessors(preds, outputs)
    cover = path_cover([*preds, ends])
    drawn = _renumbered(ggml_streams(preds, max_streams), 0)
    if waits_needed(preds, drawn) <= cover.nimble_syncs:
        return drawn
    prefer = [-1] * (n + 1)
    for v, ps in enumerate([*preds, ends]):  # v continues its earliest input on its stream
        on = drawn[v] if v < n else 0  # the end joins every stream into stream 0
        same = sorted(p for p in ps if drawn[p] == on and prefer[p] < 0)
        if same:
            prefer[same[-1] if v == n else same[0]] = v  # the end: stream 0's last node
    cover = path_cover([*preds, ends], prefer=prefer)
    streams = [drawn[cover.chains[cover.chain_of[v]][0]] for v in range(n)]
    end_chain = cover.chains[cover.chain_of[n]]
    return _renumbered(streams, drawn[end_chain[0]] if end_chain[0] < n else 0)


def late_weight_nodes(
    nodes: Sequence[Node],
    preds: Sequence[Sequence[int]],
    start: Sequence[float],
    weights: AbstractSet[str],
) -> list[float]:
    """Issue times: `start`, but a node computed from weights alone (a view or cast of a weight,
    which the schedule starts at time 0) at the time of its earliest reader, so it is issued
    just before that reader instead of at the head of the program.

        before: %g = reshape(%norm_w)  (issued first) ... 900 nodes ...  %y = mul(%n, %g)
        after:  ... 900 nodes ...  %g = reshape(%norm_w)  %y = mul(%n, %g)

    At the head, a weight's view made the weight look read from the first node to its real
    reader (weight streaming then chained every weight in between into one segment), and a
    weight's cast held its result in the arena all that time. `nodes` in ASAP order, `preds` by
    index; ties keep that order, so such a node still precedes its readers. O(V + E)."""
    issue = list(start)
    made_of_weights = set(weights)  # weights, then the nodes made from them alone
    moved = []
    for v, node in enumerate(nodes):  # ASAP order: a node's operands come before it
        if node.operands and made_of_weights.issuperset(node.operands):
            made_of_weights.add(node.name)
            moved.append(v)
    if not moved:
        return issue
    readers: list[list[int]] = [[] for _ in nodes]
    for v, ps in enumerate(preds):
        for p in ps:
            readers[p].append(v)
    for v in reversed(moved):  # readers first: a chain of them moves together
        if readers[v]:
            issue[v] = min(issue[u] for u in readers[v])
    return issue


@dataclass(frozen=True)
class AssignStreamsPass(Pass):
    name = "assign-streams"
    summary = "put every node on a CUDA stream (chains: Nimble path cover, fork cost model)"
    provides = ("streams-assigned",)
    invalidates = ("backends-assigned", "lifetimes-analyzed", "memory-planned")

    max_streams: int = 4
    policy: str = "chains"
    min_branch_us: float = -1.0  # >= 0: the plain threshold instead of the fork cost model
    device: str = "h100"
    wait_us: float = -1.0  # < 0: the device profile's figure (also kernel-us, spacing-us)
    kernel_us: float = -1.0
    spacing_us: float = -1.0
    merged_launches: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.max_streams <= MAX_STREAM_ID + 1:
            raise ValueError(
                f"max-streams must be between 1 and {MAX_STREAM_ID + 1} (stream ids end at "
                f"{MAX_STREAM_ID}), got {self.max_streams}"
            )
        if self.policy not in POLICIES:
            raise ValueError(
                f"unknown policy '{self.policy}' (choose one of {', '.join(POLICIES)})"
            )
        profile_named(self.device)  # raises ValueError naming the known devices

    def fork_model(self) -> ForkModel:
        """The cost model's constants: the device profile's, or the options given (>= 0)."""
        return ForkModel.for_profile(
            profile_named(self.device),
            self.kernel_us,
            self.wait_us,
            self.spacing_us,
            self.merged_launches,
        )

    def run(self, graph: Graph) -> Graph:
        nodes = [n for n in graph.nodes if n.op not in EVENT_OPS]
        # Without events, the graph itself: the costs and predecessors computed for it below go
        # with it to the result (see `verify`) when one stream is kept.
        plain = graph.with_nodes(nodes) if len(nodes) < len(graph.nodes) else graph
        if self.policy == "single" or self.max_streams == 1 or not nodes:
            return plain.with_nodes(_on_streams(nodes, [0] * len(nodes)))
        profile = profile_named(self.device)
        threshold = self.min_branch_us >= 0
        model = self.fork_model()
        times = kernel_times(plain, profile, model)
        if threshold:  # the earlier estimate: one launch overhead plus the roofline
            seconds, latency = node_seconds(plain, profile), profile.launch_overhead
        else:
            seconds, latency = times.seconds, model.wait_s
        kept = kept_data_predecessors(plain)  # read only: reordered into new lists below
        early = asap(kept, seconds)
        order = sorted(range(len(nodes)), key=early.__getitem__)  # stable: ties by index
        position = [0] * len(order)
        for new, old in enumerate(order):
            position[old] = new
        nodes = [nodes[i] for i in order]
        seconds = [seconds[i] for i in order]
        early = [early[i] for i in order]
        preds = [[position[p] for p in kept[i]] for i in order]
        outputs = _output_positions(nodes, graph.output_names())
        if self.policy == "fanout":
            streams = fanout_streams(preds, outputs, self.max_streams)
            start = list_schedule(preds, seconds, streams, latency)
        else:
            prune: Prune
            if threshold:
                min_branch_s = self.min_branch_us * 1e-6

                def prune(cover: PathCover, finish: Sequence[float], groups: Groups) -> None:
                    prune_by_threshold(cover, preds, seconds, finish, groups, min_branch_s)
            else:
                ordered = times.reordered(order)

                def prune(cover: PathCover, finish: Sequence[float], groups: Groups) -> None:
                    prune_by_cost(cover, preds, ordered, groups, model)

            streams, start = chain_streams(
                preds, seconds, outputs, self.max_streams, prune, latency, early
            )
        if not any(streams):  # one stream: keep the given order (and its merged launches)
            return plain.with_nodes(_on_streams(plain.nodes, [0] * len(plain.nodes)))
        issue = late_weight_nodes(nodes, preds, start, graph.weight_names())
        final = sorted(range(len(nodes)), key=issue.__getitem__)  # stable: ties by ASAP order
        return replace(
            graph, nodes=tuple(_on_streams([nodes[i] for i in final], [streams[i] for i in final]))
        )


def _output_positions(nodes: Sequence[Node], outputs: Sequence[str]) -> list[int]:
    """The positions in `nodes` of the nodes defining `outputs` (graph inputs and weights
    left out), in the order of `outputs`."""
    wanted = set(outputs)
    index = {n.name: i for i, n in enumerate(nodes) if n.name in wanted}
    return [index[o] for o in outputs if o in index]


def _on_streams(nodes: Sequence[Node], streams: Sequence[int]) -> list[Node]:
    """`[node.with_ann(stream=s) ...]`, one `Annotations` object per distinct (annotations,
    stream) pair: most nodes of a graph share their annotations before and after."""
    made: dict[tuple[int, int], Annotations] = {}
    out = []
    for node, s in zip(nodes, streams):
        key = (id(node.ann), s)  # the annotations are alive in `nodes` throughout
        ann = made.get(key)
        if ann is None:
            ann = made[key] = node.with_ann(stream=s).ann
        out.append(node.with_annotations(ann))
    return out
