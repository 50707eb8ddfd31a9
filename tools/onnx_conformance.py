"""ONNX backend node tests for every op the ONNX importer maps, and their table in the docs.

The node tests are onnx's own: `onnx.backend.test.case.node.collect_testcases()` builds each case's
one-node model and its inputs and expected outputs (computed by onnx's NumPy reference code; recent
onnx wheels no longer ship them as `onnx/backend/test/data/node/*` files). Each case whose node is
an op in `optgraph.frontends.onnx_ops.CONVERTERS` is imported with `og.from_onnx`, compiled with
`og.compile(target="cpu")`, run on the case's inputs and compared with its expected outputs:

- float outputs: the same infinities and NaNs, and over the finite values an NMSE within the output
  dtype's bound (`NMSE_BOUNDS`): 1e-10 for f32 (and f64 expectations); 1e-6 for f16 and 1e-4 for
  bf16, where a result one ulp of the narrow dtype away in every element gives at most 2^-20 and
  2^-14 (onnx computes the expectation in float32 and rounds once, optgraph may round a value
  inside the op once more);
- integer and bool outputs: equal.

Node tests pass some parameters as graph inputs that exporters write as initializers (a Reshape's
shape, a Pad's pads, a Slice's starts, reduction axes, Clip's bounds, Trilu's k):
`STATIC_OPERANDS` names them per op, and they are made initializers holding the case's values,
since optgraph imports static shapes. A case the importer refuses is "unsupported" with the importer's reason; a case imported
and computed differently is a failure.

    python tools/onnx_conformance.py            # rewrite the table in docs/importers.md
    python tools/onnx_conformance.py --check    # exit 1 when the table is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.frontends.onnx_ops import CONVERTERS
from optgraph.reference.interpreter import nmse

DOC = ROOT / "docs" / "importers.md"
BEGIN, END = "<!-- onnx-conformance:begin -->", "<!-- onnx-conformance:end -->"
NMSE_BOUNDS = {"float64": 1e-10, "float32": 1e-10, "float16": 1e-6, "bfloat16": 1e-4}
# Operand positions that exporters write as initializers (parameters, not data).
STATIC_OPERANDS: dict[str, tuple[int, ...]] = {
    "Clip": (1, 2),
    "CumSum": (1,),
    "Dropout": (1, 2),
    "Expand": (1,),
    "Pad": (1, 2, 3),
    "ReduceMax": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "Reshape": (1,),
    "Resize": (1, 2, 3),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Squeeze": (1,),
    "Tile": (1,),
    "TopK": (1,),
    "Trilu": (1,),
    "Unsqueeze": (1,),
}


@dataclass(frozen=True)
class Outcome:
    """One node test: `status` is "pass", "fail" or "unsupported"; `detail` says why."""

    case: str
    op: str
    status: str
    detail: str = ""


@cache
def node_cases() -> dict[str, list[Any]]:
    """onnx's one-node test cases of the mapped ops, by op type, each list sorted by name."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the case scripts' own overflow warnings
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    by_op: dict[str, list[Any]] = defaultdict(list)
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in CONVERTERS and not nodes[0].domain:
            by_op[nodes[0].op_type].append(case)
    return {op: sorted(by_op[op], key=lambda c: c.name) for op in sorted(CONVERTERS)}


def _with_static_operands(model: Any, inputs: list[np.ndarray]) -> tuple[Any, dict[str, Any]]:
    """The model with `STATIC_OPERANDS` turned into initializers; the remaining feeds by name."""
    import onnx

    node = model.graph.node[0]
    static = {node.input[i] for i in STATIC_OPERANDS.get(node.op_type, ()) if i < len(node.input)}
    model = onnx.ModelProto.FromString(model.SerializeToString())
    feeds: dict[str, Any] = {}
    kept = []
    for value, array in zip(list(model.graph.input), inputs):
        if value.name in static and value.name:
            model.graph.initializer.append(onnx.numpy_helper.from_array(array, value.name))
        else:
            kept.append(value)
            feeds[value.name] = array
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, feeds


def _first_line(err: og.OptGraphError) -> str:
    text = err.message.splitlines()[0]
    return re.sub(r"^import: ", "", text)


def _array(value: Any) -> Any:
    """A test-data value as NumPy (onnx gives narrow float types as TensorProto)."""
    import onnx

    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return value


