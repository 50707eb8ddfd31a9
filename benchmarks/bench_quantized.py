"""Quantized weights on the GPU: Llama decode and prefill steps with f16, Q8_0 and Q4_K_M
weights, against their floors, the f16 step and llama.cpp.

    python benchmarks/bench_quantized.py [--only llama_real,llama_prefill_512,llama_launch]
        [--weights f16,q8_0,q4_k_m] [--iters 200] [--warmup 20] [--no-check] [--no-before]
        [--markdown FILE]

Models (head_to_head's sizes): `llama_real` (decode, 8 layers, hidden 4096, GQA 32/8, FFN
14336, vocab 32000, KV 1024, f16 activations), `llama_prefill_512` (the same sizes, 512 tokens,
causal) and `llama_launch` (the launch-bound decode: hidden 512, 8/2 heads, FFN 1376, vocab
1024, KV 128). Weights (`harness/quantized_models.py`): `f16`; `q8_0`, every matrix; `q4_k_m`,
llama.cpp's Q4_K_M mix (q4_k, q6_k for the logits head and for attn_v and ffn_down of layers 0,
3, 6 and 7; the launch-bound shape's ffn_down, 1376 values a row, falls back to q5_0 / q8_0 as
llama.cpp's does). Matrices stored `[out, in]`, as GGUF stores them; every program compiled with
the default pipeline for cuda and called as a bound step (one CUDA-graph replay), KV caches
updated in place; CUDA events around each step, the median of `--iters` after `--warmup`
(prefill: a tenth of them).

Columns: stored weight MB (every weight's stored bytes); the floor (decode: the bytes a step
must move, head_to_head_checks.floor_bytes, over the device-to-device copy bandwidth measured
in this run; prefill: its FLOPs over the f16 GEMM rate measured in this run); optgraph's step;
× floor; vs f16 (the same model's f16 step); llama.cpp's figure on this shape where there is one
(`LLAMA_CPP`: llama-bench on an H200, 2026-12-01); nmse: the logits of a check model against
`run_reference` on the CPU (the launch-bound model itself; for the 4096-wide sizes the first
`CHECK_LAYERS` layers of the model with its mix, a step of the same mode), marked against the
f16 bound of tests/support/gpu_support.py; the target of the issue where it sets one.
`--no-check` skips the nmse column (the table is printed once before the checks, and again
with them). Each quantized decode also gets a row `(float form)`: the same program lowered
with the quantized one-row kernel's float form (`quantized.INTEGER_DOT = False`: the weight
decoded to floats, the form before the integer dot), timed right after it (`--no-before`: none); `--also-integer q4_k,q6_k,q8_0` adds a row with
the integer-dot form for those types (`quantized.INTEGER_DOT_TYPES`: q6_k's and q8_0's are
opt-in until measured). Needs CuPy and a GPU (fake CuPy in the tests).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from benchmarks.harness.quantized_models import (
    WEIGHT_SETS,
    draw_weights,
    llama_graph,
    mix_summary,
    stored_megabytes,
)

MODELS = ("llama_real", "llama_prefill_512", "llama_launch")
PREFILL = {"llama_prefill_512"}  # compute floors, a tenth of the iterations
CHECK_LAYERS = 2  # layers of the check model of a 4096-wide model
F16_BOUND = 1e-6  # tests/support/gpu_support.py BOUNDS["f16"]
# llama.cpp on these shapes (µs; llama-bench -ngl 99 -fa 1, master of Oct 2026 for sm_90, an
# H200, 2026-12-01: the head-to-head's anchors).
LLAMA_CPP = {
    ("llama_real", "f16"): 1282.0,
    ("llama_real", "q8_0"): 1077.0,
    ("llama_real", "q4_k_m"): 1000.0,
    ("llama_prefill_512", "f16"): 8460.0,
    ("llama_prefill_512", "q4_k_m"): 15400.0,
}
# The targets: (model, weights) -> (against "floor" or "f16", at most this ratio).
TARGETS = {
    ("llama_real", "q4_k_m"): ("floor", 1.30),
    ("llama_real", "q8_0"): ("floor", 1.25),
    ("llama_prefill_512", "q4_k_m"): ("f16", 1.15),
    ("llama_launch", "q4_k_m"): ("f16", 1.00),
    ("llama_launch", "q8_0"): ("f16", 1.00),
}


def model_sizes(model: str) -> dict[str, Any]:
    """head_to_head's sizes of `model`."""
    from benchmarks.harness import head_to_head

    sizes = {
        "llama_real": head_to_head.LLAMA_REAL,
        "llama_prefill_512": head_to_head.LLAMA_PREFILL,
        "llama_launch": head_to_head.LLAMA_LAUNCH,
    }
    return dict(sizes[model])


