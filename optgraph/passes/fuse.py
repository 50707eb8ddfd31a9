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
w buffers sharing its bytes. One walk over the nodes and operands classifies them and finds
the readers; the norm copies go past the graph's own nodes, so no index moves. Whether a union
makes one kernel is decided once per shape of region (its nodes' ops, attributes, types and
wiring): a model's repeated layers plan each shape once. Region bodies are made of the original
nodes re-wired (`Node.with_fields`), so verify and the cost model keep what they inferred.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

from optgraph.analysis.fusion_rules import (
    ANCHOR_OPS,
    ELEMENTWISE_OPS,
    NORM_OPS,
    PRODUCT,
    is_anchor,
    one_row_product,
)
from optgraph.analysis.happens_before import HappensBefore, happens_before
from optgraph.analysis.region_shapes import RegionShapes
from optgraph.analysis.row_norm_copies import append_copies, restored_names, row_norm_copies
from optgraph.ir.graph import NO_ANNOTATIONS, Graph, Node, Region, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.passes.base import Pass

# A group's (anchors, products, norms) among its members: a union that `plan_region` would
# refuse for its anchors alone is refused without building it.
Counts = tuple[int, int, int]


@dataclass
class _State:
    """The grouping built while walking the graph once. Nodes are named by their index in
    `nodes`: the graph's, then the norm copies of `row-prologues` (`append_copies`)."""

    nodes: list[Node]
    types: dict[str, TensorType]
    # Readers of each fusable node's result (a node reading it twice, twice; the tests that read
    # them ask whether all are in a group, or which is the one).
    readers: dict[str, list[int]]
    producers: dict[str, int]
    outputs: frozenset[str]
    group_of: list[int]  # the root of each node's group; -1 outside every group
    members: dict[int, list[int]]  # per group root: its nodes, in issue order
    anchors: dict[int, Counts]  # per group root
    shapes: RegionShapes
    planned: bool = False
    hb: HappensBefore | None = None
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # arena bytes (planned)
    alias_base: dict[str, str] = field(default_factory=dict)  # view -> value owning its bytes
    owners: list[tuple[int, int, int]] = field(default_factory=list)  # (start, end, node index)
    starts: list[int] = field(default_factory=list)  # owners' starts, sorted
    max_size: int = 0
    row_prologues: bool = True
    elementwise_prologue_max_k: int = 2048
    overlaps: dict[str, list[int]] = field(default_factory=dict)
    # Place in issue order of each norm copy (appended to `nodes` past the graph's own nodes).
    positions: dict[int, float] = field(default_factory=dict)


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


def _index_arena(state: _State, graph: Graph) -> None:
    """Sort the nodes that own arena bytes by offset, for overlap queries."""
    state.alias_base = {name: root for name, (root, _) in alias_roots(graph).items()}
    for i, node in graph.compute_nodes():
        if node.ann.offset is not None and node.name not in state.alias_base:
            start = node.ann.offset
            state.owners.append((start, start + state.types[node.name].nbytes, i))
    state.owners.sort()
    state.starts = [start for start, _, _ in state.owners]
    state.max_size = max((end - start for start, end, _ in state.owners), default=0)


def _outside_operands(nodes: Sequence[Node], group: Sequence[int]) -> list[str]:
    """The distinct values the group reads from outside, in first-use order."""
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
    out = state.ranges.get(state.nodes[root].name)
    inside = set(union)
    for operand in _outside_operands(state.nodes, union):
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
    """Merge the group rooted at `producer`, every reader of which is in the group rooted at
    `root` (`_grow` tested it), into the latter, if allowed.

    Every test before the merge only reads: the cheapest run first."""
    nodes = state.nodes
    pnode = nodes[producer]
    if pnode.name in state.outputs:
        return False
    mine, theirs = state.members[root], state.members[producer]
    if len(mine) + len(theirs) > max_ops:
        return False
    pann, rann = pnode.ann, nodes[root].ann
    if pann.stream != rann.stream or pann.backend != rann.backend:
        return False
    anchors = _joined_anchors(state.anchors[root], state.anchors[producer])
    if anchors is None:
        return False
    if (
        state.row_prologues
        and state.anchors[root][0] == 0  # `_joins_row_products` holds for elementwise groups only
        and _joins_row_products(state, root, producer)
    ):
        return False
    union = sorted(mine + theirs)
    if state.positions and union[-1] in state.positions:  # a norm copy: sort by issue order
        union.sort(key=lambda j: state.positions.get(j, j))
    if not state.shapes.is_one_kernel(union):
        return False
    if state.planned and not _memory_allows(state, root, union):
        return False
    group_of = state.group_of
    for j in theirs:
        group_of[j] = root
    state.members[root] = union
    state.anchors[root] = anchors
    del state.members[producer], state.anchors[producer]
    return True


