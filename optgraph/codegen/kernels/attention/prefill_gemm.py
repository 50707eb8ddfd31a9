"""Prefill attention on tensor cores: two cuBLAS batched products around one softmax row kernel.

    %o = attention(%q, %k, %v) {causal = true} : f16[1,32,512,128]   (k, v : f16[1,8,512,128])
    ->  Gemm  scores = q·kᵀ      (batch 8 kv heads, the 4 query heads of a group as 2048 rows, f32 out)
        rows  softmax rows       (grid (512, 32, 1): scale, mask, f32 softmax, p in f16, in place)
        Gemm  out = p·v          (batch 8, m = 128, n = 2048, k = 512)

Grouped-query heads: the G = Hq / Hkv query heads of kv head hk are contiguous in q and in the
result ([B,Hq,Sq,D]), so batching over the B·Hkv kv heads with the group's G·Sq query rows stacked
as one matrix reads every K/V row once per group and needs no copy.

The scores live in the node's scratch (role "scratch", `scratch_bytes` of them: B·Hq·Sq·Skv
float32, row-major [B,Hq,Sq,Skv]); `lower_cuda` places it past the planned arena (one region per
stream) before any capture. The row kernel reads a row's scores into registers, applies what the
reference applies in its order (scale, softcap, float mask; kv_len, both causal alignments,
window, bool mask as visibility), takes the softmax in float32 and writes the probabilities in
q's dtype over the same row (row stride Skv·4 bytes, so p's leading dimension is Skv·4 / its
element size): every read of the row precedes the block reductions' barriers, every write follows
them. A row that sees no key gets zeros. Both products accumulate in float32. Up to `WARP_MAX_KEYS`
keys a row is one warp's (`WARP_ROWS` rows a block, warp shuffles instead of block barriers),
beyond it one block's; either way the keys a causal row cannot see are neither read nor
exponentiated, only written as zeros.

Long sequences run in chunks of kv heads: when all B·Hq·Sq·Skv scores exceed
`MAX_SCRATCH_BYTES`, the B·Hkv kv heads are cut into equal chunks whose scores fit, and each
chunk is the same three steps over its heads (operands at the chunk's byte offsets, the row
kernel's heads from the chunk's first), one after another on the node's stream, all reusing one
chunk's scratch:

    %o = attention(%q, %k, %v) : f16[2,8,4096,40]   (scores of all 16 heads: 1 GiB)
    ->  for heads [0,4), [4,8), [8,12), [12,16):  Gemm, rows, Gemm  (256 MiB of scratch)

Taken when `variants.GEMM_PREFILL_MIN_ROWS` (0 = never) is at most Sq, Skv is at most
`MAX_KEYS` (a row's scores stay in registers) and one kv head's scores fit the cap.
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import (
    STORAGE,
    Launch,
    f32_literal,
    make_kernel,
    store,
)
from optgraph.codegen.kernels.attention.head_rows import (
    AttentionShape,
    operand_args,
    operand_decls,
    warp_max,
    warp_sum,
)
from optgraph.codegen.kernels.matmul import OP_N, OP_T, Gemm
from optgraph.ir.graph import DTYPE_BYTES

# Threads of a block-per-row softmax: 256 with float4 reads measured fastest of 128, 256 and 512
# on SD-1.5's 4096-key rows (benchmarks/bench_prefill_attention.py,
# docs/results/2026-12-02-h200-attention-chunks-staged-upload.md).
THREADS = 256
MAX_PER_THREAD = 32
MAX_KEYS = THREADS * MAX_PER_THREAD
# The scores of a node must fit in this much scratch (f32), else the tiled kernel runs: 32 heads
# of 512 x 512 take 32 MiB; a long prompt's B·H·S² would take gigabytes.
MAX_SCRATCH_BYTES = 256 << 20
SCRATCH = "scratch"  # the role of the node's scratch bytes
NEG_INF = f32_literal(float("-inf"))
# Rows of softmax a block takes, one warp each (`softmax_warp_rows`), where a row's scores fit
# in 32 registers a lane; 0: a block of THREADS per row (`softmax_rows`) always.
WARP_ROWS = 4
WARP_MAX_KEYS = 32 * 32
# Beyond WARP_MAX_KEYS, a block's threads read 4 scores at once (one float4) and write 4
# probabilities at once, where Skv is a multiple of 4 (False: one at a time, the A/B switch).
VECTOR_ROWS = True


def fits(shape: AttentionShape, min_rows: int) -> bool:
    """Whether this path takes `shape` given the row threshold (0 = never)."""
    if not (0 < min_rows <= shape.sq and shape.skv <= MAX_KEYS and shape.dtype in DTYPE_BYTES):
        return False
    return _head_scores(shape) <= MAX_SCRATCH_BYTES


def _head_scores(shape: AttentionShape) -> int:
    """Bytes of the float32 scores of one kv head (its group of query heads)."""
    return shape.group * shape.sq * shape.skv * 4


def chunks(shape: AttentionShape) -> list[tuple[int, int]]:
    """(first kv head, kv heads) of each chunk over the B·Hkv kv heads: as few chunks as keep
    each one's scores within `MAX_SCRATCH_BYTES`, their sizes as equal as can be.

    B·Hkv = 16, 4 fit  ->  [(0, 4), (4, 4), (8, 4), (12, 4)];  B·Hkv = 10, 4 fit  ->
    [(0, 4), (4, 3), (7, 3)]"""
    heads = shape.b * shape.hkv
    fit = max(1, MAX_SCRATCH_BYTES // _head_scores(shape))
    count = -(-heads // fit)
    size, extra = divmod(heads, count)
    out, first = [], 0
    for c in range(count):
        n = size + (1 if c < extra else 0)
        out.append((first, n))
        first += n
    return out


def scratch_bytes(shape: AttentionShape) -> int:
    """The float32 scores of every (batch, head, row, key) of the largest chunk."""
    return max(n for _, n in chunks(shape)) * _head_scores(shape)


def prob_stride(shape: AttentionShape) -> int:
    """Elements of q's dtype between two rows of probabilities (written over the f32 scores)."""
    return shape.skv * 4 // DTYPE_BYTES[shape.dtype]


