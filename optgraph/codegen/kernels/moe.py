"""The mixture-of-experts op (`moe`, docs/ir.md): routing, then only the selected experts' rows.

Three launches a node, through the node's scratch (`scratch_bytes`: the k expert ids and weights
of every token, then the k gated rows `h [T,k,F]` in f32):

    %y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f16[T,H]   (%gate : q4_k[E,F,H], ...)
    ->  route:    a thread per token: softmax over E (or not), k selections, weights -> scratch
        gate_up:  a warp per (token, slot, row f of F): x · gate_e[f] and x · up_e[f] over H,
                  lanes across H (a float row: a value each; a quantized one: a 32-value unit
                  each, decoded in registers by `og_dq32_<type>`), xor-shuffle sums, then
                  act(g) · u -> h
        down:     a warp per (token, output n): for each slot j in order, h_j · down_e[n] over
                  F, then acc += w_j · that; the token's row of the result in x's dtype

Each selected expert's rows are read in place from its stack (expert e's row f of gate is row
e·F + f), so a decode step reads k experts' rows and never touches the other E - k. A prefill
runs the same kernels over every token (grid.y, a loop past its 65535), each token's experts
read for it alone: correct, not fast (grouping tokens by expert into tensor-core tiles would
be). Numerics: f32
throughout, as the reference (`reference/moe.py`); sums in another order, so within the usual
bounds, not bit for bit. Routing selects like the reference: the k largest (of the softmax
probabilities, or of the logits), the lower expert first on ties, NaN smallest.

A node holding some experts (`experts = [lo, hi]`, the stacks' rows for experts lo..hi-1) routes
over all E logits the same way; gate_up skips a (token, slot) whose expert is outside [lo, hi)
and down leaves its slot out of the sum, and expert e's rows are row (e - lo)·F + f.

With biases (gpt-oss: six or eight operands) gate_up adds the expert's gate and up bias rows to
g and v before the activation, and down its down bias row to each slot's y before the
weighting; `act = "swiglu_oai"` gates g and v together (clamped, `limit` and `alpha` baked in).

Not handled (a CodegenError naming it): more than `MAX_K` experts a token, and a fused region
around a moe (fusion never makes one: its category is opaque).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    STORAGE,
    CodegenError,
    Kernel,
    Launch,
    grid_1d,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels import quantized
from optgraph.ir import op_cuda
from optgraph.ir.graph import QUANT_BLOCKS, Node, TensorType
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.op_rules_moe import MoeDims, expert_range, moe_dims, stack_count
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"moe"})
WARPS = 8  # warps a block of the gate_up and down kernels: a row (or an output) each
MAX_K = 64  # experts a token at most: the route kernel checks earlier selections one by one
MAX_GRID_Y = 65535  # CUDA's limit of grid.y: the (token, slot) and token loops stride past it
SCRATCH = "scratch"


def _align(nbytes: int) -> int:
    return -(-nbytes // 256) * 256


def _offsets(d: MoeDims) -> tuple[int, int, int]:
    """Byte offsets in the scratch of the weights and of h, and the scratch's size."""
    pairs = d.tokens * d.k
    weights_at = _align(4 * pairs)
    h_at = weights_at + _align(4 * pairs)
    return weights_at, h_at, h_at + 4 * pairs * d.ffn


def _dims(node: Node, types: Sequence[TensorType]) -> MoeDims:
    attrs = attrs_with_defaults(node)
    k = attrs["k"]
    assert isinstance(k, int)
    return moe_dims(types, k, expert_range(attrs, types[1].shape[1]))


def _held_expert(d: MoeDims, indent: str) -> list[str]:
    """Lines that read the expert `e` of `pair` from the scratch as a row of the stacks
    (e - first), and skip (`continue`) a pair whose expert another part holds."""
    lines = [f"{indent}int e = reinterpret_cast<const int*>(scratch)[pair];"]
    if d.is_part:
        lines += [
            f"{indent}if (e < {d.first} || e >= {d.first + d.held}) continue;  // another part's",
            f"{indent}e -= {d.first};",
        ]
    return lines


def scratch_bytes(node: Node, types: Sequence[TensorType]) -> int:
    """The ids, weights and gated rows of every (token, slot) (module docstring)."""
    if node.op != "moe":
        return 0
    return _offsets(_dims(node, types))[2]


