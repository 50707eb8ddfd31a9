"""Decode attention with every K/V load of a block in flight at once (split-KV, 16-byte loads).

    %o = attention(%q, %k, %v, %len) : f16[1,32,1,128]    (k, v : f16[1,8,1024,128])
    ->  grid (C = 8 key chunks, 8 KV heads x 4 row tiles, 1), 256 threads, 2 passes of 4 slots

Layout. A key row is `LR = D·bytes/16` lanes of one 16-byte vector each (f16 D 128: 16 lanes),
so 256 threads read `KPS = 256 / LR` keys with one load each: a *slot*. A block owns a KV head,
a tile of up to `rb` rows of its group (q heads x queries: K/V read once per group) and a chunk
of the keys, walked in passes of up to `MAX_SLOTS` slots whose 2·U K/V loads are all issued
before any is used: up to 128 bytes in flight a thread, a decode step's cache read in about one
memory latency. Each pass: dot products over the row's lanes (xor shuffles), the pass's maximum
over the block (shuffles, then shared memory in warp order), then every thread rescales its
(l, acc) to the block's running maximum and adds its keys. All threads share that maximum, so
the end sums need no rescaling: over the warp's keys (shuffles), then the warps in order (shared
memory). C > 1 chunks merge in chunk order through a workspace (`chunk_merge`).
Every sum has a fixed order: replays are bit-identical.

Rows a block and chunks: `decode_wide_layout` (examples there).

kv_len: pass 0 reads all its slots (to the cache's end) without waiting for kv_len, its loads
issued alongside kv_len's read; later passes read only keys below the block's last visible key
and stop past it: a cache longer than kv_len costs at most one pass a block of extra reads (the
whole cache when every chunk is one pass, as in the examples). V of keys at or past every row's
limit is zeroed: stale cache rows cannot turn a weight of 0 into NaN. Keys before a window's
start are read too (correct; wasted bandwidth on windowed long caches).

Measured and not kept: the later passes' K/V copied into shared memory before the wait (the
realistic step's attention got shorter, the step slower: the products around it lose to the
larger shared-memory carveout), and the trigger moved after the last pass's loads
(docs/results/2026-11-24-h100-attention-tail-final-status.md).

Not handled (the caller uses `decode`): rows that are no 1-32 lanes of 16 bytes
(f16/bf16 D = 8·2^n ≤ 256, f32 D = 4·2^n ≤ 128), more than `MAX_SQ` queries or `MAX_ROWS` rows
per KV head. Unaligned K/V/q views take scalar loads packed into the same words.
"""

from __future__ import annotations

import hashlib

