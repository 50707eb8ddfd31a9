"""torch's scaled_dot_product_attention with one key/value head for several query heads (Falcon's
multi-query attention: the key broadcasts over the heads, no `enable_gqa`) imports as the IR's
grouped `attention` and matches PyTorch; two key heads for four query heads without `enable_gqa`
(which PyTorch cannot broadcast either) are still refused."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.reference.interpreter import run_reference


class Attention(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_one_kv_head_broadcasts_as_grouped_attention() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 5, 8)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, 5, 8)).astype(np.float32) for _ in range(2))
    args = tuple(torch.from_numpy(a) for a in (q, k, v))
    graph, weights = og.from_torch(Attention(), args)
    assert [n.op for n in graph.nodes] == ["attention"]
    got = run_reference(graph, {"q": q, "k": k, "v": v}, weights)[graph.output_names()[0]]
    want = Attention()(*args).numpy()
    assert np.abs(got - want).max() < 1e-5


def test_two_kv_heads_for_four_without_enable_gqa_are_refused() -> None:
    args = (torch.zeros(1, 4, 5, 8), torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8))
    with pytest.raises(OptGraphError):
        og.from_torch(Attention(), args)
