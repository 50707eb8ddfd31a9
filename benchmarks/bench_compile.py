"""Compile speed: parse, verify and print graphs of about 1k, 10k and 100k nodes, and optionally
run a pipeline and the compile report on them.

    python benchmarks/bench_compile.py                      # 1k, 10k, 100k nodes
    python benchmarks/bench_compile.py --sizes 1000 10000 --repeat 5
    python benchmarks/bench_compile.py --pipeline default    # `optgraph compile`'s work

Graphs are Llama decode steps from `examples/gen_llama.py` with as many layers as the size needs
(26 nodes a layer), or a chain of elementwise ops where that generator is missing. Each phase is
timed separately in CPU seconds (`time.process_time`, so other work on the machine counts less;
median of `--repeat` runs; the text is generated once, untimed); nodes/s is for parse + verify +
print together. With `--pipeline`, the pipeline (re-verified after each pass) and the compile
report are timed too, and the target is for parse + pipeline + report + print, what `optgraph
compile` does. Targets: 10k nodes in at most 2 s, 100k in at most 20 s.
Current figures in docs/benchmarks.md; every run in docs/results/.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.cli.report import compute_report
from optgraph.ir.gc_pause import gc_paused

TARGETS_SECONDS = {10_000: 2.0, 100_000: 20.0}
NODES_PER_LAYER = 26  # gen_llama: 26 nodes a layer plus 3 (embedding, final norm, lm head)


def _llama_generator() -> Callable[[int], str] | None:
    path = ROOT / "examples" / "gen_llama.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("gen_llama", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return lambda nodes: module.generate_llama(layers=max(1, round((nodes - 3) / NODES_PER_LAYER)))


def chain_graph(nodes: int) -> str:
    """A chain of `nodes` elementwise ops: the fallback generator."""
    ops = ("exp", "tanh", "neg", "relu")
    lines = ["graph chain {", "  input %x : f32[4,64]"]
    previous = "x"
    for i in range(nodes):
        lines.append(f"  %v{i} = {ops[i % len(ops)]}(%{previous}) : f32[4,64]")
        previous = f"v{i}"
    lines += [f"  output %{previous}", "}"]
    return "\n".join(lines) + "\n"


def _median_seconds(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(repeat):
        start = time.process_time()
        result = run()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def _report(graph: og.Graph) -> object:
    """The compile report as `optgraph compile` computes it (the garbage collector paused)."""
    with gc_paused():
        return compute_report(graph)


def measure(text: str, repeat: int, pipeline: str | None) -> dict[str, float]:
    parse_s, graph = _median_seconds(lambda: og.parse(text), repeat)
    assert isinstance(graph, og.Graph)
    verify_s, _ = _median_seconds(lambda: og.verify(graph), repeat)
    print_s, printed = _median_seconds(lambda: og.print_graph(graph), repeat)
    assert printed == og.print_graph(og.parse(str(printed)))  # the round trip holds at size
    figures = {
        "nodes": float(len(graph.nodes)),
        "chars": float(len(text)),
        "parse": parse_s,
        "verify": verify_s,
        "print": print_s,
    }
    if pipeline:
        figures["pipeline"], compiled = _median_seconds(
            lambda: og.run_pipeline(graph, pipeline), repeat
        )
        assert isinstance(compiled, og.Graph)
        figures["report"], _ = _median_seconds(lambda: _report(compiled), repeat)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3, help="runs per phase (median)")
    parser.add_argument("--pipeline", help="also time run_pipeline with this pipeline")
    parser.add_argument("--chain", action="store_true", help="use the chain generator")
    args = parser.parse_args(argv)

    generate = None if args.chain else _llama_generator()
    source = "gen_llama decode" if generate else "elementwise chain"
    generate = generate or chain_graph

    table = Table(title=f"optgraph front end ({source} graphs, median of {args.repeat})")
    columns = ["nodes", "text MB", "parse s", "verify s", "print s", "total s", "nodes/s"]
    columns += ["pipeline s", "report s", "compile s"] if args.pipeline else []
    columns += ["target"]
    for column in columns:
        table.add_column(column, justify="right")
    failed = False
    for size in args.sizes:
        f = measure(generate(size), args.repeat if size < 50_000 else 1, args.pipeline)
        total = f["parse"] + f["verify"] + f["print"]
        compile_s = f["parse"] + f.get("pipeline", 0.0) + f.get("report", 0.0) + f["print"]
        timed = compile_s if args.pipeline else total
        target = next((t for n, t in sorted(TARGETS_SECONDS.items()) if size <= n), None)
        verdict = "-" if target is None else ("ok" if timed <= target else f"MISSED (>{target} s)")
        failed |= verdict.startswith("MISSED")
        row = [f"{int(f['nodes']):,}", f"{f['chars'] / 1e6:.2f}", f"{f['parse']:.3f}"]
        row += [f"{f['verify']:.3f}", f"{f['print']:.3f}", f"{total:.3f}"]
        row += [f"{f['nodes'] / total:,.0f}"]
        if args.pipeline:
            row += [f"{f['pipeline']:.3f}", f"{f['report']:.3f}", f"{compile_s:.3f}"]
        table.add_row(*row, verdict)
    Console(width=140).print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
