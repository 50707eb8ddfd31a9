"""What `optgraph run` needs beyond argument parsing: the cpu and cuda runners, the inputs and
weights to run on, and the two tables it prints (output statistics, the check against the
reference interpreter).

Kept apart from `optgraph.cli.main` so the command module stays a thin layer of argparse handlers;
nothing here reads `argparse.Namespace`. CuPy is reached only through `optgraph.runtime.cuda.runner`,
imported lazily, so this module imports everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from optgraph.api.programs import CompiledProgram, run_on_cuda
from optgraph.api.programs import compile as compile_program
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph
from optgraph.passes.manager import parse_pipeline

if TYPE_CHECKING:
    from optgraph.codegen.lowering_options import LoweringOptions


def cuda_usable() -> bool:
    """Whether `optgraph.runtime.cuda.runner` exists and reports a usable GPU (`is_available()`)."""
    try:
        from optgraph.runtime.cuda import runner as cuda
    except ImportError:
        return False
    probe = getattr(cuda, "is_available", None)
    return bool(probe()) if callable(probe) else False


def seed_value(text: str) -> int:
    """`--seed`: a non-negative integer (NumPy's generators take no negative seeds)."""
    import argparse

    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{text}'") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {seed}")
    return seed


def _existing_file(path: str, what: str) -> str:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what}: no such file: '{p}'")
    if p.is_dir():
        raise InputError(f"{what}: '{p}' is a directory, not a file")
    return path


def check_value_files(inputs_path: str | None, weights_path: str | None) -> None:
    """`--inputs` and `--weights` name files that exist: checked before any long work."""
    if inputs_path is not None:
        _existing_file(inputs_path, "--inputs")
    if weights_path is not None:
        _existing_file(weights_path, "--weights")


