"""A generated CUDA module that fails to compile is reported in the plan's terms: the kernel, the
nodes it computes and their ops, the compiler's error (runtime/cuda/launch.py
`compiled_functions`), instead of the compiler's raw log. The compiler here is the fake CuPy's
(tests/support/fake_cupy.py) made to fail with NVRTC's log format; tests/gpu/test_gpu_faults.py
breaks a kernel for the real NVRTC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import optgraph as og
from optgraph.codegen.cuda_source import Kernel, kernel_at_line, module_source
from optgraph.codegen.plan.steps import KernelStep
from optgraph.errors import OptGraphError
from optgraph.reference import interpreter as reference
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _kernel(name: str, body: str, decls: tuple[str, ...] = ()) -> Kernel:
    function = f'extern "C" __global__ void {name}(float* out) {{\n{body}\n}}\n'
    return Kernel(name=name, source="".join(decls) + function, decls=decls)


def test_every_line_of_a_module_is_attributed_to_the_kernel_it_was_written_for() -> None:
    shared = "__device__ float og_shared_helper(float v) {\n  return v;\n}\n"
    kernels = [
        _kernel("og_b", "  out[0] = og_shared_helper(2.0f);", (shared,)),
        _kernel("og_a", "  out[0] = 1.0f;\n  out[1] = 1.0f;", (shared,)),
        _kernel("og_c", "  out[0] = 3.0f;"),
    ]
    lines = module_source(kernels).split("\n")
    owner = {}
    for number, text in enumerate(lines, start=1):
        for name in ("og_a", "og_b", "og_c"):
            if f"void {name}(" in text:
                owner[number] = name
    assert sorted(owner.values()) == ["og_a", "og_b", "og_c"]
    for number, name in owner.items():  # each header line, and the body line after it
        assert kernel_at_line(kernels, number) == name
        assert kernel_at_line(kernels, number + 1) == name
    helper = next(i for i, t in enumerate(lines, start=1) if "og_shared_helper(float" in t)
    assert kernel_at_line(kernels, helper) == "og_a"  # written once, for the first in name order
    assert kernel_at_line(kernels, 1) is None  # the prelude
    assert kernel_at_line(kernels, len(lines) + 5) is None


class CompileException(Exception):  # named as CuPy's: the runtime matches the class name
    pass


def test_a_kernel_that_does_not_compile_names_its_node_and_op(monkeypatch: Any) -> None:
    with fake_cupy(monkeypatch):
        graph = og.parse_file(EXAMPLES / "mlp.ir")
        program = og.compile(graph, target="cuda")
        lowered = program.lowered
        assert lowered is not None
        plan = lowered.main.plan
        step = next(s for s in plan.steps if isinstance(s, KernelStep))
        source = plan.source()
        line = next(
            i for i, t in enumerate(source.split("\n"), start=1) if f"void {step.kernel}(" in t
        )
        log = (
            f"/tmp/tmpabc/kern.cu({line + 1}): error: identifier \"og_oops\" is undefined\n\n"
            "1 error detected in the compilation of \"/tmp/tmpabc/kern.cu\"."
        )

        import cupy

        def fail(self: Any, name: str) -> Any:
            raise CompileException(log)

        monkeypatch.setattr(cupy.RawModule, "get_function", fail)
        with pytest.raises(OptGraphError) as caught:
            program.run(reference.random_inputs(graph))
    message = str(caught.value)
    node = next(n for n in program.graph.nodes if n.name == step.node)
    assert f"kernel {step.kernel}" in message
    assert f"%{step.node} ({node.op}" in message
    assert 'identifier "og_oops" is undefined' in message
    assert f"line {line + 1}" in message


def test_other_errors_of_the_compiler_step_are_not_rewritten(monkeypatch: Any) -> None:
    with fake_cupy(monkeypatch):
        graph = og.parse_file(EXAMPLES / "mlp.ir")
        program = og.compile(graph, target="cuda")
        import cupy

        def fail(self: Any, name: str) -> Any:
            raise RuntimeError("the driver is gone")

        monkeypatch.setattr(cupy.RawModule, "get_function", fail)
        with pytest.raises(RuntimeError, match="the driver is gone"):
            program.run(reference.random_inputs(graph))
