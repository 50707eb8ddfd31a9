"""The row of a one-row product computed where the product reads it: its prologue.

`fuse` lets a one-row product take a prologue on its row operand (elementwise nodes and at most
one norm of the whole row, `fusion_rules`). `cuda_fused.gemv_kernel` asks `row_prologue` for the
statements to run first (the norm's statistics: one block reduction per row, every load of the
row in flight) and the C expression of row element (i, kk); `stage_row` then computes the
block's slice of the row once into shared memory, in the row's dtype, when it fits:

    %n = rms_norm(%h, %g)  %q = matmul(%n, %wq)
    ->  ss = sum of h² over the row (block reduction);  r = sqrtf(ss / K + eps)
        og_xs[kk - k0] = round_f16(h[kk] / r * g[kk])   for the block's rows k0 <= kk < k1
        product loop: xv = og_xs[kk - k0]

Complexity: linear in the prologue's nodes; the kernel does K work per block for a norm's
statistics (the row is read from L2 by every block) and one element per row of its slice.
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.analysis.fusion_rules import NORM_OPS
from optgraph.codegen.cuda_gemv_layout import THREADS
from optgraph.codegen.cuda_scalars import emit_scalars, load_params, needed_values, used_values
from optgraph.codegen.cuda_source import STORAGE, f32_literal, load, store
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import DTYPE_BYTES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults


def row_prologue(
    params: Sequence[str],
    types: Sequence[TensorType],
    prologue: Sequence[Node],
    row: str,
    row_type: TensorType,
    m: int,
) -> tuple[list[str], str]:
    """(statements before the product loop, C expression of row element (i, kk)).

    Without a prologue the row is read from its parameter. With one, each element is computed
    where the product reads it: the prologue's elementwise nodes, and for a norm the row's
    statistics first (a block reduction per row, before the loop), the normalized value rounded
    to the norm's dtype as the stored value would be:

        %n = rms_norm(%p0, %p1)  %y = matmul(%n, %p2)
        ->  ss = sum over the row of x²  (block reduction);  r = sqrtf(ss / K + eps)
            xv(i, kk) = round_f16(x[i, kk] / r * w[kk])
    """
    k = row_type.shape[-1]
    index = {p: j for j, p in enumerate(params)}
    if row in index:
        return [], load(row_type.dtype, f"in{index[row]}[i * {k}u + kk]")
    roles = [f"in{j}" for j in range(len(params))]
    norms = [n for n in prologue if n.op in NORM_OPS]
    norm = norms[0] if norms else None

    def element(nodes: Sequence[Node], value: str, extra: Sequence[str] = ()) -> list[str]:
        env: dict[str, tuple[str, str]] = {}
        lines = [f"const unsigned int xi = i * {k}u + j;"]
        lines += load_params(
            params,
            types,
            roles,
            used_values(nodes, (value, *extra)),
            "xi",
            row_type.shape,
            env,
            "r",
        )
        lines += emit_scalars(nodes, env, "e")
        return lines + [f"return (float){env[value][0]};"]

    if norm is None:
        lambdas = [
            "auto og_row = [&](unsigned int i, unsigned int j) -> float {",
            *("  " + line for line in element(prologue, row)),
            "};",
        ]
        return lambdas, "og_row(i, kk)"
    assert norm.type is not None
    cone = needed_values(prologue, norm.operands[0])
    before = [n for n in prologue if n.name in cone]
    after = [n for n in prologue if n.name not in cone and n is not norm]
    eps = f32_literal(float_attr(attrs_with_defaults(norm), "eps"))
    red = "og_block_reduce({0}, og_row_scratch, OgSum(), 0.0f)"
    lines = [
        "auto og_x = [&](unsigned int i, unsigned int j) -> float {",
        *("  " + line for line in element(before, norm.operands[0])),
        "};",
        "__shared__ float og_row_scratch[32];",
        f"float og_k[{m}], og_mu[{m}], og_r[{m}];",
        f"for (int i = 0; i < {m}; ++i) {{",
    ]
    # Every load of the row in flight at once: a constant trip count the compiler unrolls.
    per = -(-k // THREADS)
    guard = f"if (j < {k}u) " if k % THREADS else ""

    def each(statement: str) -> str:
        return (
            f"  #pragma unroll\n  for (unsigned int u = 0; u < {per}u; ++u) {{ "
            f"const unsigned int j = threadIdx.x + u * {THREADS}u; {guard}{{ {statement} }} }}"
        )

    if norm.op == "rms_norm":
        lines += [
            "  float ss = 0.0f;",
            each("const float v = og_x(i, j); ss += v * v;"),
            f"  ss = {red.format('ss')};",
            "  og_k[i] = 0.0f;",
            "  og_mu[i] = 0.0f;",
            f"  og_r[i] = sqrtf(ss / (float){k} + {eps});",
        ]
        formula = "og_x(i, j) / og_r[i] * {w}"
    else:
        # Shifted by the row's first element, as cuda_reduction's layer_norm: a row far from
        # zero keeps its precision (x - k0 is exact for nearby values).
        lines += [
            "  const float k0 = og_x(i, 0u);",
            "  float s = 0.0f;",
            each("s += og_x(i, j) - k0;"),
            f"  const float mu = {red.format('s')} / (float){k};",
            "  float q = 0.0f;",
            each("const float c = (og_x(i, j) - k0) - mu; q += c * c;"),
            f"  q = {red.format('q')};",
            "  og_k[i] = k0;",
            "  og_mu[i] = mu;",
            f"  og_r[i] = sqrtf(q / (float){k} + {eps});",
        ]
        formula = "((og_x(i, j) - og_k[i]) - og_mu[i]) / og_r[i] * {w} + {b}"
    lines.append("}")
    env: dict[str, tuple[str, str]] = {}
    value = [f"const unsigned int xi = i * {k}u + j;"]
    value += load_params(
        params,
        types,
        roles,
        used_values([norm, *after], (row,)) - {norm.name},
        "xi",
        row_type.shape,
        env,
        "r",
    )
    weights = [env[o][0] for o in norm.operands[1:]]
    normalized = formula.format(w=weights[0], b=weights[1] if len(weights) > 1 else "0.0f")
    dtype = norm.type.dtype
    value.append(f"const float og_n = {load(dtype, store(dtype, normalized))};")
    env[norm.name] = ("og_n", dtype)
    value += emit_scalars(after, env, "e")
    value.append(f"return (float){env[row][0]};")
    lines += [
        "auto og_row = [&](unsigned int i, unsigned int j) -> float {",
        *("  " + line for line in value),
        "};",
    ]
    return lines, "og_row(i, kk)"


STAGED_ROW_BYTES = 16384  # a computed row slice up to this size is staged in shared memory


def stage_row(is_param: bool, dtype: str, m: int, rows: int) -> list[str]:
    """Statements computing the block's slice of a prologue row once, into shared memory in the
    row's dtype (as the unfused graph would store it), so the product loop reads each element
    from there instead of recomputing it per column thread; [] for a parameter row or a slice
    over `STAGED_ROW_BYTES`."""
    if is_param or m * rows * DTYPE_BYTES[dtype] > STAGED_ROW_BYTES:
        return []
    return [
        f"__shared__ {STORAGE[dtype]} og_xs[{m * rows}];",
        f"for (unsigned int t = threadIdx.x; t < {m * rows}u; t += {THREADS}u) {{",
        f"  const unsigned int i = t / {rows}u, kk = k0 + t % {rows}u;",
        f"  if (kk < k1) og_xs[t] = {store(dtype, 'og_row(i, kk)')};",
        "}",
        "__syncthreads();",
    ]
