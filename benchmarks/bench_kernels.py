"""GPU time of single generated kernels at the head-to-head models' shapes, in several variants.

    python benchmarks/bench_kernels.py [--only NAME] [--copies 16] [--markdown FILE]

Each case is one op at a Llama decode or prefill shape; the graph holds `--copies` independent
copies of it, each with its own inputs (so K/V caches and weights stream from memory as in the
model instead of sitting in L2), captured as one CUDA graph on one stream. Reported per op:
`graph µs` (median replay time over copies: the kernel, the launch gap inside a graph and the
copy of its output into the caller's array, plus a share of the graph launch) and `kernel µs`
(CUPTI's device time per launch through torch.profiler: the figure to compare),
with the op's bytes over the kernel time, and the NMSE of copy 0 against the reference
interpreter. A variant changes a code generator's module setting for the build (old kernels kept
as fallbacks) so one run compares them on the same machine.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from benchmarks.harness.timing import device_name, median_us
from optgraph.api.programs import cuda_program
from optgraph.codegen.kernels import reductions
from optgraph.codegen.kernels.attention import decode, decode_wide, prefill_tiled
from optgraph.codegen.kernels.attention import variants as attention_variants
from optgraph.codegen.kernels.one_row import geometry
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.reference.kernels import numpy_dtype


@contextmanager
def setting(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


EARLIER_DECODE = [(attention_variants, "WIDE_DECODE", False)]
OLD_ATTENTION = [
    *EARLIER_DECODE,
    (decode, "MAX_ROWS", 0),
    (prefill_tiled, "MAX_D", 0),
]
WIDE = decode_wide
# name -> (one copy's IR lines with {i}, reference check?, variants: name -> settings)
CASES: dict[str, tuple[str, bool, dict[str, list[tuple[Any, str, Any]]]]] = {
    "attn_decode_real": (
        """input %q{i} : f16[1,32,1,128]
input %k{i} : f16[1,8,1024,128]
input %v{i} : f16[1,8,1024,128]
input %len{i} : i32[1]
%o{i} = attention(%q{i}, %k{i}, %v{i}, %len{i}) : f16[1,32,1,128]""",
        True,
        {
            "wide (16 chunks x 4 slots)": [],
            "wide 32 chunks x 2 slots": [(WIDE, "MAX_SLOTS", 2), (WIDE, "TARGET_BLOCKS", 264)],
            "wide 8 chunks x 8 slots (2 passes)": [(WIDE, "MAX_CHUNKS", 8)],
            "split-kv (earlier)": EARLIER_DECODE,
            "split-kv (earlier) unroll 2": [*EARLIER_DECODE, (decode, "UNROLL", 2)],
            "rows (old)": OLD_ATTENTION,
        },
    ),
    "attn_decode_launch": (
        """input %q{i} : f16[1,8,1,64]
input %k{i} : f16[1,2,128,64]
input %v{i} : f16[1,2,128,64]
input %len{i} : i32[1]
%o{i} = attention(%q{i}, %k{i}, %v{i}, %len{i}) : f16[1,8,1,64]""",
        True,
        {
            "wide (1 chunk x 4 slots)": [],
            "wide 2 chunks x 2 slots": [(WIDE, "MAX_SLOTS", 2)],
            "wide 4 chunks x 1 slot": [(WIDE, "MAX_SLOTS", 1)],
            "split-kv (earlier)": EARLIER_DECODE,
            "split-kv (earlier) 1 chunk": [
                *EARLIER_DECODE,
                (decode, "MAX_CHUNKS", 1),
            ],
            "rows (old)": OLD_ATTENTION,
        },
    ),
    "attn_prefill_512": (
        """input %q{i} : f16[1,32,512,128]
input %k{i} : f16[1,8,512,128]
input %v{i} : f16[1,8,512,128]
%o{i} = attention(%q{i}, %k{i}, %v{i}) {causal = true} : f16[1,32,512,128]""",
        True,
        {"tiled": [], "rows (old)": OLD_ATTENTION},
    ),
    "rms_norm_4096": (
        """input %x{i} : f16[1,4096]
weight %w{i} : f16[4096]
%o{i} = rms_norm(%x{i}, %w{i}) {eps = 1e-06} : f16[1,4096]""",
        True,
        {"cached": [], "uncached": [(reductions, "MAX_CACHED", 0)]},
    ),
    "rms_norm_512": (
        """input %x{i} : f16[1,512]
weight %w{i} : f16[512]
%o{i} = rms_norm(%x{i}, %w{i}) {eps = 1e-06} : f16[1,512]""",
        True,
        {"cached": [], "uncached": [(reductions, "MAX_CACHED", 0)]},
    ),
    "rms_norm_512x4096": (
        """input %x{i} : f16[512,4096]
weight %w{i} : f16[4096]
%o{i} = rms_norm(%x{i}, %w{i}) {eps = 1e-06} : f16[512,4096]""",
        True,
        {"cached": []},
    ),
    "kv_write_real": (
        """input %c{i} : f16[1,8,1024,128]
