"""Codegen of fused regions, checked on the CPU: one kernel per region.

For every region `fuse` builds (on the examples, the fixtures and random DAGs), the CUDA code
generator must issue exactly one kernel launch for an elementwise or reduction region, and for a
product region either one matrix-vector kernel with the epilogue inside (one row,
`codegen/kernels/one_row/product_kernel.py`) or the product (cuBLAS gemm calls or the conv kernel) plus at most ONE
epilogue kernel. The text itself is compiled and run on the GPU machine (tests/gpu/test_fused_kernels.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings

import optgraph as og
from optgraph.analysis.fusion_rules import PRODUCT, plan_body
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import Launch, module_source
from optgraph.ir.graph import Graph
from optgraph.passes.fuse import FusePass
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "fuse").glob("*.ir"))


def _check_one_kernel_per_region(graph: Graph) -> int:
    """Assert the rule for every fused node of `graph`; the number of regions checked."""
    types = graph.value_types()
    checked = 0
    for node in graph.nodes:
        if node.op != "fused" or node.body is None:
            continue
        operand_types = [types[o] for o in node.operands]
        plan = plan_body(node.body, operand_types)
        work = node_code(node, operand_types)
        launches = [w for w in work if isinstance(w, Launch)]
        if plan.kind == PRODUCT and len(work) == 1 and "og_gemv_" in launches[0].kernel.name:
            # one row: the product and its epilogue in one matrix-vector kernel
            assert "og_epilogue" not in launches[0].kernel.source
        elif plan.kind == PRODUCT:
            anchor = next(n for n in node.body.nodes if n.name == plan.anchor)
            product = [w for w in work if not isinstance(w, Launch)]
            # matmul: cuBLAS calls and no kernel of ours before the epilogue; conv: its kernel
            assert product or anchor.op == "conv2d"
            assert len(launches) <= (2 if anchor.op == "conv2d" else 1)
            if plan.epilogue:
                assert launches and launches[-1] is work[-1]
        else:
            assert len(work) == 1 and len(launches) == 1, (plan.kind, work)
            assert 'extern "C" __global__' in launches[0].kernel.source
        checked += 1
    return checked


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_one_kernel_per_region(path: Path) -> None:
    fused = FusePass().run(og.parse_file(str(path)))
    _check_one_kernel_per_region(fused)


def test_fixture_regions_one_kernel_each() -> None:
    total = 0
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        source = text[: text.index("# EXPECT")]
        total += _check_one_kernel_per_region(FusePass().run(og.parse(source, str(path))))
    assert total >= 15


@given(random_dag_graphs(max_nodes=14))
@settings(max_examples=examples(60))
def test_random_regions_one_kernel_each(graph: Graph) -> None:
    _check_one_kernel_per_region(FusePass().run(graph))


def test_one_row_products_are_one_kernel_and_compile() -> None:
    """Decode-shaped product regions and plain matmuls (M = 1) become the fused matrix-vector
    kernel; with nvcc present, the module compiles for sm_90."""
    import shutil
    import subprocess
    import tempfile

    from optgraph.codegen.kernels.one_row.product_kernel import one_row_matmul, one_row_region

    src = """graph g {
  input %x : f16[1,1,4096]
  input %res : f16[1,1,1024]
  weight %w : f16[4096,1024]
  weight %b : f16[1024]
  weight %w2 : bf16[512,2048]
  input %xb : bf16[1,512]
  %mm = matmul(%x, %w) : f16[1,1,1024]
  %biased = add(%mm, %b) : f16[1,1,1024]
  %act = silu(%biased) : f16[1,1,1024]
  %y = add(%res, %act) : f16[1,1,1024]
  %z = matmul(%xb, %w2) : bf16[1,2048]
  output %y, %z
}"""
    graph = FusePass().run(og.parse(src))
    types = graph.value_types()
    kernels = []
    for node in graph.nodes:
        operand_types = [types[o] for o in node.operands]
        work = (
            one_row_region(node, operand_types)
            if node.body
            else one_row_matmul(node, operand_types)
        )
        assert work is not None and len(work) == 1, node.name
        if node.name == "y":  # K = 4096, N = 1024: split K so that the grid fills the GPU
            assert work[0].grid[0] * work[0].grid[1] >= 132
        kernels.append(work[0].kernel)
    assert len({k.name for k in kernels}) == 2
    if shutil.which("nvcc") is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gemv.cu"
        path.write_text(module_source(kernels))
        done = subprocess.run(
            [
                "nvcc",
                "-cubin",
                "-arch=sm_90",
                "-std=c++17",
                "-o",
                str(path.with_suffix(".cubin")),
                str(path),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