@dataclass
class Bound:
    """A compiled program's bound step, the stream it runs on and its output arrays."""

    step: Callable[[], Any]
    stream: Any
    out: dict[str, Any]
    close: Callable[[], None]


def bind(graph: Any, inputs: dict[str, Any], weights: dict[str, Any]) -> Bound:
    """`graph` through the default pipeline for cuda, bound to device copies of `inputs` (KV
    caches written in place) with `weights`."""
    import cupy as cp

    from optgraph.api.programs import cuda_program
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import run_pipeline
    from optgraph.reference.kernels import numpy_dtype

    planned = run_pipeline(graph, "default")
    program = cuda_program(planned, weights=weights)
    dev = {k: cp.asarray(v) for k, v in inputs.items()}
    types = planned.value_types()
    in_place = in_place_candidates(planned)
    out: dict[str, Any] = {}
    for name in dict.fromkeys(planned.output_names()):
        source = in_place.get(name)
        t = types[name]
        out[name] = dev[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
    return Bound(program.bind(dev, out), program.stream, out, program.close)


def weights_on_device(graph: Any, seed: int = 0) -> dict[str, Any]:
    import cupy as cp

    return draw_weights(graph, cp, seed)


def floor_us(model: str, graph: Any, rates: dict[str, float]) -> float:
    """The step's floor in µs (module docstring)."""
    from benchmarks.harness.head_to_head_checks import compute_flops, floor_bytes

    if model in PREFILL:
        return compute_flops(graph) / rates["gemm"] * 1e6
    return floor_bytes(graph) / rates["copy"] * 1e6


def check_nmse(model: str, weight_set: str) -> str:
    """The nmse cell: the check model's logits, ours against `run_reference` (host weights)."""
    import cupy as cp
    import numpy as np

    from benchmarks.harness.head_to_head import decode_inputs
    from optgraph.reference.interpreter import nmse, run_reference

    sizes = model_sizes(model)
    layers = CHECK_LAYERS if sizes["hidden"] >= 4096 else None
    graph = llama_graph(sizes, weight_set, layers=layers)
    inputs = decode_inputs(graph)
    weights = draw_weights(graph, np, seed=1)
    bound = bind(graph, inputs, weights)  # uploaded from the host
    try:
        bound.step()
        bound.stream.synchronize()
        ours = cp.asnumpy(bound.out["logits"])
    finally:
        bound.close()
    try:
        want = run_reference(graph, inputs, weights)["logits"]
    except Exception as err:  # noqa: BLE001 - a reference that cannot run is reported, not fatal
        return f"reference: {type(err).__name__}: {str(err)[:60]}"
    if not np.all(np.isfinite(ours)):
        return "ours not finite"
    err = nmse(ours, want)
    verdict = "ok" if err <= F16_BOUND else f"> {F16_BOUND:g}"
    return f"{err:.1e} ({verdict})"


@dataclass
class Row:
    model: str
    weights: str
    stored_mb: float
    floor_us: float
    step_us: float | str
    mix: str
    nmse: str = "-"


def _ratio(a: float | str, b: float | str | None) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}×"
    return "-"


