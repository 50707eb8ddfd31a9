"""Every fused kernel on the GPU against the NumPy reference; examples fused and unfused agree.

Each fused node the `fuse` pass builds (on the fuse fixtures, a table of region shapes and dtypes,
random DAGs and the examples) is cut out into a graph of its own (its operands become inputs) and
compiled for CUDA, so a wrong kernel is named by the region it came from. Tolerance: normalized
mean squared error (`reference.nmse`) by result dtype, as ggml's backend tests do.

Needs CuPy and a GPU: marked `gpu`, skipped elsewhere.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import optgraph as og
from optgraph.ir.graph import NO_ANNOTATIONS, Graph, Input, Node, Output
from optgraph.passes.fuse import FusePass
from optgraph.passes.fuse_siblings import FuseSiblingsPass
from optgraph.reference.interpreter import (
    nmse,
    random_inputs,
    random_weights,
    run_reference,
)
from tests.support.op_cases import PRODUCT_PROLOGUES, SIBLINGS_DECODE
from tests.support.random_graphs import random_dag_graphs

cupy = pytest.importorskip("cupy")
try:
    _GPUS = cupy.cuda.runtime.getDeviceCount()
except cupy.cuda.runtime.CUDARuntimeError:  # no driver, no device
    _GPUS = 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_GPUS == 0, reason="needs a CUDA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "fuse").glob("*.ir")) + sorted(
    (ROOT / "tests" / "fixtures" / "fuse-siblings").glob("*.ir")
)
NMSE = {"f32": 1e-9, "f16": 1e-5, "bf16": 1e-4}

# Regions by shape and dtype that the fixtures do not cover: odd sizes, long rows, f16/bf16.
CASES: dict[str, str] = {
    # fuse-siblings: concat of q/k/v-like products (one with an epilogue), gate/up pairs, single
    # pass (f16, K = 512) and split-K (f32, K = 4096)
    "siblings_decode": SIBLINGS_DECODE,
    # one-row products with prologues: shared rms_norm recomputed per product, layer_norm with
    # split-K, SwiGLU's mul
    "product_prologues": PRODUCT_PROLOGUES,
    "unary_chain_odd": """graph g {
  input %x : f32[3,5,7]
  %a = abs(%x) : f32[3,5,7]
  %b = sqrt(%a) : f32[3,5,7]
  %c = log(%b) : f32[3,5,7]
  %d = gelu(%c) {approximate = "none"} : f32[3,5,7]
  %e = silu(%d) : f32[3,5,7]
  %f = neg(%e) : f32[3,5,7]
  %g = exp(%f) : f32[3,5,7]
  %h = rsqrt(%g) : f32[3,5,7]
  output %h
}""",
    "binary_broadcast_f16": """graph g {
  input %x : f16[2,1,33]
  input %y : f16[5,1]
  input %z : f16[33]
  %a = add(%x, %y) : f16[2,5,33]
  %b = mul(%a, %z) : f16[2,5,33]
  %c = maximum(%b, %x) : f16[2,5,33]
  %d = sub(%c, %y) : f16[2,5,33]
  %e = div(%d, %z) : f16[2,5,33]
  %f = tanh(%e) : f16[2,5,33]
  output %f
}""",
    "cast_bf16_chain": """graph g {
  input %x : f32[129]
  %a = cast(%x) {dtype = "bf16"} : bf16[129]
  %b = sigmoid(%a) : bf16[129]
  %c = scale(%b) {factor = 3.0} : bf16[129]
  %d = cast(%c) {dtype = "f32"} : f32[129]
  output %d
}""",
    "sum_mean_max": """graph g {
  input %x : f32[6,300]
  %e = exp(%x) : f32[6,300]
  %s = sum(%e) {axes = [1], keepdims = true} : f32[6,1]
  %l = log(%s) : f32[6,1]
  %m2 = mul(%x, %x) : f32[6,300]
  %mm = mean(%m2) {axes = [-1]} : f32[6]
  %r = sqrt(%mm) : f32[6]
  %n = neg(%x) : f32[6,300]
  %mx = max(%n) {axes = [1]} : f32[6]
  %t = tanh(%mx) : f32[6]
  output %l, %r, %t
}""",
    "reduce_two_trailing_axes": """graph g {
  input %x : f32[3,4,50]
  %a = relu(%x) : f32[3,4,50]
  %s = sum(%a) {axes = [1, 2]} : f32[3]
  %y = scale(%s) {factor = 0.5} : f32[3]
  output %y
}""",
    "softmax_long_rows_f16": """graph g {
  input %s : f16[1,4,3,1500]
  input %mask : f16[3,1500]
  %a = scale(%s) {factor = 0.125} : f16[1,4,3,1500]
  %b = add(%a, %mask) : f16[1,4,3,1500]
  %p = softmax(%b) {axis = -1} : f16[1,4,3,1500]
  %y = cast(%p) {dtype = "f32"} : f32[1,4,3,1500]
  output %y
}""",
    "rms_norm_4096_f16": """graph g {
  input %h : f16[2,4096]
  input %r : f16[2,4096]
  input %w : f16[4096]
  input %g : f16[4096]
  %sum = add(%h, %r) : f16[2,4096]
  %n = rms_norm(%sum, %w) {eps = 1e-05} : f16[2,4096]
  %m = mul(%n, %g) : f16[2,4096]
  %y = cast(%m) {dtype = "f32"} : f32[2,4096]
  output %y
}""",
    "layer_norm_prologue_epilogue": """graph g {
  input %x : f32[5,96]
  input %b0 : f32[96]
  input %w : f32[96]
  input %b : f32[96]
  %a = add(%x, %b0) : f32[5,96]
  %n = layer_norm(%a, %w, %b) {eps = 1e-05} : f32[5,96]
  %y = gelu(%n) : f32[5,96]
  output %y
}""",
    "batched_matmul_epilogue": """graph g {
  input %x : f32[2,3,8,16]
  input %w : f32[16,24]
  input %b : f32[24]
  %mm = matmul(%x, %w) : f32[2,3,8,24]
  %a = add(%mm, %b) : f32[2,3,8,24]
  %y = silu(%a) : f32[2,3,8,24]
  output %y
}""",
    "matmul_transpose_b_f16_residual": """graph g {
  input %x : f16[4,64]
  input %w : f16[96,64]
  input %res : f16[4,96]
  %mm = matmul(%x, %w) {transpose_b = true} : f16[4,96]
  %y = add(%res, %mm) : f16[4,96]
  output %y
}""",
    "gemv_f16_split_k": """graph g {
  input %x : f16[1,4096]
  input %w : f16[4096,1024]
  input %b : f16[1024]
  input %res : f16[1,1024]
  %mm = matmul(%x, %w) : f16[1,1024]
  %a = add(%mm, %b) : f16[1,1024]
  %s = silu(%a) : f16[1,1024]
  %y = add(%res, %s) : f16[1,1024]
  output %y
}""",
    "gemv_bf16_ragged_tile": """graph g {
  input %x : bf16[1,1,300]
  input %w : bf16[300,200]
  input %g : bf16[1,1,200]
  %mm = matmul(%x, %w) : bf16[1,1,200]
  %y = mul(%mm, %g) : bf16[1,1,200]
  output %y
}""",
    "gemv_f16_wide_single_pass": """graph g {
  input %x : f16[1,2100]
  input %w : f16[2100,8456]
  input %b : f16[8456]
  %mm = matmul(%x, %w) : f16[1,8456]
  %y = add(%mm, %b) : f16[1,8456]
  output %y
}""",
    "gemv_f16_norm_prologue_split_k": """graph g {
  input %x : f16[1,2100]
  input %g : f16[2100]
  input %w : f16[2100,2056]
  input %res : f16[1,2056]
  %n = rms_norm(%x, %g) : f16[1,2100]
  %mm = matmul(%n, %w) : f16[1,2056]
  %y = add(%res, %mm) : f16[1,2056]
  output %y
}""",
    "gemv_f32_narrow_split_k": """graph g {
  input %x : f32[1,4100]
  input %w : f32[4100,260]
  %mm = matmul(%x, %w) : f32[1,260]
  %y = relu(%mm) : f32[1,260]
  output %y
}""",
    "gemv_f32_cast": """graph g {
  input %x : f32[1,96]
  input %w : f32[96,36]
  %mm = matmul(%x, %w) : f32[1,36]
  %r = relu(%mm) : f32[1,36]
  %y = tanh(%r) : f32[1,36]
  output %y
}""",
    "conv_bias_relu": """graph g {
  input %x : f32[1,8,10,10]
  input %w : f32[12,8,3,3]
  input %b : f32[12]
  input %s : f32[12,1,1]
  %c = conv2d(%x, %w, %b) {padding = [1, 1]} : f32[1,12,10,10]
  %r = relu(%c) : f32[1,12,10,10]
  %y = mul(%r, %s) : f32[1,12,10,10]
  output %y
}""",
}


def _regions_graph(graph: Graph) -> Graph | None:
    """Every fused node of `graph` side by side in one graph (one compile), its operands inputs.

    Region r reads inputs `r<r>_in<k>` and yields output `%<node name>`, so a failure names it.
    """
    types = graph.value_types()
    inputs: list[Input] = []
    nodes: list[Node] = []
    for r, node in enumerate(n for n in graph.nodes if n.op == "fused"):
        names = tuple(f"r{r}_in{k}" for k in range(len(node.operands)))
        inputs.extend(Input(name, types[o]) for name, o in zip(names, node.operands))
        nodes.append(Node(node.name, "fused", names, type=node.type, body=node.body))
    if not nodes:
        return None
    return Graph("regions", tuple(inputs), (), tuple(nodes), tuple(Output(n.name) for n in nodes))


def _run_cuda(graph: Graph, inputs: dict, weights: dict, pipeline: str) -> dict[str, np.ndarray]:
    program = og.compile(graph, pipeline=pipeline, target="cuda")
    used = {w.name for w in program.graph.weights}
    result = program.run(inputs, {k: v for k, v in weights.items() if k in used})
    return {
        k: cupy.asnumpy(v) if isinstance(v, cupy.ndarray) else np.asarray(v)
        for k, v in result.items()
    }


def _limit(graph: Graph) -> float:
    """The loosest tolerance of any dtype a value of the graph has, bodies included: a region
    keeps f16/bf16 intermediates in float32, the reference rounds them (documented tolerance)."""
    dtypes = {t.dtype for t in graph.value_types().values()}
    for node in graph.nodes:
        if node.body is not None:
            dtypes |= {n.type.dtype for n in node.body.nodes if n.type is not None}
    return max((NMSE[d] for d in dtypes if d in NMSE), default=NMSE["f32"])


def _assert_close(actual: dict, expected: dict, limit: float, what: str) -> None:
    for name, value in expected.items():
        got = actual[name]
        assert got.shape == value.shape, (what, name)
        err = nmse(got, value)
        assert err <= limit, f"{what}: %{name} nmse {err:.3g} > {limit:g}"


def _check_regions(graph: Graph, label: str) -> int:
    """Compile every region of the fused graph at once; each must match the reference. Twice:
    the default fuse (norms recomputed inside one-row products), and fuse-siblings after a fuse
    that keeps shared norms (the pipeline fuse-siblings is meant for)."""
    total = 0
    for fused in (
        FusePass().run(graph),
        FuseSiblingsPass().run(FusePass(row_prologues=False).run(graph)),
    ):
        regions = _regions_graph(fused)
        if regions is None:
            continue
        inputs = random_inputs(regions, seed=5)
        expected = run_reference(regions, inputs, {})
        actual = _run_cuda(regions, inputs, {}, "verify")
        _assert_close(actual, expected, _limit(regions), f"{label}: region")
        total += len(regions.nodes)
    return total


@pytest.mark.parametrize("name", sorted(CASES))
def test_region_cases(name: str) -> None:
    assert _check_regions(og.parse(CASES[name], name), name) >= 1


def test_fixture_regions() -> None:
    total = 0
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        graph = og.parse(text[: text.index("# EXPECT")], str(path))
        graph = graph.with_nodes(
            replace(n, ann=NO_ANNOTATIONS) for n in graph.nodes if not n.is_event
        )
        total += _check_regions(graph, path.stem)
    assert total >= 15


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_regions(path: Path) -> None:
    _check_regions(og.parse_file(str(path)), path.stem)


@given(random_dag_graphs(max_nodes=12))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_graph_regions(graph: Graph) -> None:
    _check_regions(graph, "random")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_fused_and_unfused_agree(path: Path) -> None:
    graph = og.parse_file(str(path))
    inputs, weights = random_inputs(graph, 7), random_weights(graph, 7)
    expected = run_reference(graph, inputs, weights)
    limit = _limit(FusePass().run(graph))
    fused = _run_cuda(graph, inputs, weights, "default")
    unfused = _run_cuda(graph, inputs, weights, "verify,dce,cse")
    _assert_close(fused, expected, limit, f"{path.stem} fused")
    _assert_close(unfused, expected, limit, f"{path.stem} unfused")
    _assert_close(fused, unfused, limit, f"{path.stem} fused vs unfused")
