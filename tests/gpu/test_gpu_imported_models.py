"""The import paths added for RoBERTa, Falcon, GPT-J, BLOOM and Mixtral on the GPU: the imported
graphs (through torch.export, and Llama, BLOOM, Mixtral and wav2vec2 through torch.onnx.export) compiled for
cuda (the default pipeline) against the reference interpreter (the f32 bound; integer outputs
exact) and against PyTorch / transformers (`tests/frontends/test_gather_and_strided_import.py`
and `test_onnx_gathers_topk.py` check the same on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.gpu_support import BOUNDS, assert_close, require_gpu

pytestmark = pytest.mark.gpu
require_gpu()
torch = pytest.importorskip("torch", reason="the import tests need PyTorch")

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends import test_gather_and_strided_import as imports


def _on_the_gpu(module: torch.nn.Module, args: tuple) -> None:
    with torch.no_grad():
        out = module(*args)
    expected = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    graph, weights = from_torch(module, args)
    inputs = {decl.name: a.numpy() for decl, a in zip(graph.inputs, args)}
    got = og.compile(graph, target="cuda").run(inputs, weights)
    assert_close(graph, got, run_reference(graph, inputs, weights))
    for name, want in zip(graph.output_names(), expected):
        if want.dtype.kind == "f":
            assert nmse(got[name].astype(np.float64), want.astype(np.float64)) <= BOUNDS["f32"]
        else:
            assert np.array_equal(got[name], want), name


@pytest.mark.parametrize(
    ("module", "args"),
    [
        (
            imports.Gathers(),
            (
                torch.randn(2, 3, 5),
                torch.tensor(np.random.default_rng(1).integers(0, 2, (2, 3, 4))),
                torch.arange(10)[None, :] * 7,
            ),
        ),
        (imports.IndexAfterSlices(), (torch.randn(2, 4, 6, 3),)),
        (imports.Strided(), (torch.randn(3, 10),)),
        (
            imports.RowsAtRunTime(),
            (
                torch.randn(5, 3, 4),
                torch.tensor([[4, 0], [-1, 2]]),
                torch.tensor([3, -5], dtype=torch.int32),
            ),
        ),
    ],
    ids=["gather", "index-after-slices", "stepped-slices", "rows-at-run-time"],
)
def test_the_new_import_paths_run_on_the_gpu(module, args) -> None:  # type: ignore[no-untyped-def]
    _on_the_gpu(module, args)


def test_topk_on_the_gpu_equals_the_reference_exactly() -> None:
    x, counts = imports._topk_case(0)
    graph, weights = from_torch(imports.TopK(), (x, counts))
    inputs = {"x": x.numpy(), "counts": counts.numpy()}
    got = og.compile(graph, target="cuda").run(inputs, weights)
    want = run_reference(graph, inputs, weights)
    for name in graph.output_names():
        assert np.array_equal(got[name], want[name], equal_nan=got[name].dtype.kind == "f"), name


@pytest.mark.parametrize("name", ["roberta", "falcon", "gptj", "mixtral_batched_mm"])
def test_whole_imported_models_on_the_gpu_match_transformers(name: str) -> None:
    from tools import transformers_sweep

    module, args = transformers_sweep.wrapped(name)
    _on_the_gpu(module, args)


@pytest.mark.parametrize("name", ["llama", "bloom", "mixtral_batched_mm", "wav2vec2"])
def test_models_through_onnx_on_the_gpu_match_transformers(name: str) -> None:
    from optgraph.frontends.onnx import from_onnx
    from tests.frontends.test_onnx_gathers_topk import _exported_transformers

    proto, args, want = _exported_transformers(name)
    graph, weights = from_onnx(proto)
    inputs = {decl.name: a for decl, a in zip(graph.inputs, args)}
    got = og.compile(graph, target="cuda").run(inputs, weights)
    assert_close(graph, got, run_reference(graph, inputs, weights))
    out = got[graph.output_names()[0]].astype(np.float64)
    assert nmse(out, want.astype(np.float64)) <= BOUNDS["f32"]