from optgraph.codegen.cuda_source import (
    STORAGE,
    Kernel,
    Launch,
    body_entry,
    f32_literal,
    in_param,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels.attention.chunk_merge import NEG_INF, ChunkMerge, merge_chunks
from optgraph.codegen.kernels.attention.decode_wide_layout import (
    THREADS,
    VECTOR,
    WARPS,
    WideLayout,
    wide_layout,
)
from optgraph.codegen.kernels.attention.head_rows import (
    AttentionShape,
    operand_args,
    operand_decls,
    query_rows_start,
    unpack,
)

PARTS = (".x", ".y", ".z", ".w")


def _indent(lines: list[str], by: str = "  ") -> list[str]:
    """`lines` indented by `by`, every line of a multi-line entry too."""
    return [by + line for entry in lines for line in entry.split("\n")]


def decode_attention_wide(
    shape: AttentionShape, salt: str, written: tuple[str, str, int, bool] | None = None
) -> Launch:
    """The launch of the kernel for `shape`; `salt` (the node's name) names its workspace when it
    has more than one key chunk. Phases: the block's coordinates (`_coordinates`), the passes
    over the chunk (`_passes`: pass 0's loads, then the rows (`_rows`: q, kv_len, limits), then
    for each pass its loads, scores, block maximum and accumulation), the sums over the block's
    keys (`_share`), then the store, directly or through the workspace (`_store`).

    `written` = (role, dtype, S, early): this step writes only cache rows [pos, pos + S) of K
    and V, pos being the one element of parameter `role` (`early_cache_reads`): pass 0's loads
    then come before the PDL wait, and the slots holding those rows are loaded again after it;
    `early`: pos itself is read before the wait (no kernel of the step writes it)."""
    s, lay = shape, wide_layout(shape)
    lines = [*_coordinates(s, lay), *_passes(s, lay, written), *_share(s, lay)]
    stores, decl = _store(s, lay, salt)
    lines += stores
    decls = [out_param(s.dtype), in_param(s.dtype, 0), in_param(s.dtype, 1), in_param(s.dtype, 2)]
    decls += operand_decls(s)
    args = ("out", "in0", "in1", "in2") + operand_args(s)
    if written is not None:
        role, dtype, _, _ = written
        decls.append(f"const {STORAGE[dtype]}* {role}")
        args += (role,)
    text = "\n".join(_indent(lines))
    family = f"attention_decode_wide|{salt}" if lay.chunks > 1 else "attention_decode_wide"
    self_wait = written is not None
    template = kernel_template(decls, text, None, "", self_wait)
    name = "og_attention_decode_wide_"
    name += hashlib.sha1(f"{family}\n{decl}{template}".encode()).hexdigest()[:12]
    kernel = Kernel.assemble(name, decls, text, (decl,), None, "", self_wait)
    return Launch(kernel, (lay.chunks, s.hkv * lay.rt, s.b), (THREADS, 1, 1), args)


def _coordinates(s: AttentionShape, lay: WideLayout) -> list[str]:
    """The block's KV head, row tile and chunk [k0, kc1); this thread's lane in its key row
    (li) and key of a slot (kid); whether every pointer allows 16-byte loads."""
    ptrs = " | ".join(f"(unsigned long long){r}" for r in ("in0", "in1", "in2"))
    return [
        "const unsigned int c = blockIdx.x, hr = blockIdx.y, bz = blockIdx.z;",
        f"const unsigned int hk = hr / {lay.rt}u, rt = hr % {lay.rt}u;",
        f"const unsigned int li = threadIdx.x % {lay.lr}u, kid = threadIdx.x / {lay.lr}u;",
        "const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;",
        f"const unsigned long long kvoff = (unsigned long long)(bz * {s.hkv}u + hk) * {s.skv * s.d}ull;",
        f"const bool vec_ok = (({ptrs}) & {VECTOR - 1}ull) == 0ull;",
        f"const unsigned int k0 = c * {lay.chunk_keys}u;",
        f"const unsigned int kc1 = og_min(k0 + {lay.chunk_keys}u, {s.skv}u);",
    ]


def _rows(s: AttentionShape, lay: WideLayout) -> list[str]:
    """The visible length L, and for each query row r of the block the slice `qv[r]` this lane
    holds and `lim[r]`, the keys the row sees (`kend` the most of them)."""
    rb, e = lay.rb, lay.e
    lines = [
        f"long long Lx = {s.length_expr()};",
        "if (Lx < 0) Lx = 0;",
        "const unsigned int L = (unsigned int)Lx;",
        *query_rows_start(s, rb, e, kbeg=False),
    ]
    if s.causal:
        lines += [
            f"  if (active) lm = og_min(lm, {s.causal_limit('L', f'gr % {s.sq}u')});",
            "  if (lm < 0) lm = 0;",
        ]
    if s.window:
        lines.append(f"  lo[r] = {s.window_low('L', f'gr % {s.sq}u')};")
    if s.mask is not None:
        offset = s.mask_offset("bz", f"hk * {s.group}u + gr / {s.sq}u", f"gr % {s.sq}u")
        lines.append(f"  moff[r] = active ? {offset} : 0ull;")
    return lines + [
        "  lim[r] = (unsigned int)lm;",
        "  kend = og_max(kend, lim[r]);",
        f"  const unsigned long long qo = (active ? qoff_of(gr) : 0ull) + li * {e}u;",
        "  if (vec_ok) {",
        "    const uint4 qw = *reinterpret_cast<const uint4*>(in0 + qo);",
        *_indent(unpack(s.dtype, "qw", PARTS, "qv[r]"), "    "),
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) if (!active) qv[r][k] = 0.0f;",
        "  } else {",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k)",
        f"      qv[r][k] = active ? {load(s.dtype, 'in0[qo + k]')} : 0.0f;",
        "  }",
        "}",
    ]


