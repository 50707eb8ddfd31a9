"""One-row products that rotate their result (rope) and/or store it into KV-cache rows.

`product_kernel.one_row_kernel` takes a `OneRowFold` from `qkv_folds` (which decides where it is legal):
the q, k and v products of a decode layer then do what rope and kv_cache_write did after them,
in their store loop, so a layer's q/k/v work is one launch.

    q product + rope:         out[i·N + col]         = rope(value, partner value)
    k product + rope + write: cache[row(pos), d]     = rope(value, partner value)
    v product + write:        cache[row(pos), d]     = value

Rope pairs column d of a head with column d ± D/2 (full rotary only). A block sees only its
tile's sums, so a tile must hold both columns of each pair: either whole heads (a tile of
`tile_cols` columns, `tile_cols % D == 0`), or `chunked`: the tile's first column threads take
chunk j of a head's first half and the others chunk j of its second half (`D/2` a multiple of
`tile_cols / 2`), tile t covering head t / chunks. The value of a column is rounded to the
product's dtype before the rotation, as the unfused graph stores it; the angle is computed in
double as `rope` (and the reference) does. Cache rows: the value at (row i, column col) is
element e = i·N + col of the new rows in x's order, written to cache row
(e / D) / S · Smax + pos + (e / D) % S (one-token keys: S = 1); a position outside the cache
writes nothing, as the in-place write does.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.codegen.cuda_source import STORAGE, f64_literal, load, store
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import Node
from optgraph.ir.op_rules_rope import rope_frequencies
from optgraph.ir.ops import attrs_with_defaults


@dataclass(frozen=True)
class OneRowFold:
    """What the product's store does. `rope`: the rope node (None: no rotation) and `seq`, the
    S of its x [B, S, H, D] (the position of product row i is pos[i % S]); `cache`: (Smax, S)
    of the cache the rows go to (None: out[i·N + col] as usual); `pos_dtype` /
    `write_pos_dtype`: the dtypes of the extra parameters (rope's pos, the write's pos);
    `pos_is_input`: rope's pos is a graph input no kernel of the step writes (its rope
    factors may be computed before the PDL wait)."""

    head_dim: int
    rope: Node | None = None
    seq: int = 1
    cache: tuple[int, int] | None = None
    pos_dtype: str = "i32"
    write_pos_dtype: str = "i32"
    pos_is_input: bool = False

    @property
    def half(self) -> int:
        return self.head_dim // 2

    def params(self, first: int) -> list[str]:
        """The extra C parameters, numbered from `first`: rope's pos, then the write's pos."""
        decls = []
        if self.rope is not None:
            decls.append(f"const {STORAGE[self.pos_dtype]}* in{first}")
        if self.cache is not None:
            decls.append(f"const {STORAGE[self.write_pos_dtype]}* in{first + len(decls)}")
        return decls


def is_full_rotary(rope: Node, head_dim: int) -> bool:
    return rope_frequencies(attrs_with_defaults(rope), head_dim).rotary_dim == head_dim


def pairing(fold: OneRowFold, tile_cols: int, ct: int, n: int) -> str | None:
    """How tiles hold rope's column pairs: "" (no rope: any tile), "heads", "chunked", or None
    when this layout cannot (see the module docstring)."""
    d = fold.head_dim
    if n % d or d % 2:
        return None
    if fold.rope is None:
        return ""
    if tile_cols % d == 0:
        return "heads"
    if ct % 2 == 0 and fold.half % (tile_cols // 2) == 0:
        return "chunked"
    return None


def column(mode: str, fold: OneRowFold, tile_cols: int, local: str) -> str:
    """C expression of the global column of the tile's column `local` (`tile` in scope)."""
    if mode != "chunked":
        return f"(tile * {tile_cols}u + {local})"
    half, tc2 = fold.half, tile_cols // 2
    chunks = half // tc2
    head = f"(tile / {chunks}u) * {fold.head_dim}u"
    side = f"({local} >= {tc2}u ? {half}u : 0u)"
    return f"({head} + {side} + (tile % {chunks}u) * {tc2}u + {local} % {tc2}u)"


def partner_local(mode: str, fold: OneRowFold, tile_cols: int) -> str:
    """C expression of the tile column holding the rope partner of tile column `c`."""
    if mode == "chunked":
        tc2 = tile_cols // 2
        return f"(c < {tc2}u ? c + {tc2}u : c - {tc2}u)"
    d, half = fold.head_dim, fold.half
    return f"(c % {d}u < {half}u ? c + {half}u : c - {half}u)"


def partner_global(fold: OneRowFold) -> str:
    d, half = fold.head_dim, fold.half
    return f"(col % {d}u < {half}u ? col + {half}u : col - {half}u)"


