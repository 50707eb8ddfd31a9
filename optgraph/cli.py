"""The `optgraph` command.

    optgraph compile MODEL.ir [-p PIPELINE] [-o DIR] [--report-json FILE] [--vram-budget SIZE]
                              [--timeline FILE.json] [--no-merge-launches]
    optgraph opt MODEL.ir -p PIPELINE [--print-ir-after-all]
    optgraph run MODEL.ir [--device cpu|cuda] [--check] [--inputs FILE.npz] [--weights FILE]
                          [--seed N] [-p PIPELINE] [--no-graph] [--no-pdl] [--no-merge-launches]
                          [--vram-budget SIZE]
    optgraph dot MODEL.ir [-p PIPELINE] [-o FILE.dot|.svg|.png]
    optgraph import MODEL.onnx|MODEL.pt2 -o MODEL.ir [--weights-out W.safetensors]
    optgraph passes

Example:

    $ optgraph opt examples/diamond.ir -p dce,cse --print-ir-after-all
    // ----- IR after dce -----
    graph diamond {
    ...

Every user error (an `OptGraphError`: bad syntax, types, unknown passes, missing files) is printed
as its located diagnostic on stderr and exits 1; any other exception is a bug and shows its
traceback. Results go to stdout; progress (only on a terminal) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import MISSING
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from optgraph.analysis.schedule_estimate import chrome_trace, estimate_schedule
from optgraph.artifacts import CompileResult, write_artifacts, write_atomic
from optgraph.cli_run import RUNNERS, check_against_reference, load_values, output_table
from optgraph.cli_run import cuda_usable as _cuda_usable
from optgraph.errors import OptGraphError, VerifyError
from optgraph.ir.dot import to_dot, write_picture
from optgraph.ir.graph import Graph
from optgraph.ir.parser import parse_file
from optgraph.ir.printer import print_graph
from optgraph.ir.verify import verify
from optgraph.passes.base import Pass
from optgraph.passes.check_races import find_races, race_diagnostics
from optgraph.passes.manager import describe_passes, parse_pipeline, run_pipeline
from optgraph.report import compute_report


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # A pipe or file gets a wide, colourless table rather than one wrapped at 80 columns.
    width = None if stream.isatty() else 120
    return Console(file=stream, width=width, highlight=False)


# -- compile ------------------------------------------------------------------------------------


def _run_with_progress(graph: Graph, passes: list[Pass]) -> Graph:
    """Run the pipeline, with a transient progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty() or len(passes) < 2:
        return run_pipeline(graph, passes)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=_console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"running {passes[0].name}", total=len(passes))

        def advance(done: Pass, _: Graph) -> None:
            position = passes.index(done) + 1
            following = passes[position].name if position < len(passes) else "done"
            progress.update(task, advance=1, description=f"running {following}")

        return run_pipeline(graph, passes, after_each=advance)


NO_MERGE_HELP = "cuda: one launch per kernel (do not merge independent kernels of a stream)"
VRAM_HELP = "e.g. 2GiB: stream the weights that do not fit (appends plan-prefetch{budget=SIZE})"


def _pipeline(args: argparse.Namespace) -> str:
    """The -p pipeline, with plan-prefetch under `--vram-budget` (weights streamed over it)."""
    if args.vram_budget is None:
        return str(args.pipeline)
    from optgraph.passes.plan_prefetch import with_vram_budget

    return with_vram_budget(args.pipeline, args.vram_budget)


