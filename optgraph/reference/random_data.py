"""Seeded random inputs and weights for a graph (`optgraph run` without `--inputs` / `--weights`,
`Program.run(inputs)`'s default weights): values every op that reads them accepts.

    random_inputs(graph, seed)   ->  {input: array}
    random_weights(graph, seed)  ->  {weight: array}: a constant's own value (`ir.constants`),
                                     else drawn

Floats ~ 0.5·N(0,1); matrices ~ N(0,1)/√fan_in, norm weights ~ 1, biases ~ 0.1·N(0,1);
positive where log, sqrt, rsqrt or pow read them. Integers fall in the range every reader needs
(`_uses`, the intersection over all of a value's readers): a gathered id within its table, a
cache write's position within the cache, an attention's kv_len within its keys. The ranges are
followed back from the reader through what keeps the values (views, copies, integer casts,
`expand`, `tile`, `concat`, either branch of `where`) and through `add` / `sub` of a constant
(shifted by the constant's values: a decode step's `kv_len = pos + 1` and `write at pos + 0`
bound `pos` by both caches). The importers' wrap of negative indices,
`where(less(i, 0), add(i, n), i)`, passes the range to `i` alone (non-negative ids). Not
followed: other arithmetic (a product, a remainder), so a value computed otherwise draws
[0, 16).

Before drawing anything, the bytes the arrays take (and the float32 draw of the largest 16-bit
one) are checked against the host memory available (`host_memory.available_memory`): a graph of
`f32[4,99999999]` inputs on a small machine is refused at once with both figures
(`random inputs: not enough memory: at least 1.49 GiB needed (1 array, the largest %x
f32[4,99999999] 1.49 GiB), and 1 GiB are available (...)`), not after the allocator fails.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from optgraph import host_memory
from optgraph.ir.constants import constant_array
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue, Graph, Node, TensorType
from optgraph.ir.op_rules_attention import attention_operands
from optgraph.ir.op_rules_moe import EXPERTS_AT
from optgraph.ir.ops import attrs_with_defaults
from optgraph.ir.weight_layout import model_type
from optgraph.reference.dequantize import random_blocks
from optgraph.reference.kernels import numpy_dtype

__all__ = ["random_inputs", "random_weights"]


@dataclass
class _Use:
    """What the ops reading one value need from it (merged over all its uses)."""

    low: int = 0  # integer values: [low, high)
    high: int | None = None
    positive: bool = False  # read by log, sqrt, rsqrt or as the base of pow
    norm_weight: bool = False  # the w of rms_norm / layer_norm: values near 1
    bias: bool = False
    fan_in: int | None = None  # a matrix operand of matmul / conv2d

    def merge(self, other: _Use) -> None:
        self.low = max(self.low, other.low)
        if other.high is not None:
            self.high = other.high if self.high is None else min(self.high, other.high)
        self.positive |= other.positive
        self.norm_weight |= other.norm_weight
        self.bias |= other.bias
        if other.fan_in is not None:
            self.fan_in = other.fan_in


# Ops whose result holds operand values as they are: a use of the result is one of the operand.
_PASS_THROUGH = frozenset(
    {"reshape", "transpose", "slice", "concat", "copy", "prefetch", "dequantize", "expand", "tile"}
)
_INTEGERS = ("i32", "i64")


def _kv_len_at(types: Sequence[TensorType], attrs: Mapping[str, AttrValue]) -> int | None:
    """Where an attention node's kv_len sits among its operands (None: absent)."""
    return attention_operands(len(types), bool(attrs["masked"]), bool(attrs["sinks"])).kv_len


