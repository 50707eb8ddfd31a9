"""A decode step's launch settings on the GPU (qkv_folds.FOLD_QKV,
rope_cache_writes.ROPE_CACHE_WRITES, product_kernel.EARLY_WEIGHTS): with each on and off, caches bound in place, the step as a bound step equals the reference, gives the same bits replay after
replay, and takes the launches the setting says (5, 6 or 7 a layer). Shapes: the launch-bound decode's (head 64, chunked tiles)
and realistic heads (head 128, K > 2048: split-K, tiles of whole heads)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import KernelStep
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.gpu_support import outputs_in_place, require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import cupy as cp

from optgraph.api.programs import cuda_program

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

SETTINGS = {  # name: ({module: {setting: value}}, launches a layer)
    "all-on": ({}, 5),
    "no-qkv-fold": ({"decode.qkv_folds": {"FOLD_QKV": False}}, 6),
    "none": (
        {
            "decode.qkv_folds": {"FOLD_QKV": False},
            "decode.rope_cache_writes": {"ROPE_CACHE_WRITES": False},
            "kernels.one_row.product_kernel": {"EARLY_WEIGHTS": False},
        },
        7,
    ),
    # prologue norms reduced by the block instead of every warp (the default before)
    "block-stats": ({"kernels.one_row.prologue": {"WARP_STATISTICS_MAX_K": 0}}, 5),
}
SHAPES = {  # name: (generate_llama's sizes, launches besides the layers', more a layer)
    "small": ({"hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 256}, 2, 0),
    # rows over fuse's prologue-max-k: the norms are kernels of their own (two a layer, a final)
    "heads128": ({"hidden": 2560, "heads": 20, "kv_heads": 4, "ffn": 1024, "vocab": 256}, 3, 2),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize(
    ("shape", "dtype"), [("small", "f16"), ("small", "bf16"), ("heads128", "f16")]
)
def test_decode_settings_match_reference_and_replay_bits(
    setting: str, shape: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    values, per_layer = SETTINGS[setting]
    for module, pairs in values.items():
        for name, value in pairs.items():
            monkeypatch.setattr(importlib.import_module(f"optgraph.codegen.{module}"), name, value)
    sizes, fixed, norms = SHAPES[shape]
    graph = og.parse(generate_llama(layers=2, dtype=dtype, cache_len=32, **sizes))
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    inputs, weights = random_inputs(graph, 5), random_weights(graph, 5)
    inputs["pos"] = np.array([20], np.int32)
    inputs["kv_len"] = np.array([21], np.int32)
    want = run_reference(graph, inputs, weights)
    program = cuda_program(planned, weights=weights)
    dev = {k: cp.asarray(v) for k, v in inputs.items()}
    out = outputs_in_place(planned, dev)
    step = program.bind(dev, out)
    runs = []
    for _ in range(4):  # eager, capture, replays (the same cache row rewritten each time)
        step()
        program.stream.synchronize()
        runs.append({n: cp.asnumpy(a) for n, a in out.items()})
    launches = sum(isinstance(s, KernelStep) for s in step.bound.variant.plan.steps)
    assert launches == fixed + 2 * (per_layer + norms)
    for later in runs[1:]:
        for name in runs[0]:
            assert later[name].tobytes() == runs[0][name].tobytes(), name
    tol = 3e-2 if dtype == "f16" else 1e-1
    for name in planned.output_names():
        np.testing.assert_allclose(
            runs[-1][name].astype(np.float64),
            np.asarray(want[name], np.float64),
            atol=tol,
            rtol=tol,
            err_msg=f"%{name} ({setting})",
        )
    # Another token in the bound input array, one more replay: a split-K counter not
    # reset by the replays before would leave stale results (the same bits as before).
    inputs["tokens"] = (inputs["tokens"] + 1) % sizes["vocab"]
    dev["tokens"][...] = cp.asarray(inputs["tokens"])
    want = run_reference(graph, inputs, weights)
    step()
    program.stream.synchronize()
    for name in planned.output_names():
        np.testing.assert_allclose(
            cp.asnumpy(out[name]).astype(np.float64),
            np.asarray(want[name], np.float64),
            atol=tol,
            rtol=tol,
            err_msg=f"%{name} ({setting}, next token)",
        )
