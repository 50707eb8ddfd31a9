"""Run any optgraph graph op by op in PyTorch, so the same model is timed in every system.

This is a benchmark baseline, not part of optgraph: nothing under `optgraph/` imports it, and
PyTorch is needed only where it runs.

    model = TorchModel(graph, device="cuda")
    env = model.tensors(inputs, weights)       # NumPy arrays -> device tensors, by name
    outputs = model(env)                        # {output name: tensor}, in the graph's order

`TorchModel` turns each node into a small closure once (attributes resolved, constants such as
RoPE frequencies precomputed), so `__call__` is a plain loop of PyTorch calls: "PyTorch eager".
The same callable is captured with `torch.cuda.graph` ("PyTorch CUDA graph") and handed to
`torch.compile` by `benchmarks/bench_gpu.py`. A `fused` node runs its body op by op.

Numerics follow PyTorch habits rather than the reference interpreter: ops compute in their own
dtype (f16 stays f16), so results agree with the reference within f16 tolerance. Runtime scalars
(`pos`, `kv_len`) stay on the device: no `.item()`, nothing that breaks capture. `kv_cache_write`
writes into the cache in place when nothing else reads the old cache (what a real decoder does);
otherwise it copies. Not handled: an attention row that sees no key gives NaN here (the reference
gives zeros).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from optgraph.ir.graph import Graph, Node
from optgraph.ir.ops import attrs_with_defaults

Fn = Callable[..., torch.Tensor]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i32": torch.int32,
    "i64": torch.int64,
    "bool": torch.bool,
}

_UNARY: dict[str, Fn] = {
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "silu": F.silu,
}
_BINARY: dict[str, Fn] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
}


def _dims(attrs: Mapping[str, Any], rank: int) -> list[int] | None:
    axes = attrs.get("axes")
    return None if axes is None else [a % rank for a in axes]


def _reduce(node: Node, rank: int) -> Fn:
    attrs = attrs_with_defaults(node)
    dims, keep = _dims(attrs, rank), bool(attrs["keepdims"])
    dims = list(range(rank)) if dims is None else dims
    if node.op == "sum":
        return lambda x: torch.sum(x, dim=dims, keepdim=keep)
    if node.op == "mean":
        return lambda x: torch.mean(x, dim=dims, keepdim=keep)
    return lambda x: torch.amax(x, dim=dims, keepdim=keep)


def _rms_norm(eps: float) -> Fn:
    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        scale = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return (xf * scale).to(x.dtype) * w

    return run


def _rope(theta: float, head_dim: int, device: torch.device) -> Fn:
    half = head_dim // 2
    inv_freq = torch.tensor(
        theta ** (-2.0 * np.arange(half, dtype=np.float64) / head_dim),
        dtype=torch.float32,
        device=device,
    )

    def run(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        angles = pos.float()[:, None] * inv_freq[None, :]  # [S, D/2]
        cos = angles.cos()[None, :, None, :].to(x.dtype)
        sin = angles.sin()[None, :, None, :].to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    return run


def _refuse_attention_extras(node: Node, attrs: Mapping[str, Any]) -> None:
    """This baseline runs causal / kv_len[1] attention only; say so rather than differ."""
    extras = attrs["masked"] or attrs["window"] or attrs["softcap"]
    if extras or (attrs["causal"] and attrs["causal_align"] != "bottom_right"):
        raise NotImplementedError(f"attention %{node.name}: masks, windows, softcap, top-left")


def _attention(node: Node, q_shape: Sequence[int], kv_shape: Sequence[int], device: Any) -> Fn:
    attrs = attrs_with_defaults(node)
    _refuse_attention_extras(node, attrs)
    sq, d, skv = q_shape[2], q_shape[3], kv_shape[2]
    scale = attrs.get("scale")
    factor = 1.0 / math.sqrt(d) if scale is None else float(scale)
    causal = bool(attrs["causal"])
    group = q_shape[1] // kv_shape[1]
    keys = torch.arange(skv, device=device)[None, :]
    rows = torch.arange(sq, device=device)[:, None]

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *kv_len: torch.Tensor) -> Any:
        if group > 1:
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        mask = None
        if kv_len:
            length = kv_len[0].reshape(()).to(torch.int64)
            mask = keys < length
            if causal:
                mask = mask & (keys <= length - sq + rows)
        elif causal:
            mask = keys <= skv - sq + rows
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=factor)

    return run


def _kv_cache_write(rows: int, in_place: bool) -> Fn:
    def run(cache: torch.Tensor, new: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        index = pos.reshape(1).to(torch.int64) + torch.arange(rows, device=pos.device)
        if in_place:
            return cache.index_copy_(2, index, new)
        return cache.index_copy(2, index, new)

    return run


def _pool(node: Node) -> Fn:
    attrs = attrs_with_defaults(node)
    kernel, stride, padding = (list(attrs[k]) for k in ("kernel", "stride", "padding"))
    if node.op == "max_pool2d":
        return lambda x: F.max_pool2d(x, kernel, stride, padding)
    return lambda x: F.avg_pool2d(x, kernel, stride, padding, count_include_pad=False)


def node_fn(node: Node, shapes: Sequence[Sequence[int]], device: Any, in_place: bool) -> Fn:
    """A closure computing `node` from its operand tensors (attributes resolved once)."""
    op, attrs = node.op, attrs_with_defaults(node)
    assert node.type is not None
    if op in _UNARY:
        return _UNARY[op]
    if op in _BINARY:
        return _BINARY[op]
    if op == "gelu":
        mode = "tanh" if attrs["approximate"] == "tanh" else "none"
        return lambda x: F.gelu(x, approximate=mode)
    if op == "scale":
        factor = float(attrs["factor"])
        return lambda x: x * factor
    if op == "cast":
        dtype = TORCH_DTYPES[str(attrs["dtype"])]
        return lambda x: x.to(dtype)
    if op == "argmax":
        axis, keep = int(attrs["axis"]), bool(attrs["keepdims"])
        return lambda x: torch.argmax(x, dim=axis, keepdim=keep)
    if op in ("sum", "mean", "max"):
        return _reduce(node, len(shapes[0]))
    if op == "softmax":
        axis = int(attrs["axis"])
        return lambda x: torch.softmax(x, dim=axis)
    if op == "rms_norm":
        return _rms_norm(float(attrs["eps"]))
    if op == "layer_norm":
        eps, width = float(attrs["eps"]), shapes[0][-1]
        return lambda x, w, b: F.layer_norm(x, (width,), w, b, eps)
    if op == "matmul":
        ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
        return lambda a, b: torch.matmul(a.mT if ta else a, b.mT if tb else b)
    if op == "reshape":
        shape = list(attrs["shape"])
        return lambda x: x.reshape(shape)
    if op == "transpose":
        perm = list(attrs["perm"])
        return lambda x: x.permute(perm)
    if op == "slice":
        axis, start, end = int(attrs["axis"]), int(attrs["start"]), int(attrs["end"])
        return lambda x: x.narrow(axis, start, end - start)
    if op == "concat":
        axis = int(attrs["axis"])
        return lambda *xs: torch.cat(xs, dim=axis)
    if op == "get_rows":
        width = shapes[0][-1]
        out_shape = list(node.type.shape)
        return lambda t, ids: torch.index_select(t.reshape(-1, width), 0, ids.reshape(-1)).reshape(
            out_shape
        )
    if op == "rope":
        return _rope(float(attrs["theta"]), shapes[0][-1], torch.device(device))
    if op == "attention":
        return _attention(node, shapes[0], shapes[1], device)
    if op == "kv_cache_write":
        return _kv_cache_write(shapes[1][2], in_place)
    if op == "conv2d":
        stride, padding, groups = (
            list(attrs["stride"]),
            list(attrs["padding"]),
            int(attrs["groups"]),
        )
        return lambda x, w, *b: F.conv2d(x, w, b[0] if b else None, stride, padding, 1, groups)
    if op in ("max_pool2d", "avg_pool2d"):
        return _pool(node)
    if op in ("copy", "prefetch"):
        return lambda x: x.clone()
    if op == "fused":
        return _fused_fn(node, shapes, device)
    raise NotImplementedError(f"torch interpreter: no lowering for '{op}'")


def _fused_fn(node: Node, shapes: Sequence[Sequence[int]], device: Any) -> Fn:
    assert node.body is not None
    body = node.body
    known: dict[str, Sequence[int]] = dict(zip(body.params, shapes))
    steps: list[tuple[str, Fn, tuple[str, ...]]] = []
    for inner in body.nodes:
        assert inner.type is not None
        fn = node_fn(inner, [known[o] for o in inner.operands], device, in_place=False)
        steps.append((inner.name, fn, inner.operands))
        known[inner.name] = inner.type.shape

    def run(*args: torch.Tensor) -> torch.Tensor:
        env = dict(zip(body.params, args))
        for name, fn, operands in steps:
            env[name] = fn(*(env[o] for o in operands))
        return env[body.result]

    return run


class TorchModel:
    """A graph as a list of PyTorch closures; call it with a dict of named tensors."""

    def __init__(self, graph: Graph, device: str = "cuda"):
        self.graph = graph
        self.device = device
        types = graph.value_types()
        users = graph.users()
        outputs = set(graph.output_names())
        self.steps: list[tuple[str, Fn, tuple[str, ...]]] = []
        for index, node in graph.compute_nodes():
            shapes = [types[o].shape for o in node.operands]
            in_place = (
                node.op == "kv_cache_write"
                and users.get(node.operands[0], []) == [index]
                and node.operands[0] not in outputs
            )
            self.steps.append((node.name, node_fn(node, shapes, device, in_place), node.operands))
        self.output_names = graph.output_names()

    def tensors(
        self, inputs: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]
    ) -> dict[str, torch.Tensor]:
        """NumPy inputs and weights as device tensors of the declared dtypes."""
        env: dict[str, torch.Tensor] = {}
        for decl in (*self.graph.inputs, *self.graph.weights):
            source = inputs if decl.name in inputs else weights
            array = np.ascontiguousarray(source[decl.name])
            if decl.type.dtype == "bf16":
                array = array.astype(np.float32)
            # A copy: kv_cache_write may write into an input in place.
            tensor = torch.tensor(array, device=self.device)
            env[decl.name] = tensor.to(TORCH_DTYPES[decl.type.dtype])
        return env

    def __call__(self, env: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        values = dict(env)
        for name, fn, operands in self.steps:
            values[name] = fn(*(values[o] for o in operands))
        return {name: values[name] for name in self.output_names}


class TorchModule(torch.nn.Module):
    """A `TorchModel` with its weights held as (frozen) parameters, called with the inputs only.

    Parameters are what `torch.compile`'s CUDA graphs treat as static: weights passed as plain
    inputs would be copied into the graph's buffers on every replay.
    """

    def __init__(self, model: TorchModel, weights: Mapping[str, torch.Tensor]):
        super().__init__()
        self.model = model
        self.keys = {name: name.replace(".", "__") for name in weights}
        self.params = torch.nn.ParameterDict(
            {
                key: torch.nn.Parameter(weights[name], requires_grad=False)
                for name, key in self.keys.items()
            }
        )

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        env = dict(inputs)
        for name, key in self.keys.items():
            env[name] = self.params[key]
        return self.model(env)


def to_numpy(outputs: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Outputs copied to the host (bf16 widened to float32)."""
    result = {}
    for name, t in outputs.items():
        t = t.detach().cpu()
        result[name] = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return result


