"""Host-to-device copies of many host arrays through pinned buffers filled by several threads.

A copy from pageable host memory (a memory-mapped checkpoint) is staged by the driver through
its own pinned buffer, one thread, one piece at a time: about 4 GB/s, most of it the page
faults of first touching the file's pages. `StagedUpload` fills pinned slots itself, a slot's
pieces on several threads at once (NumPy copies release the GIL, and the kernel serves page
faults of different threads in parallel), and copies each filled slot to the device
asynchronously on the caller's stream while the next slot fills:

    upload.copy(dst, host)  ->  slot k:   [fill on T threads] -> cudaMemcpyAsync(dst, slot k)
                                slot k+1:                        [fill on T threads] -> ...
    upload.finish()         ->  the stream synchronized: every byte is on the device

A slot is refilled only after the event recorded behind its last copy has completed, so a
copy never reads bytes being overwritten. Kernels the caller issues on the same stream after
`copy` (a transpose of the copied matrix) run after its bytes arrived. Small arrays share a
slot (one copy each from their place in it). Cost: O(bytes) host copying, O(bytes / piece)
copy calls.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import numpy as np

SLOT_BYTES = 64 << 20
SLOTS = 3
PIECE_BYTES = 4 << 20  # a thread's share of a slot at least
H2D = 1  # cudaMemcpyKind


def fill_threads() -> int:
    """Threads that fill a slot: the machine's cores, at most 8 (more buys no bandwidth)."""
    return max(1, min(8, os.cpu_count() or 1))


class StagedUpload:
    """Copies of host arrays to device addresses through `SLOTS` pinned slots (see the module
    docstring). Use as a context manager, or call `finish` (and `close`)."""

    def __init__(
        self,
        cp: Any,
        stream: Any,
        slot_bytes: int = SLOT_BYTES,
        slots: int = SLOTS,
        threads: int | None = None,
    ) -> None:
        self.cp = cp
        self.stream = stream
        self.slot_bytes = slot_bytes
        self._memory = [cp.cuda.alloc_pinned_memory(slot_bytes) for _ in range(slots)]
        self._views = [np.frombuffer(m, np.uint8, slot_bytes) for m in self._memory]
        self._events: list[Any] = [None] * slots
        self._slot, self._cursor = 0, 0
        self.threads = fill_threads() if threads is None else threads
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self.bytes_copied = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.finish()  # on an error too: no copy may still read a slot once it is freed
        finally:
            self.close()

    def copy(self, dst: int, host: np.ndarray) -> None:
        """Queue a copy of `host`'s bytes in C order (a copy first where it is laid out
        otherwise) to the device address `dst`."""
        data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        done = 0
        while done < data.size:
            if self._cursor == self.slot_bytes:
                self._next_slot()
            if self._cursor == 0:
                self._wait_slot()
            n = min(data.size - done, self.slot_bytes - self._cursor)
            view = self._views[self._slot]
            self._fill(view[self._cursor : self._cursor + n], data[done : done + n])
            src = int(view[self._cursor :].ctypes.data)
            self.cp.cuda.runtime.memcpyAsync(dst + done, src, n, H2D, self.stream.ptr)
            self._cursor += n
            done += n
        self.bytes_copied += data.size

    def finish(self) -> None:
        """Wait until every queued copy is on the device."""
        if self._cursor:
            self._next_slot()
        self.stream.synchronize()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _next_slot(self) -> None:
        """Record the filled slot's event behind its copies; move to the next slot."""
        event = self.cp.cuda.Event(block=False, disable_timing=True)
        event.record(self.stream)
        self._events[self._slot] = event
        self._slot = (self._slot + 1) % len(self._memory)
        self._cursor = 0

    def _wait_slot(self) -> None:
        """Before refilling the current slot: its previous copies have read it."""
        event = self._events[self._slot]
        if event is not None:
            event.synchronize()
            self._events[self._slot] = None

    def _fill(self, dst: np.ndarray, src: np.ndarray) -> None:
        if self._pool is None or src.size < 2 * PIECE_BYTES:
            np.copyto(dst, src)
            return
        parts = min(self.threads, src.size // PIECE_BYTES)
        bounds = [src.size * i // parts for i in range(parts + 1)]

        def copy(i: int) -> None:
            np.copyto(dst[bounds[i] : bounds[i + 1]], src[bounds[i] : bounds[i + 1]])

        list(self._pool.map(copy, range(parts)))
