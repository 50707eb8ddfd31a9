"""Faults on the GPU get clear messages and leave the process able to run:

- a program larger than the card (its weights alone, and its arena alone) is refused before a
  buffer is made, with the figures (runtime/cuda/memory.py `check_device_memory`); no capture
  is left open and the next program runs;
- the same through the command line: `optgraph run --device cuda` of such a graph exits 1 with
  one line, no traceback;
- a kernel the real NVRTC cannot compile names its kernel, node and op (runtime/cuda/launch.py
  `compiled_functions`).

Run on the GPU machine: `python -m pytest -q tests/gpu/test_gpu_faults.py`.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import cupy as cp

from optgraph.api.programs import cuda_program
from optgraph.codegen.lower_cuda import lower_for_cuda
from optgraph.codegen.plan.steps import KernelStep
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cuda.runner import CudaProgram

ROOT = Path(__file__).resolve().parents[2]
PLAN = "analyze-lifetimes,plan-memory"


def _card_elements() -> int:
    """f32 elements of one tensor half again as large as the whole card."""
    _, total = cp.cuda.runtime.memGetInfo()
    return int(total * 1.5) // 4


def _graph(weight_first: bool) -> og.Graph:
    n = _card_elements()
    if weight_first:  # the weights alone exceed the card
        text = f"""graph big_weight {{
  input %x : f32[1]
  weight %w : f32[{n}]
  %y = mul(%w, %x) : f32[{n}]
  %s = sum(%y) {{axes = [0], keepdims = false}} : f32[]
  output %s
}}
"""
    else:  # small weights, a value the size of 1.5 cards in the arena
        text = f"""graph big_arena {{
  input %x : f32[{n // 1024}, 1]
  weight %w : f32[1024]
  %y = mul(%x, %w) : f32[{n // 1024}, 1024]
  %s = sum(%y) {{axes = [0, 1], keepdims = false}} : f32[]
  output %s
}}
"""
    return og.parse(text)


def _still_runs() -> None:
    graph = og.parse_file(ROOT / "examples" / "mlp.ir")
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    program = og.compile(graph, target="cuda")
    got = program.run(inputs, weights)
    want = run_reference(graph, inputs, weights)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
    program.close()


@pytest.mark.parametrize("weight_first", [True, False], ids=["weights", "arena"])
def test_a_program_larger_than_the_card_is_refused_with_the_figures(weight_first: bool) -> None:
    graph = run_pipeline(_graph(weight_first), PLAN)
    free_before, _ = cp.cuda.runtime.memGetInfo()
    with pytest.raises(og.OptGraphError) as err:
        cuda_program(graph)
    message = str(err.value)
    assert "not enough memory on the device" in message
    assert "GiB needed" in message and "are available" in message
    free_after, _ = cp.cuda.runtime.memGetInfo()
    assert abs(free_after - free_before) < 64 << 20  # nothing of it was made
    stream = cp.cuda.get_current_stream()
    assert cp.cuda.runtime.streamIsCapturing(stream.ptr) == 0
    _still_runs()


def test_the_command_line_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "big.ir"
    path.write_text(og.print_graph(_graph(False)))
    done = subprocess.run(  # unfused: the arena holds the card-and-a-half value
        [sys.executable, "-m", "optgraph", "run", str(path), "--device", "cuda", "-q",
         "-p", "verify,dce,cse,assign-streams,insert-sync," + PLAN],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "not enough memory" in done.stderr


def test_a_kernel_nvrtc_cannot_compile_names_its_node_and_op() -> None:
    graph = og.compile(og.parse_file(ROOT / "examples" / "mlp.ir")).graph
    lowered = lower_for_cuda(graph)
    plan = lowered.main.plan
    step = next(s for s in plan.steps if isinstance(s, KernelStep))
    kernel = plan.kernels[step.kernel]
    body = kernel.function.replace("{", "{ og_undefined_name = 1;", 1)  # the function's body
    plan.kernels[step.kernel] = dataclasses.replace(kernel, source="".join(kernel.decls) + body)
    with pytest.raises(og.OptGraphError) as err:
        CudaProgram(lowered).run(random_inputs(graph, 0), random_weights(graph, 0))
    message = str(err.value)
    assert f"kernel {step.kernel}" in message and f"%{step.node}" in message
    assert "og_undefined_name" in message
    _still_runs()