def fold_store(
    fold: OneRowFold, dtype: str, out_dtype: str, n: int, first: int, factored: bool = False
) -> list[str]:
    """Statements storing the value of (row i, column col): `val` (and `pval`, the partner's,
    with rope) are the product's float sums; the extra params are in{first}, in{first + 1}.
    `factored`: the rope factors of this thread's (only) item are `og_rc`, `og_rs`, computed
    earlier (`rope_factors`)."""
    rounded = load(dtype, store(dtype, "val")) if dtype != "f32" else "val"
    lines = [f"float og_r = {rounded};"]
    if fold.rope is not None:
        lines += _rope(fold, dtype, f"in{first}", factored)
    value = store(out_dtype, "og_r")
    if fold.cache is None:
        return [*lines, f"out[i * {n}u + col] = {value};"]
    smax, s = fold.cache
    d = fold.head_dim
    wpos = f"in{first + (1 if fold.rope is not None else 0)}"
    return [
        *lines,
        f"const long long og_wp = (long long){wpos}[0];",
        f"if (og_wp >= 0 && og_wp <= {smax - s}LL) {{",
        f"  const unsigned long long og_row = (i * {n}ull + col) / {d}u;",
        (
            f"  out[((og_row / {s}u) * {smax}u + (unsigned long long)og_wp + og_row % {s}u)"
            f" * {d}u + col % {d}u] = {value};"
        ),
        "}",
    ]


def rope_factors(
    fold: OneRowFold, first: int, items: int, cols: int, column: str
) -> tuple[list[str], list[str]]:
    """(the position's load, statements declaring `og_rc`, `og_rs`): the cosine and sine of
    the rope angle of this thread's item of the store loop (t = threadIdx.x < `items`: row
    t / `cols`, column `column`, a C expression of c = t % `cols`), as `_rope` computes them.
    Issued where the product starts (before the PDL wait when pos is an input: the load ahead
    of the first weight batch's, the rest after it), so the double-precision pow, cos and sin
    run while the weights load instead of after the block sums:

        store loop:  og_c = cos(pos · θ^(-2k/D)) ...  ->  start: og_rpos = pos[...]; weights;
                                                                 og_rc = cos(og_rpos · ...)
                                                          store loop: og_c = og_rc
    """
    assert fold.rope is not None
    load_pos = f"const double og_rpos = (double)in{first}[(threadIdx.x / {cols}u) % {fold.seq}u];"
    return [load_pos], [
        "float og_rc = 1.0f, og_rs = 0.0f;",
        f"if (threadIdx.x < {items}u) {{",
        f"  const unsigned int c = threadIdx.x % {cols}u;",
        f"  const unsigned int col = {column};",
        *("  " + line for line in _angle(fold, "og_rpos")),
        "  og_rc = og_c; og_rs = og_s;",
        "}",
    ]


def _angle(fold: OneRowFold, position: str) -> list[str]:
    """`og_c`, `og_s`: the cosine and sine of column `col`'s angle at `position` (a double), in
    double as `rope` (and the reference) computes them."""
    assert fold.rope is not None
    attrs = attrs_with_defaults(fold.rope)
    freq = rope_frequencies(attrs, fold.head_dim)
    half, rotary = fold.half, fold.head_dim
    lines = []
    if attrs["scaling"] == "none":
        theta = f64_literal(float_attr(attrs, "theta"))
        inv_freq = f"pow({theta}, -2.0 * (double)og_k / {rotary}.0)"
    else:
        table = ", ".join(f64_literal(f) for f in freq.inv_freq)
        lines.append(f"const double og_inv_freq[{half}] = {{{table}}};")
        inv_freq = "og_inv_freq[og_k]"
    cos, sin = "cos(angle)", "sin(angle)"
    if freq.attention_factor != 1.0:
        factor = f64_literal(freq.attention_factor)
        cos, sin = f"(cos(angle) * {factor})", f"(sin(angle) * {factor})"
    return [
        *lines,
        f"const unsigned int og_k = col % {half}u;",
        f"const double inv_freq = {inv_freq};",
        f"const double angle = {position} * inv_freq;",
        f"const float og_c = (float){cos}, og_s = (float){sin};",
    ]


def _rope(fold: OneRowFold, dtype: str, pos: str, factored: bool) -> list[str]:
    """`og_r` rotated with its partner `pval` (rounded alike), as `rope` computes it."""
    assert fold.rope is not None
    if factored:
        angle = ["const float og_c = og_rc, og_s = og_rs;"]
    else:
        angle = _angle(fold, f"(double){pos}[i % {fold.seq}u]")
    partner = load(dtype, store(dtype, "pval")) if dtype != "f32" else "pval"
    return [
        *angle,
        f"const float og_p = {partner};",
        (
            f"og_r = col % {fold.head_dim}u < {fold.half}u"
            " ? og_rotate_first(og_r, og_c, og_p, og_s) : og_rotate_second(og_r, og_c, og_p, og_s);"
        ),
    ]
