"""Equal small constants of an import are read under one name (`Draft.finish`), so `cse` merges
what each layer computes from its own copy (a static-cache step's `cache_position + arange(1)`
a layer); larger ones keep their names."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")

import optgraph as og
from optgraph.frontends.draft import SHARED_CONSTANT
from optgraph.passes.manager import run_pipeline
from tests.frontends.numerics import assert_matches


class PerLayerPositions(torch.nn.Module):
    """Each 'layer' folds its own arange (a constant of its own name) and adds it."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        a, b, c = (pos + torch.arange(self.size) for _ in range(3))
        return a * b * c


@pytest.mark.parametrize("size", [1, SHARED_CONSTANT + 1])
def test_equal_small_constants_share_a_name_and_cse_merges_their_adds(size: int) -> None:
    module = PerLayerPositions(size)
    pos = torch.tensor([5])
    graph, weights = og.from_torch(module, (pos,))
    with torch.no_grad():
        expected = [module(pos).numpy()]
    assert_matches(graph, weights, {"pos": pos.numpy()}, expected)
    constants = {o for n in graph.nodes for o in n.operands if o in weights}
    assert len(constants) == (1 if size == 1 else 3)
    adds = [n for n in run_pipeline(graph, "verify,dce,cse").nodes if n.op == "add"]
    assert len(adds) == (1 if size == 1 else 3)
    assert all(np.array_equal(weights[c], np.arange(size)) for c in constants)