def run_case(case: Any) -> Outcome:
    """Import, compile for the CPU, run and compare every data set of one node test."""
    op = case.model.graph.node[0].op_type
    for inputs, outputs in case.data_sets:
        expected = [_array(o) for o in outputs]
        model, feeds = _with_static_operands(case.model, [_array(i) for i in inputs])
        try:
            graph, weights = og.from_onnx(model)
            program = og.compile(graph, target="cpu")
        except og.OptGraphError as err:
            return Outcome(case.name, op, "unsupported", _first_line(err))
        except Exception as err:  # noqa: BLE001 - a crash is a bug: reported, not raised
            return Outcome(case.name, op, "fail", f"import crashed: {type(err).__name__}: {err}")
        names = [i.name for i in graph.inputs]
        arrays = dict(zip(names, feeds.values()))
        try:
            got = program.run(arrays, weights)
        except og.OptGraphError as err:
            return Outcome(case.name, op, "unsupported", _first_line(err))
        except Exception as err:  # noqa: BLE001
            return Outcome(case.name, op, "fail", f"run crashed: {type(err).__name__}: {err}")
        wrong = _compare([got[n] for n in graph.output_names()], expected)
        if wrong:
            return Outcome(case.name, op, "fail", wrong)
    return Outcome(case.name, op, "pass")


def _compare(got: list[Any], expected: list[np.ndarray]) -> str:
    """'' when every output matches its expectation, else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for index, (have, want) in enumerate(zip(got, expected)):
        have, want = np.asarray(have), np.asarray(want)
        if have.shape != want.shape:
            return f"output {index}: shape {have.shape}, expected {want.shape}"
        bound = NMSE_BOUNDS.get(want.dtype.name)
        if bound is not None:
            have, want = have.astype(np.float64), want.astype(np.float64)
            finite = np.isfinite(want)
            same_specials = np.array_equal(want[~finite], have[~finite], equal_nan=True)
            if not np.array_equal(finite, np.isfinite(have)) or not same_specials:
                return f"output {index}: inf/nan differ"
            error = nmse(have[finite], want[finite])
            if error > bound:
                return f"output {index}: nmse {error:.3g} > {bound:g}"
        elif not np.array_equal(have, want):
            return f"output {index}: values differ"
    return ""


@cache
def run_op(op: str) -> list[Outcome]:
    return [run_case(case) for case in node_cases()[op]]


_DTYPE = re.compile(r"input '.*' has dtype (\S+), which optgraph does not support")
_CAST = re.compile(r"cast to ONNX type (\d+) is not supported( \(.*\))?")


def _reason(outcome: Outcome) -> tuple[str, str]:
    """(the reason a row groups by, what it lists): dtypes and cast targets are listed by name,
    other reasons by their cases."""
    import onnx

    detail = re.sub(r"^\w+ '[^']*': ", "", outcome.detail)  # the op and its (empty) node name
    if outcome.status == "fail":
        return f"**wrong**: {detail}", outcome.case.removeprefix("test_")
    if match := _DTYPE.fullmatch(detail):
        return "input dtype not supported", match.group(1)
    if match := _CAST.fullmatch(detail):
        return "cast target not supported", onnx.TensorProto.DataType.Name(int(match.group(1)))
    return detail, outcome.case.removeprefix("test_")


def table(outcomes: list[Outcome]) -> str:
    """The markdown table: one row per mapped op, what is unsupported grouped by reason."""
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_op[outcome.op].append(outcome)
    passed = sum(o.status == "pass" for o in outcomes)
    wrong = sum(o.status == "fail" for o in outcomes)
    lines = [
        (
            f"{passed} of {len(outcomes)} node tests of the mapped ops pass, {wrong} compute a "
            "wrong answer, the others are refused at import with the reason given."
        ),
        "",
        "| op | passed | not supported (reason: dtypes or cases) |",
        "|---|---|---|",
    ]
    for op in sorted(node_cases()):
        rows = by_op.get(op, [])
        if not rows:
            lines.append(f"| {op} | no node test | |")
            continue
        reasons: dict[str, set[str]] = defaultdict(set)
        for outcome in rows:
            if outcome.status != "pass":
                key, item = _reason(outcome)
                reasons[key].add(item)
        cells = "; ".join(
            f"{_cell(key)}: {_listed(items)}" for key, items in sorted(reasons.items())
        )
        ok = sum(o.status == "pass" for o in rows)
        lines.append(f"| {op} | {ok}/{len(rows)} | {cells} |")
    return "\n".join(lines) + "\n"


def _listed(items: set[str]) -> str:
    """Every item, or the first three and how many there are in all."""
    names = sorted(items)
    if len(names) <= 4:
        return ", ".join(names)
    return f"{', '.join(names[:3])}, ... ({len(names)} in all)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def current_table() -> str:
    outcomes = [o for op in node_cases() for o in run_op(op)]
    return table(outcomes)


def documented_table(doc: str) -> str:
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    return doc[start:end].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ONNX node-test conformance table")
    parser.add_argument("--check", action="store_true", help="exit 1 if the docs' table is stale")
    args = parser.parse_args(argv)
    doc = DOC.read_text()
    fresh = current_table()
    if args.check:
        if documented_table(doc) != fresh:
            print(f"{DOC.relative_to(ROOT)}: the conformance table is out of date", file=sys.stderr)
            return 1
        return 0
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOC.write_text(doc[:start] + "\n" + fresh + doc[end:])
    print(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
