"""Run every example, generated Llama steps and the quantized kernels on the GPU for
compute-sanitizer.

    compute-sanitizer --tool memcheck python benchmarks/sanitize_examples.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_examples.py
    compute-sanitizer --tool synccheck python benchmarks/sanitize_examples.py

The models: every example; the Llama decode step (f16, f32); the same step with its matrices
stored Q8_0 and in llama.cpp's Q4_K_M mix (q4_k, q6_k, q5_0, q8_0), decode and a 32-token
prefill; and for every quantized type a product by a quantized weight (one row and 32 rows), a
quantized `get_rows` and a `dequantize`. Each model runs through the default pipeline (fuse, one stream where the cost model says so,
merged launches and Programmatic Dependent Launch: what users get) and through a forced
four-stream pipeline, each eagerly and as a CUDA graph (capture, then replays). Exits non-zero
when an output differs from the reference interpreter beyond the runtime's check bounds.
`--only NAME[,NAME...]` runs the models whose name contains one of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.runtime.cuda.runner import CHECK_BOUNDS

STREAMS_PIPELINE = (
    "verify,dce,cse,fuse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)
PIPELINES = {"default": DEFAULT_PIPELINE, "4-streams": STREAMS_PIPELINE}
LLAMA_STEP = {"layers": 2, "hidden": 256, "heads": 8, "kv_heads": 2, "ffn": 688, "vocab": 512}


def _llama_step_text(dtype: str) -> str:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.generate_llama(**LLAMA_STEP, dtype=dtype, cache_len=64, mode="decode"))


QUANTIZED_OPS = """graph quant_{Q}_{M} {{
  input %x : f16[{M},256]
  input %ids : i32[3]
  weight %w : {Q}[48,256]
  weight %emb : {Q}[5,256]
  weight %b : f16[48]
  %p = matmul(%x, %w) {{transpose_b = true}} : f16[{M},48]
  %y = add(%p, %b) : f16[{M},48]
  %e = get_rows(%emb, %ids) : f32[3,256]
  %d = dequantize(%emb) {{dtype = "f16"}} : f16[5,256]
  output %y, %e, %d
}}
"""


def _quantized_step(weight_set: str, mode: str) -> og.Graph:
    from benchmarks.harness.quantized_models import llama_graph

    seq = 1 if mode == "decode" else 32
    sizes = {
        **LLAMA_STEP,
        "ffn": 640,
        "dtype": "f16",
        "batch": 1,
        "seq": seq,
        "cache_len": 64,
        "mode": mode,
    }  # ffn: whole q8_0 blocks; q4_k falls back to q5_0 (Q4_K_M's rule)
    return llama_graph(sizes, weight_set)


def models() -> Iterator[tuple[str, og.Graph]]:
    from optgraph.ir.graph import QUANT_BLOCKS

    for path in sorted((ROOT / "examples").glob("*.ir")):
        yield path.stem, og.parse_file(path)
    for dtype in ("f16", "f32"):
        yield f"llama_step_{dtype}", og.parse(_llama_step_text(dtype), f"llama_step_{dtype}")
    for weight_set in ("q8_0", "q4_k_m"):
        for mode in ("decode", "prefill"):
            yield f"llama_{weight_set}_{mode}", _quantized_step(weight_set, mode)
    for qtype in sorted(QUANT_BLOCKS):
        for m in (1, 32):
            yield f"quant_{qtype}_{m}", og.parse(QUANTIZED_OPS.format(Q=qtype, M=m))


def run_model(name: str, source: og.Graph, pipeline: str) -> int:
    """Mismatches of `source` through `pipeline`, eagerly and as a CUDA graph."""
    inputs, weights = random_inputs(source, 0), random_weights(source, 0)
    want = run_reference(source, inputs, weights)
    graph = run_pipeline(source, pipeline)
    types = graph.value_types()
    bad = 0
    for use_graph in (False, True):
        options = LoweringOptions(use_graph=use_graph)
        program = cuda_program(graph, weights=weights, options=options)
        for _ in range(3 if use_graph else 1):
            got = program.run(inputs)
        for output in graph.output_names():
            err = nmse(got[output], want[output])
            if err > CHECK_BOUNDS.get(types[output].dtype, 0.0):
                bad += 1
                print(f"{name} %{output}: nmse {err:.3e} (use_graph={use_graph})", flush=True)
        program.close()
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only",
        default="",
        help="run the models whose name contains this (or, comma-separated, any of these)",
    )
    args = parser.parse_args(argv)
    bad = 0
    for name, source in models():
        if not any(part in name for part in args.only.split(",")):
            continue
        for label, pipeline in PIPELINES.items():
            bad += run_model(name, source, pipeline)
            print(f"{name} [{label}]: ran eagerly and as a CUDA graph", flush=True)
    print("mismatches:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
