"""Decode steps with each launch-count and one-row-product setting on and off, in one table.

    python benchmarks/bench_decode_launches.py [--only llama_launch,llama_real] [--iters 200]
        [--loop 256] [--orders K] [--markdown FILE]
        (--only loop_launch,loop_launch_adds_first: the tail)

Models: head_to_head's launch-bound decode (LLAMA_LAUNCH: 8 layers, hidden 512, KV 128) and
realistic one (LLAMA_REAL: hidden 4096, FFN 14336, vocab 32000, KV 1024), and the decode loop's
step at either size (`loop_launch`, `loop_real`: `bench_decode_loop.loop_step_graph`, the step
with `next_token = cast(argmax(logits))` and the two position adds; `loop_launch_adds_first`:
the adds issued first, where they merge with the first launch), f16, on
`og-fused-1s`'s pipeline (fusion, one stream), KV caches updated in the caller's arrays, each
program called as a bound step (`program.bind(inputs, out)`). Variants (codegen module settings,
set while the program is lowered, captured and first run):

- `all-on`: the defaults;
- `warp-stats`, `no-warp-stats`: prologue norms of rows up to 2048 reduced by every warp alone
  (`prologue.WARP_STATISTICS_MAX_K`, now the default) or by the block;
- `no-qkv-fold`: `qkv_folds.FOLD_QKV = False` (rope(q), rope(k) and the cache writes not in
  the q/k/v products' store: six launches a layer instead of five);
- `no-rope-kv`: that and `rope_cache_writes.ROPE_CACHE_WRITES = False` (a key's rope and its
  cache write as two kernels: seven launches a layer);
- `no-early-w`: `product_kernel.EARLY_WEIGHTS = False` (weights loaded after the PDL wait);
- `no-early-kv`: `early_cache_reads.EARLY_CACHE_READS = False` (decode attention reads its KV
  cache after the PDL wait, not the rows no kernel of the step writes before it);
- `attn-s8`, `attn-b528`, `attn-s8-b528`: decode attention with up to 8 key slots a pass
  (`decode_wide_layout.MAX_SLOTS`, default 4) and/or chunks for 528 blocks of one row
  (`TARGET_BLOCKS`, default 264);
- `none`: all off (main before these settings);
- `all-on-pk16k`: the defaults with `fuse{prologue-max-k=16384}`: the realistic step's norms
  (4096 rows) recomputed in each product reading them, whose first weight loads now overlap
  that work, and SwiGLU's mul (14336) in the down product, so gate and up merge: five launches
  a layer instead of eight (the launch-bound step's program is the same as `all-on`'s).
- `all-on-ew16k`: the defaults with `fuse{elementwise-prologue-max-k=16384}`: only SwiGLU's mul
  in the down product (gate and up merge), the norms stay kernels: seven launches a layer.

Columns: kernel launches a step (the bound plan's kernel steps); `step µs`: median of `--iters`
steps each timed alone with CUDA events; `loop µs`: `--loop` steps issued back to back then one
synchronization, per step, host included (a serving loop that does not read results between
steps); `max |Δ| logits` against the first variant that ran (`all-on`; 0: the same bits; the
loop models compare their `next_token`, and their steps all start from the same values); the
step against its bandwidth floor (head_to_head.floor_bytes ÷ the copy bandwidth measured here).
The variants run in order, then again in reverse order (`step µs` of both passes shown: their
spread is the run-to-run noise). A program's place among the ones built moves its step by up to
about 10 µs on the realistic step (the variant built second measured fastest in three orders,
docs/results/2026-11-24-h100-attention-tail-final-status.md): `--orders K` builds and times the
variants K times, the list rotated by one more each time, and reports each step's median and
range over its 2K passes. Needs CuPy and a GPU.

The ends of a decode step, off by default, have variants of their own (`TAIL_VARIANTS`):
`argmax-cast`, `argmax-product`, `gather-rows` and `tail-all`.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

SETTINGS = {
    "warp-k": ("kernels.one_row.prologue", "WARP_STATISTICS_MAX_K"),
    "qkv": ("decode.qkv_folds", "FOLD_QKV"),
    "rope": ("decode.rope_cache_writes", "ROPE_CACHE_WRITES"),
    "early": ("kernels.one_row.product_kernel", "EARLY_WEIGHTS"),
    "early-kv": ("decode.early_cache_reads", "EARLY_CACHE_READS"),
    "attn-slots": ("kernels.attention.decode_wide_layout", "MAX_SLOTS"),
    "attn-blocks": ("kernels.attention.decode_wide_layout", "TARGET_BLOCKS"),
}
VARIANTS: dict[str, dict[str, bool | int]] = {
    "all-on": {},
    "all-on-pk16k": {},
    "all-on-ew16k": {},
    "no-qkv-fold": {"qkv": False},
    "no-rope-kv": {"qkv": False, "rope": False},
    "no-early-w": {"early": False},
    "no-early-kv": {"early-kv": False},
    "attn-s8": {"attn-slots": 8},
    "attn-b528": {"attn-blocks": 528},
    "attn-s8-b528": {"attn-slots": 8, "attn-blocks": 528},
    "none": {"qkv": False, "rope": False, "early": False},
    "warp-stats": {"warp-k": 2048},
    "no-warp-stats": {"warp-k": 0},
    "tail-off": {"argmax_cast": False, "argmax_product": False, "gather": False},
    "before": {"argmax_cast": False, "argmax_product": False, "gather": False, "warp-k": 0},
}
PIPELINES = {  # (text, replaced by)
    "all-on-pk16k": ("fuse,", "fuse{prologue-max-k=16384},"),
    "all-on-ew16k": ("fuse,", "fuse{elementwise-prologue-max-k=16384},"),
}


@contextmanager
def settings(values: dict[str, bool | int]) -> Iterator[None]:
    """`optgraph.codegen` module settings set to `values` inside the block, restored after."""
    old: list[tuple[Any, str, Any]] = []
    try:
        for key, value in values.items():
            module, name = SETTINGS[key]
            setting = importlib.import_module(f"optgraph.codegen.{module}")
            old.append((setting, name, getattr(setting, name)))
            setattr(setting, name, value)
        yield
    finally:
        for setting, name, value in reversed(old):
            setattr(setting, name, value)


def build(
    model: Any, values: dict[str, bool | int], fusion: tuple[str, str] | None = None
) -> tuple[Callable[[], Any], Any, int, Any]:
    """(step, stream, kernel launches a step, logits array) of `model` under `values`, with
    `fusion` = (the pipeline's fuse pass, its replacement) where given."""
    import cupy as cp

    from benchmarks.harness.gpu_variants import FUSED_ONE_STREAM
    from optgraph.api.programs import cuda_program
    from optgraph.codegen.lower_cuda import KernelStep
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import run_pipeline
    from optgraph.reference.kernels import numpy_dtype

    pipeline = FUSED_ONE_STREAM.replace(*fusion, 1) if fusion else FUSED_ONE_STREAM
    graph = run_pipeline(model.graph, pipeline)
    inputs = model.device_inputs()
    types = graph.value_types()
    in_place = in_place_candidates(graph)
    out = {}
    for name in dict.fromkeys(graph.output_names()):
        t = types[name]
        source = in_place.get(name)
        out[name] = inputs[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
    with settings(values):  # lowered (in place), compiled and captured here
        program = cuda_program(graph, weights=model.weights)
        step = program.bind(inputs, out)
        step()
        step()
        program.stream.synchronize()
    plan = step.bound.variant.plan
    launches = sum(isinstance(s, KernelStep) for s in plan.steps)
    return step, program.stream, launches, out["logits" if "logits" in out else "next_token"]


# The ends of a decode step (docs/codegen.md, "The ends of a decode step"), off by default:
# `argmax-cast` (the argmax kernel stores its cast: the cast's launch goes), `argmax-product`
# (the logits product's last block finds the argmax and stores its cast: two launches fewer),
# both on the loop models only; `gather-rows` (the embedding row read from the table by layer
# 0's kernels: the get_rows launch goes); `tail-all`: the three.
TAIL_SETTINGS = {
    "argmax_cast": ("decode.argmax_folds", "ARGMAX_CAST"),
    "argmax_product": ("decode.argmax_folds", "ARGMAX_IN_PRODUCT"),
    "gather": ("decode.gathered_rows", "GATHER_ROWS"),
}
TAIL_VARIANTS = {
    "argmax-cast": {"argmax_cast": True},
    "argmax-product": {"argmax_product": True},
    "gather-rows": {"gather": True},
    "tail-all": {"argmax_cast": True, "argmax_product": True, "gather": True},
}
SETTINGS.update(TAIL_SETTINGS)
VARIANTS.update(TAIL_VARIANTS)
# bench_decode_loop's step: its sizes, and whether the position adds are issued first
LOOP_MODELS = {
    "loop_launch": ("launch", False),
    "loop_real": ("real", False),
    "loop_launch_adds_first": ("launch", True),
}
POSITION_ADDS = ("%next_pos = ", "%next_kv_len = ")


def adds_first(graph: Any) -> Any:
    """`graph` with the loop step's two position adds (they read inputs only) issued first,
    where they merge with the step's first launch instead of following the argmax."""
    import optgraph as og

    lines = og.print_graph(graph).splitlines()
    adds = [line for line in lines if line.strip().startswith(POSITION_ADDS)]
    rest = [line for line in lines if line not in adds]
    first = next(i for i, line in enumerate(rest) if line.strip().startswith("%"))
    return og.parse("\n".join([*rest[:first], *adds, *rest[first:]]))


def bench_models(only: str) -> Iterator[Any]:
    """head_to_head's models named in `only`, then the decode loop's steps named there."""
    from benchmarks.bench_decode_loop import loop_step_graph, model_sizes, start_values
    from benchmarks.harness.gpu_variants import Model
    from benchmarks.harness.head_to_head import device_weights, models

    rest = ",".join(name for name in only.split(",") if name and name not in LOOP_MODELS)
    if rest:
        yield from models(rest)
    for name, (size, early) in LOOP_MODELS.items():
        if name in only.split(","):
            sizes = model_sizes(size)
            graph = loop_step_graph(sizes)
            graph = adds_first(graph) if early else graph
            values = start_values(graph, sizes["cache_len"] - 1)
            yield Model(name, graph, values, device_weights(graph))


def loop_us(step: Callable[[], Any], stream: Any, calls: int) -> float:
    for _ in range(10):
        step()
    stream.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    stream.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def _timed_orders(
    model: Any, names: list[str], args: argparse.Namespace, lines: list[str]
) -> dict[str, tuple[int, list[float], list[float], float]]:
    """{variant: (launches, step µs of every pass, loop µs of every order, max abs Δ logits
    against the first variant of `names`)} of `model`, built and timed `args.orders` times: the
    variants built in `names`' order rotated by one more each time, then timed in that order and
    in reverse (a program's place among the ones built moves its time by several µs on the
    realistic step: docs/benchmarks.md, "Decode launches"). A variant that cannot build gets a
    row in `lines` saying why, once."""
    from benchmarks.harness.timing import median_us

    timed: dict[str, tuple[int, list[float], list[float], float]] = {}
    failed: set[str] = set()
    iters = args.iters if "launch" in model.name else max(20, args.iters // 4)
    for turn in range(max(1, args.orders)):
        at = turn % len(names)
        built = {}
        for name in names[at:] + names[:at]:
            if name in failed:
                continue
            try:
                built[name] = build(model, VARIANTS[name], PIPELINES.get(name))
            except Exception as err:  # noqa: BLE001 (a variant that cannot run says why)
                failed.add(name)
                lines.append(f"| {model.name} | {name} | {type(err).__name__}: {err} | | | | |")
                print(lines[-1], flush=True)
        ran = list(built)
        if not ran:
            continue
        first = next(n for n in names if n in built)
        reference = built[first][3].get().astype("float64")
        passes = {n: [median_us(built[n][0], built[n][1], iters, 10)] for n in ran}
        for n in reversed(ran):
            passes[n].append(median_us(built[n][0], built[n][1], iters, 10))
        for name in ran:
            step, stream, launches, logits = built[name]
            loop = loop_us(step, stream, args.loop)
            delta = float(abs(logits.get().astype("float64") - reference).max())
            _, steps, loops, seen = timed.get(name, (launches, [], [], 0.0))
            timed[name] = (launches, steps + passes[name], loops + [loop], max(seen, delta))
        del built
    return timed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="llama_launch,llama_real", help="models, by name")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="variants, by name")
    parser.add_argument("--iters", type=int, default=200, help="steps timed alone per variant")
    parser.add_argument("--loop", type=int, default=256, help="steps of the back-to-back loop")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table there")
    parser.add_argument(
        "--orders",
        type=int,
        default=1,
        help="build and time the variants K times, in K rotated orders, and report the median",
    )
    args = parser.parse_args(argv)
    from benchmarks.harness.head_to_head import copy_bandwidth, floor_bytes
    from benchmarks.harness.timing import device_name

    names = [v for v in args.variants.split(",") if v]
    bandwidth = copy_bandwidth()
    head = (
        f"device: {device_name()}; date: {time.strftime('%Y-%m-%d')}; copy bandwidth "
        f"{bandwidth / 1e12:.2f} TB/s; iters {args.iters}, loop {args.loop}"
    )
    column = "step µs (pass 1 / 2)" if args.orders <= 1 else "step µs (median, min–max)"
    lines = [
        head + (f"; {args.orders} build orders" if args.orders > 1 else ""),
        "",
        f"| model | variant | launches | {column} | loop µs | max abs Δ logits | vs floor |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for model in bench_models(args.only):
        floor_us = floor_bytes(model.graph) / bandwidth * 1e6
        timed = _timed_orders(model, names, args, lines)
        for name in names:
            if name not in timed:
                continue
            launches, steps, loops, delta = timed[name]
            best = min(steps)
            if args.orders <= 1:
                step = f"{steps[0]:.1f} / {steps[1]:.1f}"
            else:
                step = f"{statistics.median(steps):.1f} ({min(steps):.1f}–{max(steps):.1f})"
            row = (
                f"| {model.name} | {name} | {launches} | {step} "
                f"| {statistics.median(loops):.1f} | {delta:.3g} | {best / floor_us:.2f}× of {floor_us:.0f} µs |"
            )
            lines.append(row)
            print(row, flush=True)
    text = "\n".join(lines) + "\n"
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
