"""Quantized weights uploaded by the CUDA runtime (runtime/cuda/memory.py) on the fake CuPy: a
quantized weight's array is its blocks' bytes (`uint8`, `TensorType.array_shape`), from NumPy or
from the device, copied byte for byte to the plan's offset next to float weights; an array of
the model's shape, or of another dtype, is refused with both types named."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.errors import InputError
from optgraph.passes.manager import run_pipeline
from tests.support.fake_cupy import fake_cupy

GRAPH = """graph q {
  input %x : f16[1,256]
  input %ids : i32[2]
  weight %w : q4_k[24,256]
  weight %v : q6_k[8,256]
  weight %emb : q8_0[5,256]
  weight %b : f16[24]
  %p = matmul(%x, %w) {transpose_b = true} : f16[1,24]
  %y = add(%p, %b) : f16[1,24]
  %z = matmul(%x, %v) {transpose_b = true} : f16[1,8]
  %e = get_rows(%emb, %ids) : f32[2,256]
  output %y, %z, %e
}
"""


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    graph = og.parse(GRAPH)
    out: dict[str, np.ndarray] = {}
    for w in graph.weights:
        if w.type.is_quantized:
            out[w.name] = rng.integers(0, 256, w.type.array_shape, dtype=np.uint8)
        else:
            out[w.name] = rng.standard_normal(w.type.shape).astype(np.float16)
    return out


def _device_bytes(address: int, nbytes: int) -> bytes:
    return bytes((ctypes.c_uint8 * nbytes).from_address(address))


@pytest.mark.parametrize("on_device", [False, True])
def test_quantized_weights_upload_byte_for_byte(monkeypatch, on_device: bool) -> None:
    with fake_cupy(monkeypatch):
        graph = run_pipeline(og.parse(GRAPH), "default")
        weights = _weights()
        given = weights
        if on_device:
            cp = sys.modules["cupy"]
            given = {k: cp.asarray(v) for k, v in weights.items()}
        program = cuda_program(graph, weights=given)
        inputs = {"x": np.zeros((1, 256), np.float16), "ids": np.array([4, 0], np.int32)}
        program.run(inputs)
        assert program.counters.weight_uploads == 1
        base, plan = program.weights_ptr(), program.plan()
        types = {w.name: w.type for w in graph.weights}
        assert types["w"].nbytes == 24 * 144 and types["v"].nbytes == 8 * 210
        for name, offset in plan.weight_offsets.items():
            want = weights[name].tobytes()
            assert len(want) == types[name].nbytes, name
            assert _device_bytes(base + offset, len(want)) == want, name
        program.close()


@pytest.mark.parametrize(
    ("array", "found"),
    [
        (np.zeros((24, 256), np.float16), "f16[24, 256]"),  # the values' shape, not the bytes
        (np.zeros((24, 144), np.int8), "int8[24, 144]"),  # the bytes' shape, another dtype
        (np.zeros((24, 145), np.uint8), "uint8[24, 145]"),  # not whole blocks
    ],
)
def test_a_quantized_weight_of_another_array_is_refused(
    monkeypatch, array: np.ndarray, found: str
) -> None:
    with fake_cupy(monkeypatch):
        graph = run_pipeline(og.parse(GRAPH), "default")
        weights = {**_weights(), "w": array}
        with pytest.raises(InputError) as err:
            cuda_program(graph, weights=weights)
        message = str(err.value)
        expected = "weight '%w': expected q4_k[24,256] as its blocks' bytes, uint8[24, 144]"
        assert expected in message
        assert message.endswith(f"got {found}")
