"""Lowering of a grouped-products expert dispatch the moe op cannot express into gathered
products (a rule of `raising`, after `routed_experts`): transformers' default `grouped_mm`
experts whose gate is not moe's (gpt-oss: biases, a clamped SwiGLU, stacks stored `[E,H,2F]`
with gate and up interleaved) import as the written ops transformers' `batched_mm` experts give.

    %v, %perm = aten.sort(%ids)            ->  %v: %ids itself, %perm: arange(S)
    %o = grouped_mm_fallback(%rows, %W, %offsets)      (W [E,K,N]: rows offs[i-1]:offs[i] by W[i])
        ->  %g = get_rows(reshape(%W) : [E,K·N], %ids) ; %o = matmul(%rows : [S,1,K], %g :
            [S,K,N]) : [S,N]          (W = transpose(stack): the stack gathered, transpose_b)
    %inv = aten.index_put(%any, [%perm], %values)  ->  %values    (perm is the identity now)

The dispatch sorts the T·k (token, slot) pairs by expert only so that each expert's rows are
consecutive for its grouped product; its result does not depend on the order (the pairs are
put back by the inverse permutation). With the identity order each pair's product reads its own
expert's matrix, gathered: the cone is re-emitted at the root with those three replacements.
Matched as `raising_moe` matches: the root is the weighted sum over the k slots of `[T,k,H]`,
the leaves x, ids, w (any weights besides), and the re-emitted cone must equal the source's cone
on probe values (random x, k distinct experts per token, w and every weight; the source ops run
by `moe_dispatch`). Not handled: several sorts, a sort of more than one axis, index_put with
accumulation or other indices, grouped products without offsets. Cost at run time: each pair
gathers its expert's K·N matrix (T·k of them), as `batched_mm` does.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.frontends.moe_dispatch import DISPATCH_KERNELS
from optgraph.frontends.raising_moe import (
    SORTS,
    Leaves,
    close,
    leaf_choices,
    probe_stack,
    root_sizes,
    sort_keys,
    tolerance,
)
from optgraph.frontends.raising_probe import probe
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.reference.kernels import numpy_dtype

Producers = dict[str, Node]

GROUPED = ("transformers.grouped_mm_fallback.default", "aten._grouped_mm.default")
PROBES = 4  # leaf choices tried per root, at most


class _Refused(Exception):
    """The cone holds what this lowering does not re-emit."""


class _Copy:
    """The cone re-emitted: new nodes, and the new name of each old value."""

    def __init__(self, draft: Draft, root: Node, ids: str) -> None:
        self.draft, self.root, self.ids = draft, root, ids
        self.nodes: list[Node] = []
        self.names: dict[str, str] = {}

    def name(self, old: str) -> str:
        return self.names.get(old, old)

    def add(self, op: str, operands: list[str], t: TensorType, attrs: dict[str, AttrValue],
            name: str | None = None) -> str:  # fmt: skip
        new = name or self.draft.fresh(f"{self.root.name}.dense")
        self.nodes.append(Node(new, op, tuple(operands), attrs, t, span=self.root.span))
        return new

    def reshaped(self, value: str, t: TensorType, shape: tuple[int, ...]) -> str:
        if t.shape == shape:
            return value
        return self.add("reshape", [value], t.with_shape(shape), {"shape": shape})


def _gathered_product(copy: _Copy, node: Node, producers: Producers) -> str:
    """`grouped_mm(rows, W, offs)` as each row times its own expert's gathered matrix."""
    draft = copy.draft
    rows, stack = node.operands[0], node.operands[1]
    rows_t, w_t = draft.type_of(rows), draft.type_of(stack)
    assert node.type is not None
    if rows_t.rank != 2 or w_t.rank != 3:
        raise _Refused("grouped products of other ranks")
    pairs, (experts, depth, width) = rows_t.shape[0], w_t.shape
    source = producers.get(stack)
    transposed = source is not None and source.op == "transpose"
    if transposed and source is not None and source.attrs.get("perm") == (0, 2, 1):
        stack = source.operands[0]  # gather the stored stack: [E,N,K], read transposed
        w_t = draft.type_of(stack)
    else:
        transposed = False
    flat = copy.reshaped(copy.name(stack), w_t, (experts, depth * width))
    gathered = copy.add("get_rows", [flat, copy.ids], w_t.with_shape((pairs, depth * width)), {})
    matrices = copy.reshaped(gathered, w_t.with_shape((pairs, depth * width)),
                             (pairs, *w_t.shape[1:]))  # fmt: skip
    one = copy.reshaped(copy.name(rows), rows_t, (pairs, 1, depth))
    attrs: dict[str, AttrValue] = {"transpose_b": True} if transposed else {}
    product = copy.add("matmul", [one, matrices], node.type.with_shape((pairs, 1, width)), attrs)
    return copy.reshaped(product, node.type.with_shape((pairs, 1, width)), node.type.shape)


