"""The op test cases: for every op, one IR graph body (dtype `{T}`) holding several shapes.

Shared by the GPU tests (tests/gpu/test_gpu_ops.py: run against the reference), the CPU emulation
of the same kernels (tests/codegen/test_op_kernels_emulated.py) and tests/codegen/test_codegen_cuda.py
(the generated source of every case compiles with nvcc).
"""

from __future__ import annotations

import re

UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "silu", "erf",
         "sin", "cos", "softplus")  # fmt: skip
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow")


def _unary(op: str, t: str) -> str:
    cases = [(4, 64), (3, 5, 7), (1,), (1000,)]
    if op == "neg" and t == "f32":
        cases.append((5000, 4097))  # more elements than one grid covers: the grid-stride loop
    lines = []
    for k, shape in enumerate(cases):
        s = ",".join(map(str, shape))
        lines += [f"input %x{k} : {t}[{s}]", f"%y{k} = {op}(%x{k}) : {t}[{s}]"]
    return "\n".join(lines) + "\noutput " + ", ".join(f"%y{k}" for k in range(len(cases)))


def _binary(op: str, t: str) -> str:
    cases = [("4,64", "64", "4,64"), ("3,1,5", "4,1", "3,4,5"), ("1", "7,9", "7,9"),
             ("", "4", "4"), ("2,3", "2,3", "2,3")]  # fmt: skip
    lines = []
    for k, (a, b, r) in enumerate(cases):
        lines += [f"input %a{k} : {t}[{a}]", f"input %b{k} : {t}[{b}]"]
        lines.append(f"%y{k} = {op}(%a{k}, %b{k}) : {t}[{r}]")
    return "\n".join(lines) + "\noutput " + ", ".join(f"%y{k}" for k in range(len(cases)))


