"""CUDA codegen on the CPU: CHECK fixtures, determinism, cuBLAS parameters, every op compiles.

Fixtures in tests/codegen_checks/ hold `# RUN: <pipeline or none>`, a graph, and `# CHECK:` /
`# CHECK-NOT:` lines matched in order against `describe_plan` (each step, each kernel's source
after its first launch), FileCheck style: text is literal except `{{regex}}`; a CHECK-NOT must
not match between the previous CHECK's match and the next one's. `# LOWER: no-merge-launches`
lowers with one launch per kernel (fixtures about single kernels whose ops are independent).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import Kernel, module_source
from optgraph.codegen.kernels.matmul import Gemm, emit_roles
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.plan_text import describe_plan
from optgraph.ir.graph import Node, TensorType
from optgraph.passes.manager import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "codegen_checks").glob("*.ir"))
from tests.support.op_cases import case_graph_text, params


def _pattern(text: str) -> re.Pattern[str]:
    parts = re.split(r"\{\{(.*?)\}\}", text)
    return re.compile("".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts)))


def check_text(text: str, checks: list[tuple[str, str]]) -> None:
    """FileCheck-style matching of (kind, pattern) pairs against `text`."""
    pos = 0
    pending_not: list[str] = []
    for kind, pattern in checks:
        if kind == "CHECK-NOT":
            pending_not.append(pattern)
            continue
        match = _pattern(pattern).search(text, pos)
        assert match, f"CHECK: {pattern!r} not found after offset {pos}:\n{text[pos : pos + 1500]}"
        for bad in pending_not:
            found = _pattern(bad).search(text, pos, match.start())
            assert not found, f"CHECK-NOT: {bad!r} found before {pattern!r}"
        pending_not, pos = [], match.end()
    for bad in pending_not:
        assert not _pattern(bad).search(text, pos), f"CHECK-NOT: {bad!r} found at the end"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture(path: Path) -> None:
    text = path.read_text()
    run = re.search(r"^# RUN: (.*)$", text, re.MULTILINE)
    assert run, "fixture needs a # RUN: line"
    checks = re.findall(r"^# (CHECK|CHECK-NOT): (.*)$", text, re.MULTILINE)
    assert checks, "fixture needs CHECK lines"
    graph = og.parse(text, str(path))
    if run.group(1).strip() != "none":
        graph = run_pipeline(graph, run.group(1).strip())
    lower = re.search(r"^# LOWER: (.*)$", text, re.MULTILINE)
    options = lower.group(1).split() if lower else []
    assert set(options) <= {"no-merge-launches"}, options
    plan = lower_cuda(graph, merge_launches="no-merge-launches" not in options)
    check_text(describe_plan(plan), checks)


def test_check_matcher_fails_on_missing_and_forbidden_text() -> None:
    check_text("a b c", [("CHECK", "a"), ("CHECK-NOT", "x"), ("CHECK", "c")])
    with pytest.raises(AssertionError):
        check_text("a b c", [("CHECK", "c"), ("CHECK", "a")])  # order matters
    with pytest.raises(AssertionError):
        check_text("a b c", [("CHECK", "a"), ("CHECK-NOT", "b"), ("CHECK", "c")])


# -- determinism -----------------------------------------------------------------------------


def _code(text: str, name: str) -> list:
    graph = og.parse(text)
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.name == name)
    return list(node_code(node, [types[o] for o in node.operands]))


SAME = """graph g {
  input %x : f32[4,64]
  input %z : f32[4,64]
  input %w : f32[8,64]
  %a = exp(%x) : f32[4,64]
  %b = exp(%z) : f32[4,64]
  %c = exp(%w) : f32[8,64]
  %d = exp(%x) : f32[4,64]
  output %a, %b, %c, %d
}
"""


def test_identical_ops_give_byte_identical_kernels() -> None:
    a, b, c = (_code(SAME, n)[0].kernel for n in "abc")
    assert a == b and a.source == b.source and a.name.startswith("og_exp_")
    assert c.name != a.name  # another shape, another kernel
    plan = lower_cuda(og.parse(SAME), merge_launches=False)
    assert len(plan.kernels) == 2 and len(plan.steps) == 4
    source = plan.source()
    assert source.count(f"void {a.name}(") == 1
    assert source == lower_cuda(og.parse(SAME), merge_launches=False).source()  # deterministic
    merged = lower_cuda(og.parse(SAME))  # one launch: the exp body defined once all the same
    assert len(merged.steps) == 1 and merged.source().count(f"void {a.name}_part(") == 1
    assert merged.source() == lower_cuda(og.parse(SAME)).source()


def test_module_source_is_sorted_and_deduplicated() -> None:
    k1, k2 = Kernel("og_b_1", "// b\n"), Kernel("og_a_2", "// a\n")
    text = module_source([k1, k2, k1])
    assert text.index("// a") < text.index("// b") and text.count("// b") == 1


# -- matmul: emulate the cuBLAS calls with NumPy -----------------------------------------------


def _colmajor(buf: np.ndarray, offset: int, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major rows x cols matrix at element `offset` of `buf` with leading dim `ld`."""
    idx = offset + np.arange(rows)[:, None] + ld * np.arange(cols)[None, :]
    return buf[idx]


