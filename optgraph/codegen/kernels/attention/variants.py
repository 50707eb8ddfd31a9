"""attention (rope has its own family: `rope.py`).

attention (`q [B,Hq,Sq,D]`, `k, v [B,Hkv,Skv,D]`, optional `kv_len [1]`): query head h reads kv
head h / (Hq / Hkv) (grouped-query). The row's visible keys are `j < L` with `L = kv_len` (clamped
to [0, Skv]) or `Skv`, and, when causal, `j <= L - Sq + i`: this serves prefill (Sq = Skv, L = Skv)
and decode (Sq new rows at the end of the first L cache rows) alike. A row that sees no key yields
zeros. Scores and accumulators are float32 (online softmax). Four kernels, by shape:

- few query rows (decode): `decode_wide`, split-KV over the key chunks, one block
  per (key chunk, KV head, row tile), the K/V rows read once per KV group with 16-byte loads, all
  of a pass in flight at once; head sizes it does not split into 16-byte lane slices (and every
  decode node when `WIDE_DECODE` is off: the A/B switch) take `decode`, the
  earlier split-KV kernel of a warp per key row;
- many rows (prefill): `prefill_tiled`, K/V tiles of 32 keys in shared memory, a warp per
  two query rows, fully masked causal tiles skipped;
- head sizes neither takes (D > 256 for decode, D > 160 otherwise): `_attention_rows` below, one
  block of 128 threads per query row, tiles of 256 keys.

Before those (`GEMM_PREFILL_MIN_ROWS`, 64 by default; 0 = never): a node with at least that many query rows
(at most `prefill_gemm.MAX_KEYS` keys, one kv head's scores within `MAX_SCRATCH_BYTES`) runs on
tensor cores as two cuBLAS batched products around a softmax row kernel (`prefill_gemm`), in
chunks of kv heads whose scores fit that cap; it needs `scratch_bytes` of scratch (one chunk's),
which `lower_cuda` places.
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import (
    Launch,
    f32_literal,
    in_param,
    index_type,
    load,
    make_kernel,
    out_param,
    store,
)
from optgraph.codegen.kernels.attention import (
    decode,
    decode_wide,
    decode_wide_layout,
    prefill_gemm,
    prefill_tiled,
)
from optgraph.codegen.kernels.attention.head_rows import (
    AttentionShape,
    attention_shape,
    operand_args,
    operand_decls,
)
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.ir.graph import Node, TensorType

OPS = frozenset({"attention"})
TILE = 256
THREADS = 128
# Query rows from which attention takes the tensor-core path (prefill_gemm); 0 = never.
# On by default from 64 rows: on the H100 it took a 512-token Llama prefill from 5,098 to 4,293 µs
# (docs/benchmarks.md); decode steps (a few rows) keep the split-KV kernel.
GEMM_PREFILL_MIN_ROWS = 64
# Decode attention on `decode_wide` where it fits; False: always the earlier
# `decode` (the head-to-head variant og-fused-1s-old-decode-attn sets it).
WIDE_DECODE = True


def emit(
    node: Node, types: tuple[TensorType, ...], *, in_place: bool = False
) -> list[Launch | Gemm]:
    if node.op == "attention":
        shape = attention_shape(node, types)
        if prefill_gemm.fits(shape, GEMM_PREFILL_MIN_ROWS):
            return prefill_gemm.gemm_attention(shape)
    return [attention_launch(node, types)]


def scratch_bytes(node: Node, types: tuple[TensorType, ...]) -> int:
    """Scratch bytes `emit` needs for `node` (0: none)."""
    if node.op != "attention":
        return 0
    shape = attention_shape(node, types)
    if not prefill_gemm.fits(shape, GEMM_PREFILL_MIN_ROWS):
        return 0
    return prefill_gemm.scratch_bytes(shape)


def attention_launch(node: Node, types: tuple[TensorType, ...]) -> Launch:
    """The attention kernel that suits the node's shape (see the module docstring)."""
    shape = attention_shape(node, types)
    if WIDE_DECODE and decode_wide_layout.fits(shape):
        return decode_wide.decode_attention_wide(shape, node.name)
    if decode.fits(shape):
        return decode.decode_attention(shape, node.name)
    if prefill_tiled.fits(shape):
        return prefill_tiled.tiled_attention(shape)
    return _attention_rows(node, types)


