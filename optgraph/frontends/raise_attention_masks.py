"""Raising a decode step's position mask into attention's `kv_len` (a rule of `raising`).

A static-cache decode step (transformers' `StaticCache`, one new query) builds its mask from the
one position input, `cache_position`, and constants: `mask[j] = j <= pos` (and `j > pos - W` for a
sliding window). That is `attention {causal, window = W}` over the first `pos + 1` keys:

    %le = not(greater(%keys, %pos'))               (%keys a constant arange over the cache)
    %o = attention(%q, %k, %v, %le) {masked = true}
    ->  %pos.kv_len_1 = add(%pos, 1)                (shared by every layer's attention)
        %o = attention(%q, %k, %v, %pos.kv_len_1) {causal = true}

so the kernels read only the keys in use instead of masking the whole cache. The mask must be
computed from that single integer position (one element) and constants only, be the same for
every batch row and head, and equal the causal pattern of `L = pos + c` keys (c one constant) at
every probe position (`PROBES` and the boundaries); the window is found from the probes too. Masks
that depend on anything else (padding) stay mask operands.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from optgraph.frontends.attention_masks import causal_pattern, shared_pattern
from optgraph.frontends.draft import Draft
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.op_rules_attention import AttentionOperands, attention_operands
from optgraph.ir.ops import attrs_with_defaults
from optgraph.reference.kernels import KERNELS, numpy_dtype

PROBES = 12  # random positions checked besides the boundaries
CONE_LIMIT = 32  # nodes between the position and the mask


def input_cone(
    draft: Draft, mask: str, producers: dict[str, Node], limit: int = CONE_LIMIT
) -> tuple[str, list[Node]] | None:
    """(leaf, nodes in the draft's order) when `mask` is computed by at most `limit` IR ops from
    one value `leaf` that no node of the draft produces (an input) and constants; else None."""
    cone: dict[str, Node] = {}
    leaves: set[str] = set()
    stack = [mask]
    while stack:
        name = stack.pop()
        if name in cone or name in leaves or name in draft.constants:
            continue
        node = producers.get(name)
        if node is None:
            leaves.add(name)
        elif len(cone) < limit and node.op in KERNELS and node.op != "attention":
            cone[name] = node
            stack.extend(node.operands)
        else:
            return None
    if len(leaves) != 1 or not cone:
        return None
    return leaves.pop(), [n for n in draft.nodes if n.name in cone]


def position_cone(
    draft: Draft, mask: str, producers: dict[str, Node], limit: int = CONE_LIMIT
) -> tuple[str, list[Node]] | None:
    """`input_cone` whose input is an integer position."""
    found = input_cone(draft, mask, producers, limit)
    if found is None or draft.type_of(found[0]).dtype not in ("i32", "i64"):
        return None
    return found


def evaluate_cone(draft: Draft, cone: list[Node], pos: str, value: np.ndarray) -> np.ndarray:
    """The mask (the last node of `cone`) for the position `value`."""
    env = {pos: value}
    for node in cone:
        args = [env[o] if o in env else draft.constants[o] for o in node.operands]
        env[node.name] = np.asarray(KERNELS[node.op](node, args, attrs_with_defaults(node)))
    return env[cone[-1].name]


def offset_and_window(probes: Iterable[tuple[int, np.ndarray]], skv: int) -> tuple[int, int] | None:
    """(c, W): at every probe (position p, the [Skv] keys its last row sees) the row sees keys
    up to p + c - 1, W of them (0: no window); None where the probes disagree."""
    offsets, windows = set(), set()
    for p, seen in probes:
        last = np.flatnonzero(seen)
        if last.size == 0 or last[-1] + 1 >= skv:
            continue  # out of range or saturated at the cache's end: says nothing about c
        length = int(last[-1]) + 1
        offsets.add(length - p)
        if last.size < length:
            windows.add(int(last.size))
    if len(offsets) != 1 or len(windows) > 1:
        return None
    return offsets.pop(), windows.pop() if windows else 0


def _probe_positions(skv: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    edges = {0, 1, 2, 3, skv // 2, skv - 3, skv - 2, skv - 1, skv, skv + 1}
    return sorted(edges | {int(p) for p in rng.integers(-2, skv + 2, PROBES)})


def _position_rule(
    draft: Draft, cone: list[Node], pos: str, sq: int, skv: int
) -> tuple[int, int] | None:
    """(c, W) when the mask computed by `cone` from `pos` is causal over pos + c keys."""
    pos_type = draft.type_of(pos)
    seen_of: dict[int, np.ndarray] = {}
    for p in _probe_positions(skv, skv):
        value = np.full(pos_type.shape, p, dtype=numpy_dtype(pos_type.dtype))
        seen = shared_pattern(evaluate_cone(draft, cone, pos, value), sq, skv)
        if seen is None:
            return None
        seen_of[p] = seen
    found = offset_and_window(((p, seen[-1]) for p, seen in seen_of.items()), skv)
    if found is None:
        return None
    offset, window = found
    for p, seen in seen_of.items():
        length = p + offset
        if 1 <= length <= skv and not np.array_equal(
            seen, causal_pattern(sq, skv, False, window, length)
        ):
            return None
    return found


def kv_len_of(
    draft: Draft, pos: str, offset: int, node: Node, producers: dict[str, Node], label: str
) -> tuple[str, list[Node]]:
    """`pos + offset` as a vector of its elements, named `{pos}.{label}_{offset}` (`m3` for -3),
    and the nodes to add: none where an earlier attention made it, or where `pos` is that vector
    already and `offset` is 0 (then `pos` itself). [1] for a step's one position, [B] for a
    position a row (`raise_row_masks`)."""
    name = f"{pos}.{label}_{offset}" if offset >= 0 else f"{pos}.{label}_m{-offset}"
    if name in producers:
        return name, []
    pos_type = draft.type_of(pos)
    flat = TensorType(pos_type.dtype, (pos_type.numel,))
    nodes: list[Node] = []
    value = pos
    if pos_type.shape != flat.shape:
        value = draft.fresh(f"{pos}.flat")
        nodes.append(Node(value, "reshape", (pos,), {"shape": flat.shape}, flat, span=node.span))
    if offset == 0 and not nodes:
        return pos, []
    step = draft.constant(np.array([offset], dtype=numpy_dtype(pos_type.dtype)), "kv_offset")
    nodes.append(Node(name, "add", (value, step), {}, flat, span=node.span))
    return name, nodes


def masked_attention_roles(node: Node) -> tuple[AttentionOperands, str] | None:
    """(operand roles, the mask operand) of an `attention` that reads a mask and neither
    `kv_len`, causality nor a window: what the raising rules replace; None for any other node."""
    if node.op != "attention" or node.type is None:
        return None
    attrs = attrs_with_defaults(node)
    if not attrs["masked"] or attrs["causal"] or attrs["window"]:
        return None
    roles = attention_operands(len(node.operands), True, bool(attrs["sinks"]))
    if roles.kv_len is not None or roles.mask is None:
        return None
    return roles, node.operands[roles.mask]


def attention_kv_len(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    """The raising rule (see the module docstring); None where the node does not match."""
    matched = masked_attention_roles(node)
    if matched is None or node.type is None:
        return None
    roles, mask = matched
    found = position_cone(draft, mask, producers)
    if found is None or draft.type_of(found[0]).numel != 1:
        return None
    pos, cone = found
    sq, skv = node.type.shape[2], draft.type_of(node.operands[1]).shape[2]
    rule = _position_rule(draft, cone, pos, sq, skv)
    if rule is None:
        return None
    offset, window = rule
    kv_len, nodes = kv_len_of(draft, pos, offset, node, producers, "kv_len")
    return [*nodes, causal_with_kv_len(node, roles, kv_len, window)]


def causal_with_kv_len(node: Node, roles: AttentionOperands, kv_len: str, window: int) -> Node:
    """`node` (an attention with a mask) reading `kv_len` instead of its mask: causal, with
    `window` (0: none), its sinks kept."""
    attrs: dict[str, AttrValue] = {
        k: v for k, v in node.attrs.items() if k not in ("masked", "causal")
    }
    attrs["causal"] = True
    if window:
        attrs["window"] = window
    sinks = () if roles.sinks is None else (node.operands[roles.sinks],)
    operands = (*node.operands[:3], kv_len, *sinks)
    return Node(node.name, "attention", operands, attrs, node.type, span=node.span)
