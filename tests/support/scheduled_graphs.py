"""Random stream schedules for memory tests, independent of the streams passes.

`random_streams(graph, k, seed)` puts every compute node on a random stream in 0..k-1 and inserts,
for every cross-stream data edge, a `record` right after the producer and a `wait` right before the
consumer's first use on its stream, and joins every stream into stream 0 at the end: a valid,
usually over-synchronized, schedule. Random assignment
gives more varied concurrency than any policy, which is what the memory planner must survive.

`drop_event(graph, event)` removes one `wait` (the mutation tests' "forgotten sync").
"""

from __future__ import annotations

import random

from optgraph.ir.graph import Annotations, Graph, Node


def random_streams(graph: Graph, streams: int, seed: int) -> Graph:
    rng = random.Random(seed)
    assigned = [n if n.is_event else n.with_ann(stream=rng.randrange(streams)) for n in graph.nodes]
    stream_of = {n.name: n.stream for n in assigned if not n.is_event}
    out: list[Node] = []
    recorded: set[str] = set()
    waited: set[tuple[str, int]] = set()
    needed: set[str] = {
        o
        for n in assigned
        if not n.is_event
        for o in n.operands
        if o in stream_of and stream_of[o] != n.stream
    }
    for node in assigned:
        for operand in dict.fromkeys(node.operands):
            crosses = operand in stream_of and stream_of[operand] != node.stream
            if crosses and (operand, node.stream) not in waited:
                waited.add((operand, node.stream))
                out.append(Node(f"e.{operand}", "wait", ann=Annotations(stream=node.stream)))
        out.append(node)
        if node.name in needed and node.name not in recorded:
            recorded.add(node.name)
            out.append(Node(f"e.{node.name}", "record", ann=Annotations(stream=node.stream)))
    # The host returns after stream 0's end: every other stream joins it there.
    for s in sorted({n.stream for n in assigned} - {0}):
        out.append(Node(f"end.{s}", "record", ann=Annotations(stream=s)))
        out.append(Node(f"end.{s}", "wait", ann=Annotations(stream=0)))
    return graph.with_nodes(out)


def drop_wait(graph: Graph, position: int) -> Graph:
    """The graph without its `position`-th wait node (and its record when no wait is left)."""
    waits = [i for i, n in enumerate(graph.nodes) if n.op == "wait"]
    index = waits[position]
    event = graph.nodes[index].name
    nodes = [n for i, n in enumerate(graph.nodes) if i != index]
    if not any(n.op == "wait" and n.name == event for n in nodes):
        nodes = [n for n in nodes if not (n.op == "record" and n.name == event)]
    return graph.with_nodes(nodes)


def random_memory_graph(seed: int, size: int = 14) -> Graph:
    """A seeded random DAG exercising what the memory planner must get right.

    Activations `f32[4,8]` through elementwise ops (in-place candidates), aliasing views (reshape,
    slice) that keep their base alive, materialized transposes, matmuls, broadcast reductions and a
    kv_cache_write on an activation cache (planned in place when it dies there). A few outputs.
    """
    from optgraph.ir.graph import Input, Output, TensorType, Weight
    from optgraph.ir.ops import infer_type
    from optgraph.ir.verify import verify

    rng = random.Random(seed)
    f = TensorType("f32", (4, 8))
    inputs = [
        Input("x", f),
        Input("c", TensorType("f32", (1, 2, 8, 4))),
        Input("pos", TensorType("i32", (1,))),
    ]
    weights = [Weight("w", TensorType("f32", (8, 8)))]
    types = {v.name: v.type for v in [*inputs, *weights]}
    nodes: list[Node] = []

    def add(op: str, operands: tuple[str, ...], **attrs: object) -> str:
        name = f"v{len(nodes)}"
        node = Node(name, op, operands, attrs)  # type: ignore[arg-type]
        t = infer_type(node, [types[o] for o in operands])
        nodes.append(Node(name, op, operands, attrs, t))  # type: ignore[arg-type]
        types[name] = t
        return name

    def of(t: TensorType) -> list[str]:
        return [n for n, tt in types.items() if tt == t and n not in ("w",)]

    while len(nodes) < size:
        recent = of(f)[-4:] if rng.random() < 0.7 else of(f)
        a = rng.choice(recent)
        kind = rng.choice(
            [
                "unary",
                "unary",
                "binary",
                "binary",
                "reshape",
                "slice",
                "transpose",
                "matmul",
                "reduce",
                "kv",
            ]
        )
        if kind == "unary":
            add(rng.choice(["tanh", "neg", "sigmoid", "relu", "scale"]), (a,))
        elif kind == "binary":
            add(rng.choice(["add", "mul", "sub"]), (a, rng.choice(of(f))))
        elif kind == "reshape":
            r = add("reshape", (a,), shape=(2, 16))
            add("tanh", (add("reshape", (add("neg", (r,)),), shape=(4, 8)),))
        elif kind == "slice":
            s = add("slice", (a,), axis=0, start=1, end=3)
            add("add", (a, add("concat", (s, s), axis=0)))
        elif kind == "transpose":
            t = add("transpose", (a,), perm=(1, 0))
            add("transpose", (add("sigmoid", (t,)),), perm=(1, 0))
        elif kind == "matmul":
            add("matmul", (a, "w"))
        elif kind == "reduce":
            add("sub", (a, add("sum", (a,), axes=(1,), keepdims=True)))
        else:
            cache = add("tanh", ("c",))
            new = add("reshape", (add("slice", (a,), axis=0, start=0, end=1),), shape=(1, 2, 1, 4))
            written = add("kv_cache_write", (cache, new, "pos"))
            add(
                "add",
                (
                    a,
                    add(
                        "reshape", (add("slice", (written,), axis=2, start=0, end=4),), shape=(4, 8)
                    ),
                ),
            )
    values = [n.name for n in nodes if n.type == f]
    outs = rng.sample(values, k=min(len(values), rng.randint(1, 3)))
    if values[-1] not in outs:
        outs.append(values[-1])
    graph = Graph(
        "memory", tuple(inputs), tuple(weights), tuple(nodes), tuple(Output(o) for o in outs)
    )
    verify(graph)
    return graph
