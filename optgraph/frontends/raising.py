"""Raising: patterns an importer produced, rewritten into optgraph's fast ops.

Each rule looks at one root node of a `Draft` and, when the pattern behind it matches, replaces
the root by fast ops that define the same name; the pattern's other nodes die at `Draft.finish`
unless something else reads them. Rules (applied in this order, each over the whole draft):

- `rms_norm`: `mul(mul(x, rsqrt(add(mean(mul(x, x), [-1], keepdims), eps))), w)` (also with
  `div(x, sqrt(...))`, operands either way round, `w` of shape `[D]`) -> `rms_norm(x, w) {eps}`;
  for an f16 / bf16 `x` also the norm computed on `cast(x, f32)` and cast back before `w`
  (rms_norm rounds once, after `w`, where that form rounds before it too: within one ulp).
- `gelu`: a `mul` computed elementwise from one value `x` and scalar constants through `erf` (or
  `tanh`) is evaluated on probe values; when it equals GELU (exact or tanh) it becomes
  `gelu(x) {approximate}`. So every spelling of the formula raises, none that differs does.
- `silu` (raising_silu.py): `mul(x, sigmoid(x))`, how the ONNX exporter writes SiLU ->
  `silu(x)`.
- `rope`: `add(mul(x, cos(e)·a), mul(concat(neg(x[..., D/2:]), x[..., :D/2]), sin(e)·a))` where
  the angles `e` are computed from one integer input `pos` and constants only: the frequencies
  (the angles at position 1) are fitted to a scaling (`rope_tables`), the factor `a` is the
  length of (cos, sin), and the tables on other probe positions must equal that rope's ->
  `rope(x', pos) {theta, scaling, ...}`, with `x` transposed to `[B,S,H,D]` and back when it is
  `[B,H,S,D]` (read directly when it is a transpose of one); tables computed in f32 and cast
  to f16 / bf16 are judged before the cast; then `concat(rope(x[..., :r]), x[..., r:])` ->
  `rope(x) {rotary_dim = r}` (`raising_partial_rope`). Before it, `half_table_rope`
  (raising_half_rope.py) rewrites gpt-oss's spelling, `concat(x1·c − x2·s, x2·c + x1·s)` with
  half-width tables, into that rotate-half one (the same values).
- `written_out_attention` (raising_attention.py): `matmul(softmax(q·kᵀ·c + mask), v)`, as eager
  attention and the ONNX exporter write it -> `attention(q, k, v [, mask]) {scale}`; with a
  sink column in the softmax (gpt-oss) -> `attention(q, k, v, sinks [, mask]) {sinks = true}`.
- `attention_kv_len` (raise_attention_masks.py): a decode step's mask computed from its one
  position input -> `attention {causal, window}` over `kv_len = pos + c` keys.
- `row_attention_kv_len` (raise_row_masks.py): a batch decode step's mask computed from its
  position per row -> `attention {causal, window}` over `kv_len = pos + c` keys, per row.
- `shared_kv_heads` (raising_gqa.py): keys and values repeated to the query heads
  (transformers' `repeat_kv`: reshape, expand, reshape) -> the attention reads them unrepeated.
- `routed_experts` (raising_moe.py): a mixture-of-experts block's dispatch (transformers'
  grouped_mm or batched_mm experts) and its router's top k -> `moe(x, logits, stacks) {k, ...}`.
- `dense_experts` (raising_dense_experts.py): a grouped_mm dispatch the moe op cannot express
  (gpt-oss's experts) -> each (token, slot) pair's product with its own gathered expert.

Before/after (rms_norm)::

    %sq = mul(%x, %x); %m = mean(%sq) {axes=[-1], keepdims=true}; %a = add(%m, %eps)
    %r = rsqrt(%a); %n = mul(%x, %r); %y = mul(%n, %w)
    ->  %y = rms_norm(%x, %w) {eps = 1e-06}

Not handled: norms over several axes, rope with interleaved (GPT-J) pairs, rope whose positions
differ between batch rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.frontends.positions_first import positions_first
from optgraph.frontends.raise_attention_masks import attention_kv_len
from optgraph.frontends.raise_row_masks import row_attention_kv_len
from optgraph.frontends.raising_attention import written_out_attention
from optgraph.frontends.raising_constant_rope import constant_table_rope, rope_layout
from optgraph.frontends.raising_dense_experts import dense_experts
from optgraph.frontends.raising_gqa import shared_kv_heads
from optgraph.frontends.raising_half_rope import half_table_rope
from optgraph.frontends.raising_moe import routed_experts
from optgraph.frontends.raising_partial_rope import partial_rope
from optgraph.frontends.raising_probe import (
    PSEUDO_KERNELS,
    ancestors,
    known_value,
    probe,
    producer_of,
    scalar_value,
)
from optgraph.frontends.raising_silu import written_out_silu
from optgraph.frontends.rope_tables import rope_attributes, table_tolerance
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.op_rules_rope import rope_frequencies
from optgraph.reference.elementwise import erf
from optgraph.reference.kernels import KERNELS, numpy_dtype

Rule = Callable[[Draft, Node, dict[str, Node]], list[Node] | None]

_ELEMENTWISE = frozenset(
    {"add", "sub", "mul", "div", "neg", "exp", "tanh", "sqrt", "rsqrt", "pow", "scale", "erf"}
)
_GELU_PROBE = np.linspace(-6.0, 6.0, 97, dtype=np.float32)


def raise_patterns(draft: Draft) -> None:
    """Apply every rule, in order, to the whole draft (in place); then move position arithmetic
    to the front (`positions_first`)."""
    rules = (
        _rms_norm,
        _gelu,
        written_out_silu,
        half_table_rope,
        _rope,
        partial_rope,
        written_out_attention,
        attention_kv_len,
        row_attention_kv_len,
        shared_kv_heads,
        routed_experts,
        dense_experts,
    )
    for rule in rules:
        producers = {n.name: n for n in draft.nodes}
        rewritten: list[Node] = []
        for node in draft.nodes:
            replacement = rule(draft, node, producers)
            if replacement is None:
                rewritten.append(node)
                continue
            rewritten.extend(replacement)
            producers.update((n.name, n) for n in replacement)
            draft.types.update((n.name, n.type) for n in replacement if n.type is not None)
        draft.nodes = rewritten
    positions_first(draft)


def _pairs(node: Node) -> Sequence[tuple[str, str]]:
    a, b = node.operands
    return ((a, b), (b, a))


# -- rms_norm -----------------------------------------------------------------------------------


def _last_axis_mean(node: Node | None, rank: int) -> bool:
    if node is None or not node.attrs.get("keepdims"):
        return False
    axes = node.attrs.get("axes", ())
    return isinstance(axes, tuple) and axes in ((-1,), (rank - 1,))


def _rms_parts(draft: Draft, name: str, producers: dict[str, Node]) -> tuple[str, float] | None:
    """(x, eps) when `name` is x normalized by its root mean square."""
    node = producers.get(name)
    if node is None or node.op not in ("mul", "div"):
        return None
    candidates = _pairs(node) if node.op == "mul" else [tuple(node.operands)]
    for x, other in candidates:
        inverse = producer_of(producers, other, "rsqrt" if node.op == "mul" else "sqrt")
        shifted = inverse and producer_of(producers, inverse.operands[0], "add")
        if not shifted:
            continue
        for mean_name, eps_name in _pairs(shifted):
            eps = scalar_value(draft, eps_name)
            mean = producer_of(producers, mean_name, "mean")
            square = mean and producer_of(producers, mean.operands[0], "mul")
            x_type = draft.type_of(x)
            if eps is None or not square or not _last_axis_mean(mean, x_type.rank):
                continue
            if square.operands == (x, x):
                return x, eps
    return None


def _narrowed_rms_parts(
    draft: Draft, name: str, producers: dict[str, Node], dtype: str
) -> tuple[str, float] | None:
    """(x, eps) when `name` is `cast(rms(cast(x, f32)), dtype)`: a norm computed in f32 for an
    f16 / bf16 `x` of `dtype` (transformers' LlamaRMSNorm) -- or a plain one."""
    narrowed = producer_of(producers, name, "cast")
    if narrowed is None:
        return _rms_parts(draft, name, producers)
    parts = _rms_parts(draft, narrowed.operands[0], producers)
    widened = parts and producer_of(producers, parts[0], "cast")
    if not parts or not widened or draft.type_of(widened.operands[0]).dtype != dtype:
        return None
    return widened.operands[0], parts[1]


def _rms_norm(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    if node.op != "mul" or node.type is None:
        return None
    for normalized, w in _pairs(node):
        parts = _narrowed_rms_parts(draft, normalized, producers, node.type.dtype)
        if parts is None:
            continue
        x, eps = parts
        x_type, w_type = draft.type_of(x), draft.type_of(w)
        if w_type != TensorType(x_type.dtype, (x_type.shape[-1],)) or x_type != node.type:
            continue
        return [Node(node.name, "rms_norm", (x, w), {"eps": eps}, node.type, span=node.span)]
    return None


# -- gelu ----------------------------------------------------------------------------------------


def _elementwise_cone(
    draft: Draft, root: Node, producers: dict[str, Node], x: str | None = None, limit: int = 16
) -> tuple[set[str], list[Node]] | None:
    """(leaves, nodes): the elementwise nodes computing `root`, stopping at `x` and constants."""
    cone: dict[str, Node] = {}
    leaves: set[str] = set()
    stack = [root.name]
    while stack:
        name = stack.pop()
        if name in cone or name in leaves or scalar_value(draft, name) is not None:
            continue
        node = producers.get(name)
        if name != x and node is not None and node.op in _ELEMENTWISE:
            if len(cone) >= limit:
                return None
            cone[name] = node
            stack.extend(node.operands)
        else:
            leaves.add(name)
    return leaves, [n for n in draft.nodes if n.name in cone]


def _single_source_cones(
    draft: Draft, root: Node, producers: dict[str, Node]
) -> Iterator[tuple[str, list[Node]]]:
    """Each (x, nodes) such that `root` is computed elementwise from x and scalar constants."""
    widest = _elementwise_cone(draft, root, producers, limit=64)
    if widest is None:
        return
    candidates = [
        o for n in reversed(widest[1]) for o in n.operands if draft.type_of(o) == root.type
    ]
    for x in dict.fromkeys(candidates):
        found = _elementwise_cone(draft, root, producers, x)
        if found is not None and found[0] == {x}:
            yield x, found[1]


def _gelu_reference(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)).astype(np.float64))


