"""The row of a one-row product computed where the product reads it: its prologue.

`fuse` lets a one-row product take a prologue on its row operand (elementwise nodes and at most
one norm of the whole row, `fusion_rules`). `product_kernel.one_row_kernel` asks `row_prologue` for the
statements to run first (the norm's statistics: one block reduction per row, every load of the
row in flight) and the C expression of row element (i, kk); `stage_row` then computes the
block's slice of the row once into shared memory, in the row's dtype, when it fits:

    %n = rms_norm(%h, %g)  %q = matmul(%n, %wq)
    ->  ss = sum of h² over the row (block reduction);  r = sqrtf(ss / K + eps)
        og_xs[kk - k0] = round_f16(h[kk] / r * g[kk])   for the block's rows k0 <= kk < k1
        product loop: xv = og_xs[kk - k0]

A node after the norm may read a value computed before it (`maximum(rms_norm(%h), %h)`): the
element lambda computes such values again at (i, j) from the parameters, as the statistics'
lambda does (they are elementwise in the row, so no value crosses the two phases).

Complexity: linear in the prologue's nodes; the kernel does K work per block for a norm's
statistics (the row is read from L2 by every block) and one element per row of its slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.analysis.fusion_rules import NORM_OPS
from optgraph.codegen.cuda_source import STORAGE, f32_literal, load, store
from optgraph.codegen.kernels.one_row.geometry import THREADS
from optgraph.codegen.kernels.scalars import emit_scalars, load_params, needed_values, used_values
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
    reader = _RowReader(params, types, row_type)
    norms = [n for n in prologue if n.op in NORM_OPS]
    if not norms:
        lambdas = [
            "auto og_row = [&](unsigned int i, unsigned int j) -> float {",
            *("  " + line for line in reader.element(prologue, row)),
            "};",
        ]
        return lambdas, "og_row(i, kk)"
    norm = norms[0]
    cone = needed_values(prologue, norm.operands[0])
    before = [n for n in prologue if n.name in cone]
    after = [n for n in prologue if n.name not in cone and n is not norm]
    # A node after the norm may read a value computed before it (`maximum(%n, %h)` of the
    # norm's own input): that value is elementwise in the row, so it is recomputed at (i, j).
    read_after = {o for n in after for o in n.operands}
    again: set[str] = set()
    for name in read_after & cone:
        again |= needed_values(before, name)
    recomputed = [n for n in before if n.name in again]
    lines = [
        "auto og_x = [&](unsigned int i, unsigned int j) -> float {",
        *("  " + line for line in reader.element(before, norm.operands[0])),
        "};",
        *_norm_statistics(norm, k, m),
        "auto og_row = [&](unsigned int i, unsigned int j) -> float {",
        *("  " + line for line in _normalized_element(reader, norm, recomputed, after, row)),
        "};",
    ]
    return lines, "og_row(i, kk)"


@dataclass(frozen=True)
class _RowReader:
    """Reads the region's parameters at row element (i, j) of a `row_type` row."""

    params: Sequence[str]
    types: Sequence[TensorType]
    row_type: TensorType

    def load(self, used: set[str], env: dict[str, tuple[str, str]]) -> list[str]:
        """`xi` (the element's offset in the row) and the used parameters there, into `env`."""
        roles = [f"in{j}" for j in range(len(self.params))]
        lines = [f"const unsigned int xi = i * {self.row_type.shape[-1]}u + j;"]
        return lines + load_params(
            self.params, self.types, roles, used, "xi", self.row_type.shape, env, "r"
        )

    def element(self, nodes: Sequence[Node], value: str) -> list[str]:
        """A lambda body returning `value` computed by `nodes` at element (i, j)."""
        env: dict[str, tuple[str, str]] = {}
        lines = self.load(used_values(nodes, (value,)), env)
        lines += emit_scalars(nodes, env, "e")
        return lines + [f"return (float){env[value][0]};"]


# Rows of at most this many elements: every warp reduces the norm's row itself (each lane a
# 32nd of it, then shuffles: the same order in every warp, so the same bits), with no barrier;
# 0: a block reduction (every thread a 256th, then shared memory and two barriers).
WARP_STATISTICS_MAX_K = 2048


def _norm_statistics(norm: Node, k: int, m: int) -> list[str]:
    """Statements computing `og_mu[i]` and `og_r[i]` (mean, 0 for rms_norm, and the root of the
    variance plus eps) of each of the m rows of `og_x` by block reductions (by warp reductions
    for rows of at most `WARP_STATISTICS_MAX_K`)."""
    eps = f32_literal(float_attr(attrs_with_defaults(norm), "eps"))
    by_warp = k <= WARP_STATISTICS_MAX_K
    red = "og_warp_sum({0})" if by_warp else "og_block_reduce({0}, og_row_scratch, OgSum(), 0.0f)"
    lines = [
        *([] if by_warp else ["__shared__ float og_row_scratch[32];"]),
        f"float og_k[{m}], og_mu[{m}], og_r[{m}];",
        f"for (int i = 0; i < {m}; ++i) {{",
    ]
    # Every load of the row in flight at once: a constant trip count the compiler unrolls.
    width, first = (32, "(threadIdx.x & 31u)") if by_warp else (THREADS, "threadIdx.x")
    per = -(-k // width)
    guard = f"if (j < {k}u) " if k % width else ""

    def each(statement: str) -> str:
        return (
            f"  #pragma unroll\n  for (unsigned int u = 0; u < {per}u; ++u) {{ "
            f"const unsigned int j = {first} + u * {width}u; {guard}{{ {statement} }} }}"
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
    return lines + ["}"]


def _normalized_element(
    reader: _RowReader,
    norm: Node,
    recomputed: Sequence[Node],
    after: Sequence[Node],
    row: str,
) -> list[str]:
    """A lambda body returning row element (i, j): the norm's value (`og_x` normalized with the
    statistics, weighted, rounded to the norm's dtype), the values before the norm that nodes
    after it read (`recomputed`, elementwise, as `og_x` computes them), then the prologue nodes
    `after` it."""
    assert norm.type is not None
    env: dict[str, tuple[str, str]] = {}
    computed = {n.name for n in recomputed} | {norm.name}
    lines = reader.load(used_values([norm, *recomputed, *after], (row,)) - computed, env)
    lines += emit_scalars(recomputed, env, "b")
    weights = [env[o][0] for o in norm.operands[1:]]
    if norm.op == "rms_norm":
        normalized = f"og_x(i, j) / og_r[i] * {weights[0]}"
    else:
        bias = weights[1] if len(weights) > 1 else "0.0f"
        normalized = f"((og_x(i, j) - og_k[i]) - og_mu[i]) / og_r[i] * {weights[0]} + {bias}"
    dtype = norm.type.dtype
    lines.append(f"const float og_n = {load(dtype, store(dtype, normalized))};")
    env[norm.name] = ("og_n", dtype)
    lines += emit_scalars(after, env, "e")
    return lines + [f"return (float){env[row][0]};"]


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