def _kernel(family: str, params: Sequence[str], body: str, stacks: Sequence[str]) -> Kernel:
    """A kernel named by the hash of its text, with the block decoders its quantized `stacks`
    (their dtypes) need as file-scope declarations, each once."""
    decls: dict[str, None] = {}
    for dtype in stacks:
        if dtype in QUANT_BLOCKS:
            decls.update(dict.fromkeys(quantized.decls(dtype)))
    text = "".join(decls) + kernel_template(params, body)
    digest = hashlib.sha1(f"{family}\n{text}".encode()).hexdigest()[:12]
    return Kernel.assemble(f"og_{family}_{digest}", params, body, tuple(decls))


def _pointer(dtype: str, name: str) -> str:
    """A read-only parameter holding a stack of `dtype` (its blocks' bytes when quantized)."""
    return f"const {'unsigned char' if dtype in QUANT_BLOCKS else STORAGE[dtype]}* {name}"


def route_launch(d: MoeDims, logits: TensorType, routing: str, norm_topk: bool) -> Launch:
    """Each token's k expert ids (int32) and weights (f32) into the scratch: a thread a token."""
    weights_at, _, _ = _offsets(d)
    e_count, k = d.experts, d.k
    value = load(logits.dtype, "l[e]")
    if routing == "softmax_topk":
        lines = [
            "  float m = -__int_as_float(0x7f800000), s = 0.0f;",
            f"  for (unsigned int e = 0; e < {e_count}u; ++e) m = og_max(m, {value});",
            f"  for (unsigned int e = 0; e < {e_count}u; ++e) s += expf({value} - m);",
        ]
        score = f"(expf({value} - m) / s)"
    else:
        lines, score = [], value
    lines += [
        f"  for (unsigned int j = 0; j < {k}u; ++j) {{",
        "    int best = -1;",
        "    float top = 0.0f;",
        f"    for (unsigned int e = 0; e < {e_count}u; ++e) {{",
        "      bool taken = false;",
        "      for (unsigned int i = 0; i < j; ++i) taken = taken || ids[i] == (int)e;",
        "      if (taken) continue;",
        f"      const float v = {score};",
        "      // the larger first, the lower expert on ties, NaN last (the reference's order)",
        "      if (best < 0 || (v == v && (top != top || v > top))) { best = (int)e; top = v; }",
        "    }",
        "    ids[j] = best;",
        "    w[j] = top;",
        "  }",
    ]
    if routing == "topk_softmax":  # a softmax over the k selected logits
        lines += [
            "  float m = -__int_as_float(0x7f800000), s = 0.0f;",
            f"  for (unsigned int j = 0; j < {k}u; ++j) m = og_max(m, w[j]);",
            f"  for (unsigned int j = 0; j < {k}u; ++j) {{ w[j] = expf(w[j] - m); s += w[j]; }}",
            f"  for (unsigned int j = 0; j < {k}u; ++j) w[j] = w[j] / s;",
        ]
    elif norm_topk:
        lines += [
            "  float sum = 0.0f;",
            f"  for (unsigned int j = 0; j < {k}u; ++j) sum += w[j];",
            f"  for (unsigned int j = 0; j < {k}u; ++j) w[j] = w[j] / sum;",
        ]
    body = [
        (
            "for (unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;"
            f" t < {d.tokens}u; t += gridDim.x * blockDim.x) {{"
        ),
        f"  const {STORAGE[logits.dtype]}* l = in1 + (unsigned long long)t * {e_count}u;",
        f"  int* ids = reinterpret_cast<int*>(scratch) + (unsigned long long)t * {k}u;",
        (
            f"  float* w = reinterpret_cast<float*>(scratch + {weights_at}u)"
            f" + (unsigned long long)t * {k}u;"
        ),
        *lines,
        "}",
    ]
    params = ["unsigned char* scratch", f"const {STORAGE[logits.dtype]}* in1"]
    kernel = _kernel("moe_route", params, "\n".join("  " + x for x in body), ())
    grid, block = grid_1d(d.tokens, 64)
    return Launch(kernel, grid, block, (SCRATCH, "in1"))


def _row_dot(
    acc: str, stack: str, dtype: str, row: str, width: int, x: str, x_dtype: str
) -> list[str]:
    """Lines adding this lane's share of `x[0:width] · stack row` to `acc` (a float): the row
    `row` (an expression, counted in rows of `width` values) of a stack of `dtype`."""
    if dtype not in QUANT_BLOCKS:
        at = f"({stack} + (unsigned long long)({row}) * {width}ull)"
        return [
            f"for (unsigned int i = lane; i < {width}u; i += 32u)",
            f"  {acc} += {load(x_dtype, f'{x}[i]')} * {load(dtype, f'{at}[i]')};",
        ]
    elements, nbytes = QUANT_BLOCKS[dtype]
    sub = elements // 32
    row_bytes = width // elements * nbytes
    return [
        "{",
        f"  const unsigned char* r = {stack} + (unsigned long long)({row}) * {row_bytes}ull;",
        f"  for (unsigned int u = lane; u < {width // 32}u; u += 32u) {{",
        "    float q[32];",
        f"    og_dq32_{dtype}(r + (u / {sub}u) * {nbytes}u, u % {sub}u, q);",
        "#pragma unroll",
        f"    for (int j = 0; j < 32; ++j) {acc} += {load(x_dtype, f'{x}[u * 32u + j]')} * q[j];",
        "  }",
        "}",
    ]


