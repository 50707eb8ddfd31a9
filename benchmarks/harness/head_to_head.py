"""The head-to-head suite of bench_gpu.py: optgraph against PyTorch on the same graphs.

    python benchmarks/bench_gpu.py --suite head-to-head [--only NAME] [--markdown FILE]

Models: a launch-bound Llama decode step (8 layers, hidden 512, 8/2 heads, KV 128), a realistic
one (f16, batch 1, 8 layers, hidden 4096, 32/8 heads, FFN 14336, vocab 32000, KV length 1024), a
prefill of 512 tokens with the realistic sizes, and the inception and MoE example blocks at
batch 1. Decode steps attend over the full cache (`pos` = cache length − 1, `kv_len` = cache
length). Big weights are drawn on the device (norm weights ~ 1 + 0.1·N, matrices ~ N/√fan-in),
since drawing 3.7 GB on the host would take longer than the whole benchmark.

Variants (`suite_variants`): CuPy eager, PyTorch eager (`torch_interpreter.py`, op by op),
PyTorch CUDA graph (`torch.cuda.graph` of the eager path), `torch.compile` in the modes
`max-autotune-no-cudagraphs` and `reduce-overhead` (weights as frozen parameters, so CUDA graphs
treat them as static; each compile gets `COMPILE_LIMIT_S` seconds, after which it is reported as a
timeout; these variants live in head_to_head_variants.py), optgraph with fusion on one stream and
with fusion and streams, and the fused variant with the one-row matrix-vector kernel turned off
(`og-fused-1s-cublas`: cuBLAS plus one epilogue kernel). `ONLY_ON` limits a few variants to some
models, to keep the whole suite within a few minutes of GPU time. For the decode steps,
`kernel_profile` (CUPTI through torch.profiler) splits a run into the GPU time of each kernel family
and the rest (gaps, host issue).

The floors (head_to_head_checks.py): a decode step's is the bytes it must move divided by the
device-to-device copy bandwidth measured in the same run; the prefill's is its FLOPs divided by
the f16 GEMM rate measured in the same run. The agreement column runs optgraph, PyTorch eager
and CuPy eager each on fresh copies of the inputs and of the weights (drawn again from their
seed) and names weights that a timed variant changed. `og-fused-1s-<tag>` variants turn the
prefill's bandwidth kernels off one at a time (`head_to_head_variants.PREFILL_SETTINGS`;
`og-fused-1s-scalar`: all of them).
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cupy as cp
import numpy as np

from benchmarks.harness.gpu_variants import (
    FUSED_CHAINS,
    FUSED_ONE_STREAM,
    ONE_STREAM,
    Model,
    Variant,
    cupy_eager,
    optgraph_variant,
)
from benchmarks.harness.head_to_head_checks import (
    agreement,
    changed_weights,
    compute_flops,
    copy_bandwidth,
    floor_bytes,
    gemm_rate,
    rate_line,
    weight_fingerprint,
)
from benchmarks.harness.head_to_head_variants import (
    COMPILE_SECONDS,
    codegen_setting_variant,
    cublas_variant,
    kernel_profile,
    prefill_variants,
    release_torch_model,
    torch_eager_outputs,
    torch_variant,
)
from benchmarks.harness.timing import device_name, median_us, results_table
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import random_inputs
from optgraph.reference.kernels import numpy_dtype

ROOT = Path(__file__).resolve().parents[2]

# Variants run on some models only (time on the GPU machine is scarce): the autotuning compile
# on the decode steps the anchors measured, the cuBLAS comparison on the one-row products.
ONLY_ON = {
    "torch-compile": {"llama_launch", "llama_real"},
    "torch-compile-ro": {"llama_launch", "llama_real"},
    "og-fused-1s-cublas": {"llama_launch", "llama_real"},
    "og-fused-1s-nomerge": {"llama_launch", "llama_real"},
    "og-fused-1s-old-decode-attn": {"llama_launch", "llama_real"},
    "og-fused-1s-nopdl-old-decode-attn": {"llama_launch", "llama_real"},
    "og-fused-1s-tiled-attn": {"llama_prefill_512"},
    **{v.name: {"llama_prefill_512"} for v in prefill_variants(lambda model: None)},
}
ORDER = ("llama_real", "llama_launch", "moe_block", "inception_block", "llama_prefill_512")
LLAMA_LAUNCH = {
    "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1376, "vocab": 1024,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 128, "mode": "decode",
}  # fmt: skip
LLAMA_REAL = {
    "layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 32000,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 1024, "mode": "decode",
}  # fmt: skip
LLAMA_PREFILL = {**LLAMA_REAL, "seq": 512, "cache_len": 512, "mode": "prefill"}
ITERS = {"llama_real": 40, "llama_prefill_512": 20}  # big models: fewer timed runs
COMPUTE_FLOORS = {"llama_prefill_512"}  # the floor is FLOPs at the GEMM rate, not bytes
PROFILED = {
    "llama_launch": "og-fused-1s",
    "llama_real": "og-fused-1s",
    "llama_prefill_512": "og-fused-1s",
}  # kernel breakdowns
ATTENTION = "kernels.attention.variants"  # the attention settings' module, under optgraph.codegen


def device_weights(graph: Graph, seed: int = 0) -> dict[str, Any]:
    """Seeded weights drawn on the GPU (see the module docstring for the distributions)."""
    rng = cp.random.default_rng(seed)
    out: dict[str, Any] = {}
    for w in graph.weights:
        shape, dtype = w.type.shape, numpy_dtype(w.type.dtype)
        values = rng.standard_normal(shape, dtype=cp.float32)
        if len(shape) == 1:
            values = 1.0 + 0.1 * values
        else:
            values = values / math.sqrt(shape[-2])
        out[w.name] = values.astype(dtype)
        del values
    return out


def decode_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """The reference's seeded inputs, with the cache full: pos = length − 1, kv_len = length."""
    inputs = random_inputs(graph, seed)
    caches = [i for i in graph.inputs if i.name.endswith("k_cache")]
    if caches and "pos" in inputs and "kv_len" in inputs:
        length = caches[0].type.shape[2]
        seq = inputs["pos"].shape[0]
        inputs["pos"] = np.arange(length - seq, length, dtype=inputs["pos"].dtype)
        inputs["kv_len"] = np.array([length], dtype=inputs["kv_len"].dtype)
    return inputs


