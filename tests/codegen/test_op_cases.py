"""Data checks of the op cases (tests/support/op_cases.py) shared by the GPU op tests and their
CPU emulation: they need neither a GPU nor a compiler, so they run everywhere."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.ir.ops import OPS, op_names
from tests.support.op_cases import CASES, all_cases_graph_text, case_graph_text, params


def test_every_op_has_a_case() -> None:
    # Collectives are no kernels (NCCL runs them); the several-device tests cover them.
    kernels = {op for op in op_names() if OPS[op].category != "collective"}
    assert kernels <= set(CASES), sorted(kernels - set(CASES))


@pytest.mark.parametrize(("op", "dtype"), params())
def test_every_case_verifies_and_uses_its_op(op: str, dtype: str) -> None:
    graph = og.parse(case_graph_text(op, dtype))
    og.verify(graph)
    assert any(n.op == op for n in graph.nodes), f"the {op} case ({dtype}) has no {op} node"


@pytest.mark.parametrize("dtype", sorted({t for _, t in params()}))
def test_all_cases_graph_holds_each_case_once(dtype: str) -> None:
    """The one-graph form the emulator builds has exactly the nodes of the separate cases."""
    together = og.parse(all_cases_graph_text(dtype))
    alone = [og.parse(case_graph_text(op, dtype)) for op, t in params() if t == dtype]
    assert sorted(n.op for n in together.nodes) == sorted(n.op for g in alone for n in g.nodes)
    assert len(together.output_names()) == sum(len(g.output_names()) for g in alone)