def _keys_are_ids(keys: str, ids: str, producers: Producers) -> bool:
    """Whether the sort's keys are the ids leaf, perhaps reshaped."""
    while keys != ids:
        node = producers.get(keys)
        if node is None or node.op != "reshape":
            return False
        keys = node.operands[0]
    return True


def _needed(root: Node, cone: list[Node], identity_of: set[str]) -> set[str]:
    """The cone's nodes the re-emitted root reads: not the sort's counts and offsets, which
    only the grouped products read (`identity_of`: the sort's index results)."""
    by_name = {n.name: n for n in cone}
    needed = {root.name}
    for node in reversed(cone):
        if node.name not in needed:
            continue
        reads: tuple[str, ...] = node.operands
        if node.op in GROUPED:
            reads = node.operands[:2]
        elif node.op in SORTS:
            reads = ()
        elif node.op == "aten.index_put.default":
            if node.operands[1] not in identity_of or node.attrs.get("accumulate", False):
                raise _Refused("index_put at other indices")
            reads = node.operands[2:]
        needed.update(o for o in reads if o in by_name)
    return needed


def _rewritten(draft: Draft, root: Node, leaves: Leaves, producers: Producers) -> list[Node]:
    """The cone with the sort, the grouped products and the index_put replaced (docstring)."""
    sorts = [n for n in leaves.cone if n.op in SORTS]
    if len({n.operands[0] for n in sorts}) != 1 or not any(n.op in GROUPED for n in leaves.cone):
        raise _Refused("one sort and grouped products")
    keys = sorts[0].operands[0]
    keys_t = draft.type_of(keys)
    if keys_t.rank != 1 or not _keys_are_ids(keys, leaves.ids, producers):
        raise _Refused("a sort of the ids alone, one axis")
    indices = {n.name for n in sorts if n.attrs.get("result", 0) == 1}
    needed = _needed(root, leaves.cone, indices)
    copy = _Copy(draft, root, keys)
    identity = draft.constant(np.arange(keys_t.shape[0], dtype=np.int64), "order")
    for node in leaves.cone:
        assert node.type is not None
        if node.name not in needed:
            continue
        if node.op in SORTS:
            copy.names[node.name] = identity if node.name in indices else keys
        elif node.op in GROUPED:
            copy.names[node.name] = _gathered_product(copy, node, producers)
        elif node.op == "aten.index_put.default":
            if draft.type_of(node.operands[2]) != node.type:
                raise _Refused("index_put of values shaped otherwise")
            copy.names[node.name] = copy.name(node.operands[2])
        elif node.op.startswith(("aten.", "transformers.")):
            raise _Refused(f"{node.op} in the dispatch")
        else:
            name = root.name if node.name == root.name else None
            operands = [copy.name(o) for o in node.operands]
            copy.names[node.name] = copy.add(node.op, operands, node.type, dict(node.attrs), name)
    if not copy.nodes or copy.nodes[-1].name != root.name:
        raise _Refused("a root the lowering does not compute itself")
    return copy.nodes


def _probe_inputs(
    draft: Draft, leaves: Leaves, sizes: tuple[int, int, int]
) -> dict[str, np.ndarray]:
    tokens, k, hidden = sizes
    rng = np.random.default_rng(36)
    arrays: dict[str, np.ndarray] = {}
    for name in leaves.weights:
        t = draft.type_of(name)
        if name in leaves.stacks:
            arrays[name] = probe_stack(t.shape, t.dtype, rng)
        else:
            arrays[name] = (rng.standard_normal(t.shape) * 0.5).astype(numpy_dtype(t.dtype))
    ids = np.stack([rng.permutation(leaves.experts)[:k] for _ in range(tokens)])
    drawn = {leaves.ids: ids, leaves.w: rng.uniform(0.5, 1.5, (tokens, k))}
    drawn[leaves.x] = rng.standard_normal((tokens, hidden))
    for name, value in drawn.items():
        t = draft.type_of(name)
        arrays[name] = value.reshape(t.shape).astype(numpy_dtype(t.dtype))
    return arrays


def dense_experts(draft: Draft, node: Node, producers: Producers) -> list[Node] | None:
    """The rule: a grouped-products dispatch ending at `node` as gathered products."""
    sizes = root_sizes(draft, node)
    if sizes is None:
        return None
    keys = sort_keys(node, producers)
    if not keys:
        return None
    probes = 0
    for leaves in leaf_choices(draft, node, producers, sizes, expert_weights=True, ids=keys):
        try:
            nodes = _rewritten(draft, node, leaves, producers)
        except _Refused:
            continue
        probes += 1
        if probes > PROBES:
            return None
        inputs = _probe_inputs(draft, leaves, sizes)
        try:
            with np.errstate(all="ignore"):
                want = probe(draft, leaves.cone, inputs, DISPATCH_KERNELS)
                got = probe(draft, nodes, inputs)
        except (ValueError, IndexError):
            continue
        t = node.type
        assert t is not None
        wide = (got.astype(np.float64), want.astype(np.float64))
        if close(*wide, tolerance(t.dtype)):
            return nodes
    return None
