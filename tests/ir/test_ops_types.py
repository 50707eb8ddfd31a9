"""Type inference of every op in the op table, its error messages, costs and the roofline model.

Nodes are built directly (no parser). Each error test pins the full message, so a change in
wording is a visible, deliberate diff.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from optgraph.errors import Span, VerifyError
from optgraph.ir.graph import AttrValue, Node, Region, TensorType
from optgraph.ir.op_specs import CATEGORIES
from optgraph.ir.ops import (
    H100,
    H200,
    OPS,
    Cost,
    attrs_with_defaults,
    cost,
    estimate_seconds,
    get_op,
    infer_type,
    op_names,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ir.md"


def t(spec: str) -> TensorType:
    """`f32[2,3]` -> TensorType("f32", (2, 3))."""
    match = re.fullmatch(r"(\w+)\[([\d,]*)\]", spec)
    assert match, spec
    dims = match.group(2)
    return TensorType(match.group(1), tuple(int(d) for d in dims.split(",")) if dims else ())


def make(op: str, n: int, attrs: dict[str, AttrValue] | None = None, **kw: object) -> Node:
    return Node(name="y", op=op, operands=tuple(f"a{i}" for i in range(n)), attrs=attrs or {}, **kw)  # type: ignore[arg-type]


def infer(op: str, *types: str, **attrs: AttrValue) -> str:
    return str(infer_type(make(op, len(types), attrs), [t(s) for s in types]))


def error(op: str, *types: str, **attrs: AttrValue) -> str:
    with pytest.raises(VerifyError) as info:
        infer_type(make(op, len(types), attrs), [t(s) for s in types])
    return info.value.message


# -- the table ---------------------------------------------------------------------------------


def _documented_ops() -> set[str]:
    text = DOCS.read_text()
    table = text[text.index("## Ops") :]
    names: set[str] = set()
    for line in table.splitlines():
        if not line.startswith("| ") or line.startswith(("| op ", "|---")):
            continue
        first = line.split("|")[1]
        names.update(re.sub(r"\(.*?\)", "", first).split())
    return names


def test_table_matches_docs_and_is_sorted() -> None:
    assert set(OPS) == _documented_ops()
    assert list(OPS) == sorted(OPS)
    assert op_names() == tuple(sorted(OPS))
    for name, opdef in OPS.items():
        assert opdef.name == name
        assert opdef.category in CATEGORIES
        for spec in opdef.attrs.values():
            assert spec.kind in ("bool", "int", "float", "str", "ints")
    assert {opdef.category for opdef in OPS.values()} == set(CATEGORIES)  # none unused
    assert get_op("matmul") is OPS["matmul"]
    assert get_op("nope") is None


def test_categories_views_and_inplace() -> None:
    assert {n for n, d in OPS.items() if d.is_view} == {"reshape", "transpose", "slice", "send"}
    assert OPS["kv_cache_write"].inplace_operand == 0
    assert OPS["add"].inplace_operand == 0 and OPS["exp"].inplace_operand == 0
    assert OPS["matmul"].inplace_operand is None
    assert OPS["softmax"].category == "reduction"
    assert OPS["rms_norm"].category == "reduction"
    for name in ("attention", "conv2d", "max_pool2d", "avg_pool2d"):
        assert OPS[name].category == "opaque"
    for name in ("reshape", "concat", "get_rows", "copy", "prefetch", "kv_cache_write"):
        assert OPS[name].category == "data_movement"


# -- generic checks: arity, attributes, unknown ops --------------------------------------------


def test_arity_errors() -> None:
    assert error("exp") == "exp: expected 1 operand, got 0"
    assert error("add", "f32[2]") == "add: expected 2 operands, got 1"
    assert error("attention", "f32[1,1,1,4]", "f32[1,1,1,4]") == (
        "attention: expected 3 to 6 operands, got 2"
    )
    assert error("concat", axis=0) == "concat: expected at least 1 operand, got 0"


def test_unknown_attribute_did_you_mean() -> None:
    assert error("softmax", "f32[2,4]", axsi=1) == (
        "softmax: unknown attribute 'axsi' (did you mean 'axis'?)"
    )
    assert error("relu", "f32[2]", axis=1) == (
        "relu: unknown attribute 'axis' (relu takes no attributes)"
    )
    assert error("matmul", "f32[2,2]", "f32[2,2]", zzz=True) == (
        "matmul: unknown attribute 'zzz' (expected one of: transpose_a, transpose_b)"
    )


def test_attribute_kind_errors() -> None:
    assert error("softmax", "f32[2,4]", axis="x") == (
        "softmax: attribute 'axis' must be an int, got \"x\""
    )
    assert error("softmax", "f32[2,4]", axis=1.0) == (
        "softmax: attribute 'axis' must be an int, got 1.0"
    )
    assert error("matmul", "f32[2,2]", "f32[2,2]", transpose_a=1) == (
        "matmul: attribute 'transpose_a' must be a bool, got 1"
    )
    assert error("scale", "f32[2]", factor=True) == (
        "scale: attribute 'factor' must be a float, got true"
    )
    assert error("transpose", "f32[2,3]", perm=3) == (
        "transpose: attribute 'perm' must be an integer list, got 3"
    )
    assert error("gelu", "f32[2]", approximate=1) == (
        "gelu: attribute 'approximate' must be a string, got 1"
    )


def test_attribute_allowed_values() -> None:
    assert error("gelu", "f32[2]", approximate="erf") == (
        'gelu: attribute \'approximate\' must be "tanh" or "none", got "erf"'
    )
    assert error("copy", "f32[2]", to="gpu") == (
        'copy: attribute \'to\' must be "cuda" or "cpu", got "gpu"'
    )
    assert error("cast", "f32[2]", dtype="f64") == (
        'cast: attribute \'dtype\' must be one of "f32", "f16", "bf16", "i32", "i64", "bool", '
        'got "f64"'
    )


def test_missing_required_attribute() -> None:
    assert error("reshape", "f32[2,3]") == "reshape: missing required attribute 'shape'"
    assert error("slice", "f32[2,3]", start=0, end=1) == (
        "slice: missing required attribute 'axis'"
    )
    assert error("max_pool2d", "f32[1,1,4,4]") == "max_pool2d: missing required attribute 'kernel'"
    assert error("concat", "f32[2]", "f32[2]") == "concat: missing required attribute 'axis'"


def test_unknown_op_and_body_rules() -> None:
    assert (
        error("matmull", "f32[2,2]", "f32[2,2]") == "unknown op 'matmull' (did you mean 'matmul'?)"
    )
    body = Region(("p",), (), "p")
    node = make("relu", 1, body=body)
    with pytest.raises(VerifyError, match="relu: only fused nodes have a body"):
        infer_type(node, [t("f32[2]")])


def test_error_carries_the_node_span() -> None:
    span = Span("m.ir", 4, 19, 21, "  %y = matmul(%x, %w) : f32[2,4]")
    node = Node("y", "matmul", ("x", "w"), span=span)
    with pytest.raises(VerifyError) as info:
        infer_type(node, [t("f32[2,8]"), t("f32[4,4]")])
    assert info.value.message == "matmul: inner dimensions differ (8 vs 4)"
    assert info.value.span == span
    assert "m.ir:4:19: error: matmul: inner dimensions differ (8 vs 4)" in str(info.value)


# -- elementwise -------------------------------------------------------------------------------


def test_unary() -> None:
    assert infer("exp", "f16[2,3]") == "f16[2,3]"
    assert infer("neg", "i32[4]") == "i32[4]"
    assert infer("relu", "i64[4]") == "i64[4]"
    assert infer("abs", "i32[]") == "i32[]"
    assert error("exp", "i32[4]") == "exp: expected a float operand, got i32[4]"
    assert error("silu", "bool[4]") == "silu: expected a float operand, got bool[4]"
    assert error("relu", "bool[4]") == "relu: expected a numeric operand, got bool[4]"
    assert infer("gelu", "bf16[3]") == "bf16[3]"
    assert infer("gelu", "f32[3]", approximate="none") == "f32[3]"


def test_cast_and_scale() -> None:
    assert infer("cast", "f32[2,3]") == "f16[2,3]"
    assert infer("cast", "f32[2,3]", dtype="i32") == "i32[2,3]"
    assert infer("cast", "bool[2]", dtype="bf16") == "bf16[2]"
    assert infer("scale", "f32[2]", factor=2) == "f32[2]"
    assert error("scale", "i32[2]", factor=2.0) == "scale: expected a float operand, got i32[2]"


def test_binary_broadcast_and_dtypes() -> None:
    assert infer("add", "f32[2,3]", "f32[3]") == "f32[2,3]"
    assert infer("mul", "f32[4,1]", "f32[1,5]") == "f32[4,5]"
    assert infer("sub", "f32[]", "f32[2,2]") == "f32[2,2]"
    assert infer("maximum", "i32[3]", "i32[3]") == "i32[3]"
    assert infer("pow", "f32[3]", "f32[1]") == "f32[3]"
    assert error("add", "f32[2,3]", "f32[4]") == "add: cannot broadcast f32[2,3] with f32[4]"
    assert error("add", "f32[2]", "f16[2]") == "add: operand dtypes differ (f32 vs f16)"
    assert error("pow", "i32[2]", "i32[2]") == "pow: expected a float operand, got i32[2]"
    assert infer("div", "i32[2]", "i32[2]") == "i32[2]"
    assert (
        error("minimum", "bool[2]", "bool[2]") == "minimum: expected a numeric operand, got bool[2]"
    )


# -- reductions and norms ----------------------------------------------------------------------


def test_reductions() -> None:
    assert infer("sum", "f32[2,3,4]") == "f32[]"
    assert infer("sum", "f32[2,3,4]", keepdims=True) == "f32[1,1,1]"
    assert infer("mean", "f32[2,3,4]", axes=(1,)) == "f32[2,4]"
    assert infer("max", "f32[2,3,4]", axes=(-1, 0), keepdims=True) == "f32[1,3,1]"
    assert infer("sum", "i32[5,2]", axes=(0,)) == "i32[2]"
    assert error("sum", "f32[2,3]", axes=(2,)) == "sum: axis 2 out of range for f32[2,3]"
    assert error("max", "f32[2,3]", axes=(1, -1)) == (
        "max: attribute 'axes' repeats an axis: [1,-1] for f32[2,3]"
    )
    assert error("mean", "i32[4]") == "mean: expected a float operand, got i32[4]"
    assert error("sum", "f32[2]", keepdims=1) == "sum: attribute 'keepdims' must be a bool, got 1"


def test_softmax() -> None:
    assert infer("softmax", "f32[2,4]") == "f32[2,4]"
    assert infer("softmax", "f32[2,4]", axis=0) == "f32[2,4]"
    assert error("softmax", "f32[2,4]", axis=2) == "softmax: axis 2 out of range for f32[2,4]"
    assert error("softmax", "f32[]") == "softmax: expected an operand of rank >= 1, got f32[]"


def test_norms() -> None:
    assert infer("rms_norm", "f32[2,8]", "f32[8]") == "f32[2,8]"
    assert infer("layer_norm", "f16[2,3,8]", "f16[8]", "f16[8]", eps=1e-3) == "f16[2,3,8]"
    assert error("rms_norm", "f32[2,8]", "f32[4]") == (
        "rms_norm: w must be f32[8] to match f32[2,8], got f32[4]"
    )
    assert error("layer_norm", "f32[2,8]", "f32[8]", "f32[2,8]") == (
        "layer_norm: b must be f32[8] to match f32[2,8], got f32[2,8]"
    )
    assert error("rms_norm", "f32[2,8]", "f16[8]") == "rms_norm: operand dtypes differ (f32 vs f16)"
    assert error("rms_norm", "f32[2,8]", "f32[8]", eps="x") == (
        "rms_norm: attribute 'eps' must be a float, got \"x\""
    )


# -- matmul ------------------------------------------------------------------------------------


def test_matmul() -> None:
    assert infer("matmul", "f32[2,8]", "f32[8,4]") == "f32[2,4]"
    assert infer("matmul", "f32[8,2]", "f32[8,4]", transpose_a=True) == "f32[2,4]"
    assert infer("matmul", "f32[2,8]", "f32[4,8]", transpose_b=True) == "f32[2,4]"
    assert infer("matmul", "f16[3,2,8]", "f16[8,4]") == "f16[3,2,4]"
    assert infer("matmul", "f32[5,1,2,8]", "f32[3,8,4]") == "f32[5,3,2,4]"
    assert error("matmul", "f32[2,8]", "f32[4,4]") == "matmul: inner dimensions differ (8 vs 4)"
    assert (
        error("matmul", "f32[8]", "f32[8,4]") == "matmul: operand a must have rank >= 2, got f32[8]"
    )
    assert error("matmul", "f32[2,2,8]", "f32[3,8,4]") == (
        "matmul: cannot broadcast batch dimensions [2] with [3]"
    )
    assert error("matmul", "f32[2,8]", "f16[8,4]") == "matmul: operand dtypes differ (f32 vs f16)"


# -- data movement -----------------------------------------------------------------------------


def test_views() -> None:
    assert infer("reshape", "f32[2,3,4]", shape=(6, 4)) == "f32[6,4]"
    assert infer("reshape", "f32[2,3]", shape=[3, 2]) == "f32[3,2]"
    assert error("reshape", "f32[2,3,4]", shape=(4, 5)) == (
        "reshape: cannot reshape f32[2,3,4] to [4,5] (24 vs 20 elements)"
    )
    assert error("reshape", "f32[2,3]", shape=(-1, 2)) == (
        "reshape: attribute 'shape' must list explicit sizes >= 0, got [-1,2]"
    )
    assert infer("transpose", "f32[2,3,4]", perm=(2, 0, 1)) == "f32[4,2,3]"
    assert error("transpose", "f32[2,3]", perm=(0, 0)) == (
        "transpose: perm [0,0] is not a permutation of the 2 axes of f32[2,3]"
    )
    assert infer("slice", "f32[4,6]", axis=1, start=2, end=5) == "f32[4,3]"
    assert infer("slice", "f32[4,6]", axis=-2, start=0, end=4) == "f32[4,6]"
    assert error("slice", "f32[4,6]", axis=1, start=2, end=7) == (
        "slice: range 2:7 out of bounds for axis 1 of size 6 in f32[4,6]"
    )
    assert error("slice", "f32[4,6]", axis=1, start=-1, end=2) == (
        "slice: range -1:2 out of bounds for axis 1 of size 6 in f32[4,6]"
    )
    assert error("slice", "f32[4,6]", axis=2, start=0, end=1) == (
        "slice: axis 2 out of range for f32[4,6]"
    )


def test_concat() -> None:
    assert infer("concat", "f32[2,3]", "f32[2,5]", "f32[2,1]", axis=1) == "f32[2,9]"
    assert infer("concat", "f32[2,3]", axis=-1) == "f32[2,3]"
    assert error("concat", "f32[2,3]", "f32[3,3]", axis=1) == (
        "concat: operand shapes differ outside axis 1 (f32[2,3] vs f32[3,3])"
    )
    assert error("concat", "f32[2,3]", "f16[2,3]", axis=0) == (
        "concat: operand dtypes differ (f32 vs f16)"
    )


def test_get_rows() -> None:
    assert infer("get_rows", "f16[100,8]", "i32[2,3]") == "f16[2,3,8]"
    assert infer("get_rows", "f32[4,25,8]", "i64[5]") == "f32[5,8]"
    assert error("get_rows", "f32[100,8]", "f32[3]") == (
        "get_rows: ids must have an integer dtype (i32 or i64), got f32[3]"
    )
    assert error("get_rows", "f32[100]", "i32[3]") == (
        "get_rows: table must have rank >= 2, got f32[100]"
    )


def test_kv_cache_write() -> None:
    assert infer("kv_cache_write", "f32[1,2,32,16]", "f32[1,2,4,16]", "i32[1]") == "f32[1,2,32,16]"
    assert error("kv_cache_write", "f32[1,2,4,16]", "f32[1,2,8,16]", "i32[1]") == (
        "kv_cache_write: new has more rows than the cache (f32[1,2,8,16] vs f32[1,2,4,16])"
    )
    assert error("kv_cache_write", "f32[1,2,8,16]", "f32[1,2,1,8]", "i32[1]") == (
        "kv_cache_write: head dimensions differ (f32[1,2,8,16] vs f32[1,2,1,8])"
    )
    assert error("kv_cache_write", "f32[1,2,8,16]", "f32[1,2,1,16]", "i32[2]") == (
        "kv_cache_write: pos must be i32[1] or i64[1], got i32[2]"
    )
    assert error("kv_cache_write", "f32[2,8,16]", "f32[1,2,1,16]", "i32[1]") == (
        "kv_cache_write: cache must be [B,H,Smax,D], got f32[2,8,16]"
    )


def test_copy_and_prefetch() -> None:
    assert infer("copy", "f16[3]", to="cpu") == "f16[3]"
    assert infer("copy", "i32[3]") == "i32[3]"
    assert infer("prefetch", "bf16[4,4]") == "bf16[4,4]"


# -- opaque ------------------------------------------------------------------------------------


def test_rope() -> None:
    assert infer("rope", "f32[1,5,4,16]", "i32[5]") == "f32[1,5,4,16]"
    assert infer("rope", "f16[2,1,4,8]", "i64[1]", theta=500000) == "f16[2,1,4,8]"
    assert error("rope", "f32[1,5,4,15]", "i32[5]") == (
        "rope: head dimension must be even, got 15 in f32[1,5,4,15]"
    )
    assert error("rope", "f32[1,5,4,16]", "i32[4]") == (
        "rope: pos must be [S] = [5] for x f32[1,5,4,16], got i32[4]"
    )
    assert error("rope", "f32[1,5,4,16]", "f32[5]") == (
        "rope: pos must have an integer dtype (i32 or i64), got f32[5]"
    )
    assert error("rope", "f32[5,4,16]", "i32[5]") == "rope: x must be [B,S,H,D], got f32[5,4,16]"


def test_attention() -> None:
    q, kv = "f32[2,8,5,16]", "f32[2,2,7,16]"
    assert infer("attention", q, kv, kv) == q
    assert infer("attention", q, kv, kv, "i32[1]", causal=True, scale=0.5) == q
    assert error("attention", "f32[2,6,5,16]", "f32[2,4,7,16]", "f32[2,4,7,16]") == (
        "attention: query heads 6 are not a multiple of kv heads 4"
    )
    assert error("attention", q, "f32[2,2,7,8]", "f32[2,2,7,8]") == (
        "attention: head dimensions differ (16 vs 8)"
    )
    assert error("attention", q, kv, "f32[2,2,6,16]") == (
        "attention: k and v shapes differ (f32[2,2,7,16] vs f32[2,2,6,16])"
    )
    assert error("attention", q, "f32[1,2,7,16]", "f32[1,2,7,16]") == (
        "attention: batch sizes differ (2 vs 1)"
    )
    assert error("attention", q, kv, kv, "f32[1]") == (
        "attention: kv_len must be i32[1] or i32[B] = i32[2] (or i64), got f32[1]"
    )
    assert error("attention", q, kv, "f16[2,2,7,16]") == (
        "attention: operand dtypes differ (f32 vs f16)"
    )
    assert error("attention", q, kv, kv, causal="yes") == (
        "attention: attribute 'causal' must be a bool, got \"yes\""
    )


def test_conv2d() -> None:
    assert infer("conv2d", "f32[2,3,8,8]", "f32[4,3,3,3]") == "f32[2,4,6,6]"
    assert infer("conv2d", "f32[2,3,8,8]", "f32[4,3,3,3]", "f32[4]", padding=(1, 1)) == (
        "f32[2,4,8,8]"
    )
    assert infer("conv2d", "f32[1,4,9,7]", "f32[6,2,3,1]", stride=(2, 3), groups=2) == (
        "f32[1,6,4,3]"
    )
    assert error("conv2d", "f32[1,4,8,8]", "f32[4,3,3,3]") == (
        "conv2d: w expects 3 input channels per group, x has 4 (f32[1,4,8,8] vs f32[4,3,3,3])"
    )
    assert error("conv2d", "f32[1,4,8,8]", "f32[6,2,3,3]", groups=3) == (
        "conv2d: groups = 3 must divide input channels 4 and output channels 6"
    )
    assert error("conv2d", "f32[1,3,8,8]", "f32[4,3,3,3]", "f32[3]") == (
        "conv2d: b must be f32[4] to match w f32[4,3,3,3], got f32[3]"
    )
    assert error("conv2d", "f32[1,3,8,8]", "f32[4,3,3,3]", stride=(1,)) == (
        "conv2d: attribute 'stride' must have 2 values, got [1]"
    )
    assert error("conv2d", "f32[1,3,8,8]", "f32[4,3,3,3]", stride=(0, 1)) == (
        "conv2d: attribute 'stride' values must be >= 1, got [0,1]"
    )
    assert error("conv2d", "f32[1,3,2,2]", "f32[4,3,3,3]") == (
        "conv2d: kernel size 3 exceeds padded input size 2"
    )


def test_pools() -> None:
    assert infer("max_pool2d", "f32[1,3,8,8]", kernel=(2, 2)) == "f32[1,3,4,4]"
    assert infer("avg_pool2d", "f32[1,3,8,8]", kernel=(3, 3), stride=(1, 1), padding=(1, 1)) == (
        "f32[1,3,8,8]"
    )
    assert infer("max_pool2d", "f32[1,1,7,7]", kernel=(3, 3), stride=(2, 2)) == "f32[1,1,3,3]"
    assert error("max_pool2d", "f32[1,1,8,8]", kernel=(2, 2), padding=(2, 0)) == (
        "max_pool2d: padding [2,0] exceeds half the kernel [2,2]"
    )
    assert error("avg_pool2d", "i32[1,1,8,8]", kernel=(2, 2)) == (
        "avg_pool2d: expected a float x, got i32[1,1,8,8]"
    )


# -- fused -------------------------------------------------------------------------------------


def _fused(body_nodes: tuple[Node, ...], params: tuple[str, ...], result: str, n: int) -> Node:
    return make("fused", n, body=Region(params, body_nodes, result))


def test_fused_infers_from_the_body() -> None:
    body = (
        Node("t", "sub", ("p0", "p1")),
        Node("u", "cast", ("t",), {"dtype": "f16"}),
    )
    node = _fused(body, ("p0", "p1"), "u", 2)
    assert str(infer_type(node, [t("f32[4,8]"), t("f32[4,1]")])) == "f16[4,8]"


def test_fused_errors() -> None:
    types = [t("f32[4]"), t("f32[4]")]
    with pytest.raises(VerifyError, match=r"^error: fused: body has 1 parameters but 2 operands$"):
        infer_type(_fused((), ("p0",), "p0", 2), types)
    bad_use = _fused((Node("t", "add", ("p0", "q")),), ("p0", "p1"), "t", 2)
    with pytest.raises(
        VerifyError, match="^error: fused: body node '%t' uses undefined value '%q'$"
    ):
        infer_type(bad_use, types)
    with pytest.raises(VerifyError, match="^error: fused: yield of undefined value '%z'$"):
        infer_type(_fused((), ("p0", "p1"), "z", 2), types)
    inner = Node("f", "fused", ("p0",), body=Region(("r",), (), "r"))
    with pytest.raises(VerifyError, match="^error: fused: 'fused' is not allowed in a body$"):
        infer_type(_fused((inner,), ("p0", "p1"), "f", 2), types)
    with pytest.raises(VerifyError, match="^error: fused: missing body$"):
        infer_type(make("fused", 2), types)
    mismatch = _fused((Node("t", "add", ("p0", "p1")),), ("p0", "p1"), "t", 2)
    with pytest.raises(VerifyError, match=r"^error: add: cannot broadcast f32\[4\] with f32\[3\]$"):
        infer_type(mismatch, [t("f32[4]"), t("f32[3]")])


# -- attributes seen by kernels ----------------------------------------------------------------


def test_attrs_with_defaults() -> None:
    pool = make("max_pool2d", 1, {"kernel": [3, 3]})
    assert attrs_with_defaults(pool) == {"kernel": (3, 3), "stride": (3, 3), "padding": (0, 0)}
    scale = make("scale", 1, {"factor": 2})
    assert attrs_with_defaults(scale) == {"factor": 2.0}
    assert isinstance(attrs_with_defaults(scale)["factor"], float)
    assert attrs_with_defaults(make("attention", 3)) == {
        "causal": False,
        "causal_align": "bottom_right",
        "masked": False,
        "sinks": False,
        "softcap": 0.0,
        "window": 0,
    }
    assert attrs_with_defaults(make("gelu", 1)) == {"approximate": "tanh"}


# -- cost and roofline -------------------------------------------------------------------------


def _cost(op: str, types: list[str], result: str, **attrs: AttrValue) -> Cost:
    return cost(make(op, len(types), attrs), [t(s) for s in types], t(result))


def test_costs() -> None:
    mm = _cost("matmul", ["f32[3,2,8]", "f32[8,4]"], "f32[3,2,4]")
    assert mm.flops == 2 * 3 * 2 * 4 * 8
    assert mm.bytes == 4 * (48 + 32 + 24)
    mm_t = _cost("matmul", ["f16[8,2]", "f16[4,8]"], "f16[2,4]", transpose_a=True, transpose_b=True)
    assert mm_t.flops == 2 * 2 * 4 * 8
    assert _cost("reshape", ["f32[2,3]"], "f32[3,2]") == Cost(0, 0)
    assert _cost("transpose", ["f32[2,3]"], "f32[3,2]", perm=(1, 0)).bytes == 0
    add = _cost("add", ["f32[4,8]", "f32[8]"], "f32[4,8]")
    assert add == Cost(4 * (32 + 8 + 32), 32)
    attn = _cost(
        "attention", ["f16[1,4,3,16]", "f16[1,2,10,16]", "f16[1,2,10,16]"], "f16[1,4,3,16]"
    )
    assert attn.flops >= 4 * 1 * 4 * 3 * 10 * 16
    assert attn.flops < 5 * 1 * 4 * 3 * 10 * 16
    conv = _cost("conv2d", ["f32[2,4,8,8]", "f32[6,2,3,3]"], "f32[2,6,6,6]", groups=2)
    assert conv.flops == 2 * 2 * 6 * 6 * 6 * 2 * 3 * 3
    kv = _cost("kv_cache_write", ["f32[1,2,32,16]", "f32[1,2,1,16]", "i32[1]"], "f32[1,2,32,16]")
    assert kv.bytes == 2 * 2 * 16 * 4 + 4


def test_fused_cost_counts_only_region_io() -> None:
    body = (Node("t", "mul", ("p0", "p1"), type=t("f32[64]")), Node("u", "exp", ("t",)))
    node = _fused(body, ("p0", "p1"), "u", 2)
    c = cost(node, [t("f32[64]"), t("f32[64]")], t("f32[64]"))
    assert c.bytes == 3 * 64 * 4
    expected_flops = _cost("mul", ["f32[64]"] * 2, "f32[64]").flops
    expected_flops += _cost("exp", ["f32[64]"], "f32[64]").flops
    assert c.flops == expected_flops


def test_estimate_seconds_is_a_roofline() -> None:
    assert H200.memory_bandwidth == 4.8e12 and H100.memory_bandwidth == 3.35e12
    memory_bound = Cost(bytes=3_350_000_000, flops=1000)
    assert estimate_seconds(memory_bound, "f32", H100) == pytest.approx(H100.launch_overhead + 1e-3)
    compute_bound = Cost(bytes=10, flops=int(H100.peak_flops_f16))
    assert estimate_seconds(compute_bound, "f16", H100) == pytest.approx(H100.launch_overhead + 1.0)
    # f32 has no tensor-core peak: the same flops take longer
    assert estimate_seconds(compute_bound, "f32", H100) > estimate_seconds(
        compute_bound, "bf16", H100
    )
    assert estimate_seconds(Cost(0, 0), "f32", H200) == H200.launch_overhead