# -- the suite -----------------------------------------------------------------------------------


def suite_variants() -> list[Variant]:
    """Every variant of the suite, in table order (`--variants` picks some by name)."""
    fused_1s = optgraph_variant(FUSED_ONE_STREAM, True)
    fused_1s_nopdl = optgraph_variant(FUSED_ONE_STREAM, True, pdl=False)
    no_prologue = FUSED_ONE_STREAM.replace("fuse,", "fuse{row-prologues=false},", 1)
    return [
        Variant("cupy-eager", "CuPy, op by op", cupy_eager),
        Variant("torch-eager", "PyTorch eager, op by op", torch_variant("eager")),
        Variant("torch-graph", "torch.cuda.graph of the eager path", torch_variant("graph")),
        Variant(
            "torch-compile",
            'torch.compile(mode="max-autotune-no-cudagraphs")',
            torch_variant("max-autotune-no-cudagraphs"),
        ),
        Variant(
            "torch-compile-ro",
            'torch.compile(mode="reduce-overhead")',
            torch_variant("reduce-overhead"),
        ),
        Variant(
            "og-1s", "optgraph, CUDA graph, 1 stream, no fusion", optgraph_variant(ONE_STREAM, True)
        ),
        Variant("og-fused-1s", "optgraph, fusion, 1 stream", fused_1s),
        Variant(
            "og-fused-1s-nomerge",
            "og-fused-1s with one launch per kernel (no merged launches)",
            optgraph_variant(FUSED_ONE_STREAM, True, merge=False),
        ),
        Variant(
            "og-fused-1s-noprologue",
            "og-fused-1s with fuse{row-prologues=false}: norms as kernels of their own, SwiGLU's mul"
            " in the gate product",
            optgraph_variant(no_prologue, True),
        ),
        Variant(
            "og-fused-1s-prefetch",
            "og-fused-1s with the one-row products' L2 weight prefetch before the PDL wait",
            codegen_setting_variant(fused_1s, "PREFETCH", True),
        ),
        Variant(
            "og-fused-1s-run",
            "og-fused-1s called through program.run(inputs, out=out) (the arrays checked and the"
            " graph picked every call) instead of the bound step",
            optgraph_variant(FUSED_ONE_STREAM, True, bound=False),
        ),
        Variant(
            "og-fused-1s-nopdl",
            "og-fused-1s without Programmatic Dependent Launch (plain launches: kernel profiles"
            " then give each kernel's own duration)",
            fused_1s_nopdl,
        ),
        Variant(
            "og-fused-1s-old-decode-attn",
            "og-fused-1s with decode attention on the earlier split-KV kernel of a warp per key"
            " row (variants.WIDE_DECODE = False)",
            codegen_setting_variant(fused_1s, "WIDE_DECODE", False, module=ATTENTION),
        ),
        Variant(
            "og-fused-1s-nopdl-old-decode-attn",
            "og-fused-1s-nopdl with the earlier decode attention kernel (WIDE_DECODE = False)",
            codegen_setting_variant(fused_1s_nopdl, "WIDE_DECODE", False, module=ATTENTION),
        ),
        Variant(
            "og-fused-streams", "optgraph, fusion + streams", optgraph_variant(FUSED_CHAINS, True)
        ),
        Variant(
            "og-fused-streams-nopdl",
            "og-fused-streams without Programmatic Dependent Launch (plain launches)",
            optgraph_variant(FUSED_CHAINS, True, pdl=False),
        ),
        Variant(
            "og-fused-1s-tiled-attn",
            "og-fused-1s with prefill attention on the tiled CUDA-core kernel, as before the"
            " tensor-core path became the default (variants.GEMM_PREFILL_MIN_ROWS = 0)",
            codegen_setting_variant(fused_1s, "GEMM_PREFILL_MIN_ROWS", 0, module=ATTENTION),
        ),
        Variant(
            "og-fused-1s-cublas",
            "og-fused-1s with cuBLAS + epilogue kernel instead of the one-row kernel",
            cublas_variant(fused_1s),
        ),
        *prefill_variants(fused_1s),
    ]


