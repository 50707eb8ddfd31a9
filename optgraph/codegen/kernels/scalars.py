"""Elementwise IR nodes as C statements over float32 scalars: what every per-element body shares.

The elementwise kernels, fused regions, reduction prologues and epilogues, the one-row products'
epilogues and row prologues all evaluate IR nodes one element at a time. This module turns such
nodes into C: `load_params` reads each operand at its broadcast offset, `emit_scalars` computes
the nodes in order, `scalar_expr` is one node as an expression of its operands:

    %t = add(%p0, %p1)  %y = relu(%t)      (p0 : f32[4,64], p1 : f32[64])
    ->  const float p0 = in0[i];  const float p1 = in1[i % 64u];
        const float v0 = (p0 + p1);  const float v1 = og_max(v0, 0.0f);

Values stay in their compute type (float32 for every float dtype); a `cast` to f16 or bf16
still rounds. `env` maps an IR value to its (C variable, dtype) and grows as statements are
emitted. Not handled here: anything but the elementwise ops of `SCALAR_OPS` (a reduction or a
product is the anchor of its kernel, emitted by its own family).
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    COMPUTE,
    CodegenError,
    broadcast_offset,
    f32_literal,
    load,
)
from optgraph.ir.graph import FLOAT_DTYPES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

UNARY_FLOAT: dict[str, str] = {
    "exp": "expf({0})",
    "log": "logf({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "(1.0f / sqrtf({0}))",
    "tanh": "tanhf({0})",
    "sigmoid": "og_sigmoid({0})",
    "silu": "({0} * og_sigmoid({0}))",
    "erf": "erff({0})",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
}
BINARY: dict[str, str] = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "maximum": "og_max({0}, {1})",
    "minimum": "og_min({0}, {1})",
    "pow": "powf({0}, {1})",
    "equal": "({0} == {1})",
    "less": "({0} < {1})",
    "greater": "({0} > {1})",
    "less_equal": "({0} <= {1})",
    "greater_equal": "({0} >= {1})",
    "and": "({0} && {1})",
    "or": "({0} || {1})",
}
SCALAR_OPS = frozenset(UNARY_FLOAT) | frozenset(BINARY) | {
    "neg", "abs", "relu", "gelu", "cast", "scale", "not", "where", "clip", "prelu", "mod",
}  # fmt: skip

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2 = 0.7071067811865476


def _zero(dtype: str) -> str:
    return {"i64": "0LL", "i32": "0"}.get(dtype, "0.0f")


def scalar_expr(node: Node, args: Sequence[str], arg_dtypes: Sequence[str]) -> str:
    """One elementwise node as a C expression of its operands' compute values."""
    assert node.type is not None
    op, dtype, a = node.op, node.type.dtype, args[0]
    attrs = attrs_with_defaults(node)
    if op in UNARY_FLOAT:
        return UNARY_FLOAT[op].format(a)
    if op == "div" and dtype not in FLOAT_DTYPES:
        return f"og_idiv({a}, {args[1]})"
    if op == "mod":
        return f"og_{'rem' if attrs['fmod'] else 'mod'}({a}, {args[1]})"
    if op in BINARY:
        return BINARY[op].format(a, args[1])
    if op == "neg":
        return f"(-{a})"
    if op == "not":
        return f"(!{a})"
    if op == "prelu":
        return f"({a} >= 0.0f ? {a} : {args[1]} * {a})"
    if op == "where":
        return f"({a} ? {args[1]} : {args[2]})"
    if op == "clip":
        return _clip(a, attrs.get("min"), attrs.get("max"))
    if op == "abs":
        return f"fabsf({a})" if dtype in FLOAT_DTYPES else f"({a} < 0 ? -{a} : {a})"
    if op == "relu":
        return f"og_max({a}, {_zero(dtype)})"
    if op == "scale":
        return f"({a} * {f32_literal(float(attrs['factor']))})"  # type: ignore[arg-type]
    if op == "gelu":
        if attrs["approximate"] == "none":
            return f"(0.5f * {a} * (1.0f + erff({a} * {f32_literal(_INV_SQRT_2)})))"
        cubic = f"{f32_literal(0.044715)} * {a} * {a} * {a}"
        inner = f"{f32_literal(_SQRT_2_OVER_PI)} * ({a} + {cubic})"
        return f"(0.5f * {a} * (1.0f + tanhf({inner})))"
    if op == "cast":
        value = _convert(arg_dtypes[0], dtype, a)
        if dtype == "f16":
            return f"og_f16_to_f32(og_f32_to_f16({value}))"
        if dtype == "bf16":
            return f"og_bf16_to_f32(og_f32_to_bf16({value}))"
        return value
    raise CodegenError(f"{op}: not an elementwise op", node.span)


def _clip(a: str, low: object, high: object) -> str:
    """og_max/og_min keep a NaN operand NaN, as NumPy's clip does."""
    if isinstance(low, float):
        a = f"og_max({a}, {f32_literal(low)})"
    if isinstance(high, float):
        a = f"og_min({a}, {f32_literal(high)})"
    return a


def _convert(from_dtype: str, to_dtype: str, expr: str) -> str:
    """A compute value of `from_dtype` as a compute value of `to_dtype` (NumPy astype rules)."""
    if COMPUTE[from_dtype] == COMPUTE[to_dtype]:
        return expr
    if to_dtype == "bool":
        return f"(({expr}) != 0)"
    return f"(({COMPUTE[to_dtype]})({expr}))"


def emit_scalars(nodes: Sequence[Node], env: dict[str, tuple[str, str]], prefix: str) -> list[str]:
    """C statements computing `nodes` in order; `env` maps value -> (C variable, dtype) and grows."""
    lines = []
    for k, n in enumerate(nodes):
        assert n.type is not None
        for o in n.operands:
            if o not in env:
                raise CodegenError(f"fused: body value '%{o}' is not available here", n.span)
        args = [env[o][0] for o in n.operands]
        dtypes = [env[o][1] for o in n.operands]
        var = f"{prefix}{k}"
        lines.append(f"const {COMPUTE[n.type.dtype]} {var} = {scalar_expr(n, args, dtypes)};")
        env[n.name] = (var, n.type.dtype)
    return lines


def load_params(
    params: Sequence[str],
    types: Sequence[TensorType],
    roles: Sequence[str],
    used: set[str],
    index: str,
    target: Sequence[int],
    env: dict[str, tuple[str, str]],
    prefix: str = "p",
) -> list[str]:
    """Statements loading each used parameter at its broadcast offset for `index` of `target`."""
    lines = []
    for k, (name, t, role) in enumerate(zip(params, types, roles)):
        if name not in used:
            continue
        var = f"{prefix}{k}"
        offset = broadcast_offset(index, t.shape, target)
        lines.append(f"const {COMPUTE[t.dtype]} {var} = {load(t.dtype, f'{role}[{offset}]')};")
        env[name] = (var, t.dtype)
    return lines


def used_values(nodes: Sequence[Node], extra: Sequence[str] = ()) -> set[str]:
    """Every value `nodes` read, and `extra`."""
    return {o for n in nodes for o in n.operands} | set(extra)


def needed_values(prologue: Sequence[Node], value: str) -> set[str]:
    """`value` and every value it is computed from inside the prologue."""
    by_name = {n.name: n for n in prologue}
    needed, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in by_name:
            stack.extend(by_name[name].operands)
    return needed
