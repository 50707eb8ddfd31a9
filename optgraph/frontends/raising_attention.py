"""Raising of attention written out as products and a softmax into `attention` (a rule of
`raising`): transformers' eager attention through either importer, and the ONNX exporter's
decomposition of `scaled_dot_product_attention`.

    %kt = transpose(%k) {perm = [0, 1, 3, 2]}
    %s = matmul(%q, %kt)
    %ss = scale(%s) {factor = 0.125}
    %sm = add(%ss, %mask)
    %p = softmax(%sm) {axis = -1}
    %o = matmul(%p, %v)
    ->  %o = attention(%q, %k, %v, %mask) {masked = true}       (0.125 = 1/√D: no `scale`)

Spellings recognized:

- k's transposition: any `transpose` whose result is k `[B, H, S, D]` with its last two axes
  swapped (k is then the transpose without the swap, or what it read), a `matmul {transpose_b}`,
  or the ONNX exporter's `reshape` to `[B·H, S, D]`, `transpose [0, 2, 1]`, `reshape` to
  `[B, H, D, S]` (k: one `reshape` to `[B, H, S, D]` of what was transposed).
- Scaling: any chain of `scale`, and `mul` / `div` by one-element constants, on q, on k (before or
  after its transposition) and on the scores before any mask; their product is the attention's
  `scale` (left out when it is 1/√D). `c2 · tanh(c1 · s)` is `softcap = c2`, `scale = c1 · c2`.
- Masks, after the scaling (up to `MASK_TERMS` of them): `add`s of floats of q's dtype, and
  selects `where(m, hide, s)` / `where(m, s, hide)` with `hide` a constant at or below
  `attention_masks.HIDDEN`; scaled with the scores too (`(s + m) · c`, `where(m, s, hide) · c`)
  where `m` is known and its values, like `hide`, still hide once scaled. Known masks of 0 /
  hiding values and known conditions (constants, and weights: an ONNX float initializer is a
  constant) are combined; when they only say causal / sliding window / nothing they become
  attributes (`attention_masks`), else one bool mask of what is seen. What is left must be float
  masks only (summed into one operand) or one condition (the bool mask, negated where it says
  what to hide). A mask computed from the decode position is left to `attention_kv_len`, the
  rule after this one.
- Between the softmax and the product: casts to f32 and back (transformers' softmax in f32) and the
  ONNX exporter's guard `where(not(equal(p, p)), 0, p)`, which turns the NaN rows of keys all
  hidden into zeros: what `attention` yields for such rows anyway.
- Sinks (gpt-oss): the softmax over the scores with one more column, a logit per query head,
  its row maximum subtracted first, and that column dropped after it:
  `slice(softmax(sub(c, max(c))), [0, Skv))` with `c = concat(scores, expand(reshape(s)))` on the
  last axis, `s` of `Hq` values aligned with the head axis -> `attention(.., s) {sinks = true}`
  (`s` reshaped to `[Hq]` where it is not; f32 or q's dtype; attention_sinks.py).

q, k and v must be 4-D of one float dtype, k and v of one shape. A row that sees no key differs
where the source left it undefined or arbitrary: NaN without the guard, the mean of v where a
select hid every key with a finite value; `attention` yields zeros. The pattern's other nodes die
at `Draft.finish` unless something else reads them (`output_attentions`). Cost: O(1) per node
(each step follows one producer; masks up to `MASK_TERMS` deep), plus one pass over the values
of each known mask, and of a known sink column, of a matched attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from optgraph.errors import Span
from optgraph.frontends.attention_masks import HIDDEN, raised_mask_attrs
from optgraph.frontends.attention_sinks import kept_keys, sink_column, sinks_operand
from optgraph.frontends.draft import Draft
from optgraph.frontends.raising_probe import known_value, producer_of, scalar_value
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue, Node, TensorType

Producers = dict[str, Node]
MASK_TERMS = 8  # adds and selects followed below a softmax


def _unscaled(draft: Draft, name: str, producers: Producers) -> tuple[str, float]:
    """(x, c) where `name` is x times the constant c through scale / mul / div nodes."""
    factor = 1.0
    while True:
        node = producers.get(name)
        if node is None:
            return name, factor
        if node.op == "scale":
            given = node.attrs.get("factor", 1.0)
            assert isinstance(given, int | float)
            factor *= float(given)
            name = node.operands[0]
            continue
        if node.op in ("mul", "div"):
            a, b = node.operands
            c = scalar_value(draft, b)
            if c is None and node.op == "mul":
                a, c = b, scalar_value(draft, a)
            if c is not None and c != 0.0 and draft.type_of(a) == node.type:
                factor *= c if node.op == "mul" else 1.0 / c
                name = a
                continue
        return name, factor


def _untransposed_keys(
    draft: Draft, name: str, producers: Producers, span: Span | None
) -> tuple[str, float, list[Node]] | None:
    """(k, c, new nodes) where `name` is c · k with its last two axes swapped, k `[B,H,S,D]`."""
    name, factor = _unscaled(draft, name, producers)
    t = draft.type_of(name)
    if t.rank != 4:
        return None
    b, h, d, s = t.shape
    keys = TensorType(t.dtype, (b, h, s, d))
    swapped = producer_of(producers, name, "transpose")
    if swapped is not None:
        perm = swapped.attrs.get("perm")
        assert isinstance(perm, tuple)
        back = (*perm[:2], perm[3], perm[2])
        source, more = _unscaled(draft, swapped.operands[0], producers)
        if back == (0, 1, 2, 3):
            return source, factor * more, []
        k = _keys(draft, name, Node("", "transpose", (source,), {"perm": back}, keys, span=span))
        return k.name, factor * more, [k]
    merged = producer_of(producers, name, "reshape")
    flipped = merged and producer_of(producers, merged.operands[0], "transpose")
    split = flipped and producer_of(producers, flipped.operands[0], "reshape")
    if not (flipped and split) or flipped.attrs.get("perm") != (0, 2, 1):
        return None
    if split.type is None or split.type.shape != (b * h, s, d):
        return None
    source = split.operands[0]
    if draft.type_of(source) == keys:
        return source, factor, []
    shape: AttrValue = (b, h, s, d)
    k = _keys(draft, name, Node("", "reshape", (source,), {"shape": shape}, keys, span=span))
    return k.name, factor, [k]


def _keys(draft: Draft, transposed: str, node: Node) -> Node:
    """`node` (k made from what was transposed) under a fresh name, its type known to the draft."""
    named = replace(node, name=draft.fresh(f"{transposed}.keys"))
    assert named.type is not None
    draft.types[named.name] = named.type
    return named


def _probabilities(draft: Draft, name: str, producers: Producers) -> str | None:
    """The softmax's input when `name` is a last-axis softmax, through casts and the NaN guard."""
    while True:
        node = producers.get(name)
        if node is None:
            return None
        if node.op == "cast":
            name = node.operands[0]
        elif node.op == "where" and _nan_guard(draft, node, producers):
            name = node.operands[2]
        elif node.op == "softmax":
            axis = node.attrs.get("axis", -1)
            rank = draft.type_of(name).rank
            return node.operands[0] if axis in (-1, rank - 1) else None
        else:
            return None


