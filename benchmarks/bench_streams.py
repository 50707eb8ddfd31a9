"""Stream assignment and sync insertion on the examples and on generated Llama graphs.

For every graph: its width (maximum antichain), Nimble's synchronization count (|reduced edges| -
|matching| of the graph plus its end), and for each policy (`single`, `fanout`, `chains`, and
`chains` with min-branch-us=0, i.e. every chain may fork; max-streams 4 on the H100 cost model) the
streams used, the waits insert-sync emits, the estimated speedup over one stream, and the planning
CPU time of chains and fanout (assign-streams + insert-sync, parse excluded; process time, since
the 2-core machine is shared and wall time is noisy).

    python benchmarks/bench_streams.py                  # examples + Llama 1k, 10k, 100k nodes
    python benchmarks/bench_streams.py --sizes 1000     # a quicker run

Prints a Markdown table (current figures in docs/benchmarks.md; every run in docs/results/). Llama graphs use 8B-like sizes
(hidden 4096, 32/8 heads, ffn 14336, f16, decode of one token): the shapes set the cost model's
estimates, the layer count sets the node count.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.analysis.chain_cover import width
from optgraph.analysis.schedule_estimate import data_predecessors, estimate_schedule
from optgraph.passes.assign_streams import AssignStreamsPass, nimble_syncs
from optgraph.passes.insert_sync import InsertSyncPass

# (column, assign-streams options); max-streams is added from the command line.
CONFIGS: tuple[tuple[str, dict[str, object]], ...] = (
    ("single", {"policy": "single"}),
    ("fanout", {"policy": "fanout"}),
    ("chains", {"policy": "chains"}),
    ("chains min-branch 0", {"policy": "chains", "min_branch_us": 0.0}),
)
LLAMA = {
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn": 14336,
    "vocab": 32000,
    "dtype": "f16",
    "cache_len": 4096,
}


def _gen_llama():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_llama


def llama_with_nodes(target: int) -> og.Graph:
    """A decode graph with about `target` nodes (layers chosen from the per-layer count)."""
    generate = _gen_llama()
    one = len(og.parse(generate(layers=1, **LLAMA)).nodes)
    two = len(og.parse(generate(layers=2, **LLAMA)).nodes)
    per_layer, fixed = two - one, one - (two - one)
    layers = max(1, round((target - fixed) / per_layer))
    return og.parse(generate(layers=layers, **LLAMA), f"llama-{target}")


def measure(graph: og.Graph, max_streams: int) -> dict[str, object]:
    row: dict[str, object] = {"nodes": len(graph.nodes)}
    plain = graph.with_nodes(n for n in graph.nodes if not n.is_event)
    row["width"] = width(data_predecessors(plain))
    row["nimble"] = nimble_syncs(graph)
    for column, options in CONFIGS:
        start = time.process_time()  # CPU time: the machine is shared, wall time is noisy
        assigned = AssignStreamsPass(max_streams=max_streams, **options).run(graph)  # type: ignore[arg-type]
        synced = InsertSyncPass().run(assigned)
        seconds = time.process_time() - start
        estimate = estimate_schedule(synced)
        row[column] = {
            "streams": len({n.stream for n in synced.nodes}),
            "waits": sum(1 for n in synced.nodes if n.op == "wait"),
            "speedup": estimate.speedup,
            "seconds": seconds,
        }
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--max-streams", type=int, default=4)
    args = parser.parse_args(argv)
    # Graphs are built one at a time: a 100k-node graph alive in the heap would slow every
    # garbage collection while the smaller ones are timed.
    graphs: list[tuple[str, Callable[[], og.Graph]]] = [
        (p.stem, functools.partial(og.parse_file, p))
        for p in sorted((ROOT / "examples").glob("*.ir"))
    ]
    graphs += [(f"llama {n // 1000}k", functools.partial(llama_with_nodes, n)) for n in args.sizes]
    head = "| graph | nodes | width | Nimble | " + " | ".join(
        f"{c}: streams / waits / speedup" for c, _ in CONFIGS
    )
    print(head + " | chains plan CPU s | fanout plan CPU s |")
    print("|" + "---|" * (head.count("|") + 1))
    for name, build in graphs:
        graph = build()
        gc.collect()
        r = measure(graph, args.max_streams)
        del graph
        cells = [name, f"{r['nodes']:,}", str(r["width"]), f"{r['nimble']:,}"]
        for c, _ in CONFIGS:
            m = r[c]
            cells.append(f"{m['streams']} / {m['waits']:,} / {m['speedup']:.2f}×")  # type: ignore[index]
        cells.append(f"{r['chains']['seconds']:.2f}")  # type: ignore[index]
        cells.append(f"{r['fanout']['seconds']:.2f}")  # type: ignore[index]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
