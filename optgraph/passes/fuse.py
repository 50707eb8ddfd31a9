"""`fuse{max-ops=64}`: group producer-consumer chains into `fused` regions, one kernel each.

    before: %t = add(%x, %b) : f32[4,64]     %y = relu(%t) : f32[4,64]     output %y
    after:  %y = fused(%x, %b) : f32[4,64] body(%p0, %p1) {
              %t = add(%p0, %p1) : f32[4,64]    %y = relu(%t) : f32[4,64]    yield %y }

Walking nodes in issue order, every fusable node (elementwise, a trailing-axis reduction or norm,
softmax, matmul) starts a group; then the group absorbs the group producing one of its operands
while that is allowed, until nothing more can join. A producer group, whose root is the producer,
may join when:

- the producer is not a graph output, and every reader of it is already in the consumer's group
  (a second reader outside, or a view of the intermediate, blocks: its bytes must exist);
- the union is one kernel by `fusion_rules.plan_region`: at most one reduction/norm/softmax or
  matmul; elementwise prologues into reductions and norms, and into one-row products (with at
  most one norm of the row), elementwise epilogues after either; every shape broadcasts to the
  result and no reduction or product is broadcast further;
- the union has at most `max-ops` nodes, and all of it runs on one stream and one backend (so
  fusion after `assign-streams` only groups same-stream nodes; before it, on any DAG);
- on a memory-planned graph (offsets set): the result's bytes overlap no operand's (one kernel
  would read what it overwrites), and every other node writing an operand's bytes happens-before
  the operand's producer or after the root, since the fused node reads its operands when the
  root runs, possibly after the planner recycled a buffer whose last reader was absorbed. Live
  ranges shift: `live`/`visible` annotations are dropped (run analyze-lifetimes again); offsets
  stay valid.

`row-prologues` (default true, unplanned graphs): a norm of one row whose readers are all
one-row products on its stream (a decode step's q/k/v, gate/up) is first copied once per reader,
so each product computes the norm as it reads its row instead of a separate kernel storing it:

    before: %n = rms_norm(%h, %g)   %q = matmul(%n, %wq)   %k = matmul(%n, %wk)
    after:  %q = fused(%h, %g, %wq) body { %n = rms_norm(..)  %q = matmul(%n, ..) }   (same for %k)

(only for rows of at most `prologue-max-k` elements, default 2048: measured, row prologues made
a small launch-bound decode faster and a wide one slower, where every block of a product
recomputes the row's statistics; see docs/benchmarks.md), and SwiGLU's
`mul(silu(x @ wg), x @ wu)`, read only as the row of a one-row product, becomes that product's
prologue instead of the gate product's epilogue (`_joins_row_products`), so the gate and up
products stay independent (their launches merge into one). A prologue without a norm
(elementwise only: no row statistics, each block computes just its own slice) has its own
limit, `elementwise-prologue-max-k`.

The fused node takes the root's name, type, annotations and place in issue order; its parameters
bind to the distinct outside values the body reads, in first-use order. Moving work later on its
own stream keeps every incoming data edge ordered, and only the root's value leaves the region,
so a synced graph stays synced. Regions of one node are left as they are. Fuse therefore runs
anywhere in a pipeline: before or after assign-streams, insert-sync and plan-memory (its contract
invalidates nothing; the default pipeline fuses first by choice, see `manager.DEFAULT_PIPELINE`).

Does not handle: multi-output regions, prologues of products with several rows (cuBLAS),
reductions over leading axes (they stay alone), fusing through views or into attention/rope/conv
(opaque ops), nested regions.

Complexity: O((V + E)·k²) with k = max-ops, i.e. linear in graph size: each node's group retries
its at most k·arity outside operands after each of at most k merges, and each check is O(k). On a
planned graph add O(V·s) for happens-before (s streams) and O(log V + w) per operand for the
w buffers sharing its bytes. Region bodies are made of the original nodes re-wired
(`Node.with_fields`), so verify and the cost model keep what they inferred for them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from optgraph.analysis.fusion_rules import (
    NORM_OPS,
    PRODUCT,
    is_anchor,
    is_elementwise,
    one_row_product,
    plan_region,
)
from optgraph.analysis.happens_before import HappensBefore, happens_before
from optgraph.analysis.row_norm_copies import recompute_row_norms, restored_names
from optgraph.ir.graph import NO_ANNOTATIONS, Graph, Node, Region, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.passes.base import Pass


@dataclass
class _State:
    """The grouping built while walking the graph once."""

    graph: Graph
    types: dict[str, TensorType]
    users: dict[str, list[int]]
    producers: dict[str, int]
    outputs: frozenset[str]
    group_of: list[int | None]
    members: dict[int, list[int]]
    # Per group root: (anchors, products, norms) among its members, so a union that
    # `plan_region` would refuse for its anchors alone is refused without building it.
    anchors: dict[int, tuple[int, int, int]]
    planned: bool
    hb: HappensBefore | None
    ranges: dict[str, tuple[int, int]]  # arena byte range of each value (planned graphs)
    alias_base: dict[str, str] = field(default_factory=dict)  # view -> value owning its bytes
    owners: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, node index)
    starts: list[int] = field(default_factory=list)  # owners' starts, sorted
    max_size: int = 0
    row_prologues: bool = True
    prologue_max_k: int = 2048
    elementwise_prologue_max_k: int = 2048
    overlaps: dict[str, list[int]] = field(default_factory=dict)


def _arena_ranges(graph: Graph, types: dict[str, TensorType]) -> dict[str, tuple[int, int]]:
    """[start, end) of every node result in the arena, views resolved to their base's offset."""
    own = {n.name: n.ann.offset for n in graph.nodes if n.ann.offset is not None}
    ranges: dict[str, tuple[int, int]] = {}
    for name, offset in own.items():
        ranges[name] = (offset, offset + types[name].nbytes)
    for name, (root, byte_offset) in alias_roots(graph).items():
        base = own.get(root)
        if base is not None and name not in own:
            start = base + byte_offset
            ranges[name] = (start, start + types[name].nbytes)
    return ranges