def _nan_guard(draft: Draft, node: Node, producers: Producers) -> bool:
    """`where(not(equal(p, p)), 0, p)`: NaNs of p replaced by zeros."""
    condition, zero, p = node.operands
    negated = producer_of(producers, condition, "not")
    same = producer_of(producers, negated.operands[0], "equal") if negated is not None else None
    return same is not None and same.operands == (p, p) and scalar_value(draft, zero) == 0.0


def _float_input(draft: Draft, name: str, producers: Producers) -> str:
    """`name` before a cast between float dtypes (the softmax's f32 widening)."""
    node = producer_of(producers, name, "cast")
    if node is not None and draft.type_of(node.operands[0]).dtype in FLOAT_DTYPES:
        return node.operands[0]
    return name


@dataclass
class _Scores:
    """What the softmax's input is made of: `product` (q·kᵀ) · `factor`, then `softcap`, then
    the `added` float masks summed in, with keys hidden where a `hidden` condition says."""

    product: Node
    factor: float = 1.0
    softcap: float = 0.0
    added: list[str] = field(default_factory=list)
    hidden: list[tuple[str, bool]] = field(default_factory=list)  # (condition, hides when true)


def _hiding(draft: Draft, name: str, scaled: float = 1.0) -> bool:
    value = scalar_value(draft, name)
    return value is not None and value * scaled <= HIDDEN


