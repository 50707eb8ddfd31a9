"""Quantized weights run by the CPU kernels inside programs: the planned executor with
`quantized="native"` (a decode step over every block type, and a small GGUF llama with all eight
types in one file) and the CPU nodes of a split program in the CUDA runtime (fake CuPy).

Each run checks that no whole weight is dequantized (the reference's `dequantize_operands`, its
only path to whole dequantization, raises if called) and compares with the reference
interpreter: gathers and dequantize are its bits, products differ only in the order of their
f32 sums (within 1e-4 of the largest value; seen 3.0e-6 on GGUF logits up to 5.2), the
greedy tokens are equal.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.ir.graph import QUANT_BLOCKS, Node, TensorType
from optgraph.passes.manager import run_pipeline
from optgraph.reference import interpreter
from optgraph.reference.dequantize import random_blocks
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import execute
from tests.support.fake_cupy import fake_cupy

DECODE = Path(__file__).resolve().parents[1] / "fixtures" / "quantized_decode.ir"
BOUND = 1e-4


def _refuse_whole_dequantization(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on (after the oracle ran), a whole dequantization fails the test."""

    def refuse(node: Node, *_: Any) -> None:
        raise AssertionError(f"'%{node.name}' ({node.op}) dequantized its operands whole")

    monkeypatch.setattr(interpreter, "dequantize_operands", refuse)


def _close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, value in want.items():
        a, b = np.asarray(got[name], np.float64), np.asarray(value, np.float64)
        assert a.shape == b.shape, name
        assert np.abs(a - b).max() <= BOUND * max(1.0, np.abs(b).max()), name


def test_the_decode_step_in_every_interleaving(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = og.parse_file(DECODE)
    inputs = random_inputs(graph, seed=3) | {"ids": np.array([17], np.int32)}
    weights = random_weights(graph, seed=3)
    want = run_reference(graph, inputs, weights)
    program = og.compile(graph, "default", target="cpu").program
    _refuse_whole_dequantization(monkeypatch)
    runs = [
        execute(program, inputs, weights, seed=seed, quantized="native", threads=threads)
        for seed, threads in ((0, 1), (1, 2), (None, 3))
    ]
    for run in runs[1:]:  # the same bits whatever the interleaving or thread count
        assert np.array_equal(run.outputs["logits"], runs[0].outputs["logits"])
    _close(runs[0].outputs, want)


def test_an_unknown_mode_is_refused() -> None:
    program = og.compile(og.parse_file(DECODE), "default", target="cpu").program
    with pytest.raises(ValueError, match="quantized: expected one of reference, native"):
        execute(program, {}, {}, quantized="fast")


# -- a GGUF llama with every block type ---------------------------------------------------------

# Each matrix of the file in its own type (rows of 256 values, whole blocks of every type).
GGUF_TYPES = {
    "token_embd.weight": "Q4_K",
    "blk.0.attn_q.weight": "Q8_0",
    "blk.0.attn_k.weight": "Q4_0",
    "blk.0.attn_v.weight": "Q6_K",
    "blk.0.attn_output.weight": "Q4_1",
    "blk.0.ffn_gate.weight": "Q5_0",
    "blk.0.ffn_up.weight": "MXFP4",
    "blk.0.ffn_down.weight": "Q5_K",
    "output.weight": "Q6_K",
}


def _add_random_blocks(w: Any, name: str, a: np.ndarray, ftype: str) -> None:
    import gguf

    if a.ndim == 1:
        w.add_tensor(name, a.astype(np.float32))
        return
    qtype = gguf.GGMLQuantizationType[GGUF_TYPES[name]]
    t = TensorType(qtype.name.lower(), tuple(a.shape))
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    data = random_blocks(rng, t, 1.0 / math.sqrt(a.shape[-1]))
    w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def _gguf_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from tests.frontends import gguf_models

    sizes = {"hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 1}
    model = gguf_models.hf_model("llama", **sizes)
    with monkeypatch.context() as patch:
        patch.setattr(gguf_models, "_add_tensor", _add_random_blocks)
        return gguf_models.write_gguf(model, tmp_path / "mixed.gguf", "llama", "Q4_K")


def test_a_gguf_llama_planned_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optgraph.frontends.gguf import from_gguf

    graph, weights = from_gguf(_gguf_llama(tmp_path, monkeypatch), cache_len=16, seq=4)
    types = graph.value_types()
    assert {types[name].dtype for name in GGUF_TYPES} == set(QUANT_BLOCKS)
    inputs = random_inputs(graph, seed=0)
    want = run_reference(graph, inputs, weights)
    program = og.compile(graph, "default", target="cpu").program
    _refuse_whole_dequantization(monkeypatch)
    got = execute(program, inputs, weights, quantized="native").outputs
    _close(got, want)
    logits = graph.output_names()[0]
    assert np.array_equal(got[logits].argmax(-1), want[logits].argmax(-1))


# -- CPU nodes of a split program ---------------------------------------------------------------

SPLIT = """graph q {
  input %x : f16[2,256]
  input %ids : i32[3]
  weight %w : q4_k[40,256]
  weight %emb : q8_0[6,64]
  weight %table : q5_0[8,64]
  %p = matmul(%x, %w) {transpose_b = true} : f16[2,40]
  %e = get_rows(%emb, %ids) : f32[3,64]
  %s = exp(%e) : f32[3,64]
  %v = dequantize(%table) {dtype = "bf16"} : bf16[8,64]
  output %p, %s, %v
}
"""


def test_cpu_nodes_of_a_split_program_run_the_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every node on the CPU (the fake CuPy computes nothing): the outputs are the host
    functions' own, through the kernels (an f16 product, a gather, a bf16 dequantize)."""
    graph = og.parse(SPLIT)
    pipeline = "split-backends{cpu-ops=get_rows+matmul+exp+dequantize},insert-sync"
    split = run_pipeline(graph, f"{pipeline},analyze-lifetimes,plan-memory")
    assert all(n.ann.backend == "cpu" for n in split.nodes if not n.is_event)
    inputs, weights = random_inputs(graph, seed=1), random_weights(graph, seed=2)
    inputs["ids"] = np.array([5, 0, 2], np.int32)
    want = run_reference(graph, inputs, weights)
    _refuse_whole_dequantization(monkeypatch)
    with fake_cupy(monkeypatch):
        program = cuda_program(split, weights=weights)
        got = program.run(inputs)
        program.close()
    assert np.array_equal(np.asarray(got["s"]), want["s"])
    assert np.array_equal(np.asarray(got["v"]).view(np.uint16), want["v"].view(np.uint16))
    # f16 results: the two f32 sums round to f16 alike or one f16 step apart
    p, q = np.asarray(got["p"], np.float32), want["p"].astype(np.float32)
    assert np.all(np.abs(p - q) <= np.abs(np.spacing(q.astype(np.float16))).astype(np.float32))


def test_a_compiled_cpu_program_runs_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """`og.compile(..., target="cpu").run` (what `optgraph run` and the API use) takes the
    compiled kernels: no whole weight dequantized, the reference's values within the bound."""
    graph = og.parse_file(DECODE)
    inputs = random_inputs(graph, seed=5) | {"ids": np.array([3], np.int32)}
    weights = random_weights(graph, seed=5)
    want = run_reference(graph, inputs, weights)
    compiled = og.compile(graph, "default", target="cpu")
    _refuse_whole_dequantization(monkeypatch)
    _close(compiled.run(inputs, weights), want)
