"""The op table: every op of docs/ir.md with its operands, attributes, type rule and cost.

`OPS` is sorted by name: the elementwise ops' entries come from their one declaration each in
`op_elementwise.ELEMENTWISE`, every other op is an entry of the literal `_NOT_ELEMENTWISE`
below (adding an op: docs/adding-an-op.md). Each `OpDef` says:

- `family`: "arithmetic", "logic", "indexing", ... (`op_specs.FAMILIES`): the name of the module
  that holds the op in every layer split by family (`op_rules_logic`, `reference/indexing.py`,
  `frontends/aten_logic_ops.py`, ...) and of its heading in docs/ir.md;
- `category`: "elementwise", "reduction" (also softmax and the norms), "matmul", "data_movement"
  (views, concat, get_rows, copy, prefetch, kv_cache_write), "opaque" (rope, attention, conv2d,
  pools, fused) or "collective" (all_reduce, all_gather, send, recv: work across devices, never
  fused): what fusion and scheduling may assume about it;
- `min_arity`/`max_arity` (None: any number) and `attrs`, name -> `AttrSpec`;
- `is_view`: the result aliases the operand's buffer (reshape, transpose, slice, and send, whose
  result keeps the sent buffer alive until the transfer is done);
- `inplace_operand`: the operand whose buffer the result may reuse. Elementwise ops declare 0 and
  the memory planner decides whether sizes allow it; kv_cache_write declares 0 because reusing the
  cache's buffer is its purpose;
- `infer` and `cost`: functions from `op_rules*` and `op_costs`.

`OpDef`, `AttrSpec` and the checks of a node's attributes and arity against them live in
`op_specs`; this module holds the table and what needs it (fused regions infer their body's
nodes through it).

Public entry points: `infer_type(node, operand_types)` checks arity, attributes and operands and
returns the result type (raising `VerifyError` at the node's span); `cost(node, operand_types,
result_type)` estimates bytes and flops; `attrs_with_defaults(node)` gives the attributes a kernel
sees; `get_op(name)`, `op_names()`. The device roofline lives in `op_costs` and is re-exported.

Example: `%y = softmax(%x) {axsi = 1} : f32[2,4]` fails with
`softmax: unknown attribute 'axsi' (did you mean 'axis'?)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from optgraph.errors import VerifyError, did_you_mean
from optgraph.ir import op_costs as costs
from optgraph.ir import op_rules as rules
from optgraph.ir import op_rules_attention as attention_rules
from optgraph.ir import op_rules_collective as collective
from optgraph.ir import op_rules_image as image_rules
from optgraph.ir import op_rules_indexing as indexing
from optgraph.ir import op_rules_moe as moe_rules
from optgraph.ir import op_rules_rope as rope_rules
from optgraph.ir.graph import TYPE_FACTS, AttrValue, Node, TensorType
from optgraph.ir.op_costs import (
    DEVICE_PROFILES,
    H100,
    H200,
    Cost,
    DeviceProfile,
    estimate_seconds,
)
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.op_specs import (
    AttrSpec,
    CostFn,
    InferFn,
    OpDef,
    attrs_key_of,
    check_arity,
    checked_attrs,
    fail,
    fill_defaults,
    normalized,
)

__all__ = [
    "DEVICE_PROFILES",
    "H100",
    "H200",
    "OPS",
    "AttrSpec",
    "Cost",
    "DeviceProfile",
    "OpDef",
    "attrs_key",
    "attrs_with_defaults",
    "cost",
    "estimate_seconds",
    "get_op",
    "infer_type",
    "op_names",
]


def _reduction(name: str, infer: InferFn) -> OpDef:
    attrs = {"axes": AttrSpec("ints"), "keepdims": AttrSpec("bool", False)}
    return OpDef(name, "reduction", "reduction", 1, 1, infer, costs.reduction, attrs)


def _pool(name: str) -> OpDef:
    attrs = {
        "kernel": AttrSpec("ints", required=True),
        "padding": AttrSpec("ints", (0, 0)),
        "stride": AttrSpec("ints", default_from="kernel"),
    }
    return OpDef(name, "image", "opaque", 1, 1, rules.pool2d, costs.pool2d, attrs)


def _infer_fused(
    node: Node, types: Sequence[TensorType], attrs: Mapping[str, AttrValue]
) -> TensorType:
    return _fused_types(node, types)[node.body.result if node.body else ""]


def _fused_cost(
    node: Node,
    types: Sequence[TensorType],
    result: TensorType,
    attrs: Mapping[str, AttrValue],
    alike: dict[tuple[object, ...], Cost] | None = None,
) -> Cost:
    """Only the region's operands and result touch memory; the flops are the body's.

    `alike` (see `cost`) also keeps one `Cost` object per bytes and flops of fused nodes: the
    repeated layers' regions share theirs, and what is computed from a cost object (a roofline,
    a time) is computed once for all of them."""
    env = _fused_types(node, types)
    assert node.body is not None
    flops = 0
    for inner in node.body.nodes:
        inner_types = [env[o] for o in inner.operands]
        flops += cost(inner, inner_types, env[inner.name], alike).flops
    nbytes = sum([t.nbytes for t in types]) + result.nbytes
    if alike is None:
        return Cost(nbytes, flops)
    key = (None, nbytes, flops)  # no op is None: apart from the keys of nodes without a body
    found = alike.get(key)
    if found is None:
        found = alike[key] = Cost(nbytes, flops)
    return found


_FALSE = AttrSpec("bool", False)
_REQUIRED_INT = AttrSpec("int", required=True)
_REQUIRED_INTS = AttrSpec("ints", required=True)


def _view(name: str, infer: InferFn, **attrs: AttrSpec) -> OpDef:
    return OpDef(
        name, "data_movement", "data_movement", 1, 1, infer, costs.view, attrs, is_view=True
    )


def _op(
    name: str,
    kind: tuple[str, str],
    arity: tuple[int, int | None],
    infer: InferFn,
    cost_fn: CostFn,
    **attrs: AttrSpec,
) -> OpDef:
    """`kind`: (family, category)."""
    return OpDef(name, kind[0], kind[1], arity[0], arity[1], infer, cost_fn, attrs)


def _reads_quantized(opdef: OpDef, *operands: int) -> OpDef:
    return replace(opdef, quantized_operands=operands)


_COLLECTIVE = ("collective", "collective")
_DATA_MOVEMENT = ("data_movement", "data_movement")
_INDEXING = ("indexing", "data_movement")
_REDUCTION = ("reduction", "reduction")

# Every op but the elementwise ones, which `op_elementwise.ELEMENTWISE` declares.
_NOT_ELEMENTWISE: dict[str, OpDef] = {
    "all_gather": _op(
        "all_gather", _COLLECTIVE, (1, None), collective.all_gather, collective.all_gather_cost,
        axis=_REQUIRED_INT, group=_REQUIRED_INTS,
    ),
    "all_reduce": _op(
        "all_reduce", _COLLECTIVE, (1, None), collective.all_reduce, collective.all_reduce_cost,
        group=_REQUIRED_INTS,
    ),
    "argmax": _op(
        "argmax", ("indexing", "reduction"), (1, 1), indexing.argmax, costs.reduction,
        axis=AttrSpec("int", -1), keepdims=_FALSE,
    ),
    "attention": _op(
        "attention", ("attention", "opaque"), (3, 6), attention_rules.attention, costs.attention,
        causal=_FALSE,
        causal_align=AttrSpec("str", "bottom_right", choices=attention_rules.ALIGNMENTS),
        masked=_FALSE, scale=AttrSpec("float"), sinks=_FALSE, softcap=AttrSpec("float", 0.0),
        window=AttrSpec("int", 0),
    ),
    "avg_pool2d": _pool("avg_pool2d"),
    "concat": _op(
        "concat", _DATA_MOVEMENT, (1, None), rules.concat, costs.copy_result, axis=_REQUIRED_INT
    ),
    "conv2d": _op(
        "conv2d", ("image", "opaque"), (2, 3), rules.conv2d, costs.conv2d,
        groups=AttrSpec("int", 1), padding=AttrSpec("ints", (0, 0)),
        stride=AttrSpec("ints", (1, 1)),
    ),
    "copy": _reads_quantized(_op(
        "copy", _DATA_MOVEMENT, (1, 1), rules.same_type, costs.copy_result,
        to=AttrSpec("str", "cuda", choices=("cuda", "cpu")),
    ), 0),
    "cumsum": _op(
        "cumsum", ("indexing", "reduction"), (1, 1), indexing.cumsum, costs.reduction,
        axis=_REQUIRED_INT,
    ),
    "dequantize": _reads_quantized(_op(
        "dequantize", ("dequantize", "opaque"), (1, 1), rules.dequantize, costs.dequantize,
        dtype=AttrSpec("str", "f32", choices=("f32", "f16", "bf16")),
    ), 0),
    "expand": _op(
        "expand", _INDEXING, (1, 1), indexing.expand, costs.copy_result, shape=_REQUIRED_INTS
    ),
    "fused": _op("fused", ("fused", "opaque"), (1, None), _infer_fused, _fused_cost),
    "get_rows": _reads_quantized(
        _op("get_rows", _DATA_MOVEMENT, (2, 2), rules.get_rows, costs.get_rows), 0
    ),
    "kv_cache_write": OpDef(
        "kv_cache_write", "data_movement", "data_movement", 3, 3, rules.kv_cache_write,
        costs.kv_cache_write, inplace_operand=0,
    ),
    "layer_norm": _op(
        "layer_norm", _REDUCTION, (3, 3), rules.norm, costs.reduction, eps=AttrSpec("float", 1e-5)
    ),
    "log_softmax": _op(
        "log_softmax", _REDUCTION, (1, 1), rules.softmax, costs.reduction,
        axis=AttrSpec("int", -1),
    ),
    "matmul": _reads_quantized(_op(
        "matmul", ("matmul", "matmul"), (2, 2), rules.matmul, costs.matmul,
        transpose_a=_FALSE, transpose_b=_FALSE,
    ), 1),
    "max": _reduction("max", rules.reduce_max),
    "max_pool2d": _pool("max_pool2d"),
    "mean": _reduction("mean", rules.reduce_mean),
    "moe": _reads_quantized(_op(
        "moe", ("moe", "opaque"), (4, 8), moe_rules.moe, costs.moe,
        act=AttrSpec("str", "silu", choices=moe_rules.ACTIVATIONS),
        alpha=AttrSpec("float", 1.702), experts=AttrSpec("ints"),
        k=_REQUIRED_INT, limit=AttrSpec("float", 7.0), norm_topk=_FALSE,
        routing=AttrSpec("str", "softmax_topk", choices=moe_rules.ROUTINGS),
    ), 2, 3, 4),
    "pad": _op(
        "pad", _INDEXING, (1, 1), indexing.pad, costs.copy_result,
        pads=_REQUIRED_INTS, value=AttrSpec("float", 0.0),
    ),
    "prefetch": _reads_quantized(
        _op("prefetch", _DATA_MOVEMENT, (1, 1), rules.same_type, costs.copy_result), 0
    ),
    "recv": _op(
        "recv", _COLLECTIVE, (1, 1), collective.recv, collective.point_to_point_cost,
        **{"from": _REQUIRED_INT},
    ),
    "reshape": _view("reshape", rules.reshape, shape=_REQUIRED_INTS),
    "resize": _op(
        "resize", ("image", "opaque"), (1, 1), image_rules.resize, costs.resize,
        coordinates=AttrSpec("str", "asymmetric", choices=image_rules.COORDINATES),
        mode=AttrSpec("str", "nearest", choices=image_rules.MODES),
        nearest=AttrSpec("str", "floor", choices=image_rules.NEAREST),
        scale_h=AttrSpec("float"), scale_w=AttrSpec("float"), size=_REQUIRED_INTS,
    ),
    "rms_norm": _op(
        "rms_norm", _REDUCTION, (2, 2), rules.norm, costs.reduction, eps=AttrSpec("float", 1e-6)
    ),
    "rope": _op(
        "rope", ("rope", "opaque"), (2, 2), rope_rules.rope, costs.rope,
        attention_factor=AttrSpec("float"), beta_fast=AttrSpec("float"),
        beta_slow=AttrSpec("float"), factor=AttrSpec("float"),
        high_freq_factor=AttrSpec("float"), low_freq_factor=AttrSpec("float"),
        original_max_position=AttrSpec("int"), rotary_dim=AttrSpec("int"),
        scaling=AttrSpec("str", "none", choices=rope_rules.SCALINGS),
        theta=AttrSpec("float", 1e4), truncate=AttrSpec("bool"),
    ),
    "send": OpDef(
        "send", "collective", "collective", 1, 1, collective.send,
        collective.point_to_point_cost, {"to": _REQUIRED_INT}, is_view=True,
    ),
    "slice": _view(
        "slice", rules.slice_, axis=_REQUIRED_INT, end=_REQUIRED_INT, start=_REQUIRED_INT
    ),
    "softmax": _op(
        "softmax", _REDUCTION, (1, 1), rules.softmax, costs.reduction, axis=AttrSpec("int", -1)
    ),
    "sum": _reduction("sum", rules.reduce_numeric),
    "tile": _op(
        "tile", _INDEXING, (1, 1), indexing.tile, costs.copy_result, repeats=_REQUIRED_INTS
    ),
    "transpose": _view("transpose", rules.transpose, perm=_REQUIRED_INTS),
}  # fmt: skip

_DECLARED = {name: op.opdef(name) for name, op in ELEMENTWISE.items()}
OPS: dict[str, OpDef] = dict(sorted({**_NOT_ELEMENTWISE, **_DECLARED}.items()))


def get_op(name: str) -> OpDef | None:
    return OPS.get(name)


def op_names() -> tuple[str, ...]:
    """Every op name, sorted."""
    return tuple(OPS)


def attrs_with_defaults(node: Node) -> dict[str, AttrValue]:
    """The attributes a kernel sees: given ones (floats as float, lists as tuples) and defaults.

    Attributes without a default that were not given (attention's `scale`, a reduction's `axes`)
    are absent. Does not validate: call it on verified nodes.
    """
    opdef = OPS.get(node.op)
    if opdef is None:
        return dict(node.attrs)
    return dict(_resolved_attrs(node, opdef))  # a copy: callers may change theirs


def _resolved_attrs(node: Node, opdef: OpDef) -> dict[str, AttrValue]:
    """`attrs_with_defaults(node)` itself, remembered on the node: read it, never change it."""
    facts = node.type_facts()  # derived from op and attributes only: remembered on the node
    resolved: dict[str, AttrValue] | None = facts.get("attrs")
    if resolved is None:
        resolved = {
            k: normalized(v, opdef.attrs[k].kind) if k in opdef.attrs else v
            for k, v in node.attrs.items()
        }
        resolved = facts["attrs"] = fill_defaults(resolved, opdef.attrs)
    return resolved


def infer_type(node: Node, operand_types: Sequence[TensorType]) -> TensorType:
    """The result type of `node` given its operands' types; `VerifyError` on any problem.

    Does not compare with the node's declared type (the verifier does).
    """
    if len(operand_types) != len(node.operands):
        raise ValueError(f"{len(node.operands)} operands but {len(operand_types)} types given")
    opdef = OPS.get(node.op)
    if opdef is None:
        if node.is_event:
            raise fail(node, "events have no result type")
        raise VerifyError(f"unknown op '{node.op}'{did_you_mean(node.op, list(OPS))}", node.span)
    check_arity(node, opdef, len(operand_types))
    if node.body is not None and node.op != "fused":
        raise fail(node, "only fused nodes have a body")
    attrs = checked_attrs(node, opdef)
    if node.op != "fused":
        _check_quantized_reads(node, opdef, operand_types)
    return opdef.infer(node, operand_types, attrs)


# Who may read a quantized weight (`copy` and `prefetch` move its bytes too, but only passes make
# them): the end of the verifier's message to every other reader.
QUANTIZED_READERS = (
    "only matmul (as b, [N,K] with transpose_b = true), get_rows (as the table), moe (as its "
    "expert stacks) and dequantize read quantized weights"
)


def _check_quantized_reads(node: Node, opdef: OpDef, types: Sequence[TensorType]) -> None:
    for k, t in enumerate(types):
        if t.is_quantized and k not in opdef.quantized_operands:
            span = node.operand_spans[k] if k < len(node.operand_spans) else node.span
            raise VerifyError(
                f"{node.op}: operand '%{node.operands[k]}' is quantized ({t}); {QUANTIZED_READERS}",
                span,
            )


def attrs_key(node: Node) -> tuple[object, ...]:
    """`attrs_key_of(node.attrs)`: what the `alike` memos of `remembered_type` and `cost` (and
    fuse's region shapes) key on, made once per node (kept in its `TYPE_FACTS`; the parser
    hands every node whose attribute text it read before the key it made then)."""
    attrs = node.attrs
    if not attrs:
        return ()
    facts = node.type_facts()
    key: tuple[object, ...] | None = facts.get("attrs_key")
    if key is None:
        key = facts["attrs_key"] = attrs_key_of(attrs)
    return key


def remembered_type(
    node: Node,
    operand_types: Sequence[TensorType],
    alike: dict[tuple[object, ...], TensorType] | None = None,
) -> TensorType:
    """`infer_type(node, operand_types)`, remembered on `node` for these operand types.

    Nodes are immutable and a pipeline verifies after every pass, mostly the same nodes (or the
    same nodes re-annotated by `Node.with_ann`, or moved into a fused body by
    `Node.with_fields`) with the same operand types: each is inferred once, not once a pass.
    Failures are not remembered: their diagnostics carry spans.

    `alike`: types inferred for earlier nodes, by op, attributes and operand types (a caller's
    dict, for one walk over a graph): the type rules read nothing else of a node without a body
    but its span, for errors, so a model's repeated layers are inferred once, not once a node."""
    key = tuple(operand_types)
    facts: dict[str, Any] | None = node.__dict__.get(TYPE_FACTS)  # `node.type_facts()`, inline
    if facts is None:
        facts = node.__dict__[TYPE_FACTS] = {}
    else:
        memo = facts.get("inferred")
        if memo is not None and memo[0] == key:
            inferred: TensorType = memo[1]
            return inferred
    shared: tuple[object, ...] | None = None
    if alike is None or node.body is not None:
        inferred = infer_type(node, operand_types)
    else:
        shared = (node.op, attrs_key(node), key)
        found = alike.get(shared)
        if found is None:
            found = alike[shared] = infer_type(node, operand_types)
        inferred = found
    declared = node.type
    if declared is not None and inferred is not declared and inferred == declared:
        # The declared object, equal: later comparisons with it, and memo keys of the values
        # read from it (a fused body's environment), are identity tests. The memo of nodes
        # alike keeps it too: a parsed graph's nodes share their declared type objects, so the
        # next node alike finds its own.
        inferred = declared
        if alike is not None and shared is not None:
            alike[shared] = declared
    facts["inferred"] = (key, inferred)
    return inferred