def _target(row: Row, f16: float | str | None) -> str:
    target = TARGETS.get((row.model, row.weights))
    if target is None or not isinstance(row.step_us, float):
        return "-"
    against, limit = target
    base = row.floor_us if against == "floor" else f16
    if not isinstance(base, float):
        return f"≤ {limit:.2f}× {against}: -"
    met = row.step_us / base <= limit
    return f"≤ {limit:.2f}× {against}: {'met' if met else 'missed'}"


def table(rows: list[Row], device: str, rates: dict[str, float]) -> str:
    f16 = {r.model: r.step_us for r in rows if r.weights == "f16"}
    head = (
        "| model | weights | stored weight MB | floor µs | optgraph µs | × floor | vs f16 |"
        " llama.cpp µs | nmse | target |"
    )
    first = (
        f"device: {device}; date: {datetime.date.today()}; copy bandwidth"
        f" {rates['copy'] / 1e12:.2f} TB/s (read + write); f16 GEMM {rates['gemm'] / 1e12:.0f}"
        " TFLOP/s (decode floors: bytes at the copy bandwidth; prefill: FLOPs at the GEMM rate)"
    )
    lines = [
        first,
        "",
        head,
        "|" + "---|" * 10,
    ]
    for r in rows:
        step = f"{r.step_us:,.1f}" if isinstance(r.step_us, float) else r.step_us
        anchor = LLAMA_CPP.get((r.model, r.weights))
        cells = [
            r.model, r.weights, f"{r.stored_mb:,.1f}", f"{r.floor_us:,.1f}", step,
            _ratio(r.step_us, r.floor_us), _ratio(r.step_us, f16.get(r.model)),
            f"{anchor:,.0f}" if anchor else "-", r.nmse, _target(r, f16.get(r.model)),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "stored dtypes (weights of each): "]
    seen = set()
    for r in rows:
        key = (r.model, r.weights)
        if r.weights != "f16" and BEFORE not in r.weights and key not in seen:
            seen.add(key)
            lines.append(f"- {r.model} {r.weights}: {r.mix}")
    return "\n".join(lines)


@contextmanager
def _freed() -> Iterator[None]:
    """Device memory given back to the driver's pool after the block."""
    import cupy as cp

    try:
        yield
    finally:
        gc.collect()
        cp.get_default_memory_pool().free_all_blocks()


BEFORE = " (float form)"  # rows timed with the quantized one-row kernel's float form


@contextmanager
def _one_row_layout(integer: bool, types: frozenset[str] | None = None) -> Iterator[None]:
    """`quantized.INTEGER_DOT` set to `integer` (and `INTEGER_DOT_TYPES` to `types`, None:
    the library's) while programs are lowered in the block."""
    from optgraph.codegen.kernels import quantized

    saved = quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES
    quantized.INTEGER_DOT = integer
    if types is not None:
        quantized.INTEGER_DOT_TYPES = types
    try:
        yield
    finally:
        quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES = saved


