"""SiLU written out, `x · sigmoid(x)` (the ONNX exporter's `F.silu`), raised into `silu`
through both importers and matching PyTorch; a sigmoid gate of another value stays as it is."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")

import torch.nn.functional as F
from torch import nn

from tests.frontends.numerics import assert_matches, imported_through, ops_of


class Block(nn.Module):
    """A diffusion block's shape: group norm, SiLU, convolution; a hand-written SiLU both ways
    round; and a gate (sigmoid of another value) that is not SiLU."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(2, 8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.gate = nn.Conv2d(8, 8, 1)

    def forward(self, x: Any) -> Any:
        h = self.conv(F.silu(self.norm(x)))
        h = h * torch.sigmoid(h) + torch.sigmoid(x) * x
        return h * torch.sigmoid(self.gate(x))


@pytest.mark.parametrize("exporter", ["torch", "onnx"])
def test_written_out_silu_is_raised_and_a_gate_is_not(exporter: str) -> None:
    torch.manual_seed(0)
    module, x = Block().eval(), torch.randn(1, 8, 6, 6)
    with torch.no_grad():
        expected = module(x).numpy()
    graph, weights = imported_through(exporter, module, (x,))
    ops = ops_of(graph)
    assert ops.count("silu") == 3  # F.silu, h·σ(h), σ(x)·x
    assert ops.count("sigmoid") == 1  # the gate
    inputs = {graph.inputs[0].name: x.numpy()}
    assert_matches(graph, dict(weights), inputs, [expected])
