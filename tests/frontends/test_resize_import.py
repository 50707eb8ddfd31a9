"""Upsampling (the `resize` op) and the hard activations through both importers: F.interpolate's
nearest, nearest-exact and bilinear modes and ONNX Resize against PyTorch and onnx's evaluator;
HardSigmoid / HardSwish; what is not supported refused by name; and diffusion-shaped models
built by hand (diffusers' own models: test_diffusers_models.py) with its VAE decoder's and
UNet's structure (convolutions, group norms, SiLU, attention over the pixels, cross-attention,
nearest upsampling, strided downsampling, a sinusoidal timestep embedding), through
torch.export and torch.onnx.export, against PyTorch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
onnx = pytest.importorskip("onnx", reason="the import tests need onnx")

import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from torch import nn

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.frontends.torch_export import from_torch
from optgraph.reference.interpreter import run_reference
from tests.frontends.numerics import assert_matches, imported_through, ops_of


def _check_torch(module: nn.Module, args: tuple[Any, ...]) -> og.Graph:
    with torch.no_grad():
        expected = module(*args)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [e.numpy() for e in expected])
    return graph


class Interpolations(nn.Module):
    def forward(self, x: Any) -> Any:
        return (
            F.interpolate(x, scale_factor=2.0, mode="nearest"),
            F.interpolate(x, size=(7, 11), mode="nearest"),
            F.interpolate(x, size=(3, 2), mode="nearest"),
            F.interpolate(x, scale_factor=1.5, mode="nearest-exact"),
            F.interpolate(x, size=(9, 5), mode="nearest-exact"),
            F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False),
            F.interpolate(x, scale_factor=1.7, mode="bilinear"),
            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
            F.interpolate(x, size=(1, 1), mode="bilinear"),
            F.hardswish(x) + F.hardsigmoid(x * 2),
        )


def test_interpolate_and_hard_activations_match_pytorch() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 6) * 4  # wide enough to reach both ends of the hard activations
    graph = _check_torch(Interpolations(), (x,))
    resizes = [n for n in graph.nodes if n.op == "resize"]
    assert len(resizes) == 9
    assert {str(n.attrs.get("mode", "nearest")) for n in resizes} == {"nearest", "linear"}
    assert any("scale_h" in n.attrs for n in resizes)  # 1.7: the factor, not the sizes' ratio
    assert ops_of(graph).count("clip") == 2


def _resize_model(
    shape: tuple[int, ...], *, scales: list[float] | None = None, sizes: list[int] | None = None,
    opset: int = 19, **attrs: Any,
) -> Any:  # fmt: skip
    inits, inputs = [], ["x", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        inputs.append("scales")
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        inputs += ["", "sizes"] if scales is None else ["sizes"]
    node = helper.make_node("Resize", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


RESIZES = [
    ({"scales": [1, 1, 2, 2]}, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                "nearest_mode": "floor"}),  # the exporter's F.interpolate
    ({"sizes": [2, 3, 7, 11]}, {"mode": "nearest"}),  # half_pixel, round_prefer_floor
    ({"sizes": [2, 3, 7, 11]}, {"mode": "nearest", "nearest_mode": "ceil"}),
    ({"sizes": [2, 3, 3, 4]}, {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
                               "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ({"scales": [1, 1, 1.5, 0.5]}, {"mode": "linear"}),
    ({"sizes": [2, 3, 9, 13]}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ({"sizes": [2, 3, 1, 5]}, {"mode": "linear",
                               "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ({"scales": [1, 1, 3, 3]}, {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
]  # fmt: skip


@pytest.mark.parametrize(("given", "attrs"), RESIZES)
def test_onnx_resize_matches_the_reference_evaluator(given: Any, attrs: Any) -> None:
    model = _resize_model((2, 3, 4, 6), **given, **attrs)
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 6)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    graph, weights = og.from_onnx(model)
    assert ops_of(graph) == ["resize"]
    assert_matches(graph, weights, {"x": x}, [want])


@pytest.mark.parametrize(
    ("given", "attrs", "message"),
    [
        ({"scales": [1, 1, 2, 2]}, {"mode": "cubic"}, "mode 'cubic' is not supported"),
        ({"scales": [1, 1, 2, 2]}, {"coordinate_transformation_mode": "tf_crop_and_resize"},
         "'tf_crop_and_resize' is not supported"),
        ({"scales": [1, 2, 2, 2]}, {}, "only the last two axes may be resized"),
        ({"sizes": [2, 3, 2, 3]}, {"mode": "linear", "antialias": 1},
         "antialiased downsampling is not supported"),
        ({"sizes": [2, 3, 8, 8]}, {"keep_aspect_ratio_policy": "not_larger"},
         "keep_aspect_ratio_policy"),
    ],
)  # fmt: skip
def test_onnx_resize_refusals_name_what_is_not_supported(
    given: Any, attrs: Any, message: str
) -> None:
    with pytest.raises(OptGraphError, match=message):
        og.from_onnx(_resize_model((2, 3, 4, 6), **given, **attrs))
    old = _resize_model((2, 3, 4, 6), scales=[1, 1, 2, 2], opset=10)
    del old.graph.node[0].input[1]  # opset 10's Resize reads (X, scales): no roi
    with pytest.raises(OptGraphError, match="Resize before opset 11"):
        og.from_onnx(old)


def test_onnx_hard_activations_match_the_reference_evaluator() -> None:
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["s"], alpha=0.3, beta=0.4),
        helper.make_node("HardSigmoid", ["x"], ["d"]),
        helper.make_node("HardSwish", ["x"], ["w"]),
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "sdw"]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])], outs
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-6, 6, 64, dtype=np.float32).reshape(4, 16)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    g, weights = og.from_onnx(model)
    assert_matches(g, weights, {"x": x}, want)
    assert "clip" in ops_of(g)


# -- diffusion-shaped models -------------------------------------------------------------------


class ResBlock(nn.Module):
    """diffusers' ResnetBlock2D: group norm, SiLU, conv, twice; a 1x1 skip when widths differ;
    with `temb`, a projection of the timestep embedding added in between (the UNet's)."""

    def __init__(self, c_in: int, c_out: int, temb: int = 0) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(4, c_in), nn.GroupNorm(4, c_out)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        self.temb = nn.Linear(temb, c_out) if temb else None

    def forward(self, x: Any, temb: Any = None) -> Any:
        h = self.conv1(F.silu(self.norm1(x)))
        if self.temb is not None:
            h = h + self.temb(F.silu(temb))[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class PixelAttention(nn.Module):
    """diffusers' Attention over the pixels of `[B,C,H,W]` (the VAE's mid block), or with
    `context` cross-attention to text states (the UNet's transformer blocks)."""

    def __init__(self, c: int, heads: int, context: int = 0) -> None:
        super().__init__()
        self.heads, self.norm = heads, nn.GroupNorm(4, c)
        self.q, self.out = nn.Linear(c, c), nn.Linear(c, c)
        self.k, self.v = nn.Linear(context or c, c), nn.Linear(context or c, c)

    def forward(self, x: Any, context: Any = None) -> Any:
        b, c, h, w = x.shape
        y = self.norm(x).view(b, c, h * w).transpose(1, 2)
        source = y if context is None else context

        def split(t: Any) -> Any:
            return t.view(b, -1, self.heads, c // self.heads).transpose(1, 2)

        o = F.scaled_dot_product_attention(
            split(self.q(y)), split(self.k(source)), split(self.v(source))
        )
        o = self.out(o.transpose(1, 2).reshape(b, h * w, c))
        return x + o.transpose(1, 2).reshape(b, c, h, w)


class Upsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: Any) -> Any:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class DecoderLike(nn.Module):
    """AutoencoderKL's decoder, small: latents [1,4,8,8] -> image [1,3,32,32]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(4, 16, 3, padding=1)
        self.mid = nn.ModuleList([ResBlock(16, 16), PixelAttention(16, 1), ResBlock(16, 16)])
        self.up = nn.ModuleList([ResBlock(16, 16), Upsample(16), ResBlock(16, 8), Upsample(8)])
        self.norm_out, self.conv_out = nn.GroupNorm(4, 8), nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, z: Any) -> Any:
        h = self.conv_in(z)
        for block in [*self.mid, *self.up]:
            h = block(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class UNetLike(nn.Module):
    """UNet2DConditionModel's structure, small: a timestep's sinusoidal embedding, a strided
    downsample, cross-attention to text states, nearest upsampling, skip concatenation."""

    def __init__(self) -> None:
        super().__init__()
        self.time = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 32))
        self.conv_in = nn.Conv2d(4, 16, 3, padding=1)
        self.down = ResBlock(16, 16, 32)
        self.downsample = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.mid = ResBlock(16, 16, 32)
        self.cross = PixelAttention(16, 2, context=24)
        self.upsample = Upsample(16)
        self.up = ResBlock(32, 16, 32)
        self.norm_out, self.conv_out = nn.GroupNorm(4, 16), nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, sample: Any, timestep: Any, text: Any) -> Any:
        half = 8
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        angles = timestep[:, None].float() * freqs[None]
        temb = self.time(torch.cat([angles.sin(), angles.cos()], dim=-1))
        h = self.conv_in(sample)
        skip = self.down(h, temb)
        h = self.cross(self.mid(self.downsample(skip), temb), text)
        h = self.up(torch.cat([self.upsample(h), skip], dim=1), temb)
        return self.conv_out(F.silu(self.norm_out(h)))


def _diffusion(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    if name == "vae_decoder":
        return DecoderLike().eval(), (torch.randn(1, 4, 8, 8),)
    args = (torch.randn(1, 4, 8, 8), torch.tensor([500.0]), torch.randn(1, 5, 24))
    return UNetLike().eval(), args


@pytest.mark.parametrize("name", ["vae_decoder", "unet"])
@pytest.mark.parametrize("exporter", ["torch.export", "onnx"])
def test_diffusion_shaped_models_import_and_match_pytorch(name: str, exporter: str) -> None:
    module, args = _diffusion(name)
    with torch.no_grad():
        want = module(*args).numpy()
    graph, weights = imported_through(exporter, module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [want])
    ops = ops_of(graph)
    assert ops.count("resize") == (2 if name == "vae_decoder" else 1)
    assert ops.count("attention") == 1 and "conv2d" in ops
    assert not any(w.type.dtype == "f64" for w in graph.weights)


def test_the_reference_resize_equals_pytorch_bit_for_bit_in_nearest_modes() -> None:
    """Nearest rows are exact: float32 coordinates as PyTorch computes them, over many sizes."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 1, 7, 5)).astype(np.float32)
    for out_h in range(1, 23):
        for mode, attrs in (
            ("nearest", {}),
            ("nearest-exact", {"coordinates": "half_pixel", "nearest": "round_prefer_ceil"}),
        ):
            want = F.interpolate(torch.from_numpy(x), size=(out_h, 3), mode=mode).numpy()
            graph = og.parse(
                "graph g {\n  input %x : f32[1,1,7,5]\n  %y = resize(%x) {"
                + "".join(f'{k} = "{v}", ' for k, v in attrs.items())
                + f"size = [{out_h}, 3]}} : f32[1,1,{out_h},3]\n  output %y\n}}\n"
            )
            assert np.array_equal(run_reference(graph, {"x": x}, {})["y"], want), (out_h, mode)
