"""diffusers' own models (the small configs of tools/diffusers_sweep.py) through torch.export and
torch.onnx.export, against PyTorch, then compiled for CUDA with every kernel in the CPU emulator
against the reference (issue #34, part 2).

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

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
diffusers = pytest.importorskip("diffusers", reason="the diffusion model tests need diffusers")

from torch import nn

from optgraph.errors import OptGraphError
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.numerics import assert_matches, imported_through
from tests.support import cuda_emulator
from tools import diffusers_sweep


def _flux_ids(height: int, width: int, text: int) -> tuple[Any, Any]:
    """Flux's image ids (0, row, column) for a height x width latent and its text ids (zeros)."""
    image = torch.zeros(height * width, 3)
    image[:, 1] = torch.arange(height * width) // width
    image[:, 2] = torch.arange(height * width) % width
    return image, torch.zeros(text, 3)


# The sweep's small configs (tools/diffusers_sweep.py) and the ops each import must contain.
OPS = {
    "unet": {"conv2d", "attention", "resize", "layer_norm"},
    "vae_decoder": {"conv2d", "resize"},
    "sd3": {"conv2d", "attention"},
    "flux": {"attention", "rms_norm"},
}
MODELS = {name: diffusers_sweep.models()[name] for name in OPS}


def _imported(
    name: str, exporter: str = "torch"
) -> tuple[Graph, dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    make, example = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = example()
    with torch.no_grad():
        expected = module(*args)
    graph, weights = imported_through(exporter, module, args)
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
    assert OPS[name] <= ops, f"{name}: missing {OPS[name] - ops}"
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
            self.transformer = diffusers_sweep.flux_model(guidance=False)

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
    args = (*MODELS["flux"][1](), *_flux_ids(4, 4, 5))
    with pytest.raises(OptGraphError, match="float64") as caught:
        from_torch(FluxRunTimeIds().eval(), args)
    assert "transformer_flux.py:" in str(caught.value)