def _direct_use(node: Node, index: int, types: Sequence[TensorType]) -> _Use:
    op, attrs = node.op, attrs_with_defaults(node)
    if op == "get_rows" and index == 1:
        return _Use(high=math.prod(types[0].shape[:-1]))
    if op == "kv_cache_write" and index == 2:
        return _Use(high=types[0].shape[2] - types[1].shape[2] + 1)
    if op == "attention" and index == _kv_len_at(types, attrs):
        sq, skv = types[0].shape[2], types[1].shape[2]
        bottom_right = attrs["causal_align"] == "bottom_right"
        return _Use(low=sq if attrs["causal"] and bottom_right and sq <= skv else 1, high=skv + 1)
    if (op in ("log", "sqrt", "rsqrt") and index == 0) or (op == "pow" and index == 0):
        return _Use(positive=True)
    if op in ("rms_norm", "layer_norm") and index == 1:
        return _Use(norm_weight=True)
    if (op == "layer_norm" and index == 2) or (op == "conv2d" and index == 2):
        return _Use(bias=True)
    if op == "matmul" and types[index].rank >= 2:
        t, transposed = types[index], attrs[f"transpose_{'ab'[index]}"]
        rows_are_k = (index == 1) != bool(transposed)
        return _Use(fan_in=t.shape[-2] if rows_are_k else t.shape[-1])
    if op == "moe" and index >= EXPERTS_AT:  # an expert's rows: [F,H] or [H,F]
        return _Use(fan_in=types[index].shape[-1])
    if op == "conv2d" and index == 1:
        return _Use(fan_in=math.prod(types[1].shape[1:]))
    return _Use()


def _constants(graph: Graph) -> dict[str, np.ndarray]:
    return {w.name: constant_array(w) for w in graph.weights if w.value is not None}


def _is_zero(constants: Mapping[str, np.ndarray], name: str) -> bool:
    value = constants.get(name)
    return value is not None and value.size > 0 and not value.any()


def _wraps(node: Node, producers: Mapping[str, Node], constants: Mapping[str, np.ndarray]) -> bool:
    """`where(less(i, 0), add(i, n), i)`: negative indices counted from the end (`gathers.py`)."""
    cond, counted = (producers.get(o) for o in node.operands[:2])
    i = node.operands[2]
    return (
        cond is not None
        and cond.op == "less"
        and cond.operands[0] == i
        and _is_zero(constants, cond.operands[1])
        and counted is not None
        and counted.op == "add"
        and i in counted.operands
        and all(o == i or o in constants for o in counted.operands)
    )


def _shifted(node: Node, index: int, result: _Use, constants: Mapping[str, np.ndarray]) -> _Use:
    """The range operand `index` of an integer `add` / `sub` of a constant needs for the result
    to fall in `result`'s range; unconstrained when the other operand is not a constant."""
    value = constants.get(node.operands[1 - index])
    if value is None or value.size == 0 or result.high is None and result.low <= 0:
        return _Use()
    low, high = int(value.min()), int(value.max())
    if node.op == "add":  # a + c in [lo, hi)  <=>  a in [lo - c, hi - c) for every c
        bounds = (result.low - low, None if result.high is None else result.high - high)
    elif index == 0:  # a - c in [lo, hi)  <=>  a in [lo + c, hi + c)
        bounds = (result.low + high, None if result.high is None else result.high + low)
    else:  # c - a in [lo, hi)  <=>  a in (c - hi, c - lo]
        start = -(10**18) if result.high is None else high - result.high + 1
        return _Use(low=max(start, 0), high=low - result.low + 1)
    return _Use(low=max(bounds[0], 0), high=bounds[1])


def _carried(
    node: Node,
    index: int,
    result: _Use | None,
    producers: Mapping[str, Node],
    constants: Mapping[str, np.ndarray],
) -> _Use | None:
    """What of the result's needs reaches operand `index`: all of them where the op keeps the
    values, a shifted range through an integer add / sub of a constant, nothing otherwise."""
    if result is None:
        return None
    op, t = node.op, node.type
    if op in _PASS_THROUGH:
        return result
    if op == "where" and index > 0:
        return None if index == 1 and _wraps(node, producers, constants) else result
    integer = t is not None and t.dtype in _INTEGERS
    if op == "cast" and integer:
        return _Use(low=result.low, high=result.high)
    if op in ("add", "sub") and integer:
        return _shifted(node, index, result, constants)
    return None


