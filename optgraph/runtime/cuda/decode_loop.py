"""`generate`'s loop on the GPU: the decode step and the token choice stay on the device, and the
host only launches and reads tokens behind it.

    loop = DeviceDecodeLoop(decode, weights)      # decode: api.generation.CompiledStep (cuda)
    loop.prepare(prefill, prefill_weights)         # bind and capture a prefill bucket, ahead
    for token in loop.tokens(len(prompt), 32, sampling, {2}, prefill, prefill_weights, feeds):
        ...

Set-up (once): device arrays for every input of the decode step (its token, position, kv_len and
KV caches) and its logits; the step bound to them (`CompiledProgram.bind`: one CUDA graph, each
cache updated in place) and run once (the capture); the sampling kernel
(`codegen/kernels/sampling.py`) compiled; a history buffer on the device and its pinned copy on
the host. Each prefill bucket is bound the same way: its own token/position inputs, its caches
(outputs, or inputs and outputs) the decode step's arrays, its logits its own. A prefill runs on
its program's stream; the decode stream waits for it on an event before the first choice.

A prompt: the stream drained, the control values written (prefill inputs, the decode step's
position and kv_len one before the first new token, the sampling settings); then on the one
stream, with no synchronization:

    prefill  -> sample(prefill logits, row n-1)                     token 0
    decode   -> sample(decode logits)  (token, position, kv_len fed back)   token 1, 2, ...

After each choice a 4-byte copy of `history[i]` to pinned memory and an event. The host launches
up to `LAG` tokens ahead of the one it reads: it waits on token i's event only when it is that far
ahead, so launches overlap the GPU's work and a token is printed as soon as it is on the host,
never with a round trip per token in the GPU's path. An end-of-sequence token ends the loop on
the host; the few steps launched past it change nothing a later prompt reads (every prompt
writes its control values first, and caches are read only below the position being written).
Without a prefill (an `.ir` decode step) the prompt is fed through the decode step, a token at a
time, before the first choice.

Not handled: batches (`rows_loop.py`); several decode loops sharing one program's weights on the device (the
prefill and decode programs each hold theirs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from optgraph.codegen.cuda_source import module_source
from optgraph.codegen.kernels.sampling import SAMPLING_THREADS, sampling_kernel
from optgraph.errors import OptGraphError
from optgraph.reference.kernels import numpy_dtype
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.launch import kernel_module
from optgraph.runtime.cuda.memory import D2H, H2D

LAG = 8  # tokens the host may launch ahead of the one it reads
POSITION_ROLES = ("positions", "cache_position")


class _Step:
    """A bound step: its device input arrays by name, its logits array, the launch. The caches
    are updated in place, or with `out_caches` written there (`rows_loop.py`'s two sets);
    `controls` and `logits`: arrays another binding of the step shares (made here if None)."""

    def __init__(
        self,
        compiled: Any,
        weights: Mapping[str, Any],
        caches: Mapping[str, Any],
        out_caches: Mapping[str, Any] | None = None,
        controls: Mapping[str, Any] | None = None,
        logits: Any = None,
    ):
        cp = cupy()
        step = compiled.step
        types = step.graph.value_types()
        self.step = step
        self.inputs: dict[str, Any] = {}
        for name, role in step.roles.items():
            if role == "cache":
                continue
            t = types[name]
            shared = None if controls is None else controls.get(name)
            self.inputs[name] = (
                shared
                if shared is not None
                else cp.asarray(np.zeros(t.shape, numpy_dtype(t.dtype)))
            )
        self.inputs |= dict(zip(step.cache_inputs, caches.values()))
        t = types[step.logits]
        self.logits = (
            logits if logits is not None else cp.asarray(np.zeros(t.shape, numpy_dtype(t.dtype)))
        )
        out = {step.logits: self.logits}
        written = caches if out_caches is None else out_caches
        out |= dict(zip(step.cache_outputs, written.values()))
        self.launch = compiled.program.bind(self.inputs, out, weights)
        self.stream = self.launch.program.stream  # its program's stream 0: where a run ends
        self.done = cp.cuda.Event(block=False, disable_timing=True)
        self.launch()  # the first call runs eagerly and captures: not in a prompt's time
        self.stream.synchronize()

    def role(self, role: str) -> str | None:
        return next((n for n, r in self.step.roles.items() if r == role), None)


def _write(array: Any, values: np.ndarray) -> None:
    """Host values into a device array, synchronously (the stream is idle when called)."""
    host = np.ascontiguousarray(values, dtype=array.dtype).reshape(array.shape)
    if host.nbytes:
        cupy().cuda.runtime.memcpy(int(array.data.ptr), host.ctypes.data, host.nbytes, H2D)


class DeviceDecodeLoop:
    """The loop for one compiled decode step (module docstring)."""

    def __init__(self, decode: Any, weights: Mapping[str, Any], threads: int = SAMPLING_THREADS):
        cp = cupy()
        step = decode.step
        types = step.graph.value_types()
        self.caches = {
            n: cp.asarray(np.zeros(types[n].shape, numpy_dtype(types[n].dtype)))
            for n in step.cache_inputs
        }
        self.decode = _Step(decode, weights, self.caches)
        self.stream = self.decode.stream
        self.context = int(types[step.cache_inputs[0]].shape[-2]) if step.cache_inputs else 4096
        self.vocab = step.vocab
        self.threads = threads
        token_name = self.decode.role("tokens")
        self.position_name = next((n for n, r in step.roles.items() if r in POSITION_ROLES), None)
        self.kv_name = self.decode.role("kv_len")
        if token_name is None:
            raise OptGraphError("generate: the decode step has no token input")
        self.token_name: str = token_name
        dummy = cp.asarray(np.zeros(1, np.int64))
        inputs = self.decode.inputs
        self.position = inputs[self.position_name] if self.position_name else dummy
        self.kv_len = inputs[self.kv_name] if self.kv_name else dummy
        kernel = sampling_kernel(
            types[step.logits].dtype, types[self.token_name].dtype,
            types[self.position_name].dtype if self.position_name else None,
            types[self.kv_name].dtype if self.kv_name else None, threads,
        )  # fmt: skip
        function = kernel_module(module_source([kernel])).get_function(kernel.name)
        self._kernel = getattr(function, "kernel", None) or function
        self.iconf = cp.asarray(np.zeros(5, np.int64))
        self.prefill_iconf = cp.asarray(np.zeros(5, np.int64))
        self.fconf = cp.asarray(np.zeros(2, np.float32))
        self.state = cp.asarray(np.zeros(1, np.int64))
        self.history = cp.asarray(np.zeros(self.context, np.int32))
        self._pinned = cp.cuda.alloc_pinned_memory(4 * self.context)
        self.host_history = np.frombuffer(self._pinned, np.int32, self.context)
        self.events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(LAG + 1)]
        self._prefills: dict[int, _Step] = {}

    # -- launches ---------------------------------------------------------------------------

    def _sample(self, logits: Any, iconf: Any, index: int) -> None:
        """Choose token `index` from `logits` (on the stream), and start its copy out."""
        args = tuple(
            int(a.data.ptr)
            for a in (
                logits, iconf, self.fconf, self.state, self.decode.inputs[self.token_name],
                self.position, self.kv_len, self.history,
            )
        )  # fmt: skip
        self._kernel((1, 1, 1), (self.threads, 1, 1), args, 0, self.stream)
        slot = index % self.context
        cupy().cuda.runtime.memcpyAsync(
            self.host_history[slot:].ctypes.data,
            int(self.history.data.ptr) + 4 * slot,
            4,
            D2H,
            self.stream.ptr,
        )
        self.events[index % len(self.events)].record(self.stream)

    def _read(self, index: int) -> int:
        self.events[index % len(self.events)].synchronize()
        return int(self.host_history[index % self.context])

    def prepare(self, prefill: Any, weights: Mapping[str, Any]) -> _Step:
        """The bound prefill of `prefill`'s bucket (bound and captured on first use)."""
        key = id(prefill)
        found = self._prefills.get(key)
        if found is None:
            found = self._prefills[key] = _Step(prefill, weights, self.caches)
        return found

    # -- a prompt ---------------------------------------------------------------------------

    def tokens(
        self,
        prompt_length: int,
        max_new: int,
        sampling: Any,
        stop: set[int],
        prefill: Any = None,
        prefill_weights: Mapping[str, Any] | None = None,
        feeds: list[dict[str, np.ndarray]] | None = None,
    ) -> Iterator[int]:
        """The new tokens after a prompt of `prompt_length` tokens, each as soon as its copy has
        arrived (module docstring). The prompt comes as `feeds`: with `prefill` (a compiled
        prefill step) one set of its inputs but the caches, without it one set of the decode
        step's a token."""
        if prompt_length + max_new > self.context:
            raise OptGraphError(
                f"generate: {prompt_length} + {max_new} tokens exceed the caches ({self.context})"
            )
        feeds = feeds or []
        bound = None if prefill is None else self.prepare(prefill, prefill_weights or {})
        self.stream.synchronize()  # a previous prompt's steps launched past its end
        start = prompt_length - 1  # the sampler advances these to the first new token's
        decode = self.decode
        if self.position_name:
            _write(self.position, np.array([start]))
        if self.kv_name:
            _write(self.kv_len, np.array([start + 1]))
        _write(self.state, np.array([0]))
        _write(self.fconf, np.array([sampling.temperature, sampling.top_p], np.float32))
        seed = sampling.seed - (1 << 64) if sampling.seed >= 1 << 63 else sampling.seed
        config = [0, self.vocab, sampling.top_k, seed, self.context]
        _write(self.iconf, np.array(config, np.int64))
        if bound is not None:
            for name, value in feeds[0].items():
                _write(bound.inputs[name], value)
            row = prompt_length - 1 if bound.step.logits_rows == "all" else 0
            _write(self.prefill_iconf, np.array([row * self.vocab, *config[1:]], np.int64))
            bound.launch()
            # the prefill runs on its own program's stream: the choice waits for its end
            runtime = cupy().cuda.runtime
            runtime.eventRecord(bound.done.ptr, bound.stream.ptr)
            runtime.streamWaitEvent(self.stream.ptr, bound.done.ptr, 0)
            self._sample(bound.logits, self.prefill_iconf, 0)
        else:
            for values in feeds:
                for name, value in values.items():
                    _write(decode.inputs[name], value)
                decode.launch()
                self.stream.synchronize()  # the next token's values overwrite these inputs
            if self.position_name:  # the feeds moved them: back to one before the first new
                _write(self.position, np.array([start]))
            if self.kv_name:
                _write(self.kv_len, np.array([start + 1]))
            self._sample(decode.logits, self.iconf, 0)
        read = 0
        for index in range(1, max_new):
            decode.launch()
            self._sample(decode.logits, self.iconf, index)
            if index - read >= LAG:
                token = self._read(read)
                yield token
                read += 1
                if token in stop:
                    return
        while read < max_new:
            token = self._read(read)
            yield token
            read += 1
            if token in stop:
                return

    def close(self) -> None:
        self.stream.synchronize()
        self._prefills.clear()