def _index_arena(state: _State) -> None:
    """Sort the nodes that own arena bytes by offset, for overlap queries."""
    graph = state.graph
    state.alias_base = {name: root for name, (root, _) in alias_roots(graph).items()}
    for i, node in graph.compute_nodes():
        if node.ann.offset is not None and node.name not in state.alias_base:
            start = node.ann.offset
            state.owners.append((start, start + state.types[node.name].nbytes, i))
    state.owners.sort()
    state.starts = [start for start, _, _ in state.owners]
    state.max_size = max((end - start for start, end, _ in state.owners), default=0)


def _outside_operands(state: _State, group: Sequence[int]) -> list[str]:
    """The distinct values the group reads from outside, in first-use order."""
    nodes = state.graph.nodes
    if len(group) == 1:  # a node never reads itself
        return list(dict.fromkeys(nodes[group[0]].operands))
    inside = {nodes[j].name for j in group}
    seen: dict[str, None] = {}  # ordered, with O(1) membership
    for j in group:
        for operand in nodes[j].operands:
            if operand not in inside:
                seen[operand] = None
    return list(seen)


def _overlapping_writers(state: _State, operand: str) -> list[int]:
    """Nodes whose own result bytes share bytes with `operand`'s (cached, O(log V + hits))."""
    cached = state.overlaps.get(operand)
    if cached is not None:
        return cached
    lo, hi = state.ranges[operand]
    first = bisect_left(state.starts, lo - state.max_size)
    last = bisect_left(state.starts, hi)
    hits = [
        state.owners[k][2]
        for k in range(first, last)
        if state.owners[k][1] > lo and state.owners[k][0] < hi
    ]
    state.overlaps[operand] = hits
    return hits


def _memory_allows(state: _State, root: int, union: Sequence[int]) -> bool:
    """On a planned graph: the result overlaps no operand, and no recycled operand is read late.

    The fused node reads each operand when the root runs, possibly later than the absorbed node
    that read it before. Any other node writing the operand's bytes must therefore come before
    the operand's producer or after the root, by happens-before.
    """
    assert state.hb is not None
    nodes = state.graph.nodes
    out = state.ranges.get(nodes[root].name)
    inside = set(union)
    for operand in _outside_operands(state, union):
        span = state.ranges.get(operand)
        if span is None:
            continue  # an input or weight: not in the arena
        if out is not None and span[0] < out[1] and out[0] < span[1]:
            return False
        base = state.alias_base.get(operand, operand)
        producer = state.producers.get(base)
        for w in _overlapping_writers(state, operand):
            if w in inside or w == producer:
                continue
            before = producer is not None and state.hb.ordered(w, producer)
            if not before and not state.hb.ordered(root, w):
                return False
    return True


