"""`fuse-siblings`: one kernel for one-row products that read the same row (decode's q/k/v, gate/up).

    before: %q = matmul(%x, %wq) : f16[1,512]   %k = matmul(%x, %wk) : f16[1,128]
    after:  %q.siblings = fused(%x, %wq, %wk) : f16[1,640] body(%p0, %p1, %p2) { %q = matmul(%p0, %p1)
              %k = matmul(%p0, %p2)   %q.siblings = concat(%q, %k) {axis = 1}   yield %q.siblings }
            %q = slice(%q.siblings) {axis = 1, start = 0, end = 512}   (an alias: no copy, no kernel)

A *candidate* is a one-row product (`fusion_rules.one_row_product`: `[1.., K] @ [K, N]`, no
transposes, f32/f16/bf16, N a multiple of a 16-byte load), either a plain `matmul` or a `product`
region left by `fuse` (its elementwise epilogue comes along). Two rewrites, in this order:

1. *pairs*: a product region whose epilogue reads a plain one-row product `%u` of the same row, of
   the same width, that nobody else reads (SwiGLU: `mul(silu(x@wg), x@wu)`) absorbs `%u`: one
   region, both products per output column, no concat.
2. *concat*: candidates reading the same row `%x` with the same K, dtype and result rank (result
   shapes `[1.., N_i]`, rank >= 2), in issue order, join the group of the first one when every
   operand they read is defined before it (inputs and weights always are). The group becomes one
   region at the first member's place yielding `concat(..., axis = last)`; each former result is a
   `slice` of it, issued right after it. The region is named `<first member>.siblings`.

`concat=false` runs the pairs rewrite alone, as the default pipeline does
(`fuse,fuse-siblings{concat=false}`): a pair is one launch instead of two, and its gate product no
longer waits for the whole up product to end (measured faster on an H100:
docs/results/2026-11-25-h100-paired-gate-up.md); concat groups were measured slower, and merged
launches (`codegen/plan/merge_launches.py`) already join q/k/v.

Blocked: a member that is a graph output (its bytes would become a view), members on different
devices, streams or backends. Its contract invalidates events (moving work earlier could pass a
wait), arena offsets and live ranges, so the manager refuses it after `insert-sync`,
`analyze-lifetimes` or `plan-memory`: name it right after `fuse` (with `row-prologues=false`
for concat groups of q/k/v: they need the norm shared, not copied into each product). Moving a
member earlier is safe: all it reads is defined before the group's first member, and every
reader of its result comes after that place.

Does not handle: products with M > 1, transposed or batched operands, products reading different
rows, a pair whose second product is itself a region with an epilogue, nested regions.
Complexity: O(V + E) plus O(g²) per group of g members for the operand checks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optgraph.analysis.fusion_rules import one_row_product, product_operands
from optgraph.ir.graph import NO_ANNOTATIONS, Graph, Node, Region, TensorType
from optgraph.ir.names import fresh_name
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class _Candidate:
    index: int
    row: str  # the outer value of the input row
    k: int
    anchor: str  # the matmul's name in the body (or the node's own name)


def _candidate(node: Node, types: dict[str, TensorType]) -> _Candidate | None:
    """The node as a one-row product of an outer row, or None."""
    if node.type is None or node.is_event:
        return None
    found = product_operands(node, types)
    if found is None:
        return None
    a, b, anchor = found
    shape = one_row_product(anchor, types[a], types[b])
    return None if shape is None else _Candidate(-1, a, shape[0], anchor.name)


def _inline(node: Node, taken: set[str]) -> tuple[list[Node], list[str]]:
    """A candidate's body nodes with operands spelled as outer values (names made unique), and its
    result's name in that list."""
    if node.body is None:
        clean = replace(node, ann=NO_ANNOTATIONS)
        taken.add(node.name)
        return [clean], [node.name]
    params = dict(zip(node.body.params, node.operands))
    rename: dict[str, str] = {}
    out: list[Node] = []
    for inner in node.body.nodes:
        name = fresh_name(inner.name, taken, ".")
        rename[inner.name] = name
        operands = tuple(rename.get(o, params.get(o, o)) for o in inner.operands)
        out.append(replace(inner, name=name, operands=operands, ann=NO_ANNOTATIONS))
    return out, [rename[node.body.result]]


def _region(name: str, nodes: list[Node], result: Node, span: Node) -> Node:
    """A fused node computing `nodes` (outer operand names) then `result`, named `name`."""
    defined = {n.name for n in nodes} | {result.name}
    outside: list[str] = []
    for n in [*nodes, result]:
        for o in n.operands:
            if o not in defined and o not in outside:
                outside.append(o)
    taken = set(defined)
    params = [fresh_name(f"p{k}", taken, ".") for k in range(len(outside))]
    rename = dict(zip(outside, params))
    body = tuple(
        replace(n, operands=tuple(rename.get(o, o) for o in n.operands)) for n in [*nodes, result]
    )
    assert result.type is not None
    return Node(
        name=name,
        op="fused",
        operands=tuple(outside),
        type=result.type,
        ann=span.ann,
        body=Region(tuple(params), body, result.name),
        span=span.span,
        operand_spans=(),
    )


