"""Run any optgraph graph op by op with CuPy: the "CuPy eager" baseline of bench_gpu.py.

Not part of optgraph (nothing under `optgraph/` imports it). Each node becomes a closure over
plain CuPy calls, in the node's own dtype, the way a user would write the model in CuPy; an op may
take several CuPy kernels (softmax: max, subtract, exp, sum, divide). Runtime scalars (`pos`,
`kv_len`) stay on the device, so nothing synchronizes. A `fused` node runs its body op by op.

    model = CupyModel(graph)
    outputs = model(env)          # env: {input or weight name: cupy array}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import cupy as cp

from optgraph.ir.graph import Graph, Node
from optgraph.ir.ops import attrs_with_defaults

Fn = Callable[..., Any]


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + cp.exp(-x))


def _gelu(x: Any, approximate: str) -> Any:
    if approximate == "none":
        from cupyx.scipy import special

        return 0.5 * x * (1 + special.erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1 + cp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


UNARY: dict[str, Fn] = {
    "neg": cp.negative,
    "abs": cp.abs,
    "exp": cp.exp,
    "log": cp.log,
    "sqrt": cp.sqrt,
    "rsqrt": lambda x: 1 / cp.sqrt(x),
    "tanh": cp.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: cp.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x),
    "copy": cp.copy,
    "prefetch": cp.copy,
}
BINARY: dict[str, Fn] = {
    "add": cp.add,
    "sub": cp.subtract,
    "mul": cp.multiply,
    "div": cp.divide,
    "maximum": cp.maximum,
    "minimum": cp.minimum,
    "pow": cp.power,
}
DTYPES = {"f32": cp.float32, "f16": cp.float16, "i32": cp.int32, "i64": cp.int64, "bool": cp.bool_}


def _softmax(x: Any, axis: int) -> Any:
    e = cp.exp(x - cp.max(x, axis=axis, keepdims=True))
    return e / cp.sum(e, axis=axis, keepdims=True)


def _attention(node: Node, attrs: Mapping[str, Any]) -> Fn:
    extras = attrs.get("masked") or attrs.get("window") or attrs.get("softcap")
    if extras or (attrs["causal"] and attrs.get("causal_align") != "bottom_right"):
        raise NotImplementedError(f"attention %{node.name}: masks, windows, softcap, top-left")

    def run(q: Any, k: Any, v: Any, kv_len: Any = None) -> Any:
        sq, d, skv = q.shape[2], q.shape[3], k.shape[2]
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = cp.repeat(k, group, axis=1), cp.repeat(v, group, axis=1)
        scale = attrs.get("scale") or 1.0 / math.sqrt(d)
        scores = cp.matmul(q, cp.swapaxes(k, -1, -2)) * scale
        keys = cp.arange(skv)[None, :]
        length = skv if kv_len is None else kv_len[0]
        visible = keys < length
        if attrs["causal"]:
            visible = visible & (keys <= length - sq + cp.arange(sq)[:, None])
        scores = cp.where(visible, scores, -cp.inf)
        return cp.matmul(_softmax(scores, -1), v)

    return run


def _rope(node: Node, attrs: Mapping[str, Any]) -> Fn:
    def run(x: Any, pos: Any) -> Any:
        half = x.shape[-1] // 2
        inv = float(attrs["theta"]) ** (-2.0 * cp.arange(half, dtype=cp.float64) / x.shape[-1])
        angles = pos.astype(cp.float64)[:, None] * inv[None, :]
        cos = cp.cos(angles).astype(x.dtype)[None, :, None, :]
        sin = cp.sin(angles).astype(x.dtype)[None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return cp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    return run


def _kv_cache_write(cache: Any, new: Any, pos: Any) -> Any:
    out = cache.copy()
    rows = pos[0] + cp.arange(new.shape[2])
    out[:, :, rows] = new
    return out


def _conv2d(node: Node, attrs: Mapping[str, Any]) -> Fn:
    (sh, sw), (ph, pw), groups = attrs["stride"], attrs["padding"], attrs["groups"]

    def run(x: Any, w: Any, b: Any = None) -> Any:
        n = x.shape[0]
        o, cg, kh, kw = w.shape
        xp = cp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        oh = (x.shape[2] + 2 * ph - kh) // sh + 1
        ow = (x.shape[3] + 2 * pw - kw) // sw + 1
        wg = w.reshape(groups, o // groups, cg, kh, kw)
        out = cp.zeros((n, groups, o // groups, oh, ow), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
                patch = patch.reshape(n, groups, cg, oh, ow)
                out += cp.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
        out = out.reshape(n, o, oh, ow)
        return out if b is None else out + b[None, :, None, None]

    return run


def _pool(node: Node, attrs: Mapping[str, Any]) -> Fn:
    (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"], attrs["padding"]
    is_max = node.op == "max_pool2d"

    def run(x: Any) -> Any:
        fill = -cp.inf if is_max else 0
        xp = cp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
        oh = (x.shape[2] + 2 * ph - kh) // sh + 1
        ow = (x.shape[3] + 2 * pw - kw) // sw + 1
        ones = cp.pad(cp.ones(x.shape[2:], x.dtype), ((ph, ph), (pw, pw)))
        out, count = None, None
        for i in range(kh):
            for j in range(kw):
                win = (slice(i, i + sh * (oh - 1) + 1, sh), slice(j, j + sw * (ow - 1) + 1, sw))
                patch = xp[(slice(None), slice(None), *win)]
                if is_max:
                    out = patch if out is None else cp.maximum(out, patch)
                else:
                    out = patch if out is None else out + patch
                    count = ones[win] if count is None else count + ones[win]
        return out if is_max else out / count

    return run


def node_fn(node: Node) -> Fn:
    """A closure computing `node` from its operands' CuPy arrays."""
    op, attrs = node.op, attrs_with_defaults(node)
    if op in UNARY:
        return UNARY[op]
    if op in BINARY:
        return BINARY[op]
    simple: dict[str, Fn] = {
        "gelu": lambda x: _gelu(x, str(attrs["approximate"])),
        "scale": lambda x: x * float(attrs["factor"]),
        "cast": lambda x: x.astype(DTYPES[str(attrs["dtype"])]),
        "sum": lambda x: cp.sum(x, axis=attrs.get("axes"), keepdims=attrs["keepdims"]),
        "mean": lambda x: cp.mean(x, axis=attrs.get("axes"), keepdims=attrs["keepdims"]),
        "max": lambda x: cp.max(x, axis=attrs.get("axes"), keepdims=attrs["keepdims"]),
        "softmax": lambda x: _softmax(x, int(attrs["axis"])),
        "rms_norm": lambda x, w: x / cp.sqrt(cp.mean(x * x, -1, keepdims=True) + attrs["eps"]) * w,
        "layer_norm": lambda x, w, b: (
            (x - cp.mean(x, -1, keepdims=True))
            / cp.sqrt(cp.var(x, -1, keepdims=True) + attrs["eps"])
            * w
            + b
        ),
        "matmul": lambda a, b: cp.matmul(
            cp.swapaxes(a, -1, -2) if attrs["transpose_a"] else a,
            cp.swapaxes(b, -1, -2) if attrs["transpose_b"] else b,
        ),
        "reshape": lambda x: x.reshape(attrs["shape"]),
        "transpose": lambda x: cp.transpose(x, attrs["perm"]),
        "concat": lambda *xs: cp.concatenate(xs, axis=int(attrs["axis"])),
        "get_rows": lambda t, ids: t.reshape(-1, t.shape[-1])[ids],
        "kv_cache_write": _kv_cache_write,
    }
    if op in simple:
        return simple[op]
    if op == "slice":
        axis, start, end = int(attrs["axis"]), int(attrs["start"]), int(attrs["end"])
        return lambda x: x[(slice(None),) * (axis % x.ndim) + (slice(start, end),)]
    makers = {"attention": _attention, "rope": _rope, "conv2d": _conv2d}
    if op in makers:
        return makers[op](node, attrs)
    if op in ("max_pool2d", "avg_pool2d"):
        return _pool(node, attrs)
    if op == "fused" and node.body is not None:
        body = node.body
        inner = [(n, node_fn(n)) for n in body.nodes]

        def run(*args: Any) -> Any:
            env = dict(zip(body.params, args))
            for n, fn in inner:
                env[n.name] = fn(*(env[o] for o in n.operands))
            return env[body.result]

        return run
    raise NotImplementedError(f"cupy interpreter: no implementation of '{op}'")


class CupyModel:
    """`graph` as a list of CuPy closures; calling it runs every node in issue order."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.steps = [(n.name, n.operands, node_fn(n)) for n in graph.nodes if not n.is_event]

    def __call__(self, env: Mapping[str, Any]) -> dict[str, Any]:
        values = dict(env)
        for name, operands, fn in self.steps:
            values[name] = fn(*(values[o] for o in operands))
        return {o: values[o] for o in self.graph.output_names()}
