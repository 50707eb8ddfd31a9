"""Models exported by torch.onnx.export (the dynamo exporter, offline) import and match PyTorch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("onnx", reason="needs onnx")
pytest.importorskip("onnxscript", reason="torch.onnx.export needs onnxscript")

from optgraph.frontends.onnx import from_onnx
from tests.frontends import torch_models as models
from tests.frontends.numerics import assert_matches, ops_of


def _exported(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> list[str]:
    module.eval()
    model = torch.onnx.export(module, args, dynamo=True, verbose=False).model_proto
    graph, weights = from_onnx(model)
    with torch.no_grad():
        expected = module(*args).numpy()
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [expected])
    return ops_of(graph)


def test_gpt2_block_through_onnx() -> None:
    torch.manual_seed(8)
    ops = _exported(models.GPT2Block(), (torch.randn(2, 6, 64),))
    # Split -> slices; the tanh GELU the exporter writes out is raised again.
    assert ops.count("layer_norm") == 2 and ops.count("gelu") == 1 and "tanh" not in ops


def test_cnn_through_onnx() -> None:
    torch.manual_seed(9)
    ops = _exported(models.SmallCNN(), (torch.randn(2, 3, 16, 16),))
    assert ops.count("conv2d") == 2 and "softmax" in ops