def _passes(
    s: AttentionShape, lay: WideLayout, written: tuple[str, str, int, bool] | None = None
) -> list[str]:
    """The running state (m, l, acc per row; m is the block's, shared by all threads) and the
    passes over the chunk's keys. With `written` (see `decode_attention_wide`), the PDL entry
    comes after pass 0's loads, then the reload of the rows written this step."""
    rb, e = lay.rb, lay.e
    before: list[str] = []  # before the PDL entry, after pass 0's loads are declared
    entry: list[str] = []
    if written is not None:
        role, _, rows, early = written
        position = [f"const long long wp = (long long){role}[0];"]
        fresh = f"(long long)j >= wp && (long long)j < wp + {rows}LL && j < kc1"
        before = position if early else []
        entry = [body_entry(), *([] if early else position), "{", "  const unsigned int p = 0u;"]
        entry += [*_indent(_loads(s, lay, "kc1", fresh)), "}"]
    return [
        # pass 0's loads come first: issued before q and kv_len are read, not after them
        f"uint4 kw[{lay.slots}], vw[{lay.slots}];",
        *before,
        "{",
        "  const unsigned int p = 0u;",
        *_indent(_loads(s, lay, "kc1")),
        "}",
        *entry,
        *_rows(s, lay),
        # later passes read only keys some row sees, and stop past the last of them
        "const unsigned int kv1 = og_min(kc1, kend);",
        f"float m[{rb}], l[{rb}], acc[{rb}][{e}];",
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        f"  m[r] = {NEG_INF}; l[r] = 0.0f;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) acc[r][k] = 0.0f;",
        "}",
        f"__shared__ float og_pm[2][{WARPS}][{rb}];",
        f"for (unsigned int p = 0; p < {lay.passes}u; ++p) {{",
        f"  if (p > 0u && k0 + p * {lay.slots * lay.kps}u >= kv1) break;",  # the same in the block
        *_indent(["if (p > 0u) {", *_indent(_loads(s, lay, "kv1")), "}"]),
        *_indent([*_zero_unseen(lay), *_scores(s, lay), *_accumulate(s, lay)]),
        "}",
    ]


def _key(lay: WideLayout) -> str:
    """The key of slot u of pass p for this thread."""
    return f"k0 + (p * {lay.slots}u + (unsigned int)u) * {lay.kps}u + kid"


