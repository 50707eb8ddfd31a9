"""Imported against generated: a Hugging Face Llama decode step through `og.from_torch` against
the same step written by `examples/gen_llama.py`, compiled by the same pipeline, on one GPU.

    python benchmarks/bench_imported.py                 # hidden 4096, 8 layers, f16, KV 1024 (H100)
    python benchmarks/bench_imported.py --mode prefill  # 512 tokens, logits of every position
    python benchmarks/bench_imported.py --dry-run       # small sizes, CPU only: structure table
    python benchmarks/bench_imported.py --layers 2 --hidden 512 --heads 8 --kv-heads 2 --ffn 1024

The imported step is `examples/hf_generate.py`'s `DecodeStep` (transformers' `LlamaForCausalLM`,
random weights, a static cache whose tensors are the step's inputs, updated in place); with
`--mode prefill` the prompt's logits through transformers' own positions, against
`gen_llama.py --mode prefill` (`--seq` tokens). Both graphs run `verify,dce,cse,
transpose-weights,fuse,fuse-siblings{concat=false},assign-streams{max-streams=1},insert-sync,
analyze-lifetimes,plan-memory` (og-fused-1s of the head-to-head suite, plus transpose-weights);
the imported one also without transpose-weights, to show what storing `nn.Linear`'s weights
transposed buys. Each is one CUDA graph, timed as the head-to-head suite times (median of
`--iters` runs, CUDA events, host issue included); the cache is full (position = length − 1).
Target (issue #12): imported ≤ 1.05 × generated. The structure table (nodes, fused products,
products left to cuBLAS, kernel launches) is printed on the CPU too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import numpy as np

import optgraph as og
from optgraph.passes.manager import FUSION, run_pipeline

PLAN = "analyze-lifetimes,plan-memory"
WITH_TRANSPOSE = (
    f"verify,dce,cse,transpose-weights,{FUSION},assign-streams{{max-streams=1}},insert-sync,{PLAN}"
)
WITHOUT_TRANSPOSE = WITH_TRANSPOSE.replace("transpose-weights,", "")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--cache-len", type=int, default=1024)
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f16")
    p.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    p.add_argument(
        "--mode", choices=("decode", "prefill"), default="decode",
        help="decode: one token over a full static cache; prefill: --seq tokens, no cache",
    )  # fmt: skip
    p.add_argument("--seq", type=int, default=512, help="prefill tokens")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="CPU only, small sizes: structure")
    args = p.parse_args(argv)
    if args.dry_run and argv is not None and "--hidden" not in argv:
        args.layers, args.hidden, args.heads, args.kv_heads = 2, 128, 4, 2
        args.ffn, args.vocab, args.cache_len, args.dtype = 256, 512, 64, "f32"
        args.seq = min(args.seq, 16)
    return args


def imported_step(args: argparse.Namespace) -> og.Graph:
    """transformers' Llama decode step at the given sizes, through torch.export."""
    import torch
    from hf_generate import TORCH_DTYPES, DecodeStep
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.cache_len,
        attn_implementation=args.attention, rms_norm_eps=1e-6,
    )  # fmt: skip
    dtype = TORCH_DTYPES[args.dtype]
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    # Weight values do not matter (timed only; the GPU draws its own), but the rope tables are
    # computed at construction and must be real for the rope raising to recognise them.
    model = model.to_empty(device="cpu").to(dtype).eval()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    head_dim = args.hidden // args.heads
    caches = [
        torch.zeros(1, args.kv_heads, args.cache_len, head_dim, dtype=dtype)
        for _ in range(2 * args.layers)
    ]
    if args.mode == "prefill":

        class PrefillLogits(torch.nn.Module):
            """The prompt's logits at every position, no cache: what `gen_llama.py` prefill
            computes. The positions are transformers' own (0, 1, ...): its causal mask folds
            to a constant and raises to `causal`, as a prompt of fixed length is exported."""

            def __init__(self) -> None:
                super().__init__()
                self.model, self.lm_head = model.model, model.lm_head

            def forward(self, input_ids: Any) -> Any:
                out = self.model(input_ids=input_ids, use_cache=False)
                return self.lm_head(out.last_hidden_state)

        ids = torch.zeros(1, args.seq, dtype=torch.int64)
        graph, _ = og.from_torch(PrefillLogits(), (ids,))
        return graph
    step = DecodeStep(model, args.cache_len)
    inputs = (torch.zeros(1, 1, dtype=torch.int64), torch.tensor([args.cache_len - 1]), *caches)
    graph, _weights = og.from_torch(step, inputs)
    return graph