def _pairs(graph: Graph) -> Graph:
    """Product regions whose epilogue reads a sole-use sibling product absorb it.

    Only a region reading a plain matmul's result is planned as a candidate: the tests that
    read no plan run first, and the graph's types and readers are gathered on first need."""
    outputs = set(graph.output_names())
    nodes = list(graph.nodes)
    matmuls = {n.name: j for j, n in enumerate(nodes) if n.op == "matmul"}
    if not matmuls:
        return graph
    types: dict[str, TensorType] = {}
    readers: dict[str, list[int]] | None = None
    gone: set[int] = set()
    for i, node in enumerate(nodes):
        if node.body is None:
            continue
        cand: _Candidate | None = None
        for o in node.operands:
            j = matmuls.get(o)
            if j is None or j in gone or o in outputs:
                continue
            if readers is None:
                types, readers = graph.value_types(), _readers(nodes, matmuls)
            if readers[o] != [i]:
                continue
            if cand is None:
                cand = _candidate(node, types)
                if cand is None:
                    break
            other = _candidate(nodes[j], types)
            if other is None or (other.row, other.k) != (cand.row, cand.k):
                continue
            if types[o] != _anchor_type(node, cand) or _placement(nodes[j]) != _placement(node):
                continue
            inner, _ = _inline(node, set())
            product = replace(nodes[j], ann=NO_ANNOTATIONS)
            body = [product, *inner[:-1]]
            nodes[i] = _region(node.name, body, inner[-1], node)
            gone.add(j)
            break
    if not gone:
        return graph
    return graph.with_nodes([n for k, n in enumerate(nodes) if k not in gone])


def _readers(nodes: list[Node], names: dict[str, int]) -> dict[str, list[int]]:
    """The readers of each of `names`, in issue order (a node reading one twice, twice)."""
    readers: dict[str, list[int]] = {name: [] for name in names}
    get = readers.get
    for i, node in enumerate(nodes):
        for operand in node.operands:
            found = get(operand)
            if found is not None:
                found.append(i)
    return readers


def _placement(node: Node) -> tuple[object, ...]:
    """Where the node runs: its devices, stream and backend (members must share all three)."""
    return (node.ann.device, node.ann.stream, node.ann.backend)


def _anchor_type(node: Node, cand: _Candidate) -> TensorType | None:
    assert node.body is not None
    return next(n.type for n in node.body.nodes if n.name == cand.anchor)


def _groups(graph: Graph) -> list[list[int]]:
    """Concat groups of candidates, each in issue order, two or more members."""
    types = graph.value_types()
    outputs = set(graph.output_names())
    producers = graph.producers()
    open_groups: dict[tuple[object, ...], list[int]] = {}
    groups: list[list[int]] = []
    for i, node in enumerate(graph.nodes):
        if node.name in outputs or node.type is None:
            continue
        if node.type.rank < 2 or any(d != 1 for d in node.type.shape[:-1]):
            continue
        cand = _candidate(node, types)
        if cand is None:
            continue
        key = (cand.row, cand.k, node.type.dtype, node.type.rank, *_placement(node))
        group = open_groups.get(key)
        if group is not None and all(producers.get(o, -1) < group[0] for o in node.operands):
            group.append(i)
            continue
        group = [i]
        open_groups[key] = group
        groups.append(group)
    return [g for g in groups if len(g) > 1]


def _concat(graph: Graph) -> Graph:
    groups = _groups(graph)
    if not groups:
        return graph
    taken = {n.name for n in graph.nodes} | graph.input_names() | graph.weight_names()
    placed: dict[int, list[Node]] = {}
    moved: set[int] = set()
    for group in groups:
        members = [graph.nodes[i] for i in group]
        first = members[0]
        assert first.type is not None
        name = fresh_name(f"{first.name}.siblings", taken, ".")
        inner_taken: set[str] = {name}
        body: list[Node] = []
        values: list[str] = []
        for m in members:
            part, value = _inline(m, inner_taken)
            body += part
            values += value
        rank = first.type.rank
        widths = [m.type.shape[-1] for m in members if m.type is not None]
        out_type = TensorType(first.type.dtype, (*first.type.shape[:-1], sum(widths)))
        concat = Node(name, "concat", tuple(values), {"axis": rank - 1}, out_type)
        region = _region(name, body, concat, first)
        slices: list[Node] = []
        start = 0
        for m, width in zip(members, widths):
            assert m.type is not None
            attrs = {"axis": rank - 1, "start": start, "end": start + width}
            slices.append(
                Node(m.name, "slice", (name,), attrs, m.type, m.ann, span=m.span, operand_spans=())
            )
            start += width
        placed[group[0]] = [region, *slices]
        moved.update(group)
    out: list[Node] = []
    for i, node in enumerate(graph.nodes):
        if i in placed:
            out += placed[i]
        elif i not in moved:
            out.append(node)
    return graph.with_nodes(out)


@dataclass(frozen=True)
class FuseSiblingsPass(Pass):
    name = "fuse-siblings"
    summary = "one kernel for one-row products reading the same row (q/k/v, gate/up)"
    # Moving work earlier could pass a wait, break the arena plan and shift the live ranges.
    invalidates = ("lifetimes-analyzed", "memory-planned", "synced")
    concat: bool = True  # False: the pairs rewrite only (what the default pipeline runs)

    def run(self, graph: Graph) -> Graph:
        paired = _pairs(graph)
        return _concat(paired) if self.concat else paired
