"""Hypothesis strategies for random, verified graphs (shared by property tests of every pass).

    from tests.support.random_graphs import random_dag_graphs

    @given(random_dag_graphs(max_nodes=12, annotations=True))
    def test_something(graph): ...

`random_dag_graphs()` builds a DAG in issue order from elementwise (unary, binary with
broadcasting), reduction, softmax, matmul (against a weight or another value) and view ops
(reshape, transpose, slice), with several inputs, weights and outputs, duplicated nodes (for cse),
dead nodes (for dce), and optionally `record`/`wait` pairs and random annotations. Every result
type comes from the op table (`optgraph.ir.ops.infer_type`), and the graph is verified before it
is returned, so a generator bug fails loudly instead of producing invalid graphs.

Values are f32 with small dimensions, so the reference interpreter runs them in microseconds.
With `mixed=True` some are f16 or bf16: inputs and weights drawn in any float dtype, `cast` nodes
between float dtypes, and every op that needs equal operand dtypes (binary ops, matmul) given
partners of its operand's dtype (a new weight takes it). `mixed=False` (the default) draws exactly
what it drew before the option existed, so pinned examples and derandomized runs are unchanged.
`narrow_ancestry(graph)` says which values an f16/bf16 value feeds.

With `rows=True` the graphs look like decode steps: every input is one row `[1, K]` (K in
`ROW_WIDTHS`), new matmul weights are `[K, N]` with N in `ROW_WIDTHS` (a one-row product by a
16-byte multiple), and the kinds are `ROW_KINDS`: elementwise ops, `norm` (rms_norm or layer_norm
of the last axis, its weights `[K]`), `skip` (a binary op of a value and one it is computed from:
a residual connection), products, softmax, reductions, slices, `concat` (two values along the
last axis) and `block` (a norm, elementwise nodes, skips and with `mixed` cast round trips, then a
product; no later chain starts from its inner values, so fusion mostly keeps it one region);
no reshape or transpose, which would leave the row. Only such graphs let fusion build one-row
products with a norm in their prologue, a region the small default shapes and the default kinds
never make (issue 36's finding 10, a lowering failure on exactly that region, hid there).
`rows=False` draws exactly what it drew before the option existed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from hypothesis import strategies as st

from optgraph.ir.graph import Annotations, AttrValue, Graph, Input, Node, Output, TensorType, Weight
from optgraph.ir.ops import infer_type
from optgraph.ir.verify import verify

UNARY_OPS = ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "silu", "gelu", "scale")
BINARY_OPS = ("add", "sub", "mul", "maximum", "minimum")
REDUCTION_OPS = ("sum", "mean", "max")
KINDS = ("unary", "binary", "reduce", "softmax", "matmul", "reshape", "transpose", "slice", "dup")
FLOATS = ("f32", "f16", "bf16")
ROW_KINDS = (
    *("unary", "unary", "binary", "skip", "skip", "norm", "norm", "matmul", "matmul"),
    *("softmax", "reduce", "slice", "concat", "block", "block"),
)
ROW_WIDTHS = (4, 8, 16)

Draw = Callable[[st.SearchStrategy], object]

dims = st.integers(min_value=1, max_value=4)
shapes = st.lists(dims, min_size=1, max_size=3).map(tuple)


class _Builder:
    def __init__(self, draw: Draw, mixed: bool = False, rows: bool = False):
        self.draw = draw
        self.mixed = mixed
        self.rows = rows
        self.types: dict[str, TensorType] = {}
        self.inputs: list[Input] = []
        self.weights: list[Weight] = []
        self.nodes: list[Node] = []
        self.computed: list[str] = []  # node results, in issue order
        self.interior: set[str] = set()  # values inside a `block`: no chain starts there

    def pick(self, names: list[str]) -> str:
        return names[self.draw(st.integers(0, len(names) - 1))]  # type: ignore[index]

    def float_dtype(self) -> str:
        """f32 in one draw of two, else f16 or bf16 (mixed graphs only; f32 without a draw)."""
        if not self.mixed or self.draw(st.booleans()):
            return "f32"
        return str(self.draw(st.sampled_from(FLOATS[1:])))

    def add_input(self, shape: tuple[int, ...], dtype: str = "f32") -> str:
        name = f"x{len(self.inputs)}"
        self.inputs.append(Input(name, TensorType(dtype, shape)))
        self.types[name] = self.inputs[-1].type
        return name

    def add_weight(self, shape: tuple[int, ...], dtype: str = "f32") -> str:
        name = f"w{len(self.weights)}"
        placement = "host" if self.draw(st.booleans()) and self.draw(st.booleans()) else "device"
        self.weights.append(Weight(name, TensorType(dtype, shape), placement))
        self.types[name] = self.weights[-1].type
        return name

    def add_node(self, op: str, operands: tuple[str, ...], attrs: dict[str, AttrValue]) -> str:
        name = self.draw(st.sampled_from(["n", "h.", "v_"])) + str(len(self.nodes))  # type: ignore[operator]
        node = Node(name, op, operands, attrs)
        node = replace(node, type=infer_type(node, [self.types[o] for o in operands]))
        assert node.type is not None
        self.nodes.append(node)
        self.types[name] = node.type
        self.computed.append(name)
        return name

    # -- one op of each kind; None when no value fits --

    def values(self) -> list[str]:
        return [i.name for i in self.inputs] + [w.name for w in self.weights] + self.computed

    def unary(self, x: str) -> str:
        op = self.draw(st.sampled_from(UNARY_OPS))
        attrs: dict[str, AttrValue] = {}
        if op == "scale":
            attrs["factor"] = self.draw(st.sampled_from([0.5, -2.0, 1.0, 0.125]))  # type: ignore[assignment]
        elif op == "gelu" and self.draw(st.booleans()):
            attrs["approximate"] = self.draw(st.sampled_from(["tanh", "none"]))  # type: ignore[assignment]
        return self.add_node(str(op), (x,), attrs)

    def binary(self, x: str) -> str | None:
        shape, dtype = self.types[x].shape, self.types[x].dtype
        fits = [
            v
            for v in self.values()
            if _broadcasts(self.types[v].shape, shape) and self.types[v].dtype == dtype
        ]
        other = self.pick(fits)  # x itself always fits
        pair = (x, other) if self.draw(st.booleans()) else (other, x)
        return self.add_node(str(self.draw(st.sampled_from(BINARY_OPS))), pair, {})

    def reduce(self, x: str) -> str | None:
        rank = self.types[x].rank
        if rank == 0:
            return None
        attrs: dict[str, AttrValue] = {}
        if self.draw(st.booleans()):
            axes = self.draw(st.lists(st.integers(0, rank - 1), min_size=1, unique=True))
            attrs["axes"] = tuple(sorted(axes))  # type: ignore[arg-type]
        if self.draw(st.booleans()):
            attrs["keepdims"] = self.draw(st.booleans())  # type: ignore[assignment]
        return self.add_node(str(self.draw(st.sampled_from(REDUCTION_OPS))), (x,), attrs)

    def softmax(self, x: str) -> str | None:
        rank = self.types[x].rank
        if rank == 0:
            return None
        axis = self.draw(st.integers(-rank, rank - 1))
        return self.add_node("softmax", (x,), {"axis": axis} if axis != -1 else {})  # type: ignore[dict-item]

    def matmul(self, x: str) -> str | None:
        shape = self.types[x].shape
        if len(shape) < 2:
            return None
        k, dtype = shape[-1], self.types[x].dtype
        partners = [
            v
            for v in self.values()
            if self.types[v].rank == 2
            and self.types[v].shape[0] == k
            and self.types[v].dtype == dtype
        ]
        if partners and self.draw(st.booleans()):
            b = self.pick(partners)
        else:
            n = self.draw(st.sampled_from(ROW_WIDTHS) if self.rows else dims)
            b = self.add_weight((k, n), dtype)  # type: ignore[arg-type]
        return self.add_node("matmul", (x, b), {})

    def skip(self, x: str) -> str | None:
        """A binary op of `x` and a computed value `x` is computed from, of its type: a skip
        (residual) connection around the nodes between them (rows=True only)."""
        producers = {n.name: n for n in self.nodes}
        ancestors, stack = set(), list(producers[x].operands) if x in producers else []
        while stack:
            v = stack.pop()
            if v in producers and v not in ancestors:
                ancestors.add(v)
                stack.extend(producers[v].operands)
        fits = [v for v in self.computed if v in ancestors and self.types[v] == self.types[x]]
        if not fits:
            return None
        # The nearest two in one draw of two: a short skip stays inside one fused region.
        other = self.pick(fits[-2:] if self.draw(st.booleans()) else fits)
        pair = (x, other) if self.draw(st.booleans()) else (other, x)
        return self.add_node(str(self.draw(st.sampled_from(BINARY_OPS))), pair, {})

    def block(self, x: str) -> str | None:
        """A pre-norm block of a decode step: a norm of `x` or of a unary node on it (always
        on one when `x` is an input: a skip then has a computed value to read), up to two
        elementwise nodes on the norm (unary, a `skip` back to a value the norm's input is
        computed from, or with `mixed` a cast to another float dtype and back), then a one-row
        product (rows=True only)."""
        first = x not in self.computed or self.draw(st.booleans())
        start = len(self.computed)
        v = self.norm(self.unary(x) if first else x)
        if v is None:
            return None
        for _ in range(int(self.draw(st.integers(0, 2)))):  # type: ignore[arg-type]
            steps = ["skip", "unary", "cast"] if self.mixed else ["skip", "unary"]
            step = self.draw(st.sampled_from(steps))
            if step == "cast":  # to another float dtype and back: the row keeps its dtype
                dtype = self.types[v].dtype
                v = self.add_node("cast", (self.cast(v),), {"dtype": dtype})
            else:
                v = (self.skip(v) if step == "skip" else None) or self.unary(v)
        self.interior.update(self.computed[start:])
        return self.matmul(v)

    def norm(self, x: str) -> str | None:
        """rms_norm or layer_norm of the last axis, with new weights (rows=True only)."""
        shape, dtype = self.types[x].shape, self.types[x].dtype
        if not shape:
            return None
        op = str(self.draw(st.sampled_from(["rms_norm", "layer_norm"])))
        params = [self.add_weight((shape[-1],), dtype)]
        if op == "layer_norm":
            params.append(self.add_weight((shape[-1],), dtype))
        eps = self.draw(st.sampled_from([1e-5, 1e-6]))
        return self.add_node(op, (x, *params), {"eps": eps})  # type: ignore[dict-item]

    def concat(self, x: str) -> str | None:
        """`x` and a value of its shape but for the last axis, joined along it (rows=True only)."""
        t = self.types[x]
        if not t.shape:
            return None
        fits = [
            v
            for v in self.values()
            if self.types[v].dtype == t.dtype
            and self.types[v].shape[:-1] == t.shape[:-1]
            and self.types[v].rank == t.rank
        ]
        other = self.pick(fits)  # x itself always fits
        pair = (x, other) if self.draw(st.booleans()) else (other, x)
        return self.add_node("concat", pair, {"axis": t.rank - 1})

    def reshape(self, x: str) -> str | None:
        shape = self.types[x].shape
        numel = math.prod(shape)
        options = [(numel,), (1, numel), (numel, 1)]
        if len(shape) >= 2:
            options.append(shape[:-2] + (shape[-2] * shape[-1],))
        return self.add_node("reshape", (x,), {"shape": self.draw(st.sampled_from(options))})  # type: ignore[dict-item]

    def transpose(self, x: str) -> str | None:
        rank = self.types[x].rank
        if rank == 0:
            return None
        perm = self.draw(st.permutations(list(range(rank))))
        return self.add_node("transpose", (x,), {"perm": tuple(perm)})  # type: ignore[arg-type]

    def slice(self, x: str) -> str | None:
        shape = self.types[x].shape
        if not shape:
            return None
        axis = self.draw(st.integers(0, len(shape) - 1))
        start = self.draw(st.integers(0, shape[axis] - 1))  # type: ignore[index]
        end = self.draw(st.integers(start + 1, shape[axis]))  # type: ignore[operator, index]
        return self.add_node("slice", (x,), {"axis": axis, "start": start, "end": end})  # type: ignore[dict-item]

    def cast(self, x: str) -> str:
        dtype = self.draw(st.sampled_from([d for d in FLOATS if d != self.types[x].dtype]))
        return self.add_node("cast", (x,), {"dtype": dtype})  # type: ignore[dict-item]

    def dup(self, x: str) -> str | None:
        if not self.nodes:
            return None
        original = self.nodes[self.draw(st.integers(0, len(self.nodes) - 1))]  # type: ignore[index]
        if original.is_event:
            return None
        return self.add_node(original.op, original.operands, dict(original.attrs))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Whether `small` broadcasts to exactly `big` (so the result keeps `big`'s shape)."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


def _annotate(draw: Draw, graph: Graph) -> Graph:
    """Random annotations of every kind on some nodes (values need not be a consistent plan)."""
    nodes = []
    for node in graph.nodes:
        if not draw(st.booleans()):
            nodes.append(node)
            continue
        ann = Annotations(
            stream=draw(st.none() | st.integers(0, 2)),  # type: ignore[arg-type]
            backend=draw(st.none() | st.sampled_from(["cpu", "cuda"])),  # type: ignore[arg-type]
            offset=draw(st.none() | st.integers(0, 4096).map(lambda v: v * 16)),  # type: ignore[arg-type]
            size=draw(st.none() | st.integers(0, 1024)),  # type: ignore[arg-type]
            live=draw(st.none() | st.tuples(st.integers(0, 30), st.integers(0, 30))),  # type: ignore[arg-type]
            visible=draw(st.none() | st.lists(st.integers(-1, 30), max_size=3).map(tuple)),  # type: ignore[arg-type]
        )
        nodes.append(replace(node, ann=ann))
    return graph.with_nodes(nodes)


def _insert_events(draw: Draw, graph: Graph) -> Graph:
    """`record ^eK` then, later, `wait ^eK` pairs at random positions (streams 0..2)."""
    nodes = list(graph.nodes)
    for k in range(draw(st.integers(1, 3))):  # type: ignore[arg-type]
        first = draw(st.integers(0, len(nodes)))
        second = draw(st.integers(first, len(nodes)))  # type: ignore[arg-type]
        streams = st.integers(0, 2)
        record = Node(f"e{k}", "record", ann=Annotations(stream=draw(streams)))  # type: ignore[arg-type]
        wait = Node(f"e{k}", "wait", ann=Annotations(stream=draw(streams)))  # type: ignore[arg-type]
        nodes.insert(second, wait)  # type: ignore[arg-type]
        nodes.insert(first, record)  # type: ignore[arg-type]
    return graph.with_nodes(nodes)


@st.composite
def random_dag_graphs(
    draw: Draw,
    max_nodes: int = 12,
    max_inputs: int = 3,
    max_outputs: int = 3,
    kinds: tuple[str, ...] = KINDS,
    annotations: bool = False,
    events: bool = False,
    mixed: bool = False,
    rows: bool = False,
) -> Graph:
    """A verified random graph; `annotations`/`events` add random `!{...}` and record/wait pairs,
    `mixed` f16/bf16 inputs, weights and casts, `rows` decode-like rows, norms and concats."""
    b = _Builder(draw, mixed, rows)
    if mixed and "cast" not in kinds:
        kinds = (*kinds, "cast", "cast")
    if rows:
        kinds = ROW_KINDS + (("cast", "cast") if mixed else ())
    for _ in range(draw(st.integers(1, max_inputs))):  # type: ignore[arg-type]
        shape = (1, draw(st.sampled_from(ROW_WIDTHS))) if rows else draw(shapes)
        b.add_input(shape, b.float_dtype())  # type: ignore[arg-type]
    for _ in range(draw(st.integers(0, 2))):  # type: ignore[arg-type]
        shape = (draw(st.sampled_from(ROW_WIDTHS)),) if rows else draw(shapes)
        b.add_weight(shape, b.float_dtype())  # type: ignore[arg-type]
    target = draw(st.integers(max_nodes // 2 if rows else 1, max_nodes))  # rows: deep chains
    attempts = 0
    while len(b.nodes) < target and attempts < 4 * max_nodes:  # type: ignore[operator]
        attempts += 1
        kind = draw(st.sampled_from(kinds))
        # Prefer recent values, so chains get deep rather than everything reading the inputs.
        values = b.values()
        if rows:  # computed values and inputs only: a norm's new weights are not a chain's end,
            # nor a block's inner values (its product's prologue mostly stays one region)
            values = [i.name for i in b.inputs] + [v for v in b.computed if v not in b.interior]
        recent = values[-3:] if draw(st.booleans()) else values
        getattr(b, str(kind))(b.pick(recent))
    if not b.nodes:
        b.unary(b.inputs[0].name)
    count = draw(st.integers(1, min(max_outputs, len(b.computed))))
    outputs = draw(st.lists(st.sampled_from(b.computed), min_size=1, max_size=count, unique=True))
    if rows:  # every value nobody reads is an output: the chains stay live (not dce'd)
        read = {o for n in b.nodes for o in n.operands}
        outputs = [v for v in b.computed if v not in read]
    if mixed:  # about half the narrow outputs widened to f32: f32 outputs fed by narrow paths
        outputs = [
            b.add_node("cast", (o,), {"dtype": "f32"})
            if b.types[o].dtype != "f32" and draw(st.booleans())
            else o
            for o in outputs  # type: ignore[union-attr]
        ]
    graph = Graph(
        "random",
        tuple(b.inputs),
        tuple(b.weights),
        tuple(b.nodes),
        tuple(Output(o) for o in outputs),  # type: ignore[union-attr]
    )
    if annotations:
        graph = _annotate(draw, graph)
    if events:
        graph = _insert_events(draw, graph)
    verify(graph)
    return graph


def narrow_ancestry(graph: Graph) -> dict[str, set[str]]:
    """For every value: the narrow dtypes (f16, bf16) of itself and of the values it is computed
    from (a fused body's dtypes count as its node's). Which bound a mixed output is held to."""
    seen: dict[str, set[str]] = {}
    for decl in (*graph.inputs, *graph.weights):
        seen[decl.name] = {decl.type.dtype} - {"f32"}
    for node in graph.nodes:
        if node.is_event or node.type is None:
            continue
        dtypes = {node.type.dtype} - {"f32"}
        if node.body is not None:
            dtypes |= {n.type.dtype for n in node.body.nodes if n.type is not None} - {"f32"}
        for operand in node.operands:
            dtypes |= seen[operand]
        seen[node.name] = dtypes
    return seen


@st.composite
def layered_graphs(draw: Draw, max_layers: int = 6, max_width: int = 5) -> Graph:
    """A verified layered DAG of elementwise nodes over one input: each layer has 1..max_width
    nodes, each reading one, two or three earlier values (most often one of the layer just
    before; three through two chained adds), every value nobody reads an output. The shape of
    the outside testing's stream-assignment graphs (forks, partial joins, skip edges)."""
    b = _Builder(draw)
    x = b.add_input((4,))
    earlier, previous = [x], [x]
    for _ in range(int(draw(st.integers(2, max_layers)))):  # type: ignore[arg-type]
        layer = []
        for _ in range(int(draw(st.integers(1, max_width)))):  # type: ignore[arg-type]
            reads = int(draw(st.sampled_from([1, 1, 2, 2, 3])))  # type: ignore[arg-type]
            first = b.pick(previous) if draw(st.booleans()) else b.pick(earlier)
            operands = list(dict.fromkeys([first, *(b.pick(earlier) for _ in range(reads - 1))]))
            value = b.add_node("neg", (operands[0],), {}) if len(operands) == 1 else operands[0]
            for other in operands[1:]:
                value = b.add_node("add", (value, other), {})
            layer.append(value)
        earlier += layer
        previous = layer
    read = {o for n in b.nodes for o in n.operands}
    outputs = [v for v in b.computed if v not in read]
    graph = Graph("layered", tuple(b.inputs), (), tuple(b.nodes), tuple(Output(o) for o in outputs))
    verify(graph)
    return graph
