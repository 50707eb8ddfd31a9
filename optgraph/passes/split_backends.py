"""`split-backends{gpu-min-batch=32, cpu-ops=}`: place every op on `cpu` or `cuda`, form splits,
and insert one copy per value per destination backend, with the events that order it.

Placement, in order:
1. ops the GPU path does not support (`cpu-ops`, `+`-separated, e.g. `conv2d+max_pool2d`, plus
   `GPU_UNSUPPORTED_OPS`) run on the CPU;
2. an op reading a weight placed on the `host` runs on the CPU unless it applies the weight to at
   least `gpu-min-batch` rows (the rows of a matmul, result elements / weight elements otherwise):
   then it runs on the GPU and the weight is copied in (ggml's batch >= 32 rule, as an option);
   a `get_rows` of a host table always gathers on the CPU;
3. views follow their operand; the rest starts on the GPU, then cheap ops (not matmul, attention,
   conv2d) move to the CPU while that lowers the bytes copied between backends (a hill climb, as
   ggml's expansion sweeps).
A split is a maximal run of consecutive ops on one backend.

Copies and ordering. Inputs and device weights are on both backends (the runtime stages them).
- cuda -> cpu: `%v.cpu = copy(%v) {to = "cpu"}` on the producer's stream right after it, then
  `record ^d2hN` there; the host stream waits on it before the first CPU reader. Only where a CPU
  split consumes a GPU result does the host wait for the GPU.
- cpu -> cuda: `record ^hostN` on the host stream after the producer, `wait ^hostN` on the copy
  stream, the asynchronous copy from pinned memory there, `record ^h2dN`; each GPU stream reading
  it waits on `^h2dN` before its first reader. Host weights copied in need no host event.
The host is stream H = 1 + the largest stream in the graph (its nodes and events carry
`backend = "cpu"`), the copy stream is H + 1: happens-before covers every ordering.

    before: weight %emb : f32[1000,64] host    %h = get_rows(%emb, %t)    %y = matmul(%h, %w)
    after:  %h = get_rows(..) !{stream = 1, backend = "cpu"}   record ^host0 !{stream = 1, ..}
            wait ^host0 !{stream = 2}   %h.cuda = copy(%h) {to = "cuda"} !{stream = 2, ..}
            record ^h2d0 !{stream = 2}   wait ^h2d0 !{stream = 0}   %y = matmul(%h.cuda, %w) ..

Copy nodes carry `backend = "cuda"` (a CUDA stream issues them); their result lives on `to`.
Every node leaves with a stream (unassigned ones are on stream 0, now explicitly).
Runs after assign-streams (which refuses a split graph: it would move CPU nodes off the host
stream) and before insert-sync (cross-stream GPU edges are insert-sync's); its contract refuses a
graph with events, live ranges or arena offsets, which moving nodes to the host would break. Does
not handle: several GPUs, reordering to merge splits, moving expensive ops for memory.
Complexity: O(V + E) placement sweeps (the hill climb is bounded by V moves), O(V + E) rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from optgraph.errors import did_you_mean
from optgraph.ir.graph import Annotations, Graph, Node, TensorType
from optgraph.ir.layout import VIEW_OPS, alias_roots
from optgraph.ir.ops import attrs_with_defaults, get_op, op_names
from optgraph.passes.base import Pass

# Ops the CUDA path cannot run; filled from the codegen's table when it declares one.
GPU_UNSUPPORTED_OPS: frozenset[str] = frozenset()
HEAVY_OPS = frozenset({"matmul", "attention", "conv2d"})  # never moved to the CPU to save copies


def host_stream(graph: Graph) -> int:
    """The host stream of a split graph: the stream of its CPU nodes (else 1 + the largest)."""
    for node in graph.nodes:
        if node.ann.backend == "cpu":
            return node.stream
    return max((n.stream for n in graph.nodes), default=0) + 1


def weight_batch(node: Node, weight_index: int, types: Mapping[str, TensorType]) -> int:
    """How many rows `node` applies operand `weight_index` (a weight) to."""
    w = types[node.operands[weight_index]]
    result = node.type
    assert result is not None
    if node.op == "matmul" and weight_index == 1 and w.rank >= 2:
        n = w.shape[-2] if attrs_with_defaults(node)["transpose_b"] else w.shape[-1]
        return result.numel // max(1, n)
    if node.op == "matmul" and weight_index == 0:
        return result.numel // max(1, result.shape[-2] if result.rank >= 2 else 1)
    return result.numel // max(1, w.numel)


@dataclass(frozen=True)
class SplitBackendsPass(Pass):
    name = "split-backends"
    summary = "place ops on cpu or cuda; one async copy per value per destination, with events"
    provides = ("backends-assigned", "streams-assigned")
    # Moving nodes to the host stream breaks existing events, arena plans and live ranges.
    invalidates = ("lifetimes-analyzed", "memory-planned", "synced")

    gpu_min_batch: int = 32
    cpu_ops: str = ""

    def __post_init__(self) -> None:
        if self.gpu_min_batch < 0:
            raise ValueError(f"gpu-min-batch must be >= 0, got {self.gpu_min_batch}")
        for op in filter(None, self.cpu_ops.split("+")):
            if get_op(op) is None:
                raise ValueError(f"cpu-ops: unknown op '{op}'{did_you_mean(op, list(op_names()))}")

    def run(self, graph: Graph) -> Graph:
        compute = [n for n in graph.nodes if not n.is_event]
        if compute and all(n.ann.backend is not None for n in compute):
            return graph  # already split
        backends = self.place(graph)
        return insert_copies(graph, backends)

    def place(self, graph: Graph) -> list[str]:
        """A backend per node (events get "" ), by the rules in the module docstring."""
        unsupported = GPU_UNSUPPORTED_OPS | {o for o in self.cpu_ops.split("+") if o}
        host_weights = {w.name for w in graph.weights if w.placement == "host"}
        roots = alias_roots(graph)
        types = graph.value_types()
        producers = graph.producers()
        nodes = graph.nodes
        backends = [""] * len(nodes)
        free = [False] * len(nodes)
        for i, node in enumerate(nodes):
            if node.is_event:
                continue
            reads_host = [
                k
                for k, o in enumerate(node.operands)
                if (roots[o][0] if o in roots else o) in host_weights
            ]
            if node.op in unsupported:
                backends[i] = "cpu"
            elif node.op in VIEW_OPS:
                src = node.operands[0]
                backends[i] = (
                    backends[producers[src]]
                    if src in producers
                    else ("cpu" if src in host_weights else "cuda")
                )
            elif reads_host:
                gpu = node.op != "get_rows" and all(
                    weight_batch(node, k, types) >= self.gpu_min_batch for k in reads_host
                )
                backends[i] = "cuda" if gpu else "cpu"
            else:
                backends[i] = "cuda"
                free[i] = node.op not in HEAVY_OPS
        _hill_climb(graph, backends, free, host_weights, types)
        for i, node in enumerate(nodes):  # views follow their operand, also after moves
            if node.op in VIEW_OPS and node.op not in unsupported and node.operands[0] in producers:
                backends[i] = backends[producers[node.operands[0]]]
        return backends


def _hill_climb(
    graph: Graph,
    backends: list[str],
    free: list[bool],
    host_weights: set[str],
    types: Mapping[str, TensorType],
) -> None:
    """Move free ops to the other backend while that strictly lowers the bytes copied."""
    producers = graph.producers()
    users = graph.users()
    nodes = graph.nodes

    def home(value: str) -> set[str]:
        if value in producers:
            return {backends[producers[value]]}
        return {"cpu"} if value in host_weights else {"cpu", "cuda"}

    def copied(value: str) -> int:
        """Bytes copied for `value`: once per backend reading it that does not hold it."""
        places = home(value)
        wanted = {backends[u] for u in users.get(value, ())}
        size = types[value].nbytes
        return size * len(wanted - places)

    candidates = [i for i, f in enumerate(free) if f]
    for _ in range(len(candidates) + 1):
        moved = False
        for i in candidates:
            node = nodes[i]
            touched = set(node.operands) | {node.name}
            now = sum(copied(v) for v in touched)
            backends[i] = "cpu" if backends[i] == "cuda" else "cuda"
            if sum(copied(v) for v in touched) < now:
                moved = True
            else:
                backends[i] = "cpu" if backends[i] == "cuda" else "cuda"
        if not moved:
            return


def insert_copies(graph: Graph, backends: list[str]) -> Graph:
    """Annotate backends and streams; one copy per value per destination; record/wait events."""
    nodes = graph.nodes
    host = max((n.stream for n in nodes), default=0) + 1
    copy_stream = host + 1
    taken = {n.name for n in nodes} | {i.name for i in graph.inputs} | graph.weight_names()
    types = graph.value_types()
    producers = graph.producers()
    host_weights = {w.name for w in graph.weights if w.placement == "host"}
    streams = [host if b == "cpu" else n.stream for n, b in zip(nodes, backends)]

    def unique(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}{k}", k + 1
        taken.add(name)
        return name

    before: dict[int, list[Node]] = {}
    after: dict[int, list[Node]] = {}
    rename: dict[tuple[int, str], str] = {}  # (reader index, operand) -> copy's name
    counter = {"host": 0, "h2d": 0, "d2h": 0}

    def event(kind: str) -> str:
        name = unique(f"{kind}{counter[kind]}")
        counter[kind] += 1
        return name

    def ev(op: str, name: str, stream: int, like: Node) -> Node:
        ann = Annotations(stream=stream, backend="cpu" if stream == host else None)
        return Node(name, op, (), {}, None, ann, span=like.span)

    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for o in dict.fromkeys(node.operands):
            readers.setdefault(o, []).append(i)
    for value, idx in readers.items():
        if value in producers:
            src = backends[producers[value]]
        elif value in host_weights:
            src = "cpu"
        else:
            continue  # inputs and device weights are on both backends
        remote = [i for i in idx if backends[i] not in ("", src)]
        if not remote:
            continue
        dst = backends[remote[0]]
        first = remote[0]
        copy_name = unique(f"{value}.{dst}")
        like = nodes[producers[value]] if value in producers else nodes[first]
        copy_ann = Annotations(backend="cuda")
        # A copy node's backend is "cuda" (a CUDA stream issues it); its result lives on `to`.
        if dst == "cpu":  # device to host, on the producer's stream
            p = producers[value]
            done = event("d2h")
            copy = Node(
                copy_name,
                "copy",
                (value,),
                {"to": "cpu"},
                types[value],
                replace(copy_ann, stream=streams[p]),
                span=like.span,
            )
            after.setdefault(p, []).extend([copy, ev("record", done, streams[p], like)])
            wait_stream = {host}
        else:  # host to device, on the copy stream
            group: list[Node] = []
            if value in producers:
                p = producers[value]
                ready = event("host")
                after.setdefault(p, []).append(ev("record", ready, host, like))
                group.append(ev("wait", ready, copy_stream, like))
            done = event("h2d")
            group.append(
                Node(
                    copy_name,
                    "copy",
                    (value,),
                    {"to": "cuda"},
                    types[value],
                    replace(copy_ann, stream=copy_stream),
                    span=like.span,
                )
            )
            group.append(ev("record", done, copy_stream, like))
            if value in producers:
                after[producers[value]].extend(group)
            else:
                before.setdefault(first, []).extend(group)
            wait_stream = {streams[i] for i in remote}
        waited: set[int] = set()
        for i in remote:
            rename[(i, value)] = copy_name
            if streams[i] not in waited and streams[i] in wait_stream:
                waited.add(streams[i])
                before.setdefault(i, []).append(ev("wait", done, streams[i], nodes[i]))

    out: list[Node] = []
    for i, node in enumerate(nodes):
        out.extend(before.get(i, []))
        if not node.is_event:
            operands = tuple(rename.get((i, o), o) for o in node.operands)
            node = replace(node, operands=operands).with_ann(backend=backends[i], stream=streams[i])
        out.append(node)
        out.extend(after.get(i, []))
    return graph.with_nodes(out)
