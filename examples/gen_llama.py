"""Generate an N-layer Llama-style graph as optgraph IR text.

The structure is the one of `examples/llama_decode.ir`, for any sizes:

    tokens -> get_rows(embed) -> N x [ rms_norm -> q/k/v matmuls -> rope -> (kv_cache_write) ->
    GQA attention -> wo matmul -> residual -> rms_norm -> SwiGLU MLP -> residual ] -> rms_norm -> lm_head

Hidden states are kept 2-D, `[B*S, hidden]`, so every projection is a plain GEMM; attention sees
`[B,H,S,D]` through reshape + transpose views, and rope sees `[B,S,H,D]`.

Modes:

- `decode`: `seq` new tokens per sequence are appended to per-layer KV caches
  (`k_cache`/`v_cache` inputs `[B,kv_heads,cache_len,head_dim]`) with `kv_cache_write` at `pos`,
  then attention runs over the cache limited by `kv_len` (causal when `seq > 1`). Inputs: `tokens
  i32[B*S]`, `pos i32[S]` (positions of the new tokens; the first one is where the cache write
  starts), `kv_len i32[1]`, and the caches. Outputs: logits `[B*S, vocab]`, then every layer's
  updated k and v cache.
- `prefill`: causal attention over the sequence itself, no cache. Inputs: `tokens`, `pos`.
  Output: logits.

Variants (defaults are Llama 2's):

- `--eps` (rms_norm epsilon, default 1e-6) and `--theta` (rope base, default 10000; Llama 3 uses
  500000).
- `--tied-embeddings`: no `lm_head` weight; the logits are `matmul(h, embed) {transpose_b = true}`,
  the embedding table read as its own transpose (Gemma, small Llama 3.2 models).
- `--bias [qkv|attention|all]`: bias vectors added after the q/k/v projections (`qkv`, as Qwen2),
  also after the output projection (`attention`), or after every projection of the layer (`all`,
  the default when the flag has no value); none by default. The logits head has no bias.
- `--head-dim N`: the attention head width when it is not `hidden / heads` (Gemma: 256); the q
  projection is then `[hidden, heads*N]` and the output projection `[heads*N, hidden]`.

Usage:

    python examples/gen_llama.py --layers 8 --hidden 512 --heads 8 --kv-heads 2 --ffn 1376 \
        --vocab 1024 --dtype f16 --batch 1 --seq 1 --cache-len 128 --mode decode -o out.ir
    python examples/gen_llama.py --theta 500000 --eps 1e-5 --tied-embeddings --bias qkv \
        --head-dim 32 -o variant.ir

Lines are built in a list and joined once, so a 100k-node graph takes well under a second.
"""

from __future__ import annotations

import argparse
import sys

DTYPES = ("f32", "f16", "bf16")
MODES = ("decode", "prefill")
# Which projections get a bias vector, per --bias value.
BIASED: dict[str, tuple[str, ...]] = {
    "none": (),
    "qkv": ("q", "k", "v"),
    "attention": ("q", "k", "v", "o"),
    "all": ("q", "k", "v", "o", "gate", "up", "down"),
}


