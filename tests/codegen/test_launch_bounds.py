"""Every kernel launched with blocks of more than 256 threads declares `__launch_bounds__` for
that size (codegen/cuda_source.py `make_kernel(threads=...)`): without it the compiler may give
a fused row kernel more registers than a 1024-thread block can have, and the launch fails with
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701; a GroupNorm-sized row of SD-1.5's UNet on the H200,
2026-12-02). Checked on the lowered plans of rows wide enough for 512 and 1024 threads and on
the examples."""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.cuda_source import UNBOUNDED_THREADS
from optgraph.codegen.lower_cuda import lower_for_cuda
from optgraph.codegen.plan.steps import KernelStep
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))

WIDE_ROWS = {
    "softmax": """graph wide_softmax {
  input %x : f16[4,8192]
  %a = mul(%x, %x) : f16[4,8192]
  %s = softmax(%a) {axis = -1} : f16[4,8192]
  output %s
}
""",
    "norm": """graph wide_norm {
  input %x : f32[2,40960]
  weight %g : f32[40960]
  %a = silu(%x) : f32[2,40960]
  %b = mul(%a, %x) : f32[2,40960]
  %n = rms_norm(%b, %g) {eps = 1e-05} : f32[2,40960]
  %o = silu(%n) : f32[2,40960]
  %p = add(%o, %x) : f32[2,40960]
  output %p
}
""",
}


def _kernel_steps(graph: og.Graph) -> list[tuple[KernelStep, object]]:
    plan = lower_for_cuda(run_pipeline(graph, DEFAULT_PIPELINE)).main.plan
    return [(s, plan.kernels[s.kernel]) for s in plan.steps if isinstance(s, KernelStep)]


@pytest.mark.parametrize("name", sorted(WIDE_ROWS))
def test_wide_row_kernels_declare_their_block_size(name: str) -> None:
    steps = _kernel_steps(og.parse(WIDE_ROWS[name]))
    wide = [(s, k) for s, k in steps if s.block[0] * s.block[1] * s.block[2] > UNBOUNDED_THREADS]
    assert wide, "the row is wide enough for a block of more than 256 threads"
    for step, kernel in wide:
        threads = step.block[0] * step.block[1] * step.block[2]
        assert kernel.bounds is not None and kernel.bounds[0] >= threads, (step.kernel, threads)
        assert f"__launch_bounds__({kernel.bounds[0]}" in kernel.source


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_example_launches_a_large_block_without_bounds(path: Path) -> None:
    for step, kernel in _kernel_steps(og.parse_file(path)):
        threads = step.block[0] * step.block[1] * step.block[2]
        if threads > UNBOUNDED_THREADS:
            assert kernel.bounds is not None and kernel.bounds[0] >= threads, step.kernel
