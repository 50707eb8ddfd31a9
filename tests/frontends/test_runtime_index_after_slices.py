"""x[:, idx, :] with `idx` computed at run time imports as a gather along that axis (transformers'
`hidden_states[:, logits_to_keep, :]` when `logits_to_keep` is a tensor, as a bucketed prefill
passes the last real position); before, it was refused as "an index computed at run time"."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import optgraph as og
from optgraph.reference.interpreter import run_reference


class _LastRows(torch.nn.Module):
    def forward(self, h: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        return h[:, last, :] * 2.0


@pytest.mark.parametrize("picked", [[5], [0, 3, 7], [-1]])
def test_a_run_time_index_after_a_slice_is_a_gather(picked: list[int]) -> None:
    h = torch.randn(1, 8, 6)
    last = torch.tensor(picked, dtype=torch.int64)
    graph, weights = og.from_torch(_LastRows(), (h, last))
    assert any(n.op == "get_rows" for n in graph.nodes)
    names = [i.name for i in graph.inputs]
    got = run_reference(graph, dict(zip(names, (h.numpy(), last.numpy()))), weights)
    want = _LastRows()(h, last).numpy()
    (out,) = graph.output_names()
    np.testing.assert_allclose(got[out], want, rtol=1e-6)