def _loads(s: AttentionShape, lay: WideLayout, end: str, only: str = "") -> list[str]:
    """kw[u], vw[u] (declared by the caller): the 16 bytes of this lane's slice of the K and V
    rows of its key in slot u of pass p, zeros at or past key `end`; one vector load each where
    the pointers are aligned, else scalar loads packed into the same words. Converted on use.
    `only`: a condition on key j; the slots whose key meets it are loaded again, the others
    keep what they hold."""
    at = f"kvoff + (unsigned long long)j * {s.d}u + li * {lay.e}u"
    zero = "uint4{0u, 0u, 0u, 0u}"
    head = [
        f"#pragma unroll\nfor (int u = 0; u < {lay.slots}; ++u) {{",
        f"  const unsigned int j = {_key(lay)};",
        f"  kw[u] = {zero}; vw[u] = {zero};" if not only else f"  if (!({only})) continue;",
    ]
    vector = [
        f"  if (j < {end}) {{",
        f"    kw[u] = *reinterpret_cast<const uint4*>(in1 + {at});",
        f"    vw[u] = *reinterpret_cast<const uint4*>(in2 + {at});",
        "  }",
        "}",
    ]
    scalar = [f"  if (j < {end}) {{"]
    for i, part in enumerate(PARTS):
        for w, role in (("kw", "in1"), ("vw", "in2")):
            if s.dtype == "f32":
                word = f"__float_as_uint({role}[{at} + {i}u])"
            else:
                lo, hi = f"{role}[{at} + {2 * i}u]", f"{role}[{at} + {2 * i + 1}u]"
                word = f"(unsigned int){lo} | ((unsigned int){hi} << 16)"
            scalar.append(f"    {w}[u]{part} = {word};")
    scalar += ["  }", "}"]
    return [
        "if (vec_ok) {",
        *_indent(head + vector),
        "} else {",
        *_indent(head + scalar),
        "}",
    ]


def _zero_unseen(lay: WideLayout) -> list[str]:
    """V of keys at or past every row's limit zeroed: stale cache rows (even NaN) weigh 0."""
    return [
        f"#pragma unroll\nfor (int u = 0; u < {lay.slots}; ++u)",
        f"  if ({_key(lay)} >= kend) vw[u] = uint4{{0u, 0u, 0u, 0u}};",
    ]


def _scores(s: AttentionShape, lay: WideLayout) -> list[str]:
    """sc[r][u]: the score of slot u's key for row r (-inf where not seen); then the pass's
    maximum of each row over the block into og_pm[p & 1] (double-buffered: one barrier a pass)."""
    rb, u_, e = lay.rb, lay.slots, lay.e
    scaled = f"dot * {f32_literal(s.scale)}"
    seen = s.seen_and("j < kc1 && j < lim[r]", "j", "lo[r]", "moff[r]")
    score = s.score_expr(scaled, "j", "moff[r]")
    return [
        f"float sc[{rb}][{u_}];",
        f"#pragma unroll\nfor (int u = 0; u < {u_}; ++u) {{",
        f"  const unsigned int j = {_key(lay)};",
        f"  float kf[{e}];",
        *_indent(unpack(s.dtype, "kw[u]", PARTS, "kf")),
        f"  #pragma unroll\n  for (int r = 0; r < {rb}; ++r) {{",
        "    float dot = 0.0f;",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) dot += qv[r][k] * kf[k];",
        f"    for (int o = {lay.lr // 2}; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);",
        f"    sc[r][u] = ({seen}) ? {score} : {NEG_INF};",
        "  }",
        "}",
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        "  float t = sc[r][0];",
        f"  #pragma unroll\n  for (int u = 1; u < {u_}; ++u) t = og_max(t, sc[r][u]);",
        f"  for (int o = {lay.lr}; o < 32; o <<= 1) t = og_max(t, __shfl_xor_sync(0xffffffffu, t, o));",
        "  if (lane == 0u) og_pm[p & 1u][warp][r] = t;",
        "}",
        "__syncthreads();",
    ]


def _accumulate(s: AttentionShape, lay: WideLayout) -> list[str]:
    """Each row's new running maximum (the block's: warps in order) and the rescale of (l, acc)
    to it, then this thread's keys added (V converted once a key, for every row)."""
    rb, u_, e = lay.rb, lay.slots, lay.e
    return [
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        "  float mx = m[r];",
        f"  #pragma unroll\n  for (int w = 0; w < {WARPS}; ++w) mx = og_max(mx, og_pm[p & 1u][w][r]);",
        # nothing seen yet (then l and acc are 0 and every score is -inf): no rescale
        f"  const float corr = mx == {NEG_INF} ? 1.0f : expf(m[r] - mx);",
        "  l[r] *= corr;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) acc[r][k] *= corr;",
        "  m[r] = mx;",
        "}",
        f"#pragma unroll\nfor (int u = 0; u < {u_}; ++u) {{",
        f"  float vf[{e}];",
        *_indent(unpack(s.dtype, "vw[u]", PARTS, "vf")),
        f"  #pragma unroll\n  for (int r = 0; r < {rb}; ++r) {{",
        f"    const float pr = sc[r][u] == {NEG_INF} ? 0.0f : expf(sc[r][u] - m[r]);",
        "    l[r] += pr;",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) acc[r][k] += pr * vf[k];",
        "  }",
        "}",
    ]