def models(only: str | None) -> Iterator[Model]:
    """The suite's models, built one at a time (the big ones share their weights)."""
    from gen_llama import generate_llama

    import optgraph as og
    from optgraph.reference.interpreter import random_weights

    real_weights: dict[str, Any] | None = None
    FINGERPRINTS.clear()
    specs: dict[str, Any] = {
        "llama_launch": LLAMA_LAUNCH,
        "llama_real": LLAMA_REAL,
        "llama_prefill_512": LLAMA_PREFILL,
        "inception_block": ROOT / "examples" / "inception_block.ir",
        "moe_block": ROOT / "examples" / "moe_block.ir",
    }
    for name in ORDER:
        spec = specs[name]
        if only and not any(part in name for part in only.split(",")):
            continue
        if isinstance(spec, dict):
            graph = og.parse(generate_llama(**spec))
            if spec["hidden"] >= 4096:
                if real_weights is None:
                    real_weights = device_weights(graph)
                    FINGERPRINTS["real"] = _fingerprint(real_weights)
                weights = real_weights
                FINGERPRINTS[name] = FINGERPRINTS["real"]
            else:
                weights = device_weights(graph)
        else:
            graph = og.parse_file(spec)
            weights = random_weights(graph, 0)
        yield Model(name, graph, decode_inputs(graph), weights)