def _hiding_mask(draft: Draft, name: str, scaled: float) -> bool:
    """A known mask of 0 and hiding values that still hide once scaled by `scaled`."""
    value = known_value(draft, name)
    if value is None or value.dtype.kind != "f":
        return False
    hidden = np.maximum(value, value * scaled) <= HIDDEN
    return bool(np.all((value == 0) | hidden))


def _scores(
    draft: Draft, name: str, producers: Producers, depth: int = 0, scaled: float = 1.0
) -> _Scores | None:
    """The parts of the softmax's input `name` (see `_Scores`) times `scaled`; None when it is
    not q·kᵀ with masks added after the scaling. Follows at most `MASK_TERMS` adds, selects and
    scalings of them: `(s + m) · c` and `where(m, s, hide) · c` where the known `m` (its 0s and
    hiding values) and `hide` still hide once scaled (CodeGen scales after adding its causal
    mask)."""
    node = producers.get(name)
    if node is not None and depth < MASK_TERMS:
        if node.op == "add":
            for scores, mask in (node.operands, node.operands[::-1]):
                if scaled != 1.0 and not _hiding_mask(draft, mask, scaled):
                    continue  # a mask scaled along with the scores: not one the kernels add
                found = _scores(draft, scores, producers, depth + 1, scaled)
                if found is not None:
                    found.added.append(mask)
                    return found
            return None
        if node.op == "where":
            condition, a, b = node.operands
            for hides_when, hide, scores in ((True, a, b), (False, b, a)):
                hides = _hiding(draft, hide, scaled)
                found = _scores(draft, scores, producers, depth + 1, scaled) if hides else None
                if found is not None:
                    found.hidden.append((condition, hides_when))
                    return found
            return None
    name, outer = _unscaled(draft, name, producers)
    masked = producer_of(producers, name, "where") or producer_of(producers, name, "add")
    if outer > 0.0 and outer != 1.0 and masked is not None and depth < MASK_TERMS:
        return _scores(draft, name, producers, depth + 1, scaled * outer)
    outer *= scaled
    capped = producer_of(producers, name, "tanh")
    softcap = 0.0
    if capped is not None and outer > 0.0:
        name, inner = _unscaled(draft, capped.operands[0], producers)
        softcap, outer = outer, inner * outer  # C·tanh(s·c / C): scale c, softcap C
    product = producer_of(producers, name, "matmul")
    if product is None or product.attrs.get("transpose_a"):
        return None
    return _Scores(product, outer, softcap)


def _broadcasts(mask: TensorType, target: tuple[int, ...]) -> bool:
    return mask.rank <= 4 and all(
        d in (1, t) for d, t in zip(reversed(mask.shape), reversed(target), strict=False)
    )


def _constant_visibility(
    draft: Draft, scores: _Scores
) -> tuple[np.ndarray | None, list[str], list[tuple[str, bool]]]:
    """(which keys the constant masks let through, the float masks and conditions left)."""
    visible: np.ndarray | None = None
    added, hidden = [], []
    for name in scores.added:
        value = known_value(draft, name)
        if value is None or not np.all((value == 0) | (value <= HIDDEN)):
            added.append(name)
            continue
        visible = value == 0 if visible is None else visible & (value == 0)
    for name, hides_when in scores.hidden:
        value = known_value(draft, name)
        if value is None:
            hidden.append((name, hides_when))
            continue
        seen = ~value if hides_when else value
        visible = seen if visible is None else visible & seen
    return visible, added, hidden