def _gelu(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    if node.op not in ("mul", "scale") or node.type is None or node.type.dtype != "f32":
        return None
    for x, cone in _single_source_cones(draft, node, producers):
        ops = {n.op for n in cone}
        approximate = "none" if "erf" in ops else "tanh" if "tanh" in ops else None
        if approximate is None:
            continue
        with np.errstate(all="ignore"):
            got = probe(draft, cone, {x: _GELU_PROBE})
        expected = _gelu_reference(_GELU_PROBE.astype(np.float64), approximate)
        if got.shape == expected.shape and np.allclose(got, expected, rtol=1e-5, atol=1e-5):
            attrs = {"approximate": approximate}
            return [Node(node.name, "gelu", (x,), attrs, node.type, span=node.span)]
    return None


# -- rope ----------------------------------------------------------------------------------------


def _position_cone(
    draft: Draft, table: str, producers: dict[str, Node]
) -> tuple[str, list[Node]] | None:
    """(pos, nodes) when `table` is computed from one integer input `pos` and constants only."""
    cone: dict[str, Node] = {}
    leaves: set[str] = set()
    stack = [table]
    while stack:
        name = stack.pop()
        if name in cone or name in leaves or known_value(draft, name) is not None:
            continue
        node = producers.get(name)
        if node is None:
            leaves.add(name)
        elif len(cone) < 32 and (node.op in KERNELS or node.op in PSEUDO_KERNELS):
            cone[name] = node
            stack.extend(node.operands)
        else:
            return None
    if len(leaves) != 1:
        return None
    pos = next(iter(leaves))
    if draft.type_of(pos).dtype not in ("i32", "i64"):
        return None
    return pos, [n for n in draft.nodes if n.name in cone]


def _rotate_half_of(node: Node | None, producers: dict[str, Node], rank: int) -> str | None:
    """x when `node` is concat(neg(x[..., D/2:]), x[..., :D/2]) along the last axis."""
    if node is None or node.op != "concat" or len(node.operands) != 2:
        return None
    if node.attrs.get("axis") not in (-1, rank - 1):
        return None
    negated = producer_of(producers, node.operands[0], "neg")
    upper = negated and producer_of(producers, negated.operands[0], "slice")
    lower = producer_of(producers, node.operands[1], "slice")
    if not upper or not lower or upper.operands != lower.operands or node.type is None:
        return None
    half = node.type.shape[-1] // 2
    for part, start, end in ((upper, half, 2 * half), (lower, 0, half)):
        if part.attrs.get("axis") not in (-1, rank - 1):
            return None
        if (part.attrs.get("start"), part.attrs.get("end")) != (start, end):
            return None
    return upper.operands[0]


def _rope_attrs(
    draft: Draft, cone: list[Node], tables: tuple[str, str], pos: str, dim: int
) -> dict[str, AttrValue] | None:
    """The rope attributes (scaling included, `rope_tables`) whose angles and factor the tables
    have: the frequencies are the angles at position 1, repeated for both halves (rotate-half)
    or once (angles of half the width `dim`, the tables doubled by `raising_half_rope`); the
    attention factor is the length of (cos, sin)."""
    cos_node = next(n for n in cone if n.op == "cos")
    wanted = ancestors(cone, cos_node.operands[0])
    angles_at = [n for n in cone if n.name in wanted]
    pos_type = draft.type_of(pos)
    positions = (
        np.arange(1, pos_type.numel + 1).reshape(pos_type.shape).astype(numpy_dtype(pos_type.dtype))
    )
    angles = probe(draft, angles_at, {pos: positions}) if angles_at else None
    if angles is None or angles.shape[-1] < 4:
        return None
    first = angles.reshape(-1, angles.shape[-1])[0].astype(np.float64)
    half = dim // 2
    if first.size == dim and np.allclose(first[:half], first[half:]):
        first = first[:half]
    elif first.size != half:
        return None
    cos, sin = (_table(draft, cone, t, pos, positions) for t in tables)
    factor = float(np.median(np.hypot(cos, sin)))
    return rope_attributes(first, factor)


def _table(
    draft: Draft, cone: list[Node], table: str, pos: str, positions: np.ndarray
) -> np.ndarray:
    """The table's values at `positions`, in f32: a cast to f16 / bf16 (a half-precision
    model's tables, computed in f32) is skipped, so the rounding does not hide the rope."""
    table_cone = [
        _kept_wide(n) for n in cone if n.name == table or n.name in ancestors(cone, table)
    ]
    return probe(draft, table_cone, {pos: positions}).astype(np.float64)


def _kept_wide(node: Node) -> Node:
    if node.op == "cast" and node.attrs.get("dtype") in ("f16", "bf16"):
        return replace(node, attrs={**node.attrs, "dtype": "f32"})
    return node


def _rope_tables_match(
    draft: Draft,
    cone: list[Node],
    tables: tuple[str, str],
    pos: str,
    attrs: dict[str, AttrValue],
    dim: int,
) -> bool:
    """The tables equal cos and sin of `pos · inv_freq` (times the attention factor) on other,
    shuffled probe positions."""
    pos_type = draft.type_of(pos)
    rng = np.random.default_rng(0)
    positions = (
        (rng.permutation(pos_type.numel) + 3)
        .reshape(pos_type.shape)
        .astype(numpy_dtype(pos_type.dtype))
    )
    freq = rope_frequencies(attrs, dim)
    inv_freq = np.array(freq.inv_freq)
    angles = positions.astype(np.float64).reshape(-1)[:, None] * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)  # [S, rotary_dim]
    for table, fn in zip(tables, (np.cos, np.sin)):
        got = _table(draft, cone, table, pos, positions)
        want = fn(angles) * freq.attention_factor
        atol = table_tolerance(angles, freq.attention_factor)
        if got.size != want.size or not np.allclose(got.reshape(want.shape), want, atol=atol):
            return False
    return True


