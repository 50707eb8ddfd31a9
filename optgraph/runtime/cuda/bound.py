"""A run's arrays, checked and resolved once (`Bound`), and `CudaProgram.bind`'s step (`BoundStep`).

step = program.bind({"x": x_dev}, out={"y": y_dev})   # checked here, once
step(); step()                                         # the first call captures, later
                                                       # calls are one cudaGraphLaunch each

`run` checks its arrays on every call, unless they are laid out as in the call before
(`run_signature`: the same names, host arrays of the same shapes and dtypes, device arrays at
the same addresses): then the last call's `Bound` is taken again with this call's arrays
(`Bound.again`), which is all the full check would have produced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import Graph, TensorType
from optgraph.reference.kernels import ir_dtype
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.graph_cache import Binding, GraphCache, GraphKey, RuntimeCounters
from optgraph.runtime.cuda.launch import Variant
from optgraph.runtime.cuda.offload import HostErrors


class BoundProgram(Protocol):
    """What a bound step uses of its program (`cuda.CudaProgram`)."""

    _cache: GraphCache[Any]
    counters: RuntimeCounters
    host_errors: HostErrors

    @property
    def stream(self) -> Any: ...

    @property
    def options(self) -> Any: ...

    def _start(self, bound: Bound) -> None: ...

    def _launch(self, key: GraphKey, binding: Binding, ops: list[Callable[[], Any]]) -> None: ...


@dataclass(frozen=True)
class Bound:
    """One run's arrays checked and resolved: its variant, graph key, pointers and host calls."""

    variant: Variant
    key: GraphKey
    binding: Binding
    ops: list[Callable[[], Any]]
    staged: dict[str, np.ndarray]  # host inputs, copied in through pinned staging
    outputs: dict[str, Any]  # the caller's `out` arrays, by output name
    calling_thread: bool = False  # `ops` are run in order: GPU parts, host waits, CPU nodes
    # The caller's device arrays whose addresses the run reads or writes: held so that CuPy's
    # pool cannot hand their memory to another array while a launch may still use it.
    arrays: tuple[Any, ...] = ()

    def again(self, inputs: Mapping[str, Any], out: Mapping[str, Any]) -> Bound:
        """This bound run for a call whose arrays have the same `run_signature`: its host
        inputs' values and the caller's arrays are this call's, everything else is the same."""
        outputs = {name: out[name] for name in self.outputs}
        staged = {name: inputs[name] for name in self.staged}
        return replace(self, staged=staged, outputs=outputs, arrays=held(inputs, outputs))