_ELEMENTWISE_COUNTS: Counts = (0, 0, 0)


def _fusable(
    nodes: Sequence[Node], types: dict[str, TensorType]
) -> tuple[dict[int, Counts], dict[str, list[int]]]:
    """The (anchors, products, norms) of a group of each fusable node alone, by index, and the
    readers of each fusable node's result, in issue order. One walk: a value is defined before
    it is read. O(V + E)."""
    counts: dict[int, Counts] = {}
    readers: dict[str, list[int]] = {}
    get = readers.get
    for i, node in enumerate(nodes):
        for operand in node.operands:
            found = get(operand)
            if found is not None:
                found.append(i)
        op = node.op
        if op in ELEMENTWISE_OPS:
            counts[i] = _ELEMENTWISE_COUNTS
            readers[node.name] = []
        elif op in ANCHOR_OPS:
            kind = is_anchor(node, types)
            if kind is not None:
                counts[i] = (1, int(kind == PRODUCT), int(op in NORM_OPS))
                readers[node.name] = []
    return counts, readers


def _joined_anchors(a: Counts, b: Counts) -> Counts | None:
    """The anchor counts of two groups' union, or None where `plan_region` refuses it for them:
    more than one anchor, unless one product and norms (its row prologue)."""
    anchors, products, norms = a[0] + b[0], a[1] + b[1], a[2] + b[2]
    if anchors > 1 and not (products == 1 and anchors == 1 + norms):
        return None
    return anchors, products, norms


def _row_product_root(state: _State, i: int) -> bool:
    """Node `i` is a one-row product, or the root of a group anchored on one."""
    for j in state.members.get(i, [i]):
        node = state.nodes[j]
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
    nodes = state.nodes
    # The cheapest tests first: the root's one reader, a one-row product reading it as its row.
    name = nodes[root].name
    readers = state.readers[name]
    if len(readers) != 1 or name in state.outputs:
        return False
    reader = nodes[readers[0]]
    if reader.op != "matmul" or reader.operands[0] != name:
        return False
    a, b = (state.types[o] for o in reader.operands)
    if a.shape[-1] > state.elementwise_prologue_max_k or one_row_product(reader, a, b) is None:
        return False
    if state.anchors[root][0] or not _row_product_root(state, producer):  # not elementwise
        return False
    group = state.members[root]
    others = [
        state.producers[o]
        for o in _outside_operands(nodes, group)
        if o in state.producers and state.producers[o] != producer
    ]
    return any(_row_product_root(state, p) for p in others)


def _grow(state: _State, root: int, max_ops: int) -> None:
    """Absorb producer groups into the group at `root` until none more may join.

    Tries the producers of the group's outside operands in first-use order, again from the
    first after each merge. A producer read twice is tried twice: a refused merge changes
    nothing, so the second try is refused too, and costs less than removing repeats. The
    first test, that every reader of the producer is in the group (most producers fail it),
    runs here."""
    nodes, producers, readers = state.nodes, state.producers, state.readers
    group_of, members = state.group_of, state.members
    merged = True
    while merged:
        merged = False
        for j in members[root]:
            for operand in nodes[j].operands:
                p = producers.get(operand)
                # the group's own members have group_of == root != p (the root reads none)
                if p is None or group_of[p] != p:
                    continue
                for u in readers[operand]:  # a group root is fusable: its readers are known
                    if group_of[u] != root:
                        break
                else:
                    if _try_absorb(state, root, p, max_ops):
                        merged = True
                        break
            if merged:
                break


_PARAMS = tuple(f"p{k}" for k in range(16))  # the usual parameter names, made once


def _param_names(count: int, names: Sequence[str]) -> list[str]:
    """`count` names p0, p1, ... that are none of the body's `names`."""
    if count <= len(_PARAMS) and _PARAM_SET.isdisjoint(names):
        return list(_PARAMS[:count])
    taken = set(names)
    params: list[str] = []
    k = 0
    while len(params) < count:
        candidate = f"p{k}"
        if candidate not in taken:
            params.append(candidate)
        k += 1
    return params


_PARAM_SET = frozenset(_PARAMS)