# The weights' fingerprints when each model was built (the big models share theirs: taken once).
FINGERPRINTS: dict[str, dict[str, float] | None] = {}


def _fingerprint(weights: dict[str, Any]) -> dict[str, float] | None:
    try:
        return weight_fingerprint(weights)
    except Exception:  # noqa: BLE001 - a missing fingerprint must not stop the suite
        return None


def _fresh_weights(model: Model) -> dict[str, Any]:
    """The model's weights drawn again from their seed (device_weights and random_weights are
    deterministic), so no array a timed variant touched is read."""
    from optgraph.reference.interpreter import random_weights

    if model.name in ("llama_real", "llama_prefill_512", "llama_launch"):
        return device_weights(model.graph)
    return random_weights(model.graph, 0)


def _agreement(model: Model, pipeline: str) -> str:
    """nmse of optgraph (`pipeline`) against PyTorch eager and CuPy eager, each on fresh copies
    of the inputs and weights (head_to_head_checks.agreement); where optgraph and PyTorch
    disagree, optgraph also runs without PDL and without its CUDA graph (eager launches)."""
    from optgraph.api.programs import cuda_program
    from optgraph.passes.manager import run_pipeline

    graph = run_pipeline(model.graph, pipeline)

    def ours(options: LoweringOptions | None = None) -> Callable[..., dict[str, Any]]:
        def run(inputs: dict[str, Any], weights: dict[str, Any]) -> dict[str, Any]:
            program = cuda_program(graph, weights=weights, options=options)
            try:
                return program.run(inputs)
            finally:
                program.close()

        return run

    before = FINGERPRINTS.get(model.name)
    changed = changed_weights(before, model.weights) if before else None
    diagnostics = {
        "og-nopdl": ours(LoweringOptions(pdl=False)),
        "og-eager": ours(LoweringOptions(use_graph=False)),
    }
    return agreement(
        model.graph,
        model.inputs,
        lambda: _fresh_weights(model),
        ours(),
        lambda i, w: torch_eager_outputs(model.graph, i, w),
        changed,
        diagnostics,
    )


def _num(row: dict[str, float | str], key: str) -> float | None:
    value = row.get(key)
    return value if isinstance(value, float) else None


