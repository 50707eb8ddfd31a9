"""rope: NeoX rotate-half on `x [B,S,H,D]`, `pos [S]`, with scaling and partial rotary.

A thread per rotating pair (i, i + rotary_dim/2) of `HEADS_PER_THREAD` heads of one position
(the largest divisor of H up to it: the angle depends on the position and i only, so its cosine
and sine are computed once for those heads) and, when `rotary_dim < D`, per pass-through element
of those heads (copied). The angle `pos · inv_freq[i]` and its cosine and sine are computed in double,
then the rotation in float32, exactly as the reference interpreter does. Unscaled rope computes
`inv_freq = theta^(-2i/D)` with `pow`; a scaled one reads the table `op_rules_rope` computes (the
same float64 values the reference uses) from a constant array in the kernel, and multiplies the
cosine and sine by the attention factor when it is not 1 (yarn).

    %q2 = rope(%q, %pos) {rotary_dim = 32} : f16[1,1,32,128]
    ->  og_rope_<hash>: 1·1·8·(16 + 96) threads (4 heads each): 16 pairs and 96 copied entries
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import (
    STORAGE,
    Launch,
    f64_literal,
    grid_1d,
    in_param,
    index_type,
    load,
    make_kernel,
    out_param,
    store,
)
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_rules_rope import rope_frequencies
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"rope"})
# Heads one thread rotates with one cosine and sine (1: a thread per pair of every head).
HEADS_PER_THREAD = 4


def heads_per_thread(heads: int) -> int:
    """The largest divisor of `heads` that is at most `HEADS_PER_THREAD`."""
    return max(g for g in range(1, max(1, HEADS_PER_THREAD) + 1) if heads % g == 0)


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    return [rope_launch(node, types)]


def rope_launch(node: Node, types: tuple[TensorType, ...]) -> Launch:
    x, pos = types
    lines = rope_lines(node, types, "out", "")
    decls = [out_param(x.dtype), in_param(x.dtype, 0), f"const {STORAGE[pos.dtype]}* in1"]
    kernel = make_kernel("rope", decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(rope_threads(node, types))
    return Launch(kernel, grid, block, ("out", "in0", "in1"))


def rope_threads(node: Node, types: tuple[TensorType, ...]) -> int:
    """Threads of the grid-stride loop: one per rotating pair or pass-through entry of a group
    of `heads_per_thread(H)` heads."""
    b, s, h, d = types[0].shape
    freq = rope_frequencies(attrs_with_defaults(node), d)
    return b * s * (h // heads_per_thread(h)) * (freq.rotary_dim // 2 + d - freq.rotary_dim)


def rope_lines(node: Node, types: tuple[TensorType, ...], out: str, row_map: str) -> list[str]:
    """The grid-stride loop of `node`'s rope: element `e` of row `row` (rows of D entries, in
    x's order) is stored to `out[dest + e]`, where `dest` is `row * D` or, given `row_map` (a C
    expression of `row`), `row_map * D` (a cache write places each row at its cache row)."""
    x = types[0]
    _, s, h, d = x.shape
    attrs = attrs_with_defaults(node)
    freq = rope_frequencies(attrs, d)
    half, rotary = freq.rotary_dim // 2, freq.rotary_dim
    per_row = half + d - rotary  # pairs, then the pass-through entries
    n = rope_threads(node, types)
    g = heads_per_thread(h)
    idx = index_type(x.numel)
    lines = []
    if attrs["scaling"] == "none":
        theta = f64_literal(float_attr(attrs, "theta"))
        inv_freq = f"pow({theta}, -2.0 * (double)i / {rotary}.0)"
    else:
        table = ", ".join(f64_literal(f) for f in freq.inv_freq)
        lines.append(f"const double og_inv_freq[{half}] = {{{table}}};")
        inv_freq = "og_inv_freq[i]"
    lines.append(
        f"for ({idx} t = ({idx})blockIdx.x * blockDim.x + threadIdx.x; t < {n}u;"
        f" t += ({idx})gridDim.x * blockDim.x) {{"
    )
    lines.append(
        f"  const {idx} i = t % {per_row}u, group = t / {per_row}u, bs = group / {h // g}u;"
    )
    lines.append(f"  const {idx} first = bs * {h}u + (group % {h // g}u) * {g}u, si = bs % {s}u;")
    dest = "dest" if row_map else "base"
    if per_row != half:
        target = f"({row_map}) * {d}u + i + {half}u" if row_map else "k"
        lines.append(
            f"  if (i >= {half}u) {{ for ({idx} row = first; row < first + {g}u; ++row) {{"
            f" const {idx} k = row * {d}u + i + {half}u; {out}[{target}] = in0[k]; }} continue; }}"
        )
    cos, sin = "cos(angle)", "sin(angle)"
    if freq.attention_factor != 1.0:
        factor = f64_literal(freq.attention_factor)
        cos, sin = f"(cos(angle) * {factor})", f"(sin(angle) * {factor})"
    lines += [
        f"  const double inv_freq = {inv_freq};",
        "  const double angle = (double)in1[si] * inv_freq;",
        f"  const float c = (float){cos}, sn = (float){sin};",
        f"  #pragma unroll\n  for (unsigned int og_h = 0; og_h < {g}u; ++og_h) {{",
        f"    const {idx} row = first + og_h, base = row * {d}u;",
        *([f"    const {idx} dest = ({row_map}) * {d}u;"] if row_map else []),
        f"    const float x1 = {load(x.dtype, 'in0[base + i]')};",
        f"    const float x2 = {load(x.dtype, f'in0[base + i + {half}u]')};",
        f"    {out}[{dest} + i] = {store(x.dtype, 'og_rotate_first(x1, c, x2, sn)')};",
        f"    {out}[{dest} + i + {half}u] = {store(x.dtype, 'og_rotate_second(x2, c, x1, sn)')};",
        "  }",
        "}",
    ]
    return lines
