"""Llama-family decoders as IR text: the one structure `examples/gen_llama.py` and the GGUF
importer (`gguf.py`) both build.

    tokens -> get_rows(embed) -> N x [ rms_norm -> q/k/v matmuls (+ bias) -> (q/k rms_norm) ->
    rope -> (kv_cache_write) -> GQA attention -> wo matmul -> residual -> rms_norm -> SwiGLU MLP
    -> residual ] -> rms_norm -> logits

Hidden states are kept 2-D, `[B*S, hidden]`, so every projection is a plain GEMM; attention sees
`[B,H,S,D]` through reshape + transpose views, and rope sees `[B,S,H,D]`.

What the model is (`llama_config.LlamaConfig`: sizes, eps, rope attributes, biases, tied
embeddings, Qwen3's per-head q/k norms, a sparse mixture of experts in place of the MLP; that
module also checks them and lists the weights) is separate from how one
step runs (`LlamaStep`: dtype, batch, seq, cache_len, decode or prefill) and from what the
weights are called and how they are stored (`LlamaWeights`: a name per role and layer; matrices
`[in, out]` read as they are, or `[out, in]` as PyTorch and GGUF store them, read with
`transpose_b = true`; each weight's stored dtype).
A weight stored in another float dtype than the step's is `cast` where it is read; a quantized
matrix (any dtype that is not a float) is read by `matmul {transpose_b}` and `get_rows` directly.
With `experts` the MLP is a router product and one `moe` node over the expert stacks
(`w_gate_exps`, `w_up_exps` `[E,F,H]`, `w_down_exps` `[E,H,F]`, as GGUF stores them), which reads
every stack as stored, float or quantized (a cast would convert all E experts).

Modes:

- `decode`: `seq` new tokens per sequence are appended to per-layer KV caches
  (`l{i}.k_cache`/`l{i}.v_cache` inputs `[B,kv_heads,cache_len,head_dim]`) with `kv_cache_write`
  at `pos`, then attention runs over the cache limited by `kv_len` (causal when `seq > 1`).
  Inputs: `tokens i32[B*S]`, `pos i32[S]`, `kv_len i32[1]`, the caches. Outputs: logits
  `[B*S, vocab]`, then every layer's updated k and v cache.
  With `per_row` each sequence has its own positions: `pos i32[B*S]` (row b's tokens at
  `pos[b*S:(b+1)*S]`, consecutive), `kv_len i32[B]` (attention's per-row form), so rows of
  different lengths, each left-aligned in its cache, step together. rope then sees the tokens
  as one sequence `[1,B*S,H,D]` (a view) with their own positions, and each row's keys and
  values are written at its own `pos[b*S]` by a `kv_cache_write` into its slice of the cache,
  the rows joined by a `concat` (kv_cache_write's `pos` is one start for every row, so the
  update is a copy of the caches here, not in place).
- `prefill`: causal attention over the sequence itself, no cache. Inputs: `tokens`, `pos`.
  Output: logits.

Lines are built in a list and joined once, so a 100k-node graph takes well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optgraph.frontends.llama_config import (
    MATRIX_ROLES,
    STACK_ROLES,
    LlamaConfig,
    LlamaStep,
    LlamaWeights,
    check_llama,
    weight_shapes,
)
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue
from optgraph.ir.printer import format_literal


def _shape(*dims: int) -> str:
    """A type's shape, `[1,2,16]`."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _ints(*values: int) -> str:
    """An integer-list attribute, `[1, 2, 16]`."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def _attrs(attrs: Mapping[str, AttrValue]) -> str:
    """`{a = 1, b = 2.0}`, sorted by key as the printer prints them."""
    return "{" + ", ".join(f"{k} = {format_literal(attrs[k])}" for k in sorted(attrs)) + "}"


def llama_ir(
    config: LlamaConfig,
    step: LlamaStep,
    weights: LlamaWeights | None = None,
    comments: Sequence[str] = (),
) -> str:
    """The IR text of `config` run as `step`, weights named and stored as `weights` (default:
    gen_llama's short names, `[in, out]` matrices in the step's dtype). `comments` follow the
    two header lines that describe the model. Raises ValueError for sizes that make no model."""
    check_llama(config, step)
    return _Builder(config, step, weights or LlamaWeights()).text(comments)


class _Builder:
    """The lines of one graph; `out` appends one."""

    def __init__(self, config: LlamaConfig, step: LlamaStep, weights: LlamaWeights) -> None:
        self.c, self.s, self.w = config, step, weights
        self.lines: list[str] = []
        self.shapes = weight_shapes(config, weights.out_in)

    def out(self, line: str) -> None:
        self.lines.append(line)

    def ty(self, *dims: int) -> str:
        return self.s.dtype + _shape(*dims)

    def stored(self, name: str) -> str:
        return self.w.dtypes.get(name, self.s.dtype)

    def read(self, role: str, layer: int | None = None) -> str:
        """The value that holds weight `role` in the step's dtype: the weight itself, a quantized
        matrix as stored (its readers dequantize), or a `cast` of a float weight stored in
        another dtype, made here, just before its one reader."""
        name = self.w.name(role, layer)
        stored = self.stored(name)
        if stored == self.s.dtype or (stored not in FLOAT_DTYPES and role in MATRIX_ROLES):
            return f"%{name}"
        if role in STACK_ROLES:  # moe reads every stack as stored
            return f"%{name}"
        dims = self.shapes[role, layer]
        self.out(
            f'  %{name}.{self.s.dtype} = cast(%{name}) {{dtype = "{self.s.dtype}"}} : '
            f"{self.ty(*dims)}"
        )
        return f"%{name}.{self.s.dtype}"

    def project(self, result: str, source: str, role: str, proj: str, layer: int, ty: str) -> None:
        """`result = source @ weight` (transposed when stored `[out, in]`), then `+ bias` when
        the projection `proj` has one."""
        weight = self.read(role, layer)
        flags = " {transpose_b = true}" if self.w.out_in else ""
        if proj in self.c.bias:
            bias = self.read(f"b_{proj}", layer)
            self.out(f"  {result}_matmul = matmul({source}, {weight}){flags} : {ty}")
            self.out(f"  {result} = add({result}_matmul, {bias}) : {ty}")
        else:
            self.out(f"  {result} = matmul({source}, {weight}){flags} : {ty}")

    def header(self, comments: Sequence[str]) -> None:
        c, s = self.c, self.s
        decode = s.mode == "decode"
        rope = dict(c.rope)
        theta = float(rope.pop("theta", 10000.0))  # type: ignore[arg-type]
        scaling = "".join(f", {k} {format_literal(rope[k])}" for k in sorted(rope))
        norms = ", q/k norms" if c.qk_norm else ""
        self.out(
            f"# Llama-style {s.mode}: {c.layers} layers, hidden {c.hidden}, {c.heads} query heads, "
            f"{c.kv_heads} KV heads, head_dim {c.head_width}, ffn {c.ffn}, vocab {c.vocab}, "
            f"{s.dtype}, batch {s.batch}, seq {s.seq}"
            + (f", cache {s.cache_len}" if decode else "")
            + (", positions per row" if s.per_row else "")
        )
        self.out(
            f"# eps {float(c.eps)!r}, rope theta {theta!r}{scaling}, bias on "
            f"{', '.join(c.bias) or 'none'}{norms}, "
            f"{'tied' if c.tied_embeddings else 'separate'} embeddings and logits head"
        )
        self.lines.extend(comments)

    def declarations(self) -> None:
        c, s = self.c, self.s
        t = s.batch * s.seq
        self.out(f"graph llama_{s.mode} {{")
        self.out(f"  input %tokens : i32[{t}]")
        self.out(f"  input %pos : i32[{t if s.per_row else s.seq}]")
        if s.mode == "decode":
            cache_ty = self.ty(s.batch, c.kv_heads, s.cache_len, c.head_width)
            self.out(f"  input %kv_len : i32[{s.batch if s.per_row else 1}]")
            for i in range(c.layers):
                self.out(f"  input %l{i}.k_cache : {cache_ty}")
                self.out(f"  input %l{i}.v_cache : {cache_ty}")
        for (role, layer), dims in self.shapes.items():
            name = self.w.name(role, layer)
            self.out(f"  weight %{name} : {self.stored(name)}{_shape(*dims)}")

    def embedding(self, h_ty: str) -> None:
        """`%h0`: the tokens' rows of the table, in the step's dtype."""
        name = self.w.name("embed", None)
        stored = self.stored(name)
        rows = stored if stored in FLOAT_DTYPES else "f32"  # a quantized table gives f32 rows
        if rows == self.s.dtype:
            self.out(f"  %h0 = get_rows(%{name}, %tokens) : {h_ty}")
            return
        t = self.s.batch * self.s.seq
        self.out(f"  %h0_rows = get_rows(%{name}, %tokens) : {rows}{_shape(t, self.c.hidden)}")
        self.out(f'  %h0 = cast(%h0_rows) {{dtype = "{self.s.dtype}"}} : {h_ty}')

    def layer(self, i: int, x: str, write_pos: str, causal: str) -> str:
        c, s = self.c, self.s
        b, sq, hd = s.batch, s.seq, c.head_width
        t, q_dim, kv_dim = b * sq, c.heads * hd, c.kv_heads * hd
        h_ty = self.ty(t, c.hidden)
        q_bshd, kv_bshd = self.ty(b, sq, c.heads, hd), self.ty(b, sq, c.kv_heads, hd)
        q_bhsd, kv_bhsd = self.ty(b, c.heads, sq, hd), self.ty(b, c.kv_heads, sq, hd)
        eps_attr = f"{{eps = {float(c.eps)!r}}}"  # repr: the printer's spelling
        rope_attr = _attrs(c.layer_rope(i))
        window = c.layer_window(i)
        extra = ""  # after `causal`, sorted as the printer prints them
        if c.attn_scale is not None:
            extra += f", scale = {format_literal(float(c.attn_scale))}"
        extra += ", sinks = true" if c.sinks else ""
        extra += f", softcap = {format_literal(float(c.attn_softcap))}" if c.attn_softcap else ""
        extra += f", window = {window}" if window else ""
        out, p = self.out, f"%l{i}."
        out(f"  # layer {i}: attention")
        out(f"  {p}attn_in = rms_norm({x}, {self.read('attn_norm', i)}) {eps_attr} : {h_ty}")
        if c.fused_qkv:
            self.project(f"{p}qkv", f"{p}attn_in", "wqkv", "qkv", i, self.ty(t, q_dim + 2 * kv_dim))
            bounds = (("q", 0, q_dim), ("k", q_dim, q_dim + kv_dim))
            for name, start, end in (*bounds, ("v", q_dim + kv_dim, q_dim + 2 * kv_dim)):
                out(
                    f"  {p}{name} = slice({p}qkv) {{axis = 1, end = {end}, start = {start}}} : "
                    f"{self.ty(t, end - start)}"
                )
        else:
            self.project(f"{p}q", f"{p}attn_in", "wq", "q", i, self.ty(t, q_dim))
            self.project(f"{p}k", f"{p}attn_in", "wk", "k", i, self.ty(t, kv_dim))
            self.project(f"{p}v", f"{p}attn_in", "wv", "v", i, self.ty(t, kv_dim))
        out(f"  {p}q4 = reshape({p}q) {{shape = {_ints(b, sq, c.heads, hd)}}} : {q_bshd}")
        out(f"  {p}k4 = reshape({p}k) {{shape = {_ints(b, sq, c.kv_heads, hd)}}} : {kv_bshd}")
        out(f"  {p}v4 = reshape({p}v) {{shape = {_ints(b, sq, c.kv_heads, hd)}}} : {kv_bshd}")
        q4, k4 = f"{p}q4", f"{p}k4"
        if c.qk_norm:
            out(f"  {p}q_normed = rms_norm({q4}, {self.read('q_norm', i)}) {eps_attr} : {q_bshd}")
            out(f"  {p}k_normed = rms_norm({k4}, {self.read('k_norm', i)}) {eps_attr} : {kv_bshd}")
            q4, k4 = f"{p}q_normed", f"{p}k_normed"
        if s.per_row:
            self.rope_rows(f"{p}q", q4, rope_attr, c.heads)
            self.rope_rows(f"{p}k", k4, rope_attr, c.kv_heads)
        else:
            out(f"  {p}q_rot = rope({q4}, %pos) {rope_attr} : {q_bshd}")
            out(f"  {p}k_rot = rope({k4}, %pos) {rope_attr} : {kv_bshd}")
        out(f"  {p}q_t = transpose({p}q_rot) {{perm = [0, 2, 1, 3]}} : {q_bhsd}")
        out(f"  {p}k_t = transpose({p}k_rot) {{perm = [0, 2, 1, 3]}} : {kv_bhsd}")
        out(f"  {p}v_t = transpose({p}v4) {{perm = [0, 2, 1, 3]}} : {kv_bhsd}")
        sinks = f", {self.read('sinks', i)}" if c.sinks else ""  # gpt-oss: a logit a head
        if s.mode == "decode":
            cache_ty = self.ty(b, c.kv_heads, s.cache_len, hd)
            for kv in ("k", "v"):
                if s.per_row:
                    self.write_rows(i, kv)
                else:
                    out(
                        f"  {p}{kv}_cache_new = kv_cache_write({p}{kv}_cache, {p}{kv}_t, "
                        f"{write_pos}) : {cache_ty}"
                    )
            # One query per sequence sees every cached key (causal then restricts nothing), but a
            # window needs `causal`.
            attrs = ""
            if s.seq > 1 or window:
                attrs = " {causal = true" + extra + "}"
            elif extra:
                attrs = " {" + extra[2:] + "}"
            out(
                f"  {p}attn = attention({p}q_t, {p}k_cache_new, {p}v_cache_new, %kv_len{sinks})"
                f"{attrs} : {q_bhsd}"
            )
        else:
            attrs = "{causal = true" + extra + "}"
            out(f"  {p}attn = attention({p}q_t, {p}k_t, {p}v_t{sinks}) {attrs} : {q_bhsd}")
        out(f"  {p}attn_t = transpose({p}attn) {{perm = [0, 2, 1, 3]}} : {q_bshd}")
        out(
            f"  {p}attn_2d = reshape({p}attn_t) {{shape = {_ints(t, q_dim)}}} : {self.ty(t, q_dim)}"
        )
        self.project(f"{p}attn_out", f"{p}attn_2d", "wo", "o", i, h_ty)
        attn_out = f"{p}attn_out"
        if c.post_norms:
            norm = self.read("attn_post_norm", i)
            out(f"  {p}attn_post = rms_norm({attn_out}, {norm}) {eps_attr} : {h_ty}")
            attn_out = f"{p}attn_post"
        out(f"  {p}h_attn = add({x}, {attn_out}) : {h_ty}")
        out(f"  # layer {i}: {'MoE' if c.experts else 'SwiGLU'} MLP")
        out(f"  {p}mlp_in = rms_norm({p}h_attn, {self.read('mlp_norm', i)}) {eps_attr} : {h_ty}")
        if c.experts:
            self.moe_mlp(i, f"{p}mlp_in", h_ty)
        else:
            self.mlp(i, f"{p}mlp_in", h_ty)
        mlp_out = f"{p}mlp_out"
        if c.post_norms:
            norm = self.read("mlp_post_norm", i)
            out(f"  {p}mlp_post = rms_norm({mlp_out}, {norm}) {eps_attr} : {h_ty}")
            mlp_out = f"{p}mlp_post"
        out(f"  {p}out = add({p}h_attn, {mlp_out}) : {h_ty}")
        return f"{p}out"

    def rope_rows(self, prefix: str, x: str, rope_attr: str, heads: int) -> None:
        """`{prefix}_rot = rope(x)` with each token at its own position (`per_row`): the
        `[B,S,H,D]` tokens seen as one sequence of B*S, `pos i32[B*S]`."""
        b, sq, hd = self.s.batch, self.s.seq, self.c.head_width
        flat = self.ty(1, b * sq, heads, hd)
        self.out(
            f"  {prefix}_seq = reshape({x}) {{shape = {_ints(1, b * sq, heads, hd)}}} : {flat}"
        )
        self.out(f"  {prefix}_seq_rot = rope({prefix}_seq, %pos) {rope_attr} : {flat}")
        self.out(
            f"  {prefix}_rot = reshape({prefix}_seq_rot) {{shape = {_ints(b, sq, heads, hd)}}} : "
            f"{self.ty(b, sq, heads, hd)}"
        )

    def write_rows(self, i: int, kv: str) -> None:
        """`%l{i}.{kv}_cache_new`: each row's new keys (or values) written at its own position
        `pos[b*S]` into its slice of the cache, the rows joined again (`per_row`)."""
        c, s, p = self.c, self.s, f"%l{i}."
        hd, sq = c.head_width, s.seq
        row_cache = self.ty(1, c.kv_heads, s.cache_len, hd)
        row_new = self.ty(1, c.kv_heads, sq, hd)
        rows = []
        for b in range(s.batch):
            cut = f"{{axis = 0, end = {b + 1}, start = {b}}}"
            self.out(f"  {p}{kv}_cache.r{b} = slice({p}{kv}_cache) {cut} : {row_cache}")
            self.out(f"  {p}{kv}_t.r{b} = slice({p}{kv}_t) {cut} : {row_new}")
            self.out(
                f"  {p}{kv}_cache_new.r{b} = kv_cache_write({p}{kv}_cache.r{b}, {p}{kv}_t.r{b}, "
                f"%write_pos.r{b}) : {row_cache}"
            )
            rows.append(f"{p}{kv}_cache_new.r{b}")
        cache_ty = self.ty(s.batch, c.kv_heads, s.cache_len, hd)
        self.out(f"  {p}{kv}_cache_new = concat({', '.join(rows)}) {{axis = 0}} : {cache_ty}")

    def mlp(self, i: int, x: str, h_ty: str) -> None:
        """`%l{i}.mlp_out`: the gated MLP of layer i over `x`."""
        c, p, out = self.c, f"%l{i}.", self.out
        t = self.s.batch * self.s.seq
        ffn_ty = self.ty(t, c.ffn)
        if c.fused_gate_up:
            f = c.ffn
            self.project(f"{p}gate_up", x, "w_gate_up", "gate_up", i, self.ty(t, 2 * f))
            out(f"  {p}gate = slice({p}gate_up) {{axis = 1, end = {f}, start = 0}} : {ffn_ty}")
            out(f"  {p}up = slice({p}gate_up) {{axis = 1, end = {2 * f}, start = {f}}} : {ffn_ty}")
        else:
            self.project(f"{p}gate", x, "w_gate", "gate", i, ffn_ty)
            self.project(f"{p}up", x, "w_up", "up", i, ffn_ty)
        if c.mlp_act == "gelu_tanh":
            out(f'  {p}gate_act = gelu({p}gate) {{approximate = "tanh"}} : {ffn_ty}')
        else:
            out(f"  {p}gate_act = silu({p}gate) : {ffn_ty}")
        out(f"  {p}gated = mul({p}gate_act, {p}up) : {ffn_ty}")
        self.project(f"{p}mlp_out", f"{p}gated", "w_down", "down", i, h_ty)

    def moe_mlp(self, i: int, x: str, h_ty: str) -> None:
        """`%l{i}.mlp_out`: layer i's router product over `x`, then one moe node."""
        c, p = self.c, f"%l{i}."
        t = self.s.batch * self.s.seq
        logits, logits_ty = f"{p}router_logits", self.ty(t, c.experts)
        if c.expert_bias:  # gpt-oss: the router's bias, then the stacks' after the stacks
            self.project(f"{logits}_matmul", x, "router", "router", i, logits_ty)
            self.out(f"  {logits} = add({logits}_matmul, {self.read('b_router', i)}) : {logits_ty}")
        else:
            self.project(logits, x, "router", "router", i, logits_ty)
        roles = [*STACK_ROLES, *(f"b_{r[2:]}" for r in STACK_ROLES if c.expert_bias)]
        stacks = ", ".join(self.read(role, i) for role in roles)
        attrs: dict[str, AttrValue] = {"k": c.experts_used, "routing": c.moe_routing}
        if c.norm_topk:
            attrs["norm_topk"] = True
        if c.mlp_act != "silu":
            attrs["act"] = c.mlp_act
        self.out(f"  {p}mlp_out = moe({x}, {p}router_logits, {stacks}) {_attrs(attrs)} : {h_ty}")

    def text(self, comments: Sequence[str]) -> str:
        c, s = self.c, self.s
        decode = s.mode == "decode"
        t = s.batch * s.seq
        h_ty = self.ty(t, c.hidden)
        self.header(comments)
        self.declarations()
        self.out("")
        self.embedding(h_ty)
        write_pos = "%pos"
        if decode and s.per_row:
            for b in range(s.batch):  # each row's first new token's position, i32[1]
                start = b * s.seq
                self.out(
                    f"  %write_pos.r{b} = slice(%pos) {{axis = 0, end = {start + 1}, "
                    f"start = {start}}} : i32[1]"
                )
        elif decode and s.seq > 1:
            # kv_cache_write takes the start row as i32[1]: the first new token's position.
            write_pos = "%write_pos"
            self.out("  %write_pos = slice(%pos) {axis = 0, end = 1, start = 0} : i32[1]")
        causal = ""  # the layers' attention attributes are their own
        x = "%h0"
        if c.embed_scale:
            factor = format_literal(float(c.embed_scale))
            self.out(f"  %h0_scaled = scale(%h0) {{factor = {factor}}} : {h_ty}")
            x = "%h0_scaled"
        for i in range(c.layers):
            x = self.layer(i, x, write_pos, causal)
        self.out("  # head")
        eps_attr = f"{{eps = {float(c.eps)!r}}}"
        self.out(f"  %h_final = rms_norm({x}, {self.read('final_norm')}) {eps_attr} : {h_ty}")
        logits_ty = self.ty(t, c.vocab)
        if c.tied_embeddings:  # the embedding table [vocab, hidden] read as its transpose
            table = self.read("embed")
            self.out(f"  %logits = matmul(%h_final, {table}) {{transpose_b = true}} : {logits_ty}")
        else:
            head = self.read("lm_head")
            flags = " {transpose_b = true}" if self.w.out_in else ""
            self.out(f"  %logits = matmul(%h_final, {head}){flags} : {logits_ty}")
        if c.final_softcap:
            cap = float(c.final_softcap)
            self.lines[-1] = self.lines[-1].replace("%logits =", "%logits_raw =", 1)
            inverse, factor = format_literal(1 / cap), format_literal(cap)
            self.out(f"  %logits_div = scale(%logits_raw) {{factor = {inverse}}} : {logits_ty}")
            self.out(f"  %logits_tanh = tanh(%logits_div) : {logits_ty}")
            self.out(f"  %logits = scale(%logits_tanh) {{factor = {factor}}} : {logits_ty}")
        outputs = ["%logits"]
        if decode:
            for i in range(c.layers):
                outputs += [f"%l{i}.k_cache_new", f"%l{i}.v_cache_new"]
        self.out("  output " + ", ".join(outputs))
        self.out("}")
        return "\n".join(self.lines) + "\n"
