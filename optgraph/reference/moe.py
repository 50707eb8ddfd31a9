# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""The reference semantics of `moe` (docs/ir.md, "moe"): routing, then the selected experts.

    %y = moe(%x, %logits, %gate, %up, %down) {k = 2, norm_topk = true} : f32[T,H]

Routing, per token, in float32 (`route`):

- `softmax_topk`: p = softmax(logits) over all E; the k largest p (ties: the lower expert
  first; a NaN counts as the smallest); with `norm_topk` each of the k divided by their sum;
- `topk_softmax`: the k largest logits (the same order), then a softmax over those k.

Then for each token t and slot j (expert e = ids[t, j], weight w = weights[t, j]):
`h = act(x[t] @ gate_eᵀ) * (x[t] @ up_eᵀ)`, `y_j = h @ down_eᵀ`, and `y[t] = Σ_j w·y_j`, summed
in slot order (largest weight first), all in float32; the caller rounds to the node's dtype.
With biases each product adds its expert's row (`x[t] @ gate_eᵀ + gate_bias[e]`, ...,
`y_j = h @ down_eᵀ + down_bias[e]`); `act = "swiglu_oai"` takes gate and up together:
`g = min(gate, limit)`, `u = clip(up, -limit, limit)`, `h = g · sigmoid(alpha · g) · (u + 1)`.

A node with `experts = [lo, hi]` holds experts lo..hi-1 (stack row e - lo): routing is the same
over all E logits, and the slots whose expert lies outside [lo, hi) are left out of the sum. So
over a partition of 0..E-1 the parts add up to the whole node (bit for bit where each token's
selected experts fall in one part, within float32 rounding of the reordered sum otherwise).

The expert stacks are read as stored (`stored_moe`): only the experts some token selected are
decoded (a quantized expert dequantized, an f16/bf16 one widened), one at a time, with every
token that selected it as the rows of its products. A decode step decodes k experts' matrices,
never all E. Cost: O(T·E) routing, O(T·k·H·F) products, O(used experts' F·H) decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import ml_dtypes
import numpy as np

from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.op_rules_moe import EXPERTS_AT, expert_range, stack_count
from optgraph.reference import elementwise
from optgraph.reference.dequantize import dequantize

__all__ = ["ExpertProduct", "expert_matrix", "gated", "moe", "route", "stored_moe"]

F32 = np.float32
Attrs = Mapping[str, AttrValue]
# rows [R, K] (float32) times the transpose of one expert's matrix [N, K] of a stack stored as
# the given type (its blocks' bytes when quantized), the expert given by its row of the stack:
# float32 [R, N]. The reference decodes the matrix (`expert_matrix`); the CPU runtime passes
# its kernels on the stored blocks.
ExpertProduct = Callable[[np.ndarray, np.ndarray, TensorType, int], np.ndarray]
_WIDE = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """The k largest of each row, largest first; ties: the lower index first; NaN last."""
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k]