def generated_step(args: argparse.Namespace) -> og.Graph:
    from gen_llama import generate_llama

    text = generate_llama(
        layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        ffn=args.ffn, vocab=args.vocab, dtype=args.dtype, batch=1,
        seq=args.seq if args.mode == "prefill" else 1, cache_len=args.cache_len, mode=args.mode,
    )  # fmt: skip
    return og.parse(text)


def structure(graph: og.Graph, pipeline: str) -> dict[str, Any]:
    """What the pipeline made of `graph`: nodes, fused products, cuBLAS products, launches."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.codegen.plan.steps import KernelStep

    planned = run_pipeline(graph, pipeline)
    fused_products = sum(
        1
        for n in planned.nodes
        if n.op == "fused" and n.body is not None and any(b.op == "matmul" for b in n.body.nodes)
    )
    plain_products = sum(1 for n in planned.nodes if n.op == "matmul")
    plan = lower_cuda(planned, in_place=in_place_candidates(planned))
    launches = sum(1 for s in plan.steps if isinstance(s, KernelStep))
    return {
        "graph": planned,
        "nodes": len(graph.nodes),
        "fused products": fused_products,
        "cuBLAS products": plain_products,
        "launches": launches,
    }


def step_inputs(graph: og.Graph, cache_len: int) -> dict[str, np.ndarray]:
    """Seeded inputs with the cache full: position (or kv_len) = length − 1 (length); a
    prefill's positions 0, 1, ... and token 0."""
    from benchmarks.harness.head_to_head import decode_inputs
    from optgraph.reference.interpreter import random_inputs

    names = {i.name for i in graph.inputs}
    if names in ({"tokens", "pos"}, {"input_ids"}):
        inputs = random_inputs(graph)
        for name, value in inputs.items():
            value[...] = np.arange(value.size).reshape(value.shape) if "pos" in name else 0
        return inputs
    inputs = decode_inputs(graph) if "kv_len" in {i.name for i in graph.inputs} else None
    if inputs is None:
        inputs = random_inputs(graph)
        inputs["cache_position"] = np.array([cache_len - 1], inputs["cache_position"].dtype)
        inputs["input_ids"] = np.zeros_like(inputs["input_ids"])
    return inputs


def time_step(graph: og.Graph, planned: og.Graph, args: argparse.Namespace) -> float:
    import cupy as cp

    from benchmarks.harness.gpu_variants import Model
    from benchmarks.harness.head_to_head import device_weights
    from benchmarks.harness.timing import median_us
    from optgraph.api.programs import cuda_program
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.reference.kernels import numpy_dtype

    model = Model("step", graph, step_inputs(graph, args.cache_len), device_weights(graph))
    program = cuda_program(planned, weights=model.weights)
    inputs = model.device_inputs()
    types = planned.value_types()
    in_place = in_place_candidates(planned)
    out = {}
    for name in dict.fromkeys(planned.output_names()):
        source = in_place.get(name)
        t = types[name]
        out[name] = inputs[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
    try:
        run = lambda: program.run(inputs, out=out)
        return median_us(run, program.stream, args.iters, args.warmup)
    finally:
        program.close()
        del model
        cp.get_default_memory_pool().free_all_blocks()


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    shape = f"prefill {args.seq} tokens" if args.mode == "prefill" else f"KV {args.cache_len}"
    size = (
        f"hidden {args.hidden}, {args.layers} layers, {args.heads}/{args.kv_heads} heads, "
        f"ffn {args.ffn}, vocab {args.vocab}, {shape}, {args.dtype}, attention {args.attention}"
    )
    print(size, flush=True)
    imported = imported_step(args)
    rows = {
        "generated": (generated_step(args), WITH_TRANSPOSE),
        "imported": (imported, WITH_TRANSPOSE),
        "imported, no transpose-weights": (imported, WITHOUT_TRANSPOSE),
    }
    header = "| step | nodes | fused products | cuBLAS products | launches | µs | / generated |"
    lines = [size, "", header, "|---|---|---|---|---|---|---|"]
    base: float | None = None
    for name, (graph, pipeline) in rows.items():
        info = structure(graph, pipeline)
        us = None if args.dry_run else time_step(graph, info["graph"], args)
        if name == "generated":
            base = us
        cells = [info["nodes"], info["fused products"], info["cuBLAS products"], info["launches"]]
        cells += [f"{us:.1f}" if us else "-", f"{us / base:.3f}×" if us and base else "-"]
        lines.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
        print(lines[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