CASES: dict[str, str] = {
    "gelu": """input %x : {T}[4,64]
%a = gelu(%x) : {T}[4,64]
%b = gelu(%x) {approximate = "none"} : {T}[4,64]
output %a, %b""",
    # Quantized weights (random valid blocks from `random_weights`): a 32- and a 256-element
    # block type, and the E8M0-scaled mxfp4.
    "dequantize": """weight %a : q8_0[3,64]
weight %b : q4_k[2,256]
weight %c : mxfp4[1,32]
%ya = dequantize(%a) {dtype = "{T}"} : {T}[3,64]
%yb = dequantize(%b) {dtype = "{T}"} : {T}[2,256]
%yc = dequantize(%c) {dtype = "{T}"} : {T}[1,32]
output %ya, %yb, %yc""",
    # Mixture of experts: float expert stacks (norm_topk routing, SiLU) and quantized ones,
    # gate and up in one stack (top-k-then-softmax routing, GELU-tanh); gpt-oss's experts (a bias
    # after each stack, the clamped SwiGLU, a limit random values exceed); 8 experts, 3 tokens.
    "moe": """input %x : {T}[3,64]
input %logits : {T}[3,8]
weight %gate : {T}[8,32,64]
weight %up : {T}[8,32,64]
weight %down : {T}[8,64,32]
weight %gate_up : q8_0[8,64,64]
weight %down_q : mxfp4[8,64,32]
weight %gate_up_b : {T}[8,64]
weight %down_b : {T}[8,64]
%y = moe(%x, %logits, %gate, %up, %down) {k = 2, norm_topk = true} : {T}[3,64]
%z = moe(%x, %logits, %gate_up, %down_q) {act = "gelu_tanh", k = 3, routing = "topk_softmax"} : {T}[3,64]
%w = moe(%x, %logits, %gate_up, %down_q, %gate_up_b, %down_b) {act = "swiglu_oai", k = 2, limit = 0.25, routing = "topk_softmax"} : {T}[3,64]
output %y, %z, %w""",
    "scale": """input %x : {T}[3,33]
%y = scale(%x) {factor = -0.75} : {T}[3,33]
output %y""",
    "cast": """input %x : f32[4,33]
input %i : i32[5]
input %h : {T}[6]
%a = cast(%x) {dtype = "{T}"} : {T}[4,33]
%b = cast(%h) {dtype = "f32"} : f32[6]
%c = cast(%x) {dtype = "i32"} : i32[4,33]
%d = cast(%i) {dtype = "f32"} : f32[5]
%e = cast(%x) {dtype = "bool"} : bool[4,33]
%f = cast(%e) {dtype = "{T}"} : {T}[4,33]
output %a, %b, %c, %d, %e, %f""",
    "sum": """input %x : {T}[4,64]
input %y : {T}[3,5,7]
input %z : {T}[64,4]
input %w : {T}[2,300,3]
input %v : {T}[2,5000]
%a = sum(%x) {axes = [1]} : {T}[4]
%b = sum(%y) : {T}[]
%c = sum(%z) {axes = [0], keepdims = true} : {T}[1,4]
%d = sum(%w) {axes = [1]} : {T}[2,3]
%e = sum(%y) {axes = [0, 2]} : {T}[5]
%f = sum(%v) {axes = [-1], keepdims = true} : {T}[2,1]
output %a, %b, %c, %d, %e, %f""",
    "mean": """input %x : {T}[4,64]
input %w : {T}[2,300,3]
input %y : {T}[3,5,7]
%a = mean(%x) {axes = [1], keepdims = true} : {T}[4,1]
%b = mean(%w) {axes = [1]} : {T}[2,3]
%c = mean(%y) {axes = [1, 2]} : {T}[3]
output %a, %b, %c""",
    "max": """input %x : {T}[4,64]
input %w : {T}[2,300,3]
input %y : {T}[3,5,7]
%a = max(%x) {axes = [1]} : {T}[4]
%b = max(%w) {axes = [1]} : {T}[2,3]
%c = max(%y) {axes = [0]} : {T}[5,7]
output %a, %b, %c""",
    "softmax": """input %x : {T}[4,64]
input %y : {T}[3,1000]
input %z : {T}[5,3]
input %w : {T}[2,7,3]
%a = softmax(%x) : {T}[4,64]
%b = softmax(%y) {axis = 1} : {T}[3,1000]
%c = softmax(%z) {axis = 0} : {T}[5,3]
%d = softmax(%w) {axis = 1} : {T}[2,7,3]
output %a, %b, %c, %d""",
    "log_softmax": """input %x : {T}[4,64]
input %y : {T}[3,1000]
input %z : {T}[5,3]
input %w : {T}[2,7,3]
%a = log_softmax(%x) : {T}[4,64]
%b = log_softmax(%y) {axis = 1} : {T}[3,1000]
%c = log_softmax(%z) {axis = 0} : {T}[5,3]
%d = log_softmax(%w) {axis = 1} : {T}[2,7,3]
output %a, %b, %c, %d""",
    "rms_norm": """input %x : {T}[4,64]
input %y : {T}[2,3,1000]
weight %w : {T}[64]
weight %v : {T}[1000]
%a = rms_norm(%x, %w) : {T}[4,64]
%b = rms_norm(%y, %v) {eps = 1e-05} : {T}[2,3,1000]
output %a, %b""",
    "layer_norm": """input %x : {T}[4,64]
input %y : {T}[2,3,1000]
weight %w : {T}[64]
weight %b : {T}[64]
weight %v : {T}[1000]
weight %c : {T}[1000]
%p = layer_norm(%x, %w, %b) : {T}[4,64]
%q = layer_norm(%y, %v, %c) {eps = 1e-06} : {T}[2,3,1000]
output %p, %q""",
    "matmul": """input %a : {T}[4,64]
weight %w : {T}[64,32]
weight %wt : {T}[32,64]
input %at : {T}[64,4]
input %b4 : {T}[2,3,5,7]
weight %w2 : {T}[7,4]
input %b3 : {T}[2,5,7]
input %c3 : {T}[2,7,4]
input %e4 : {T}[2,1,5,7]
input %f4 : {T}[1,3,7,4]
input %g3 : {T}[3,7,5]
input %h3 : {T}[3,4,7]
%y0 = matmul(%a, %w) : {T}[4,32]
%y1 = matmul(%a, %wt) {transpose_b = true} : {T}[4,32]
%y2 = matmul(%at, %w) {transpose_a = true} : {T}[4,32]
%y3 = matmul(%b4, %w2) : {T}[2,3,5,4]
%y4 = matmul(%b3, %c3) : {T}[2,5,4]
%y5 = matmul(%e4, %f4) : {T}[2,3,5,4]
%y6 = matmul(%g3, %h3) {transpose_a = true, transpose_b = true} : {T}[3,5,4]
output %y0, %y1, %y2, %y3, %y4, %y5, %y6""",
    "reshape": """input %x : {T}[4,6]
%r = reshape(%x) {shape = [2, 12]} : {T}[2,12]
%y = neg(%r) : {T}[2,12]
output %y, %r""",
    "transpose": """input %x : {T}[2,3,4]
input %z : {T}[1,4,1,8]
%a = transpose(%x) {perm = [2, 0, 1]} : {T}[4,2,3]
%b = transpose(%z) {perm = [0, 2, 1, 3]} : {T}[1,1,4,8]
%c = transpose(%x) {perm = [0, 2, 1]} : {T}[2,4,3]
output %a, %b, %c""",
    "slice": """input %x : {T}[4,10]
input %y : {T}[2,3,8]
%a = slice(%x) {axis = 0, start = 1, end = 3} : {T}[2,10]
%b = slice(%x) {axis = 1, start = 2, end = 7} : {T}[4,5]
%c = slice(%y) {axis = -1, start = 3, end = 8} : {T}[2,3,5]
%d = neg(%a) : {T}[2,10]
output %a, %b, %c, %d""",
    "concat": """input %x : {T}[2,3]
input %y : {T}[4,3]
input %z : {T}[2,5]
input %u : {T}[2,3,4]
input %v : {T}[2,3,1]
%a = concat(%x, %y) {axis = 0} : {T}[6,3]
%b = concat(%x, %z, %x) {axis = 1} : {T}[2,11]
%c = concat(%u, %v) {axis = -1} : {T}[2,3,5]
output %a, %b, %c""",
    "get_rows": """weight %t : {T}[50,16]
input %i : i32[7]
input %j : i64[2,3]
weight %s : {T}[5,4,8]
input %k : i32[3]
%a = get_rows(%t, %i) : {T}[7,16]
%b = get_rows(%t, %j) : {T}[2,3,16]
%c = get_rows(%s, %k) : {T}[3,8]
output %a, %b, %c""",
    "kv_cache_write": """input %cache : {T}[1,2,16,8]
input %new : {T}[1,2,1,8]
input %pos : i32[1]
input %cache2 : {T}[2,2,12,8]
input %new2 : {T}[2,2,4,8]
input %pos2 : i64[1]
%a = kv_cache_write(%cache, %new, %pos) : {T}[1,2,16,8]
%b = kv_cache_write(%cache2, %new2, %pos2) : {T}[2,2,12,8]
output %a, %b""",
    "rope": """input %x : {T}[1,3,4,16]
input %p : i32[3]
input %y : {T}[2,5,2,8]
input %q : i64[5]
%a = rope(%x, %p) : {T}[1,3,4,16]
%b = rope(%y, %q) {theta = 500000.0} : {T}[2,5,2,8]
%c = rope(%x, %p) {factor = 8.0, high_freq_factor = 4.0, low_freq_factor = 1.0, original_max_position = 64, scaling = "llama3", theta = 500000.0} : {T}[1,3,4,16]
%d = rope(%x, %p) {factor = 4.0, original_max_position = 32, rotary_dim = 8, scaling = "yarn"} : {T}[1,3,4,16]
%e = rope(%y, %q) {factor = 2.0, rotary_dim = 4, scaling = "linear"} : {T}[2,5,2,8]
%f = rope(%y, %q) {rotary_dim = 6} : {T}[2,5,2,8]
output %a, %b, %c, %d, %e, %f""",
    "attention": """input %q : {T}[1,4,1,16]
input %k : {T}[1,2,32,16]
input %v : {T}[1,2,32,16]
input %len : i32[1]
input %pq : {T}[1,4,8,16]
input %pk : {T}[1,4,8,16]
input %pv : {T}[1,4,8,16]
input %q2 : {T}[1,4,2,16]
input %len2 : i32[1]
input %lq : {T}[2,2,3,64]
input %lk : {T}[2,1,600,64]
input %lv : {T}[2,1,600,64]
input %wq : {T}[1,2,5,160]
input %wk : {T}[1,2,7,160]
input %wv : {T}[1,2,7,160]
input %sq : {T}[1,8,1,128]
input %sk : {T}[1,2,300,128]
input %sv : {T}[1,2,300,128]
input %len3 : i32[1]
input %gq : {T}[2,4,40,64]
input %gk : {T}[2,2,40,64]
input %gv : {T}[2,2,40,64]
input %len4 : i32[1]
%decode = attention(%q, %k, %v, %len) : {T}[1,4,1,16]
%prefill = attention(%pq, %pk, %pv) {causal = true} : {T}[1,4,8,16]
%decode2 = attention(%q2, %k, %v, %len2) {causal = true} : {T}[1,4,2,16]
%long = attention(%lq, %lk, %lv) {scale = 0.1} : {T}[2,2,3,64]
%wide = attention(%wq, %wk, %wv) {causal = true} : {T}[1,2,5,160]
%split = attention(%sq, %sk, %sv, %len3) : {T}[1,8,1,128]
%gqa = attention(%gq, %gk, %gv, %len4) {causal = true} : {T}[2,4,40,64]
input %mq : {T}[2,4,1,16]
input %mk : {T}[2,2,32,16]
input %rowlen : i32[2]
input %bmask : bool[2,1,1,32]
input %tq : {T}[1,2,8,16]
input %tk : {T}[1,1,12,16]
input %fmask : {T}[8,12]
input %nq : {T}[2,2,40,64]
input %nk : {T}[2,1,48,64]
input %rowlen2 : i64[2]
input %hmask : {T}[1,8,1,300]
%maskdec = attention(%mq, %mk, %mk, %rowlen, %bmask) {causal = true, masked = true, softcap = 2.0, window = 9} : {T}[2,4,1,16]
%topleft = attention(%tq, %tk, %tk, %fmask) {causal = true, causal_align = "top_left", masked = true} : {T}[1,2,8,16]
%window = attention(%nq, %nk, %nk, %rowlen2) {causal = true, softcap = 1.0, window = 7} : {T}[2,2,40,64]
%splitmask = attention(%sq, %sk, %sv, %len3, %hmask) {causal = true, masked = true, window = 51} : {T}[1,8,1,128]
input %sinks8 : f32[8]
input %sinks4 : {T}[4]
%sinkdec = attention(%sq, %sk, %sv, %len3, %sinks8) {sinks = true} : {T}[1,8,1,128]
%sinkpre = attention(%gq, %gk, %gv, %len4, %sinks4) {causal = true, sinks = true} : {T}[2,4,40,64]
%sinkmask = attention(%mq, %mk, %mk, %rowlen, %sinks4, %bmask) {causal = true, masked = true, sinks = true, window = 9} : {T}[2,4,1,16]
output %decode, %prefill, %decode2, %long, %wide, %split, %gqa, %maskdec, %topleft, %window, %splitmask, %sinkdec, %sinkpre, %sinkmask""",
    "conv2d": """input %x : {T}[1,8,10,10]
weight %w : {T}[16,8,3,3]
weight %b : {T}[16]
input %g : {T}[2,8,9,9]
weight %wg : {T}[4,4,3,3]
%a = conv2d(%x, %w, %b) {padding = [1, 1]} : {T}[1,16,10,10]
%c = conv2d(%x, %w) {stride = [2, 2]} : {T}[1,16,4,4]
%d = conv2d(%g, %wg) {groups = 2, padding = [1, 0], stride = [2, 1]} : {T}[2,4,5,7]
output %a, %c, %d""",
    "max_pool2d": """input %x : {T}[2,3,9,9]
%a = max_pool2d(%x) {kernel = [3, 3], padding = [1, 1], stride = [1, 1]} : {T}[2,3,9,9]
%b = max_pool2d(%x) {kernel = [2, 2]} : {T}[2,3,4,4]
output %a, %b""",
    "resize": """input %x : {T}[2,3,5,7]
%near = resize(%x) {size = [10, 14]} : {T}[2,3,10,14]
%odd = resize(%x) {coordinates = "half_pixel", nearest = "round_prefer_ceil", size = [8, 11]} : {T}[2,3,8,11]
%down = resize(%x) {coordinates = "pytorch_half_pixel", nearest = "round_prefer_floor", size = [3, 1]} : {T}[2,3,3,1]
%up = resize(%x) {coordinates = "half_pixel", mode = "linear", scale_h = 1.7, scale_w = 1.7, size = [8, 11]} : {T}[2,3,8,11]
%corner = resize(%x) {coordinates = "align_corners", mode = "linear", size = [9, 4]} : {T}[2,3,9,4]
%ceil = resize(%x) {nearest = "ceil", scale_h = 2.0, scale_w = 0.5, size = [10, 3]} : {T}[2,3,10,3]
output %near, %odd, %down, %up, %corner, %ceil""",
    "avg_pool2d": """input %x : {T}[2,3,9,9]
%a = avg_pool2d(%x) {kernel = [3, 3], padding = [1, 1], stride = [2, 2]} : {T}[2,3,5,5]
%b = avg_pool2d(%x) {kernel = [2, 3]} : {T}[2,3,4,3]
output %a, %b""",
    "equal": """input %x : {T}[4,64]
input %a : {T}[3,1,5]
input %b : {T}[4,1]
input %m : bool[7]
input %n : bool[2,7]
%r = relu(%x) : {T}[4,64]
%y0 = equal(%x, %r) : bool[4,64]
%y1 = equal(%a, %b) : bool[3,4,5]
%y2 = equal(%m, %n) : bool[2,7]
output %y0, %y1, %y2""",
    "less": """input %x : {T}[4,64]
input %z : {T}[64]
input %a : {T}[3,1,5]
input %b : {T}[4,1]
%y0 = less(%x, %z) : bool[4,64]
%y1 = less(%a, %b) : bool[3,4,5]
%y2 = less(%x, %x) : bool[4,64]
output %y0, %y1, %y2""",
    "less_equal": """input %x : {T}[4,64]
input %z : {T}[64]
input %a : {T}[3,1,5]
input %b : {T}[4,1]
%y0 = less_equal(%x, %z) : bool[4,64]
%y1 = less_equal(%a, %b) : bool[3,4,5]
%y2 = less_equal(%x, %x) : bool[4,64]
output %y0, %y1, %y2""",
    "greater_equal": """input %x : {T}[4,64]
input %z : {T}[64]
%y0 = greater_equal(%x, %z) : bool[4,64]
%y1 = greater_equal(%z, %x) : bool[4,64]
%y2 = greater_equal(%x, %x) : bool[4,64]
output %y0, %y1, %y2""",
    "mod": """input %a : {T}[4,64]
input %b : {T}[4,64]
input %c : {T}[64]
%d = sub(%a, %b) : {T}[4,64]
%m = mul(%c, %b) : {T}[4,64]
%e = neg(%m) : {T}[4,64]
%y0 = mod(%d, %c) : {T}[4,64]
%y1 = mod(%d, %e) {fmod = true} : {T}[4,64]
%y2 = mod(%a, %e) : {T}[4,64]
%y3 = mod(%d, %e) : {T}[4,64]
%y4 = div(%d, %e) : {T}[4,64]
output %y0, %y1, %y2, %y3, %y4""",
    "greater": """input %x : {T}[4,64]
input %z : {T}[64]
input %a : {T}[]
%y0 = greater(%x, %z) : bool[4,64]
%y1 = greater(%a, %z) : bool[64]
output %y0, %y1""",
    "not": """input %m : bool[4,64]
input %x : {T}[3,5]
input %z : {T}[5]
%y0 = not(%m) : bool[4,64]
%c = less(%x, %z) : bool[3,5]
%y1 = not(%c) : bool[3,5]
output %y0, %y1""",
    "and": """input %m : bool[4,64]
input %n : bool[64]
input %x : {T}[3,5]
input %z : {T}[5]
%y0 = and(%m, %n) : bool[4,64]
%c = less(%x, %z) : bool[3,5]
%d = greater(%z, %z) : bool[5]
%y1 = and(%c, %d) : bool[3,5]
output %y0, %y1""",
    "or": """input %m : bool[4,64]
input %n : bool[4,1]
input %x : {T}[3,5]
input %z : {T}[5]
%y0 = or(%m, %n) : bool[4,64]
%c = less(%x, %z) : bool[3,5]
%d = equal(%z, %z) : bool[5]
%y1 = or(%c, %d) : bool[3,5]
output %y0, %y1""",
    "where": """input %c : bool[4,64]
input %x : {T}[4,64]
input %z : {T}[64]
input %k : bool[4,1]
input %s : {T}[]
input %a : {T}[3,5]
input %b : {T}[5]
%y0 = where(%c, %x, %z) : {T}[4,64]
%y1 = where(%k, %s, %x) : {T}[4,64]
%m = greater(%a, %b) : bool[3,5]
%y2 = where(%m, %a, %b) : {T}[3,5]
output %y0, %y1, %y2""",
    "clip": """input %x : {T}[4,64]
input %z : {T}[3,5,7]
%y0 = clip(%x) {min = -0.25, max = 0.5} : {T}[4,64]
%y1 = clip(%z) {min = 0.0} : {T}[3,5,7]
%y2 = clip(%x) {max = 0.125} : {T}[4,64]
output %y0, %y1, %y2""",
    "prelu": """input %x : {T}[2,3,4,5]
weight %s : {T}[3,1,1]
input %y : {T}[4,64]
weight %t : {T}[]
%a = prelu(%x, %s) : {T}[2,3,4,5]
%b = prelu(%y, %t) : {T}[4,64]
output %a, %b""",
    "expand": """input %x : {T}[3,1]
input %y : {T}[5]
input %z : {T}[2,1,4]
%a = expand(%x) {shape = [3, 7]} : {T}[3,7]
%b = expand(%y) {shape = [2, 3, 5]} : {T}[2,3,5]
%c = expand(%z) {shape = [2, 6, 4]} : {T}[2,6,4]
output %a, %b, %c""",
    "tile": """input %x : {T}[2,3]
input %y : {T}[3,1,4]
%a = tile(%x) {repeats = [2, 3]} : {T}[4,9]
%b = tile(%y) {repeats = [1, 5, 2]} : {T}[3,5,8]
output %a, %b""",
    "pad": """input %x : {T}[2,3]
input %y : {T}[2,3,4,4]
%a = pad(%x) {pads = [1, 0, 2, 3]} : {T}[5,6]
%b = pad(%y) {pads = [0, 0, 1, 2, 0, 0, 1, 0], value = -1.5} : {T}[2,3,6,6]
output %a, %b""",
    "cumsum": """input %x : {T}[4,64]
input %y : {T}[3,5,7]
%a = cumsum(%x) {axis = -1} : {T}[4,64]
%b = cumsum(%y) {axis = 1} : {T}[3,5,7]
%c = cumsum(%y) {axis = 0} : {T}[3,5,7]
input %w : {T}[2,700,3]
%d = cumsum(%w) {axis = 1} : {T}[2,700,3]
output %a, %b, %c, %d""",
    "argmax": """input %x : {T}[4,64]
input %y : {T}[3,5,7]
input %z : {T}[2,5000]
%a = argmax(%x) : i64[4]
%b = argmax(%y) {axis = 1, keepdims = true} : i64[3,1,7]
%c = argmax(%z) {axis = 1} : i64[2]
input %w : {T}[2,700,3]
%d = argmax(%w) {axis = 1} : i64[2,3]
output %a, %b, %c, %d""",
    "copy": """input %x : {T}[4,5]
%y = copy(%x) {to = "cuda"} : {T}[4,5]
output %y""",
    "prefetch": """weight %w : {T}[8,9]
%y = prefetch(%w) : {T}[8,9]
output %y""",
    "fused": """input %x : {T}[4,64]
input %r : {T}[4,64]
weight %b : {T}[64]
weight %n : {T}[64]
weight %w : {T}[64,32]
weight %c : {T}[32]
%e = fused(%x, %b) : {T}[4,64] body(%p0, %p1) {
  %t = add(%p0, %p1) : {T}[4,64]
  %u = relu(%t) : {T}[4,64]
  yield %u
}
%rn = fused(%x, %r, %n) : {T}[4,64] body(%p0, %p1, %p2) {
  %h = add(%p0, %p1) : {T}[4,64]
  %m = rms_norm(%h, %p2) : {T}[4,64]
  %o = scale(%m) {factor = 2.0} : {T}[4,64]
  yield %o
}
%s = fused(%x, %r) : {T}[4,1] body(%p0, %p1) {
  %h = mul(%p0, %p1) : {T}[4,64]
  %m = sum(%h) {axes = [1], keepdims = true} : {T}[4,1]
  %o = neg(%m) : {T}[4,1]
  yield %o
}
%mm = fused(%x, %w, %c) : {T}[4,32] body(%p0, %p1, %p2) {
  %m = matmul(%p0, %p1) : {T}[4,32]
  %a = add(%m, %p2) : {T}[4,32]
  %o = silu(%a) : {T}[4,32]
  yield %o
}
output %e, %rn, %s, %mm""",
}
for _op in UNARY:
    CASES[_op] = _unary(_op, "{T}")
