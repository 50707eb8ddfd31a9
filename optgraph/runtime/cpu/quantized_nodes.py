"""Nodes that read quantized weights, evaluated with the CPU kernels (`runtime/cpu/quantized.py`)
instead of the reference's whole dequantization; every other node as the reference does.

    evaluate_quantized(node, args, types)            # like reference evaluate_node
    write_quantized(node, args, types, out) -> bool  # straight into `out` where it can

Four ops read quantized operands (the verifier's rule), each with its kernel:

    %y = matmul(%x, %w) {transpose_b = true}   x f32/f16/bf16 [..., M, K], w q*[N, K]
                                               -> quantized_matmul, rounded to x's dtype
    %r = get_rows(%table, %ids)                -> quantized_rows (f32, as the reference)
    %v = dequantize(%w) {dtype = ...}          -> dequantize_blocks, rounded to the dtype
    %y = moe(%x, %logits, %gate, %up, %down)    -> the reference's routing, each selected
                                               expert's products by quantized_matmul on its
                                               stored rows (float stacks: NumPy's)

A fused node is evaluated through its body, node by node (each rounded to its type, as the
reference does), its quantized readers by the kernels. Gathers and dequantize are the
reference's bits; a product's sums run in another order (its bound: `quantized.py`). The
planned executor uses this with `quantized="native"`, the CUDA runtime's CPU nodes always.

Does not handle: ops other than these four reading quantized operands (none exist; such a
node would take the reference's path, dequantizing whole).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optgraph.errors import InputError, VerifyError
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_with_defaults, infer_type
from optgraph.reference.interpreter import evaluate_node, numpy_dtype
from optgraph.reference.moe import ExpertProduct, stored_moe
from optgraph.runtime.cpu.quantized import dequantize_blocks, quantized_matmul, quantized_rows

__all__ = ["evaluate_quantized", "reads_quantized", "write_quantized"]

# Ops that move a quantized value's bytes as they are: no values read.
_MOVES_BYTES = frozenset({"copy", "prefetch"})


def reads_quantized(node: Node, types: Sequence[TensorType]) -> bool:
    """Whether `node` (or a node of its fused body) reads the values of a quantized operand."""
    if node.op in _MOVES_BYTES:
        return False
    return any(t.is_quantized for t in types)


def evaluate_quantized(
    node: Node,
    args: Sequence[np.ndarray],
    types: Sequence[TensorType],
    *,
    threads: int | None = None,
) -> np.ndarray:
    """The value of `node` (as `reference.interpreter.evaluate_node`), its quantized reads by
    the CPU kernels."""
    if not reads_quantized(node, types):
        return evaluate_node(node, args, types)
    if node.op == "fused":
        return _fused(node, args, types, threads)
    result = node.type or infer_type(node, types)
    out = np.empty(result.shape, np.float32)
    if not _into(node, args, types, out, threads):
        return evaluate_node(node, args, types)
    return out.astype(numpy_dtype(result.dtype), copy=False)


def write_quantized(
    node: Node,
    args: Sequence[np.ndarray],
    types: Sequence[TensorType],
    out: np.ndarray,
    *,
    threads: int | None = None,
) -> bool:
    """Compute `node` straight into `out` (C-contiguous float32 of the node's shape) when it is
    a product, gather or dequantize of a quantized operand with an f32 result; False (nothing
    written) otherwise."""
    result = node.type or infer_type(node, types)
    if not reads_quantized(node, types) or node.op == "fused" or result.dtype != "f32":
        return False
    if out.dtype != np.float32 or out.shape != result.shape or not out.flags.c_contiguous:
        return False
    return _into(node, args, types, out, threads)


def _into(
    node: Node,
    args: Sequence[np.ndarray],
    types: Sequence[TensorType],
    out: np.ndarray,
    threads: int | None,
) -> bool:
    """The kernel of `node` into the float32 `out` (its result's shape); False for a node no
    kernel computes."""
    attrs = attrs_with_defaults(node)
    if node.op == "matmul" and types[1].is_quantized and not types[0].is_quantized:
        x, w = args[0], types[1]
        if attrs["transpose_a"]:
            x = np.swapaxes(x, -1, -2)
        n, k = w.shape
        quantized_matmul(x, args[1], w.dtype, n, k, threads=threads, out=out)
        return True
    if node.op == "get_rows" and types[0].is_quantized:
        table = types[0]
        try:
            quantized_rows(args[0], table.dtype, args[1], table.shape[-1], threads=threads,
                           out=out)  # fmt: skip
        except InputError as err:  # the id out of range, at the node
            raise InputError(err.message, node.span) from None
        return True
    if node.op == "moe":
        out[...] = stored_moe(node, args, types, attrs, _expert_product(threads))
        return True
    if node.op == "dequantize" and types[0].is_quantized:
        w = types[0]
        dequantize_blocks(args[0], w.dtype, w.shape, threads=threads, out=out)
        return True
    return False


def _expert_product(threads: int | None) -> ExpertProduct:
    """A moe expert's product on its stored rows: the quantized kernel for a quantized stack
    (never the expert's whole matrix decoded), NumPy's for a float one."""

    def product(rows: np.ndarray, stack: np.ndarray, t: TensorType, e: int) -> np.ndarray:
        n, k = t.shape[1:]
        if t.is_quantized:
            return quantized_matmul(rows, stack[e], t.dtype, n, k, threads=threads)
        return rows @ np.asarray(stack[e], np.float32).T

    return product


def _fused(
    node: Node, args: Sequence[np.ndarray], types: Sequence[TensorType], threads: int | None
) -> np.ndarray:
    """A fused node's body node by node, as the reference evaluates it."""
    if node.body is None:
        raise VerifyError("fused: missing body", node.span)
    env = dict(zip(node.body.params, args))
    env_types = dict(zip(node.body.params, types))
    for inner in node.body.nodes:
        inner_types = [env_types[o] for o in inner.operands]
        inner_args = [env[o] for o in inner.operands]
        env[inner.name] = evaluate_quantized(inner, inner_args, inner_types, threads=threads)
        env_types[inner.name] = inner.type or infer_type(inner, inner_types)
    return env[node.body.result]
