"""Elementwise kernels with NumPy broadcasting, and fused regions (`fused` nodes).

One thread per output element (a grid-stride loop). Each operand is read at its broadcast offset,
computed from constants baked into the text:

    %y = add(%x, %b) : f32[4,64]   (%b : f32[64])
    ->  const float p0 = in0[i];  const float p1 = in1[i % 64u];  out[i] = (float)(p0 + p1);

A `fused` node is planned with `fusion_rules.plan_body` and emitted by kind: an `elementwise`
region is one kernel that evaluates the whole body per output element; a `reduction` region is one
row kernel (`cuda_reduction.row_kernel`); a `siblings` region is one matrix-vector kernel
(`cuda_fused_siblings`); a `product` region runs its matmul (cuBLAS) or conv2d
into the result buffer, then one epilogue kernel that reads the product back in place. Inside a
region values stay in float32 (a `cast` to f16/bf16 still rounds), which is the documented fusion
tolerance: results may differ from the unfused graph by the f16/bf16 rounding of intermediates.

`scalar_expr` (one elementwise node as a C expression) and `emit_scalars` are shared with the
reduction row kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optgraph.analysis.fusion_rules import ELEMENTWISE, PRODUCT, REDUCTION, SIBLINGS, plan_body
from optgraph.codegen.cuda_source import (
    COMPUTE,
    CodegenError,
    Kernel,
    Launch,
    Work,
    broadcast_offset,
    f32_literal,
    grid_1d,
    in_param,
    index_type,
    load,
    make_kernel,
    out_param,
    store,
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
}
OPS = frozenset(UNARY_FLOAT) | frozenset(BINARY) | {"neg", "abs", "relu", "gelu", "cast", "scale"}
OPS = OPS | {"fused"}

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
    if op in BINARY:
        return BINARY[op].format(a, args[1])
    if op == "neg":
        return f"(-{a})"
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


def _convert(from_dtype: str, to_dtype: str, expr: str) -> str:
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
    return {o for n in nodes for o in n.operands} | set(extra)


def region_kernel(
    family: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None = None,
) -> Kernel:
    """One thread per output element evaluating `nodes`; `anchor`, when given, is read from `out`
    (a product already written there) and the result overwrites it."""
    n = out_type.numel
    idx = index_type(n)
    env: dict[str, tuple[str, str]] = {}
    roles = [f"in{k}" for k in range(len(params))]
    lines = [
        (
            f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
            f" i += ({idx})gridDim.x * blockDim.x) {{"
        )
    ]
    if anchor is not None:
        lines.append(f"  const {COMPUTE[out_type.dtype]} a = {load(out_type.dtype, 'out[i]')};")
        env[anchor] = ("a", out_type.dtype)
    used = used_values(nodes, (result,))
    lines += ["  " + s for s in load_params(params, types, roles, used, "i", out_type.shape, env)]
    lines += ["  " + s for s in emit_scalars(nodes, env, "v")]
    if result not in env:
        raise CodegenError(f"fused: result '%{result}' is not computed by the region")
    lines.append(f"  out[i] = {store(out_type.dtype, env[result][0])};")
    lines.append("}")
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, k) for k, t in enumerate(types)]
    return make_kernel(family, decls, "\n".join("  " + s for s in lines))


def _launch(kernel: Kernel, count: int, arity: int) -> Launch:
    grid, block = grid_1d(count)
    return Launch(kernel, grid, block, ("out",) + tuple(f"in{k}" for k in range(arity)))


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Work]:
    """Kernels for an elementwise node or a fused region."""
    assert node.type is not None
    if node.op == "fused":
        return _emit_fused(node, types)
    params = [f"#in{k}" for k in range(len(types))]  # cannot clash with IR names
    body = Node(node.name, node.op, tuple(params), node.attrs, node.type)
    kernel = region_kernel(node.op, params, types, [body], node.name, node.type)
    return [_launch(kernel, node.type.numel, len(types))]


def _emit_fused(node: Node, types: tuple[TensorType, ...]) -> list[Work]:
    assert node.type is not None and node.body is not None
    body = node.body
    try:
        plan = plan_body(body, types)
    except ValueError as err:
        raise CodegenError(f"fused: {err}", node.span) from None
    if plan.kind == ELEMENTWISE:
        kernel = region_kernel("fused", body.params, types, body.nodes, body.result, node.type)
        return [_launch(kernel, node.type.numel, len(types))]
    if plan.kind == SIBLINGS:
        from optgraph.codegen.cuda_fused_siblings import siblings_launch

        return [siblings_launch(node, types, plan)]
    by_name = {n.name: n for n in body.nodes}
    assert plan.anchor is not None
    anchor = by_name[plan.anchor]
    roles = dict(zip(body.params, (f"in{k}" for k in range(len(types)))))
    if plan.kind == REDUCTION:
        from optgraph.codegen.cuda_reduction import fused_row_launch

        return [fused_row_launch(node, types, plan, roles)]
    assert plan.kind == PRODUCT
    from optgraph.codegen.cuda_fused import gemv_region

    one_kernel = gemv_region(node, types)  # a matrix-vector product: the epilogue inside
    if one_kernel is not None:
        return list(one_kernel)
    work = _product_anchor(node, anchor, types, roles)
    epilogue = [by_name[n] for n in plan.epilogue]
    if epilogue:
        kernel = region_kernel(
            "epilogue", body.params, types, epilogue, body.result, node.type, anchor=anchor.name
        )
        work.append(_launch(kernel, node.type.numel, len(types)))
    return work


def _product_anchor(
    node: Node, anchor: Node, types: Sequence[TensorType], roles: Mapping[str, str]
) -> list[Work]:
    """The matmul or conv2d of a product region, written to the region's result buffer."""
    assert node.body is not None
    param_types = dict(zip(node.body.params, types))
    for o in anchor.operands:
        if o not in roles:
            raise CodegenError("fused: a matrix product takes no prologue", node.span)
    anchor_types = tuple(param_types[o] for o in anchor.operands)
    anchor_roles = tuple(roles[o] for o in anchor.operands)
    if anchor.op == "matmul":
        from optgraph.codegen.cuda_matmul import emit_roles

        return list(emit_roles(anchor, anchor_types, anchor_roles))
    from optgraph.codegen.cuda_conv import emit_roles as conv_roles

    return list(conv_roles(anchor, anchor_types, anchor_roles))
