"""The CUDA lowering of random graphs, on the CPU (issue 36, finding 10).

A lowering failure used to show only on the GPU machine (`tests/gpu/test_random_graphs_gpu.py`):
`fused: body value '%v1' is not available here` on a one-row product whose prologue holds a norm
and a node after the norm reading a value from before it (`maximum(rms_norm(h), h)`). The CPU
fuzzers never drew such a region: `random_dag_graphs` made no norms, no concats, and with
dimensions of at most 4 hardly ever a one-row product by a 16-byte multiple; and only the mixed
emulated test lowered its graphs at all. Here every flavour of the property tests' generators
(plain, mixed precision, with `rows=True`: decode-like rows, norms, skips, casts and concats, and
the layered graphs of the stream tests) goes through the pipelines of the GPU test and
`lower_for_cuda`, as `og.compile(target="cuda")` does; a short derandomized sample also runs the
generated kernels in the CPU emulator against the reference, within the GPU test's bounds
(`tests/support/gpu_support.py`). The pipeline fuzzer and the parallel-pass test lower their
graphs (rows among them) for CUDA too, by ranks where a graph spans devices.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.api.programs import plan_graph
from optgraph.codegen.kernels.scalars import needed_values
from optgraph.codegen.lower_cuda import lower_cuda, lower_for_cuda
from optgraph.ir.graph import Graph, Region
from optgraph.passes.manager import with_merged_launches
from optgraph.reference.interpreter import nmse
from tests.support import cuda_emulator
from tests.support.gpu_support import mixed_bound, reference
from tests.support.property_examples import examples
from tests.support.random_graphs import layered_graphs, narrow_ancestry, random_dag_graphs

PIPELINES = (
    "default",
    (
        "verify,dce,cse,fuse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
        "analyze-lifetimes,plan-memory"
    ),
)

# The graph, whole: the fused region of %v11 is a one-row product (%v10) whose prologue
# holds rms_norm %v5, and %v6 after the norm reads %v1 from before it.
CHAIN_SKIP = """graph g39_chain_skip {
  input %x0 : f32[1,16]
  weight %w1 : f32[16]
  weight %w2 : f32[16,16]
  weight %w3 : f32[16]
  weight %w4 : f32[16]
  %v1 = neg(%x0) : f32[1,16]
  %v2 = silu(%v1) : f32[1,16]
  %v3 = neg(%v2) : f32[1,16]
  %v4 = mul(%v2, %v3) : f32[1,16]
  %v5 = rms_norm(%v4, %w1) {eps = 1e-06} : f32[1,16]
  %v6 = maximum(%v5, %v1) : f32[1,16]
  %v7 = cast(%v6) {dtype = "f16"} : f16[1,16]
  %v8 = abs(%v7) : f16[1,16]
  %v9 = cast(%v8) {dtype = "f32"} : f32[1,16]
  %v10 = matmul(%v9, %w2) : f32[1,16]
  %v11 = maximum(%v10, %x0) : f32[1,16]
  %v12 = max(%v11) {axes = [1], keepdims = true} : f32[1,1]
  %v13 = sub(%v11, %v12) : f32[1,16]
  %v14 = neg(%v13) : f32[1,16]
  %v15 = add(%v11, %v14) : f32[1,16]
  %v16 = layer_norm(%v15, %w3, %w4) {eps = 1e-05} : f32[1,16]
  %v17 = slice(%v16) {axis = 1, end = 7, start = 0} : f32[1,7]
  %v18 = slice(%v16) {axis = 1, end = 16, start = 7} : f32[1,9]
  %v19 = silu(%v17) : f32[1,7]
  %v20 = concat(%v19, %v18) {axis = 1} : f32[1,16]
  %v21 = softmax(%v20) {axis = -1} : f32[1,16]
  output %v21, %v15
}
"""

# The smallest of the class, with layer_norm: %s after the norm reads %h (two nodes before it,
# through %g) and %x, a parameter.
LAYER_NORM_SKIP = """graph layer_norm_skip {
  input %x : f32[1,8]
  weight %g : f32[8]
  weight %b : f32[8]
  weight %w : f32[8,4]
  %h = exp(%x) : f32[1,8]
  %t = tanh(%h) : f32[1,8]
  %n = layer_norm(%t, %g, %b) : f32[1,8]
  %s = maximum(%n, %h) : f32[1,8]
  %u = sub(%s, %x) : f32[1,8]
  %y = matmul(%u, %w) : f32[1,4]
  output %y
}
"""


def _lower(graph: Graph, pipeline: str) -> Graph:
    """`graph` planned as `og.compile(graph, pipeline, target="cuda")` plans it, then lowered
    (a CodegenError fails the caller); the planned graph."""
    planned = plan_graph(graph, with_merged_launches(pipeline, True))
    lowered = lower_for_cuda(planned)
    assert set(planned.output_names()) <= set(lowered.main.plan.locations)
    return planned


def _assert_emulated_close(graph: Graph, pipeline: str) -> None:
    """The generated kernels of `graph` after `pipeline`, run in the CPU emulator, against the
    reference interpreter of `graph` within the GPU test's bounds (`mixed_bound`)."""
    inputs, weights, want = reference(graph)
    planned = _lower(graph, pipeline)
    used = {w.name: weights[w.name] for w in planned.weights}
    got = cuda_emulator.run_plan(lower_cuda(planned), inputs, used, planned)
    types, ancestry = graph.value_types(), narrow_ancestry(graph)
    for name, value in want.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        bound = mixed_bound(types[name].dtype, ancestry[name])
        err = nmse(np.asarray(got[name], np.float64), np.asarray(value, np.float64))
        assert err <= bound, f"%{name} ({types[name]}, {pipeline}): nmse {err:.3e} > {bound:g}"


