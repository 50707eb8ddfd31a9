"""`generate`'s loop for a batch of prompts on the GPU: B rows a step, each row's token chosen
and fed back on the device, the host only launching and reading the rows' tokens behind it.

    loop = DeviceRowsLoop(decode, weights)         # decode: a per-row step of B rows (cuda)
    for row, token in loop.tokens(prompts, 32, sampling, {2}, prefill, prefill_weights, feed):
        ...

The steps are `api/batch_generation.py`'s: a prefill of B rows at shared positions (its caches
written in place, or, a checkpoint's, written out into set 0) and a decode step with positions
and `kv_len` per row (a checkpoint's: positions only), whose caches come out of a `concat` of
the rows' writes. The runtime binds an output onto an input's array only where
the op writes in place, so the decode step is bound twice over two sets of caches: binding 0
reads set 0 and writes set 1, binding 1 the reverse, alternately (the concat writes every row
of the cache, so each set is whole when read). Both bindings share the token, position and
`kv_len` arrays and the logits; the prefill reads and writes set 0.

A step's choices: the sampling kernel (`codegen/kernels/sampling.py`, one row a launch) once a
row, its pointers offset to row b (the row's logits by its `iconf` offset: `b*V` after a decode
step, `(b*S + n_b - 1)*V` after the prefill; the token, position and `kv_len` entries, the
step counter and a history of its own), so every row draws what its prompt draws alone; then
one copy of the B tokens (the decode step's token input, which the kernels just wrote) to pinned
memory and an event. The host launches up to `LAG` steps ahead of the one it reads, as
`decode_loop.py` does. A row that ends (a stop token, or `max_new` tokens) yields no more; its
kernels keep choosing and its position advancing, which touch only its own cache rows; the
loop ends when every row has ended.

Not handled: a prefill per row of another length (one bucket for the batch), a decode step
updated in place (needs a per-row `pos` in kv_cache_write).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from optgraph.codegen.cuda_source import module_source
from optgraph.codegen.kernels.sampling import SAMPLING_THREADS, sampling_kernel
from optgraph.errors import OptGraphError
from optgraph.reference.kernels import numpy_dtype
from optgraph.runtime.cuda.decode_loop import LAG, _Step, _write
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.launch import kernel_module
from optgraph.runtime.cuda.memory import D2H

CONTROL_ROLES = ("tokens", "positions", "kv_len")


class DeviceRowsLoop:
    """The loop for one compiled per-row decode step of B rows (module docstring)."""

    def __init__(self, decode: Any, weights: Mapping[str, Any], threads: int = SAMPLING_THREADS):
        cp = cupy()
        step = decode.step
        types = step.graph.value_types()
        names = {
            role: next((n for n, r in step.roles.items() if r == role), None)
            for role in CONTROL_ROLES
        }
        # a checkpoint's step (frontends/hf_row_steps.py) has no kv_len: its masks come from the
        # positions; the kernel then advances an array of the loop's own that nothing reads
        missing = [role for role, name in names.items() if name is None and role != "kv_len"]
        if missing or not step.cache_inputs:
            raise OptGraphError(
                f"generate: a batch decode step needs {', '.join(missing or ['caches'])}"
            )
        self.rows = step.batch
        self.vocab = step.vocab
        self.context = int(types[step.cache_inputs[0]].shape[-2])

        def caches() -> dict[str, Any]:
            return {
                n: cp.asarray(np.zeros(types[n].shape, numpy_dtype(types[n].dtype)))
                for n in step.cache_inputs
            }

        self.caches = (caches(), caches())
        first = _Step(decode, weights, self.caches[0], self.caches[1])
        second = _Step(decode, weights, self.caches[1], self.caches[0], first.inputs, first.logits)
        self.decodes = (first, second)
        self.stream = first.stream
        self.token, self.position = (first.inputs[str(names[r])] for r in CONTROL_ROLES[:2])
        lengths = names["kv_len"] or str(names["positions"])
        self.kv_len = (
            first.inputs[lengths]
            if names["kv_len"]
            else cp.asarray(np.zeros(self.rows, numpy_dtype(types[lengths].dtype)))
        )
        kernel = sampling_kernel(
            types[step.logits].dtype, types[str(names["tokens"])].dtype,
            types[str(names["positions"])].dtype, types[lengths].dtype, threads,
        )  # fmt: skip
        function = kernel_module(module_source([kernel])).get_function(kernel.name)
        self._kernel = getattr(function, "kernel", None) or function
        self.threads = threads
        rows = self.rows
        self.iconf = cp.asarray(np.zeros((rows, 5), np.int64))
        self.prefill_iconf = cp.asarray(np.zeros((rows, 5), np.int64))
        self.fconf = cp.asarray(np.zeros(2, np.float32))
        self.state = cp.asarray(np.zeros(rows, np.int64))
        self.history = cp.asarray(np.zeros((rows, self.context), np.int32))
        slots = LAG + 1
        self.token_bytes = rows * np.dtype(self.token.dtype).itemsize
        self._pinned = cp.cuda.alloc_pinned_memory(slots * self.token_bytes)
        self.host_tokens = np.frombuffer(self._pinned, self.token.dtype, slots * rows).reshape(
            slots, rows
        )
        self.events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(slots)]
        self._prefills: dict[int, _Step] = {}

    def prepare(self, prefill: Any, weights: Mapping[str, Any]) -> _Step:
        """The bound prefill of B rows `prefill` (bound and captured on first use): set 0."""
        found = self._prefills.get(id(prefill))
        if found is None:
            if prefill.step.batch != self.rows:
                raise OptGraphError(
                    f"generate: a prefill of {prefill.step.batch} rows for a loop of {self.rows}"
                )
            found = self._prefills[id(prefill)] = _Step(prefill, weights, self.caches[0])
        return found

    def _sample(self, logits: Any, iconf: Any, index: int) -> None:
        """Choose token `index` of every row from `logits` (on the stream), then start the copy
        of the B tokens out."""
        cp = cupy()
        rows = [self.token, self.position, self.kv_len]
        for b in range(self.rows):
            args = (
                int(logits.data.ptr), int(iconf.data.ptr) + b * 5 * 8, int(self.fconf.data.ptr),
                int(self.state.data.ptr) + b * 8,
                *(int(a.data.ptr) + b * a.dtype.itemsize for a in rows),
                int(self.history.data.ptr) + b * self.context * 4,
            )  # fmt: skip
            self._kernel((1, 1, 1), (self.threads, 1, 1), args, 0, self.stream)
        slot = index % len(self.events)
        cp.cuda.runtime.memcpyAsync(
            self.host_tokens[slot].ctypes.data, int(self.token.data.ptr), self.token_bytes, D2H,
            self.stream.ptr,
        )  # fmt: skip
        self.events[slot].record(self.stream)

    def _read(self, index: int) -> list[int]:
        slot = index % len(self.events)
        self.events[slot].synchronize()
        return [int(t) for t in self.host_tokens[slot]]

    def tokens(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: int,
        sampling: Any,
        stop: set[int],
        prefill: Any,
        prefill_weights: Mapping[str, Any],
        feed: Mapping[str, np.ndarray],
    ) -> Iterator[tuple[int, int]]:
        """(row, token) for every new token of every row, each step's as soon as its copy has
        arrived (module docstring). `feed`: the prefill's inputs but its caches."""
        lengths = [len(p) for p in prompts]
        if len(lengths) != self.rows or max(lengths) + max_new > self.context:
            raise OptGraphError(
                f"generate: {len(lengths)} prompts of up to {max(lengths)} + {max_new} tokens for "
                f"a loop of {self.rows} rows of {self.context}"
            )
        bound = self.prepare(prefill, prefill_weights)
        self.stream.synchronize()  # a previous batch's steps launched past its end
        _write(self.position, np.array(lengths) - 1)  # the kernels advance them: n_b, n_b + 1
        _write(self.kv_len, np.array(lengths))
        _write(self.state, np.zeros(self.rows, np.int64))
        _write(self.fconf, np.array([sampling.temperature, sampling.top_p], np.float32))
        seed = sampling.seed - (1 << 64) if sampling.seed >= 1 << 63 else sampling.seed
        config = [
            [b * self.vocab, self.vocab, sampling.top_k, seed, self.context]
            for b in range(self.rows)
        ]
        _write(self.iconf, np.array(config, np.int64))
        seq = prefill.step.seq
        first = [[(b * seq + n - 1) * self.vocab, *config[b][1:]] for b, n in enumerate(lengths)]
        _write(self.prefill_iconf, np.array(first, np.int64))
        for name, value in feed.items():
            _write(bound.inputs[name], value)
        bound.launch()
        runtime = cupy().cuda.runtime  # the prefill runs on its program's stream
        runtime.eventRecord(bound.done.ptr, bound.stream.ptr)
        runtime.streamWaitEvent(self.stream.ptr, bound.done.ptr, 0)
        self._sample(bound.logits, self.prefill_iconf, 0)
        live = [True] * self.rows
        read = 0

        def take() -> Iterator[tuple[int, int]]:
            for b, token in enumerate(self._read(read)):
                if live[b]:
                    yield b, token
                    live[b] = token not in stop and read + 1 < max_new

        for index in range(1, max_new):
            self.decodes[(index - 1) % 2].launch()
            self._sample(self.decodes[0].logits, self.iconf, index)
            if index - read >= LAG:
                yield from take()
                read += 1
                if not any(live):
                    return
        while read < max_new and any(live):
            yield from take()
            read += 1

    def close(self) -> None:
        self.stream.synchronize()
        self._prefills.clear()
