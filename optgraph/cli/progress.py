"""Progress of a command's phases (parse, each pass, report, lowering and writing), on stderr.

A long compile is never silent: on a terminal a live line shows the running phase, how many
phases are done and the time so far (rich, transient: it disappears when the command ends); when
stderr is not a terminal (a log, CI, a pipe) every phase prints one line as it ends, with its
time; `--quiet` prints nothing:

    $ optgraph compile big.ir -o out 2> log; cat log
    optgraph: parse + verify big.ir: 14.208 s (85,803 nodes)
    optgraph: pass verify: 2.101 s
    optgraph: pass dce: 0.912 s
    ...
    optgraph: write kernels.cu: 3.377 s

A long pipeline stays readable: up to `EVERY_PASS_UP_TO` passes get a line each; past that,
passes share lines: one at every tenth of the pipeline, and one for the passes done so far when
`HEARTBEAT_S` seconds passed without a line. A log then holds ten lines for the passes plus at
most one every `HEARTBEAT_S` seconds, whatever the number of passes and however long each
takes (10,000 passes: about a dozen lines, not 10,000):

    optgraph: passes 1-1000 of 10,000: 0.201 s (1,000 passes)
    optgraph: passes 1001-2000 of 10,000: 0.198 s (1,000 passes)

On a terminal the live line shows the running pass and the count, whatever the length.

A phase that runs long also says so every `HEARTBEAT_S` seconds (`optgraph: pass fuse: 30 s so
far`), so a log never stays silent much longer than that, whatever the phase. A phase that
fails prints no line of its own: the error message is the last thing on stderr. Pass lines come
from `run_pipeline`'s `after_each`, so a pass's time includes the verification that follows it
(and the first pass's, the verification of the input).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Literal, Self, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from optgraph.ir.graph import Graph
    from optgraph.passes.base import Pass

Mode = Literal["live", "lines", "quiet"]
HEARTBEAT_S = 30.0  # the longest silence of a log: a running phase says so this often
EVERY_PASS_UP_TO = 40  # pipelines of at most this many passes get a line per pass


def progress_mode(stream: TextIO, quiet: bool) -> Mode:
    """`quiet`, else a live display on a terminal, else one line per phase."""
    if quiet:
        return "quiet"
    return "live" if stream.isatty() else "lines"


class PhaseProgress:
    """Reports phases on `stream` (see the module docstring). Use as a context manager around
    the command's work; `total` is the number of phases expected (for the live counter)."""

    def __init__(
        self,
        stream: TextIO,
        mode: Mode,
        total: int | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.stream = stream
        self.mode = mode
        self.total = total
        self.heartbeat_s = heartbeat_s
        self._stack = ExitStack()
        self._live: Progress | None = None
        self._task: TaskID | None = None
        # Lines mode: the running phase and its start, and when stderr last got a line; shared
        # with the heartbeat thread under the lock.
        self._lock = threading.Lock()
        self._running: tuple[str, float] | None = None
        self._last_line = time.perf_counter()
        self._stopped = threading.Event()
        # Lines mode, a long pipeline: the passes done since the last line (first, count, time)
        # and how many passes it has; shared with the heartbeat thread under the lock.
        self._group: tuple[int, int, float] | None = None
        self._group_total = 0

    def __enter__(self) -> Self:
        if self.mode == "live":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = (
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            console = Console(file=self.stream, highlight=False)
            self._live = self._stack.enter_context(
                Progress(*columns, console=console, transient=True, redirect_stdout=False)
            )
            self._task = self._live.add_task("starting", total=self.total)
        elif self.mode == "lines":
            beat = threading.Thread(target=self._heartbeat, name="optgraph-progress", daemon=True)
            beat.start()
            self._stack.callback(beat.join)
            self._stack.callback(self._stopped.set)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _write(self, line: str) -> None:
        """One whole line on the stream (the caller holds the lock)."""
        self.stream.write(line + "\n")
        self.stream.flush()
        self._last_line = time.perf_counter()

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self.heartbeat_s / 4):
            with self._lock:
                now = time.perf_counter()
                if now - self._last_line < self.heartbeat_s:
                    continue
                if self._group is not None:  # a long pipeline: the passes done so far
                    self._write_group()
                elif self._running is not None:
                    name, start = self._running
                    self._write(f"optgraph: {name}: {now - start:.0f} s so far")

    def _started(self, name: str) -> None:
        if self._live is not None and self._task is not None:
            self._live.update(self._task, description=name)
        with self._lock:
            self._running = (name, time.perf_counter())

    def _finished(self, name: str, seconds: float, detail: str = "") -> None:
        with self._lock:
            self._running = None
            if self.mode == "lines":
                suffix = f" ({detail})" if detail else ""
                self._write(f"optgraph: {name}: {seconds:.3f} s{suffix}")
        if self._live is not None and self._task is not None:
            self._live.update(self._task, advance=1)

    @contextmanager
    def phase(self, name: str) -> Iterator[list[str]]:
        """Time the block as the phase `name`. The block may append one detail to the list it
        gets (e.g. "85,803 nodes"), shown after the time. Nothing is printed if the block fails."""
        self._started(name)
        detail: list[str] = []
        start = time.perf_counter()
        yield detail
        self._finished(name, time.perf_counter() - start, ", ".join(detail))

    def run_pipeline(self, graph: Graph, passes: list[Pass]) -> Graph:
        """`run_pipeline(graph, passes)` with one phase per pass (lines grouped past
        `EVERY_PASS_UP_TO` passes, see the module docstring)."""
        from optgraph.passes.manager import run_pipeline

        if passes:
            self._started(f"pass {passes[0].name}")
        start = time.perf_counter()
        position = 0  # a count, not passes.index(): equal passes may appear twice
        total = len(passes)
        grouped = self.mode == "lines" and total > EVERY_PASS_UP_TO

        def after(done: Pass, _: Graph) -> None:
            nonlocal start, position
            seconds = time.perf_counter() - start
            if grouped:
                self._pass_done(position, total, seconds)
            else:
                self._finished(f"pass {done.name}", seconds)
            position += 1
            if position < total:
                self._started(f"pass {passes[position].name}")
            start = time.perf_counter()

        try:
            return run_pipeline(graph, passes, after_each=after)
        finally:
            with self._lock:
                self._write_group()  # the passes done before a failure, if any are unsaid

    def _pass_done(self, position: int, total: int, seconds: float) -> None:
        """Pass `position` (0-based) of a long pipeline ended: add it to the pending group, and
        write the group when the pass ends a tenth of the pipeline (the heartbeat writes it
        too, `HEARTBEAT_S` after the last line)."""
        tenth = (position + 1) * 10 // total != position * 10 // total
        with self._lock:
            self._running = None
            first, count, spent = self._group or (position, 0, 0.0)
            self._group = (first, count + 1, spent + seconds)
            self._group_total = total
            if tenth:
                self._write_group()

    def _write_group(self) -> None:
        """The pending passes of a long pipeline as one line (the caller holds the lock)."""
        if self._group is None:
            return
        first, count, spent = self._group
        self._group = None
        self._write(
            f"optgraph: passes {first + 1}-{first + count} of {self._group_total:,}: "
            f"{spent:.3f} s ({count:,} pass{'es' if count != 1 else ''})"
        )


def phase_progress(quiet: bool, total: int | None = None) -> PhaseProgress:
    """The progress reporter of a command: on stderr, in the mode `progress_mode` picks."""
    return PhaseProgress(sys.stderr, progress_mode(sys.stderr, quiet), total)
