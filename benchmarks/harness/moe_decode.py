"""A sparse mixture-of-experts decode step as optgraph IR, with its routed experts on the host.

One token (batch 1), `layers` layers of: GQA attention over a KV cache (as `examples/
gen_llama.py` decodes), then an MoE FFN: a router picks the top 2 of `experts` experts; their
weights are gathered from host tables and applied (a SwiGLU FFN each, weighted by the
renormalized router probabilities), beside a shared expert every token uses:

    probs = softmax(x @ router)                                  [1, E]
    top1 = argmax(probs); top2 = argmax(probs - (probs == max))  the two largest
    ids = [top1, top2]; gates = [p1, p2] / (p1 + p2)
    W = get_rows(experts_gate, ids) -> [2, H, F]  (likewise up, down): only 2 experts are read
    y = shared(x) + sum_k gates[k] * down_k(silu(x @ gate_k) * (x @ up_k))

The expert tables `%lN.experts_{gate,up,down}` ([E, H*F] rows, one expert a row) are declared
`host`: `split-backends` gathers from them on the CPU and, since each gathered matrix is applied
to one row (fewer than `gpu-min-batch`), runs the routed experts there too; everything else
(attention, router, shared expert, residuals, head) stays on the GPU. f32 throughout: the CPU
nodes run NumPy's BLAS.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeSizes:
    layers: int = 4
    hidden: int = 2048
    heads: int = 16
    kv_heads: int = 4
    experts: int = 16
    expert_ffn: int = 256
    shared_ffn: int = 1024
    vocab: int = 4096
    cache_len: int = 512


def generate_moe_decode(z: MoeSizes) -> str:
    """The IR text of the MoE decode step with sizes `z` (see the module docstring)."""
    h, e, f, s = z.hidden, z.experts, z.expert_ffn, z.shared_ffn
    hd = h // z.heads
    kv = z.kv_heads * hd
    cache = f"f32[1,{z.kv_heads},{z.cache_len},{hd}]"
    lines = [
        (
            f"# MoE decode: {z.layers} layers, hidden {h}, {z.heads}/{z.kv_heads} heads, {e} "
            f"experts (top 2, ffn {f}, host tables), shared expert ffn {s}, vocab {z.vocab}, f32."
        ),
        "graph moe_decode {",
        "  input %tokens : i32[1]",
        "  input %pos : i32[1]",
        "  input %kv_len : i32[1]",
    ]
    out = lines.append
    for i in range(z.layers):
        out(f"  input %l{i}.k_cache : {cache}")
        out(f"  input %l{i}.v_cache : {cache}")
    out(f"  weight %embed : f32[{z.vocab},{h}]")
    for i in range(z.layers):
        p = f"%l{i}."
        for name, shape in [
            ("attn_norm", [h]), ("wq", [h, h]), ("wk", [h, kv]), ("wv", [h, kv]), ("wo", [h, h]),
            ("moe_norm", [h]), ("router", [h, e]), ("shared_gate", [h, s]),
            ("shared_up", [h, s]), ("shared_down", [s, h]),
        ]:  # fmt: skip
            out(f"  weight {p}{name} : f32[{','.join(map(str, shape))}]")
        for name in ("gate", "up", "down"):
            out(f"  weight {p}experts_{name} : f32[{e},{h * f}] host")
    out(f"  weight %final_norm : f32[{h}]")
    out(f"  weight %lm_head : f32[{h},{z.vocab}]")
    out(f"  %h0 = get_rows(%embed, %tokens) : f32[1,{h}]")
    x = "%h0"
    for i in range(z.layers):
        x = _layer(lines, z, i, x, cache)
    out(f"  %h_final = rms_norm({x}, %final_norm) {{eps = 1e-06}} : f32[1,{h}]")
    out(f"  %logits = matmul(%h_final, %lm_head) : f32[1,{z.vocab}]")
    caches = ", ".join(f"%l{i}.k_new, %l{i}.v_new" for i in range(z.layers))
    out(f"  output %logits, {caches}")
    out("}")
    return "\n".join(lines) + "\n"


def _layer(lines: list[str], z: MoeSizes, i: int, x: str, cache: str) -> str:
    """One layer's nodes; returns the name of its output."""
    out = lines.append
    h, e, f, s = z.hidden, z.experts, z.expert_ffn, z.shared_ffn
    hd, kh = h // z.heads, z.kv_heads
    p = f"%l{i}."
    row = f"f32[1,{h}]"
    out(f"  # layer {i}: attention (GPU)")
    out(f"  {p}attn_in = rms_norm({x}, {p}attn_norm) {{eps = 1e-06}} : {row}")
    out(f"  {p}q = matmul({p}attn_in, {p}wq) : {row}")
    out(f"  {p}k = matmul({p}attn_in, {p}wk) : f32[1,{kh * hd}]")
    out(f"  {p}v = matmul({p}attn_in, {p}wv) : f32[1,{kh * hd}]")
    out(f"  {p}q4 = reshape({p}q) {{shape = [1, 1, {z.heads}, {hd}]}} : f32[1,1,{z.heads},{hd}]")
    out(f"  {p}k4 = reshape({p}k) {{shape = [1, 1, {kh}, {hd}]}} : f32[1,1,{kh},{hd}]")
    out(f"  {p}v4 = reshape({p}v) {{shape = [1, 1, {kh}, {hd}]}} : f32[1,1,{kh},{hd}]")
    out(f"  {p}q_rot = rope({p}q4, %pos) {{theta = 10000.0}} : f32[1,1,{z.heads},{hd}]")
    out(f"  {p}k_rot = rope({p}k4, %pos) {{theta = 10000.0}} : f32[1,1,{kh},{hd}]")
    out(f"  {p}q_t = transpose({p}q_rot) {{perm = [0, 2, 1, 3]}} : f32[1,{z.heads},1,{hd}]")
    out(f"  {p}k_t = transpose({p}k_rot) {{perm = [0, 2, 1, 3]}} : f32[1,{kh},1,{hd}]")
    out(f"  {p}v_t = transpose({p}v4) {{perm = [0, 2, 1, 3]}} : f32[1,{kh},1,{hd}]")
    out(f"  {p}k_new = kv_cache_write({p}k_cache, {p}k_t, %pos) : {cache}")
    out(f"  {p}v_new = kv_cache_write({p}v_cache, {p}v_t, %pos) : {cache}")
    out(f"  {p}attn = attention({p}q_t, {p}k_new, {p}v_new, %kv_len) : f32[1,{z.heads},1,{hd}]")
    out(f"  {p}attn_t = transpose({p}attn) {{perm = [0, 2, 1, 3]}} : f32[1,1,{z.heads},{hd}]")
    out(f"  {p}attn_2d = reshape({p}attn_t) {{shape = [1, {h}]}} : {row}")
    out(f"  {p}attn_out = matmul({p}attn_2d, {p}wo) : {row}")
    out(f"  {p}h_attn = add({x}, {p}attn_out) : {row}")
    out(f"  # layer {i}: router, top 2 (GPU)")
    out(f"  {p}moe_in = rms_norm({p}h_attn, {p}moe_norm) {{eps = 1e-06}} : {row}")
    out(f"  {p}logits = matmul({p}moe_in, {p}router) : f32[1,{e}]")
    out(f"  {p}probs = softmax({p}logits) {{axis = -1}} : f32[1,{e}]")
    out(f"  {p}top1 = argmax({p}probs) {{axis = -1}} : i64[1]")
    out(f"  {p}p1 = max({p}probs) {{axes = [-1], keepdims = true}} : f32[1,1]")
    out(f"  {p}is1 = equal({p}probs, {p}p1) : bool[1,{e}]")
    out(f'  {p}is1f = cast({p}is1) {{dtype = "f32"}} : f32[1,{e}]')
    out(f"  {p}rest = sub({p}probs, {p}is1f) : f32[1,{e}]")
    out(f"  {p}top2 = argmax({p}rest) {{axis = -1}} : i64[1]")
    out(f"  {p}p2 = max({p}rest) {{axes = [-1], keepdims = true}} : f32[1,1]")
    out(f"  {p}ids = concat({p}top1, {p}top2) {{axis = 0}} : i64[2]")
    out(f"  {p}x3 = reshape({p}moe_in) {{shape = [1, 1, {h}]}} : f32[1,1,{h}]")
    out(f"  {p}pp = concat({p}p1, {p}p2) {{axis = 0}} : f32[2,1]")
    out(f"  {p}psum = sum({p}pp) {{axes = [0], keepdims = true}} : f32[1,1]")
    out(f"  {p}gates = div({p}pp, {p}psum) : f32[2,1]")
    out(f"  {p}gates3 = reshape({p}gates) {{shape = [2, 1, 1]}} : f32[2,1,1]")
    out(
        f"  # layer {i}: shared expert (GPU: issued after the routed experts' inputs are copied "
        "out, so it runs while the CPU computes the routed experts)"
    )
    out(f"  {p}s_gate = matmul({p}moe_in, {p}shared_gate) : f32[1,{s}]")
    out(f"  {p}s_up = matmul({p}moe_in, {p}shared_up) : f32[1,{s}]")
    out(f"  {p}s_act = silu({p}s_gate) : f32[1,{s}]")
    out(f"  {p}s_mid = mul({p}s_act, {p}s_up) : f32[1,{s}]")
    out(f"  {p}s_out = matmul({p}s_mid, {p}shared_down) : {row}")
    out(f"  # layer {i}: routed experts (host tables: CPU)")
    for name, shape in (("gate", (h, f)), ("up", (h, f)), ("down", (f, h))):
        out(f"  {p}w_{name} = get_rows({p}experts_{name}, {p}ids) : f32[2,{h * f}]")
        out(
            f"  {p}w_{name}3 = reshape({p}w_{name}) {{shape = [2, {shape[0]}, {shape[1]}]}}"
            f" : f32[2,{shape[0]},{shape[1]}]"
        )
    out(f"  {p}e_gate = matmul({p}x3, {p}w_gate3) : f32[2,1,{f}]")
    out(f"  {p}e_up = matmul({p}x3, {p}w_up3) : f32[2,1,{f}]")
    out(f"  {p}e_act = silu({p}e_gate) : f32[2,1,{f}]")
    out(f"  {p}e_mid = mul({p}e_act, {p}e_up) : f32[2,1,{f}]")
    out(f"  {p}e_down = matmul({p}e_mid, {p}w_down3) : f32[2,1,{h}]")
    out(f"  {p}e_weighted = mul({p}e_down, {p}gates3) : f32[2,1,{h}]")
    out(f"  {p}routed3 = sum({p}e_weighted) {{axes = [0]}} : f32[1,{h}]")
    out(f"  {p}moe = add({p}routed3, {p}s_out) : {row}")
    out(f"  {p}out = add({p}h_attn, {p}moe) : {row}")
    return f"{p}out"