def _attention_rows(node: Node, types: tuple[TensorType, ...]) -> Launch:
    q, k = types[0], types[1]
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    group = hq // hkv
    shape = attention_shape(node, types)
    scale = shape.scale
    causal = shape.causal
    extras = shape.has_extras
    per_thread = -(-d // THREADS)
    idx = index_type(max(q.numel, k.numel) + TILE)
    length = shape.length_expr()
    limit = "(long long)L - SQ + i + 1" if causal else "(long long)L"
    if shape.top_left:
        limit = shape.causal_limit("L", "i")
    dt = q.dtype
    neg_inf = f32_literal(float("-inf"))
    seen = "l > 0.0f" if extras else "limit > 0"
    denominator = shape.denominator("l", "m", "h")
    lines = [
        f"typedef {idx} IDX;",
        f"const IDX D = {d}u, SQ = {sq}u, SKV = {skv}u;",
        "const IDX i = blockIdx.x, h = blockIdx.y, bz = blockIdx.z;",
        f"const IDX hk = h / {group}u;",
        f"const IDX qoff = ((bz * {hq}u + h) * SQ + i) * D;",
        f"const IDX kvoff = (bz * {hkv}u + hk) * SKV * D;",
        f"__shared__ float sq_[{d}];",
        f"__shared__ float sc[{TILE}];",
        "__shared__ float og_scratch[32];",
        f"long long L = {length};",
        "if (L < 0) L = 0;",
        f"long long lim = {limit};",
        "if (lim > (long long)L) lim = L;",
        "const IDX limit = lim > 0 ? (IDX)lim : 0u;",
        *([f"const long long lo = {shape.window_low('L', 'i')};"] if shape.window else []),
        *(
            [f"const unsigned long long moff = {shape.mask_offset('bz', 'h', 'i')};"]
            if shape.mask is not None
            else []
        ),
        f"for (IDX t = threadIdx.x; t < D; t += blockDim.x) sq_[t] = {load(dt, 'in0[qoff + t]')};",
        "__syncthreads();",
        f"float m = {neg_inf}, l = 0.0f;",
        f"float acc[{per_thread}];",
        f"for (int r = 0; r < {per_thread}; ++r) acc[r] = 0.0f;",
        f"for (IDX t0 = 0; t0 < limit; t0 += {TILE}u) {{",
        f"  const IDX n = og_min(limit - t0, ({idx}){TILE}u);",
        "  for (IDX j = threadIdx.x; j < n; j += blockDim.x) {",
        "    const IDX krow = kvoff + (t0 + j) * D;",
        "    float dot = 0.0f;",
        f"    for (IDX t = 0; t < D; ++t) dot += sq_[t] * {load(dt, 'in1[krow + t]')};",
        _row_score(shape, f"dot * {f32_literal(scale)}"),
        "  }",
        "  __syncthreads();",
        f"  float tm = {neg_inf};",
        "  for (IDX j = threadIdx.x; j < n; j += blockDim.x) tm = og_max(tm, sc[j]);",
        f"  tm = og_block_reduce(tm, og_scratch, OgMax(), {neg_inf});",
        "  const float mn = og_max(m, tm);",
        f"  const float corr = mn == {neg_inf} ? 1.0f : expf(m - mn);"
        if extras
        else "  const float corr = expf(m - mn);",
        "  float ts = 0.0f;",
        "  for (IDX j = threadIdx.x; j < n; j += blockDim.x) {",
        f"    const float p = sc[j] == {neg_inf} ? 0.0f : expf(sc[j] - mn);"
        if extras
        else "    const float p = expf(sc[j] - mn);",
        "    sc[j] = p;",
        "    ts += p;",
        "  }",
        "  ts = og_block_reduce(ts, og_scratch, OgSum(), 0.0f);",  # also orders sc[] writes
        "  l = l * corr + ts;",
        f"  for (int r = 0; r < {per_thread}; ++r) {{",
        f"    const IDX t = threadIdx.x + (IDX)r * {THREADS}u;",
        "    if (t >= D) break;",
        "    float a = acc[r] * corr;",
        f"    for (IDX j = 0; j < n; ++j) a += sc[j] * {load(dt, 'in2[kvoff + (t0 + j) * D + t]')};",
        "    acc[r] = a;",
        "  }",
        "  m = mn;",
        "  __syncthreads();",
        "}",
        f"for (int r = 0; r < {per_thread}; ++r) {{",
        f"  const IDX t = threadIdx.x + (IDX)r * {THREADS}u;",
        "  if (t >= D) break;",
        f"  out[qoff + t] = {store(dt, f'{seen} ? acc[r] / {denominator} : 0.0f')};",
        "}",
    ]
    decls = [out_param(dt), in_param(dt, 0), in_param(dt, 1), in_param(dt, 2)]
    decls += operand_decls(shape)
    kernel = make_kernel("attention", decls, "\n".join("  " + s for s in lines))
    args = ("out", "in0", "in1", "in2") + operand_args(shape)
    return Launch(kernel, (sq, hq, b), (THREADS, 1, 1), args)


def _row_score(shape: AttentionShape, scaled: str) -> str:
    """sc[j]: the score of key t0 + j, -inf where the row does not see it."""
    if not shape.has_extras:
        return f"    sc[j] = {scaled};"
    seen = shape.seen_expr("t0 + j", "lo", "moff")
    score = shape.score_expr(scaled, "t0 + j", "moff")
    if not seen:
        return f"    sc[j] = {score};"
    return f"    sc[j] = ({seen}) ? {score} : {f32_literal(float('-inf'))};"