def _run_gemm(g: Gemm, buffers: dict[str, np.ndarray], size: int) -> None:
    """C = op(A)·op(B), column-major, strided batched, as cuBLAS computes it."""
    a_rows, a_cols = (g.m, g.k) if g.transa == 0 else (g.k, g.m)
    b_rows, b_cols = (g.k, g.n) if g.transb == 0 else (g.n, g.k)
    for i in range(g.batch):
        a = _colmajor(buffers[g.a], g.a_offset // size + i * g.stride_a, a_rows, a_cols, g.lda)
        b = _colmajor(buffers[g.b], g.b_offset // size + i * g.stride_b, b_rows, b_cols, g.ldb)
        a = a if g.transa == 0 else a.T
        b = b if g.transb == 0 else b.T
        c = a @ b
        base = g.c_offset // size + i * g.stride_c
        idx = base + np.arange(g.m)[:, None] + g.ldc * np.arange(g.n)[None, :]
        buffers[g.c][idx] = c


MATMULS = [
    ((4, 64), (64, 32), False, False),
    ((4, 64), (32, 64), False, True),
    ((64, 4), (64, 32), True, False),
    ((64, 4), (32, 64), True, True),
    ((2, 3, 5, 7), (7, 4), False, False),
    ((2, 3, 7, 5), (7, 4), True, False),
    ((2, 5, 7), (2, 7, 4), False, False),
    ((2, 1, 5, 7), (1, 3, 7, 4), False, False),
    ((5, 7), (3, 7, 4), False, False),
    ((3, 1, 5, 7), (2, 4, 7), False, True),
    ((2, 3, 1, 5, 7), (3, 4, 7, 2), False, False),
]


@pytest.mark.parametrize(("sa", "sb", "ta", "tb"), MATMULS)
def test_gemm_parameters_compute_the_matmul(sa, sb, ta, tb) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa)
    b = rng.standard_normal(sb)
    want = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
    attrs = {"transpose_a": ta, "transpose_b": tb}
    node = Node("y", "matmul", ("a", "b"), attrs, TensorType("f32", want.shape))
    calls = emit_roles(node, [TensorType("f32", sa), TensorType("f32", sb)], ("in0", "in1"))
    buffers = {"in0": a.ravel().copy(), "in1": b.ravel().copy(), "out": np.full(want.size, np.nan)}
    for g in calls:
        assert g.c == "out" and g.dtype == "f32"
        _run_gemm(g, buffers, 4)
    np.testing.assert_allclose(buffers["out"].reshape(want.shape), want, rtol=1e-12)


# -- every op of the op table ----------------------------------------------------------------


def test_every_op_case_lowers() -> None:
    for op, dtype in params():
        plan = lower_cuda(og.parse(case_graph_text(op, dtype)))
        assert plan.steps, (op, dtype)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_every_generated_kernel_compiles(tmp_path: Path) -> None:
    """The source of every op case in every dtype, as one module, through nvcc for sm_90: each
    kernel alone and inside merged launches (whose member functions and workspaces are then
    defined once for both)."""
    kernels: dict[str, Kernel] = {}
    for op, dtype in params():
        for merge in (False, True):
            plan = lower_cuda(og.parse(case_graph_text(op, dtype)), merge_launches=merge)
            kernels.update(plan.kernels)
    for path in sorted((ROOT.parent / "examples").glob("*.ir")):
        graph = run_pipeline(og.parse_file(path), "default")
        for merge in (False, True):
            kernels.update(lower_cuda(graph, merge_launches=merge).kernels)
    assert any(name.startswith("og_merged_") for name in kernels)
    source = tmp_path / "all.cu"
    source.write_text(module_source(kernels.values()))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-o", str(tmp_path / "all.cubin"),
         str(source)],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(kernels) > 250
