"""Merged launches run end to end on the CPU: every example and a 2-layer Llama decode (f16, f32)
through the default pipeline (and one stream), the CudaPlan run in the emulator at its planned arena
offsets (tests/cuda_emulator.py `run_plan`) with merging on and off.

Both agree with the reference interpreter within `optgraph run --check`'s bounds, the merged plan
gives the very same bits as the unmerged one (the members compute exactly what they computed
alone), and where the plan has independent neighbours it has fewer launches. The emulator runs
blocks one after another, so it cannot show a race between members: that the merged members never
touch each other's bytes is the legality rule's business (tests/test_merge_launches.py) and the GPU
test's (tests/gpu/test_gpu_merged_launches.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import KernelStep, lower_cuda
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.reference.kernels import ir_dtype
from optgraph.runtime.cuda.runner import CHECK_BOUNDS
from tests.support import cuda_emulator
from tests.support.op_cases import SPLIT_K

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

ONE_STREAM = DEFAULT_PIPELINE.replace("assign-streams", "assign-streams{max-streams=1}")
CASES = [(p.stem, "default") for p in sorted((ROOT / "examples").glob("*.ir"))] + [
    ("gen_llama_f16", "default"),
    ("gen_llama_f32", "default"),
    ("gen_llama_f16", "one-stream"),
    ("split_k_products", "default"),
]
MERGES = {"gpt2_block", "moe_block", "llama_decode", "gen_llama_f16", "gen_llama_f32"}
MERGES |= {"split_k_products"}
# The default run's sample (two builds each): an example with merges, the q/k/v members on one
# stream, split-K workspaces; `pytest -m slow` runs every other case.
SAMPLE = {("llama_decode", "default"), ("gen_llama_f16", "one-stream")}
SAMPLE |= {("split_k_products", "default")}
PARAMS = [
    pytest.param(n, p, id=f"{n}-{p}", marks=() if (n, p) in SAMPLE else pytest.mark.slow)
    for n, p in CASES
]


def _source(name: str) -> og.Graph:
    if name == "split_k_products":
        return og.parse(SPLIT_K)
    if name.startswith("gen_llama_"):
        return og.parse(generate_llama(layers=2, dtype=name.removeprefix("gen_llama_")))
    return og.parse_file(ROOT / "examples" / f"{name}.ir")


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, name
        bound = CHECK_BOUNDS.get(ir_dtype(w.dtype))
        if bound is None:
            assert np.array_equal(g, w), f"%{name} differs from the reference"
        else:
            err = nmse(g.astype(np.float64), w.astype(np.float64))
            assert err <= bound, f"%{name}: nmse {err:.3e} > {bound:g}"


@pytest.mark.parametrize(("name", "pipeline"), PARAMS)
def test_merged_plan_matches_reference_and_unmerged_plan(name: str, pipeline: str) -> None:
    source = _source(name)
    graph = run_pipeline(source, ONE_STREAM if pipeline == "one-stream" else "default")
    inputs, weights = random_inputs(source, seed=0), random_weights(source, seed=0)
    want = run_reference(source, inputs, weights)
    alone = lower_cuda(graph, merge_launches=False)
    merged = lower_cuda(graph)
    got_alone = cuda_emulator.run_plan(alone, inputs, weights)
    _assert_close(got_alone, want)
    if merged.steps == alone.steps:
        assert name not in MERGES, "expected merged launches"
        return
    assert merged.count(KernelStep) < alone.count(KernelStep)
    got = cuda_emulator.run_plan(merged, inputs, weights)
    for out in want:
        assert np.array_equal(got[out], got_alone[out]), f"%{out}: merged bits differ"
    _assert_close(got, want)
    if name == "split_k_products":
        (step,) = [s for s in merged.steps if isinstance(s, KernelStep)]
        assert step.members == ("a", "b", "c")
        assert sum(1 for k in alone.kernels.values() if k.decls) == 2  # two workspaces
    if name.startswith("gen_llama") and pipeline == "one-stream":
        members = {s.members for s in merged.steps if isinstance(s, KernelStep)}
        assert {("l0.q", "l0.k", "l0.v"), ("l1.q", "l1.k", "l1.v")} <= members