def _step_us(model: str, graph: Any, weights: dict[str, Any], args: argparse.Namespace) -> Any:
    """The median step of `graph` in µs, or the error that stopped it."""
    from benchmarks.harness.head_to_head import decode_inputs
    from benchmarks.harness.timing import median_us

    iters = args.iters if model not in PREFILL else max(3, args.iters // 10)
    warmup = args.warmup if model not in PREFILL else max(1, args.warmup // 10)
    try:
        bound = bind(graph, decode_inputs(graph), weights)
        try:
            return median_us(bound.step, bound.stream, iters, warmup)
        finally:
            bound.close()
    except Exception as err:  # noqa: BLE001 - one failed model must not hide the rest
        return f"error: {type(err).__name__}: {str(err)[:80]}"


def measure(
    models: list[str], weight_sets: list[str], args: argparse.Namespace, rates: dict[str, float]
) -> list[Row]:
    """One row per (model, weights), and with `args.before` one more per quantized decode with
    the one-row kernel's float form (`quantized.INTEGER_DOT = False`), timed right after;
    a weight set's weights are drawn once on the device and shared by the models of its sizes."""
    rows: list[Row] = []
    for weight_set in weight_sets:
        shared: dict[int, dict[str, Any]] = {}  # hidden size -> weights
        for model in models:
            sizes = model_sizes(model)
            graph = llama_graph(sizes, weight_set)
            layouts: list[tuple[str, bool, frozenset[str] | None]] = [(weight_set, True, None)]
            quantized_decode = weight_set != "f16" and model not in PREFILL
            if args.also_integer and quantized_decode:
                types = frozenset(args.also_integer.split(","))
                layouts.append((f"{weight_set} (integer {args.also_integer})", True, types))
            if args.before and quantized_decode:
                layouts.append((weight_set + BEFORE, False, None))
            for label, wide, types in layouts:
                started = time.perf_counter()
                with _freed(), _one_row_layout(wide, types):
                    weights = shared.get(sizes["hidden"])
                    if weights is None:
                        weights = shared[sizes["hidden"]] = weights_on_device(graph)
                    step = _step_us(model, graph, weights, args)
                row = Row(
                    model, label, stored_megabytes(graph), floor_us(model, graph, rates), step,
                    mix_summary(graph),
                )  # fmt: skip
                rows.append(row)
                took = time.perf_counter() - started
                shown = f"{step:,.1f}" if isinstance(step, float) else step
                print(f"  {model} {label}: {shown} µs ({took:.0f} s)", flush=True)
        shared.clear()
        with _freed():
            pass
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(MODELS), help="models, comma-separated")
    parser.add_argument("--weights", default=",".join(WEIGHT_SETS), help="weight sets")
    parser.add_argument("--iters", type=int, default=200, help="timed steps (prefill: a tenth)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument("--no-check", action="store_true", help="no nmse column")
    parser.add_argument(
        "--no-before",
        dest="before",
        action="store_false",
        help="no rows with the quantized one-row kernel's earlier layout",
    )
    parser.add_argument(
        "--also-integer",
        metavar="TYPES",
        help="one more row per quantized decode with the integer-dot form for these types "
        "(quantized.INTEGER_DOT_TYPES, e.g. q4_k,q6_k,q8_0: the opt-in forms against the default)",
    )
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)
    known = {"q4_k", "q6_k", "q8_0"}
    if args.also_integer and not set(args.also_integer.split(",")) <= known:
        parser.error(f"--also-integer: types among {sorted(known)}, not {args.also_integer}")
    models = [m for m in MODELS if m in args.only.split(",")]
    weight_sets = [w for w in WEIGHT_SETS if w in args.weights.split(",")]
    unknown = set(args.only.split(",")) - set(MODELS) | set(args.weights.split(",")) - set(
        WEIGHT_SETS
    )
    if unknown or not models or not weight_sets:
        parser.error(f"unknown or no models / weights: {sorted(unknown)}")

    from benchmarks.harness.head_to_head_checks import copy_bandwidth, gemm_rate
    from benchmarks.harness.timing import device_name, print_report

    started = time.perf_counter()
    rates = {"copy": copy_bandwidth()}
    rates["gemm"] = gemm_rate() if PREFILL & set(models) else math.nan
    rows = measure(models, weight_sets, args, rates)
    device = device_name()
    if not args.no_check:  # the timings first: a run stopped during the checks still has them
        print(f"timings ({time.perf_counter() - started:.0f} s):")
        print_report(table(rows, device, rates), args.markdown)
        for row in rows:
            if BEFORE in row.weights or (row.weights == "f16" and row.model in PREFILL):
                continue  # the same reference as a row checked
            row.nmse = check_nmse(row.model, row.weights)
            print(f"  check {row.model} {row.weights}: {row.nmse}", flush=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    print_report(table(rows, device, rates), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