def fused_node(
    nodes: Sequence[Node], outside: Sequence[str], copies: dict[str, str] | None = None
) -> Node:
    """The `fused` node computing `nodes` (issue order, root last) from the `outside` values.
    `copies`: {norm copy: original} (`row_norm_copies`); inside the body each copy takes
    its original's name back (`restored_names`)."""
    root = nodes[-1]
    names = [n.name for n in nodes]
    params = _param_names(len(outside), names)
    rename = dict(zip(outside, params))
    restore = restored_names(names, copies) if copies else {}
    rename.update(restore)  # body names: never an outside value, never a parameter's name
    get = rename.get
    body = tuple(
        [
            n.with_fields(
                name=restore.get(name, name),
                operands=tuple([get(o, o) for o in n.operands]),
                ann=NO_ANNOTATIONS,
            )
            for n, name in zip(nodes, names)
        ]
    )
    # Made field by field, as the parser makes nodes: a frozen dataclass's __init__ costs
    # several times more, and fuse makes one region and one node per group.
    region = object.__new__(Region)
    region.__dict__.update(
        params=tuple(params), nodes=body, result=restore.get(root.name, root.name)
    )
    node = object.__new__(Node)
    node.__dict__.update(
        name=root.name,
        op="fused",
        operands=tuple(outside),
        attrs={},
        type=root.type,
        ann=root.ann,
        body=region,
        span=root.span,
        operand_spans=(),
    )
    return node


def _rebuilt(
    state: _State, order: Sequence[int], copies: dict[str, str], had_lifetimes: bool
) -> list[Node]:
    """The nodes after fusion, in issue `order`: each region of two or more nodes one `fused`
    node at its root."""
    nodes = state.nodes
    fused = {
        root: fused_node([nodes[j] for j in group], _outside_operands(nodes, group), copies)
        for root, group in state.members.items()
        if len(group) > 1
    }
    group_of = state.group_of
    # A node stays unless absorbed into the region of another root; a root becomes its region.
    out = [fused.get(i) or nodes[i] for i in order if group_of[i] == i or group_of[i] == -1]
    if had_lifetimes:
        out = [node.with_ann(live=None, visible=None) for node in out]
    return out


def _annotated(graph: Graph) -> tuple[bool, bool]:
    """Whether the graph's memory is planned (a node has an offset), and whether a node has
    a live range (`live` or `visible`). Most nodes have no annotation at all before scheduling:
    the shared empty one is passed over at once."""
    planned = lifetimes = False
    for node in graph.nodes:
        ann = node.ann
        if ann is NO_ANNOTATIONS:
            continue
        planned = planned or ann.offset is not None
        lifetimes = lifetimes or ann.live is not None or ann.visible is not None
    return planned, lifetimes


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
        planned, had_lifetimes = _annotated(graph)
        types = graph.value_types()  # a copy: the norm copies' types are added to it
        nodes = list(graph.nodes)
        counts, readers = _fusable(nodes, types)
        state = _State(
            nodes=nodes,
            types=types,
            readers=readers,
            producers=graph.producers(),
            outputs=frozenset(graph.output_names()),
            group_of=[],
            members={},
            anchors={},
            shapes=RegionShapes(nodes, types, self.prologue_max_k, self.elementwise_prologue_max_k),
            planned=planned,
            row_prologues=self.row_prologues,
            elementwise_prologue_max_k=self.elementwise_prologue_max_k,
        )
        order: Sequence[int] = range(len(nodes))
        walk: Sequence[int] = list(counts)  # the fusable nodes in issue order
        copies: dict[str, str] = {}
        if self.row_prologues and not planned:
            norms = [i for i, count in counts.items() if count[2]]
            made = row_norm_copies(graph, types, readers, norms, self.prologue_max_k)
            if made:
                appended = append_copies(nodes, made, types, readers, state.producers, counts)
                order, walk, copies = appended.order, appended.walk, appended.copies
                state.positions = appended.positions
        state.group_of = [-1] * len(nodes)
        if planned:
            state.hb = happens_before(graph)
            state.ranges = _arena_ranges(graph, types)
            _index_arena(state, graph)
        group_of, members, anchors = state.group_of, state.members, state.anchors
        for i in walk:
            group_of[i] = i
            members[i] = [i]
            anchors[i] = counts[i]
            _grow(state, i, self.max_ops)
        if all(len(group) == 1 for group in members.values()):
            return graph.with_nodes([nodes[i] for i in order]) if copies else graph
        return graph.with_nodes(_rebuilt(state, order, copies, had_lifetimes))