def test_a_norm_prologue_read_around_its_norm_lowers() -> None:
    """Both graphs fuse into a one-row product whose prologue holds the norm and a node after
    it reading a value from before it; both lower under both pipelines."""
    for text in (CHAIN_SKIP, LAYER_NORM_SKIP):
        graph = og.parse(text)
        for pipeline in PIPELINES:
            planned = _lower(graph, pipeline)
            bodies = [n.body for n in planned.nodes if n.op == "fused" and n.body is not None]
            ops = [[b.op for b in body.nodes] for body in bodies]
            assert any("matmul" in o and ({"rms_norm", "layer_norm"} & set(o)) for o in ops), ops


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("text", [CHAIN_SKIP, LAYER_NORM_SKIP], ids=["chain_skip", "layer_norm"])
def test_a_norm_prologue_read_around_its_norm_matches_the_reference(text: str) -> None:
    _assert_emulated_close(og.parse(text), "default")


GENERATORS = {
    "plain": random_dag_graphs(max_nodes=14),
    "mixed": random_dag_graphs(max_nodes=14, mixed=True),
    "rows": random_dag_graphs(max_nodes=14, rows=True),
    "rows-mixed": random_dag_graphs(max_nodes=14, mixed=True, rows=True),
    "layered": layered_graphs(),
}


@pytest.mark.parametrize("kind", GENERATORS)
def test_random_graphs_lower_for_cuda(kind: str) -> None:
    """Every graph of every flavour of the generator lowers under both pipelines."""

    @settings(max_examples=examples(100 if kind.startswith("rows") else 40))
    @given(graph=GENERATORS[kind])
    @example(graph=og.parse(CHAIN_SKIP))
    @example(graph=og.parse(LAYER_NORM_SKIP))
    def lowers(graph: Graph) -> None:
        for pipeline in PIPELINES:
            _lower(graph, pipeline)

    lowers()


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@settings(max_examples=examples(8), derandomize=True, database=None)
@given(
    graph=st.booleans().flatmap(lambda m: random_dag_graphs(max_nodes=14, mixed=m, rows=True)),
    pipeline=st.sampled_from(PIPELINES),
)
def test_random_row_graphs_emulated_match_the_reference(graph: Graph, pipeline: str) -> None:
    _assert_emulated_close(graph, pipeline)


def _reads_around_its_norm(body: Region) -> bool:
    """A product region whose prologue holds a norm and, after it, a node reading a value
    computed in the region before the norm (finding 10's shape)."""
    nodes = list(body.nodes)
    norms = [k for k, n in enumerate(nodes) if n.op in ("rms_norm", "layer_norm")]
    if not norms or not any(n.op == "matmul" for n in nodes):
        return False
    before = needed_values(nodes[: norms[0]], nodes[norms[0]].operands[0]) - set(body.params)
    return any(o in before for n in nodes[norms[0] + 1 :] for o in n.operands)


def test_row_graphs_make_norm_prologues_read_around_their_norm() -> None:
    """The generator's `rows=True` graphs do make the region of finding 10, so the properties
    above reach it. About one graph in seven holds it (12-29 of 100 on the development
    machine, since a block's values are read by the block alone; 6-9 before, and a fixed draw
    of 100 once found none on CI); 150 generated graphs leave a chance of about 1e-10 of
    missing it were the draws independent, whatever example order the hypothesis version or
    profile gives."""
    found: list[str] = []

    @settings(max_examples=150, database=None, derandomize=True, phases=[Phase.generate])
    @given(graph=random_dag_graphs(max_nodes=14, rows=True))
    def collect(graph: Graph) -> None:
        for node in plan_graph(graph, "default").nodes:
            if node.op == "fused" and node.body is not None and _reads_around_its_norm(node.body):
                found.append(node.name)

    collect()
    assert found
