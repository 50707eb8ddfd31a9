"""The `optgraph` command.

    optgraph compile MODEL.ir [-p PIPELINE] [-o DIR] [--report-json FILE] [--vram-budget SIZE]
                              [--timeline FILE.json] [--no-merge-launches] [-q]
    optgraph opt MODEL.ir -p PIPELINE [--print-ir-after-all]
    optgraph run MODEL.ir [--device cpu|cuda] [--check] [--inputs FILE.npz] [--weights FILE]
                          [--seed N] [-p PIPELINE] [--no-graph] [--no-pdl] [--no-merge-launches]
                          [--vram-budget SIZE] [--save-outputs FILE.npz] [-q]
    optgraph dot MODEL.ir [-p PIPELINE] [-o FILE.dot|.svg|.png] [-q]
    optgraph import MODEL.onnx|MODEL.pt2|MODEL.gguf -o MODEL.ir [--weights-out W.safetensors]
                    [--mode decode|prefill] [--batch N] [--seq N] [--cache-len N] [--dtype D]
    optgraph generate MODEL [--prompt TEXT | --prompt-file F | --tokens 1,2,3] [--chat]
                    [--max-new-tokens N] [--temperature T --top-k K --top-p P --seed S]
                    [--device cpu|cuda] [--dtype D] [--context N] [--json FILE] (cli/generate.py)
    optgraph passes
    optgraph --version

Example:

    $ optgraph opt examples/diamond.ir -p dce,cse --print-ir-after-all
    // ----- IR after dce -----
    graph diamond {
    ...

Every user error (an `OptGraphError`: bad syntax, types, unknown passes, missing files) is printed
as its located diagnostic on stderr and exits 1; any other exception is a bug and shows its
traceback. Results go to stdout; progress goes to stderr (`optgraph.cli.progress`: a live line on
a terminal, else a line per phase; `-q` for none).

The options of each command are declared in `optgraph.cli.arguments`; this module runs the
command `main` parsed (`COMMANDS`).

Start-up is kept short (`--help`, `--version` and `passes` import neither NumPy nor networkx nor
lark): this module imports only argparse and small modules at the top, and each command imports
the layers it uses when it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from optgraph.cli.arguments import build_parser
from optgraph.errors import OptGraphError

if TYPE_CHECKING:
    from rich.console import Console

    from optgraph.cli.progress import PhaseProgress
    from optgraph.cli.report import Report
    from optgraph.ir.graph import Graph
    from optgraph.passes.base import Pass


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # A pipe or file gets a wide, colourless table rather than one wrapped at 80 columns.
    width = None if stream.isatty() else 120
    return Console(file=stream, width=width, highlight=False)


def _progress(quiet: bool, total: int) -> PhaseProgress:
    from optgraph.cli.progress import phase_progress

    return phase_progress(quiet, total)


@contextlib.contextmanager
def _placement_notes() -> Iterator[list[str]]:
    """Collect the `CpuMoeChoice` notes of split-experts{budget} (printed as lines after the
    tables); every other warning is shown as Python shows it."""
    from optgraph.passes.split_experts import CpuMoeChoice

    notes: list[str] = []
    recorded: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CpuMoeChoice)  # the other filters as they were
            try:
                yield notes
            finally:
                recorded.extend(caught)
    finally:  # outside catch_warnings: shown, not recorded again
        for w in recorded:
            if issubclass(w.category, CpuMoeChoice):
                notes.append(str(w.message))
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _read_model(progress: PhaseProgress, path: str) -> Graph:
    """Parse and verify the model as one phase: a bad model fails before any phase line."""
    from optgraph.ir.parser import parse_file
    from optgraph.ir.verify import verify

    with progress.phase(f"parse + verify {path}") as detail:
        graph = parse_file(path)
        verify(graph)
        detail.append(f"{len(graph.nodes):,} nodes")
    return graph


# -- compile ------------------------------------------------------------------------------------


def _pipeline(args: argparse.Namespace, graph: Graph | None = None) -> str:
    """The -p pipeline, with plan-prefetch under `--vram-budget` (weights streamed over it),
    preceded for a `graph` with moe nodes on one device by split-experts{budget} (experts on
    the CPU first: `with_vram_budget`'s `experts`), and assign-streams told whether lowering
    merges launches (`--no-merge-launches`)."""
    from optgraph.passes.manager import with_merged_launches, with_vram_budget

    pipeline = str(args.pipeline)
    if args.vram_budget is not None:
        experts = (
            graph is not None
            and getattr(args, "devices", 1) == 1
            and any(n.op == "moe" for n in graph.nodes)
        )
        pipeline = with_vram_budget(pipeline, args.vram_budget, experts=experts)
    return with_merged_launches(pipeline, not args.no_merge_launches)


def _compile_outputs(
    args: argparse.Namespace, progress: PhaseProgress, graph: Graph, report: Report
) -> list[str]:
    """Write what compile's options ask for, one phase per file, as one `OutputSet`: all of
    them or none (the old ones stay); the lines to print."""
    from optgraph.output_files import OutputSet

    lines = []
    outputs = OutputSet()
    try:
        if args.report_json is not None:
            with progress.phase(f"write {args.report_json}"):
                outputs.write_text(args.report_json, report.to_json())
            lines.append(f"wrote {args.report_json}")
        if args.timeline is not None:
            import json

            from optgraph.analysis.schedule_estimate import chrome_trace, estimate_schedule

            with progress.phase(f"write {args.timeline}"):
                trace = chrome_trace(graph, estimate_schedule(graph))
                outputs.write_text(args.timeline, json.dumps(trace))
            lines.append(f"wrote {args.timeline} (open in ui.perfetto.dev or chrome://tracing)")
        if args.output is not None:
            from optgraph.cli.artifacts import (
                ARTIFACTS,
                CompileResult,
                prepare_output_directory,
                stage_artifact,
            )
            from optgraph.codegen.lowering_options import LoweringOptions

            out = prepare_output_directory(args.output, outputs)  # removed if the set fails
            options = LoweringOptions(merge_launches=not args.no_merge_launches)
            result = CompileResult(graph, report, options=options)
            for artifact in ARTIFACTS:  # kernels.cu, cuda_plan.json, program.json: lowering inside
                with progress.phase(f"write {artifact.filename}"):
                    path = stage_artifact(outputs, out, artifact, result)
                if path is not None:
                    lines.append(f"wrote {path}")
        outputs.commit()
    finally:
        outputs.discard()
    return lines


def cmd_compile(args: argparse.Namespace) -> int:
    import time

    from rich.table import Table
    from rich.text import Text

    from optgraph.analysis.races import find_races, race_diagnostics
    from optgraph.cli.artifacts import ARTIFACTS, check_output_paths
    from optgraph.cli.report import compute_report
    from optgraph.errors import VerifyError
    from optgraph.ir.gc_pause import gc_paused
    from optgraph.passes.manager import parse_pipeline

    check_output_paths(args.output, [args.report_json, args.timeline])  # fail before the work
    passes = parse_pipeline(_pipeline(args))
    writes = [args.report_json, args.timeline, *([args.output] * len(ARTIFACTS))]
    total = 2 + len(passes) + sum(w is not None for w in writes)  # parse, passes, report, files
    with _progress(args.quiet, total) as progress:
        start = time.perf_counter()
        graph = _read_model(progress, args.model)
        if args.vram_budget is not None:  # experts to the CPU first for a graph with moe nodes
            passes = parse_pipeline(_pipeline(args, graph))
        with _placement_notes() as notes:
            graph = progress.run_pipeline(graph, passes)
        seconds = time.perf_counter() - start
        with progress.phase("report"), gc_paused():
            report = compute_report(graph, compile_seconds=seconds)
        wrote = _compile_outputs(args, progress, graph, report)

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
    for line in notes:
        console.print(Text(line))
    for line in wrote:
        console.print(Text(line))
    if report.races:  # check-races runs last: a compile with races fails
        raise VerifyError.from_diagnostics(race_diagnostics(graph, find_races(graph)))
    return 0


# -- dot ----------------------------------------------------------------------------------------


def cmd_dot(args: argparse.Namespace) -> int:
    from optgraph.ir.dot import to_dot, write_picture
    from optgraph.passes.manager import parse_pipeline

    passes = parse_pipeline(args.pipeline)
    with _progress(args.quiet, 2 + len(passes)) as progress:
        graph = progress.run_pipeline(_read_model(progress, args.model), passes)
        with progress.phase("draw" if args.output is None else f"write {args.output}"):
            if args.output is None:
                text = to_dot(graph)
            else:
                path = write_picture(graph, args.output)
    if args.output is None:
        sys.stdout.write(text)
    else:
        _console().print(f"wrote {path}", markup=False)
    return 0


# -- opt ----------------------------------------------------------------------------------------


def cmd_opt(args: argparse.Namespace) -> int:
    from optgraph.ir.parser import parse_file
    from optgraph.ir.printer import print_graph
    from optgraph.passes.manager import parse_pipeline, run_pipeline

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
    from optgraph.cli.run import (
        SPLIT_BOUNDS,
        check_against_reference,
        check_value_files,
        device_pipeline,
        load_values,
        output_table,
        prepare_run,
    )
    from optgraph.cli.run import cuda_usable as _cuda_usable

    device = args.device or ("cuda" if _cuda_usable() else "cpu")
    if device == "cuda" and not _cuda_usable():
        raise OptGraphError(
            "run --device cuda: no usable CUDA GPU (CuPy missing or no device); use --device cpu"
        )
    if args.save_outputs is not None:
        from optgraph.output_files import check_npz_target

        check_npz_target(args.save_outputs, "--save-outputs: ")  # before the work, not after
    # One process per GPU through NCCL (runtime/multi/gpus.py) compiles when it runs.
    on_gpus = device == "cuda" and args.devices > 1
    if args.node_times is not None:
        if device != "cuda" or on_gpus:
            raise OptGraphError(
                "run --node-times: measured on one GPU (--device cuda, --devices 1)"
            )
        from pathlib import Path

        from optgraph.output_files import check_target

        check_target(Path(args.node_times), "--node-times: ")
    phases = 3 + (not on_gpus) + (args.save_outputs is not None)
    with _progress(args.quiet, phases) as progress:
        graph = _read_model(progress, args.model)
        check_value_files(args.inputs, args.weights)
        from optgraph.codegen.lowering_options import LoweringOptions

        options = LoweringOptions(
            merge_launches=not args.no_merge_launches,
            pdl=not args.no_pdl,
            use_graph=not args.no_graph,
        )
        pipeline, split = device_pipeline(graph, _pipeline(args, graph), args.devices)
        compiling = contextlib.nullcontext() if on_gpus else progress.phase(f"compile for {device}")
        with compiling, _placement_notes() as notes:
            prepared = prepare_run(
                graph, device, pipeline=pipeline, options=options, devices=args.devices
            )
        try:
            prepared.check_memory(args.check, args.weights)  # before any value is allocated
            with progress.phase("inputs and weights"):
                inputs, weights = load_values(graph, args.inputs, args.weights, args.seed)
        except BaseException:
            prepared.close()  # a compiled cuda program's device buffers (the run closes it)
            raise
        extra: dict[str, object] = {"devices": args.devices} if device == "cuda" else {}
        if args.node_times is not None:
            extra["node_times"] = args.node_times
        with progress.phase("compile and run on cuda" if on_gpus else f"run on {device}"):
            results = prepared.run(inputs, weights, **extra)
        if args.save_outputs is not None:
            from optgraph.output_files import write_npz

            outputs = {name: results[name] for name in graph.output_names()}
            with progress.phase(f"write {args.save_outputs}"):
                write_npz(args.save_outputs, outputs, "--save-outputs: ")
    console = _console()
    console.print(output_table(graph, results, device))
    for line in notes:
        console.print(line, markup=False)
    if args.save_outputs is not None:
        console.print(f"wrote {args.save_outputs}", markup=False)
    if args.node_times is not None:
        console.print(
            f"wrote {args.node_times} (plan-prefetch{{times=...}} reads it)", markup=False
        )
    if args.check:
        # the cpu runs quantized products on its compiled kernels: f32 round-off, not bits
        quantized = any(w.type.is_quantized for w in graph.weights)
        exact = device == "cpu" and not split and not quantized
        bounds = SPLIT_BOUNDS if split else None
        return check_against_reference(graph, inputs, weights, results, console, exact, bounds)
    return 0


# -- passes -------------------------------------------------------------------------------------


def cmd_passes(args: argparse.Namespace) -> int:
    from optgraph.cli.info import passes_listing
    from optgraph.passes.manager import describe_passes

    sys.stdout.write(passes_listing(describe_passes()))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """A model in: MODEL.onnx, MODEL.pt2 (torch.export.save) or MODEL.gguf -> MODEL.ir
    [+ weights]."""
    from optgraph.frontends.model_files import import_model_file

    gguf_options = {"mode": args.mode, "batch": args.batch, "seq": args.seq}
    gguf_options |= {"cache_len": args.cache_len, "dtype": args.dtype}
    graph, weights = import_model_file(args.model, args.output, args.weights_out, gguf_options)
    note = f", {len(weights)} weights -> {args.weights_out}" if args.weights_out else ""
    print(f"imported {args.model}: {len(graph.nodes)} nodes -> {args.output}{note}")
    return 0


# -- entry point --------------------------------------------------------------------------------


MAX_SHOWN_DIAGNOSTICS = 50


def render_error(err: OptGraphError) -> str:
    """`str(err)`, but a file with thousands of errors shows the first 50 and a count."""
    shown = err.diagnostics[:MAX_SHOWN_DIAGNOSTICS]
    text = "\n".join(d.render() for d in shown)
    hidden = len(err.diagnostics) - len(shown)
    if hidden > 0:
        text += f"\n{hidden} more errors not shown ({len(err.diagnostics)} in all)"
    return text


def cmd_generate(args: argparse.Namespace) -> int:
    from optgraph.cli.generate import cmd_generate as generate

    return generate(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "compile": cmd_compile,
    "dot": cmd_dot,
    "generate": cmd_generate,
    "import": cmd_import,
    "opt": cmd_opt,
    "passes": cmd_passes,
    "run": cmd_run,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 user error, 2 usage error)."""
    args = build_parser().parse_args(argv)
    try:
        return int(COMMANDS[args.command](args))
    except OptGraphError as err:
        sys.stdout.flush()
        print(render_error(err), file=sys.stderr)
        return 1
    except MemoryError as err:  # a tensor the verifier accepts may still not fit this machine
        sys.stdout.flush()
        print(f"error: not enough memory: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `optgraph opt big.ir ... | head`: stop quietly, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
