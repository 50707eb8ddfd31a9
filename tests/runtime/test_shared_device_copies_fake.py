"""A second program given the very arrays a first one uploaded copies them from the first one's
device buffer (runtime/cuda/memory.py `DeviceCopies`): `generate` uploads a model's weights once
from the host for its prefill and decode steps. Never a stale copy: after the first program
uploads other arrays, or once it is gone, the second copies from the host. On the fake CuPy,
whose device memory is host memory, so the bytes are checked."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

import optgraph as og
from optgraph.runtime.cuda.memory import D2D, H2D
from tests.runtime.test_device_transpose_fake import GRAPH
from tests.support.fake_cupy import fake_cupy


def _arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((32, 64)).astype(np.float16),
        "v": rng.standard_normal(32).astype(np.float16),
    }


def _held(program: Any) -> dict[str, bytes]:
    weights = program._cuda.weights
    w, v = (
        weights.buffer.bytes(weights.offsets["w"], 4096),
        weights.buffer.bytes(weights.offsets["v"], 64),
    )
    return {"w": w.tobytes(), "v": v.tobytes()}


def _want(arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {"w": np.ascontiguousarray(arrays["w"].T).tobytes(), "v": arrays["v"].tobytes()}


def test_a_second_program_copies_the_same_arrays_device_to_device(monkeypatch: Any) -> None:
    x = {"x": np.ones((1, 64), np.float16)}
    with fake_cupy(monkeypatch):
        import cupy

        copies: list[tuple[int, int]] = []  # (destination, kind) of every copy
        plain, plain_async = cupy.cuda.runtime.memcpy, cupy.cuda.runtime.memcpyAsync

        def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
            copies.append((dst, kind))
            plain(dst, src, nbytes, kind)

        def memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
            copies.append((dst, kind))
            plain_async(dst, src, nbytes, kind, stream)

        def weight_copies(program: Any) -> list[int]:
            """Kinds of the copies into `program`'s weight buffer, since the last clear."""
            buffer = program._cuda.weights.buffer
            return [k for d, k in copies if buffer.ptr <= d < buffer.ptr + buffer.mem.size]

        monkeypatch.setattr(cupy.cuda.runtime, "memcpy", memcpy)
        monkeypatch.setattr(cupy.cuda.runtime, "memcpyAsync", memcpy_async)
        first = og.compile(og.parse(GRAPH), target="cuda")
        second = og.compile(og.parse(GRAPH), target="cuda")
        arrays = _arrays(0)
        first.run(x, arrays)
        assert H2D in weight_copies(first)
        copies.clear()
        second.run(x, dict(arrays))  # another dict, the same arrays
        assert weight_copies(second) == [D2D, D2D]  # both from the first program's buffer
        assert _held(second) == _want(arrays)

        other = _arrays(1)
        first.run(x, other)  # the first now holds other values where `arrays` were
        copies.clear()
        third = og.compile(og.parse(GRAPH), target="cuda")
        third.run(x, arrays)
        assert _held(third) == _want(arrays)  # from `second`'s copies, or the host: never stale
        assert _held(first) == _want(other)

        del first, second
        gc.collect()
        copies.clear()
        fourth = og.compile(og.parse(GRAPH), target="cuda")
        fourth.run(x, other)  # its only holder is gone: from the host
        assert H2D in weight_copies(fourth) and _held(fourth) == _want(other)
