"""Cost estimates of the ops (bytes moved, flops) and a roofline time model per device.

Every cost function has the signature `cost(node, operand_types, result_type, attrs) -> Cost`, with
`attrs` resolved as for the type rules (`ops.py` picks the function from the op table; an
elementwise op's is `per_element(flops)`, its flops declared in `op_elementwise`). Bytes are
what the op reads plus what it writes in device memory; views move nothing. Flops count
multiply-adds as two. These are estimates for scheduling decisions (critical path, whether a fork
pays), not measurements.

`estimate_seconds(cost, dtype, profile)` is the roofline: launch overhead plus the larger of the
memory time and the compute time (`roofline_seconds`). Stream assignment's fork cost model
(`analysis/fork_cost.py`) uses the roofline with the profile's measured launch figures instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optgraph.ir.graph import AttrValue, Node, TensorType

Attrs = Mapping[str, AttrValue]
Types = Sequence[TensorType]


@dataclass(frozen=True)
class Cost:
    """Bytes read plus written, and floating-point operations."""

    bytes: int
    flops: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.bytes + other.bytes, self.flops + other.flops)


@dataclass(frozen=True)
class DeviceProfile:
    """Round public figures of a GPU for the roofline model, and measured launch figures for the
    fork cost model of `assign-streams` (see `analysis/fork_cost.py` and docs/results/)."""

    name: str
    memory_bandwidth: float  # bytes / s
    peak_flops_f32: float  # flops / s, CUDA cores
    peak_flops_f16: float  # flops / s, dense tensor cores (f16 and bf16)
    launch_overhead: float  # s per kernel node in a replayed CUDA graph
    # Measured in replayed CUDA graphs with PDL between the kernels of a stream:
    kernel_latency: float = 4.4e-6  # s: the least time a small kernel takes on one stream
    wait_latency: float = 4.4e-6  # s: what one cross-stream dependency (record + wait) costs
    kernel_spacing: float = 2.2e-6  # s: least device time per kernel when streams overlap


# Datasheet figures of the SXM parts (dense, no sparsity). The launch overhead is that of a kernel
# node in a replayed CUDA graph, which is how optgraph runs programs. The three launch figures were
# calibrated on an H100 with benchmarks/bench_stream_threshold.py (the H200 takes the H100's); the
# timings behind each: docs/results/2026-11-21-h100-fork-cost-calibration.md, "Where the
# DeviceProfile launch figures come from".
# - kernel_latency: one stream's time per launch of the models' small kernels, well above an empty
#   kernel's in a PDL chain: real small kernels cost more than the roofline says, so the model's
#   latencies are in their units.
# - wait_latency: far above what an empty-kernel chain pays per cross-stream edge. The timed
#   decisions favour a somewhat lower value (inception's one-convolution branch then forks, which
#   measured faster), but much lower waits fork the decodes' v branches, which measured slower than
#   one stream. The value kept is the one at which every decision on the timed models was itself
#   timed: just below it MoE's shared expert forks too, an assignment not timed.
# - kernel_spacing: moe_block's time per kernel on four streams; no decision on the timed models
#   changes anywhere between the empty-kernel spacing and this value.
H100 = DeviceProfile("H100", 3.35e12, 67e12, 989e12, 2e-6)
H200 = DeviceProfile("H200", 4.8e12, 67e12, 989e12, 2e-6)
DEVICE_PROFILES: Mapping[str, DeviceProfile] = {"H100": H100, "H200": H200}


def roofline_seconds(cost: Cost, dtype: str, profile: DeviceProfile) -> float:
    """The larger of the memory time and the compute time at the device's peaks."""
    peak = profile.peak_flops_f16 if dtype in ("f16", "bf16") else profile.peak_flops_f32
    return max(cost.bytes / profile.memory_bandwidth, cost.flops / peak)


def estimate_seconds(cost: Cost, dtype: str, profile: DeviceProfile) -> float:
    """Roofline time of one kernel: launch + max(memory time, compute time)."""
    return profile.launch_overhead + roofline_seconds(cost, dtype, profile)


def _io_bytes(types: Types, result: TensorType) -> int:
    return sum(t.nbytes for t in types) + result.nbytes


