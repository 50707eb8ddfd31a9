"""The compile's results do not change when its speed does: the printed IR and the report (every
figure but the compile time) of every example and of generated Llama graphs (decode, prefill, f16,
grouped-query, biases; one device, tensor-parallel and pipeline-parallel), after the default
pipeline, with eight streams, and with split backends and streamed weights, are the ones recorded in
`compile_outputs.json` (a SHA-256 of each).

Passes and analyses made faster must produce the same bytes: a changed hash is a changed result.
Where a result changes on purpose, rewrite the record with `pytest --update-fixtures` (and say
why in the commit); a reviewer sees which cases changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from pathlib import Path

import pytest

import optgraph as og
from optgraph.cli.report import compute_report
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from tests.cli.test_examples import EXAMPLES
from tests.support.parallel_models import PARALLEL_MODELS

RECORD = Path(__file__).with_name("compile_outputs.json")
PIPELINES = {
    "default": "default",
    "tp2": "tensor-parallel{ways=2},default",
    "pp2": "pipeline-parallel{stages=2},default",
    "streams8": "verify,dce,cse,fuse,assign-streams{max-streams=8},insert-sync,"
    "analyze-lifetimes,plan-memory,check-races",
    # then plan-prefetch{budget=3/4 of the peak device bytes},check-races: see _digest
    "split": "verify,dce,cse,fuse,assign-streams{max-streams=2},"
    "split-backends{cpu-ops=rope+silu+relu+gelu},insert-sync,analyze-lifetimes,plan-memory",
}
ONE_DEVICE_ONLY = ("diamond", "inception_block", "mlp")


def _models() -> dict[str, Graph]:
    models = dict(PARALLEL_MODELS)
    for name in ONE_DEVICE_ONLY:
        models[name] = og.parse_file(EXAMPLES / f"{name}.ir")
    return models


MODELS = _models()
CASES = [
    (model, pipeline)
    for model in MODELS
    for pipeline in PIPELINES
    if model not in ONE_DEVICE_ONLY or pipeline in ("default", "streams8")
]


def _digest(graph: Graph, pipeline: str) -> dict[str, str]:
    compiled = run_pipeline(graph, PIPELINES[pipeline])
    if pipeline == "split":  # weights streamed through a budget below what they need
        budget = compute_report(compiled).peak_device_bytes
        assert budget is not None
        compiled = run_pipeline(compiled, f"plan-prefetch{{budget={budget * 3 // 4}}},check-races")
    report = compute_report(compiled).to_dict()
    report.pop("compile_seconds")
    return {
        "ir": hashlib.sha256(og.print_graph(compiled).encode()).hexdigest(),
        "report": hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest(),
    }


def _recorded() -> dict[str, dict[str, str]]:
    if not RECORD.exists():
        return {}
    recorded: dict[str, dict[str, str]] = json.loads(RECORD.read_text())
    return recorded


@pytest.mark.parametrize(("model", "pipeline"), CASES)
def test_compile_outputs_are_the_recorded_ones(
    model: str, pipeline: str, update_fixtures: bool
) -> None:
    key = f"{model} | {pipeline}"
    got = _digest(MODELS[model], pipeline)
    if update_fixtures:
        with RECORD.open("a+") as handle:  # one case at a time: pytest -n runs several at once
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            recorded = json.loads(handle.read() or "{}")
            recorded[key] = got
            handle.truncate(0)
            handle.write(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        return
    assert got == _recorded().get(key), f"{key}: the compiled IR or report changed"
