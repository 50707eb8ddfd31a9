"""Mobile conv nets through both importers against PyTorch: `F.hardtanh` / `F.relu6`
(MobileNetV2's activation, `aten.hardtanh` through torch.export, `Clip` through ONNX) as `clip`;
transformers' `MobileNetV2ForImageClassification` and torchvision's MobileNetV3 layout (the one
`tools/diffusers_sweep.py` writes out: hardswish, squeeze-excitation with hardsigmoid, depthwise
convolutions), with random batch-norm statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")

import torch.nn.functional as F
from torch import nn

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, imported_through, ops_of


def _check(module: nn.Module, args: tuple[Any, ...], exporter: str) -> og.Graph:
    module = module.eval()
    with torch.no_grad():
        expected = module(*args)
    graph, weights = imported_through(exporter, module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, dict(weights), inputs, [expected.numpy()])
    return graph


class HardTanhs(nn.Module):
    def forward(self, x: Any) -> Any:
        return F.relu6(x * 4) + F.hardtanh(x) + nn.Hardtanh(-0.5, 2.0)(x * 3)


@pytest.mark.parametrize("exporter", ["torch", "onnx"])
def test_hardtanh_and_relu6_are_clips_matching_pytorch(exporter: str) -> None:
    # values on both sides of every bound (±1, -0.5, 2, 0, 6)
    x = torch.linspace(-3.0, 3.0, 97).reshape(1, 97)
    graph = _check(HardTanhs(), (x,), exporter)
    assert ops_of(graph).count("clip") == 3


def test_hardtanh_of_integers_is_refused_by_name() -> None:
    class IntegerHardtanh(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.ops.aten.hardtanh.default(x, 0, 6)

    with pytest.raises(OptGraphError, match="hardtanh.*expected a float operand"):
        from_torch(IntegerHardtanh(), (torch.arange(8),))


def _random_batch_norms(module: nn.Module) -> nn.Module:
    from tools.diffusers_sweep import random_batch_norms

    return random_batch_norms(module)


@pytest.mark.parametrize("exporter", ["torch", "onnx"])
def test_transformers_mobilenet_v2_matches(exporter: str) -> None:
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    torch.manual_seed(0)
    config = transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, num_labels=10)
    model = transformers.MobileNetV2ForImageClassification(config)

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, image: Any) -> Any:
            return self.model(image).logits

    graph = _check(_random_batch_norms(Logits()), (torch.randn(1, 3, 32, 32),), exporter)
    ops = ops_of(graph)
    assert ops.count("clip") >= 10 and "conv2d" in ops


@pytest.mark.parametrize("exporter", ["torch", "onnx"])
def test_mobilenet_v3_layout_matches(exporter: str) -> None:
    from tools.diffusers_sweep import mobilenet_v3

    torch.manual_seed(0)
    module = _random_batch_norms(mobilenet_v3())
    graph = _check(module, (torch.randn(1, 3, 32, 32),), exporter)
    assert np.isin(["conv2d", "clip"], ops_of(graph)).all()


@pytest.mark.parametrize("pads", [[0, 0, 1, 1], [2, 1, 0, 1], [1, 1, 1, 1]])
def test_onnx_conv_with_pads_differing_before_and_after_matches_the_evaluator(
    pads: list[int],
) -> None:
    pytest.importorskip("onnx", reason="needs onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=pads, strides=[2, 1])
    graph = helper.make_graph(
        [conv],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    imported, weights = og.from_onnx(model)
    assert_matches(imported, dict(weights), {"x": x}, [expected])
    assert ("pad" in ops_of(imported)) == (pads[:2] != pads[2:])


@pytest.mark.parametrize("net", ["mobilenet_v2", "mobilenet_v3"])
def test_mobile_nets_lowered_for_cuda_match_the_reference_in_the_emulator(net: str) -> None:
    """What `og.compile(target="cuda")` runs: the default pipeline, the CUDA lowering, every
    kernel (depthwise convolutions, pads, clips) in the CPU emulator, against the reference."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
    from optgraph.reference.interpreter import nmse, run_reference
    from tests.support import cuda_emulator
    from tools import diffusers_sweep

    pytest.importorskip("transformers", reason="needs transformers")
    if not cuda_emulator.available():
        pytest.skip("the CUDA emulator needs g++")
    make, example = diffusers_sweep.models()[net]
    torch.manual_seed(0)
    module = _random_batch_norms(make()).eval()
    args = example()
    graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    want = run_reference(graph, dict(inputs), dict(weights))
    got = cuda_emulator.run_plan(lower_cuda(planned), dict(inputs), dict(weights), graph=planned)
    for out in graph.output_names():
        error = nmse(np.asarray(got[out], np.float64), np.asarray(want[out], np.float64))
        assert error <= 1e-10, f"{net} {out}: nmse {error:.3g}"
