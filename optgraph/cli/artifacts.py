"""What `optgraph compile -o DIR` writes. The files are one set (`optgraph.output_files.OutputSet`,
with `--report-json` and `--timeline`): every file is rendered and written to a temporary beside
its target first, then all are renamed into place together, so

    before: out/ holds last run's model.opt.ir, report.json, kernels.cu, ...
    after:  every file is the new compile's, or (a full disk, a lowering error) every file is
            still the old one's; an artifact this compile does not make (program.json of an
            unplanned graph) is removed with the set, not left from an older compile

`ARTIFACTS` is the list of files `-o DIR` produces, in order. To add one (kernels.cu, program.json,
streams.dot, lowered_plan.txt), add an `Artifact` whose `render` returns the file's text from the
`CompileResult`, or None when it does not apply to this compile (then nothing is written).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.errors import InputError
from optgraph.ir.dot import to_dot
from optgraph.ir.graph import Graph
from optgraph.ir.printer import print_graph
from optgraph.output_files import OutputSet

if TYPE_CHECKING:  # the report module pulls in the analyses; an artifact only reads its figures
    from optgraph.cli.report import Report

if TYPE_CHECKING:
    from optgraph.codegen.plan.lowered import LoweredProgram


@dataclass(frozen=True)
class CompileResult:
    """Everything a compile produced that an artifact may render."""

    graph: Graph
    report: Report
    options: LoweringOptions = field(default_factory=LoweringOptions)  # compile --no-merge-...

    @cached_property
    def lowered(self) -> LoweredProgram:
        """The graph lowered for CUDA once, for every artifact that shows it."""
        from optgraph.codegen.lower_cuda import lower_for_cuda

        return lower_for_cuda(self.graph, self.options)


@dataclass(frozen=True)
class Artifact:
    filename: str
    description: str
    render: Callable[[CompileResult], str | None]


def _kernels_cu(result: CompileResult) -> str:
    return result.lowered.main.plan.source()


def _cuda_plan(result: CompileResult) -> str:
    from optgraph.codegen.plan.json_records import json_text
    from optgraph.codegen.plan.plan_text import plan_json

    return json_text(plan_json(result.lowered.main.plan))


def _lowered_plan(result: CompileResult) -> str:
    from optgraph.codegen.lowered_plan_text import lowered_plan_text

    return lowered_plan_text(result.lowered)


def _program_json(graph: Graph) -> str | None:
    """The lowered program (per-stream steps, events, buffer table) of a planned graph."""
    from optgraph.codegen.plan.lower_arena import lower
    from optgraph.passes.facts import FACTS

    if not FACTS["memory-planned"].holds(graph):
        return None
    return lower(graph).to_json()


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("model.opt.ir", "the optimized IR", lambda r: print_graph(r.graph)),
    Artifact("report.json", "the report figures as JSON", lambda r: r.report.to_json()),
    Artifact("kernels.cu", "the CUDA source of every kernel", _kernels_cu),
    Artifact("cuda_plan.json", "the CUDA launch list and storage", _cuda_plan),
    Artifact(
        "lowered_plan.txt",
        "the CUDA plan to read: launches per stream, merges, events, copies, decode rewrites",
        _lowered_plan,
    ),
    Artifact("streams.dot", "the stream assignment as Graphviz DOT", lambda r: to_dot(r.graph)),
    Artifact(
        "program.json",
        "the lowered program: steps per stream, events, arena layout",
        lambda r: _program_json(r.graph),
    ),
)


def check_output_directory(directory: str | os.PathLike[str]) -> Path:
    """`directory` if it is a writable directory or can be made one; a compile calls this before
    it runs, so a bad `-o` fails at once rather than after the pipeline and the printed report.
    Nothing is made here (`prepare_output_directory` makes it when the files are written)."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise InputError(f"cannot write outputs to '{out}': it is not a directory")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"cannot create output directory '{out}': '{existing}' is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write outputs to '{out}': permission denied")
    return out


def prepare_output_directory(directory: str | os.PathLike[str], outputs: OutputSet) -> Path:
    """`directory` checked (`check_output_directory`) and made, with missing parents, for the
    files of `outputs`: a set that fails removes the directories it made, so a failed compile
    leaves no new empty `-o DIR` behind."""
    return outputs.make_directory(check_output_directory(directory))


def check_writable_file(path: str | os.PathLike[str]) -> None:
    """Fail now if `path` cannot be written later (missing or read-only directory, a directory)."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"cannot write '{target}': it is a directory")
    if not target.parent.is_dir():
        raise InputError(f"cannot write '{target}': directory '{target.parent}' does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write '{target}': permission denied")


def stage_artifact(
    outputs: OutputSet, out: Path, artifact: Artifact, result: CompileResult
) -> Path | None:
    """Render one artifact into `outputs` as `out/filename`, or stage its removal when it does
    not apply to this compile (None)."""
    target = out / artifact.filename
    text = artifact.render(result)
    if text is None:
        outputs.remove(target)
        return None
    outputs.write_text(target, text)
    return target


def write_artifacts(directory: str | os.PathLike[str], result: CompileResult) -> list[Path]:
    """Create `directory` if needed and write every applicable artifact, all or none; return
    the paths."""
    outputs = OutputSet()
    try:
        out = prepare_output_directory(directory, outputs)
        for artifact in ARTIFACTS:
            stage_artifact(outputs, out, artifact, result)
        return outputs.commit()
    finally:
        outputs.discard()


def check_output_paths(directory: str | None, files: list[str | None]) -> None:
    """Before a compile runs: `-o DIR` can be created and written, and each named file's directory."""
    if directory is not None:
        check_output_directory(directory)
    for path in files:
        if path is not None:
            check_writable_file(path)
