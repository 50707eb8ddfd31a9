"""`codegen/decode/residual_adds.py`: which all_reduces of a rank are offered the residual add after
them, and the runtime skipping an add only where its collectives backend does it."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import optgraph as og
from optgraph.codegen.plan.steps import CollectiveStep, KernelStep
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.ir.graph import Graph, Output

ROOT = Path(__file__).resolve().parents[2]


def llama(layers: int = 2) -> Graph:
    sys.path.insert(0, str(ROOT / "examples"))
    from gen_llama import generate_llama

    return og.parse(generate_llama(layers=layers, hidden=128, heads=4, kv_heads=2, ffn=256,
                                   vocab=256, dtype="f16", mode="decode"))  # fmt: skip


def ranks_of(source: Graph) -> Any:
    return lower_ranks(og.compile(source, "tensor-parallel{ways=2},default", "cpu").graph)


def test_every_row_parallel_all_reduce_is_offered_its_residual_add() -> None:
    for program in ranks_of(llama()).ranks:
        plan, nodes = program.main.plan, {n.name: n for n in program.graph.nodes}
        offered = 0
        for i, step in enumerate(plan.steps):
            if not isinstance(step, CollectiveStep) or step.kind != "all_reduce":
                assert not isinstance(step, CollectiveStep) or step.then_add is None
                continue
            add = plan.steps[i + 1]
            assert isinstance(add, KernelStep) and nodes[add.node].op == "add"
            (addend,) = [o for o in nodes[add.node].operands if o != step.node]
            assert step.then_add == (plan.locations[addend], plan.locations[add.node])
            offered += 1
        assert offered == 4  # two layers: after o and after down
        assert sum(nodes[s.node].op == "add" for s in plan.steps if isinstance(s, KernelStep)) == 4


def test_a_sum_read_elsewhere_is_not_offered_its_add() -> None:
    source = llama(layers=1)
    read_twice = replace(source, outputs=(*source.outputs, Output("l0.attn_out")))
    ranks = ranks_of(read_twice)
    assert ranks.outputs["l0.attn_out"] == 0  # read from rank 0's result
    for rank, program in enumerate(ranks.ranks):
        steps = {s.node: s for s in program.main.plan.steps if isinstance(s, CollectiveStep)}
        # rank 0 must write the sum where the output is read: no add in its place; rank 1's
        # sum is read by its add only
        assert (steps["l0.attn_out"].then_add is None) == (rank == 0)
        assert steps["l0.mlp_out"].then_add is not None


class AddingCollectives:
    """A collectives backend that says it does every offered add (as the peer kernel does)."""

    def __init__(self) -> None:
        self.adds: list[tuple[str, tuple[int, int]]] = []

    def prepare(self, steps: list[CollectiveStep]) -> None:
        pass

    def adds_too(self, step: CollectiveStep, pointers: tuple[int, ...]) -> bool:
        return True

    def calls(self, step: CollectiveStep, at: Any) -> list[Any]:
        if step.then_add is not None:
            self.adds.append((step.node, at.add))
        return []

    def close(self) -> None:
        pass


@pytest.mark.parametrize("adds", [True, False])
def test_the_runtime_skips_an_add_only_where_the_backend_does_it(
    monkeypatch: pytest.MonkeyPatch, adds: bool
) -> None:
    from optgraph.reference.interpreter import random_inputs, random_weights
    from optgraph.runtime.cuda.collectives import RankProgram
    from tests.support.fake_cupy import fake_cupy

    source = llama(layers=1)
    ranks = ranks_of(source)
    program = ranks.ranks[0]
    backend = AddingCollectives()
    if not adds:
        backend.adds_too = lambda step, pointers: False  # type: ignore[method-assign]
    weights = random_weights(program.graph, seed=1)
    with fake_cupy(monkeypatch) as fake:
        runner = RankProgram(
            program, collectives=backend, weights=weights, relower=ranks.relowers[0]
        )
        runner.run(random_inputs(program.graph, seed=1))
        runner.synchronize()
        runner.close()
    add_kernels = {s.kernel for s in program.main.plan.steps
                   if isinstance(s, KernelStep) and s.kernel.startswith("og_add")}  # fmt: skip
    launched = [k for k in fake.launches if k in add_kernels]
    assert len(launched) == (0 if adds else 2)
    assert [n for n, _ in backend.adds] == ["l0.attn_out", "l0.mlp_out"]
    assert all((pointers != (0, 0)) == adds for _, pointers in backend.adds)