def cmd_compile(args: argparse.Namespace) -> int:
    passes = parse_pipeline(_pipeline(args))
    start = time.perf_counter()
    graph = parse_file(args.model)
    graph = _run_with_progress(graph, passes)
    seconds = time.perf_counter() - start
    report = compute_report(graph, compile_seconds=seconds)

    table = Table(title=f"optgraph compile: {graph.name}", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, value in report.rows():
        table.add_row(Text(label), Text(value))
    console = _console()
    console.print(table)
    if args.vram_budget is not None and report.peak_device_bytes is not None:
        console.print(
            Text(f"vram budget {args.vram_budget}: peak device bytes {report.peak_device_bytes:,}")
        )
    if args.report_json is not None:
        write_atomic(args.report_json, report.to_json())
        console.print(Text(f"wrote {args.report_json}"))
    if args.timeline is not None:
        write_atomic(args.timeline, json.dumps(chrome_trace(graph, estimate_schedule(graph))))
        console.print(Text(f"wrote {args.timeline} (open in ui.perfetto.dev or chrome://tracing)"))
    if args.output is not None:
        result = CompileResult(graph, report, merge_launches=not args.no_merge_launches)
        for path in write_artifacts(args.output, result):
            console.print(Text(f"wrote {path}"))
    if report.races:  # check-races runs last: a compile with races fails
        raise VerifyError.from_diagnostics(race_diagnostics(graph, find_races(graph)))
    return 0


# -- dot ----------------------------------------------------------------------------------------


def cmd_dot(args: argparse.Namespace) -> int:
    graph = run_pipeline(parse_file(args.model), parse_pipeline(args.pipeline))
    if args.output is None:
        sys.stdout.write(to_dot(graph))
        return 0
    path = write_picture(graph, args.output)
    _console().print(Text(f"wrote {path}"))
    return 0


# -- opt ----------------------------------------------------------------------------------------


def cmd_opt(args: argparse.Namespace) -> int:
    passes = parse_pipeline(args.pipeline)
    graph = parse_file(args.model)
    out = sys.stdout
    if args.print_ir_after_all and passes:

        def dump(p: Pass, g: Graph) -> None:
            out.write(f"// ----- IR after {p.name} -----\n{print_graph(g)}")
            out.flush()

        run_pipeline(graph, passes, after_each=dump)
    else:
        out.write(print_graph(run_pipeline(graph, passes)))
    return 0


# -- run ----------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if _cuda_usable() else "cpu")
    if device == "cuda" and not _cuda_usable():
        raise OptGraphError(
            "run --device cuda: no usable CUDA GPU (CuPy missing or no device); use --device cpu"
        )
    graph = parse_file(args.model)
    verify(graph)
    inputs, weights = load_values(graph, args.inputs, args.weights, args.seed)
    options: dict[str, Any] = {"pipeline": _pipeline(args)}
    if device == "cuda":
        options["no_graph"] = args.no_graph
        options["no_pdl"] = args.no_pdl
        options["no_merge_launches"] = args.no_merge_launches
    results = RUNNERS[device](graph, inputs, weights, **options)
    console = _console()
    console.print(output_table(graph, results, device))
    if args.check:
        return check_against_reference(
            graph, inputs, weights, results, console, exact=device == "cpu"
        )
    return 0


# -- passes -------------------------------------------------------------------------------------


def _format_default(default: Any) -> str:
    if default is MISSING:
        return ""
    if isinstance(default, bool):
        return " = true" if default else " = false"
    return f" = {default}"


def cmd_passes(args: argparse.Namespace) -> int:
    table = Table(title="optgraph passes", show_lines=False)
    table.add_column("pass")
    table.add_column("options")
    table.add_column("summary")
    for name, summary, options in describe_passes():
        text = ", ".join(f"{opt}: {kind}{_format_default(d)}" for opt, kind, d in options)
        table.add_row(Text(name), Text(text or "-"), Text(summary))
    _console().print(table)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """A model in: MODEL.onnx or MODEL.pt2 (torch.export.save) -> MODEL.ir [+ weights]."""
    from optgraph.frontends.model_files import import_model_file

    graph, weights = import_model_file(args.model, args.output, args.weights_out)
    note = f", {len(weights)} weights -> {args.weights_out}" if args.weights_out else ""
    print(f"imported {args.model}: {len(graph.nodes)} nodes -> {args.output}{note}")
    return 0


# -- entry point --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optgraph", description="Graph-optimization compiler for GPU inference graphs."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="run a pipeline and report what it decided")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default: default)")
    p.add_argument("-o", "--output", metavar="DIR", help="write model.opt.ir, report.json, ...")
    p.add_argument("--report-json", metavar="FILE", help="write the report figures as JSON")
    p.add_argument("--vram-budget", metavar="SIZE", help=VRAM_HELP)
    p.add_argument(
        "--timeline", metavar="FILE.json", help="write the estimated schedule as a Chrome trace"
    )
    p.add_argument(
        "--no-merge-launches",
        action="store_true",
        help="-o: the CUDA plan with one launch per kernel (kernels.cu, cuda_plan.json)",
    )
    p.set_defaults(handler=cmd_compile)

    p = sub.add_parser("dot", help="draw the stream assignment (DOT text, .svg or .png)")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", default="default", help="pass pipeline (default: default)")
    p.add_argument(
        "-o", "--output", metavar="FILE", help=".dot, .svg or .png (default: DOT on stdout)"
    )
    p.set_defaults(handler=cmd_dot)

    p = sub.add_parser("opt", help="print the IR after the given passes")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("-p", "--pipeline", required=True, help="e.g. dce,cse")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after each pass")
    p.set_defaults(handler=cmd_opt)

    p = sub.add_parser("run", help="run on seeded random or given inputs and weights")
    p.add_argument("model", metavar="MODEL.ir")
    p.add_argument("--device", choices=sorted(RUNNERS), help="default: cuda when usable, else cpu")
    p.add_argument("--check", action="store_true", help="compare with the reference interpreter")
    p.add_argument("--inputs", metavar="FILE.npz", help="input arrays by name")
    p.add_argument("--weights", metavar="FILE", help="weights (.npz or .safetensors)")
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs and weights")
    p.add_argument("-p", "--pipeline", default="default", help="pipeline for --device cuda")
    p.add_argument(
        "--no-graph", action="store_true", help="cuda: launch eagerly, no CUDA graph (debugging)"
    )
    p.add_argument(
        "--no-pdl",
        action="store_true",
        help="cuda: plain kernel launches, no Programmatic Dependent Launch (sm_90+)",
    )
    p.add_argument("--no-merge-launches", action="store_true", help=NO_MERGE_HELP)
    p.add_argument("--vram-budget", metavar="SIZE", help=VRAM_HELP + " (cpu: planned executor)")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("import", help="a model in: MODEL.onnx or MODEL.pt2 to MODEL.ir")
    p.add_argument("model", metavar="MODEL.onnx|MODEL.pt2")
    p.add_argument("-o", "--output", metavar="MODEL.ir", required=True, help="the IR to write")
    p.add_argument("--weights-out", metavar="W.safetensors", help="write the weights (or .npz)")
    p.set_defaults(handler=cmd_import)

    p = sub.add_parser("passes", help="list every pass with its options")
    p.set_defaults(handler=cmd_passes)
    return parser


MAX_SHOWN_DIAGNOSTICS = 50


def render_error(err: OptGraphError) -> str:
    """`str(err)`, but a file with thousands of errors shows the first 50 and a count."""
    shown = err.diagnostics[:MAX_SHOWN_DIAGNOSTICS]
    text = "\n".join(d.render() for d in shown)
    hidden = len(err.diagnostics) - len(shown)
    if hidden > 0:
        text += f"\n{hidden} more errors not shown ({len(err.diagnostics)} in all)"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 user error, 2 usage error)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except OptGraphError as err:
        sys.stdout.flush()
        print(render_error(err), file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `optgraph opt big.ir ... | head`: stop quietly, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