for _op in BINARY:
    CASES[_op] = _binary(_op, "{T}")

NARROW = ("add", "mul", "exp", "gelu", "cast", "sum", "mean", "softmax", "rms_norm",
          "layer_norm", "matmul", "attention", "rope", "conv2d", "get_rows", "kv_cache_write",
          "transpose", "fused", "where", "clip", "less", "log_softmax", "prelu", "expand",
          "pad", "cumsum", "argmax", "mod", "less_equal", "dequantize", "moe", "resize")  # fmt: skip
INTEGER = ("add", "mul", "maximum", "neg", "abs", "relu", "sum", "max", "concat", "equal", "less",
           "greater", "not", "where", "and", "or", "expand", "tile", "pad", "cumsum", "argmax",
           "div", "mod", "sub", "minimum", "less_equal", "greater_equal", "transpose",
           "reshape", "slice", "matmul")  # fmt: skip
WIDE_INTEGER = ("matmul",)  # also in i64: the integer product kernel accumulates in the dtype


def params() -> list[tuple[str, str]]:
    params = [(op, "f32") for op in sorted(CASES)]
    params += [(op, t) for t in ("f16", "bf16") for op in NARROW]
    params += [(op, "i32") for op in INTEGER]
    params += [(op, "i64") for op in WIDE_INTEGER]
    return params