def _try_absorb(state: _State, root: int, producer: int, max_ops: int) -> bool:
    """Merge the group rooted at `producer` into the group rooted at `root`, if allowed."""
    nodes = state.graph.nodes
    pnode = nodes[producer]
    if pnode.name in state.outputs:
        return False
    if any(state.group_of[u] != root for u in state.users.get(pnode.name, [])):
        return False
    mine, theirs = state.members[root], state.members[producer]
    if len(mine) + len(theirs) > max_ops:
        return False
    rnode = nodes[root]
    if (pnode.ann.stream, pnode.ann.backend) != (rnode.ann.stream, rnode.ann.backend):
        return False
    if state.row_prologues and _joins_row_products(state, root, producer):
        return False
    anchors = _joined_anchors(state.anchors[root], state.anchors[producer])
    if anchors is None:
        return False
    union = sorted(mine + theirs)
    plan, _ = plan_region([nodes[j] for j in union], state.types)
    if plan is None:
        return False
    if plan.kind == PRODUCT and plan.prologue and plan.anchor is not None:
        anchor = nodes[next(j for j in union if nodes[j].name == plan.anchor)]
        by_name = {nodes[j].name: nodes[j] for j in union}
        limit = state.elementwise_prologue_max_k
        if any(by_name[p].op in NORM_OPS for p in plan.prologue):
            limit = state.prologue_max_k
        if state.types[anchor.operands[0]].shape[-1] > limit:
            return False
    if state.planned and not _memory_allows(state, root, union):
        return False
    for j in theirs:
        state.group_of[j] = root
    state.members[root] = union
    state.anchors[root] = anchors
    del state.members[producer], state.anchors[producer]
    return True


def _anchor_counts(node: Node, types: dict[str, TensorType]) -> tuple[int, int, int]:
    """(anchors, products, norms) of a group of the one fusable `node`."""
    if is_elementwise(node):
        return (0, 0, 0)
    return (1, int(is_anchor(node, types) == PRODUCT), int(node.op in NORM_OPS))


