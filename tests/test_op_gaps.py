"""What each op of the op table lacks, across every layer, against a reviewed list of known gaps.

For every op of `ops.OPS` the test looks for:

- `reference`: a NumPy kernel (`reference.kernels.KERNELS`; a fused node's body is evaluated node
  by node);
- `cuda`: a CUDA emitter (the `OPS` of a kernel family `codegen/cuda_dispatch.py` lists; a fused
  region is planned by the dispatcher);
- `cost`: a cost that computes on the op's nodes in its op case (collectives: the several-device
  graph of `tests/support/placed_graphs.py`; an op with neither lacks its case);
- `aten`, `onnx`: an importer that produces it: the elementwise declaration's `aten`/`onnx` names,
  or the op's name as a string in a call of an importer module (`frontends/aten_*`, `torch_*`,
  resp. `onnx*`; the raising and gather modules count for both);
- `docs`: a row of docs/ir.md's op table;
- `case`: an op case in tests/support/op_cases.py.

A new op that lacks one of them fails with what to add; a gap closed fails too, until its line
below is deleted, so the list stays true:

    softplus lacks: onnx (an ONNX mapping: `onnx=` in its ElementwiseOp ...)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.cuda_dispatch import FAMILIES
from optgraph.ir.op_costs import REDUCTION_FLOPS
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.ops import OPS, cost
from optgraph.reference.kernels import KERNELS
from tests.support.op_cases import CASES, case_graph_text
from tests.support.placed_graphs import COLLECTIVES

ROOT = Path(__file__).resolve().parents[1]
FRONTENDS = ROOT / "optgraph" / "frontends"

WHAT_TO_ADD = {
    "reference": "a NumPy kernel: `numpy=` in its ElementwiseOp (optgraph/ir/op_elementwise.py), "
    "or an entry of KERNELS in optgraph/reference/kernels.py (or reference/<family>.py)",
    "cuda": "a CUDA emitter: `cuda=` in its ElementwiseOp, or the op in the OPS of a kernel family "
    "that optgraph/codegen/cuda_dispatch.py lists",
    "cost": "a cost: `flops=` in its ElementwiseOp, or a cost function in its OpDef that computes "
    "on its op case (optgraph/ir/op_costs.py)",
    "aten": "an ATen mapping: `aten=` in its ElementwiseOp, or a converter in "
    "optgraph/frontends/aten_<family>_ops.py",
    "onnx": "an ONNX mapping: `onnx=` in its ElementwiseOp, or a converter in "
    "optgraph/frontends/onnx_<family>_ops.py",
    "docs": "a row in docs/ir.md's op table, under the heading of its family",
    "case": "an op case in tests/support/op_cases.py (CASES, or the UNARY/BINARY lists)",
}

_NOT_IMPORTED = "made by a pass, never by an importer"
_COLLECTIVE = {
    "cuda": "NCCL runs it (runtime/cuda/collectives.py), no kernel of ours",
    "aten": "made by tensor-parallel and pipeline-parallel, never by an importer",
    "onnx": "made by tensor-parallel and pipeline-parallel, never by an importer",
    "case": "no single-device case: the several-device tests (tests/support/placed_graphs.py)",
}

# Reviewed: (op, what it lacks) -> why that is fine, or what is missing and not yet done.
KNOWN_GAPS: dict[tuple[str, str], str] = {
    **{(op, kind): why for op in ("all_gather", "all_reduce", "recv", "send")
       for kind, why in _COLLECTIVE.items()},
    ("copy", "aten"): f"split-backends: {_NOT_IMPORTED}",
    ("copy", "onnx"): f"split-backends: {_NOT_IMPORTED}",
    ("dequantize", "aten"): "GGUF models only: PyTorch has no ggml block formats",
    ("dequantize", "onnx"): "GGUF models only: ONNX has no ggml block formats",
    ("fused", "aten"): f"fuse: {_NOT_IMPORTED}",
    ("fused", "onnx"): f"fuse: {_NOT_IMPORTED}",
    ("kv_cache_write", "onnx"): "not yet: ONNX exports write a static cache with ScatterND, "
    "which no converter recognizes",
    ("prefetch", "aten"): f"plan-prefetch: {_NOT_IMPORTED}",
    ("prefetch", "onnx"): f"plan-prefetch: {_NOT_IMPORTED}",
}  # fmt: skip


def _documented_ops() -> set[str]:
    text = (ROOT / "docs" / "ir.md").read_text()
    names: set[str] = set()
    for line in text[text.index("## Ops") :].splitlines():
        if line.startswith("| ") and not line.startswith(("| op ", "|---")):
            names.update(re.sub(r"\(.*?\)", "", line.split("|")[1]).split())
    return names


def _named_in_calls(paths: list[Path]) -> set[str]:
    """Op names written as strings in the arguments of calls (`ctx.emit(node, "where", ...)`,
    `_unary("abs")`, `"greater_equal" if ... else "less_equal"`)."""
    names: set[str] = set()
    for path in paths:
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call):
                continue
            for arg in call.args:
                for leaf in ast.walk(arg):
                    if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                        names.add(leaf.value)
    return names & set(OPS)


def _imported() -> dict[str, set[str]]:
    """Which ops each importer produces, by "aten" and "onnx"."""
    files = sorted(FRONTENDS.glob("*.py"))
    aten = [p for p in files if p.name.startswith(("aten_", "torch_"))]
    onnx = [p for p in files if p.name.startswith("onnx")]
    shared = _named_in_calls([p for p in files if p not in aten and p not in onnx])
    return {
        "aten": shared | _named_in_calls(aten) | {n for n, d in ELEMENTWISE.items() if d.aten},
        "onnx": shared | _named_in_calls(onnx) | {n for n, d in ELEMENTWISE.items() if d.onnx},
    }


def _cost_failures() -> set[str]:
    """Ops whose cost raises on one of their nodes in the op cases (f32) or the collectives'
    graph. An op with neither is not costed here: it lacks a case, which is reported."""
    graphs = [og.parse(case_graph_text(op, "f32")) for op in sorted(CASES)]
    graphs.append(og.parse(COLLECTIVES))
    failed: set[str] = set()
    for graph in graphs:
        types = graph.value_types()
        for node in graph.nodes:
            assert node.type is not None
            try:
                cost(node, [types[o] for o in node.operands], node.type)
            except Exception:  # noqa: BLE001 - any failure is the gap reported
                failed.add(node.op)
    return failed


def _gaps() -> dict[tuple[str, str], str]:
    emitted = {op for family in FAMILIES for op in family.OPS} | {"fused"}
    evaluated = set(KERNELS) | {"fused"}
    imported, documented = _imported(), _documented_ops()
    has = {
        "reference": evaluated,
        "cuda": emitted,
        "cost": set(OPS) - _cost_failures(),
        "aten": imported["aten"],
        "onnx": imported["onnx"],
        "docs": documented,
        "case": set(CASES),
    }
    return {(op, kind): WHAT_TO_ADD[kind] for op in OPS for kind in has if op not in has[kind]}


def test_every_op_lacks_only_its_known_gaps() -> None:
    gaps = _gaps()
    new = sorted(set(gaps) - set(KNOWN_GAPS))
    lines = [f"{op} lacks: {kind} ({gaps[(op, kind)]})" for op, kind in new]
    assert not new, "ops that lack something; add it (docs/adding-an-op.md):\n" + "\n".join(lines)
    closed = sorted(set(KNOWN_GAPS) - set(gaps))
    assert not closed, f"gaps now closed: delete them from KNOWN_GAPS: {closed}"


def test_known_gaps_name_real_ops_and_kinds() -> None:
    for op, kind in KNOWN_GAPS:
        assert op in OPS and kind in WHAT_TO_ADD, (op, kind)


def test_the_gaps_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detectors see a real absence."""
    assert "abs" in _documented_ops() and "nope" not in _documented_ops()
    assert "kv_cache_write" in _imported()["aten"]
    assert "kv_cache_write" not in _imported()["onnx"]
    assert {"greater_equal", "less_equal"} <= _imported()["onnx"]  # written in a conditional
    assert not _cost_failures()
    monkeypatch.delitem(REDUCTION_FLOPS, "cumsum")  # a reduction without its flops
    assert _cost_failures() == {"cumsum"}