def _rope(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    if node.op != "add" or node.type is None or node.type.rank != 4:
        return None
    for plain, rotated in _pairs(node):
        plain_node = producer_of(producers, plain, "mul")
        rotated_node = producer_of(producers, rotated, "mul")
        if plain_node is None or rotated_node is None:
            continue
        for x, cos_table in _pairs(plain_node):
            for half_name, sin_table in _pairs(rotated_node):
                half = _rotate_half_of(producers.get(half_name), producers, 4)
                if half != x:
                    continue
                raised = _raise_rope(draft, node, x, (cos_table, sin_table), producers)
                if raised is not None:
                    return raised
    return None


def _raise_rope(
    draft: Draft, node: Node, x: str, tables: tuple[str, str], producers: dict[str, Node]
) -> list[Node] | None:
    assert node.type is not None
    x_type = draft.type_of(x)
    found = _traced_rope(draft, x_type, tables, producers)
    if found is None:
        found = constant_table_rope(draft, x_type, tables)
    if found is None:
        return None
    pos, attrs, layout = found
    pos_type = draft.type_of(pos)
    nodes: list[Node] = []
    if pos_type.shape != (pos_type.numel,):
        flat = TensorType(pos_type.dtype, (pos_type.numel,))
        reshaped = draft.fresh(f"{pos}.flat")
        nodes.append(Node(reshaped, "reshape", (pos,), {"shape": flat.shape}, flat, span=node.span))
        pos = reshaped
    if layout == "bshd":
        return [*nodes, Node(node.name, "rope", (x, pos), attrs, node.type, span=node.span)]
    perm = {"perm": (0, 2, 1, 3)}
    swapped = x_type.with_shape(x_type.shape[i] for i in (0, 2, 1, 3))
    rt = draft.fresh(f"{node.name}.rope")
    source = producers.get(x)
    if source is not None and source.op == "transpose" and source.attrs.get("perm") == (0, 2, 1, 3):
        xt = source.operands[0]  # x is `[B,S,H,D]` transposed already: rope reads that
    else:
        xt = draft.fresh(f"{node.name}.bshd")
        nodes.append(Node(xt, "transpose", (x,), perm, swapped, span=node.span))
    return [
        *nodes,
        Node(rt, "rope", (xt, pos), attrs, swapped, span=node.span),
        Node(node.name, "transpose", (rt,), perm, node.type, span=node.span),
    ]


Found = tuple[str, dict[str, AttrValue], str]


def _traced_rope(
    draft: Draft, x_type: TensorType, tables: tuple[str, str], producers: dict[str, Node]
) -> Found | None:
    """(pos, attrs, layout) when the tables are computed from one integer input."""
    found = _position_cone(draft, tables[0], producers)
    found_sin = _position_cone(draft, tables[1], producers)
    if found is None or found_sin is None or found[0] != found_sin[0]:
        return None
    pos, cone = found
    names = {n.name for n in cone} | {n.name for n in found_sin[1]}
    cone = [n for n in draft.nodes if n.name in names]
    cos_nodes = [n for n in cone if n.op == "cos"]
    layout = rope_layout(x_type, draft.type_of(tables[0]), draft.type_of(pos).numel)
    if len(cos_nodes) != 1 or layout is None:
        return None
    attrs = _rope_attrs(draft, cone, tables, pos, x_type.shape[3])
    if attrs is None or not _rope_tables_match(draft, cone, tables, pos, attrs, x_type.shape[3]):
        return None
    return pos, attrs, layout