def summary(
    results: dict[str, dict[str, float | str]],
    floors: dict[str, float],
    agreement: dict[str, str],
    bandwidth: float,
    rate: float | None = None,
) -> str:
    lines = [
        f"device-to-device copy bandwidth (read + write): {bandwidth / 1e12:.2f} TB/s",
        *([rate_line(rate)] if rate else []),
        "",
        (
            "| model | floor (µs) | best PyTorch (µs) | best optgraph (µs) | optgraph / PyTorch |"
            " optgraph / floor | fusion: og-1s / og-fused-1s | streams: og-fused-1s /"
            " og-fused-streams | one-row kernel: cuBLAS / ours | nmse og vs torch |"
            " compile s (autotune, ro) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        torch_runs = {k: t for k in row if k.startswith("torch") and (t := _num(row, k))}
        og_runs = {k: t for k in row if k.startswith("og-") and (t := _num(row, k))}
        best_t = min(torch_runs, key=torch_runs.__getitem__) if torch_runs else None
        best_o = min(og_runs, key=og_runs.__getitem__) if og_runs else None
        bt = torch_runs[best_t] if best_t else None
        bo = og_runs[best_o] if best_o else None
        one, fused1 = _num(row, "og-1s"), _num(row, "og-fused-1s")
        streams, cublas = _num(row, "og-fused-streams"), _num(row, "og-fused-1s-cublas")
        floor = floors.get(name)

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}×" if a and b else "-"

        compile_s = ", ".join(
            f"{COMPILE_SECONDS[(name, m)]:.0f}" if (name, m) in COMPILE_SECONDS else "-"
            for m in ("max-autotune-no-cudagraphs", "reduce-overhead")
        )
        cells = [
            f"{floor:.0f}" if floor else "-",
            f"{bt:.1f} ({best_t})" if bt else "-",
            f"{bo:.1f} ({best_o})" if bo else "-",
            ratio(bo, bt),
            ratio(bo, floor),
            ratio(one, fused1),
            ratio(fused1, streams),
            ratio(cublas, fused1),
            agreement.get(name, "-"),
            compile_s,
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_suite(args: argparse.Namespace, variants: list[Variant]) -> int:
    """Time every model of `args.only` × `variants`; print (and with `args.markdown` write, after
    every model) the latency table, the summary and the kernel profiles."""
    device = device_name()
    names = [v.name for v in variants]

    def table(results: dict[str, dict[str, float | str]]) -> str:
        return results_table(results, device, names, "cupy-eager")

    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    results: dict[str, dict[str, float | str]] = {}
    floors: dict[str, float] = {}
    agreement: dict[str, str] = {}
    profiles: list[str] = []
    rate: float | None = None
    for model in models(args.only):
        if model.graph.inputs and any(i.name.endswith("k_cache") for i in model.graph.inputs):
            floors[model.name] = floor_bytes(model.graph) / bandwidth * 1e6
        elif model.name in COMPUTE_FLOORS:
            rate = rate or gemm_rate()
            floors[model.name] = compute_flops(model.graph) / rate * 1e6
            print(f"f16 GEMM rate {rate / 1e12:.0f} TFLOP/s", flush=True)
        iters = min(args.iters, ITERS.get(model.name, args.iters))
        row: dict[str, float | str] = {}
        profiled = args.profile.split(",") if args.profile else [PROFILED.get(model.name)]
        to_profile: list[tuple[str, Any, Any]] = []  # profiled once the model's timing is done
        for variant in variants:
            if model.name not in ONLY_ON.get(variant.name, {model.name}):
                row[variant.name] = "not run"
                continue
            started = time.perf_counter()
            try:
                run, stream = variant.build(model)
                row[variant.name] = median_us(run, stream, iters, min(args.warmup, iters))
                if variant.name in profiled:
                    to_profile.append((variant.name, run, stream))
                del run
            except Exception as err:  # noqa: BLE001 - one broken variant must not hide the rest
                row[variant.name] = f"error: {type(err).__name__}"
                print(f"{model.name} / {variant.name}: {type(err).__name__}: {err}", flush=True)
            print(
                f"{model.name} / {variant.name}: {row[variant.name]}"
                f" ({time.perf_counter() - started:.1f} s)",
                flush=True,
            )
        # After every variant of the model is timed: a variant timed after a profile ran much
        # slower (docs/results/2026-11-24-h100-decode-prefill-split-loop.md, the MoE's streams)
        for name, run, stream in to_profile:
            try:
                breakdown = kernel_profile(run, stream, by_kernel=bool(args.profile))
            except Exception as err:  # noqa: BLE001 - a profile must not lose the time
                breakdown = f"profile failed: {type(err).__name__}: {err}"
            profiles.append(f"{model.name} / {name}: {breakdown}")
            print(profiles[-1], flush=True)
        del to_profile
        try:
            agreement[model.name] = _agreement(model, FUSED_CHAINS)
        except Exception as err:  # noqa: BLE001
            agreement[model.name] = f"error: {type(err).__name__}"
            print(f"{model.name} agreement: {err}", flush=True)
        results[model.name] = row
        release_torch_model()
        cp.get_default_memory_pool().free_all_blocks()
        if args.markdown:  # after every model: a time limit still leaves the rows so far
            partial = table(results)
            partial += "\n\n" + summary(results, floors, agreement, bandwidth, rate)
            Path(args.markdown).write_text(partial + "\n\n" + "\n".join(profiles) + "\n")
    text = table(results)
    text += "\n\n" + summary(results, floors, agreement, bandwidth, rate)
    text += "\n\n" + "\n".join(profiles)
    text += f"\n\ndate: {datetime.date.today()}"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0
