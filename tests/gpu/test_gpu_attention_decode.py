"""The wide decode attention kernel (codegen/kernels/attention/decode_wide.py) on the GPU: the
emulator's cases (GQA with kv_len below the cache, batch rows with window, softcap and a bool
mask, float mask with top-left causal and row tiles, several chunks of several passes, K/V views
not 16-byte aligned; stale NaN rows past kv_len) and the head-to-head models' decode shapes (Llama-real 32/8 heads x 1024 keys,
launch-bound 8/2 heads x 64 x 128 keys; full and partial kv_len, batch 2), each within the
bounds, eager then replayed twice, the replays bit-identical (the chunk merge has a fixed order),
and the same graphs on the earlier kernel (`variants.WIDE_DECODE = False`) for A/B."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from tests.codegen.test_attention_decode_wide_emulated import (
    FLOAT_MASK,
    GQA_LEN,
    LONG,
    MASKED,
    UNALIGNED,
)
from tests.support.gpu_support import assert_close, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.codegen.kernels.attention import decode_wide_layout, variants
from optgraph.reference.interpreter import random_inputs, run_reference

MODEL_SHAPES = """graph decode_shapes {
  input %q : f16[1,32,1,128]
  input %k : f16[1,8,1024,128]
  input %v : f16[1,8,1024,128]
  input %len : i32[1]
  input %lq : f16[1,8,1,64]
  input %lk : f16[1,2,128,64]
  input %lv : f16[1,2,128,64]
  input %llen : i32[1]
  input %bq : bf16[2,32,1,128]
  input %bk : bf16[2,8,1024,128]
  input %bv : bf16[2,8,1024,128]
  input %blen : i32[2]
  %o = attention(%q, %k, %v, %len) : f16[1,32,1,128]
  %lo = attention(%lq, %lk, %lv, %llen) : f16[1,8,1,64]
  %bo = attention(%bq, %bk, %bv, %blen) : bf16[2,32,1,128]
  output %o, %lo, %bo
}
"""


def _check(graph: og.Graph, inputs: dict[str, np.ndarray], wide: bool) -> None:
    want = run_reference(graph, inputs, {})
    program = cuda_program(graph)
    source = program.lowered.main.plan.source()
    assert ("og_attention_decode_wide_" in source) == wide
    first = program.run(inputs)  # eager, then capture
    second = program.run(inputs)  # replay
    third = program.run(inputs)
    assert_close(graph, first, want)
    assert same_bits(second, third)
    assert_close(graph, second, want)


def _emulator_case(name: str, dtype: str) -> tuple[og.Graph, dict[str, np.ndarray]]:
    cases = {"gqa": GQA_LEN, "masked": MASKED, "float_mask": FLOAT_MASK, "long": LONG}
    text = {**cases, "unaligned": UNALIGNED}[name]
    graph = og.parse(text.replace("{T}", dtype))
    inputs = random_inputs(graph, 11)
    rng = np.random.default_rng(12)
    if name == "gqa":
        inputs["len"] = np.array([77], np.int32)
    if name == "masked":
        inputs["len"] = np.array([300, 131], np.int32)
        inputs["m"] = rng.random(inputs["m"].shape) < 0.8
    if name == "float_mask":
        fm = rng.normal(size=inputs["fm"].shape).astype(np.float32)
        fm[..., ::7] = -np.inf
        inputs["fm"] = fm.astype(inputs["fm"].dtype)
    if name == "long":
        inputs["len"] = np.array([1037], np.int32)
    if name == "unaligned":
        inputs["len"] = np.array([90], np.int32)
    return graph, inputs


@pytest.mark.parametrize("wide", [True, False], ids=["wide", "old"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", ["gqa", "masked", "float_mask", "long", "unaligned"])
def test_emulator_cases_match_reference(
    case: str, dtype: str, wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(variants, "WIDE_DECODE", wide)
    if case == "long":
        monkeypatch.setattr(decode_wide_layout, "MAX_CHUNKS", 2)
    graph, inputs = _emulator_case(case, dtype)
    _check(graph, inputs, wide)


@pytest.mark.parametrize("wide", [True, False], ids=["wide", "old"])
@pytest.mark.parametrize("full", [True, False], ids=["full-cache", "partial"])
def test_model_decode_shapes_match_reference(
    wide: bool, full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(variants, "WIDE_DECODE", wide)
    graph = og.parse(MODEL_SHAPES)
    inputs = random_inputs(graph, 13)
    inputs["len"] = np.array([1024 if full else 613], np.int32)
    inputs["llen"] = np.array([128 if full else 97], np.int32)
    inputs["blen"] = np.array([1024, 1024] if full else [1000, 37], np.int32)
    _check(graph, inputs, wide)


def test_stale_rows_past_kv_len_do_not_leak() -> None:
    """NaN in the cache rows at or past kv_len: the result is that of zeros there."""
    graph = og.parse(GQA_LEN.replace("{T}", "f16"))
    inputs = random_inputs(graph, 14)
    inputs["len"] = np.array([77], np.int32)
    inputs["v"][:, :, 77:, :] = 0.0
    want = run_reference(graph, inputs, {})
    stale = {**inputs, "v": inputs["v"].copy()}
    stale["v"][:, :, 77:, :] = np.nan
    got = cuda_program(graph).run(stale)
    assert_close(graph, got, want)
