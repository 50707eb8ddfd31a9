"""transpose-weights: imported `[out, in]` weights stored transposed, the model's arrays still what
the user supplies, the results unchanged, the products fused."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.errors import InputError, ParseError, VerifyError
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support.fake_cupy import fake_cupy

# What `og.from_torch` makes of rms_norm -> Linear -> SiLU·Linear -> Linear (+ residual).
IMPORTED = """graph imported {
  input %x : f32[1,64]
  weight %norm.weight : f32[64]
  weight %gate.weight : f32[96,64]
  weight %up.weight : f32[96,64]
  weight %down.weight : f32[64,96]
  %xn = rms_norm(%x, %norm.weight) {eps = 1e-06} : f32[1,64]
  %g = matmul(%xn, %gate.weight) {transpose_b = true} : f32[1,96]
  %u = matmul(%xn, %up.weight) {transpose_b = true} : f32[1,96]
  %s = silu(%g) : f32[1,96]
  %m = mul(%s, %u) : f32[1,96]
  %d = matmul(%m, %down.weight) {transpose_b = true} : f32[1,64]
  %y = add(%x, %d) : f32[1,64]
  output %y
}
"""
NO_FUSION = "verify,transpose-weights,assign-streams,insert-sync,analyze-lifetimes,plan-memory"


def _source() -> og.Graph:
    return og.parse(IMPORTED)


def test_the_models_arrays_give_bit_identical_results() -> None:
    source = _source()
    stored = run_pipeline(source, "transpose-weights")
    assert {w.name for w in stored.weights if w.ann.layout == "transposed"} == {
        "gate.weight",
        "up.weight",
        "down.weight",
    }
    assert not any(n.attrs.get("transpose_b") for n in stored.nodes)
    inputs, weights = random_inputs(source), random_weights(source)
    expected = run_reference(source, inputs, weights)["y"]
    assert np.array_equal(run_reference(stored, inputs, weights)["y"], expected)
    # Scheduling without fusion: the planned executor at the planned offsets, bit for bit.
    planned = og.compile(source, pipeline=NO_FUSION, target="cpu")
    assert np.array_equal(planned.run(inputs, weights)["y"], expected)


def test_random_weights_draw_the_models_layout() -> None:
    source = _source()
    stored = run_pipeline(source, "transpose-weights")
    before, after = random_weights(source), random_weights(stored)
    for name, array in before.items():
        assert np.array_equal(after[name], array), name


def test_the_default_pipeline_fuses_the_imported_products() -> None:
    source = _source()
    compiled = run_pipeline(source, DEFAULT_PIPELINE)
    fused = [n for n in compiled.nodes if n.op == "fused" and n.body is not None]
    anchors = [b for n in fused for b in n.body.nodes if b.op == "matmul"]  # type: ignore[union-attr]
    assert len(anchors) == 3, "every product is fused (norm prologue, SwiGLU, residual)"
    program = og.compile(source, target="cpu")
    inputs, weights = random_inputs(source), random_weights(source)
    got = program.run(inputs, weights)["y"]
    assert nmse(got, run_reference(source, inputs, weights)["y"]) < 1e-12


def test_an_array_in_the_stored_layout_is_refused_naming_the_models_type() -> None:
    stored = run_pipeline(_source(), "transpose-weights")
    weights = random_weights(stored)
    weights["gate.weight"] = np.ascontiguousarray(weights["gate.weight"].T)
    with pytest.raises(InputError, match=r"'%gate.weight': expected f32\[96,64\]"):
        run_reference(stored, random_inputs(stored), weights)


def test_the_cuda_upload_stores_the_transpose(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with fake_cupy(monkeypatch):
        graph = run_pipeline(_source(), NO_FUSION)
        inputs, weights = random_inputs(graph), random_weights(graph)
        program = cuda_program(graph, weights=weights)
        program.run(inputs)
        base, plan = program.weights_ptr(), program.plan()
        for name, offset in plan.weight_offsets.items():
            expected = weights[name] if name == "norm.weight" else weights[name].T.copy()
            raw = np.ctypeslib.as_array(
                (np.ctypeslib.ctypes.c_uint8 * expected.nbytes).from_address(base + offset)
            )
            assert raw.tobytes() == expected.tobytes(), name
        program.close()


def test_layout_is_a_weight_annotation_only() -> None:
    text = IMPORTED.replace(
        "%y = add(%x, %d) : f32[1,64]", '%y = add(%x, %d) : f32[1,64] !{layout = "transposed"}'
    )
    with pytest.raises(VerifyError, match="only weights take a layout"):
        og.verify(og.parse(text))
    bad_value = IMPORTED.replace(
        "weight %up.weight : f32[96,64]", 'weight %up.weight : f32[96,64] !{layout = "kn"}'
    )
    with pytest.raises(ParseError, match='unknown weight layout "kn"'):
        og.parse(bad_value)
