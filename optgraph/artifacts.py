"""What `optgraph compile -o DIR` writes, and how every output file is written (atomically).

Each file is written to a temporary file in the target directory and then renamed over the target
with `os.replace`, so a reader never sees half a file and an interrupted compile leaves the old
file in place:

    before: out/ holds last run's model.opt.ir
    after:  out/model.opt.ir is either entirely the old text or entirely the new one

`ARTIFACTS` is the list of files `-o DIR` produces, in order. To add one (kernels.cu, program.json,
streams.dot), add an `Artifact` whose `render` returns the file's text from the `CompileResult`, or
None when it does not apply to this compile (then nothing is written).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.errors import InputError
from optgraph.ir.graph import Graph
from optgraph.ir.printer import print_graph
from optgraph.report import Report

if TYPE_CHECKING:
    from optgraph.codegen.lowered import LoweredProgram


@dataclass(frozen=True)
class CompileResult:
    """Everything a compile produced that an artifact may render."""

    graph: Graph
    report: Report
    options: LoweringOptions = field(default_factory=LoweringOptions)  # compile --no-merge-...

    @cached_property
    def lowered(self) -> LoweredProgram:
        """The graph lowered for CUDA once, for every artifact that shows it."""
        from optgraph.codegen.cuda_plan import lower_for_cuda

        return lower_for_cuda(self.graph, self.options)


@dataclass(frozen=True)
class Artifact:
    filename: str
    description: str
    render: Callable[[CompileResult], str | None]


def _kernels_cu(result: CompileResult) -> str:
    return result.lowered.main.plan.source()


def _cuda_plan(result: CompileResult) -> str:
    import json

    from optgraph.codegen.cuda_plan import plan_json

    return json.dumps(plan_json(result.lowered.main.plan), indent=1) + "\n"


def _program_json(graph: Graph) -> str | None:
    """The lowered program (per-stream steps, events, buffer table) of a planned graph."""
    from optgraph.codegen.program import lower
    from optgraph.passes.facts import FACTS

    if not FACTS["memory-planned"].holds(graph):
        return None
    return lower(graph).to_json()


def _streams_dot(graph: Graph) -> str:
    from optgraph.ir.dot import to_dot

    return to_dot(graph)


ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("model.opt.ir", "the optimized IR", lambda r: print_graph(r.graph)),
    Artifact("report.json", "the report figures as JSON", lambda r: r.report.to_json()),
    Artifact("kernels.cu", "the CUDA source of every kernel", _kernels_cu),
    Artifact("cuda_plan.json", "the CUDA launch list and storage", _cuda_plan),
    Artifact(
        "streams.dot", "the stream assignment as Graphviz DOT", lambda r: _streams_dot(r.graph)
    ),
    Artifact(
        "program.json",
        "the lowered program: steps per stream, events, arena layout",
        lambda r: _program_json(r.graph),
    ),
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file in the same directory."""
    target = Path(path)
    directory = target.parent
    if not directory.is_dir():
        raise InputError(f"cannot write '{target}': directory '{directory}' does not exist")
    if target.is_dir():
        raise InputError(f"cannot write '{target}': it is a directory")
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise InputError(f"cannot write '{target}': {err.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write '{target}': {err.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def prepare_output_directory(directory: str | os.PathLike[str]) -> Path:
    """Create `directory` if needed and check it is writable; a compile calls this before it runs,
    so a bad `-o` fails at once rather than after the pipeline and the printed report."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise InputError(f"cannot write outputs to '{out}': it is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create output directory '{out}': {err.strerror}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise InputError(f"cannot write outputs to '{out}': permission denied")
    return out


def check_writable_file(path: str | os.PathLike[str]) -> None:
    """Fail now if `path` cannot be written later (missing or read-only directory, a directory)."""
    target = Path(path)
    if target.is_dir():
        raise InputError(f"cannot write '{target}': it is a directory")
    if not target.parent.is_dir():
        raise InputError(f"cannot write '{target}': directory '{target.parent}' does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write '{target}': permission denied")


def write_artifacts(directory: str | os.PathLike[str], result: CompileResult) -> list[Path]:
    """Create `directory` if needed and write every applicable artifact; return the paths."""
    out = prepare_output_directory(directory)
    written = []
    for artifact in ARTIFACTS:
        text = artifact.render(result)
        if text is not None:
            written.append(write_atomic(out / artifact.filename, text))
    return written


def check_output_paths(directory: str | None, files: list[str | None]) -> None:
    """Before a compile runs: `-o DIR` can be created and written, and each named file's directory."""
    if directory is not None:
        prepare_output_directory(directory)
    for path in files:
        if path is not None:
            check_writable_file(path)
