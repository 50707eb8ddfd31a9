"""Compile speed: parse, verify and print graphs of about 1k, 10k and 100k nodes, and optionally
run a pipeline and the compile report on them.

    python benchmarks/bench_compile.py                      # 1k, 10k, 100k nodes
    python benchmarks/bench_compile.py --sizes 1000 10000 --repeat 5
    python benchmarks/bench_compile.py --pipeline default    # `optgraph compile`'s work

Graphs are Llama decode steps from `examples/gen_llama.py` with as many layers as the size needs
(26 nodes a layer), or a chain of elementwise ops where that generator is missing. Each phase is
timed separately in CPU seconds (`time.process_time`, so other work on the machine counts less;
median of `--repeat` runs: 3, and 1 from 50k nodes, unless `--repeat` is given, which applies to
every size; the text is generated once, untimed); nodes/s is for parse + verify + print
together. Targets: 10k nodes in at most 2 s, 100k in at most 20 s. With `--pipeline`, the
pipeline (re-verified after each pass) and the compile report are timed too, and the target is
for parse + verify + pipeline + report + print, what `optgraph compile` does: 10k nodes in at most 2 s,
100k in at most 5 s (issue #35).
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
PIPELINE_TARGETS_SECONDS = {10_000: 2.0, 100_000: 5.0}
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


def _seconds(run: Callable[..., object], *args: object) -> tuple[float, object]:
    start = time.process_time()
    result = run(*args)
    return time.process_time() - start, result


def _report(graph: og.Graph) -> object:
    """The compile report as `optgraph compile` computes it (the garbage collector paused)."""
    with gc_paused():
        return compute_report(graph)


def _forget_schedules() -> None:
    """Drop the happens-before clocks kept for the last graphs: a later run's graphs are equal to
    this run's and would take them over, which a single `optgraph compile` never does."""
    from optgraph.analysis import happens_before

    happens_before._recent.clear()


def measure(text: str, repeat: int, pipeline: str | None) -> dict[str, float]:
    """Median CPU seconds of each phase over `repeat` runs, each from the text again, as a
    compile does: nodes and graphs remember what they inferred, so a phase repeated on the
    same objects would time less work."""
    times: dict[str, list[float]] = {"parse": [], "verify": [], "print": []}
    if pipeline:
        times |= {"pipeline": [], "report": []}
    graph: object = None
    for _ in range(repeat):
        _forget_schedules()
        seconds, graph = _seconds(og.parse, text)
        assert isinstance(graph, og.Graph)
        times["parse"].append(seconds)
        times["verify"].append(_seconds(og.verify, graph)[0])
        seconds, printed = _seconds(og.print_graph, graph)
        times["print"].append(seconds)
        if pipeline:
            seconds, compiled = _seconds(og.run_pipeline, graph, pipeline)
            assert isinstance(compiled, og.Graph)
            times["pipeline"].append(seconds)
            times["report"].append(_seconds(_report, compiled)[0])
    assert isinstance(graph, og.Graph)
    assert printed == og.print_graph(og.parse(str(printed)))  # the round trip holds at size
    figures = {"nodes": float(len(graph.nodes)), "chars": float(len(text))}
    figures |= {phase: statistics.median(runs) for phase, runs in times.items()}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--repeat",
        type=int,
        help="runs per phase (median); default 3, and 1 from 50k nodes",
    )
    parser.add_argument("--pipeline", help="also time run_pipeline with this pipeline")
    parser.add_argument("--chain", action="store_true", help="use the chain generator")
    args = parser.parse_args(argv)

    generate = None if args.chain else _llama_generator()
    source = "gen_llama decode" if generate else "elementwise chain"
    generate = generate or chain_graph

    def repeat(size: int) -> int:
        if args.repeat is not None:
            return int(args.repeat)
        return 3 if size < 50_000 else 1

    runs = sorted({repeat(size) for size in args.sizes})
    title = f"optgraph front end ({source} graphs, median of {'/'.join(map(str, runs))})"
    table = Table(title=title)
    columns = ["nodes", "text MB", "parse s", "verify s", "print s", "total s", "nodes/s"]
    columns += ["pipeline s", "report s", "compile s"] if args.pipeline else []
    columns += ["target"]
    for column in columns:
        table.add_column(column, justify="right")
    failed = False
    for size in args.sizes:
        f = measure(generate(size), repeat(size), args.pipeline)
        total = f["parse"] + f["verify"] + f["print"]
        compile_s = f["parse"] + f["verify"] + f.get("pipeline", 0.0) + f.get("report", 0.0)
        compile_s += f["print"]
        timed = compile_s if args.pipeline else total
        targets = PIPELINE_TARGETS_SECONDS if args.pipeline else TARGETS_SECONDS
        target = next((t for n, t in sorted(targets.items()) if size <= n), None)
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