def route(
    logits: np.ndarray, k: int, routing: str, norm_topk: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(expert ids `int64 [T,k]`, weights `float32 [T,k]`) of each token's router logits."""
    logits = np.asarray(logits, F32)
    if routing == "softmax_topk":
        probs = _softmax(logits)
        ids = _top(probs, k)
        weights = np.take_along_axis(probs, ids, axis=-1)
        if norm_topk:
            weights = weights / np.sum(weights, axis=-1, keepdims=True)
        return ids, weights
    if routing == "topk_softmax":
        ids = _top(logits, k)
        return ids, _softmax(np.take_along_axis(logits, ids, axis=-1))
    raise ValueError(f"moe: unknown routing {routing!r}")


def _activation(g: np.ndarray, act: str) -> np.ndarray:
    if act == "silu":
        return elementwise.silu(g)
    if act == "gelu":
        return elementwise.gelu(g, "none")
    if act == "gelu_tanh":
        return elementwise.gelu(g, "tanh")
    raise ValueError(f"moe: unknown act {act!r}")


def gated(g: np.ndarray, u: np.ndarray, attrs: Attrs) -> np.ndarray:
    """The gated rows `act(g) * u` (float32) of attributes `attrs` (`act`, `limit`, `alpha`)."""
    act = attrs["act"]
    assert isinstance(act, str)
    if act != "swiglu_oai":
        return np.asarray(_activation(g, act) * u, F32)
    limit, alpha = attrs["limit"], attrs["alpha"]
    assert isinstance(limit, float) and isinstance(alpha, float)
    g = np.minimum(g, F32(limit))
    u = np.clip(u, F32(-limit), F32(limit))
    return np.asarray(g * elementwise.sigmoid(F32(alpha) * g) * (u + F32(1)), F32)


def expert_matrix(stack: np.ndarray, t: TensorType, e: int) -> np.ndarray:
    """Expert e of a stack stored as `t` (its blocks' bytes when quantized): float32
    `t.shape[1:]`, decoding that expert alone."""
    if t.is_quantized:
        return dequantize(stack[e], t.dtype, t.shape[1:])
    return np.asarray(stack[e], F32)


def stored_moe(
    node: Node,
    args: Sequence[np.ndarray],
    types: Sequence[TensorType],
    attrs: Attrs,
    product: ExpertProduct | None = None,
) -> np.ndarray:
    """The value of moe node `node` (float32), its expert stacks `args[2:]` as stored; an
    expert's three products by `product` when given (else each matrix decoded, then NumPy's)."""
    x = np.asarray(args[0], F32 if args[0].dtype in _WIDE else args[0].dtype)
    k, routing = attrs["k"], attrs["routing"]
    assert isinstance(k, int) and isinstance(routing, str)
    ids, weights = route(np.asarray(args[1], F32), k, routing, bool(attrs["norm_topk"]))
    held_stacks = EXPERTS_AT + stack_count(len(args))
    stacks = list(zip(args[EXPERTS_AT:held_stacks], types[EXPERTS_AT:held_stacks]))
    biases = [np.asarray(b, F32) for b in args[held_stacks:]]
    tokens, hidden = x.shape
    ffn = types[held_stacks - 1].shape[2]
    lo, hi = expert_range(attrs, args[1].shape[1])
    y = np.zeros((tokens, k, hidden), F32)
    for e in np.unique(ids):
        if not lo <= e < hi:
            continue  # another part's expert
        rows, slots = np.nonzero(ids == e)
        xs = x[rows]
        row = int(e) - lo
        y[rows, slots] = _expert(product, xs, stacks, biases, row, ffn, attrs)
    held = (ids >= lo) & (ids < hi)
    out = np.zeros((tokens, hidden), F32)
    for j in range(k):
        # A slot of another part adds nothing (not even 0 · y: its y is never computed here).
        out += np.where(held[:, j, None], weights[:, j, None] * y[:, j], F32(0))
    return out


def _expert(
    product: ExpertProduct | None,
    xs: np.ndarray,
    stacks: Sequence[tuple[np.ndarray, TensorType]],
    biases: Sequence[np.ndarray],
    row: int,
    ffn: int,
    attrs: Attrs,
) -> np.ndarray:
    """One expert's output for the rows `xs`, its products by `product` (None: each matrix
    decoded, then NumPy's), each plus its bias row when the node has biases (one a stack, in
    the stacks' order)."""

    def plus_bias(out: np.ndarray, i: int) -> np.ndarray:
        return out + biases[i][row] if biases else out

    def times(rows: np.ndarray, i: int) -> np.ndarray:
        if product is None:
            return plus_bias(rows @ expert_matrix(*stacks[i], row).T, i)
        return plus_bias(np.asarray(product(rows, *stacks[i], row), F32), i)

    if len(stacks) == 2 and product is None:  # the decoded gate_up's halves, each a product
        gate_up = expert_matrix(*stacks[0], row)
        bias = biases[0][row] if biases else np.zeros(2 * ffn, F32)
        g = xs @ gate_up[:ffn].T + bias[:ffn]
        u = xs @ gate_up[ffn:].T + bias[ffn:]
    elif len(stacks) == 2:
        gate_up = times(xs, 0)
        g, u = gate_up[:, :ffn], gate_up[:, ffn:]
    else:
        g, u = times(xs, 0), times(xs, 1)
    return times(gated(g, u, attrs), len(stacks) - 1)


def moe(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    """The kernel of `reference.kernels.KERNELS`: every operand a float array (the interpreter
    itself calls `stored_moe` with the operands' types, quantized stacks as their bytes)."""
    types = [TensorType(elementwise.ir_dtype(a.dtype) or "f32", tuple(a.shape)) for a in args]
    return stored_moe(node, args, types, attrs)
