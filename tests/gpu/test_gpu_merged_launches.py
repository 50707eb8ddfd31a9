"""Merged launches on the GPU: every example, a 2-layer Llama decode (f16, f32, default pipeline and
one stream) and split-K products, merged and unmerged, against the reference.

On the GPU the members of a merged launch run concurrently, so a member that touched another's
bytes would show here (and not in the CPU emulator, which runs blocks one after another): the merged
program must give the very bits of the unmerged one, replay after replay.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import KernelStep
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse
from optgraph.reference.kernels import ir_dtype
from tests.support.gpu_support import reference, require_gpu, same_bits
from tests.support.op_cases import SPLIT_K

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.runtime.cuda.runner import CHECK_BOUNDS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

ONE_STREAM = DEFAULT_PIPELINE.replace("assign-streams", "assign-streams{max-streams=1}")
CASES = [(p.stem, "default") for p in sorted((ROOT / "examples").glob("*.ir"))]
CASES += [(f"gen_llama_{d}", p) for d in ("f16", "f32") for p in ("default", "one-stream")]
CASES += [("split_k_products", "default")]
REPLAYS = 20


def _source(name: str) -> og.Graph:
    if name == "split_k_products":
        return og.parse(SPLIT_K)
    if name.startswith("gen_llama_"):
        return og.parse(generate_llama(layers=2, dtype=name.removeprefix("gen_llama_")))
    return og.parse_file(ROOT / "examples" / f"{name}.ir")


@pytest.mark.parametrize(("name", "pipeline"), CASES, ids=[f"{n}-{p}" for n, p in CASES])
def test_merged_launches_match_unmerged_bits_and_reference(name: str, pipeline: str) -> None:
    source = _source(name)
    inputs, weights, want = reference(source)
    graph = run_pipeline(source, ONE_STREAM if pipeline == "one-stream" else "default")
    results, launches = {}, {}
    for merge in (False, True):
        program = cuda_program(
            graph, weights=weights, options=LoweringOptions(merge_launches=merge)
        )
        first = program.run(inputs)
        for _ in range(REPLAYS):
            assert same_bits(first, program.run(inputs)), f"merge={merge}: a replay differs"
        assert program.counters.captures == 1 and program.counters.replays == REPLAYS
        launches[merge] = program.plan().count(KernelStep)
        results[merge] = first
        program.close()
    for out, w in want.items():
        bound = CHECK_BOUNDS.get(ir_dtype(np.asarray(w).dtype))
        got = np.asarray(results[True][out])
        if bound is None:
            assert np.array_equal(got, w), f"%{out} differs from the reference"
        else:
            err = nmse(got.astype(np.float64), np.asarray(w).astype(np.float64))
            assert err <= bound, f"%{out}: nmse {err:.3e} > {bound:g}"
    assert same_bits(results[True], results[False]), "merged launches changed the results"
    assert launches[True] <= launches[False]
    if name.startswith("gen_llama") or name in {"gpt2_block", "split_k_products"}:
        assert launches[True] < launches[False]