def _activation(act: str, v: str) -> str:
    """The C expression of `act` applied to float `v`, as the elementwise ops spell it."""
    if act == "silu":
        template = ELEMENTWISE["silu"].cuda
        assert isinstance(template, str)
        return template.format(v)
    approximate = "none" if act == "gelu" else "tanh"
    return op_cuda.gelu(op_cuda.ScalarOperands((v,), ("f32",), "f32", {"approximate": approximate}))


def _gated(act: str, limit: float, alpha: float) -> str:
    """The C expression of the gated value of float `g` (gate) and `v` (up)."""
    if act != "swiglu_oai":
        return f"{_activation(act, 'g')} * v"
    lim, a = f"{float(limit)!r}f", f"{float(alpha)!r}f"
    # gpt-oss: the gate clamped above, up to [-limit, limit]; g · sigmoid(alpha · g) · (u + 1)
    g = f"fminf(g, {lim})"
    return f"({g} / (1.0f + expf(-{a} * {g}))) * (fminf(fmaxf(v, -{lim}), {lim}) + 1.0f)"


def gate_up_launch(
    d: MoeDims,
    x: TensorType,
    stacks: Sequence[TensorType],
    act: str,
    biases: Sequence[TensorType] = (),
    swiglu: tuple[float, float] = (7.0, 1.702),
) -> Launch:
    """h[t, j, f] = act(x[t] · gate_e[f]) · (x[t] · up_e[f]), e the expert of (t, j); with
    `biases` (gate's and up's, or gate_up's: operands in5, in6 or in4) each product plus its
    expert's bias; act swiglu_oai with (limit, alpha) `swiglu`."""
    _, h_at, _ = _offsets(d)
    rows = 2 * d.ffn if d.fused else d.ffn  # rows an expert of the first stack
    gate_row = f"(unsigned long long)e * {rows}u + f"
    if d.fused:
        up_stack, up_dtype, up_row = "in2", stacks[0].dtype, f"{gate_row} + {d.ffn}u"
    else:
        up_stack, up_dtype, up_row = "in3", stacks[1].dtype, gate_row
    xs = f"(in0 + (unsigned long long)(pair / {d.k}u) * {d.hidden}u)"
    lines = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        f"const unsigned int f = blockIdx.x * {WARPS}u + warp;",
        f"if (f >= {d.ffn}u) return;  // the whole warp: no shuffle waits for it",
        f"for (unsigned int pair = blockIdx.y; pair < {d.tokens * d.k}u; pair += gridDim.y) {{",
        *_held_expert(d, "  "),
        f"  const {STORAGE[x.dtype]}* xr = {xs};",
        "  float g = 0.0f, v = 0.0f;",
        *(
            "  " + x
            for x in _row_dot("g", "in2", stacks[0].dtype, gate_row, d.hidden, "xr", x.dtype)
        ),
        *("  " + x for x in _row_dot("v", up_stack, up_dtype, up_row, d.hidden, "xr", x.dtype)),
        "  g = og_warp_sum(g);",
        "  v = og_warp_sum(v);",
        *_bias_lines(d, biases),
        "  if (lane == 0u)",
        (
            f"    reinterpret_cast<float*>(scratch + {h_at}u)[(unsigned long long)pair * {d.ffn}u"
            f" + f] = {_gated(act, *swiglu)};"
        ),
        "}",
    ]
    params = [
        "unsigned char* scratch",
        f"const {STORAGE[x.dtype]}* in0",
        _pointer(stacks[0].dtype, "in2"),
    ]
    args = [SCRATCH, "in0", "in2"]
    if not d.fused:
        params.append(_pointer(stacks[1].dtype, "in3"))
        args.append("in3")
    for role, t in zip(_bias_roles(d)[:-1], biases):
        params.append(_pointer(t.dtype, role))
        args.append(role)
    dtypes = [t.dtype for t in stacks[:-1]]
    kernel = _kernel("moe_gate_up", params, "\n".join("  " + x for x in lines), dtypes)
    grid = (-(-d.ffn // WARPS), min(d.tokens * d.k, MAX_GRID_Y), 1)
    return Launch(kernel, grid, (32 * WARPS, 1, 1), tuple(args))


def _bias_roles(d: MoeDims) -> tuple[str, ...]:
    """The operands holding the biases (gate's, up's, down's; or gate_up's, down's)."""
    first = 4 if d.fused else 5
    return tuple(f"in{first + i}" for i in range(2 if d.fused else 3))


def _bias_lines(d: MoeDims, biases: Sequence[TensorType]) -> list[str]:
    """Lines adding gate's and up's bias of expert e, row f, to g and v."""
    if not biases:
        return []
    roles = _bias_roles(d)
    if d.fused:
        at = f"(unsigned long long)e * {2 * d.ffn}u + f"
        gate = load(biases[0].dtype, f"{roles[0]}[{at}]")
        up = load(biases[0].dtype, f"{roles[0]}[{at} + {d.ffn}u]")
    else:
        at = f"(unsigned long long)e * {d.ffn}u + f"
        gate = load(biases[0].dtype, f"{roles[0]}[{at}]")
        up = load(biases[1].dtype, f"{roles[1]}[{at}]")
    return [f"  g += {gate};", f"  v += {up};"]


def down_launch(
    d: MoeDims, out: TensorType, down: TensorType, role: str, bias: TensorType | None = None
) -> Launch:
    """out[t, n] = Σ_j w[t, j] · (h[t, j] · down_e[n] (+ down_bias[e, n])), slots in order, in
    out's dtype."""
    weights_at, h_at, _ = _offsets(d)
    row = f"(unsigned long long)e * {d.hidden}u + n"
    token = [
        "float acc = 0.0f;",
        f"for (unsigned int j = 0; j < {d.k}u; ++j) {{",
        f"  const unsigned int pair = t * {d.k}u + j;",
        *_held_expert(d, "  "),
        (
            f"  const float* hr = reinterpret_cast<const float*>(scratch + {h_at}u)"
            f" + (unsigned long long)pair * {d.ffn}u;"
        ),
        "  float y = 0.0f;",
        *("  " + x for x in _row_dot("y", role, down.dtype, row, d.ffn, "hr", "f32")),
        "  y = og_warp_sum(y);",
        *(
            [
                f"  y += {load(bias.dtype, f'{_bias_roles(d)[-1]}[(unsigned long long)e * {d.hidden}u + n]')};"
            ]
            if bias is not None
            else []
        ),
        f"  acc += reinterpret_cast<const float*>(scratch + {weights_at}u)[pair] * y;",
        "}",
        f"if (lane == 0u) out[(unsigned long long)t * {d.hidden}u + n] = {store(out.dtype, 'acc')};",
    ]
    lines = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        f"const unsigned int n = blockIdx.x * {WARPS}u + warp;",
        f"if (n >= {d.hidden}u) return;  // the whole warp: no shuffle waits for it",
        f"for (unsigned int t = blockIdx.y; t < {d.tokens}u; t += gridDim.y) {{",
        *("  " + x for x in token),
        "}",
    ]
    params = [out_param(out.dtype), "const unsigned char* scratch", _pointer(down.dtype, role)]
    args = ["out", SCRATCH, role]
    if bias is not None:
        params.append(_pointer(bias.dtype, _bias_roles(d)[-1]))
        args.append(_bias_roles(d)[-1])
    kernel = _kernel("moe_down", params, "\n".join("  " + x for x in lines), (down.dtype,))
    grid = (-(-d.hidden // WARPS), min(d.tokens, MAX_GRID_Y), 1)
    return Launch(kernel, grid, (32 * WARPS, 1, 1), tuple(args))


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    """The route, gate_up and down launches of one moe node (module docstring)."""
    assert node.type is not None
    attrs = attrs_with_defaults(node)
    d = _dims(node, types)
    if d.k > MAX_K:
        raise CodegenError(
            f"moe: k = {d.k} experts a token; the CUDA kernels take at most {MAX_K}", node.span
        )
    routing, act = attrs["routing"], attrs["act"]
    assert isinstance(routing, str) and isinstance(act, str)
    held = stack_count(len(types))
    stacks, biases = types[2 : 2 + held], types[2 + held :]
    down_role = f"in{1 + held}"
    limit, alpha = attrs["limit"], attrs["alpha"]
    assert isinstance(limit, float) and isinstance(alpha, float)
    return [
        route_launch(d, types[1], routing, bool(attrs["norm_topk"])),
        gate_up_launch(d, types[0], stacks, act, biases[:-1], (limit, alpha)),
        down_launch(d, node.type, stacks[-1], down_role, biases[-1] if biases else None),
    ]
