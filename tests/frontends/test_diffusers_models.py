"""diffusers' own models through torch.export and torch.onnx.export, against PyTorch, then compiled for CUDA with every
kernel in the CPU emulator against the reference (issue #34, part 2).

Small random-weight configs of the four model kinds diffusion pipelines run: the SD-1.5-style
`UNet2DConditionModel` (cross-attention down/up blocks, group norms, nearest upsampling, the
sinusoidal timestep embedding), `AutoencoderKL`'s decoder, `SD3Transformer2DModel` (joint
attention, patch embedding) and `FluxTransformer2DModel` (double and single stream blocks, a
rope over image and text ids computed in float64). Flux's ids are a function of the image
size, so a compiled step takes them as constants (module buffers): its float64 rope then folds
at import and no float64 reaches the IR; given as run-time inputs, the import refuses them with a
located error naming the float64 arithmetic (tested).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
diffusers = pytest.importorskip("diffusers", reason="the diffusion model tests need diffusers")

from torch import nn

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.numerics import assert_matches
from tests.support import cuda_emulator


class Unet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.unet = diffusers.UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            layers_per_block=1,
            block_out_channels=(32, 64),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=8,
        )

    def forward(self, x: Any, t: Any, text: Any) -> Any:
        return self.unet(x, t, encoder_hidden_states=text, return_dict=False)[0]


class VaeDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vae = diffusers.AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            block_out_channels=(32, 64),
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=8,
            sample_size=16,
        )

    def forward(self, z: Any) -> Any:
        return self.vae.decode(z, return_dict=False)[0]


class Sd3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = diffusers.SD3Transformer2DModel(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=4,
            joint_attention_dim=32,
            caption_projection_dim=32,
            pooled_projection_dim=16,
            out_channels=4,
            pos_embed_max_size=16,
        )

    def forward(self, x: Any, text: Any, pooled: Any, t: Any) -> Any:
        return self.transformer(
            hidden_states=x,
            encoder_hidden_states=text,
            pooled_projections=pooled,
            timestep=t,
            return_dict=False,
        )[0]


def _flux_ids(height: int, width: int, text: int) -> tuple[Any, Any]:
    """Flux's image ids (0, row, column) for a height x width latent and its text ids (zeros)."""
    image = torch.zeros(height * width, 3)
    image[:, 1] = torch.arange(height * width) // width
    image[:, 2] = torch.arange(height * width) % width
    return image, torch.zeros(text, 3)


def _flux_model() -> Any:
    return diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=16,
        axes_dims_rope=(2, 2, 4),
    )


class Flux(nn.Module):
    """A Flux step for one image size: the ids are buffers, constants of the compiled step."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = _flux_model()
        image, text = _flux_ids(4, 4, 5)
        self.register_buffer("image_ids", image)
        self.register_buffer("text_ids", text)

    def forward(self, x: Any, text: Any, pooled: Any, t: Any) -> Any:
        return self.transformer(
            hidden_states=x,
            encoder_hidden_states=text,
            pooled_projections=pooled,
            timestep=t,
            img_ids=self.image_ids,
            txt_ids=self.text_ids,
            return_dict=False,
        )[0]


def _unet_args() -> tuple[Any, ...]:
    return torch.randn(1, 4, 8, 8), torch.tensor([10]), torch.randn(1, 5, 32)


def _transformer_args(shape: tuple[int, ...]) -> tuple[Any, ...]:
    return torch.randn(1, *shape), torch.randn(1, 5, 32), torch.randn(1, 16), torch.tensor([3.0])


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[Any, ...]], set[str]]] = {
    # name: (module, example inputs, ops the import must contain)
    "unet": (Unet, _unet_args, {"conv2d", "attention", "resize", "layer_norm"}),
    "vae_decoder": (VaeDecoder, lambda: (torch.randn(1, 4, 8, 8),), {"conv2d", "resize"}),
    "sd3": (Sd3, lambda: _transformer_args((4, 8, 8)), {"conv2d", "attention"}),
    "flux": (Flux, lambda: _transformer_args((16, 16)), {"attention", "rms_norm"}),
}


def _imported(
    name: str, exporter: str = "torch"
) -> tuple[Graph, dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    make, example, _ = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = example()
    with torch.no_grad():
        expected = module(*args)
    if exporter == "onnx":
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            program = torch.onnx.export(module, args, dynamo=True)
        graph, weights = og.from_onnx(program.model_proto)
    else:
        graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    return graph, dict(weights), inputs, expected.numpy()


@pytest.mark.parametrize("exporter", ["torch", "onnx"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_diffusers_models_import_and_match_pytorch(name: str, exporter: str) -> None:
    if exporter == "onnx":
        pytest.importorskip("onnx", reason="the ONNX import needs onnx")
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    graph, weights, inputs, expected = _imported(name, exporter)
    ops = {n.op for n in graph.nodes}
    assert MODELS[name][2] <= ops, f"{name}: missing {MODELS[name][2] - ops}"
    assert all(t.dtype != "f64" for t in graph.value_types().values())
    assert_matches(graph, weights, inputs, [expected])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_diffusers_models_lowered_for_cuda_match_the_reference_in_the_emulator(name: str) -> None:
    """What `og.compile(target="cuda")` runs on the GPU machine: the default pipeline, the CUDA
    lowering, every kernel in the CPU emulator, against the reference interpreter in f32."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline

    if not cuda_emulator.available():
        pytest.skip("the CUDA emulator needs g++")
    graph, weights, inputs, _ = _imported(name)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    want = run_reference(graph, dict(inputs), weights)
    got = cuda_emulator.run_plan(lower_cuda(planned), dict(inputs), weights, graph=planned)
    for out in graph.output_names():
        error = nmse(np.asarray(got[out], np.float64), np.asarray(want[out], np.float64))
        assert error <= 1e-10, f"{name} {out}: nmse {error:.3g}"


def test_flux_ids_as_run_time_inputs_are_refused_by_name() -> None:
    """Flux's float64 rope over ids given at run time cannot fold: one located error."""

    class FluxRunTimeIds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = _flux_model()

        def forward(self, x: Any, text: Any, pooled: Any, t: Any, image: Any, ids: Any) -> Any:
            return self.transformer(
                hidden_states=x,
                encoder_hidden_states=text,
                pooled_projections=pooled,
                timestep=t,
                img_ids=image,
                txt_ids=ids,
                return_dict=False,
            )[0]

    torch.manual_seed(0)
    args = (*_transformer_args((16, 16)), *_flux_ids(4, 4, 5))
    with pytest.raises(OptGraphError, match="float64") as caught:
        from_torch(FluxRunTimeIds().eval(), args)
    assert "transformer_flux.py:" in str(caught.value)
