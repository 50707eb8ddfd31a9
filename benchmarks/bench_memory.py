"""Memory planning: arena bytes against the lower bounds, per example and generated Llama graph.

    python benchmarks/bench_memory.py            # examples + generated Llama graphs, then 100k
    python benchmarks/bench_memory.py --quick    # skip the 100k-buffer timing

Per graph, two schedules:

- `1 stream`: `verify,dce,cse,fuse,analyze-lifetimes,plan-memory` (and `1 stream unfused`
  without `fuse`: more, smaller buffers);
- `chains x4`: the same with `assign-streams{max-streams=4,policy=chains},insert-sync` before the
  memory passes (the default pipeline), and `chains x4 all` with `min-branch-us=0`, which forks
  every independent chain however small (more concurrency, more memory).

Columns: buffers; streams used; arena bytes; L (largest live total in issue order); arena / L;
the concurrency bound (max-weight antichain of "entirely before", exact, by min-flow); arena / that
bound; bytes without reuse; the extra bytes against the 1-stream schedule's arena (`vs 1-stream`),
and against a one-stream plan of the same issue order (`streams cost`); planning seconds
(analyze-lifetimes + plan-memory). Targets: 1 stream arena <= 1.05 L everywhere; chains x4 arena
<= 1.10 x the 1-stream arena on llama_decode; 100k buffers planned in <= 10 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.analysis.arena_plan import plan
from optgraph.analysis.lifetimes import compute_lifetimes
from optgraph.analysis.memory_bounds import memory_figures
from optgraph.ir.gc_pause import gc_paused
from optgraph.passes.manager import run_pipeline

FRONT = "verify,dce,cse,fuse"
SCHEDULES = {
    "1 stream": "",
    "1 stream unfused": "",
    "chains x4": "assign-streams{max-streams=4,policy=chains},insert-sync",
    "chains x4 all": "assign-streams{max-streams=4,policy=chains,min-branch-us=0},insert-sync",
}
MEMORY = "analyze-lifetimes,plan-memory"


def _gen_llama() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated() -> list[tuple[str, str]]:
    gen = _gen_llama().generate_llama
    small = {"hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1376, "vocab": 1024, "dtype": "f16"}
    big = {"hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 11008, "vocab": 32000, "dtype": "f16"}
    return [
        ("llama8 decode h512", gen(layers=8, cache_len=128, mode="decode", **small)),
        ("llama8 decode h4096", gen(layers=8, cache_len=1024, mode="decode", **big)),
        ("llama8 decode h512 b4", gen(layers=8, cache_len=128, batch=4, **small)),
        ("llama8 prefill h512 s128", gen(layers=8, seq=128, mode="prefill", **small)),
        ("llama32 decode h512", gen(layers=32, cache_len=128, mode="decode", **small)),
    ]


def row(name: str, graph: og.Graph, schedule: str) -> dict[str, object]:
    fused = FRONT if schedule != "1 stream unfused" else "verify,dce,cse"
    front = ",".join(p for p in (fused, SCHEDULES[schedule]) if p)
    scheduled = run_pipeline(graph, front)
    start = time.perf_counter()
    planned = run_pipeline(scheduled, MEMORY)
    seconds = time.perf_counter() - start
    f = memory_figures(planned)
    streams = len({n.stream for n in planned.nodes if not n.is_event})
    buffers = sum(1 for n in planned.nodes if n.ann.live is not None)
    return {"graph": name, "schedule": schedule, "buffers": buffers, "streams": streams, **f,
            "seconds": seconds}  # fmt: skip


def _kib(v: object) -> str:
    return "-" if v is None else f"{int(v) / 1024:,.1f}"  # type: ignore[call-overload]


def print_table(rows: list[dict[str, object]]) -> None:
    head = ("graph", "schedule", "bufs", "str", "arena KiB", "L KiB", "a/L", "conc KiB", "a/conc",
            "no-reuse KiB", "vs 1-stream", "streams cost", "plan s")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    one: dict[str, int] = {}
    for r in rows:
        arena = int(r["arena_bytes"])  # type: ignore[call-overload]
        if r["schedule"] == "1 stream":
            one[str(r["graph"])] = arena
        base = one.get(str(r["graph"]))
        lower = int(r["memory_lower_bound_bytes"])  # type: ignore[call-overload]
        conc = r["concurrency_bound_bytes"]
        cells = [
            r["graph"], r["schedule"], r["buffers"], r["streams"], _kib(arena), _kib(lower),
            f"{arena / lower:.3f}" if lower else "-",
            _kib(conc), f"{arena / int(conc):.3f}" if conc else "-",  # type: ignore[call-overload]
            _kib(r["no_reuse_bytes"]),
            f"{arena / base:.3f}" if base and str(r["schedule"]).startswith("chains") else "-",
            _kib(r["stream_extra_bytes"]), f"{r['seconds']:.3f}",
        ]  # fmt: skip
        print("| " + " | ".join(str(c) for c in cells) + " |")


def time_large(layers: int) -> None:
    """Plan a one-stream decode graph of `layers` layers (about 18 buffers per layer)."""
    text = _gen_llama().generate_llama(
        layers=layers, hidden=512, heads=8, kv_heads=2, ffn=1376, vocab=1024, dtype="f16"
    )
    graph = og.parse(text)
    with gc_paused():
        start = time.perf_counter()
        lifetimes = compute_lifetimes(graph)
        analyzed = time.perf_counter() - start
        memory = plan(graph, "best", 256, True, lifetimes)
        total = time.perf_counter() - start
    print(
        f"\n{len(lifetimes):,} buffers ({len(graph.nodes):,} nodes): analyze-lifetimes "
        f"{analyzed:.2f} s + plan-memory {total - analyzed:.2f} s = {total:.2f} s; "
        f"arena {memory.arena_bytes / 2**20:,.1f} MiB ({memory.algo})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100k-buffer timing")
    parser.add_argument("--large-layers", type=int, default=5600)
    args = parser.parse_args()
    graphs = [(p.stem, og.parse_file(p)) for p in sorted((ROOT / "examples").glob("*.ir"))]
    graphs += [(name, og.parse(text)) for name, text in generated()]
    rows = [row(name, g, s) for name, g in graphs for s in SCHEDULES]
    print_table(rows)
    if not args.quick:
        time_large(args.large_layers)


if __name__ == "__main__":
    main()
