"""Attention raised from its written-out form, and half-precision steps raised as f32 ones, on the
GPU: transformers models with eager attention (a softcap, a select mask beside a bias, a position
bias beside a zero mask) through torch.export, the ONNX exporter's sdpa and eager forms, and an
f16 Llama decode step (rms_norm, rope, attention, the q/k folds), each compiled for cuda (the
default pipeline) against the reference interpreter and against transformers
(`tests/frontends/test_attention_raising.py` and `test_half_precision_raising.py` check the
same on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.gpu_support import BOUNDS, assert_close, require_gpu

pytestmark = pytest.mark.gpu
require_gpu()
torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
pytest.importorskip("transformers", reason="the import tests need transformers")

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends import test_half_precision_raising as half
from tests.frontends.numerics import ops_of
from tests.frontends.test_onnx_gathers_topk import _exported_transformers
from tests.gpu.test_gpu_imported_models import _on_the_gpu


@pytest.mark.parametrize("name", ["llama", "gemma2", "mpt", "t5_encoder", "bert"])
def test_eager_attention_raised_runs_on_the_gpu(name: str) -> None:
    from tools import transformers_sweep

    module, args = transformers_sweep.wrapped(name)
    graph, _ = og.from_torch(module, args)
    assert "softmax" not in ops_of(graph) and "attention" in ops_of(graph)
    _on_the_gpu(module, args)


@pytest.mark.parametrize("name", ["llama_sdpa", "bert", "gpt2", "whisper_encoder"])
def test_onnx_attention_raised_runs_on_the_gpu(name: str) -> None:
    proto, args, want = _exported_transformers(name)
    graph, weights = from_onnx(proto)
    assert "softmax" not in ops_of(graph) and "attention" in ops_of(graph)
    inputs = {decl.name: a for decl, a in zip(graph.inputs, args)}
    got = og.compile(graph, target="cuda").run(inputs, weights)
    assert_close(graph, got, run_reference(graph, inputs, weights))
    out = got[graph.output_names()[0]].astype(np.float64)
    assert nmse(out, want.astype(np.float64)) <= BOUNDS["f32"]


def test_an_f16_decode_step_on_the_gpu_matches_the_reference_and_transformers() -> None:
    model, graph, weights = half._step("f16", "eager")
    types = graph.value_types()
    rng = np.random.default_rng(8)
    inputs = {"input_ids": np.array([[31]]), "cache_position": np.array([13])}
    for decl in graph.inputs[2:]:
        inputs[decl.name] = (rng.standard_normal(types[decl.name].shape) * 0.5).astype(np.float16)
    want = run_reference(graph, {k: v.copy() for k, v in inputs.items()}, weights)
    got = og.compile(graph, target="cuda").run({k: v.copy() for k, v in inputs.items()}, weights)
    assert_close(graph, got, want)
    tensors = [torch.from_numpy(inputs[d.name].copy()) for d in graph.inputs]
    with torch.no_grad():
        logits = half.hf_generate.DecodeStep(model, half.MAX_LEN)(*tensors)  # type: ignore[arg-type]
    (name,) = [n for n in graph.output_names() if types[n].shape[-1] == half.VOCAB]
    error = nmse(np.asarray(got[name], np.float64), logits.float().numpy().astype(np.float64))
    assert error <= 1e-4, f"f16 logits: nmse {error:.3g}"