def gemm_attention(shape: AttentionShape) -> list[Gemm | Launch]:
    """scores = q·kᵀ, the softmax rows, out = p·v for each chunk (see the module docstring)."""
    s = shape
    rows = s.group * s.sq  # one kv head's query rows
    pld = prob_stride(s)
    size = DTYPE_BYTES[s.dtype]
    kv_bytes, q_bytes = s.skv * s.d * size, rows * s.d * size
    work: list[Gemm | Launch] = []
    for first, heads in chunks(s):
        scores = Gemm(
            s.dtype, OP_T, OP_N, s.skv, rows, s.d,
            "in1", s.d, s.skv * s.d,
            "in0", s.d, rows * s.d,
            SCRATCH, s.skv, rows * s.skv,
            heads,
            a_offset=first * kv_bytes,
            b_offset=first * q_bytes,
            c_dtype="" if s.dtype == "f32" else "f32",
        )  # fmt: skip
        out = Gemm(
            s.dtype, OP_N, OP_N, s.d, rows, s.skv,
            "in2", s.d, s.skv * s.d,
            SCRATCH, pld, rows * pld,
            "out", s.d, rows * s.d,
            heads,
            a_offset=first * kv_bytes,
            c_offset=first * q_bytes,
        )  # fmt: skip
        span = (first * s.group, heads * s.group)  # the chunk's query heads over B·Hq
        warp = 0 < WARP_ROWS and s.skv <= WARP_MAX_KEYS
        rows_kernel = softmax_warp_rows(s, span) if warp else softmax_rows(s, span)
        work += [scores, rows_kernel, out]
    return work


