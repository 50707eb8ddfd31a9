"""A one-row product that also stores the rms_norm of the row it produced (`norm_folds`).

A decode layer's o-projection and down products store the residual stream `h`; the next norm
reads it back in a kernel of one block. Folded, the product does that norm itself: each tile's
storing block (the last of its split-K blocks, or the tile's only block) sums the squares of
the values it stored (as stored: rounded to h's dtype), writes that partial to a per-kernel
workspace and arrives at a per-kernel counter; the block that arrives last adds the partials in
tile order (deterministic: bit-stable across replays), and normalizes the finished row:

    %h = fused(%x, %w, %r) { matmul, add }   %n = rms_norm(%h, %g)
    ->  one launch: tile t stores h[cols of t] and og_nss[t] = sum of h² over them;
        last tile:  r = sqrtf(sum_t og_nss[t] / K + eps);  n[j] = round(h[j] / r * g[j])

The partial sums are float32, added in a fixed order; the norm is rounded to its dtype as the
stand-alone kernel (`cuda_reduction`) rounds it, so results differ from it only by the order of
the sum of squares. Only one-row products (M = 1) whose row is the whole normalized row.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from optgraph.codegen.cuda_gemv_layout import THREADS
from optgraph.codegen.cuda_source import STORAGE, Launch, f32_literal, load, make_kernel, store
from optgraph.ir.graph import TensorType


@dataclass(frozen=True)
class RowNorm:
    """The rms_norm a product kernel computes after its store: `eps`, the weight's and the
    norm's dtypes; the weight is kernel parameter `in{first}`, the norm's result `nout`."""

    eps: float
    weight_dtype: str
    dtype: str

    def params(self, first: int) -> list[str]:
        return [f"const {STORAGE[self.weight_dtype]}* in{first}", f"{STORAGE[self.dtype]}* nout"]


def stored_square(dtype: str, value: str) -> list[str]:
    """Statements storing `value` (a float expression) at out[oi] and adding its square, as
    stored, to `og_sq`."""
    return [
        f"const {STORAGE[dtype]} og_o = {store(dtype, value)};",
        "out[oi] = og_o;",
        f"const float og_q = {load(dtype, 'og_o')};",
        "og_sq += og_q * og_q;",
    ]


TAIL_PER_THREAD = 32  # row elements a thread of the last block keeps in registers (K ≤ 8192)


def norm_tail(
    norm: RowNorm, salt: str, tiles: int, k: int, out_dtype: str, first: int
) -> tuple[list[str], str]:
    """(statements after the store loop, file-scope declarations): the tile's partial, the
    arrival, and in the last block the norm of the whole row (see the module docstring). The
    weight is loaded before the arrival (every storing block: its loads overlap the reduction
    and the atomic), the row and the partials after it, all in flight at once."""
    per = -(-k // THREADS)
    assert per <= TAIL_PER_THREAD, "a row over the tail's registers (cuda_fused checks)"
    digest = hashlib.sha1(f"norm|{salt}|{tiles},{k},{out_dtype}".encode()).hexdigest()[:12]
    ss, cnt = f"og_nss_{digest}", f"og_ncnt_{digest}"
    decl = f"__device__ float {ss}[{tiles}];\n__device__ unsigned int {cnt}[1];\n"
    eps = f32_literal(norm.eps)
    guard = f"if (j < {k}u) " if k % THREADS else ""
    each = f"#pragma unroll\nfor (unsigned int u = 0; u < {per}u; ++u) {{"
    at = f"  const unsigned int j = threadIdx.x + u * {THREADS}u;"
    value = store(norm.dtype, "og_hv[u] / og_nr * og_w[u]")
    lines = [
        f"float og_w[{per}], og_hv[{per}];",
        each,
        at,
        f"  og_w[u] = 0.0f; {guard}og_w[u] = {load(norm.weight_dtype, f'in{first}[j]')};",
        "}",
        "__shared__ float og_nred[32];",
        "__shared__ bool og_nlast;",
        "{",
        "  const float og_tss = og_block_reduce(og_sq, og_nred, OgSum(), 0.0f);",
        "  if (threadIdx.x == 0) {",
        f"    {ss}[tile] = og_tss;",
        f"    og_nlast = og_arrive(&{cnt}[0]) == {tiles - 1}u;",
        "  }",
        "  __syncthreads();",
        "}",
        "if (!og_nlast) return;",
        each,
        at,
        f"  og_hv[u] = 0.0f; {guard}og_hv[u] = {load(out_dtype, '__ldcg(&out[j])')};",
        "}",
        "float og_ss = 0.0f;",
        "#pragma unroll",
        f"for (unsigned int p = 0; p < {tiles}u; ++p) og_ss += __ldcg(&{ss}[p]);",
        f"const float og_nr = sqrtf(og_ss / (float){k} + {eps});",
        each,
        at,
        f"  {guard}nout[j] = {value};",
        "}",
        f"if (threadIdx.x == 0) {cnt}[0] = 0u;",
    ]
    return [part for line in lines for part in line.split("\n")], decl


GATHER_PER_THREAD = 16  # row elements a thread of the gather-and-norm kernel keeps in registers


def gather_norm_launch(
    norm: RowNorm, table: TensorType, ids: TensorType, out_dtype: str
) -> Launch | None:
    """One block gathering row `ids[0]` of `table` into `out` (a zero row when out of range, as
    `get_rows`) and storing its rms_norm into `nout`: the first layer's norm, no kernel of its
    own. Every element is loaded once (registers), the sum of squares reduced over the block.
    None for rows over `GATHER_PER_THREAD` × 1024 elements."""
    k = table.shape[-1]
    threads = 256 if k <= GATHER_PER_THREAD * 256 else 1024
    per = -(-k // threads)
    if per > GATHER_PER_THREAD or ids.numel != 1 or table.rank != 2:
        return None
    storage = STORAGE[out_dtype]
    guard = f"if (j < {k}u) " if k % threads else ""
    eps = f32_literal(norm.eps)
    weight = load(norm.weight_dtype, "in2[j]")
    normalized = store(norm.dtype, f"og_x[u] / og_nr * {weight}")
    each = f"#pragma unroll\nfor (unsigned int u = 0; u < {per}u; ++u) {{"
    lines = [
        "const long long row = (long long)in1[0];",
        f"const bool og_in = row >= 0 && row < {table.shape[0]}LL;",
        f"float og_x[{per}];",
        "float og_ss = 0.0f;",
        each,
        f"  const unsigned int j = threadIdx.x + u * {threads}u;",
        "  og_x[u] = 0.0f;",
        f"  {guard}{{",
        f"    const {storage} v = og_in ? in0[(unsigned long long)row * {k}u + j] : ({storage})0;",
        "    out[j] = v;",
        f"    og_x[u] = {load(out_dtype, 'v')};",
        "    og_ss += og_x[u] * og_x[u];",
        "  }",
        "}",
        "__shared__ float og_nred[32];",
        "og_ss = og_block_reduce(og_ss, og_nred, OgSum(), 0.0f);",
        f"const float og_nr = sqrtf(og_ss / (float){k} + {eps});",
        each,
        f"  const unsigned int j = threadIdx.x + u * {threads}u;",
        f"  {guard}nout[j] = {normalized};",
        "}",
    ]
    decls = [
        f"{storage}* out",
        f"const {storage}* in0",
        f"const {STORAGE[ids.dtype]}* in1",
        *norm.params(2),
    ]
    body = "\n".join("  " + part for line in lines for part in line.split("\n"))
    kernel = make_kernel("gather_norm", decls, body)
    return Launch(kernel, (1, 1, 1), (threads, 1, 1), ("out", "in0", "in1", "in2", "nout"))
