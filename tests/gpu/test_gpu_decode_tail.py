"""The ends of a decode step on the GPU (argmax_folds.ARGMAX_CAST, ARGMAX_IN_PRODUCT,
gathered_rows.GATHER_ROWS): the decode loop's step bound with its caches in place, with each
setting on, gives the same bits as with none (the tokens, positions and caches), replay after
replay and after the bound token changes (the argmax counter is reset by each launch), with a
token id out of range too (zero rows); with none, f32 tokens equal the reference's. The
settings' nodes issue nothing."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from optgraph.codegen.lower_cuda import KernelStep
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.decode_loop_graph import loop_step_graph
from tests.support.gpu_support import outputs_in_place, require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import cupy as cp

from optgraph.api.programs import cuda_program

SETTINGS = {
    "cast": ("decode.argmax_folds", "ARGMAX_CAST"),
    "product": ("decode.argmax_folds", "ARGMAX_IN_PRODUCT"),
    "gather": ("decode.gathered_rows", "GATHER_ROWS"),
}
CASES = [("cast",), ("product",), ("gather",), ("cast", "product", "gather")]
SIZES = {"layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 1024,
         "cache_len": 32}  # fmt: skip


@contextmanager
def settings(*on: str) -> Iterator[None]:
    modules = {
        k: importlib.import_module(f"optgraph.codegen.{m}") for k, (m, _) in SETTINGS.items()
    }
    saved = {k: getattr(modules[k], name) for k, (_, name) in SETTINGS.items()}
    try:
        for key, (_, name) in SETTINGS.items():
            setattr(modules[key], name, key in on)
        yield
    finally:
        for key, (_, name) in SETTINGS.items():
            setattr(modules[key], name, saved[key])


def _runs(planned, weights, inputs, tokens, *on: str) -> tuple[list[dict], set[str], int]:
    """(outputs after each call, the nodes that issued a launch, launches a step): three calls
    with the first token, then one with each of `tokens`."""
    with settings(*on):
        program = cuda_program(planned, weights=weights)
        dev = {k: cp.asarray(v) for k, v in inputs.items()}
        out = outputs_in_place(planned, dev)
        step = program.bind(dev, out)
        runs = []
        for token in [inputs["tokens"][0]] * 3 + list(tokens):
            dev["tokens"][...] = token
            step()
            program.stream.synchronize()
            runs.append({n: cp.asnumpy(a) for n, a in out.items()})
        plan = step.bound.variant.plan
    launches = [s for s in plan.steps if isinstance(s, KernelStep)]
    return runs, {n for s in launches for n in s.members}, len(launches)


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_each_setting_gives_the_same_bits(dtype: str) -> None:
    graph = loop_step_graph(dtype, **SIZES)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    inputs["one"][:] = 1
    inputs["pos"][:] = 20
    inputs["kv_len"][:] = 21
    inputs["tokens"][:] = 7
    vocab = SIZES["vocab"]
    tokens = [8, vocab + 3, -2]
    plain, issued, count = _runs(planned, weights, inputs, tokens)
    if dtype == "f32":
        want = run_reference(graph, inputs, weights)
        assert np.array_equal(plain[0]["next_token"], want["next_token"])
    for case in CASES:
        runs, nodes, launches = _runs(planned, weights, inputs, tokens, *case)
        for got, base in zip(runs, plain, strict=True):
            for name in base:
                assert got[name].tobytes() == base[name].tobytes(), (case, name)
        if "product" in case:
            assert not {"next_token64", "next_token"} & nodes and launches < count
        if "cast" in case:
            assert "next_token" not in nodes
        if "gather" in case:
            assert "h0" not in nodes and "h0" in issued and launches < count