# -- the PyTorch variants of the head-to-head table ------------------------------------------------

COMPILE_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")


def cuda_graph_runner(
    model: Callable[[Any], Any], env: Mapping[str, torch.Tensor]
) -> Callable[[], Any]:
    """`torch.cuda.graph` of the eager path: captured once (after warm-up on a side stream)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(env)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        model(env)
    return graph.replay


def compiled_runner(
    model: torch.nn.Module, env: Mapping[str, torch.Tensor], mode: str
) -> tuple[Callable[[], Any], float]:
    """(`torch.compile(model, mode=mode)` after warm-up, compile seconds)."""
    import time

    torch._dynamo.reset()
    fn = torch.compile(model, mode=mode, dynamic=False)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
            fn(env)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start

    def run() -> Any:
        with torch.no_grad():
            return fn(env)

    return run, seconds


def eager_runner(model: Callable[[Any], Any], env: Mapping[str, torch.Tensor]) -> Callable[[], Any]:
    def run() -> Any:
        with torch.no_grad():
            return model(env)

    return run


def time_us(fn: Callable[[], Any], iters: int = 50, repeats: int = 5) -> float:
    """Median over `repeats` of (CUDA-event time of `iters` back-to-back calls) / iters, in µs."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / iters)
    return float(np.median(samples))