# Flops per input element of the reductions and normalizations.
REDUCTION_FLOPS: Mapping[str, int] = {
    "argmax": 1,
    "cumsum": 1,
    "layer_norm": 8,
    "log_softmax": 6,
    "max": 1,
    "mean": 1,
    "rms_norm": 5,
    "softmax": 6,
    "sum": 1,
}


def per_element(flops: int) -> Callable[[Node, Types, TensorType, Attrs], Cost]:
    """The cost of an elementwise op that does `flops` per result element (its declaration in
    `op_elementwise` says how many; transcendentals cost a few)."""

    def elementwise(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
        return Cost(_io_bytes(types, result), result.numel * flops)

    return elementwise


def reduction(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    return Cost(_io_bytes(types, result), types[0].numel * REDUCTION_FLOPS[node.op])


def matmul(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    a = types[0]
    k = a.shape[-2] if attrs.get("transpose_a") else a.shape[-1]
    # result is [..batch, M, N]: numel = batch·M·N
    return Cost(_io_bytes(types, result), 2 * result.numel * k)


def view(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    return Cost(0, 0)


def copy_result(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """concat, copy, prefetch: read and write the result's bytes once."""
    return Cost(2 * result.nbytes, 0)


def dequantize(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """Read the stored blocks, write the floats: a scale and a code per element."""
    return Cost(types[0].nbytes + result.nbytes, 2 * result.numel)


def get_rows(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """Reads only the gathered rows (and the ids), writes them."""
    return Cost(types[1].nbytes + 2 * result.nbytes, 0)


def moe(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """x, logits and the result, and the experts the tokens can select: min(E, T·k) of each
    stack's E (a decode step reads k experts' rows, never all E). Flops: the k experts' three
    products a token (2·3·H·F), their activation and weighting, and the routing (softmax and
    selection over E). A node holding some experts (`experts = [lo, hi]`) does its share of
    the k products, (hi - lo) / E of them on average."""
    x, logits = types[0], types[1]
    held = 2 if len(types) in (4, 6) else 3  # stacks: gate_up or gate and up, then down
    stacks, biases = types[2 : 2 + held], types[2 + held :]
    tokens, hidden = x.shape
    experts, ffn = stacks[-1].shape[0], stacks[-1].shape[2]
    scored = logits.shape[1]
    k = attrs["k"]
    assert isinstance(k, int)
    used = min(experts, tokens * k)
    stack_bytes = sum(t.nbytes for t in (*stacks, *biases)) * used // experts if experts else 0
    products = tokens * k * experts // max(1, scored)
    flops = products * (6 * hidden * ffn + 8 * ffn + 2 * hidden) + tokens * 6 * scored
    return Cost(x.nbytes + logits.nbytes + result.nbytes + stack_bytes, flops)


def kv_cache_write(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """In place: reads the new rows and the position, writes the rows."""
    return Cost(2 * types[1].nbytes + types[2].nbytes, 0)


def rope(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    return Cost(_io_bytes(types, result), 6 * result.numel)


def attention(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """QK^T and PV: 2·2·B·Hq·Sq·Skv·D, plus the softmax over the scores. With a window each row
    scores at most W keys; the bytes still count all of k and v (what the kernels may read)."""
    b, hq, sq, d = types[0].shape
    skv = types[1].shape[2]
    window = attrs.get("window", 0)
    keys = min(skv, window) if isinstance(window, int) and window > 0 else skv
    scores = b * hq * sq * keys
    return Cost(_io_bytes(types, result), 4 * scores * d + 6 * scores)


def conv2d(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """2·N·O·OH·OW·(C/groups)·KH·KW, plus the bias."""
    _, cg, kh, kw = types[1].shape
    flops = 2 * result.numel * cg * kh * kw
    if len(types) == 3:
        flops += result.numel
    return Cost(_io_bytes(types, result), flops)


def resize(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """Each output reads one input element (nearest) or four and blends them (linear)."""
    linear = attrs.get("mode") == "linear"
    return Cost(_io_bytes(types, result), result.numel * (8 if linear else 1))


def pool2d(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    kernel = attrs.get("kernel", (1, 1))
    assert isinstance(kernel, tuple)
    return Cost(_io_bytes(types, result), result.numel * math.prod(kernel))