def softmax_rows(s: AttentionShape, span: tuple[int, int]) -> Launch:
    """One block per (row, query head of the chunk `span`): the row's probabilities over its
    scores, in place."""
    if VECTOR_ROWS and s.skv % 4 == 0:
        return _softmax_vector_rows(s, span)
    per = -(-s.skv // THREADS)
    dt = s.dtype
    seen = s.seen_and("j < limit", "j", "lo", "moff")
    score = s.score_expr(f"srow[j] * {f32_literal(s.scale)}", "j", "moff")
    lines = [
        "const unsigned int i = blockIdx.x, hl = blockIdx.y;",
        "__shared__ float og_scratch[32];",
        *_row_prologue(s, span),
        f"float sc[{per}];",
        f"float mx = {NEG_INF};",
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  const unsigned int j = threadIdx.x + r * {THREADS}u;",
        f"  sc[r] = ({seen}) ? {score} : {NEG_INF};",
        "  mx = og_max(mx, sc[r]);",
        "}",
        f"mx = og_block_reduce(mx, og_scratch, OgMax(), {NEG_INF});",
        "float total = 0.0f;",
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  sc[r] = sc[r] == {NEG_INF} ? 0.0f : expf(sc[r] - mx);",
        "  total += sc[r];",
        "}",
        "total = og_block_reduce(total, og_scratch, OgSum(), 0.0f);",  # every read is before it
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  const unsigned int j = threadIdx.x + r * {THREADS}u;",
        f"  if (j < {s.skv}u) prow[j] = {store(dt, _probability(s))};",
        "}",
    ]
    decls = ["float* scratch", *operand_decls(s)]
    kernel = make_kernel("attention_softmax", decls, "\n".join("  " + x for x in lines))
    return Launch(kernel, (s.sq, span[1], 1), (THREADS, 1, 1), (SCRATCH, *operand_args(s)))


def _softmax_vector_rows(s: AttentionShape, span: tuple[int, int]) -> Launch:
    """`softmax_rows` with 16-byte reads of the scores and one store of 4 probabilities (Skv a
    multiple of 4, so every row starts 16-byte aligned and a thread's 4 keys are all in range
    or all out):

        thread t, pass r: keys 4·(t + r·THREADS) .. +3  <-  float4 of the row's scores
    """
    per = -(-s.skv // (THREADS * 4))
    dt = s.dtype
    seen = s.seen_and("j < limit", "j", "lo", "moff")
    score = s.score_expr(f"xs[c] * {f32_literal(s.scale)}", "j", "moff")
    size = DTYPE_BYTES[dt]
    unit = {2: "uint2", 4: "uint4"}[size]
    lines = [
        "const unsigned int i = blockIdx.x, hl = blockIdx.y;",
        "__shared__ float og_scratch[32];",
        *_row_prologue(s, span),
        f"float sc[{per * 4}];",
        f"float mx = {NEG_INF};",
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  const unsigned int jv = threadIdx.x + r * {THREADS}u;",
        (
            f"  const float4 x4 = jv < {s.skv // 4}u ? reinterpret_cast<const float4*>(srow)[jv]"
            " : float4{0.0f, 0.0f, 0.0f, 0.0f};"
        ),
        "  const float xs[4] = {x4.x, x4.y, x4.z, x4.w};",
        "  #pragma unroll\n  for (int c = 0; c < 4; ++c) {",
        "    const unsigned int j = jv * 4u + c;",
        f"    sc[r * 4 + c] = ({seen}) ? {score} : {NEG_INF};",
        "    mx = og_max(mx, sc[r * 4 + c]);",
        "  }",
        "}",
        f"mx = og_block_reduce(mx, og_scratch, OgMax(), {NEG_INF});",
        "float total = 0.0f;",
        f"#pragma unroll\nfor (int r = 0; r < {per * 4}; ++r) {{",
        f"  sc[r] = sc[r] == {NEG_INF} ? 0.0f : expf(sc[r] - mx);",
        "  total += sc[r];",
        "}",
        "total = og_block_reduce(total, og_scratch, OgSum(), 0.0f);",  # every read is before it
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  const unsigned int jv = threadIdx.x + r * {THREADS}u;",
        f"  if (jv < {s.skv // 4}u) {{",
        f"    {STORAGE[dt]} p4[4];",
        (
            "    #pragma unroll\n    for (int c = 0; c < 4; ++c)"
            f" p4[c] = {store(dt, _probability(s, 'r * 4 + c'))};"
        ),
        f"    reinterpret_cast<{unit}*>(prow)[jv] = *reinterpret_cast<const {unit}*>(p4);",
        "  }",
        "}",
    ]
    decls = ["float* scratch", *operand_decls(s)]
    kernel = make_kernel("attention_softmax", decls, "\n".join("  " + x for x in lines))
    return Launch(kernel, (s.sq, span[1], 1), (THREADS, 1, 1), (SCRATCH, *operand_args(s)))


def _probability(s: AttentionShape, key: str = "r") -> str:
    """The probability of the key whose weight is sc[`key`], from the row's sum and maximum
    (0: no key seen)."""
    return f"total > 0.0f ? sc[{key}] / {s.denominator('total', 'mx', 'h')} : 0.0f"


def _row_prologue(s: AttentionShape, span: tuple[int, int]) -> list[str]:
    """The statements after the row `i` and the chunk's head `hl` are known: the head `h` and
    batch `bz` (over B·Hq from the chunk's first head, `span[0]`), the row's pointers (the
    chunk's scratch), limit, window, mask."""
    limit = s.causal_limit("L", "i") if s.causal else "L"
    # Only per-batch lengths, sinks and masks read the head: without them every chunk's kernel
    # is the same text (one compile for all the chunks of a node).
    heads = s.len_per_batch or s.sinks is not None or s.mask is not None
    return [
        *(
            [f"const unsigned int gh = {span[0]}u + hl, h = gh % {s.hq}u, bz = gh / {s.hq}u;"]
            if heads
            else []
        ),
        f"const unsigned long long row = (unsigned long long)hl * {s.sq}u + i;",
        f"const float* srow = scratch + row * {s.skv}ull;",
        (
            f"{STORAGE[s.dtype]}* prow = reinterpret_cast<{STORAGE[s.dtype]}*>(scratch)"
            f" + row * {prob_stride(s)}ull;"
        ),
        f"long long L = {s.length_expr()};",
        "if (L < 0) L = 0;",
        f"long long lim = {limit};",
        "if (lim > L) lim = L;",
        "const unsigned int limit = lim > 0 ? (unsigned int)lim : 0u;",
        *([f"const long long lo = {s.window_low('L', 'i')};"] if s.window else []),
        *(
            [f"const unsigned long long moff = {s.mask_offset('bz', 'h', 'i')};"]
            if s.mask is not None
            else []
        ),
    ]


def softmax_warp_rows(s: AttentionShape, span: tuple[int, int]) -> Launch:
    """One warp per (row, query head of the chunk `span`), `WARP_ROWS` rows a block: the
    softmax_rows work with warp shuffles for the row's max and sum (no block barrier)."""
    per = -(-s.skv // 32)
    seen = s.seen_and("j < limit", "j", "lo", "moff")
    score = s.score_expr(f"srow[j] * {f32_literal(s.scale)}", "j", "moff")
    lines = [
        (
            f"const unsigned int i = blockIdx.x * {WARP_ROWS}u + (threadIdx.x >> 5),"
            " hl = blockIdx.y, lane = threadIdx.x & 31u;"
        ),
        f"if (i >= {s.sq}u) return;  // the whole warp: no shuffle waits for it",
        *_row_prologue(s, span),
        f"float sc[{per}];",
        f"float mx = {NEG_INF};",
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        "  const unsigned int j = lane + r * 32u;",
        f"  sc[r] = ({seen}) ? {score} : {NEG_INF};",
        "  mx = og_max(mx, sc[r]);",
        "}",
        warp_max("mx"),
        "float total = 0.0f;",
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        f"  sc[r] = sc[r] == {NEG_INF} ? 0.0f : expf(sc[r] - mx);",
        "  total += sc[r];",
        "}",
        warp_sum("total"),  # every lane's reads are before it
        f"#pragma unroll\nfor (int r = 0; r < {per}; ++r) {{",
        "  const unsigned int j = lane + r * 32u;",
        f"  if (j < {s.skv}u) prow[j] = {store(s.dtype, _probability(s))};",
        "}",
    ]
    decls = ["float* scratch", *operand_decls(s)]
    kernel = make_kernel("attention_softmax", decls, "\n".join("  " + x for x in lines))
    grid = (-(-s.sq // WARP_ROWS), span[1], 1)
    return Launch(kernel, grid, (32 * WARP_ROWS, 1, 1), (SCRATCH, *operand_args(s)))
