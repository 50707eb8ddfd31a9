"""One-row product kernels generated once per structure while a graph is lowered.

A model's layers repeat the same products: `lower_cuda` of a 3,850-layer decode graph asks
`product_kernel.one_row_kernel` for 30k kernels of a handful of distinct texts, and generating them
was the largest part of the lowering's time. Inside `remembered()` (which `lower_cuda` enters),
a kernel is generated once per *structure*: the region with its names replaced by their
positions, the operands' types, the weights that are resident, the fold, and the two flags that
shape the layout (L2 prefetch ahead, most splits of K). Another node of the same structure gets
the same kernel; a split-K kernel's workspace, named after its node, is renamed for the new node:

    l0: %q = fused(%x0, %wq0) {...}   l1: %q1 = fused(%x1, %wq1) {...}   (same shapes, same body)
    ->  l0's kernel generated; l1's is l0's text with og_ws_<l0's digest> -> og_ws_<l1's digest>
        (and its name re-hashed); without splits the kernel is l0's itself

Outside `remembered()` nothing is kept. The memo lives for one lowering, so module settings
that benchmarks change between lowerings (`product_kernel.EARLY_WEIGHTS`, ...) are never served
stale. `tests/codegen/test_one_row_kernel_cache.py` checks that lowering with and without it gives
the same CUDA source byte for byte.

Complexity: O(size of the region) for a key, one dictionary lookup a product.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple

from optgraph.codegen.cuda_source import Kernel, kernel_template
from optgraph.codegen.kernels.one_row.epilogues import OneRowFold
from optgraph.codegen.kernels.one_row.geometry import Geometry
from optgraph.codegen.kernels.one_row.lane_reduce import workspace_digest
from optgraph.ir.graph import Node, TensorType

Made = tuple[Kernel, tuple[int, int, int], Geometry]  # a kernel, its grid and its layout


class OneRowInputs(NamedTuple):
    """What a one-row product kernel is made from (`product_kernel.one_row_kernel` says what each
    is): the region's params and their types, its product (anchor), epilogue, result and
    result type, the prologue of its row, the params bound to resident weights, the store's
    fold, whether it brings its weights into L2 ahead, its most splits of K, and whether a rope
    reads its result (the layout a rope fold needs)."""

    params: Sequence[str]
    types: Sequence[TensorType]
    anchor: Node
    epilogue: Sequence[Node]
    result: str
    out_type: TensorType
    prologue: Sequence[Node] = ()
    resident: frozenset[str] = frozenset()
    fold: OneRowFold | None = None
    l2_ahead: bool = False
    most_splits: int | None = None
    rope_pairs: bool = False


class _Memo(threading.local):
    """The current lowering's kernels by structure, one memo a thread (ranks of a several-GPU
    program may be lowered in threads); None outside `remembered()`."""

    kernels: dict[Hashable, tuple[str, Made | None]] | None = None


_MEMO = _Memo()


@contextmanager
def remembered() -> Iterator[None]:
    """Inside the block, kernels of one structure are generated once (see the module
    docstring); the memo is dropped at its end. Nested blocks share the outer one's."""
    if _MEMO.kernels is not None:
        yield
        return
    _MEMO.kernels = {}
    try:
        yield
    finally:
        _MEMO.kernels = None


def kernel_name(salt: str, g: Geometry, decl: str, template: str) -> str:
    """The name of a one-row product kernel: a hash of its text, and of its node where it has
    a workspace (split-K), so that two nodes never share one."""
    family = f"gemv|{salt}" if g.splits > 1 else "gemv"
    return "og_gemv_" + hashlib.sha1(f"{family}\n{decl}{template}".encode()).hexdigest()[:12]


def structure_key(inputs: OneRowInputs) -> Hashable | None:
    """What `product_kernel.one_row_kernel`'s text depends on, without names: the params by position,
    the region's nodes by position (op, operands, attributes, type), the operand and result
    types, the resident params, the fold, `l2_ahead`, `most_splits` and `rope_pairs`. None where
    a node holds a region of its own (not keyed)."""
    names = {p: f"%p{k}" for k, p in enumerate(inputs.params)}
    nodes = (*inputs.prologue, inputs.anchor, *inputs.epilogue)
    for k, node in enumerate(nodes):
        names.setdefault(node.name, f"%n{k}")
    if any(node.body is not None for node in nodes):
        return None
    shaped = tuple(_node_key(node, names) for node in nodes)
    placed = (
        len(inputs.prologue),
        len(inputs.epilogue),
        names.get(inputs.result, "=" + inputs.result),
    )
    held = tuple(sorted(names[p] for p in inputs.resident if p in names))
    flags = (inputs.l2_ahead, inputs.most_splits, inputs.rope_pairs)
    return (
        tuple(inputs.types),
        inputs.out_type,
        shaped,
        placed,
        held,
        _fold_key(inputs.fold),
        flags,
    )


def _node_key(node: Node, names: Mapping[str, str]) -> Hashable:
    operands = tuple(names.get(o, "=" + o) for o in node.operands)
    return (names.get(node.name, "=" + node.name), node.op, operands, _attrs(node), node.type)


def _attrs(node: Node) -> Hashable:
    return tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))


def _fold_key(fold: OneRowFold | None) -> Hashable:
    """A fold's fields, its rope node by op, attributes and type (its operands are the graph's
    values, which the kernel reads through the fold's parameters, not by name)."""
    if fold is None:
        return None
    rope = None if fold.rope is None else (fold.rope.op, _attrs(fold.rope), fold.rope.type)
    return (
        fold.head_dim,
        rope,
        fold.seq,
        fold.cache,
        fold.pos_dtype,
        fold.write_pos_dtype,
        fold.pos_is_input,
    )


def recall(
    key: Hashable | None, salt: str, build: Callable[[str], Made | None]
) -> tuple[Kernel, tuple[int, int, int]] | None:
    """The kernel and grid for `salt` (the node's name): `build(salt)` the first time its
    structure `key` is seen inside `remembered()` (always outside it, or with no key), else the
    remembered kernel, its workspace renamed for `salt` where it has one."""
    memo = _MEMO.kernels
    if memo is None or key is None:
        made = build(salt)
        return None if made is None else made[:2]
    seen = memo.get(key)
    if seen is None:
        made = build(salt)
        memo[key] = (salt, made)
        return None if made is None else made[:2]
    first, made = seen
    if made is None:
        return None
    kernel, grid, g = made
    if g.splits == 1 or first == salt:
        return kernel, grid
    return _renamed(kernel, g, first, salt), grid


def _renamed(kernel: Kernel, g: Geometry, first: str, salt: str) -> Kernel:
    """`kernel` (generated for node `first`) with its workspace and name those of `salt`."""
    assert kernel.body is not None and kernel.params is not None and len(kernel.decls) == 1
    old, new = workspace_digest(first, g), workspace_digest(salt, g)
    body = kernel.body.replace(old, new)
    decl = kernel.decls[0].replace(old, new)
    template = kernel_template(kernel.params, body, kernel.bounds, kernel.early, kernel.self_wait)
    name = kernel_name(salt, g, decl, template)
    return Kernel.assemble(
        name, kernel.params, body, (decl,), kernel.bounds, kernel.early, kernel.self_wait
    )