def case_graph_text(op: str, dtype: str) -> str:
    """The full IR text of `op`'s cases in `dtype`."""
    text = CASES[op].replace("{T}", dtype)
    return f"graph {op}_{dtype} {{\n{text}\n}}\n"


def case_prefix(op: str) -> str:
    """The prefix of `op`'s value names in `all_cases_graph_text`."""
    return f"{op}__"


def all_cases_graph_text(dtype: str) -> str:
    """Every case of `params()` in `dtype` as one graph, each op's values renamed
    `%<op>__<name>`, so one build of all its kernels covers the dtype:

        %y0 = exp(%x0) : f32[4,64]   ->   %exp__y0 = exp(%exp__x0) : f32[4,64]
    """
    body: list[str] = []
    outputs: list[str] = []
    for op in sorted(op for op, t in params() if t == dtype):
        text = re.sub(r"%(\w+)", rf"%{case_prefix(op)}\1", CASES[op])
        for line in text.replace("{T}", dtype).splitlines():
            if line.startswith("output "):
                outputs += line.removeprefix("output ").split(", ")
            else:
                body.append(line)
    lines = "\n".join(body)
    return f"graph all_{dtype} {{\n{lines}\noutput {', '.join(outputs)}\n}}\n"


# One-row sibling products for fuse-siblings: q/k/v-like products (one with an epilogue), gate/up
# pairs, single pass (f16, K = 512) and split-K (f32, K = 4096). Shared by the GPU fused-kernel
# tests and the CPU emulation of the generated kernels.
SIBLINGS_DECODE = """graph sib {
  input %x : f16[1,512]
  input %y : f32[1,4096]
  input %r : f16[1,128]
  weight %wq : f16[512,512]
  weight %wk : f16[512,128]
  weight %wv : f16[512,128]
  weight %wg : f16[512,1376]
  weight %wu : f16[512,1376]
  weight %a1 : f32[4096,256]
  weight %a2 : f32[4096,64]
  weight %bg : f32[4096,96]
  weight %bu : f32[4096,96]
  %q = matmul(%x, %wq) : f16[1,512]
  %k0 = matmul(%x, %wk) : f16[1,128]
  %k = add(%k0, %r) : f16[1,128]
  %v = matmul(%x, %wv) : f16[1,128]
  %g = matmul(%x, %wg) : f16[1,1376]
  %u = matmul(%x, %wu) : f16[1,1376]
  %ga = silu(%g) : f16[1,1376]
  %m = mul(%ga, %u) : f16[1,1376]
  %s1 = matmul(%y, %a1) : f32[1,256]
  %s2 = matmul(%y, %a2) : f32[1,64]
  %t1 = matmul(%y, %bg) : f32[1,96]
  %t2 = matmul(%y, %bu) : f32[1,96]
  %t = mul(%t1, %t2) : f32[1,96]
  %q2 = scale(%q) {factor = 2.0} : f16[1,512]
  %s3 = add(%s1, %s1) : f32[1,256]
  %o1 = softmax(%q2) : f16[1,512]
  %o2 = softmax(%k) : f16[1,128]
  %o3 = reshape(%v) {shape = [128]} : f16[128]
  %o4 = softmax(%s3) : f32[1,256]
  %o5 = softmax(%s2) : f32[1,64]
  %o6 = softmax(%t) : f32[1,96]
  %o7 = softmax(%m) : f16[1,1376]
  output %o1, %o2, %o3, %o4, %o5, %o6, %o7
}
"""