def _masks(
    draft: Draft, scores: _Scores, q: TensorType, skv: int, span: Span | None
) -> tuple[list[str], dict[str, AttrValue], list[Node]] | None:
    """(mask operands, attributes, new nodes) saying what the softmax's masks say; None where
    they need more than one mask operand of one kind."""
    target = (*q.shape[:3], skv)
    for name in scores.added + [c for c, _ in scores.hidden]:
        t = draft.type_of(name)
        wanted = "bool" if name not in scores.added else q.dtype
        if t.dtype != wanted or not _broadcasts(t, target):
            return None
    visible, added, hidden = _constant_visibility(draft, scores)
    attrs: dict[str, AttrValue] = {}
    if visible is not None:
        raised = raised_mask_attrs(visible, q.shape[2], skv)
        if raised is None:
            hidden.append((draft.constant(visible, "mask"), False))  # a bool mask: what is seen
        else:
            attrs.update(raised)
    if added and hidden or len(hidden) > 1:
        return None
    nodes: list[Node] = []
    if hidden:
        condition, hides_when = hidden[0]
        if not hides_when:
            return [condition], {**attrs, "masked": True}, nodes
        shown = draft.fresh(f"{condition}.shown")
        t = TensorType("bool", draft.type_of(condition).shape)
        draft.types[shown] = t
        nodes.append(Node(shown, "not", (condition,), {}, t, span=span))
        return [shown], {**attrs, "masked": True}, nodes
    if not added:
        return [], attrs, nodes
    total = added[0]
    for name in added[1:]:
        shape = np.broadcast_shapes(draft.type_of(total).shape, draft.type_of(name).shape)
        t = TensorType(q.dtype, tuple(int(d) for d in shape))
        summed = draft.fresh(f"{name}.summed")
        draft.types[summed] = t
        nodes.append(Node(summed, "add", (total, name), {}, t, span=span))
        total = summed
    return [total], {**attrs, "masked": True}, nodes


def written_out_attention(draft: Draft, node: Node, producers: Producers) -> list[Node] | None:
    """The raising rule (see the module docstring); None where the node does not match."""
    if node.op != "matmul" or node.type is None or node.type.rank != 4:
        return None
    if node.attrs.get("transpose_a") or node.attrs.get("transpose_b"):
        return None
    column = None
    logits = _probabilities(draft, node.operands[0], producers)
    kept = None if logits is not None else kept_keys(draft, node.operands[0], producers)
    found = kept and sink_column(draft, _probabilities(draft, kept, producers), producers)
    if found:
        logits, column = found
    scores = logits and _scores(draft, _float_input(draft, logits, producers), producers)
    if not scores:
        return None
    product = scores.product
    q, q_factor = _unscaled(draft, product.operands[0], producers)
    if product.attrs.get("transpose_b"):
        k, k_factor = _unscaled(draft, product.operands[1], producers)
        made: list[Node] = []
    else:
        keys = _untransposed_keys(draft, product.operands[1], producers, node.span)
        if keys is None:
            return None
        k, k_factor, made = keys
    v = node.operands[1]
    qt, kt, vt = draft.type_of(q), draft.type_of(k), draft.type_of(v)
    if qt.rank != 4 or kt != vt or qt.dtype != kt.dtype or qt.dtype not in FLOAT_DTYPES:
        return None
    b, hq, _, d = qt.shape
    if kt.shape[0] != b or kt.shape[3] != d or hq % kt.shape[1] or node.type != qt:
        return None
    masks = _masks(draft, scores, qt, kt.shape[2], node.span)
    if masks is None:
        return None
    mask_operands, attrs, mask_nodes = masks
    scale = scores.factor * q_factor * k_factor
    if not math.isclose(scale, 1.0 / math.sqrt(d), rel_tol=1e-6):
        attrs["scale"] = scale
    if scores.softcap:
        attrs["softcap"] = scores.softcap
    sink_operands: tuple[str, ...] = ()
    if column is not None:
        sinks = sinks_operand(draft, column, qt, producers, node.span)
        if sinks is None:
            return None
        sink_operands, made = (sinks[0],), [*made, *sinks[1]]
        attrs["sinks"] = True
    operands = (q, k, v, *sink_operands, *mask_operands)
    attention = Node(node.name, "attention", operands, attrs, node.type, span=node.span)
    return [*made, *mask_nodes, attention]


__all__ = ["written_out_attention"]
