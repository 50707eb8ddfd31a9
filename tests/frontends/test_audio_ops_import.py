"""What audio models export (each refused before): conv1d (as a conv2d of height 1), group norm
and the 2-norm (wav2vec2's weight-normed positional convolution). Against PyTorch on the
reference, the compiled CPU program and the CUDA kernels in the emulator; then Whisper's encoder
and wav2vec2 from transformers configs with random weights against transformers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, ops_of
from tests.support import cuda_emulator


class AudioOps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1)
        self.grouped = torch.nn.Conv1d(6, 6, 5, padding=2, groups=3, bias=False)
        self.norm = torch.nn.GroupNorm(3, 6)
        self.plain = torch.nn.GroupNorm(2, 6, affine=False)

    def forward(self, x):  # type: ignore[no-untyped-def]
        y = self.grouped(self.conv(x))
        norms = torch.linalg.vector_norm(y, dim=(0, 2), keepdim=True), torch.linalg.vector_norm(y)
        return self.norm(y), self.plain(y), *norms


def test_conv1d_group_norm_and_the_2_norm_match_pytorch() -> None:
    torch.manual_seed(0)
    module = AudioOps().eval()
    for param in module.norm.parameters():  # non-trivial scale and shift
        torch.nn.init.uniform_(param, 0.5, 1.5)
    x = torch.randn(2, 4, 11)
    with torch.no_grad():
        expected = [t.numpy() for t in module(x)]
    graph, weights = from_torch(module, (x,))
    assert_matches(graph, weights, {"x": x.numpy()}, expected)
    ops = ops_of(graph)
    assert ops.count("conv2d") == 2 and ops.count("layer_norm") == 2 and "sqrt" in ops
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(graph, {"x": x.numpy()}, weights)
        for name, want in zip(graph.output_names(), expected):
            assert np.allclose(got[name], want, rtol=1e-4, atol=1e-5), name


class Dilated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 2, 3, dilation=2)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.conv(x)


def test_a_dilated_conv1d_is_refused_with_its_reason() -> None:
    with pytest.raises(og.OptGraphError, match="dilated convolutions are not supported"):
        from_torch(Dilated(), (torch.randn(1, 2, 9),))


@pytest.mark.parametrize("name", ["whisper_encoder", "wav2vec2"])
def test_audio_encoders_import_and_match_transformers(name: str) -> None:
    pytest.importorskip("transformers", reason="needs transformers")
    from tools import transformers_sweep

    module, args = transformers_sweep.wrapped(name)  # 16 mel bins × 64 frames; 400 samples
    with torch.no_grad():
        expected = module(*args).numpy()
    graph, weights = from_torch(module, args)
    assert_matches(graph, weights, {graph.inputs[0].name: args[0].numpy()}, [expected])
