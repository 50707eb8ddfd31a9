"""Reductions (sum, mean, max), softmax, log_softmax, rms_norm and layer_norm: one block per row.

When the reduced axes are trailing (the common case, and the only one fusion makes), the operand
is a `rows x cols` matrix and `row_kernel` runs one block per row: threads stride over the row,
accumulate in float32 (integers in their own type) and combine with `og_block_reduce` (warp
shuffles, then one warp over the per-warp partials). A fused reduction region uses the same kernel:
its *prologue* is evaluated per element of the reduced operand inside the `arg0_at(j)` lambda, its
*epilogue* per output element before the store.

    %s = softmax(%x) : f32[4,64]   ->   grid 4, block 64:
        m = max_j x[j];  s = sum_j exp(x[j] - m);  out[j] = exp(x[j] - m) / s

Reductions over other axes use `general_reduce` (a thread per output when fewer than 64 elements
are reduced, else a block per output), softmax over a non-last axis `strided_softmax`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optgraph.analysis.fusion_rules import RegionPlan, reduction_cols
from optgraph.codegen.cuda_source import (
    COMPUTE,
    Kernel,
    Launch,
    block_size,
    f32_literal,
    gather_offset,
    grid_1d,
    in_param,
    index_type,
    load,
    lowest,
    make_kernel,
    out_param,
    store,
    strides,
)
from optgraph.codegen.kernels.scalars import emit_scalars, load_params, needed_values, used_values
from optgraph.ir.attrs import float_attr, int_attr
from optgraph.ir.graph import FLOAT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import reduced_axes
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"sum", "mean", "max", "softmax", "log_softmax", "rms_norm", "layer_norm"})
SOFTMAX_VALUE = {  # an element's result from its value v, the row max m and s = sum exp(x - m)
    "softmax": "expf({v} - m) / s",
    "log_softmax": "({v} - m) - logf(s)",
}
PER_ROW = frozenset({"sum", "mean", "max"})


def _acc_type(op: str, dtype: str) -> str:
    return "float" if dtype in FLOAT_DTYPES or op == "mean" else COMPUTE[dtype]


MAX_CACHED = 16  # elements a thread keeps in registers (softmax, norms): one read of the row


def row_threads(cols: int) -> int:
    """Threads of a row block: about 8 elements each, a power of two in [32, 1024]."""
    threads = 32
    while threads * 8 < cols and threads < 1024:
        threads *= 2
    return threads


@dataclass(frozen=True)
class _Row:
    """How a block walks its row: `threads` (a constant of the text) and `per` elements each."""

    cols: int
    threads: int

    @property
    def per(self) -> int:
        return -(-self.cols // self.threads)

    @property
    def cached(self) -> bool:
        return self.per <= MAX_CACHED

    def loop(self, body: Sequence[str]) -> list[str]:
        """`body` for every element j of the row this thread owns (j = thread + u * threads)."""
        if not self.cached:
            return [
                f"for (IDX j = threadIdx.x; j < COLS; j += {self.threads}u) {{",
                *("  " + b for b in body),
                "}",
            ]
        inner = ["  " + b for b in body]
        guarded = self.cols % self.threads != 0
        if guarded:
            inner = ["  if (j < COLS) {", *("  " + b for b in inner), "  }"]
        uses_j = guarded or any(re.search(r"\bj\b", b) for b in body)
        index = [f"  const IDX j = threadIdx.x + (IDX)u * {self.threads}u;"] if uses_j else []
        return [
            "#pragma unroll",
            f"for (int u = 0; u < {self.per}; ++u) {{",
            *index,
            *inner,
            "}",
        ]


def _anchor_lines(anchor: Node, acc: str, finish: Sequence[str], row: _Row) -> list[str]:
    """The anchor's passes over the row; `finish` stores `a` (per row) or runs inside the last
    loop with `a` the element's value (per element). Softmax and the norms read the row once into
    registers (`x[u]`) when it fits (`_Row.cached`), else once per pass."""
    op = anchor.op
    attrs = attrs_with_defaults(anchor)
    red = "og_block_reduce({v}, og_scratch, {op}(), ({t}){ident})"
    loop = row.loop
    if op in PER_ROW:
        if op == "max":
            init, step = (
                lowest(anchor.type.dtype if anchor.type else "f32"),
                "acc = og_max(acc, arg0_at(j));",
            )
            combine = red.format(v="acc", op="OgMax", t=acc, ident=init)
        else:
            init, step = "0", "acc += arg0_at(j);"
            combine = red.format(v="acc", op="OgSum", t=acc, ident="0")
        lines = [f"{acc} acc = ({acc}){init};", *loop([step]), f"acc = {combine};"]
        value = "acc / (float)COLS" if op == "mean" else "acc"
        return lines + [f"const {acc} a = {value};", "if (threadIdx.x == 0) {", *finish, "}"]
    lines = []
    x, w, b = "arg0_at(j)", "arg1_at(j)", "arg2_at(j)"
    if row.cached:  # the norms' weights too: their loads overlap the row's, not the reduction
        extra = {"rms_norm": 1, "layer_norm": 2}.get(op, 0)
        lines += [f"float x[{row.per}];"]
        lines += [f"float w{k}[{row.per}];" for k in range(1, extra + 1)]
        lines += loop(
            ["x[u] = arg0_at(j);"] + [f"w{k}[u] = arg{k}_at(j);" for k in range(1, extra + 1)]
        )
        x, w, b = "x[u]", "w1[u]", "w2[u]"
    sum_ = red.format(v="{}", op="OgSum", t="float", ident="0")
    if op in SOFTMAX_VALUE:
        lines += [
            f"float m = {lowest('f32')};",
            *loop([f"m = og_max(m, (float){x});"]),
            f"m = {red.format(v='m', op='OgMax', t='float', ident=lowest('f32'))};",
            "float s = 0.0f;",
            *loop([f"s += expf({x} - m);"]),
            f"s = {sum_.format('s')};",
        ]
        value = SOFTMAX_VALUE[op].format(v=x)
        return lines + loop([f"const float a = {value};", *finish])
    eps = f32_literal(float_attr(attrs, "eps"))
    if op == "rms_norm":
        lines += [
            "float ss = 0.0f;",
            *loop([f"const float v = {x};", "ss += v * v;"]),
            f"ss = {sum_.format('ss')};",
            f"const float r = sqrtf(ss / (float)COLS + {eps});",
        ]
        return lines + loop([f"const float a = {x} / r * {w};", *finish])
    assert op == "layer_norm"
    # Shifted two-pass variance, as the reference: x - k0 (k0 the row's first element) is exact
    # for nearby values, so a row around 1000 ± 1 is not centered by a mean rounded at 1000.
    lines += [
        "const float k0 = (float)arg0_at(0);" if row.cols else "const float k0 = 0.0f;",
        "float s = 0.0f;",
        *loop([f"s += (float){x} - k0;"]),
        f"const float mu = {sum_.format('s')} / (float)COLS;",
        "float q = 0.0f;",
        *loop([f"const float c = ((float){x} - k0) - mu;", "q += c * c;"]),
        f"q = {sum_.format('q')};",
        f"const float r = sqrtf(q / (float)COLS + {eps});",
    ]
    return lines + loop([f"const float a = (((float){x} - k0) - mu) / r * {w} + {b};", *finish])


def row_kernel(
    family: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    prologue: Sequence[Node],
    anchor: Node,
    epilogue: Sequence[Node],
    result: str,
    out_type: TensorType,
    x_type: TensorType,
    cols: int,
) -> tuple[Kernel, int, int]:
    """(kernel, rows, threads) of a row kernel; params are read as in0, in1, ... ."""
    assert anchor.type is not None
    rows = x_type.numel // cols if cols else out_type.numel
    threads = row_threads(cols)
    idx = index_type(max(x_type.numel, out_type.numel) + threads)
    acc = _acc_type(anchor.op, anchor.type.dtype)
    roles = [f"in{k}" for k in range(len(params))]
    lines = [f"typedef {idx} IDX;", f"const IDX COLS = {cols}u;", "const IDX row = blockIdx.x;"]
    lines.append(f"__shared__ {acc} og_scratch[32];")
    for k, operand in enumerate(anchor.operands):
        env: dict[str, tuple[str, str]] = {}
        needed = needed_values(prologue, operand)
        body = ["const IDX xi = row * COLS + j;"]
        body += load_params(params, types, roles, needed, "xi", x_type.shape, env)
        body += emit_scalars([n for n in prologue if n.name in needed], env, "u")
        name, dtype = env[operand]
        ret = COMPUTE[dtype]
        lines += [f"auto arg{k}_at = [&](IDX j) -> {ret} {{", *("  " + b for b in body)]
        lines += [f"  return {name};", "};"]
    env = {anchor.name: ("a", anchor.type.dtype)}
    out_index = "row" if anchor.op in PER_ROW else "row * COLS + j"
    finish = [f"const IDX oi = {out_index};"]
    finish += load_params(
        params, types, roles, used_values(epilogue, (result,)), "oi", out_type.shape, env, "q"
    )
    finish += emit_scalars(epilogue, env, "v")
    finish.append(f"out[oi] = {store(out_type.dtype, env[result][0])};")
    lines += _anchor_lines(anchor, acc, ["  " + f for f in finish], _Row(cols, threads))
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, k) for k, t in enumerate(types)]
    kernel = make_kernel(family, decls, "\n".join("  " + s for s in lines), threads)
    return kernel, rows, threads


def _row_launch(kernel: Kernel, rows: int, threads: int, arity: int) -> Launch:
    args = ("out",) + tuple(f"in{k}" for k in range(arity))
    return Launch(kernel, (max(rows, 1), 1, 1), (threads, 1, 1), args)


def fused_row_launch(
    node: Node, types: Sequence[TensorType], plan: RegionPlan, roles: Mapping[str, str]
) -> Launch:
    """The one kernel of a fused reduction region."""
    assert node.body is not None and node.type is not None and plan.anchor is not None
    by_name = {n.name: n for n in node.body.nodes}
    anchor = by_name[plan.anchor]
    value_types = dict(zip(node.body.params, types))
    value_types.update((n.name, n.type) for n in node.body.nodes if n.type is not None)
    x_type = value_types[anchor.operands[0]]
    kernel, rows, threads = row_kernel(
        "fused_row",
        node.body.params,
        types,
        [by_name[n] for n in plan.prologue],
        anchor,
        [by_name[n] for n in plan.epilogue],
        node.body.result,
        node.type,
        x_type,
        plan.cols,
    )
    return _row_launch(kernel, rows, threads, len(types))


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    assert node.type is not None
    x = types[0]
    cols = reduction_cols(node, x)
    if cols is not None:
        params = [f"#in{k}" for k in range(len(types))]
        anchor = Node(node.name, node.op, tuple(params), node.attrs, node.type)
        kernel, rows, threads = row_kernel(
            node.op, params, types, (), anchor, (), node.name, node.type, x, cols
        )
        return [_row_launch(kernel, rows, threads, len(types))]
    if node.op in SOFTMAX_VALUE:
        return [_strided_softmax(node, x)]
    return [_general_reduce(node, x)]


def _general_reduce(node: Node, x: TensorType) -> Launch:
    """sum/mean/max over any axes: kept dims index the output, reduced dims the loop."""
    assert node.type is not None
    attrs = attrs_with_defaults(node)
    axes = reduced_axes(node, x, attrs)
    xs = strides(x.shape)
    kept = [d for d in range(x.rank) if d not in axes]
    kept_shape = [x.shape[d] for d in kept]
    red_shape = [x.shape[d] for d in axes]
    count, total = math.prod(red_shape), math.prod(kept_shape)
    base = gather_offset("o", kept_shape, [xs[d] for d in kept])
    inner = gather_offset("r", red_shape, [xs[d] for d in axes])
    acc = _acc_type(node.op, x.dtype)
    is_max = node.op == "max"
    init = lowest(x.dtype) if is_max else "0"
    step = "acc = og_max(acc, v);" if is_max else "acc += v;"
    value = "acc / (float)COUNT" if node.op == "mean" else "acc"
    idx = index_type(x.numel + 1024)
    head = [f"typedef {idx} IDX;", f"const IDX COUNT = {count}u;"]
    read = f"const {acc} v = {load(x.dtype, f'in0[base + ({inner})]')};"
    decls = [out_param(node.type.dtype), in_param(x.dtype, 0)]
    if count < 64:
        lines = head + [
            (
                f"for (IDX o = (IDX)blockIdx.x * blockDim.x + threadIdx.x; o < {total}u;"
                " o += (IDX)gridDim.x * blockDim.x) {"
            ),
            f"  const IDX base = {base};",
            f"  {acc} acc = ({acc}){init};",
            "  for (IDX r = 0; r < COUNT; ++r) {",
            f"    {read}",
            f"    {step}",
            "  }",
            f"  out[o] = {store(node.type.dtype, value)};",
            "}",
        ]
        kernel = make_kernel(node.op, decls, "\n".join("  " + s for s in lines))
        grid, block = grid_1d(total)
        return Launch(kernel, grid, block, ("out", "in0"))
    threads = block_size(count)
    op = "OgMax" if is_max else "OgSum"
    lines = head + [
        "const IDX o = blockIdx.x;",
        f"__shared__ {acc} og_scratch[32];",
        f"const IDX base = {base};",
        f"{acc} acc = ({acc}){init};",
        "for (IDX r = threadIdx.x; r < COUNT; r += blockDim.x) {",
        f"  {read}",
        f"  {step}",
        "}",
        f"acc = og_block_reduce(acc, og_scratch, {op}(), ({acc}){init});",
        f"if (threadIdx.x == 0) out[o] = {store(node.type.dtype, value)};",
    ]
    kernel = make_kernel(node.op, decls, "\n".join("  " + s for s in lines))
    return Launch(kernel, (max(total, 1), 1, 1), (threads, 1, 1), ("out", "in0"))


def _strided_softmax(node: Node, x: TensorType) -> Launch:
    """softmax or log_softmax over a non-last axis: row r reads base(r) + j * INNER."""
    axis = int_attr(attrs_with_defaults(node), "axis") % x.rank
    n = x.shape[axis]
    inner = math.prod(x.shape[axis + 1 :])
    rows = x.numel // n if n else 0
    threads = block_size(n)
    _loop = _Row(n, threads).loop
    idx = index_type(x.numel + 1024)
    at = f"{load(x.dtype, 'in0[base + j * INNER]')}"
    red = "og_block_reduce({}, og_scratch, {}(), {})"
    lo = lowest("f32")
    lines = [
        f"typedef {idx} IDX;",
        f"const IDX COLS = {n}u, INNER = {inner}u;",
        "const IDX row = blockIdx.x;",
        "const IDX base = (row / INNER) * COLS * INNER + row % INNER;",
        "__shared__ float og_scratch[32];",
        f"float m = {lo};",
        *_loop([f"m = og_max(m, (float){at});"]),
        f"m = {red.format('m', 'OgMax', lo)};",
        "float s = 0.0f;",
        *_loop([f"s += expf({at} - m);"]),
        f"s = {red.format('s', 'OgSum', '0.0f')};",
        *_loop([f"out[base + j * INNER] = {store(x.dtype, SOFTMAX_VALUE[node.op].format(v=at))};"]),
    ]
    decls = [out_param(x.dtype), in_param(x.dtype, 0)]
    kernel = make_kernel(node.op, decls, "\n".join("  " + s for s in lines))
    return Launch(kernel, (max(rows, 1), 1, 1), (threads, 1, 1), ("out", "in0"))