def held(inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> tuple[Any, ...]:
    """The device arrays a run reads or writes (`Bound.arrays`): its CuPy inputs and outputs."""
    device = cupy().ndarray
    return tuple(v for v in inputs.values() if isinstance(v, device)) + tuple(outputs.values())


RunSignature = tuple[tuple[object, ...], ...]


def run_signature(inputs: Mapping[str, Any], out: Mapping[str, Any]) -> RunSignature | None:
    """What `CudaProgram._bind` decides from, per argument in order: a host (NumPy) array's
    shape and dtype, a device array's address, shape, dtype and layout; None where an argument
    is anything else (a list, a scalar, an array subclass: the full check takes it). Two calls
    with equal signatures bind alike: the same input types pick the same variant, the same
    addresses the same graph, in-place outputs and overlaps. O(arguments)."""
    device = cupy().ndarray
    sig: list[tuple[object, ...]] = []
    for kind, mapping in (("in", inputs), ("out", out)):
        for name, value in mapping.items():
            if type(value) is np.ndarray:
                sig.append((kind, name, value.shape, value.dtype))
            elif type(value) is device:
                flags = value.flags
                sig.append(
                    (kind, name, value.shape, value.dtype, value.data.ptr, flags.c_contiguous)
                )
            else:
                return None
    return tuple(sig)


class DirectReplays:
    """Captured graphs a caller launches itself, each remembered (by the caller's `slot`) with
    the graph cache's generation it was read at: `launch` is one `cudaGraphLaunch` while that
    generation is current (no key hashed, no cache decision), and False otherwise, when the
    caller takes the full path (`CudaProgram._launch`) and then `remember`s the graph again."""

    def __init__(self, program: BoundProgram):
        self.program = program
        self._execs: dict[int, tuple[int, int]] = {}  # slot -> (cache generation, graph exec)
        self._graph_launch = cupy().cuda.runtime.graphLaunch
        self._stream = int(program.stream.ptr)

    def launch(self, slot: int) -> bool:
        known = self._execs.get(slot)
        if known is None or known[0] != self.program._cache.generation:
            return False
        self._graph_launch(known[1], self._stream)
        self.program.counters.replays += 1
        return True

    def remember(self, slot: int, key: GraphKey, binding: Binding) -> None:
        """After a full-path launch: the graph of `key` if it is captured and bound to `binding`."""
        cache = self.program._cache
        captured = cache.current(key, binding) if self.program.options.use_graph else None
        if captured is not None:
            self._execs[slot] = (cache.generation, int(captured.exec))


class BoundStep:
    """`CudaProgram.bind`'s step: a call launches the program on the arrays bound once.

    Once the step's graph is captured and bound to its arrays, a call is one `cudaGraphLaunch`
    of the graph it remembers (`DirectReplays`), for as long as the program's graph cache has not
    changed since (`GraphCache.generation`: another key's capture, an update to other pointers,
    an eviction); otherwise, or while a CPU node's failure waits to be raised, it takes the full
    path. A step whose CPU nodes run on the calling thread launches its parts through
    `PartLauncher` instead."""

    def __init__(self, program: BoundProgram, bound: Bound):
        self.program, self.bound = program, bound
        self._replays = DirectReplays(program)

    def __call__(self) -> dict[str, Any]:
        """Launch (the first call: eager run and capture); the bound `out` arrays, by name."""
        program, bound = self.program, self.bound
        if not program.host_errors and self._replays.launch(0):
            return bound.outputs
        program.host_errors.raise_first()  # a CPU node's failure in an earlier launch
        program._start(bound)
        if not bound.calling_thread:
            self._replays.remember(0, bound.key, bound.binding)
        return bound.outputs


class PartLauncher:
    """Launches the GPU parts of a run whose CPU nodes run on the calling thread: part `index`
    is its own CUDA graph, keyed by the run's key with the part's index (every part of a run
    kept in the cache at once), launched directly while current (`DirectReplays`), else through
    the full path (`CudaProgram._launch`: capture, update or replay)."""

    def __init__(self, program: BoundProgram, key: GraphKey, binding: Binding):
        self.program, self.key, self.binding = program, key, binding
        self._keys: dict[int, GraphKey] = {}
        self._replays = DirectReplays(program)

    def __call__(self, index: int, ops: list[Callable[[], Any]]) -> None:
        if self._replays.launch(index):
            return
        key = self._keys.get(index)
        if key is None:
            key = self._keys[index] = replace(self.key, part=index)
        cache, program = self.program._cache, self.program
        cache.capacity = max(cache.capacity, (index + 1) * program.options.graph_capacity)
        program._launch(key, self.binding, ops)
        self._replays.remember(index, key, self.binding)


def classify_inputs(
    graph: Graph, inputs: Mapping[str, Any]
) -> tuple[dict[str, TensorType], dict[str, int], dict[str, np.ndarray]]:
    """(input types, device inputs' pointers, host inputs) of a run of `graph`; a clear
    `InputError` for an unknown or missing input, a wrong dtype or a strided device array."""
    cp = cupy()
    unknown = sorted(set(inputs) - graph.input_names())
    if unknown:
        raise InputError(f"graph '{graph.name}' has no input '%{unknown[0]}'")
    types: dict[str, TensorType] = {}
    bound: dict[str, int] = {}
    staged: dict[str, np.ndarray] = {}
    for decl in graph.inputs:
        if decl.name not in inputs:
            raise InputError(f"missing input '%{decl.name}' ({decl.type})", decl.span)
        value = inputs[decl.name]
        if not isinstance(value, cp.ndarray):
            value = np.asarray(value)
        dtype = ir_dtype(value.dtype)
        if dtype != decl.type.dtype:
            raise InputError(
                f"input '%{decl.name}': expected dtype {decl.type.dtype}, got {value.dtype}",
                decl.span,
            )
        types[decl.name] = TensorType(dtype, tuple(value.shape))
        if isinstance(value, cp.ndarray):
            if not value.flags.c_contiguous:
                raise InputError(f"input '%{decl.name}' must be a C-contiguous CuPy array")
            bound[decl.name] = int(value.data.ptr)
        else:
            staged[decl.name] = value
    return types, bound, staged


def check_apart(
    inputs: Mapping[str, tuple[int, int]],
    outputs: Mapping[str, tuple[int, int]],
    in_place: Mapping[str, str],
) -> None:
    """A clear `InputError` where an output's array shares bytes with an input's or another
    output's (each given as (pointer, bytes)), other than an in-place pair (`in_place`: {output:
    input}). A kernel writing an input's bytes mid-step would change what the step's other
    kernels read, by timing: those reading it before the PDL wait (`early_cache_reads`), or
    later in the issue order. O(n log n + n·k) for n arrays, k of them overlapping at once."""
    spans = sorted(
        [(ptr, ptr + nbytes, "input", name) for name, (ptr, nbytes) in inputs.items() if nbytes]
        + [(ptr, ptr + nbytes, "out", name) for name, (ptr, nbytes) in outputs.items() if nbytes]
    )
    active: list[tuple[int, str, str]] = []  # (end, kind, name) of the spans still open
    for start, end, kind, name in spans:
        active = [a for a in active if a[0] > start]
        for _, other_kind, other in active:
            pair = sorted([(kind, name), (other_kind, other)])
            if "out" not in (kind, other_kind):
                continue  # two inputs may share bytes: both are only read
            if pair[0][0] == "input" and in_place.get(pair[1][1]) == pair[0][1]:
                continue
            (k1, n1), (k2, n2) = pair
            raise InputError(
                f"{k1} '%{n1}' and {k2} '%{n2}' share memory: a step may write only its "
                "outputs' own arrays (or a KV cache in place)"
            )
        active.append((end, kind, name))