def _share(s: AttentionShape, lay: WideLayout) -> list[str]:
    """(l, acc) summed over the warp's keys (shuffles), then each warp's into shared memory
    (og_a, og_l) for the sums in warp order; with several chunks og_mf, the rows' maxima."""
    rb, e, d = lay.rb, lay.e, s.d
    lines = [
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        f"  for (int o = {lay.lr}; o < 32; o <<= 1) {{",
        "    l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k)",
        "      acc[r][k] += __shfl_xor_sync(0xffffffffu, acc[r][k], o);",
        "  }",
        "}",
        f"__shared__ float og_l[{WARPS}][{rb}];",
        f"__shared__ float og_a[{WARPS}][{rb}][{d}];",
        f"if (lane < {lay.lr}u) {{",
        f"  #pragma unroll\n  for (int r = 0; r < {rb}; ++r) {{",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) og_a[warp][r][li * {e}u + k] = acc[r][k];",
        "    if (lane == 0u) og_l[warp][r] = l[r];",
        "  }",
        "}",
        "__syncthreads();",
    ]
    if lay.chunks > 1 or s.sinks is not None:  # the rows' maxima: the merge's, the sinks'
        maxima = f"__shared__ float og_mf[{rb}];\nif (threadIdx.x == 0u) {{\n  #pragma unroll\n"
        lines[-1:-1] = [maxima + f"  for (int r = 0; r < {rb}; ++r) og_mf[r] = m[r];\n}}"]
    return lines


def _store(s: AttentionShape, lay: WideLayout, salt: str) -> tuple[list[str], str]:
    """(statements, file-scope declarations): each (row, element) of the block summed over the
    warps in order, then stored; with C > 1 chunks, merged through the workspace instead
    (`chunk_merge`)."""
    rb, d = lay.rb, s.d
    loop = [
        f"for (unsigned int t = threadIdx.x; t < {rb * d}u; t += {THREADS}u) {{",
        f"  const unsigned int r = t / {d}u, dd = t % {d}u;",
    ]
    sum_warps = [
        "  float Ls = 0.0f, A = 0.0f;",
        f"  #pragma unroll\n  for (int w = 0; w < {WARPS}; ++w) {{ Ls += og_l[w][r]; A += og_a[w][r][dd]; }}",
    ]
    head = f"hk * {s.group}u + gr / {s.sq}u"
    quotient = f"Ls > 0.0f ? A / {s.denominator('Ls', 'M', head)} : 0.0f"
    write = [
        f"  const unsigned int gr = rt * {rb}u + r;",
        f"  if (gr < {s.group * s.sq}u) out[qoff_of(gr) + dd] = {store(s.dtype, quotient)};",
    ]
    if lay.chunks == 1:
        maximum = ["  const float M = og_mf[r];"] if s.sinks is not None else []
        return [*loop, *sum_warps, *maximum, *write, "}"], ""
    extras = f"|{s.extras_key()}" if s.has_extras else ""
    key = f"{salt}|attention_wide|{s}|{lay}{extras}"
    merge = ChunkMerge(key, s.b * s.hkv * lay.rt, lay.chunks, rb, d)
    lines, decl = merge_chunks(merge, loop, sum_warps, "og_mf[r]", write)
    return [f"const unsigned int tile = bz * {s.hkv * lay.rt}u + hr;", *lines], decl
