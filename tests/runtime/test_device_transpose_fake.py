"""A weight the `transpose-weights` pass stores transposed is copied to the device as the model
lays it out and transposed there (runtime/cuda/memory.py `_transpose_on_device`): a host
transpose of a large matrix reads a row apart, a few hundred MB/s (12 s of a 4 GB Llama's start
on the H200, 2026-12-02). On the fake CuPy: the device buffer holds the transposed bytes, and
the host array went to the device whole, untransposed, through the pinned slots
(runtime/cuda/staged_upload.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

import optgraph as og
from tests.support.fake_cupy import DeviceArray, fake_cupy

GRAPH = """graph t {
  input %x : f16[1,64]
  weight %w : f16[32,64]
  weight %v : f16[32]
  %y = matmul(%x, %w) {transpose_b = true} : f16[1,32]
  %z = add(%y, %v) : f16[1,32]
  output %z
}
"""


def test_a_transposed_weight_is_transposed_on_the_device(monkeypatch: Any) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 64)).astype(np.float16)
    v = rng.standard_normal(32).astype(np.float16)
    x = rng.standard_normal((1, 64)).astype(np.float16)
    with fake_cupy(monkeypatch) as fake:
        program = og.compile(og.parse(GRAPH), target="cuda")
        (stored,) = [s for s in program.graph.weights if s.name == "w"]
        assert stored.ann.layout == "transposed"
        copied_in: list[tuple[int, ...]] = []
        import cupy

        def empty(shape: tuple[int, ...], dtype: Any) -> DeviceArray:
            copied_in.append(tuple(shape))  # the device array the slots fill
            return fake.asarray(np.zeros(shape, dtype))

        monkeypatch.setattr(cupy, "empty", empty)
        program.run({"x": x}, {"w": w, "v": v})
        weights = program._cuda.weights
        got = weights.buffer.bytes(weights.offsets["w"], w.nbytes)
        assert got.tobytes() == np.ascontiguousarray(w.T).tobytes()
        assert (32, 64) in copied_in  # the model's layout went in; the device transposed it
        got_v = weights.buffer.bytes(weights.offsets["v"], v.nbytes)
        assert got_v.tobytes() == v.tobytes()
