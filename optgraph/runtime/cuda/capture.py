"""Stream capture into CUDA graphs, and the graph handles the runtime keeps.

- `capture(stream, ops, mode, forbid)` runs the host calls of one run while stream 0 captures
  (the other streams join through the fork event), with CuPy allocation forbidden: CuPy captures
  in relaxed mode, where an allocation would silently bake an address into the graph. Capture is
  always ended, also when a call raises or Ctrl-C interrupts it (its half graph destroyed): an
  unfinished capture breaks every later CUDA call in the process.
- `CapturedGraph`: the captured `cudaGraph_t` (kept for DOT dumps and updates) and its
  instantiated `cudaGraphExec_t`.
- `exec_update(exec, graph)`: `cudaGraphExecUpdate` through cuda-bindings, for a run whose bound
  pointers changed (same topology); False when the bindings are missing or CUDA refuses.
- `dot_text(graph)`: `cudaGraphDebugDotPrint` (verbose) as a string.

When a captured graph may be replayed at all is decided by `graph_cache` (no CuPy there).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from optgraph.errors import OptGraphError
from optgraph.runtime.cuda.device import cupy

DOT_VERBOSE = 1


class AllocationDuringCapture(RuntimeError):
    """Something asked for device memory while a CUDA graph was being captured."""


@contextlib.contextmanager
def allocation_forbidden(on_refuse: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Device allocations through CuPy raise `AllocationDuringCapture` (`on_refuse` runs first:
    the runtime counts them)."""

    def refuse(size: int) -> Any:
        on_refuse()
        raise AllocationDuringCapture(f"allocation of {size} bytes during CUDA graph capture")

    with cupy().cuda.using_allocator(refuse):
        yield


def capture(
    stream: int,
    ops: list[Callable[[], Any]],
    mode: int,
    forbid: Callable[[], contextlib.AbstractContextManager[None]],
) -> int:
    """The cudaGraph_t of `ops` captured on `stream` (a pointer) inside `forbid()`."""
    rt = cupy().cuda.runtime
    with forbid():
        rt.streamBeginCapture(stream, mode)
        graph = 0
        try:
            for op in ops:
                op()
        except BaseException:  # an error, or Ctrl-C: end the capture, drop its half graph
            _end_and_destroy(rt, stream)
            raise
        try:
            graph = rt.streamEndCapture(stream)
        except Exception:  # noqa: BLE001 - CUDA invalidated the capture: reported below
            graph = 0
    if not graph:
        raise OptGraphError("CUDA graph capture failed (see the runtime's issue list)")
    return graph


def _end_and_destroy(rt: Any, stream: int) -> None:
    """End the capture open on `stream` and destroy what it captured (the first error wins)."""
    try:
        graph = rt.streamEndCapture(stream)
    except Exception:  # noqa: BLE001 - CUDA had invalidated the capture: nothing to destroy
        return
    if graph:
        rt.graphDestroy(graph)


class CapturedGraph:
    """A captured cudaGraph_t (kept for DOT dumps) and its instantiated cudaGraphExec_t."""

    def __init__(self, graph: int, exec_: int):
        self.graph, self.exec = graph, exec_

    def destroy(self) -> None:
        rt = cupy().cuda.runtime
        if self.exec:
            rt.graphExecDestroy(self.exec)
        if self.graph:
            rt.graphDestroy(self.graph)
        self.graph = self.exec = 0


def exec_update(exec_: int, graph: int) -> bool:
    """cudaGraphExecUpdate through cuda-bindings; False when unavailable or refused."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart
        except ImportError:
            return False
    attempts: tuple[Callable[[], Any], ...] = (
        lambda: cudart.cudaGraphExecUpdate(exec_, graph),
        lambda: cudart.cudaGraphExecUpdate(
            cudart.cudaGraphExec_t(init_value=exec_), cudart.cudaGraph_t(init_value=graph)
        ),
    )
    for attempt in attempts:
        try:
            result = attempt()
        except Exception:  # noqa: BLE001, S112 - the bindings refused these handle types
            continue
        return bool(result[0] == cudart.cudaError_t.cudaSuccess)
    return False


def _dot_print(graph: int, path: str) -> None:
    rt = cupy().cuda.runtime
    printer = getattr(rt, "graphDebugDotPrint", None)
    if printer is not None:
        printer(graph, path, DOT_VERBOSE)
        return
    from cuda.bindings import runtime as cudart

    try:
        result = cudart.cudaGraphDebugDotPrint(graph, path.encode(), DOT_VERBOSE)
    except TypeError:
        result = cudart.cudaGraphDebugDotPrint(
            cudart.cudaGraph_t(init_value=graph), path.encode(), DOT_VERBOSE
        )
    if result[0] != cudart.cudaError_t.cudaSuccess:
        raise OptGraphError(f"cudaGraphDebugDotPrint failed: {result[0]}")


def dot_text(graph: int) -> str:
    """cudaGraphDebugDotPrint (verbose) of `graph`, through a temporary file."""
    fd, path = tempfile.mkstemp(suffix=".dot")
    os.close(fd)
    try:
        _dot_print(graph, path)
        with open(path) as f:
            return f.read()
    finally:
        os.remove(path)
