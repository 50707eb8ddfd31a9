"""GPU latency of every example and a generated Llama decode step, in several ways of running them.

    python benchmarks/bench_gpu.py [--iters 200] [--warmup 20] [--only NAME] [--markdown FILE]
    python benchmarks/bench_gpu.py --suite head-to-head [--only llama_launch,llama_real] [--variants og-1s,og-fused-1s]

For each model and each *variant* the model runs `--iters` times after
`--warmup` runs, each run timed alone with CUDA events on the stream it starts on (host issue time
included: this is the latency a caller sees), and the median is reported, with the ratio
`CuPy eager / variant` (higher is faster). Inputs and outputs stay on the device (CuPy arrays
bound by pointer), so no run copies to or from the host; weights and inputs are the reference's
seeded random data.

The variants (`cupy-eager`, `og-eager`, `og-graph-1s`, `og-graph-chains`) are
`gpu_variants.EXAMPLE_VARIANTS`; extend that list to add one. Timing and the table are
timing.py's.

`--suite head-to-head` (benchmarks/harness/head_to_head.py) times optgraph against PyTorch
(eager, CUDA graph, two torch.compile modes) and with/without fusion on Llama decode/prefill,
inception and MoE, and prints each decode step's bandwidth floor.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

if TYPE_CHECKING:
    from benchmarks.harness.gpu_variants import Model

LLAMA = {
    "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 1024,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 128, "mode": "decode",
}  # fmt: skip


def models(only: str | None) -> list[Model]:
    """Every example and the generated Llama decode step, with the reference's seeded data."""
    from gen_llama import generate_llama

    import optgraph as og
    from benchmarks.harness.gpu_variants import Model
    from optgraph.reference.interpreter import random_inputs, random_weights

    found = [(p.stem, og.parse_file(p)) for p in sorted((ROOT / "examples").glob("*.ir"))]
    found.append(("llama_gen_f16", og.parse(generate_llama(**LLAMA))))
    out = []
    for name, graph in found:
        if only and not any(part in name for part in only.split(",")):
            continue
        out.append(Model(name, graph, random_inputs(graph, 0), random_weights(graph, 0)))
    return out


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
        help="head-to-head: print the kernel breakdown of these variants (comma-separated; default:"
        " og-fused-1s on the Llama decodes) for every model, one line per kernel",
    )
    return parser


def run_examples(args: argparse.Namespace) -> int:
    """The examples suite: every model × `EXAMPLE_VARIANTS`, then the table."""
    from benchmarks.harness.gpu_variants import BASELINE, EXAMPLE_VARIANTS
    from benchmarks.harness.timing import device_name, median_us, results_table

    device = device_name()
    results: dict[str, dict[str, float | str]] = {}
    for model in models(args.only):
        row: dict[str, float | str] = {}
        for variant in EXAMPLE_VARIANTS:
            try:
                run, stream = variant.build(model)
                row[variant.name] = median_us(run, stream, args.iters, args.warmup)
            except Exception as err:  # noqa: BLE001 - one broken variant must not hide the rest
                row[variant.name] = f"error: {type(err).__name__}"
                print(f"{model.name} / {variant.name}: {type(err).__name__}: {err}", flush=True)
        results[model.name] = row
        print(model.name, {k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()})
    text = results_table(results, device, [v.name for v in EXAMPLE_VARIANTS], BASELINE)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)  # before any CuPy import: --help works without it
    if args.suite == "examples":
        return run_examples(args)
    from benchmarks.harness.head_to_head import run_suite, suite_variants

    variants = suite_variants()
    if args.variants:
        wanted = args.variants.split(",")
        unknown = sorted(set(wanted) - {v.name for v in variants})
        if unknown:
            cli.error(f"unknown variants: {', '.join(unknown)}")
        variants = [v for v in variants if v.name in wanted]
    return run_suite(args, variants)


if __name__ == "__main__":
    sys.exit(main())
