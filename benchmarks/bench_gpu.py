"""GPU latency of every example and a generated Llama decode step, in several ways of running them.

    python benchmarks/bench_gpu.py [--iters 200] [--warmup 20] [--only NAME] [--markdown FILE]
    python benchmarks/bench_gpu.py --suite head-to-head [--only llama_launch,llama_real] [--variants og-1s,og-fused-1s]

For each model and each *variant* (the `VARIANTS` table) the model runs `--iters` times after
`--warmup` runs, each run timed alone with CUDA events on the stream it starts on (host issue time
included: this is the latency a caller sees), and the median is reported, with the ratio
`CuPy eager / variant` (higher is faster). Inputs and outputs stay on the device (CuPy arrays
bound by pointer), so no run copies to or from the host; weights and inputs are the reference's
seeded random data.

Variants (extend `VARIANTS` to add one: a name, a one-line description and a `build(model)`
that returns a zero-argument callable doing one run, plus the stream to time it on):

- `cupy-eager`: the graph op by op in CuPy (benchmarks/cupy_interpreter.py);
- `og-eager`: optgraph's kernels launched one by one (`LoweringOptions(use_graph=False)`), 1 stream;
- `og-graph-1s`: one CUDA graph, every node on one stream;
- `og-graph-chains`: one CUDA graph, streams from `assign-streams{policy=chains}`.

`--suite head-to-head` (benchmarks/head_to_head.py) times optgraph against PyTorch (eager, CUDA
graph, two torch.compile modes) and with/without fusion on Llama decode/prefill, inception and MoE,
and prints each decode step's bandwidth floor.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cupy as cp

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]

import optgraph as og
from optgraph.codegen.in_place_outputs import in_place_candidates
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.ir.graph import Graph
from optgraph.passes.manager import FUSION, run_pipeline
from optgraph.program import cuda_program
from optgraph.runtime.reference import random_inputs, random_weights
from optgraph.runtime.reference_kernels import numpy_dtype

PLAN = "analyze-lifetimes,plan-memory"
ONE_STREAM = f"verify,dce,cse,assign-streams{{max-streams=1}},insert-sync,{PLAN}"
CHAINS = f"verify,dce,cse,assign-streams{{policy=chains}},insert-sync,{PLAN}"
# The fused variants run the default pipeline's fusion passes (manager.FUSION), so they follow it.
FUSED_ONE_STREAM = f"verify,dce,cse,{FUSION},assign-streams{{max-streams=1}},insert-sync,{PLAN}"
FUSED_CHAINS = f"verify,dce,cse,{FUSION},assign-streams{{policy=chains}},insert-sync,{PLAN}"
LLAMA = {
    "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 1024,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 128, "mode": "decode",
}  # fmt: skip


@dataclass
class Model:
    """A benchmark model: its source graph and seeded data, on the host and on the device."""

    name: str
    graph: Graph
    inputs: dict[str, Any]
    weights: dict[str, Any]

    def device_inputs(self) -> dict[str, Any]:
        return {k: cp.asarray(v) for k, v in self.inputs.items()}


Runner = tuple[Callable[[], Any], Any]  # (one run, the stream it starts and ends on)


def _cupy_eager(model: Model) -> Runner:
    from cupy_interpreter import CupyModel

    run = CupyModel(model.graph)
    env = {**model.device_inputs(), **{k: cp.asarray(v) for k, v in model.weights.items()}}
    return (lambda: run(env)), cp.cuda.Stream.null


def _optgraph(
    pipeline: str, use_graph: bool, pdl: bool = True, merge: bool = True
) -> Callable[[Model], Runner]:
    def build(model: Model) -> Runner:
        graph = run_pipeline(model.graph, pipeline)
        options = LoweringOptions(use_graph=use_graph, pdl=pdl, merge_launches=merge)
        program = cuda_program(graph, weights=model.weights, options=options)
        inputs = model.device_inputs()
        types = graph.value_types()
        out = {}
        in_place = in_place_candidates(graph)  # KV caches updated where they are, as torch does
        for name in dict.fromkeys(graph.output_names()):
            t = types[name]
            source = in_place.get(name)
            out[name] = inputs[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
        return (lambda: program.run(inputs, out=out)), program.stream

    return build


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Model], Runner]


VARIANTS: list[Variant] = [
    Variant("cupy-eager", "CuPy, op by op", _cupy_eager),
    Variant("og-eager", "optgraph kernels, launched one by one", _optgraph(ONE_STREAM, False)),
    Variant("og-graph-1s", "optgraph, one CUDA graph, 1 stream", _optgraph(ONE_STREAM, True)),
    Variant("og-graph-chains", "optgraph, one CUDA graph, chains", _optgraph(CHAINS, True)),
]
BASELINE = "cupy-eager"


def head_to_head_variants() -> list[Variant]:
    from head_to_head_variants import codegen_setting_variant, cublas_variant, torch_variant

    return [
        Variant("cupy-eager", "CuPy, op by op", _cupy_eager),
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
        Variant("og-1s", "optgraph, CUDA graph, 1 stream, no fusion", _optgraph(ONE_STREAM, True)),
        Variant("og-fused-1s", "optgraph, fusion, 1 stream", _optgraph(FUSED_ONE_STREAM, True)),
        Variant(
            "og-fused-1s-nomerge",
            "og-fused-1s with one launch per kernel (no merged launches)",
            _optgraph(FUSED_ONE_STREAM, True, merge=False),
        ),
        Variant(
            "og-fused-1s-noprologue",
            "og-fused-1s with fuse{row-prologues=false}: norms as kernels of their own, SwiGLU's mul"
            " in the gate product",
            _optgraph(FUSED_ONE_STREAM.replace(FUSION, "fuse{row-prologues=false}"), True),
        ),
        Variant(
            "og-fused-1s-prefetch",
            "og-fused-1s with the one-row products' L2 weight prefetch before the PDL wait",
            codegen_setting_variant(_optgraph(FUSED_ONE_STREAM, True), "PREFETCH", True),
        ),
        Variant("og-fused-streams", "optgraph, fusion + streams", _optgraph(FUSED_CHAINS, True)),
        Variant(
            "og-fused-streams-nopdl",
            "og-fused-streams without Programmatic Dependent Launch (plain launches)",
            _optgraph(FUSED_CHAINS, True, pdl=False),
        ),
        Variant(
            "og-fused-1s-cublas",
            "og-fused-1s with cuBLAS + epilogue kernel instead of the one-row kernel",
            cublas_variant(_optgraph(FUSED_ONE_STREAM, True)),
        ),
    ]


def models(only: str | None) -> list[Model]:
    from gen_llama import generate_llama

    found = [(p.stem, og.parse_file(p)) for p in sorted((ROOT / "examples").glob("*.ir"))]
    found.append(("llama_gen_f16", og.parse(generate_llama(**LLAMA))))
    out = []
    for name, graph in found:
        if only and not any(part in name for part in only.split(",")):
            continue
        out.append(Model(name, graph, random_inputs(graph, 0), random_weights(graph, 0)))
    return out


def median_us(run: Callable[[], Any], stream: Any, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        run()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(iters):
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1000.0)
    return statistics.median(times)


def table(
    results: dict[str, dict[str, float | str]], device: str, variants: list[Variant] | None = None
) -> str:
    names = [v.name for v in (variants or VARIANTS)]
    head = "| model | " + " | ".join(f"{n} (µs)" for n in names)
    head += " | " + " | ".join(f"{BASELINE} / {n}" for n in names[1:]) + " |"
    lines = [f"device: {device}; date: {datetime.date.today()}", "", head]
    lines.append("|" + "---|" * (1 + 2 * len(names) - 1))
    for model, row in results.items():
        cells = [f"{row[n]:.1f}" if isinstance(row[n], float) else str(row[n]) for n in names]
        base = row.get(BASELINE)  # absent when --variants leaves it out
        ratios = [
            f"{base / row[n]:.2f}×"
            if isinstance(base, float) and isinstance(row[n], float)
            else "-"
            for n in names[1:]
        ]
        lines.append(f"| {model} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--only", help="run the models whose name contains this (comma-separated: any of them)"
    )
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--suite", choices=("examples", "head-to-head"), default="examples")
    parser.add_argument(
        "--variants", help="comma-separated variant names to run (head-to-head; default: all)"
    )
    parser.add_argument(
        "--profile",
        help="head-to-head: print the kernel breakdown of this variant (default: og-fused-1s on"
        " the Llama decodes) for every model, one line per kernel",
    )
    args = parser.parse_args(argv)
    if args.suite == "head-to-head":
        from head_to_head import run_suite

        variants = head_to_head_variants()
        if args.variants:
            wanted = args.variants.split(",")
            unknown = sorted(set(wanted) - {v.name for v in variants})
            if unknown:
                parser.error(f"unknown variants: {', '.join(unknown)}")
            variants = [v for v in variants if v.name in wanted]
        return run_suite(args, variants, median_us, table)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    results: dict[str, dict[str, float | str]] = {}
    for model in models(args.only):
        row: dict[str, float | str] = {}
        for variant in VARIANTS:
            try:
                run, stream = variant.build(model)
                row[variant.name] = median_us(run, stream, args.iters, args.warmup)
            except Exception as err:  # noqa: BLE001 - one broken variant must not hide the rest
                row[variant.name] = f"error: {type(err).__name__}"
                print(f"{model.name} / {variant.name}: {type(err).__name__}: {err}", flush=True)
        results[model.name] = row
        print(model.name, {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()})
    text = table(results, device)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
