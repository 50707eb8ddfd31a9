"""What a fused region may contain, and how its kernel is laid out: shared by `fuse` and codegen.

A region is a list of nodes in issue order whose last node (the *root*) produces the region's one
result. `plan_region` says whether the nodes form a region optgraph can emit as ONE kernel and, if
so, how: a `RegionPlan` with its kind, its anchor and which nodes run before/after the anchor.

- `elementwise`: only elementwise ops. Every node's shape broadcasts to the root's shape, so the
  kernel evaluates the whole body once per output element (elementwise ops commute with
  broadcasting: an operand of shape [64] read by an output of shape [4,64] is indexed by column).
- `reduction`: one reduction-category anchor (sum, mean, max over trailing axes; softmax over the
  last axis; rms_norm; layer_norm) with an elementwise *prologue* (nodes the anchor depends on,
  evaluated per element of the anchor's input, e.g. a residual add) and an elementwise *epilogue*
  (every other node, evaluated per output element, e.g. mul by a weight, cast). One block per row.
- `product`: one matmul or conv2d anchor, an elementwise epilogue (bias, activation, residual
  add) evaluated per output element after the product. A one-row product (`one_row_product`,
  the matrix-vector kernel of decode steps) also takes a *prologue* on its row operand:
  elementwise nodes and at most one norm of the whole row (rms_norm, layer_norm), which the
  kernel computes as it reads the row (statistics first, one block reduction).
- `siblings` (made by `fuse-siblings`): several one-row products (`one_row_product`) of the same
  input row, as *segments*: each segment is one or more products of the same width plus an
  elementwise epilogue combining them (SwiGLU's `mul(silu(x@wg), x@wu)`); the root is either the
  one segment's value or `concat` of the segments' values along the last axis (q/k/v). One
  matrix-vector kernel computes every segment (`codegen/kernels/one_row/sibling_kernel.py`).

A value computed before the anchor is not read after it (the row kernel computes the two phases
in different loops; the value stays a buffer of its own instead).

Broadcast rule (each violation blocks fusion): every epilogue node broadcasts to the root's shape;
every prologue node broadcasts to the anchor's input shape; the anchor's own shape is the root's
shape: a reduction or product is never broadcast further inside the region (that would need its
result at several output elements before it is complete, a second pass).

Complexity: O(n + e) for a region of n nodes and e operand edges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optgraph.ir.graph import EVENT_OPS, Node, Region, TensorType
from optgraph.ir.op_rules import broadcast_shapes
from optgraph.ir.ops import attrs_with_defaults, get_op, op_names

ELEMENTWISE = "elementwise"
REDUCTION = "reduction"
PRODUCT = "product"
SIBLINGS = "siblings"
ONE_ROW_VECTOR = {"f16": 8, "bf16": 8, "f32": 4}  # elements per 16-byte load of a weight row
REDUCE_OPS = frozenset({"sum", "mean", "max"})
ROW_OPS = frozenset({"softmax", "log_softmax", "rms_norm", "layer_norm"})
NORM_OPS = frozenset({"rms_norm", "layer_norm"})
PRODUCT_OPS = frozenset({"matmul", "conv2d"})


@dataclass(frozen=True)
class Segment:
    """Part of a `siblings` region: its products (matmul names), epilogue (issue order), the
    value it yields and that value's width (the products' N)."""

    products: tuple[str, ...]
    epilogue: tuple[str, ...]
    value: str
    cols: int


@dataclass(frozen=True)
class RegionPlan:
    """How one region runs: its kind, anchor node name (None for elementwise) and phases.

    `prologue` and `epilogue` are body node names in issue order; the anchor is in neither.
    For a reduction, `rows` x `cols` is the anchor input viewed as a matrix (cols = reduced size).
    """

    kind: str
    anchor: str | None
    prologue: tuple[str, ...]
    epilogue: tuple[str, ...]
    rows: int = 1
    cols: int = 1
    segments: tuple[Segment, ...] = ()


# The op table is a literal: its elementwise ops, looked up once (fuse asks for every node of
# every candidate region). No event op is in the table.
ELEMENTWISE_OPS = frozenset(
    name for name in op_names() if getattr(get_op(name), "category", None) == "elementwise"
)
ANCHOR_OPS = PRODUCT_OPS | ROW_OPS | REDUCE_OPS  # what `is_anchor` may accept


assert not ELEMENTWISE_OPS & (ANCHOR_OPS | EVENT_OPS)


def is_elementwise(node: Node) -> bool:
    return node.op in ELEMENTWISE_OPS  # never an event (asserted above)


def reduction_cols(node: Node, x: TensorType) -> int | None:
    """Number of reduced elements per row when `node` reduces trailing axes of `x`, else None."""
    if node.op in ("rms_norm", "layer_norm"):
        return x.shape[-1] if x.rank else None
    attrs = attrs_with_defaults(node)
    if node.op in ("softmax", "log_softmax"):
        axis = int(attrs["axis"])  # type: ignore[arg-type]
        return x.shape[-1] if x.rank and axis % x.rank == x.rank - 1 else None
    if node.op in REDUCE_OPS:
        axes_attr = attrs.get("axes")
        axes = (
            tuple(range(x.rank))
            if axes_attr is None
            else tuple(sorted(a % x.rank for a in axes_attr))  # type: ignore[union-attr]
        )
        if axes != tuple(range(x.rank - len(axes), x.rank)):
            return None
        cols = 1
        for a in axes:
            cols *= x.shape[a]
        return cols
    return None


def is_anchor(node: Node, types: Mapping[str, TensorType]) -> str | None:
    """The region kind `node` can anchor (REDUCTION or PRODUCT), or None."""
    if node.op in PRODUCT_OPS:
        # A product by a quantized weight is its own kernel (codegen/kernels/quantized.py: the
        # blocks decoded in registers), which takes no prologue nor epilogue: never a region's.
        if any(o in types and types[o].is_quantized for o in node.operands):
            return None
        return PRODUCT
    if (node.op in ROW_OPS or node.op in REDUCE_OPS) and node.operands:
        x = types[node.operands[0]]
        cols = reduction_cols(node, x)
        if cols is not None and cols > 0:
            return REDUCTION
    return None


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """`shape` broadcasts to `target` without changing `target`."""
    return broadcast_shapes(shape, target) == tuple(target)


def plan_region(
    nodes: Sequence[Node], types: Mapping[str, TensorType]
) -> tuple[RegionPlan | None, str]:
    """(plan, "") when `nodes` (issue order, root last) make one kernel, else (None, reason).

    `types` gives the type of every value the nodes read or define.
    """
    if not nodes:
        return None, "empty region"
    root = nodes[-1]
    assert root.type is not None
    out = root.type.shape
    names = {n.name for n in nodes}
    anchors: list[tuple[Node, str]] = []
    for n in nodes:
        if n.op in ELEMENTWISE_OPS:  # never an anchor: no anchor op is one
            continue
        kind = is_anchor(n, types)
        if kind is not None:
            anchors.append((n, kind))
        else:
            return None, f"'{n.op}' cannot be fused"
    products = [a for a in anchors if a[1] == PRODUCT]
    row_norms = [a for a in anchors if a[0].op in NORM_OPS]
    if len(anchors) > 1 and not (len(products) == 1 and len(anchors) == 1 + len(row_norms)):
        return None, "more than one reduction or matrix product"
    if not anchors:
        for n in nodes:
            assert n.type is not None
            if not broadcasts_to(n.type.shape, out):
                return None, f"'%{n.name}' {n.type} does not broadcast to the result {root.type}"
        return RegionPlan(ELEMENTWISE, None, (), tuple(n.name for n in nodes)), ""
    anchor, kind = products[0] if products else anchors[0]  # norms before a product: prologue
    assert anchor.type is not None
    if anchor.type.shape != tuple(out):
        return None, f"'%{anchor.name}' {anchor.type} would be broadcast to {root.type}"
    # The prologue: region nodes the anchor depends on (walk back from the anchor's operands).
    index = {n.name: i for i, n in enumerate(nodes)}
    feeds: set[str] = set()
    stack = [o for o in anchor.operands if o in names]
    while stack:
        name = stack.pop()
        if name in feeds:
            continue
        feeds.add(name)
        stack.extend(o for o in nodes[index[name]].operands if o in names)
    prologue = tuple(n.name for n in nodes if n.name in feeds)
    epilogue = tuple(n.name for n in nodes if n.name not in feeds and n is not anchor)
    for name in epilogue:
        t = nodes[index[name]].type
        assert t is not None
        if not broadcasts_to(t.shape, out):
            return None, f"'%{name}' {t} does not broadcast to the result {root.type}"
        if any(o in feeds for o in nodes[index[name]].operands):
            return None, f"'%{name}' after the anchor reads a value computed before it"
        if not is_elementwise(nodes[index[name]]):
            return None, "more than one reduction or matrix product"
    if kind == PRODUCT:
        if prologue:
            reason = _row_prologue_reason(anchor, [nodes[index[n]] for n in prologue], types)
            if reason:
                return None, reason
        if anchor.type.dtype != root.type.dtype:
            return None, "a matrix-product epilogue keeps the product's dtype"
        return RegionPlan(PRODUCT, anchor.name, prologue, epilogue), ""
    x = types[anchor.operands[0]]
    for name in prologue:
        t = nodes[index[name]].type
        assert t is not None
        if not broadcasts_to(t.shape, x.shape):
            return None, f"'%{name}' {t} does not broadcast to the reduced operand {x}"
    cols = reduction_cols(anchor, x)
    assert cols is not None
    rows = x.numel // cols if cols else 0
    return RegionPlan(REDUCTION, anchor.name, prologue, epilogue, rows, cols), ""


def _row_prologue_reason(
    anchor: Node, prologue: Sequence[Node], types: Mapping[str, TensorType]
) -> str:
    """Why `prologue` cannot run inside the product `anchor`, or "" when it can.

    Only a one-row product (`one_row_product`: the matrix-vector kernel reads its row element by
    element) takes a prologue, and only for its row operand: elementwise nodes broadcasting to
    the row, and at most one norm (rms_norm, layer_norm) of the whole row whose weight and bias
    come from outside the region (the kernel computes the row's statistics first, then each
    element as it reads it).
    """
    names = {n.name for n in prologue}
    if anchor.op != "matmul" or len(anchor.operands) != 2 or anchor.operands[1] in names:
        return "a matrix product takes a prologue only on its row operand"
    a, b = types[anchor.operands[0]], types[anchor.operands[1]]
    if one_row_product(anchor, a, b) is None:
        return "only a one-row matrix product takes a prologue"
    norms = [n for n in prologue if n.op in NORM_OPS]
    if len(norms) > 1:
        return "a product prologue holds at most one norm"
    for n in prologue:
        assert n.type is not None
        if n in norms:
            x = types[n.operands[0]]
            if x.numel != a.numel or reduction_cols(n, x) != a.shape[-1]:
                return f"'%{n.name}' does not normalize the product's whole row"
            if any(o in names for o in n.operands[1:]):
                return f"'%{n.name}': a prologue norm's weight and bias come from outside"
        elif not is_elementwise(n):
            return f"'{n.op}' cannot be fused"
        elif not broadcasts_to(n.type.shape, a.shape) or n.type.numel != a.numel:
            return f"'%{n.name}' {n.type} does not match the product's row {a}"
    return ""


def one_row_product(node: Node, a: TensorType, b: TensorType) -> tuple[int, int] | None:
    """(K, N) when `node` is `[1.., K] @ [K, N]`: one row, no transposes, 2-D `b`, both in
    f32/f16/bf16 and N a multiple of a 16-byte load; else None. Remembered on the node for
    these operand types (fuse asks for the same products once per candidate region)."""
    if node.op != "matmul" or node.type is None:
        return None
    facts = node.type_facts()
    memo = facts.get("one_row_product")
    if memo is not None and memo[0] == (a, b):
        found: tuple[int, int] | None = memo[1]
        return found
    found = _one_row_product(node, a, b)
    facts["one_row_product"] = ((a, b), found)
    return found


def _one_row_product(node: Node, a: TensorType, b: TensorType) -> tuple[int, int] | None:
    assert node.type is not None
    attrs = attrs_with_defaults(node)
    if attrs["transpose_a"] or attrs["transpose_b"] or b.rank != 2 or a.rank < 1:
        return None
    if a.dtype not in ONE_ROW_VECTOR or b.dtype != a.dtype:
        return None
    k, n = b.shape
    if k < 1 or a.numel != k or a.shape[-1] != k or n % ONE_ROW_VECTOR[a.dtype]:
        return None
    if node.type.numel != n:
        return None
    return k, n


def _cone(value: str, index: Mapping[str, int], nodes: Sequence[Node]) -> set[str]:
    """Body values `value` depends on, itself included."""
    seen: set[str] = set()
    stack = [value]
    while stack:
        name = stack.pop()
        if name in seen or name not in index:
            continue
        seen.add(name)
        stack.extend(nodes[index[name]].operands)
    return seen


def plan_siblings(
    nodes: Sequence[Node], types: Mapping[str, TensorType]
) -> tuple[RegionPlan | None, str]:
    """(plan, "") when `nodes` form a `siblings` region (see the module docstring), else
    (None, reason). Every product reads the same parameter row, with one K and one dtype."""
    root = nodes[-1]
    assert root.type is not None
    index = {n.name: i for i, n in enumerate(nodes)}
    if root.op == "concat":
        rank = root.type.rank
        axis = int(attrs_with_defaults(root)["axis"])  # type: ignore[arg-type]
        if rank < 2 or axis % rank != rank - 1 or any(d != 1 for d in root.type.shape[:-1]):
            return None, "siblings: concat must join one-row values along the last axis"
        values, inner = list(root.operands), list(nodes[:-1])
    else:
        values, inner = [root.name], list(nodes)
    if len(set(values)) != len(values) or any(v not in index for v in values):
        return None, "siblings: each segment yields a distinct body value"
    segments: list[Segment] = []
    covered: set[str] = set()
    row: tuple[str, int, str] | None = None  # (input parameter, K, dtype) shared by all products
    for value in values:
        cone = _cone(value, index, nodes)
        if cone & covered:
            return None, "siblings: segments share a body value"
        covered |= cone
        vtype = nodes[index[value]].type
        assert vtype is not None
        products, epilogue = [], []
        for n in inner:
            if n.name not in cone:
                continue
            if n.op == "matmul":
                if any(o in index for o in n.operands):
                    return None, "siblings: a product reads a value computed in the region"
                shape = one_row_product(n, types[n.operands[0]], types[n.operands[1]])
                if shape is None or n.type is None or n.type != vtype:
                    return None, f"siblings: '%{n.name}' is not a one-row product of the segment"
                key = (n.operands[0], shape[0], n.type.dtype)
                if row is not None and key != row:
                    return None, "siblings: products read different rows, K or dtypes"
                row = key
                products.append(n.name)
            elif is_elementwise(n):
                assert n.type is not None
                if not broadcasts_to(n.type.shape, vtype.shape):
                    return None, f"siblings: '%{n.name}' {n.type} does not broadcast to {vtype}"
                epilogue.append(n.name)
            else:
                return None, f"siblings: '{n.op}' cannot be fused"
        if not products:
            return None, f"siblings: segment '%{value}' has no product"
        segments.append(Segment(tuple(products), tuple(epilogue), value, vtype.shape[-1]))
    if len(covered) != len(inner):
        return None, "siblings: a body value feeds no segment"
    if sum(len(s.products) for s in segments) < 2:
        return None, "siblings: fewer than two products"
    epilogues = tuple(e for s in segments for e in s.epilogue)
    return RegionPlan(SIBLINGS, None, (), epilogues, segments=tuple(segments)), ""


def plan_body(body: Region, operand_types: Sequence[TensorType]) -> RegionPlan:
    """The plan of an existing fused node's body (ValueError when it is not one kernel)."""
    types: dict[str, TensorType] = dict(zip(body.params, operand_types))
    for n in body.nodes:
        assert n.type is not None
        types[n.name] = n.type
    if not body.nodes or body.nodes[-1].name != body.result:
        raise ValueError("fused region must yield its last body node")
    plan, reason = plan_region(body.nodes, types)
    if plan is None:
        plan, _ = plan_siblings(body.nodes, types)  # on failure, plan_region's reason says more
    if plan is None:
        raise ValueError(f"fused region is not one kernel: {reason}")
    return plan


def product_operands(node: Node, types: Mapping[str, TensorType]) -> tuple[str, str, Node] | None:
    """(row operand, weight operand, the matmul) of a product node: a plain matmul, or a fused
    region whose product (its anchor) reads both from the region's parameters; None otherwise.

        %y = fused(%x, %w, %b) { %mm = matmul(%p0, %p1)  %t = add(%mm, %p2) }  ->  (%x, %w, %mm)
    """
    if node.op == "matmul" and len(node.operands) == 2:
        return node.operands[0], node.operands[1], node
    if node.op != "fused" or node.body is None:
        return None
    try:
        plan = plan_body(node.body, [types[o] for o in node.operands])
    except ValueError:
        return None
    if plan.kind != PRODUCT or plan.anchor is None:
        return None
    anchor = next(n for n in node.body.nodes if n.name == plan.anchor)
    params = dict(zip(node.body.params, node.operands))
    if anchor.op != "matmul" or any(o not in params for o in anchor.operands[:2]):
        return None
    return params[anchor.operands[0]], params[anchor.operands[1]], anchor
