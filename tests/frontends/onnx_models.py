"""Small ONNX models built with onnx.helper, random weights, static shapes."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[str], inits: list[onnx.TensorProto], name: str) -> onnx.ModelProto:  # fmt: skip
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    graph = helper.make_graph(nodes, name, inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    return model


def cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv-BN-Relu, MaxPool, Conv (grouped, strided), GlobalAveragePool, Flatten, Gemm, Softmax."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("conv1.weight", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("conv1.bias", rng.normal(0, 0.1, (8,))),
        _init("bn.scale", rng.uniform(0.5, 1.5, (8,))),
        _init("bn.bias", rng.normal(0, 0.1, (8,))),
        _init("bn.mean", rng.normal(0, 0.2, (8,))),
        _init("bn.var", rng.uniform(0.5, 2.0, (8,))),
        _init("conv2.weight", rng.normal(0, 0.3, (8, 4, 3, 3))),
        _init("fc.weight", rng.normal(0, 0.3, (10, 8))),
        _init("fc.bias", rng.normal(0, 0.1, (10,))),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"],
                         pads=[1, 1, 1, 1], name="/conv1/Conv"),
        helper.make_node("BatchNormalization",
                         ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"],
                         epsilon=1e-5, name="/bn/BatchNormalization"),
        helper.make_node("Relu", ["b1"], ["r1"], name="/relu/Relu"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.weight"], ["c2"], pads=[1, 1, 1, 1],
                         strides=[2, 2], group=2),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [2, 3, 16, 16])]
    return _model(nodes, inputs, ["probs"], inits, "cnn")


def transformer_mlp(seed: int = 0) -> onnx.ModelProto:
    """LayerNormalization, MatMul+Add, erf-GELU spelled out as exporters do, a decomposed RMS
    norm (Pow, ReduceMean, Add, Sqrt, Div, Mul), a shape-computed Reshape."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("ln.weight", rng.uniform(0.5, 1.5, (32,))),
        _init("ln.bias", rng.normal(0, 0.1, (32,))),
        _init("fc.weight", rng.normal(0, 0.2, (32, 64))),
        _init("fc.bias", rng.normal(0, 0.1, (64,))),
        _init("norm.weight", rng.uniform(0.5, 1.5, (64,))),
        numpy_helper.from_array(np.array([2.0], np.float32), "two"),
        numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["ln"],
                         axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "fc.weight"], ["mm"]),
        helper.make_node("Add", ["mm", "fc.bias"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["he"]),
        helper.make_node("Mul", ["he", "half"], ["gelu"]),
        helper.make_node("Pow", ["gelu", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "minus_one"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["gelu", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "norm.weight"], ["y"]),
        helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
        helper.make_node("Concat", ["shape", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["y", "flat_shape"], ["out"]),
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 32])]
    return _model(nodes, inputs, ["out"], inits, "mlp")
