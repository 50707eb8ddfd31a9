"""diffusers' own models on the GPU (issue #34, part 2): the small configs of
tools/diffusers_sweep.py (an SD-1.5-style UNet step, AutoencoderKL's decoder, SD3's and Flux's
transformers), imported through torch.export, compiled for cuda with the default pipeline, run
eagerly and replayed from the CUDA graph, against the reference interpreter (the f32 bound) and
against PyTorch (`tests/frontends/test_diffusers_models.py` checks the same on the CPU, with the
kernels in the emulator)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.gpu_support import BOUNDS, assert_close, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()
pytest.importorskip("torch", reason="the import tests need PyTorch")
pytest.importorskip("diffusers", reason="the diffusion model tests need diffusers")

import optgraph as og
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.test_diffusers_models import MODELS, _imported


@pytest.mark.parametrize("name", sorted(MODELS))
def test_diffusers_models_on_the_gpu_match_the_reference_and_pytorch(name: str) -> None:
    graph, weights, inputs, expected = _imported(name)
    program = og.compile(graph, target="cuda")
    first = program.run(inputs, weights)  # eager, then captured
    second = program.run(inputs, weights)  # a replay
    assert same_bits(first, second)
    assert_close(graph, first, run_reference(graph, dict(inputs), weights))
    (out,) = graph.output_names()
    error = nmse(first[out].astype(np.float64), expected.astype(np.float64))
    assert error <= BOUNDS["f32"], f"{name}: nmse against PyTorch {error:.3g}"