def _joined_anchors(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> tuple[int, int, int] | None:
    """The anchor counts of two groups' union, or None where `plan_region` refuses it for them:
    more than one anchor, unless one product and norms (its row prologue)."""
    anchors, products, norms = a[0] + b[0], a[1] + b[1], a[2] + b[2]
    if anchors > 1 and not (products == 1 and anchors == 1 + norms):
        return None
    return anchors, products, norms


def _row_product_root(state: _State, i: int) -> bool:
    """Node `i` is a one-row product, or the root of a group anchored on one."""
    group = [state.graph.nodes[j] for j in state.members.get(i, [i])]
    for node in group:
        if node.op == "matmul" and len(node.operands) == 2:
            a, b = (state.types[o] for o in node.operands)
            if one_row_product(node, a, b) is not None:
                return True
    return False


def _joins_row_products(state: _State, root: int, producer: int) -> bool:
    """The elementwise group at `root` reads two one-row products (one of them `producer`) and
    feeds, as its only reader, the row of another one-row product: SwiGLU's
    `mul(silu(x @ wg), x @ wu) @ wd`. Absorbed as the epilogue of one product it would order that
    product after the other; left alone, it becomes the consumer's prologue and the two products
    stay independent (their launches can merge into one)."""
    nodes = state.graph.nodes
    # The cheapest tests first: the root's one reader, a one-row product reading it as its row.
    readers = state.users.get(nodes[root].name, [])
    if len(readers) != 1 or nodes[root].name in state.outputs:
        return False
    reader = nodes[readers[0]]
    if reader.op != "matmul" or reader.operands[0] != nodes[root].name:
        return False
    a, b = (state.types[o] for o in reader.operands)
    if a.shape[-1] > state.elementwise_prologue_max_k or one_row_product(reader, a, b) is None:
        return False
    group = state.members[root]
    if not all(is_elementwise(nodes[j]) for j in group) or not _row_product_root(state, producer):
        return False
    others = [
        state.producers[o]
        for o in _outside_operands(state, group)
        if o in state.producers and state.producers[o] != producer
    ]
    return any(_row_product_root(state, p) for p in others)


def _grow(state: _State, root: int, max_ops: int) -> None:
    merged = True
    while merged:
        merged = False
        for operand in _outside_operands(state, state.members[root]):
            p = state.producers.get(operand)
            if p is None or state.group_of[p] is None or state.group_of[p] != p:
                continue
            if _try_absorb(state, root, p, max_ops):
                merged = True
                break


def _param_names(count: int, taken: set[str]) -> list[str]:
    names: list[str] = []
    k = 0
    while len(names) < count:
        candidate = f"p{k}"
        if candidate not in taken:
            names.append(candidate)
        k += 1
    return names


def fused_node(
    nodes: Sequence[Node], outside: Sequence[str], copies: dict[str, str] | None = None
) -> Node:
    """The `fused` node computing `nodes` (issue order, root last) from the `outside` values.
    `copies`: {norm copy: original} of `recompute_row_norms`; inside the body each copy takes
    its original's name back (`restored_names`)."""
    root = nodes[-1]
    params = _param_names(len(outside), {n.name for n in nodes})
    rename = dict(zip(outside, params))
    restore = restored_names([n.name for n in nodes], copies) if copies else {}
    rename.update(restore)  # body names: never an outside value, never a parameter's name
    body = tuple(
        n.with_fields(
            name=restore.get(n.name, n.name),
            operands=tuple(rename.get(o, o) for o in n.operands),
            ann=NO_ANNOTATIONS,
        )
        for n in nodes
    )
    return Node(
        name=root.name,
        op="fused",
        operands=tuple(outside),
        type=root.type,
        ann=root.ann,
        body=Region(tuple(params), body, restore.get(root.name, root.name)),
        span=root.span,
        operand_spans=(),
    )


@dataclass(frozen=True)
class FusePass(Pass):
    name = "fuse"
    summary = "group producer-consumer chains into fused regions (one kernel each)"
    max_ops: int = 64
    row_prologues: bool = True
    prologue_max_k: int = 2048
    elementwise_prologue_max_k: int = 2048

    def __post_init__(self) -> None:
        if self.max_ops < 1:
            raise ValueError(f"max-ops must be at least 1, got {self.max_ops}")

    def run(self, graph: Graph) -> Graph:
        planned = any(n.ann.offset is not None for n in graph.nodes)
        copies: dict[str, str] = {}
        if self.row_prologues and not planned:
            graph, copies = recompute_row_norms(graph, self.prologue_max_k)
        types = graph.value_types()
        state = _State(
            graph=graph,
            types=types,
            users=graph.users(),
            producers=graph.producers(),
            outputs=frozenset(graph.output_names()),
            group_of=[None] * len(graph.nodes),
            members={},
            anchors={},
            planned=planned,
            hb=happens_before(graph) if planned else None,
            ranges=_arena_ranges(graph, types) if planned else {},
            row_prologues=self.row_prologues,
            prologue_max_k=self.prologue_max_k,
            elementwise_prologue_max_k=self.elementwise_prologue_max_k,
        )
        if planned:
            _index_arena(state)
        for i, node in graph.compute_nodes():
            if not (is_elementwise(node) or is_anchor(node, types) is not None):
                continue
            state.group_of[i] = i
            state.members[i] = [i]
            state.anchors[i] = _anchor_counts(node, types)
            _grow(state, i, self.max_ops)
        regions = {root: group for root, group in state.members.items() if len(group) > 1}
        if not regions:
            return graph
        absorbed = {j for root, group in regions.items() for j in group if j != root}
        had_lifetimes = any(
            n.ann.live is not None or n.ann.visible is not None for n in graph.nodes
        )
        out: list[Node] = []
        for i, node in enumerate(graph.nodes):
            if i in absorbed:
                continue
            if i in regions:
                group = regions[i]
                outside = _outside_operands(state, group)
                node = fused_node([graph.nodes[j] for j in group], outside, copies)
            if had_lifetimes:
                node = node.with_ann(live=None, visible=None)
            out.append(node)
        return graph.with_nodes(out)
