"""`split-backends{gpu-min-batch=32, cpu-ops=}`: place every op on `cpu` or `cuda`, form splits,
and insert one copy per value per destination backend, with the events that order it.

Placement, in order:
1. ops the GPU path does not support (`cpu-ops`, `+`-separated, e.g. `conv2d+max_pool2d`, plus
   `GPU_UNSUPPORTED_OPS`) run on the CPU;
2. an op reading a weight placed on the `host` runs on the CPU unless it applies the weight to at
   least `gpu-min-batch` rows (the rows of a matmul, result elements / weight elements otherwise):
   then it runs on the GPU and the weight is copied in (ggml's batch >= 32 rule, as an option;
   a moe's rows are its tokens, as ggml counts them: a decode step's experts on host stacks run
   on the CPU, a prefill's are copied in; `split-experts` puts some experts on the host);
   a `get_rows` of a host table always gathers on the CPU; rows so gathered that a matmul applies
   as its right operand (a mixture of experts picking its experts' weights by router ids) count
   as a host weight there, so a decode step's routed experts run on the CPU beside their tables
   instead of copying the picked experts in;
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
On a graph placed on several devices each copy and event is on the devices of the value it
moves (a host weight's copy on every device reading it), copies are grouped per device (an event
orders the streams of one device), and a collective waits for a copy on its operand's device.

    before: weight %emb : f32[1000,64] host    %h = get_rows(%emb, %t)    %y = matmul(%h, %w)
    after:  %h = get_rows(..) !{stream = 1, backend = "cpu"}   record ^host0 !{stream = 1, ..}
            wait ^host0 !{stream = 2}   %h.cuda = copy(%h) {to = "cuda"} !{stream = 2, ..}
            record ^h2d0 !{stream = 2}   wait ^h2d0 !{stream = 0}   %y = matmul(%h.cuda, %w) ..

Copy nodes carry `backend = "cuda"` (a CUDA stream issues them); their result lives on `to`.
Every node leaves with a stream (unassigned ones are on stream 0, now explicitly).
Runs after assign-streams (which refuses a split graph: it would move CPU nodes off the host
stream) and before insert-sync (cross-stream GPU edges are insert-sync's); its contract refuses a
graph with events, live ranges or arena offsets, which moving nodes to the host would break. Does
not handle: reordering to merge splits, moving expensive ops for memory.
Complexity: O(V + E) placement sweeps (the hill climb is bounded by V moves), O(V + E) rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from optgraph.errors import did_you_mean
from optgraph.ir.graph import Annotations, Graph, Node, TensorType
from optgraph.ir.layout import VIEW_OPS, alias_roots
from optgraph.ir.names import fresh_name
from optgraph.ir.ops import attrs_with_defaults, get_op, op_names
from optgraph.passes.base import Pass

# Ops the CUDA path cannot run; filled from the codegen's table when it declares one.
GPU_UNSUPPORTED_OPS: frozenset[str] = frozenset()
HEAVY_OPS = frozenset({"matmul", "attention", "conv2d"})  # never moved to the CPU to save copies
Devices = tuple[int, ...] | None  # a `device` annotation; None: device 0


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
    if node.op == "moe":  # its tokens, as ggml counts a MUL_MAT_ID's batch
        return result.shape[0]
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
        gathered: set[str] = set()  # rows gathered on the CPU from host tables (and views)
        for i, node in enumerate(nodes):
            if node.is_event:
                continue
            root = [roots[o][0] if o in roots else o for o in node.operands]
            reads_host = [k for k, r in enumerate(root) if r in host_weights]
            if node.op == "matmul" and len(root) == 2 and root[1] in gathered:
                reads_host.append(1)  # experts' weights picked by a router: a gathered weight
            if node.op in unsupported:
                backends[i] = "cpu"
            elif node.op in VIEW_OPS:
                src = node.operands[0]
                if src in gathered:
                    gathered.add(node.name)
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
                if node.op == "get_rows":
                    gathered.add(node.name)
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
    """Annotate backends and streams; one copy per value per destination; record/wait events,
    one host<->device wait per split and direction (see `_CopyPlanner`)."""
    planner = _CopyPlanner(graph, backends)
    planner.plan()
    out: list[Node] = []
    for i, node in enumerate(graph.nodes):
        out.extend(planner.before.get(i, []))
        if not node.is_event:
            operands = tuple(planner.rename.get((i, o), o) for o in node.operands)
            node = replace(node, operands=operands).with_ann(
                backend=backends[i], stream=planner.streams[i]
            )
        out.append(node)
        out.extend(planner.after.get(i, []))
    return graph.with_nodes(out)


class _CopyPlanner:
    """Where the copies and events of a placement go.

    Fewest host<->device synchronizations: the values one CPU split reads from one GPU stream are
    copied to the host right after their producers, but the host waits once, before the first
    of them is read, for the copy issued last (earlier copies on that stream happen-before it);
    the values one CPU split produces for the GPU are copied after the last of them is computed,
    behind one host event. So each split boundary costs one wait per direction and GPU stream,
    the least a placement allows (a CPU split that reads GPU results must wait for the GPU once;
    a GPU node reading a CPU result must wait for the host once).
    """

    def __init__(self, graph: Graph, backends: list[str]):
        self.graph, self.backends = graph, backends
        nodes = graph.nodes
        self.host = max((n.stream for n in nodes), default=0) + 1
        self.copy_stream = self.host + 1
        self.taken = {n.name for n in nodes} | {i.name for i in graph.inputs}
        self.taken |= graph.weight_names()
        self.types = graph.value_types()
        self.producers = graph.producers()
        self.host_weights = {w.name for w in graph.weights if w.placement == "host"}
        self.streams = [self.host if b == "cpu" else n.stream for n, b in zip(nodes, backends)]
        self.split = _split_ids(backends)
        self.before: dict[int, list[Node]] = {}
        self.after: dict[int, list[Node]] = {}
        self.rename: dict[tuple[int, str], str] = {}  # (reader index, operand) -> copy's name
        self.counter = {"host": 0, "h2d": 0, "d2h": 0}

    def event(self, kind: str) -> str:
        name = fresh_name(f"{kind}{self.counter[kind]}", self.taken, "")
        self.counter[kind] += 1
        return name

    def ev(self, op: str, name: str, stream: int, like: Node, device: Devices = None) -> Node:
        # On the devices of the node it goes beside (`like`) unless told (a graph on several).
        backend = "cpu" if stream == self.host else None
        devices = like.ann.device if device is None else device
        ann = Annotations(device=devices, stream=stream, backend=backend)
        return Node(name, op, (), {}, None, ann, span=like.span)

    def copy_node(self, value: str, dst: str, stream: int, like: Node, device: Devices) -> Node:
        name = fresh_name(f"{value}.{dst}", self.taken, "")
        # A copy node's backend is "cuda" (a CUDA stream issues it); its result lives on `to`.
        ann = Annotations(backend="cuda", stream=stream, device=device)
        return Node(name, "copy", (value,), {"to": dst}, self.types[value], ann, span=like.span)

    def plan(self) -> None:
        nodes, backends = self.graph.nodes, self.backends
        readers: dict[str, list[int]] = {}
        for i, node in enumerate(nodes):
            for o in dict.fromkeys(node.operands):
                readers.setdefault(o, []).append(i)
        # Grouped by the producers' devices too: an event orders the streams of one device.
        to_host: dict[tuple[int, int, Devices], list[tuple[int, str, list[int]]]] = {}
        to_device: dict[tuple[int, Devices], list[tuple[str, list[int]]]] = {}  # split -> values
        for value, idx in readers.items():
            if value in self.producers:
                src = backends[self.producers[value]]
            elif value in self.host_weights:
                src = "cpu"
            else:
                continue  # inputs and device weights are on both backends
            remote = [i for i in idx if backends[i] not in ("", src)]
            if not remote:
                continue
            if backends[remote[0]] == "cpu":
                p = self.producers[value]
                key = (self.split[remote[0]], self.streams[p], nodes[p].ann.device)
                to_host.setdefault(key, []).append((p, value, remote))
            elif value in self.producers:
                p = self.producers[value]
                to_device.setdefault((self.split[p], nodes[p].ann.device), []).append(
                    (value, remote)
                )
            else:  # a host weight read on the GPU: copied in before its first reader
                copies, waits = self.copies_in([(value, remote)])
                self.before.setdefault(remote[0], []).extend(copies)
                self.add_waits(waits)
        for group in to_host.values():
            self.copies_out(group)
        for values in to_device.values():
            last = max(self.producers[v] for v, _ in values)
            ready = self.event("host")
            self.after.setdefault(last, []).append(self.ev("record", ready, self.host, nodes[last]))
            copies, waits = self.copies_in(values)
            self.after[last].append(self.ev("wait", ready, self.copy_stream, nodes[last]))
            self.after[last].extend(copies)
            self.add_waits(waits)

    def copies_out(self, group: list[tuple[int, str, list[int]]]) -> None:
        """Copies to the host of values one CPU split reads from one GPU stream; one wait."""
        nodes = self.graph.nodes
        done = ""
        for p, value, remote in sorted(group):
            copy = self.copy_node(value, "cpu", self.streams[p], nodes[p], nodes[p].ann.device)
            for i in remote:
                self.rename[(i, value)] = copy.name
            self.after.setdefault(p, []).append(copy)
            if p == max(g[0] for g in group):
                done = self.event("d2h")
                self.after[p].append(self.ev("record", done, self.streams[p], nodes[p]))
        first = min(r[0] for _, _, r in group)
        wait = self.ev("wait", done, self.host, nodes[first], nodes[group[0][0]].ann.device)
        self.before.setdefault(first, []).append(wait)

    def add_waits(self, waits: list[tuple[int, Node]]) -> None:
        for i, wait in waits:
            self.before.setdefault(i, []).append(wait)

    def copies_in(
        self, values: list[tuple[str, list[int]]]
    ) -> tuple[list[Node], list[tuple[int, Node]]]:
        """Copies to the GPU on the copy stream, each recording an event, and the waits of its
        readers' streams (placed after the copies, before the first reader on each stream)."""
        nodes = self.graph.nodes
        group: list[Node] = []
        waits: list[tuple[int, Node]] = []
        for value, remote in values:
            like = nodes[self.producers[value]] if value in self.producers else nodes[remote[0]]
            # A produced value's copy runs where it was produced; a host weight's on every
            # device that reads it (on a graph placed on several devices).
            device = like.ann.device
            if value not in self.producers and any(nodes[i].ann.device for i in remote):
                device = tuple(sorted({d for i in remote for d in nodes[i].devices}))
            copy = self.copy_node(value, "cuda", self.copy_stream, like, device)
            done = self.event("h2d")
            group += [copy, self.ev("record", done, self.copy_stream, like, device)]
            waited: set[tuple[int, Devices]] = set()
            for i in remote:
                self.rename[(i, value)] = copy.name
                lane = (self.streams[i], _shared(nodes[i], device))
                if lane not in waited:
                    waited.add(lane)
                    waits.append((i, self.ev("wait", done, lane[0], nodes[i], lane[1])))
        return group, waits


def _shared(reader: Node, device: Devices) -> Devices:
    """The devices where `reader` reads a value on `device`: all of its own, but for a collective
    (its operand k is on device group[k] only)."""
    if device is None and reader.ann.device is None:
        return None
    return tuple(d for d in reader.devices if d in (device or (0,)))


def _split_ids(backends: list[str]) -> list[int]:
    """For each node, the index of its split (maximal run of one backend; events join the run)."""
    ids, current, run = [], None, -1
    for b in backends:
        if b and b != current:
            current, run = b, run + 1
        ids.append(max(run, 0))
    return ids
