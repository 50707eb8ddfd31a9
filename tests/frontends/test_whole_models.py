"""Whole models in: a torchvision-style ResNet and a GPT-2-style transformer through torch.export
against PyTorch, and the ResNet through torch.onnx.export against onnx's reference evaluator."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import numpy as np

import optgraph as og
from tests.frontends import whole_models as models
from tests.frontends.numerics import assert_matches, ops_of


def test_resnet_through_torch_export_matches_pytorch() -> None:
    torch.manual_seed(20)
    module = models.TinyResNet().eval()
    image = torch.randn(2, 3, 32, 32)
    graph, weights = og.from_torch(module, (image,))
    with torch.no_grad():
        expected = module(image).numpy()
    assert_matches(graph, weights, {"x": image.numpy()}, [expected])
    ops = ops_of(graph)
    assert ops.count("conv2d") == 1 + 4 * 2 + 1  # stem, two convs a block, one downsample
    assert "max_pool2d" in ops
    assert weights["layer2.0.downsample.0.weight"].shape == (16, 8, 1, 1)


def test_gpt_through_torch_export_matches_pytorch() -> None:
    torch.manual_seed(21)
    module = models.TinyGPT().eval()
    ids = torch.randint(0, 96, (2, 12))
    graph, weights = og.from_torch(module, (ids,))
    with torch.no_grad():
        expected = module(ids).numpy()
    assert_matches(graph, weights, {"input_ids": ids.numpy()}, [expected])
    ops = ops_of(graph)
    assert ops.count("layer_norm") == 5 and ops.count("attention") == 2
    assert ops.count("gelu") == 2 and "log_softmax" in ops
    # The tied head and the embedding read one weight (torch.export names it lm_head.weight).
    tied = {"wte.weight", "lm_head.weight"} & set(weights)
    assert len(tied) == 1
    (name,) = tied
    assert np.array_equal(weights[name], module.wte.weight.detach().numpy())


def test_resnet_through_onnx_matches_the_reference_evaluator() -> None:
    pytest.importorskip("onnxscript", reason="torch.onnx.export needs onnxscript")
    from onnx.reference import ReferenceEvaluator

    torch.manual_seed(22)
    module = models.TinyResNet().eval()
    image = torch.randn(1, 3, 32, 32)
    model = torch.onnx.export(module, (image,), dynamo=True, verbose=False).model_proto
    name = model.graph.input[0].name
    expected = ReferenceEvaluator(model).run(None, {name: image.numpy()})
    graph, weights = og.from_onnx(model)
    assert_matches(graph, weights, {graph.inputs[0].name: image.numpy()}, list(expected))
    with torch.no_grad():  # and the evaluator agrees with PyTorch
        np.testing.assert_allclose(expected[0], module(image).numpy(), rtol=1e-4, atol=1e-5)
