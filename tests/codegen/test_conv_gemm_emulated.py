"""conv2d's product form (im2col into the node's scratch, then a cuBLAS product, then the bias),
lowered for CUDA and run in the CPU emulator against the reference: padded, strided, 1x1 (x read
as the columns, no scratch), without bias, in f16, fused with an epilogue, and cut into several
products when the columns of every image do not fit the scratch at once."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels import conv
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.steps import GemmStep, KernelStep
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


def _conv_graph(
    dtype: str,
    n: int,
    c: int,
    size: int,
    o: int,
    window: int,
    stride: int,
    padding: tuple[int, int],
    bias: bool = True,
    epilogue: bool = False,
) -> og.Graph:
    out = (size + 2 * padding[0] - window) // stride + 1
    wide = (size + 2 * padding[1] - window) // stride + 1
    operands = "%x, %w, %b" if bias else "%x, %w"
    attrs = f"stride = [{stride}, {stride}], padding = [{padding[0]}, {padding[1]}]"
    lines = [
        "graph conv {",
        f"  input %x : {dtype}[{n},{c},{size},{size}]",
        f"  weight %w : {dtype}[{o},{c},{window},{window}]",
        f"  weight %b : {dtype}[{o}]" if bias else "",
        f"  %y = conv2d({operands}) {{{attrs}}} : {dtype}[{n},{o},{out},{wide}]",
    ]
    if epilogue:
        lines.append(f"  %z = silu(%y) : {dtype}[{n},{o},{out},{wide}]")
    lines += ["  output %z" if epilogue else "  output %y", "}"]
    return og.parse("\n".join(line for line in lines if line))


def _check(graph: og.Graph, bound: float) -> list[object]:
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    inputs, weights = random_inputs(graph, seed=3), random_weights(graph, seed=4)
    want = run_reference(graph, dict(inputs), weights)
    plan = lower_cuda(planned)
    got = cuda_emulator.run_plan(plan, dict(inputs), weights, graph=planned)
    for name in graph.output_names():
        error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert error <= bound, f"{name}: nmse {error:.3g}"
    return list(plan.steps)


def _kernels(steps: list[object]) -> list[str]:
    return [s.kernel for s in steps if isinstance(s, KernelStep)]


@pytest.mark.parametrize(
    ("window", "stride", "padding", "bias"),
    [(3, 1, (1, 1), True), (3, 2, (0, 1), False), (4, 2, (1, 1), True)],
)
def test_large_convolutions_are_products_equal_to_the_reference(
    window: int, stride: int, padding: tuple[int, int], bias: bool
) -> None:
    graph = _conv_graph("f32", 2, 32, 32, 128, window, stride, padding, bias)
    (node,) = graph.nodes
    types = [graph.value_types()[o] for o in node.operands]
    assert conv.gemm_form(node, types) and conv.scratch_bytes(node, types) > 0
    steps = _check(graph, 1e-10)
    assert sum(isinstance(s, GemmStep) for s in steps) == 1
    kernels = _kernels(steps)
    assert any("im2col" in k for k in kernels) and not any("conv2d" in k for k in kernels)
    assert any("conv_bias" in k for k in kernels) == bias


def test_a_pointwise_convolution_reads_its_input_as_the_columns() -> None:
    graph = _conv_graph("f32", 2, 64, 32, 128, 1, 1, (0, 0))
    (node,) = graph.nodes
    types = [graph.value_types()[o] for o in node.operands]
    assert conv.gemm_form(node, types) and conv.scratch_bytes(node, types) == 0
    steps = _check(graph, 1e-10)
    assert not any("im2col" in k for k in _kernels(steps))
    (gemm,) = [s for s in steps if isinstance(s, GemmStep)]
    assert (gemm.a.space, gemm.a.key) == ("input", "x")


def test_f16_convolution_with_a_fused_epilogue() -> None:
    graph = _conv_graph("f16", 2, 32, 32, 64, 3, 1, (1, 1), epilogue=True)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    assert [n.op for n in planned.nodes if not n.is_event] == ["fused"]
    steps = _check(graph, BOUNDS["f16"])
    assert sum(isinstance(s, GemmStep) for s in steps) == 1


def test_columns_over_the_scratch_limit_make_one_product_an_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = _conv_graph("f32", 3, 32, 32, 64, 3, 1, (1, 1))
    (node,) = graph.nodes
    types = [graph.value_types()[o] for o in node.operands]
    one_image = 32 * 9 * 32 * 32 * 4
    monkeypatch.setattr(conv, "GEMM_BATCH_BYTES", one_image)
    assert conv.scratch_bytes(node, types) == one_image
    steps = _check(graph, 1e-10)
    assert sum(isinstance(s, GemmStep) for s in steps) == 3


def test_small_convolutions_keep_the_direct_kernel() -> None:
    graph = _conv_graph("f32", 1, 8, 8, 8, 3, 1, (1, 1))
    (node,) = graph.nodes
    assert not conv.gemm_form(node, [graph.value_types()[o] for o in node.operands])
    steps = _check(graph, 1e-10)
    assert not any(isinstance(s, GemmStep) for s in steps)
    assert any("conv2d" in k for k in _kernels(steps))