def _shape(*dims: int) -> str:
    """A type's shape, `[1,2,16]`."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _ints(*values: int) -> str:
    """An integer-list attribute, `[1, 2, 16]`."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def generate_llama(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    vocab: int = 128,
    dtype: str = "f32",
    batch: int = 1,
    seq: int = 1,
    cache_len: int = 32,
    mode: str = "decode",
    eps: float = 1e-6,
    theta: float = 10000.0,
    tied_embeddings: bool = False,
    bias: str = "none",
    head_dim: int | None = None,
) -> str:
    """Return the IR text of a `layers`-layer Llama-style model with the given sizes (the variants
    are described in the module docstring)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if layers < 0 or min(hidden, heads, kv_heads, ffn, vocab, batch, seq) < 1:
        raise ValueError("sizes must be positive (layers may be 0)")
    if bias not in BIASED:
        raise ValueError(f"bias must be one of {', '.join(BIASED)}, got {bias!r}")
    if not (eps > 0 and theta > 0):  # also rejects NaN
        raise ValueError(f"eps ({eps}) and theta ({theta}) must be positive")
    if head_dim is None:
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        head_dim = hidden // heads
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim ({head_dim}) must be even and positive for rope")
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be divisible by kv-heads ({kv_heads})")
    if mode == "decode" and seq > cache_len:
        raise ValueError(f"seq ({seq}) must not exceed cache-len ({cache_len})")

    decode = mode == "decode"
    t = batch * seq  # rows of the 2-D hidden state
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    dt = dtype

    def ty(*dims: int) -> str:
        return dt + _shape(*dims)

    eps_attr = f"{{eps = {float(eps)!r}}}"  # repr: the printer's spelling, so text round-trips
    theta_attr = f"{{theta = {float(theta)!r}}}"
    biased = BIASED[bias]
    out_dims = {"q": q_dim, "k": kv_dim, "v": kv_dim, "o": hidden}
    out_dims |= {"gate": ffn, "up": ffn, "down": hidden}

    cache_ty = ty(batch, kv_heads, cache_len, head_dim)
    variant = (
        f"# eps {float(eps)!r}, rope theta {float(theta)!r}, bias on {', '.join(biased) or 'none'}, "
        f"{'tied' if tied_embeddings else 'separate'} embeddings and logits head"
    )
    lines: list[str] = [
        f"# Llama-style {mode}: {layers} layers, hidden {hidden}, {heads} query heads, "
        f"{kv_heads} KV heads, head_dim {head_dim}, ffn {ffn}, vocab {vocab}, {dtype}, "
        f"batch {batch}, seq {seq}" + (f", cache {cache_len}" if decode else ""),
        variant,
        "# Generated by examples/gen_llama.py.",
        f"graph llama_{mode} {{",
        f"  input %tokens : i32[{t}]",
        f"  input %pos : i32[{seq}]",
    ]
    out = lines.append
    if decode:
        out("  input %kv_len : i32[1]")
        for i in range(layers):
            out(f"  input %l{i}.k_cache : {cache_ty}")
            out(f"  input %l{i}.v_cache : {cache_ty}")

    out(f"  weight %embed : {ty(vocab, hidden)}")
    for i in range(layers):
        p = f"%l{i}."
        out(f"  weight {p}attn_norm : {ty(hidden)}")
        out(f"  weight {p}wq : {ty(hidden, q_dim)}")
        out(f"  weight {p}wk : {ty(hidden, kv_dim)}")
        out(f"  weight {p}wv : {ty(hidden, kv_dim)}")
        out(f"  weight {p}wo : {ty(q_dim, hidden)}")
        out(f"  weight {p}mlp_norm : {ty(hidden)}")
        out(f"  weight {p}w_gate : {ty(hidden, ffn)}")
        out(f"  weight {p}w_up : {ty(hidden, ffn)}")
        out(f"  weight {p}w_down : {ty(ffn, hidden)}")
        for proj in biased:
            out(f"  weight {p}b_{proj} : {ty(out_dims[proj])}")
    out(f"  weight %final_norm : {ty(hidden)}")
    if not tied_embeddings:
        out(f"  weight %lm_head : {ty(hidden, vocab)}")

    h_ty = ty(t, hidden)
    q_bshd = ty(batch, seq, heads, head_dim)
    kv_bshd = ty(batch, seq, kv_heads, head_dim)
    q_bhsd = ty(batch, heads, seq, head_dim)
    kv_bhsd = ty(batch, kv_heads, seq, head_dim)
    ffn_ty = ty(t, ffn)

    out("")
    out(f"  %h0 = get_rows(%embed, %tokens) : {h_ty}")
    write_pos = "%pos"
    if decode and seq > 1:
        # kv_cache_write takes the start row as i32[1]: the first new token's position.
        write_pos = "%write_pos"
        out("  %write_pos = slice(%pos) {axis = 0, end = 1, start = 0} : i32[1]")
    # One new token per sequence sees every cached key: no causal mask needed.
    causal = " {causal = true}" if seq > 1 else ""

    def project(result: str, source: str, weight: str, proj: str, rows_ty: str) -> None:
        """`result = source @ weight`, then `+ bias` when the projection `proj` has one (the
        layer's `b_<proj>`, named with the layer prefix of `result`)."""
        if proj in biased:
            bias_name = result[: result.index(".") + 1] + f"b_{proj}"
            out(f"  {result}_matmul = matmul({source}, {weight}) : {rows_ty}")
            out(f"  {result} = add({result}_matmul, {bias_name}) : {rows_ty}")
        else:
            out(f"  {result} = matmul({source}, {weight}) : {rows_ty}")

    x = "%h0"
    for i in range(layers):
        p = f"%l{i}."
        out(f"  # layer {i}: attention")
        out(f"  {p}attn_in = rms_norm({x}, {p}attn_norm) {eps_attr} : {h_ty}")
        project(f"{p}q", f"{p}attn_in", f"{p}wq", "q", ty(t, q_dim))
        project(f"{p}k", f"{p}attn_in", f"{p}wk", "k", ty(t, kv_dim))
        project(f"{p}v", f"{p}attn_in", f"{p}wv", "v", ty(t, kv_dim))
        out(f"  {p}q4 = reshape({p}q) {{shape = {_ints(batch, seq, heads, head_dim)}}} : {q_bshd}")
        out(
            f"  {p}k4 = reshape({p}k) {{shape = {_ints(batch, seq, kv_heads, head_dim)}}}"
            f" : {kv_bshd}"
        )
        out(
            f"  {p}v4 = reshape({p}v) {{shape = {_ints(batch, seq, kv_heads, head_dim)}}}"
            f" : {kv_bshd}"
        )
        out(f"  {p}q_rot = rope({p}q4, %pos) {theta_attr} : {q_bshd}")
        out(f"  {p}k_rot = rope({p}k4, %pos) {theta_attr} : {kv_bshd}")
        out(f"  {p}q_t = transpose({p}q_rot) {{perm = [0, 2, 1, 3]}} : {q_bhsd}")
        out(f"  {p}k_t = transpose({p}k_rot) {{perm = [0, 2, 1, 3]}} : {kv_bhsd}")
        out(f"  {p}v_t = transpose({p}v4) {{perm = [0, 2, 1, 3]}} : {kv_bhsd}")
        if decode:
            out(f"  {p}k_cache_new = kv_cache_write({p}k_cache, {p}k_t, {write_pos}) : {cache_ty}")
            out(f"  {p}v_cache_new = kv_cache_write({p}v_cache, {p}v_t, {write_pos}) : {cache_ty}")
            out(
                f"  {p}attn = attention({p}q_t, {p}k_cache_new, {p}v_cache_new, %kv_len){causal}"
                f" : {q_bhsd}"
            )
        else:
            out(f"  {p}attn = attention({p}q_t, {p}k_t, {p}v_t) {{causal = true}} : {q_bhsd}")
        out(f"  {p}attn_t = transpose({p}attn) {{perm = [0, 2, 1, 3]}} : {q_bshd}")
        out(f"  {p}attn_2d = reshape({p}attn_t) {{shape = {_ints(t, q_dim)}}} : {ty(t, q_dim)}")
        project(f"{p}attn_out", f"{p}attn_2d", f"{p}wo", "o", h_ty)
        out(f"  {p}h_attn = add({x}, {p}attn_out) : {h_ty}")
        out(f"  # layer {i}: SwiGLU MLP")
        out(f"  {p}mlp_in = rms_norm({p}h_attn, {p}mlp_norm) {eps_attr} : {h_ty}")
        project(f"{p}gate", f"{p}mlp_in", f"{p}w_gate", "gate", ffn_ty)
        project(f"{p}up", f"{p}mlp_in", f"{p}w_up", "up", ffn_ty)
        out(f"  {p}gate_act = silu({p}gate) : {ffn_ty}")
        out(f"  {p}gated = mul({p}gate_act, {p}up) : {ffn_ty}")
        project(f"{p}mlp_out", f"{p}gated", f"{p}w_down", "down", h_ty)
        out(f"  {p}out = add({p}h_attn, {p}mlp_out) : {h_ty}")
        x = f"{p}out"

    out("  # head")
    out(f"  %h_final = rms_norm({x}, %final_norm) {eps_attr} : {h_ty}")
    if tied_embeddings:  # the embedding table [vocab, hidden] read as its transpose
        out(f"  %logits = matmul(%h_final, %embed) {{transpose_b = true}} : {ty(t, vocab)}")
    else:
        out(f"  %logits = matmul(%h_final, %lm_head) : {ty(t, vocab)}")
    outputs = ["%logits"]
    if decode:
        for i in range(layers):
            outputs += [f"%l{i}.k_cache_new", f"%l{i}.v_cache_new"]
    out("  output " + ", ".join(outputs))
    out("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write an N-layer Llama-style graph as optgraph IR.")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--dtype", choices=DTYPES, default="f32")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1)
    ap.add_argument("--cache-len", type=int, default=32)
    ap.add_argument("--mode", choices=MODES, default="decode")
    ap.add_argument("--eps", type=float, default=1e-6, help="rms_norm epsilon (default 1e-6)")
    ap.add_argument("--theta", type=float, default=10000.0, help="rope base (default 10000)")
    ap.add_argument(
        "--tied-embeddings", action="store_true", help="logits from the embedding table"
    )
    ap.add_argument(
        "--bias",
        nargs="?",
        choices=tuple(BIASED),
        const="all",
        default="none",
        help="biases on the q/k/v projections, on attention's, or on all (the flag alone: all)",
    )
    ap.add_argument("--head-dim", type=int, help="head width (default hidden / heads)")
    ap.add_argument("-o", "--output", help="output file (default: stdout)")
    args = ap.parse_args(argv)
    try:
        text = generate_llama(
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            kv_heads=args.kv_heads,
            ffn=args.ffn,
            vocab=args.vocab,
            dtype=args.dtype,
            batch=args.batch,
            seq=args.seq,
            cache_len=args.cache_len,
            mode=args.mode,
            eps=args.eps,
            theta=args.theta,
            tied_embeddings=args.tied_embeddings,
            bias=args.bias,
            head_dim=args.head_dim,
        )
    except ValueError as err:
        print(f"gen_llama.py: error: {err}", file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
