"""Shared pieces of the attention kernels: reading a head row (D elements) as a warp's lane slices.

A warp reads one key or value row of D elements at a time, each lane a slice, so a row is one
coalesced access. Two slicings:

- *contiguous* (`contiguous_load`): lane l owns elements `l·E .. l·E + E − 1`, E = ⌈D/32⌉. When
  D = 32·E and E elements are 4, 8 or 16 bytes, the slice is one vector load (uint, uint2, uint4)
  if the base pointers are aligned to that size (checked at run time: views may start anywhere),
  else E scalar loads.
- *strided* (the tiled kernel's shared-memory tiles): lane l owns `l + 32·e`, which is free of
  shared-memory bank conflicts for any E.

Also the attention attributes every kernel needs (`AttentionShape`), with the C expressions of
the optional parts (per-batch-row kv_len, top-left causal alignment, window, softcap, mask,
sinks) that the kernels share. A node that uses none of them gets the kernels' text unchanged.

Sinks join once, where a row's merged state (max M, sum L, accumulator A) is divided out:
out = A / (L + exp(sink - M)) (`denominator`), which equals the softmax with the sink's key
counted in the running max and sum; never per key chunk or warp, whose partial sums are merged
first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optgraph.codegen.cuda_source import STORAGE, f32_literal, in_param, load
from optgraph.ir.attrs import float_attr, int_attr
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_rules_attention import attention_operands
from optgraph.ir.ops import attrs_with_defaults

ELEMENT_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
VECTOR_TYPES = {4: ("unsigned int", ("",)), 8: ("uint2", (".x", ".y"))}
VECTOR_TYPES[16] = ("uint4", (".x", ".y", ".z", ".w"))


@dataclass(frozen=True)
class MaskOperand:
    """The mask operand: its kernel parameter, dtype and element strides for (b, h, i, j), 0
    along the axes it broadcasts over."""

    arg: str
    dtype: str
    strides: tuple[int, int, int, int]


@dataclass(frozen=True)
class SinksOperand:
    """The sinks operand (a logit per query head): its kernel parameter and dtype."""

    arg: str
    dtype: str


@dataclass(frozen=True)
class AttentionShape:
    """Sizes and attributes of one attention node (q [B,Hq,Sq,D], k/v [B,Hkv,Skv,D]).

    The fields after `len_dtype` stay out of the repr, which names the decode kernel's workspace:
    a node without them keeps its kernels' text."""

    dtype: str
    b: int
    hq: int
    sq: int
    d: int
    hkv: int
    skv: int
    scale: float
    causal: bool
    has_len: bool
    len_dtype: str
    len_per_batch: bool = field(default=False, repr=False)
    top_left: bool = field(default=False, repr=False)
    window: int = field(default=0, repr=False)
    softcap: float = field(default=0.0, repr=False)
    mask: MaskOperand | None = field(default=None, repr=False)
    sinks: SinksOperand | None = field(default=None, repr=False)

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    @property
    def per_lane(self) -> int:
        return -(-self.d // 32)

    @property
    def has_extras(self) -> bool:
        """Whether the node uses any part beyond causal, kv_len[1] and scale."""
        return self.extras_key() != ""

    def extras_key(self) -> str:
        """The optional parts as text ("" for none): kernels with them differ in their name."""
        parts = []
        if self.len_per_batch:
            parts.append("len_per_batch")
        if self.top_left:
            parts.append("top_left")
        if self.window:
            parts.append(f"window={self.window}")
        if self.softcap:
            parts.append(f"softcap={self.softcap!r}")
        if self.mask is not None:
            parts.append(f"mask={self.mask}")
        if self.sinks is not None:
            parts.append(f"sinks={self.sinks}")
        return ",".join(parts)

    def length_expr(self) -> str:
        """C expression (long long) of the visible cache length L before clamping to [0, Skv]."""
        if self.has_len:
            at = "bz" if self.len_per_batch else "0"
            return f"og_min((long long)in3[{at}], {self.skv}LL)"
        return f"{self.skv}LL"

    def position_expr(self, length: str, row: str) -> str:
        """C expression (long long) of query `row`'s position: L - Sq + i or i."""
        if self.top_left:
            return f"(long long)({row})"
        return f"((long long)({length}) - {self.sq}LL + (long long)({row}))"

    def causal_limit(self, length: str, row: str) -> str:
        """C expression (long long) of the keys a causal row sees, before clamping to >= 0."""
        return f"og_min((long long)({length}), {self.position_expr(length, row)} + 1LL)"

    def window_low(self, length: str, row: str) -> str:
        """C expression (long long) of the row's first key inside the window (may be < 0)."""
        return f"({self.position_expr(length, row)} - {self.window - 1}LL)"

    def mask_offset(self, b: str, h: str, i: str) -> str:
        """C expression (unsigned long long) of the mask element of (b, h, i, key 0)."""
        assert self.mask is not None
        terms = [
            f"(unsigned long long)({var}) * {stride}ull"
            for var, stride in zip((b, h, i), self.mask.strides[:3])
            if stride
        ]
        return " + ".join(terms) if terms else "0ull"

    def mask_decl(self) -> list[str]:
        """The mask's kernel parameter (none without a mask)."""
        if self.mask is None:
            return []
        index = int(self.mask.arg.removeprefix("in"))
        return [in_param(self.mask.dtype, index)]

    def sinks_decl(self) -> list[str]:
        """The sinks' kernel parameter (none without sinks)."""
        if self.sinks is None:
            return []
        return [in_param(self.sinks.dtype, int(self.sinks.arg.removeprefix("in")))]

    def denominator(self, total: str, maximum: str, head: str) -> str:
        """C expression of a row's softmax denominator: `total` (the sum of exp(score -
        `maximum`) over its keys) plus, with sinks, exp(sink[`head`] - `maximum`)."""
        if self.sinks is None:
            return total
        sink = load(self.sinks.dtype, f"{self.sinks.arg}[{head}]")
        return f"({total} + expf({sink} - ({maximum})))"

    def mask_is_bool(self) -> bool:
        return self.mask is not None and self.mask.dtype == "bool"

    def seen_expr(self, key: str, low: str, moff: str) -> str:
        """C condition beyond the row's upper limit: inside the window, allowed by a bool mask
        ("" when neither applies; `seen_and` joins it to another condition)."""
        conds = []
        if self.window:
            conds.append(f"(long long)({key}) >= {low}")
        if self.mask is not None and self.mask.dtype == "bool":
            at = f"{moff} + (unsigned long long)({key}) * {self.mask.strides[3]}ull"
            conds.append(f"{self.mask.arg}[{at}] != 0")
        return " && ".join(conds)

    def seen_and(self, limit: str, key: str, low: str, moff: str) -> str:
        """`limit && seen_expr(...)`, or `limit` alone."""
        seen = self.seen_expr(key, low, moff)
        return f"{limit} && {seen}" if seen else limit

    def score_expr(self, scaled: str, key: str, moff: str) -> str:
        """C expression of a seen key's score from `scaled` = (q·k)·scale: the softcap, then a
        float mask added."""
        out = scaled
        if self.softcap:
            cap = f32_literal(self.softcap)
            out = f"({cap} * tanhf(({scaled}) / {cap}))"
        if self.mask is not None and self.mask.dtype != "bool":
            at = f"{moff} + (unsigned long long)({key}) * {self.mask.strides[3]}ull"
            out = f"({out} + {load(self.mask.dtype, f'{self.mask.arg}[{at}]')})"
        return out


def _mask_operand(arg: str, mask: TensorType) -> MaskOperand:
    dims = (1,) * (4 - mask.rank) + mask.shape
    strides, step = [0, 0, 0, 0], 1
    for axis in range(3, -1, -1):
        strides[axis] = step if dims[axis] != 1 else 0
        step *= dims[axis]
    return MaskOperand(arg, mask.dtype, (strides[0], strides[1], strides[2], strides[3]))


def attention_shape(node: Node, types: tuple[TensorType, ...]) -> AttentionShape:
    q, k = types[0], types[1]
    b, hq, sq, d = q.shape
    attrs = attrs_with_defaults(node)
    scale_attr = attrs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale_attr is None else float_attr(attrs, "scale")
    roles = attention_operands(len(types), bool(attrs["masked"]), bool(attrs["sinks"]))
    has_len = roles.kv_len is not None
    mask = None
    if roles.mask is not None:
        mask = _mask_operand(f"in{roles.mask}", types[roles.mask])
    sinks = None
    if roles.sinks is not None:
        sinks = SinksOperand(f"in{roles.sinks}", types[roles.sinks].dtype)
    causal = bool(attrs["causal"])
    return AttentionShape(
        dtype=q.dtype,
        b=b,
        hq=hq,
        sq=sq,
        d=d,
        hkv=k.shape[1],
        skv=k.shape[2],
        scale=scale,
        causal=causal,
        has_len=has_len,
        len_dtype=types[3].dtype if has_len else "i32",
        len_per_batch=has_len and b > 1 and types[3].shape == (b,),
        top_left=causal and attrs["causal_align"] == "top_left",
        window=int_attr(attrs, "window"),
        softcap=float_attr(attrs, "softcap"),
        mask=mask,
        sinks=sinks,
    )


def operand_decls(shape: AttentionShape) -> list[str]:
    """Kernel parameters after out, q, k, v: kv_len, the sinks, then the mask, where present."""
    decls = [f"const {STORAGE[shape.len_dtype]}* in3"] if shape.has_len else []
    return decls + shape.sinks_decl() + shape.mask_decl()


def operand_args(shape: AttentionShape) -> tuple[str, ...]:
    """Launch arguments after out, q, k, v, matching `operand_decls`."""
    args: tuple[str, ...] = ("in3",) if shape.has_len else ()
    args += (shape.sinks.arg,) if shape.sinks is not None else ()
    return args + ((shape.mask.arg,) if shape.mask is not None else ())


def vector_bytes(shape: AttentionShape) -> int:
    """Bytes of one lane's contiguous slice when it can be one vector load, else 0."""
    e = shape.per_lane
    size = ELEMENT_BYTES.get(shape.dtype, 0)
    if shape.d != 32 * e or e * size not in VECTOR_TYPES:
        return 0
    return e * size


def unpack(dtype: str, var: str, parts: tuple[str, ...], out: str) -> list[str]:
    """Statements turning the vector `var` (32-bit words `parts`) into floats out[0..)."""
    if dtype == "f32":
        return [f"{out}[{i}] = __uint_as_float({var}{p});" for i, p in enumerate(parts)]
    conv = "og_f16_to_f32" if dtype == "f16" else "og_bf16_to_f32"
    lines = []
    for i, p in enumerate(parts):
        lines.append(
            f"{out}[{2 * i}] = {conv}((unsigned short)({var}{p} & 0xffffu)); "
            f"{out}[{2 * i + 1}] = {conv}((unsigned short)({var}{p} >> 16));"
        )
    return lines


def contiguous_rows(shape: AttentionShape, count: int, row: str, body: list[str]) -> list[str]:
    """Load `count` K and V rows (`row` an expression of u: the row index) into kf[u][0..E) and
    vf[u][0..E) (lane l: elements l·E + e, 0 past D), then run `body`.

    With a vector load possible, two copies of the loop body: `vec_ok` (pointers aligned) issues
    every raw vector load before converting any, so all of them are in flight at once (a branch
    per load would make each wait for the previous one's data); otherwise scalar loads.
    """
    e, dt, d = shape.per_lane, shape.dtype, shape.d
    at = f"kvoff + (unsigned long long)({row}) * {d}u"
    decl = [f"float kf[{count}][{e}], vf[{count}][{e}];"]
    scalar = decl + [
        f"#pragma unroll\nfor (int u = 0; u < {count}; ++u) {{",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) {{",
        f"    const unsigned int t = (unsigned int)lane * {e}u + k;",
        f"    kf[u][k] = t < {d}u ? {load(dt, f'in1[{at} + t]')} : 0.0f;",
        f"    vf[u][k] = t < {d}u ? {load(dt, f'in2[{at} + t]')} : 0.0f;",
        "  }",
        "}",
        *body,
    ]
    vb = vector_bytes(shape)
    if not vb:
        return scalar
    vt, parts = VECTOR_TYPES[vb]
    lane_at = f"{at} + (unsigned int)lane * {e}u"
    vector = [
        f"{vt} kw[{count}], vw[{count}];",
        f"#pragma unroll\nfor (int u = 0; u < {count}; ++u) {{",
        f"  kw[u] = *reinterpret_cast<const {vt}*>(in1 + {lane_at});",
        f"  vw[u] = *reinterpret_cast<const {vt}*>(in2 + {lane_at});",
        "}",
        *decl,
        f"#pragma unroll\nfor (int u = 0; u < {count}; ++u) {{",
        *("  " + x for x in unpack(dt, "kw[u]", parts, "kf[u]")),
        *("  " + x for x in unpack(dt, "vw[u]", parts, "vf[u]")),
        "}",
        *body,
    ]
    return [
        "if (vec_ok) {",
        *("  " + x for x in vector),
        "} else {",
        *("  " + x for x in scalar),
        "}",
    ]


def vector_check(shape: AttentionShape, roles: tuple[str, ...]) -> list[str]:
    """`vec_ok`: every pointer of `roles` aligned for the slice's vector load."""
    vb = vector_bytes(shape)
    if not vb:
        return []
    ptrs = " | ".join(f"(unsigned long long){r}" for r in roles)
    return [f"const bool vec_ok = (({ptrs}) & {vb - 1}ull) == 0ull;"]


def warp_sum(var: str) -> str:
    return f"for (int o = 16; o > 0; o >>= 1) {var} += __shfl_xor_sync(0xffffffffu, {var}, o);"


def warp_max(var: str) -> str:
    return (
        "for (int o = 16; o > 0; o >>= 1) "
        f"{var} = og_max({var}, __shfl_xor_sync(0xffffffffu, {var}, o));"
    )


def query_rows_start(shape: AttentionShape, rb: int, e: int, *, kbeg: bool) -> list[str]:
    """The decode kernels' per-block row state, up to the head of the loop over the block's `rb`
    query rows: `qoff_of(gr)` (the offset of row gr: q head `hk * group + gr / Sq`, query `gr %
    Sq`), q values (`e` per thread), key limits, window starts and mask offsets; `kbeg` adds the
    first key any row sees (the earlier kernel walks from it)."""
    s = shape
    return [
        "auto qoff_of = [&](unsigned int gr) -> unsigned long long {",
        f"  const unsigned int h = hk * {s.group}u + gr / {s.sq}u, i = gr % {s.sq}u;",
        f"  return ((unsigned long long)(bz * {s.hq}u + h) * {s.sq}u + i) * {s.d}u;",
        "};",
        f"float qv[{rb}][{e}];",
        f"unsigned int lim[{rb}];",
        *([f"long long lo[{rb}];"] if s.window else []),
        *([f"unsigned long long moff[{rb}];"] if s.mask is not None else []),
        "unsigned int kend = 0u;",
        *(["unsigned int kbeg = 0xffffffffu;"] if kbeg and s.window else []),
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        f"  const unsigned int gr = rt * {rb}u + r;",
        f"  const bool active = gr < {s.group * s.sq}u;",
        "  long long lm = active ? (long long)L : 0LL;",
    ]