def _fused_types(node: Node, types: Sequence[TensorType]) -> dict[str, TensorType]:
    """Types of a fused node's parameters and body values, inferred in order; remembered on the
    node for these operand types (verify infers them, the cost model reads them again). Callers
    only read the dict."""
    key = tuple(types)
    facts = node.type_facts()
    memo = facts.get("body_types")
    if memo is not None and memo[0] == key:
        known: dict[str, TensorType] = memo[1]
        return known
    env = _infer_fused_types(node, types)
    facts["body_types"] = (key, env)
    return env


_NOT_IN_BODIES = frozenset({"record", "wait", "fused"})


def _infer_fused_types(node: Node, types: Sequence[TensorType]) -> dict[str, TensorType]:
    body = node.body
    if body is None:
        raise fail(node, "missing body")
    if len(body.params) != len(types):
        raise fail(node, f"body has {len(body.params)} parameters but {len(types)} operands")
    env: dict[str, TensorType] = dict(zip(body.params, types))
    for inner in body.nodes:
        if inner.op in _NOT_IN_BODIES:
            raise VerifyError(f"fused: '{inner.op}' is not allowed in a body", inner.span)
        try:
            operand_types = [env[o] for o in inner.operands]
        except KeyError:
            operand = next(o for o in inner.operands if o not in env)
            raise VerifyError(
                f"fused: body node '%{inner.name}' uses undefined value '%{operand}'",
                inner.span,
            ) from None
        if inner.name in env:
            raise VerifyError(f"fused: '%{inner.name}' is defined twice in the body", inner.span)
        inferred = remembered_type(inner, operand_types)
        if inner.type is not None and inner.type is not inferred and inner.type != inferred:
            raise VerifyError(
                f"{inner.op}: declared type {inner.type} but the operands give {inferred}",
                inner.span,
            )
        env[inner.name] = inferred
    if body.result not in env:
        raise fail(node, f"yield of undefined value '%{body.result}'")
    return env


def cost(
    node: Node,
    operand_types: Sequence[TensorType],
    result_type: TensorType,
    alike: dict[tuple[object, ...], Cost] | None = None,
) -> Cost:
    """Estimated bytes read + written and flops of one node (call it on verified nodes).

    `alike`: costs of earlier nodes by op, attributes, operand and result types (a caller's dict,
    for one walk over a graph): the cost rules read nothing else of a node without a body, so a
    model's repeated layers are costed once, not once a node."""
    opdef = OPS.get(node.op)
    if opdef is None:
        return Cost(0, 0)
    if alike is None:
        # The cost rules only read the attributes: they get the remembered dict, not a copy.
        return opdef.cost(node, operand_types, result_type, _resolved_attrs(node, opdef))
    if node.body is not None:
        return _fused_cost(node, operand_types, result_type, {}, alike)
    key = (node.op, attrs_key(node), tuple(operand_types), result_type)
    found = alike.get(key)
    if found is None:
        found = alike[key] = opdef.cost(
            node, operand_types, result_type, _resolved_attrs(node, opdef)
        )
    return found