input %n{i} : f16[1,8,1,128]
input %p{i} : i32[1]
%o{i} = kv_cache_write(%c{i}, %n{i}, %p{i}) : f16[1,8,1024,128]""",
        True,
        {"16-byte": []},
    ),
}
for _k, _n in ((512, 512), (512, 128), (512, 1376), (1376, 512), (512, 1024), (4096, 4096)):
    CASES[f"gemv_{_k}x{_n}"] = (
        f"""input %x{{i}} : f16[1,{_k}]
weight %w{{i}} : f16[{_k},{_n}]
%o{{i}} = matmul(%x{{i}}, %w{{i}}) : f16[1,{_n}]""",
        True,
        {"auto": [], "no small single pass": [(geometry, "SINGLE_PASS_ROWS", 0)]},
    )


def build_graph(text: str, copies: int) -> og.Graph:
    body = "\n".join(text.replace("{i}", str(i)) for i in range(copies))
    outs = ", ".join(f"%o{i}" for i in range(copies))
    return og.parse(f"graph bench {{\n{body}\noutput {outs}\n}}\n")


def full_lengths(graph: og.Graph, inputs: dict[str, np.ndarray]) -> None:
    """kv_len = the cache length (decode attends to the full cache); pos = the last row."""
    types = graph.value_types()
    for node in graph.nodes:
        if node.op == "attention" and len(node.operands) == 4:
            inputs[node.operands[3]][...] = types[node.operands[1]].shape[2]
        if node.op == "kv_cache_write":
            inputs[node.operands[2]][...] = types[node.operands[0]].shape[2] - 1


def kernel_us(run: Callable[[], Any], iters: int = 10) -> float:
    """CUPTI device time per og_ kernel launch."""
    import cupy as cp
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            run()
        cp.cuda.Device().synchronize()
    total, count = 0.0, 0
    for evt in prof.key_averages():
        if evt.key.startswith("og_"):
            total += float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
            count += evt.count
    return total / count if count else float("nan")


def bench_case(name: str, copies: int, iters: int, pdl: bool = True) -> list[list[str]]:
    import cupy as cp

    text, check, variants = CASES[name]
    graph = build_graph(text, copies)
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    full_lengths(graph, inputs)
    want = None
    if check:  # copy 0 alone, same data
        first = build_graph(text, 1)
        first_inputs = {i.name: inputs[i.name] for i in first.inputs}
        first_weights = {w.name: weights[w.name] for w in first.weights}
        want = run_reference(first, first_inputs, first_weights)
    dev_inputs = {k: cp.asarray(v) for k, v in inputs.items()}
    types = graph.value_types()
    rows = []
    for variant, settings in variants.items():
        ctx = [setting(m, n, v) for m, n, v in settings]
        for c in ctx:
            c.__enter__()
        try:
            options = LoweringOptions(pdl=pdl)
            program = cuda_program(graph, weights=weights, options=options)
            out = {
                o: cp.empty(types[o].shape, dtype=numpy_dtype(types[o].dtype))
                for o in graph.output_names()
            }
            program.run(dev_inputs, out=out)  # eager: compiles
            program.run(dev_inputs, out=out)  # capture
        finally:
            for c in reversed(ctx):
                c.__exit__(None, None, None)

        def run(p: Any = program, o: dict[str, Any] = out) -> Any:
            return p.run(dev_inputs, out=o)

        per_op = median_us(run, program.stream, iters, warmup=5) / copies
        k_us = kernel_us(run)
        err = "-"
        if want is not None:
            got = cp.asnumpy(out["o0"]).astype(np.float64)
            err = f"{nmse(got, np.asarray(want['o0'], np.float64)):.1e}"
        op_bytes = _op_bytes(graph, types)
        gbs = f"{op_bytes / (k_us * 1e-6) / 1e9:.0f}" if np.isfinite(k_us) else "-"
        rows.append([name, variant, f"{per_op:.2f}", f"{k_us:.2f}", gbs, err])
        print(" | ".join(rows[-1]), flush=True)
        program.close()
    return rows


def _op_bytes(graph: og.Graph, types: dict[str, Any]) -> int:
    """Bytes one copy of the op reads and writes (operands read once, result written once)."""
    node = next(n for n in graph.nodes if n.name == "o0")
    return sum(types[o].nbytes for o in node.operands) + types["o0"].nbytes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="cases whose name contains this")
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument(
        "--no-pdl",
        action="store_true",
        help="plain launches: each kernel's CUPTI time is then its own, not overlapping the"
        " previous kernel's (with PDL a kernel starts early and waits)",
    )
    args = parser.parse_args(argv)
    device = device_name()
    head = "| case | variant | graph µs / op | kernel µs | GB/s (kernel) | nmse vs reference |"
    pdl = "off" if args.no_pdl else "on"
    lines = [f"device: {device}, PDL {pdl}", "", head, "|---|---|---|---|---|---|"]
    for name in CASES:
        if args.only and args.only not in name:
            continue
        big = ("prefill", "512x4096", "4096x4096")
        copies = 4 if any(b in name for b in big) else args.copies
        try:
            rows = bench_case(name, copies, args.iters, pdl=not args.no_pdl)
        except Exception as err:  # noqa: BLE001 - one broken case must not hide the rest
            rows = [[name, "error", f"{type(err).__name__}: {err}"[:200], "", "", ""]]
            print(rows[0], flush=True)
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        if args.markdown:
            Path(args.markdown).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
