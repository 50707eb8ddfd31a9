"""The CUDA runtime checks the device's free memory before it makes a buffer (issue 36,
finding 3): a program whose weights, arena and input buffer do not fit is refused with both
figures (runtime/cuda/memory.py), on the fake CuPy, whose `memGetInfo` a test sets."""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.codegen.lower_cuda import lower_for_cuda
from optgraph.host_memory import size_text
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs
from optgraph.runtime.cuda.memory import DeviceNeed, device_need, pinned_bytes
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PLAN = "analyze-lifetimes,plan-memory"
WIDE = """graph wide {
  input %x : f32[4,99999999]
  weight %w : f32[99999999]
  %a = neg(%x) : f32[4,99999999]
  %b = mul(%a, %w) : f32[4,99999999]
  output %b
}
"""
TENSOR = 4 * 99999999 * 4


def test_a_program_the_device_cannot_hold_makes_no_buffer(monkeypatch) -> None:
    graph = run_pipeline(og.parse(WIDE), PLAN)
    need = device_need(lower_for_cuda(graph).main, with_weights=True)
    assert need.weights >= TENSOR // 4 and need.inputs >= TENSOR and need.arena >= TENSOR
    with fake_cupy(monkeypatch) as fake:
        fake.device_free = need.total - 1
        with pytest.raises(og.OptGraphError) as err:
            cuda_program(graph)
        assert fake.allocations == []
    assert str(err.value) == (
        f"error: cuda: not enough memory on the device: at least {size_text(need.total)} "
        f"needed ({need.describe()}), and {size_text(need.total - 1)} are available "
        "(free on the current GPU: cudaMemGetInfo and CuPy's pool)"
    )


def test_free_blocks_of_cupys_pool_count_as_available(monkeypatch) -> None:
    graph = run_pipeline(og.parse(WIDE), PLAN)
    need = device_need(lower_for_cuda(graph).main, with_weights=True)
    with fake_cupy(monkeypatch) as fake:
        fake.device_free, fake.pool_free = need.total // 2, need.total - need.total // 2
        cuda_program(graph).close()  # fits exactly: refused by nothing


def test_a_variants_buffers_are_checked_when_it_is_made(monkeypatch) -> None:
    """The program's weights fitted; the first run's arena and input buffer no longer do."""
    graph = run_pipeline(og.parse_file(EXAMPLES / "diamond.ir"), PLAN)
    with fake_cupy(monkeypatch) as fake:
        program = cuda_program(graph)
        made = len(fake.allocations)
        fake.device_free = 16
        with pytest.raises(og.OptGraphError, match="cuda: not enough memory on the device"):
            program.run(random_inputs(graph))
        assert len(fake.allocations) == made
        program.close()


def test_the_figures_name_only_what_the_plan_has() -> None:
    need = DeviceNeed(weights=0, arena=3 << 30, values=0, inputs=512)
    assert need.total == (3 << 30) + 512
    assert need.describe() == "arena 3 GiB, inputs 512 bytes"
    graph = run_pipeline(og.parse(WIDE), PLAN)
    variant = lower_for_cuda(graph).main
    # the input's and the output's pinned staging, 256-aligned; nothing placed on the host
    assert pinned_bytes(variant) == 2 * (-(-TENSOR // 256) * 256)
