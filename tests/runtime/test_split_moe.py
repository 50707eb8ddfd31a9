"""The MoE decode step of benchmarks/bench_split.py on the CPU: split by split-backends, it runs
in the planned executor (random stream interleavings, the host a stream like the others)
bit-identical to the reference; every CPU node's host function computes its node's reference
bits (the experts' products read the picked rows in place in the pinned tables; their gathers do
nothing)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from benchmarks.harness.moe_decode import MoeSizes, generate_moe_decode
from benchmarks.harness.split_plan import SPLIT
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.steps import HostStep
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph
from optgraph.ir.layout import alias_roots
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import (
    evaluate_node,
    random_inputs,
    random_weights,
    run_reference,
)
from optgraph.runtime.cuda.host_gathers import gathers_read_in_place
from optgraph.runtime.cuda.offload import HostErrors, HostFunction, HostMemory, HostWeights
from tests.support.offload_models import run_planned

SIZES = MoeSizes(
    layers=2, hidden=32, heads=4, kv_heads=2, experts=6, expert_ffn=16, shared_ffn=24, vocab=64,
    cache_len=8,
)  # fmt: skip


def _moe() -> tuple[Graph, Graph]:
    source = og.parse(generate_moe_decode(SIZES))
    return source, run_pipeline(source, SPLIT)


def _inputs(source: Graph) -> dict[str, np.ndarray]:
    inputs = random_inputs(source, seed=1)
    inputs["pos"][:] = 3
    inputs["kv_len"][:] = 4
    return inputs


def test_split_moe_matches_the_reference_in_any_interleaving() -> None:
    source, split = _moe()
    assert any(n.ann.backend == "cpu" for n in split.nodes)
    inputs, weights = _inputs(source), random_weights(source, seed=2)
    expected = run_reference(source, inputs, weights)
    for seed in (None, 0, 1, 2):
        got = run_planned(split, inputs, weights, seed)
        for name, value in expected.items():
            assert np.array_equal(got[name], value), (seed, name)


Fills = list[tuple[np.ndarray, np.ndarray]]


def _host_functions(ids: np.ndarray | None = None) -> list[tuple[HostFunction, Fills, np.ndarray]]:
    """Every CPU node's host function, its operands filled from the reference, and the
    reference result (`ids`: the routers' picks replaced)."""
    source, split = _moe()
    plan = lower_cuda(split)
    inputs, weights = _inputs(source), random_weights(source, seed=2)
    host_weights = HostWeights(plan, bytearray)
    for name in host_weights.offsets:
        host_weights.set(name, weights[name])
    memory = HostMemory(plan, host_weights, bytearray)
    staged = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for n, a in inputs.items()}
    values = dict(inputs) | dict(weights)
    for node in split.nodes:
        if not node.is_event:
            args = [values[o] for o in node.operands]
            if ids is not None and node.op == "get_rows" and args[1].shape == ids.shape:
                args[1] = ids
            try:
                values[node.name] = evaluate_node(node, args)
            except OptGraphError:
                values[node.name] = np.zeros(node.type.shape, np.float32)  # type: ignore[union-attr]
    out = []
    roots = alias_roots(split)
    unmaterialized = set(gathers_read_in_place(split))  # their buffers hold their ids
    for step in (s for s in plan.steps if isinstance(s, HostStep)):
        fn = HostFunction(split, step, plan, memory, staged, HostErrors())
        fills = [
            (view, ids if ids is not None and view.shape == ids.shape else values[operand])
            for operand, view in zip(fn.node.operands, fn.args)
            if operand not in weights
            and operand not in inputs
            and roots.get(operand, (operand, 0))[0] not in unmaterialized
        ]
        out.append((fn, fills, values[fn.node.name]))
    return out


def _call(fn: HostFunction, fills: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write the operands (the pinned arena is shared: planned offsets are reused), then run."""
    for view, value in fills:
        view[...] = value
    fn._call(None)


def test_host_functions_compute_their_nodes_bits() -> None:
    functions = _host_functions()
    assert {fn.node.op for fn, _, _ in functions} >= {"get_rows", "matmul"}
    # Every expert gather feeds only products: none is materialized, the products read the rows
    # in place in the pinned tables (one in a fused body with silu and mul).
    assert all(fn.skip for fn, _, _ in functions if fn.node.op == "get_rows")
    assert {fn.node.op for fn, _, _ in functions if fn.rows} == {"matmul", "fused"}
    for fn, fills, expected in functions:
        _call(fn, fills)
        fn.errors.raise_first()
        if not fn.skip:
            assert fn.out.tobytes() == expected.tobytes(), fn.node.name


def test_a_gather_out_of_range_reports_the_reference_error() -> None:
    functions = _host_functions(ids=np.array([0, SIZES.experts], np.int64))
    for fn, fills, _ in functions:  # up to the first product reading gathered rows
        _call(fn, fills)
        if fn.rows:
            break
    with pytest.raises(OptGraphError, match="out of range"):
        fn.errors.raise_first()


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_a_cpu_product_rounds_as_the_reference(dtype: str) -> None:
    """f16/bf16 products are widened to f32 and rounded once, as the reference does; only f32
    products are written straight into their result."""
    text = f"""graph g {{
  input %x : {dtype}[2,64]
  weight %w : {dtype}[64,64] host
  %y = matmul(%x, %w) : {dtype}[2,64]
  %z = tanh(%y) : {dtype}[2,64]
  output %z
}}
"""
    source = og.parse(text)
    split = run_pipeline(source, "split-backends,insert-sync,analyze-lifetimes,plan-memory")
    plan = lower_cuda(split)
    inputs, weights = random_inputs(source, seed=5), random_weights(source, seed=6)
    host_weights = HostWeights(plan, bytearray)
    host_weights.set("w", weights["w"])
    memory = HostMemory(plan, host_weights, bytearray)
    staged = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for n, a in inputs.items()}
    (step,) = [
        s for s in plan.steps if isinstance(s, HostStep) and split.nodes[s.index].op == "matmul"
    ]
    fn = HostFunction(split, step, plan, memory, staged, HostErrors())
    fn._call(None)
    fn.errors.raise_first()
    want = evaluate_node(fn.node, [inputs["x"], weights["w"]])
    assert fn.out.tobytes() == want.tobytes()