# One-row products with prologues (fuse recomputes a shared norm in each product reading it):
# rms_norm of a residual sum read by two products (f16, single pass), layer_norm before a split-K
# product (f32, K = 4096), and SwiGLU's mul before a bf16 product.
PRODUCT_PROLOGUES = """graph product_prologues {
  input %h : f16[1,512]
  input %r : f16[1,512]
  weight %g : f16[512]
  weight %wq : f16[512,512]
  weight %wk : f16[512,128]
  input %y : f32[1,4096]
  weight %gy : f32[4096]
  weight %by : f32[4096]
  weight %big : f32[4096,256]
  input %u : bf16[1,1376]
  input %v : bf16[1,1376]
  weight %down : bf16[1376,512]
  %s = add(%h, %r) : f16[1,512]
  %n = rms_norm(%s, %g) {eps = 1e-06} : f16[1,512]
  %q = matmul(%n, %wq) : f16[1,512]
  %k = matmul(%n, %wk) : f16[1,128]
  %ln = layer_norm(%y, %gy, %by) : f32[1,4096]
  %c = matmul(%ln, %big) : f32[1,256]
  %act = silu(%u) : bf16[1,1376]
  %gated = mul(%act, %v) : bf16[1,1376]
  %o = matmul(%gated, %down) : bf16[1,512]
  output %q, %k, %c, %o
}
"""

# One-row products with K > 2048: split-K kernels, each with its own __device__ workspace and
# counters (declarations of a merged kernel), and the last block of a tile summing the parts;
# the two products and the exp are independent (one merged launch).
SPLIT_K = """graph split_k_products {
  input %x : f32[1,4096]
  weight %w1 : f32[4096,64]
  weight %w2 : f32[4096,32]
  %a = matmul(%x, %w1) : f32[1,64]
  %b = matmul(%x, %w2) : f32[1,32]
  %c = exp(%x) : f32[1,4096]
  output %a, %b, %c
}
"""
