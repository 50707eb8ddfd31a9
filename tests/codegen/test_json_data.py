"""Records as JSON data and text (codegen/plan/json_records.py): the same data as `dataclasses.asdict`,
and text the json module reads back to it, one record a line."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.json_records import json_data, json_record, json_text
from optgraph.codegen.plan.plan_text import plan_json
from optgraph.codegen.plan.steps import Extent, KernelStep, Location
from optgraph.passes.manager import run_pipeline

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))


def _step() -> KernelStep:
    at = Location("arena", "", 64)
    return KernelStep(
        "y", 0, "og_k", (2, 1, 1), (256, 1, 1), 0, (at, Location("input", "x", 0)),
        reads=(Extent("input", "x", 0, 16),), writes=None, nodes=("y", "z"),
    )  # fmt: skip


def test_json_data_is_asdict() -> None:
    step = _step()
    assert json_data(step) == asdict(step)
    assert type(json_data(step)["grid"]) is tuple  # containers rebuilt as asdict rebuilds them
    assert json_record(step.args[0]) == {"space": "arena", "key": "", "offset": 64}
    with pytest.raises(TypeError):
        json_record((1, 2))


def test_json_text_reads_back_with_a_record_a_line() -> None:
    data = {
        "graph": "g",
        "steps": [json_data(_step()), json_data(_step())],
        "empty": [],
        "locations": {"x": {"space": "input"}, "y": {"space": "arena"}},
        "n": 3,
    }
    text = json_text(data)
    assert json.loads(text) == json.loads(json.dumps(data))
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert sum(line.startswith('  {"node": "y"') for line in lines) == 2
    assert '  "y": {"space": "arena"}' in lines


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_a_plan_as_text_reads_back_as_its_indented_dump(path: Path) -> None:
    plan = plan_json(lower_cuda(run_pipeline(og.parse_file(path), "default")))
    assert json.loads(json_text(plan)) == json.loads(json.dumps(plan, indent=1))
