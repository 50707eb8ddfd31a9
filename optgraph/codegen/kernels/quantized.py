"""Quantized weights (ggml block formats): dequantize, get_rows of a quantized table, matmul.

Every kernel decodes blocks with one device function a type, `og_dq32_<type>(block, sub, w)`:
the 32 values of sub-block `sub` (a block of B elements has B / 32) into `w[32]`, in registers.
The decoders are file-scope declarations (`Kernel.decls`) of the kernels that use them, so a
module holds them only where a quantized weight is read (and each once: `kernels_source`).
They compute what `gguf.quants.dequantize` computes, in its order and rounding: the products
and sums spelled with `__fmul_rn`/`__fadd_rn`/`__fsub_rn`, so nvcc contracts none into an fma
(q4_1's `d·q + m`, the k-quants' `d·sc·q - dmin·m`), and every value is bit for bit the
reference's.

    %w2 = dequantize(%w) {dtype = "f16"} : f16[64,256]   (%w : q4_k[64,256])
    ->  a thread per 32 values: decode, round to f16 (as the reference's astype), store
    %e = get_rows(%t, %ids) : f32[5,512]   (%t : q8_0[1000,512])
    ->  a thread per (id, 32 values); an id outside the table gives zeros
    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q4_k[4096,4096])
    ->  q4_k (and q6_k, q8_0, opt-in: `INTEGER_DOT_TYPES`) where x's codes fit: the integer-dot
        kernel (`quantized_integer_dot`): x's int16 codes a block, the weight's 4-bit (6-bit,
        8-bit) codes by dp2a, 16 columns a block;
        other types (and `INTEGER_DOT = False`): the one-row kernel (`quantized_one_row`): a warp
        per output column or part of one (8 a block), a lane per 32 values of K; warps stage
        tiles of the weight row in shared memory with 16-byte loads (the next in flight) where
        the row is whole 16-byte units and aligned, decode in registers, f32 sums, xor shuffles
    %y = matmul(%x, %w) {transpose_b = true} : f16[64,4096]
    ->  dequantize %w into the node's scratch in %x's dtype, then cuBLAS (x · scratchᵀ)

Rows of x beyond `KERNEL_MAX_ROWS` (prefill) take the cuBLAS path; for f16 and bf16 rows the
weight is rounded to that dtype on the way (cuBLAS multiplies like dtypes), an error within the
GPU tests' bounds. Not handled: a fused region around a quantized product (`fusion_rules`
refuses it), epilogues, merged sibling products; PDL weight loads before the wait only in the
integer-dot kernel.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    STORAGE,
    Kernel,
    Launch,
    body_entry,
    in_param,
    index_type,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels import quantized_integer_dot, quantized_one_row
from optgraph.codegen.kernels.matmul import Gemm, emit_roles
from optgraph.ir.graph import DTYPE_BYTES, QUANT_BLOCKS, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

# The op only this family emits; get_rows and matmul come here when they read a quantized
# operand (`reads_quantized`, asked by the dispatcher before any family).
OPS = frozenset({"dequantize"})
SCRATCH = "scratch"
# Rows of x the one-row kernel takes (a block row each); more go to scratch + cuBLAS.
KERNEL_MAX_ROWS = 4
WARPS = 8  # warps a block of the one-row kernel (a column each, or parts of one)
# The one-row kernel's layout: `quantized_one_row` (True), or a warp a column with one staged
# tile in flight and byte loads (False: the layout before it, for A/B runs).
WIDE_ONE_ROW = True
# q4_k, q6_k and q8_0 products in the integer form of `quantized_integer_dot` where it fits
# (True), or in the float form of the wide layout (False: the form before it, for A/B runs);
# `INTEGER_DOT_TYPES`: the types that take it while `INTEGER_DOT` is on (A/B runs of one type).
# q6_k's and q8_0's integer forms are opt-in until they are measured on a GPU: an earlier q6_k
# one (reverted) was slower than the float form on a 32000 x 4096 logits head (docs/codegen.md,
# quantized products); q8_0's has not been run on a GPU.
INTEGER_DOT = True
INTEGER_DOT_TYPES = frozenset({"q4_k"})

COMMON = r"""// Quantized blocks (ggml formats): each og_dq32_<type> writes the 32 values of sub-block s.
__device__ __forceinline__ float og_q_half(const unsigned char* p) {
  return og_f16_to_f32((og_f16)(p[0] | (p[1] << 8)));
}
"""

DECODERS: dict[str, str] = {
    "q8_0": r"""__device__ __forceinline__ void og_dq32_q8_0(const unsigned char* b, unsigned int s, float* w) {
  const float d = og_q_half(b);
#pragma unroll
  for (int j = 0; j < 32; ++j) w[j] = __fmul_rn((float)(signed char)b[2 + j], d);
}
""",
    "q4_0": r"""__device__ __forceinline__ void og_dq32_q4_0(const unsigned char* b, unsigned int s, float* w) {
  const float d = og_q_half(b);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    w[j] = __fmul_rn(d, (float)((int)(b[2 + j] & 15u) - 8));
    w[j + 16] = __fmul_rn(d, (float)((int)(b[2 + j] >> 4) - 8));
  }
}
""",
    "q4_1": r"""__device__ __forceinline__ void og_dq32_q4_1(const unsigned char* b, unsigned int s, float* w) {
  const float d = og_q_half(b), m = og_q_half(b + 2);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    w[j] = __fadd_rn(__fmul_rn(d, (float)(b[4 + j] & 15u)), m);
    w[j + 16] = __fadd_rn(__fmul_rn(d, (float)(b[4 + j] >> 4)), m);
  }
}
""",
    "q5_0": r"""__device__ __forceinline__ void og_dq32_q5_0(const unsigned char* b, unsigned int s, float* w) {
  const float d = og_q_half(b);
  const unsigned int qh = b[2] | (b[3] << 8) | (b[4] << 16) | ((unsigned int)b[5] << 24);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int lo = (int)((b[6 + j] & 15u) | (((qh >> j) & 1u) << 4));
    const int hi = (int)((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    w[j] = __fmul_rn(d, (float)(lo - 16));
    w[j + 16] = __fmul_rn(d, (float)(hi - 16));
  }
}
""",
    "q4_k": r"""__device__ __forceinline__ void og_q_scale_min(const unsigned char* q, unsigned int s, unsigned int* sc, unsigned int* mn) {
  if (s < 4) { *sc = q[s] & 63u; *mn = q[s + 4] & 63u; }
  else {
    *sc = (q[s + 4] & 15u) | ((q[s - 4] >> 2) & 48u);
    *mn = (q[s + 4] >> 4) | ((q[s] >> 2) & 48u);
  }
}
__device__ __forceinline__ void og_dq32_q4_k(const unsigned char* b, unsigned int s, float* w) {
  unsigned int sc, mn;
  og_q_scale_min(b + 4, s, &sc, &mn);
  const float d = __fmul_rn(og_q_half(b), (float)sc), m = __fmul_rn(og_q_half(b + 2), (float)mn);
  const unsigned char* q = b + 16 + (s >> 1) * 32u;
  const unsigned int shift = (s & 1u) * 4u;
#pragma unroll
  for (int j = 0; j < 32; ++j) w[j] = __fsub_rn(__fmul_rn(d, (float)((q[j] >> shift) & 15u)), m);
}
""",
    "q5_k": r"""__device__ __forceinline__ void og_dq32_q5_k(const unsigned char* b, unsigned int s, float* w) {
  unsigned int sc, mn;
  og_q_scale_min(b + 4, s, &sc, &mn);
  const float d = __fmul_rn(og_q_half(b), (float)sc), m = __fmul_rn(og_q_half(b + 2), (float)mn);
  const unsigned char* qh = b + 16;
  const unsigned char* q = b + 48 + (s >> 1) * 32u;
  const unsigned int shift = (s & 1u) * 4u;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const unsigned int v = ((q[j] >> shift) & 15u) | (((qh[j] >> s) & 1u) << 4);
    w[j] = __fsub_rn(__fmul_rn(d, (float)v), m);
  }
}
""",
    "q6_k": r"""__device__ __forceinline__ void og_dq32_q6_k(const unsigned char* b, unsigned int s, float* w) {
  const float d = og_q_half(b + 208);
  const float d0 = __fmul_rn(d, (float)(signed char)b[192 + 2 * s]);
  const float d1 = __fmul_rn(d, (float)(signed char)b[193 + 2 * s]);
  const unsigned char* ql = b + (s >> 2) * 64u + (s & 1u) * 32u;
  const unsigned char* qh = b + 128 + (s >> 2) * 32u;
  const unsigned int lo_shift = ((s >> 1) & 1u) * 4u, hi_shift = (s & 3u) * 2u;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = (int)(((ql[j] >> lo_shift) & 15u) | (((qh[j] >> hi_shift) & 3u) << 4)) - 32;
    w[j] = __fmul_rn(j < 16 ? d0 : d1, (float)q);
  }
}
""",
    "mxfp4": r"""__device__ __forceinline__ void og_dq32_mxfp4(const unsigned char* b, unsigned int s, float* w) {
  // d = 2^(e - 128); for e < 2 a subnormal, which the device flushes to zero (-ftz), so it
  // is taken as 2^8 d and the product scaled by 2^-8 after: both exact, the result flushed
  // only where it is itself subnormal.
  const unsigned int e = b[0];
  const float d = __uint_as_float(e < 2u ? (e + 7u) << 23 : (e - 1u) << 23);
  const float post = e < 2u ? 0.00390625f : 1.0f;
  const signed char kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    w[j] = __fmul_rn(__fmul_rn(d, (float)kv[b[1 + j] & 15u]), post);
    w[j + 16] = __fmul_rn(__fmul_rn(d, (float)kv[b[1 + j] >> 4]), post);
  }
}
""",
}
# q5_k shares q4_k's scale unpacking.
_NEEDS = {"q5_k": ("q4_k",)}


def is_quantized(dtype: str) -> bool:
    return dtype in QUANT_BLOCKS


def reads_quantized(node: Node, types: Sequence[TensorType]) -> bool:
    """Whether `node` is one of the readers of a quantized operand this module emits."""
    if node.op == "dequantize":
        return True
    if node.op in ("get_rows", "matmul") and len(types) >= 2:
        return is_quantized(types[0].dtype if node.op == "get_rows" else types[1].dtype)
    return False


def decls(dtype: str) -> tuple[str, ...]:
    """The file-scope text a kernel reading `dtype` blocks needs: the shared helper, then the
    decoder (q5_k after q4_k's, whose scale unpacking it calls)."""
    if dtype not in DECODERS:
        raise NotImplementedError(f"{dtype}: no CUDA block decoder")
    own = tuple(DECODERS[d] for d in _NEEDS.get(dtype, ()))
    return (COMMON, *own, DECODERS[dtype])


def _kernel(
    family: str,
    dtype: str,
    params: Sequence[str],
    body: str,
    extra: tuple[str, ...] = (),
    bounds: tuple[int, int] | None = None,
    self_wait: bool = False,
) -> Kernel:
    """A kernel named by the hash of its decoders and text, with the decoders as its decls
    (`extra`: more file-scope text after them; `bounds`: its `__launch_bounds__`; `self_wait`:
    the body has the PDL entry, after its first weight loads, see `Kernel.self_wait`)."""
    texts = (*decls(dtype), *extra)
    text = "".join(texts) + kernel_template(params, body, bounds, "", self_wait)
    digest = hashlib.sha1(f"{family}\n{text}".encode()).hexdigest()[:12]
    return Kernel.assemble(f"og_{family}_{digest}", params, body, texts, bounds, "", self_wait)


def _geometry(dtype: str, k: int) -> tuple[int, int, int]:
    """(block elements, block bytes, sub-blocks of 32 a block) of `dtype`, checking `k`."""
    elements, nbytes = QUANT_BLOCKS[dtype]
    if k % elements:
        raise ValueError(f"{dtype}: {k} values are not whole blocks of {elements}")
    return elements, nbytes, elements // 32


def _unit_loop(idx: str, units: int) -> str:
    """The head of a grid-stride loop over `units` units of 32 values (`u`)."""
    return (
        f"for ({idx} u = ({idx})blockIdx.x * blockDim.x + threadIdx.x; u < {units}u;"
        f" u += ({idx})gridDim.x * blockDim.x) {{"
    )


def _store32(dtype: str, dst: str) -> list[str]:
    return [
        "#pragma unroll",
        f"for (int j = 0; j < 32; ++j) {dst}[j] = {store(dtype, 'w[j]')};",
    ]


def dequantize_launch(
    wtype: TensorType, out_dtype: str, src: str = "in0", dst: str = "out"
) -> Launch:
    """The whole tensor of `wtype` decoded into `dst` in `out_dtype`, a thread per 32 values.

    Where `dst` is 16-byte aligned (tested at run time) a warp's 32 units go through shared
    memory (a unit's 16-byte pieces padded by one, so neither side conflicts on banks) and out
    in 16-byte stores that together cover the warp's values contiguously: a thread storing its
    own 32 values one at a time touches 32 segments a warp instruction (the prefill's weights
    took 7x the f16 step that way)."""
    _, nbytes, sub = _geometry(wtype.dtype, wtype.shape[-1])
    units = wtype.numel // 32
    idx = index_type(wtype.numel)
    pieces = 32 * DTYPE_BYTES[out_dtype] // 16  # 16-byte pieces a unit
    if out_dtype == "f32":
        words, pack = 32, "__float_as_uint(w[j])"
    else:
        words = 16
        pack = f"(unsigned int){store(out_dtype, 'w[2 * j]')} | "
        pack += f"((unsigned int){store(out_dtype, 'w[2 * j + 1]')} << 16)"
    lines = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        "const bool wide = (reinterpret_cast<unsigned long long>(out) & 15ull) == 0ull;",
        f"__shared__ uint4 og_deq[4][{32 * (pieces + 1)}];",
        (
            f"for ({idx} base = (({idx})blockIdx.x * 4u + warp) * 32u; base < {units}u;"
            f" base += ({idx})gridDim.x * 128u) {{"
        ),
        f"  const {idx} u = base + lane;",
        "  float w[32];",
        f"  if (u < {units}u)",
        f"    og_dq32_{wtype.dtype}(in0 + (u / {sub}u) * {nbytes}u, (unsigned int)(u % {sub}u), w);",
        "  if (wide) {",
        f"    unsigned int pk[{words}];",
        "#pragma unroll",
        f"    for (int j = 0; j < {words}; ++j) pk[j] = {pack};",
        "    __syncwarp();  // the round before has read the stage",
        "#pragma unroll",
        f"    for (int c = 0; c < {pieces}; ++c)",
        (
            f"      og_deq[warp][lane * {pieces + 1}u + c] = uint4{{pk[4 * c], pk[4 * c + 1],"
            " pk[4 * c + 2], pk[4 * c + 3]};"
        ),
        "    __syncwarp();",
        f"    const {idx} left = {units}u - base;  // units from base on",
        f"    const unsigned int valid = (unsigned int)(left < 32u ? left : 32u) * {pieces}u;",
        "    uint4* to = reinterpret_cast<uint4*>(out + base * 32u);",
        "#pragma unroll",
        f"    for (unsigned int k = 0; k < {pieces}u; ++k) {{",
        "      const unsigned int c = lane + 32u * k;",
        f"      if (c < valid) to[c] = og_deq[warp][(c / {pieces}u) * {pieces + 1}u + c % {pieces}u];",
        "    }",
        f"  }} else if (u < {units}u) {{",
        *("    " + x for x in _store32(out_dtype, "(out + u * 32u)")),
        "  }",
        "}",
    ]
    params = [out_param(out_dtype), "const unsigned char* in0"]
    kernel = _kernel("dequantize", wtype.dtype, params, "\n".join("  " + x for x in lines))
    blocks = max(1, min(-(-units // 128), 65536))
    return Launch(kernel, (blocks, 1, 1), (128, 1, 1), (dst, src))


def get_rows_launch(table: TensorType, ids: TensorType, out: TensorType) -> Launch:
    """out[i, :] = the decoded row ids[i] of `table` (zeros for an id outside it)."""
    width = table.shape[-1]
    _, nbytes, sub = _geometry(table.dtype, width)
    rows = table.numel // width
    per_row = width // 32
    units = ids.numel * per_row
    row_bytes = width // (sub * 32) * nbytes
    idx = index_type(max(out.numel, table.numel * 2))
    block = f"in0 + ({idx})row * {row_bytes}u + (part / {sub}u) * {nbytes}u"
    lines = [
        _unit_loop(idx, units),
        f"  const long long row = (long long)in1[u / {per_row}u];",
        f"  const {idx} part = u % {per_row}u;",
        "  float w[32];",
        f"  if (row >= 0 && row < {rows}LL)",
        f"    og_dq32_{table.dtype}({block}, (unsigned int)(part % {sub}u), w);",
        "  else",
        "    for (int j = 0; j < 32; ++j) w[j] = 0.0f;",
        *("  " + x for x in _store32(out.dtype, "(out + u * 32u)")),
        "}",
    ]
    params = [out_param(out.dtype), "const unsigned char* in0", in_param(ids.dtype, 1)]
    kernel = _kernel("get_rows_q", table.dtype, params, "\n".join("  " + x for x in lines))
    blocks = max(1, min(-(-units // 128), 65536))
    return Launch(kernel, (blocks, 1, 1), (128, 1, 1), ("out", "in0", "in1"))


def lanes_per_tile(dtype: str) -> int:
    """Units of 32 values each lane decodes per staged tile: the fewest (1, 2, 4, 8) whose
    tile is whole blocks and whole 16-byte units (q6_k's 210-byte blocks need 2)."""
    elements, nbytes = QUANT_BLOCKS[dtype]
    sub = elements // 32
    for r in (1, 2, 4, 8):
        if (32 * r) % sub == 0 and (32 * r // sub * nbytes) % 16 == 0:
            return r
    raise AssertionError(dtype)


def one_row_launch(x: TensorType, w: TensorType, out: TensorType) -> Launch:
    """`out[r, n] = Σ_k x[r, k] · w[n, k]` for every row r of x: a warp per (n, r), or with
    `WIDE_ONE_ROW` the layout of `quantized_one_row` (parts of K for short N, words)."""
    n, k = w.shape
    _, nbytes, sub = _geometry(w.dtype, k)
    rows = x.numel // k
    units = k // 32
    row_bytes = k // (32 * sub) * nbytes
    per = lanes_per_tile(w.dtype)
    params = [out_param(out.dtype), in_param(x.dtype, 0), "const unsigned char* in1"]
    if INTEGER_DOT and w.dtype in INTEGER_DOT_TYPES and quantized_integer_dot.fits(w.dtype, k):
        early, body = quantized_integer_dot.body(x.dtype, w.dtype, out.dtype, n, k)
        lines = [*early, *body_entry().splitlines(), *body]
        text = "\n".join("  " + line for line in lines)
        extra = quantized_integer_dot.decls(w.dtype)
        kernel = _kernel("one_row_qi", w.dtype, params, text, extra, (256, 2), True)
        grid = (-(-n // quantized_integer_dot.COLUMNS), rows, 1)
        return Launch(kernel, grid, (32 * quantized_integer_dot.WARPS, 1, 1), ("out", "in0", "in1"))
    if WIDE_ONE_ROW:
        per = quantized_one_row.tile_lanes(per, 32 * per // sub * nbytes)
        split = quantized_one_row.parts(n, rows, -(-units // (32 * per)), WARPS)
        geometry = (n, k, nbytes, sub, row_bytes)
        body = quantized_one_row.wide_body(x.dtype, w.dtype, out.dtype, geometry, per, split)
        extra = quantized_one_row.word_decls(w.dtype) if row_bytes % 16 == 0 else ()
        text = "\n".join("  " + line for line in body)
        bounds = quantized_one_row.bounds(w.dtype)
        kernel = _kernel("one_row_q", w.dtype, params, text, extra, bounds)
        grid = (-(-n // (WARPS // split)), rows, 1)
        return Launch(kernel, grid, (32 * WARPS, 1, 1), ("out", "in0", "in1"))
    tile_units = 32 * per
    tile_bytes = tile_units // sub * nbytes
    stageable = row_bytes % 16 == 0
    xt = x.dtype
    left = f"{row_bytes}u - (t / {sub}u) * {nbytes}u"  # the row's bytes from the tile on
    lines = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        f"const unsigned int n = blockIdx.x * {WARPS}u + warp, r = blockIdx.y;",
        f"if (n >= {n}u) return;  // the whole warp: no shuffle waits for it",
        f"const unsigned char* row = in1 + (unsigned long long)n * {row_bytes}ull;",
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)r * {k}ull;",
    ]
    if stageable:
        lines += [
            f"__shared__ uint4 og_stage[{WARPS}][{tile_bytes // 16}];",
            "const bool staged = (reinterpret_cast<unsigned long long>(in1) & 15ull) == 0ull;",
        ]
    lines += [
        "float acc = 0.0f;",
        f"for (unsigned int t = 0; t < {units}u; t += {tile_units}u) {{",
        f"  const unsigned char* tile = row + (t / {sub}u) * {nbytes}u;",
    ]
    if stageable:
        lines += [
            "  if (staged) {",
            f"    const unsigned int chunks = min({tile_bytes}u, {left}) / 16u;",
            "    for (unsigned int c = lane; c < chunks; c += 32u)",
            "      og_stage[warp][c] = og_load_stream(tile + 16u * c);",
            "    __syncwarp();",
            "    tile = reinterpret_cast<const unsigned char*>(og_stage[warp]);",
            "  }",
        ]
    lines += [
        "#pragma unroll",
        f"  for (unsigned int i = 0; i < {per}u; ++i) {{",
        "    const unsigned int u = lane + 32u * i;",
        f"    if (t + u < {units}u) {{",
        "      float w[32];",
        f"      og_dq32_{w.dtype}(tile + (u / {sub}u) * {nbytes}u, u % {sub}u, w);",
        f"      const {STORAGE[xt]}* xs = x + (t + u) * 32u;",
        "#pragma unroll",
        f"      for (int j = 0; j < 32; ++j) acc += {load(xt, 'xs[j]')} * w[j];",
        "    }",
        "  }",
        *(["  if (staged) __syncwarp();  // every lane has read the tile"] if stageable else []),
        "}",
        "acc = og_warp_sum(acc);",
        f"if (lane == 0u) out[(unsigned long long)r * {n}u + n] = {store(out.dtype, 'acc')};",
    ]
    kernel = _kernel("one_row_q", w.dtype, params, "\n".join("  " + x for x in lines))
    return Launch(kernel, (-(-n // WARPS), rows, 1), (32 * WARPS, 1, 1), ("out", "in0", "in1"))


def _rows(x: TensorType) -> int:
    return x.numel // x.shape[-1] if x.shape[-1] else 0


def scratch_bytes(node: Node, types: Sequence[TensorType]) -> int:
    """The dequantized weight (in x's dtype) of a product with more rows than the kernel takes."""
    if node.op != "matmul" or not reads_quantized(node, types):
        return 0
    x, w = types[0], types[1]
    return 0 if _rows(x) <= KERNEL_MAX_ROWS else w.numel * DTYPE_BYTES[x.dtype]


def emit(
    node: Node, types: tuple[TensorType, ...], *, in_place: bool = False
) -> list[Launch | Gemm]:
    """The work of a node that reads a quantized operand (`reads_quantized`)."""
    assert node.type is not None
    if node.op == "dequantize":
        return [dequantize_launch(types[0], node.type.dtype)]
    if node.op == "get_rows":
        return [get_rows_launch(types[0], types[1], node.type)]
    assert node.op == "matmul"
    attrs = attrs_with_defaults(node)
    x, w = types[0], types[1]
    if attrs["transpose_a"] or not attrs["transpose_b"] or w.rank != 2:
        raise NotImplementedError("matmul: a quantized weight is [N, K] with transpose_b")
    if _rows(x) <= KERNEL_MAX_ROWS:
        return [one_row_launch(x, w, node.type)]
    plain = TensorType(x.dtype, w.shape)
    work: list[Launch | Gemm] = [dequantize_launch(w, x.dtype, "in1", SCRATCH)]
    work += emit_roles(node, (x, plain), ("in0", SCRATCH))
    return work