def load_values(
    graph: Graph, inputs_path: str | None, weights_path: str | None, seed: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inputs and weights to run on: read from the given files, else seeded random ones."""
    from optgraph.reference import interpreter as reference

    if inputs_path is not None:
        inputs = reference.load_inputs(_existing_file(inputs_path, "--inputs"), graph)
    else:
        inputs = reference.random_inputs(graph, seed=seed)
    if weights_path is not None:
        weights = reference.load_weights(_existing_file(weights_path, "--weights"), graph)
    else:
        weights = reference.random_weights(graph, seed=seed)
    return inputs, weights


# NMSE a run over several devices may differ from the single-device reference by: the split
# changes the order of reductions (an all_reduce sums partial products), so f32 is not
# bit-identical; narrow dtypes round partial results once more.
SPLIT_BOUNDS: dict[str, float] = {"f32": 1e-12, "f16": 1e-6, "bf16": 1e-4}
SPLITTING = ("tensor-parallel", "pipeline-parallel")


def device_pipeline(graph: Graph, pipeline: str, devices: int) -> tuple[str, bool]:
    """The pipeline for `run --devices N` and whether it splits the graph: a graph with no
    device annotations gets `tensor-parallel{ways=N}` first; an annotated graph must already
    use exactly N devices."""
    count = graph.device_count()
    annotations = [d.ann for d in graph.inputs] + [w.ann for w in graph.weights]
    annotations += [n.ann for n in graph.nodes]
    annotated = count > 1 or any(a.device is not None for a in annotations)
    if devices == 1 and not annotated:
        return pipeline, False
    if not annotated:
        if any(p.name in SPLITTING for p in parse_pipeline(pipeline)):  # the pipeline splits it
            return pipeline, True
        return f"tensor-parallel{{ways={devices}}},{pipeline}", True
    if count != devices:
        raise OptGraphError(
            f"run --devices {devices}: graph '{graph.name}' is annotated for {count} "
            f"device{'s' if count > 1 else ''}"
        )
    return pipeline, False


def run_on_cpu(
    graph: Graph,
    inputs: dict[str, Any],
    weights: dict[str, Any],
    *,
    pipeline: str = "default",
    options: LoweringOptions | None = None,
    compiled: CompiledProgram | None = None,
) -> dict[str, Any]:
    """The compiled program on the planned executor: a NumPy arena at the planned offsets,
    planned as for `options` (whether launches merge shapes the stream assignment); `compiled`:
    that program, compiled already (`prepare_run`)."""
    program = compiled or compile_program(graph, pipeline, target="cpu", options=options)
    return program.run(inputs, weights)  # a split program cuts and joins the arrays itself


RUNNERS: dict[str, Callable[..., dict[str, Any]]] = {
    "cpu": run_on_cpu,
    "cuda": run_on_cuda,
}


@dataclass(frozen=True)
class PreparedRun:
    """A run decided before any value is allocated: the compiled program (on cpu its planned
    arena is part of the memory the run needs; on cuda the runtime checked the device's memory
    before it made its buffers, and its pinned buffers count on the host); on several GPUs
    the graph, compiled when it runs."""

    graph: Graph
    device: str
    pipeline: str
    options: LoweringOptions | None
    compiled: CompiledProgram | None

    def run(self, inputs: dict[str, Any], weights: dict[str, Any], **extra: Any) -> dict[str, Any]:
        if self.compiled is not None:
            extra["compiled"] = self.compiled
        return RUNNERS[self.device](
            self.graph, inputs, weights, pipeline=self.pipeline, options=self.options, **extra
        )

    def check_memory(self, check: bool, weights_file: str | None) -> None:
        """Refuse, with the figures, a run whose host memory exceeds what is available
        (`run_memory`), before the inputs and weights are made."""
        from optgraph import host_memory
        from optgraph.cli.run_memory import check_run_memory, run_memory

        program, pinned = None, 0
        if self.compiled is not None and self.device == "cpu":
            program = self.compiled.program
        elif self.compiled is not None and self.compiled.lowered is not None:
            from optgraph.runtime.cuda.memory import pinned_bytes

            pinned = pinned_bytes(self.compiled.lowered.main)
        memory = run_memory(self.graph, program, check, weights_file, pinned)
        check_run_memory(memory, host_memory.available_memory())

    def close(self) -> None:
        """Release a compiled cuda program (its device buffers) that will not run."""
        if self.compiled is not None:
            self.compiled.close()


def prepare_run(
    graph: Graph,
    device: str,
    *,
    pipeline: str,
    options: LoweringOptions | None,
    devices: int = 1,
) -> PreparedRun:
    """Compile `graph` for `device` now: for the cpu executor, or for one GPU (whose runtime
    refuses, with the figures, a program its free memory cannot hold); a run over several GPUs
    compiles in `run_on_cuda`, one process per GPU."""
    compiled = None
    if device == "cpu":
        compiled = compile_program(graph, pipeline, target="cpu", options=options)
    elif devices == 1:
        compiled = compile_program(graph, pipeline, target="cuda", options=options, devices=1)
    return PreparedRun(graph, device, pipeline, options, compiled)


def _stats(value: Any) -> list[str]:
    array = np.asarray(value)
    if array.size == 0:
        return ["-"] * 4
    wide = array.astype(np.float64)
    return [f"{float(f(wide)):.6g}" for f in (np.mean, np.std, np.min, np.max)]


def output_table(graph: Graph, results: dict[str, Any], device: str) -> Table:
    """Shape, dtype, mean, std, min and max of every output."""
    types = graph.value_types()
    table = Table(title=f"optgraph run: {graph.name} on {device}")
    for column in ("output", "shape", "dtype", "mean", "std", "min", "max"):
        table.add_column(column, justify="left" if column in ("output", "dtype") else "right")
    for out in graph.output_names():
        shape = "[" + ",".join(str(d) for d in types[out].shape) + "]"
        cells = [f"%{out}", shape, types[out].dtype, *_stats(results[out])]
        table.add_row(*(Text(c) for c in cells))
    return table


def check_against_reference(
    graph: Graph,
    inputs: dict[str, Any],
    weights: dict[str, Any],
    results: dict[str, Any],
    console: Console,
    exact: bool = False,
    bounds: dict[str, float] | None = None,
) -> int:
    """Print every output's max abs difference and NMSE against the reference interpreter; raise
    when one is off. `exact` (the cpu planned executor): results must be bit-identical; else
    within `bounds` (NMSE per dtype; default the CUDA runtime's)."""
    from optgraph.reference.interpreter import nmse, run_reference

    if exact:
        bounds = {}
    elif bounds is None:
        from optgraph.runtime.cuda.runner import CHECK_BOUNDS

        bounds = CHECK_BOUNDS
    expected = run_reference(graph, inputs, weights)
    types = graph.value_types()
    table = Table(title="check against the reference interpreter")
    for column in ("output", "dtype", "max abs diff", "nmse", "bound", "result"):
        table.add_column(column, justify="left" if column in ("output", "dtype") else "right")
    failed = 0
    for out in graph.output_names():
        dtype = types[out].dtype
        got, want = np.asarray(results[out]), np.asarray(expected[out])
        bound = bounds.get(dtype, 0.0)
        err = nmse(got, want)
        diff = max_abs_diff(got, want)
        same = got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
        ok = same if exact else err <= bound
        failed += not ok
        shown_bound = "bit-identical" if exact else f"{bound:g}"
        row = [f"%{out}", dtype, f"{diff:.3e}", f"{err:.3e}", shown_bound]
        row.append("ok" if ok else "MISMATCH")
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    if failed:
        raise OptGraphError(f"run --check: {failed} output(s) differ from the reference")
    return 0


def max_abs_diff(got: np.ndarray, want: np.ndarray) -> float:
    """The largest |got - want|; NaN against NaN counts as equal, NaN against a number as inf."""
    if got.size == 0:
        return 0.0
    a, b = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore"):
        diff = np.where(both_nan | (a == b), 0.0, np.abs(a - b))
    return float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)))