def _uses(
    nodes: Sequence[Node],
    types: Mapping[str, TensorType],
    constants: Mapping[str, np.ndarray] | None = None,
) -> dict[str, _Use]:
    """Per value, the merged needs of its readers, followed back through what keeps or shifts
    the values (module docstring). `constants`: the graph's constants by name."""
    known = constants or {}
    producers = {n.name: n for n in nodes if not n.is_event}
    uses: dict[str, _Use] = {}
    for node in reversed(nodes):
        if node.is_event:
            continue
        result = uses.get(node.name)
        if any(o not in types for o in node.operands):
            continue  # an unverified graph: leave the data unconstrained rather than fail here
        operand_types = [types[o] for o in node.operands]
        if node.op == "fused" and node.body is not None:
            inner_types = dict(zip(node.body.params, operand_types))
            inner_types.update((n.name, n.type) for n in node.body.nodes if n.type is not None)
            inner_known = {
                p: known[o] for p, o in zip(node.body.params, node.operands) if o in known
            }
            inner = _uses(node.body.nodes, inner_types, inner_known)
            for param, operand in zip(node.body.params, node.operands):
                uses.setdefault(operand, _Use()).merge(inner.get(param, _Use()))
            continue
        for index, operand in enumerate(node.operands):
            use = uses.setdefault(operand, _Use())
            use.merge(_direct_use(node, index, operand_types))
            carried = _carried(node, index, result, producers, known)
            if carried is not None:
                use.merge(carried)
    return uses


def _rng(seed: int, name: str) -> np.random.Generator:
    """One generator per value, so a value's data does not depend on the others."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _random_array(name: str, t: TensorType, use: _Use, seed: int, is_weight: bool) -> np.ndarray:
    """Drawn in float32 (floats) or the target dtype (integers, bools), never in float64: a large
    input must not need twice its own size while it is drawn."""
    rng = _rng(seed, name)
    if t.is_quantized:
        return random_blocks(rng, t, 1.0 / math.sqrt(use.fan_in) if use.fan_in else 0.5)
    if t.dtype == "bool":
        return rng.integers(0, 2, size=t.shape, dtype=np.bool_)
    if t.dtype not in FLOAT_DTYPES:
        high = use.low + 16 if use.high is None else max(use.high, use.low + 1)
        return rng.integers(use.low, high, size=t.shape, dtype=numpy_dtype(t.dtype))
    values = rng.standard_normal(t.shape, dtype=np.float32)
    if use.norm_weight:
        values *= np.float32(0.1)
        values += np.float32(1.0)
    elif use.bias:
        values *= np.float32(0.1)
    elif is_weight and use.fan_in:
        values *= np.float32(1.0 / math.sqrt(use.fan_in))
    else:
        values *= np.float32(0.5)
    if use.positive:
        np.abs(values, out=values)
        values += np.float32(0.1)
    return values if t.dtype == "f32" else values.astype(numpy_dtype(t.dtype))


def check_draw_memory(
    what: str, types: Mapping[str, TensorType], available: host_memory.Available | None
) -> None:
    """Refuse (an `OptGraphError` with both figures) drawing arrays of `types` that cannot fit
    in `available` host bytes: their sizes, and the float32 draw of the largest 16-bit one."""
    if not types:
        return
    draws = [t.numel * 4 for t in types.values() if t.dtype in FLOAT_DTYPES and t.dtype != "f32"]
    need = sum(t.nbytes for t in types.values()) + max(draws, default=0)
    name = max(types, key=lambda n: types[n].nbytes)
    count = f"{len(types)} array{'s' if len(types) > 1 else ''}"
    largest = f"the largest %{name} {types[name]} {host_memory.size_text(types[name].nbytes)}"
    host_memory.check_fits(need, available, what, f"{count}, {largest}")


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs: floats ~ 0.5·N(0,1); integers valid for the ops that read them."""
    types = {i.name: i.type for i in graph.inputs}
    check_draw_memory("random inputs", types, host_memory.available_memory())
    uses = _uses(graph.nodes, graph.value_types(), _constants(graph))
    return {
        i.name: _random_array(i.name, i.type, uses.get(i.name, _Use()), seed, False)
        for i in graph.inputs
    }


def random_weights(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded weights: matrices ~ N(0,1)/√fan_in, norm weights ~ 1, biases ~ 0.1·N(0,1); in the
    model's layout (`weight_layout.model_type`), so a compiled graph draws the same arrays.
    A quantized weight gets valid random blocks of about that spread (`random_blocks`)."""
    types = {w.name: model_type(w) for w in graph.weights}
    check_draw_memory("random weights", types, host_memory.available_memory())
    uses = _uses(graph.nodes, graph.value_types(), _constants(graph))
    return {
        w.name: constant_array(w)
        if w.value is not None
        else _random_array(w.name, model_type(w), uses.get(w.name, _Use()), seed, True)
        for w in graph.weights
    }
