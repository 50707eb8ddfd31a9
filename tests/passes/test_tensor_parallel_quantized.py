"""tensor-parallel over quantized weights: a cut along the last (block) dimension keeps whole
blocks (the recipe cuts the stored bytes), a cut inside a block is refused (a matmul) or not made
(an embedding table stays whole); the split graph computes the original on emulated devices."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.passes.manager import run_pipeline
from optgraph.passes.tensor_parallel import shard_weights
from optgraph.reference.dequantize import dequantize
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference

# An embedding, then an MLP: gate/up column-parallel (rows of [N,K] cut), down row-parallel
# (its K, the last and blocked dimension, cut).
MLP = """graph mlp {{
  input %ids : i32[2]
  weight %emb : {table}[16,{d}]
  weight %gate : q8_0[{f},{d}]
  weight %up : q4_0[{f},{d}]
  weight %down : {down}[{d},{f}]
  weight %norm : f32[{d}]
  %e = get_rows(%emb, %ids) : f32[2,{d}]
  %h = rms_norm(%e, %norm) : f32[2,{d}]
  %g = matmul(%h, %gate) {{transpose_b = true}} : f32[2,{f}]
  %u = matmul(%h, %up) {{transpose_b = true}} : f32[2,{f}]
  %s = silu(%g) : f32[2,{f}]
  %m = mul(%s, %u) : f32[2,{f}]
  %y = matmul(%m, %down) {{transpose_b = true}} : f32[2,{d}]
  output %y
}}
"""


def _graph(table: str = "q8_0", down: str = "q6_k", d: int = 256, f: int = 512) -> og.Graph:
    return og.parse(MLP.format(table=table, down=down, d=d, f=f))


@pytest.mark.parametrize("ways", [2])
def test_block_aligned_cuts_compute_the_original(ways: int) -> None:
    graph = _graph()
    split = run_pipeline(graph, f"tensor-parallel{{ways={ways}}}")
    types = {w.name: w.type for w in split.weights}
    assert str(types["down.d0"]) == "q6_k[256,256]"  # K = 512 cut in two, whole blocks
    assert str(types["gate.d1"]) == "q8_0[256,256]"  # N = 512 cut by rows
    assert str(types["emb.d0"]) == "q8_0[16,128]"  # the table along its hidden dimension
    inputs, weights = random_inputs(graph, 1), random_weights(graph, 1)
    pieces = shard_weights(graph, split, weights)
    # each piece holds exactly the blocks of its chunk of the whole weight
    whole = dequantize(weights["down"], "q6_k", (256, 512))
    for i in range(ways):
        piece = dequantize(pieces[f"down.d{i}"], "q6_k", (256, 256))
        assert np.array_equal(piece, whole[:, 256 * i : 256 * (i + 1)])
    want = run_reference(graph, inputs, weights)
    got = run_reference(split, inputs, pieces)
    assert nmse(got["y"], want["y"]) < 1e-12
    program = og.compile(graph, "default", target="cpu", devices=ways)
    ran = program.run(inputs, weights, seed=0)
    assert nmse(ran["y"], want["y"]) < 1e-12


def test_a_cut_inside_a_block_is_refused() -> None:
    graph = _graph(down="q4_k", f=256)  # 2 devices: K chunks of 128 in 256-element blocks
    with pytest.raises(VerifyError, match=r"tensor-parallel: 2 devices would cut quantized weight "
                       r"%down q4_k\[256,256\] along its last dimension into chunks of 128, "
                       r"inside its 256-element blocks"):  # fmt: skip
        run_pipeline(graph, "tensor-parallel{ways=2}")


def test_a_table_whose_blocks_cannot_be_shared_stays_whole() -> None:
    graph = _graph(table="q4_k", d=256, f=512)  # hidden 256: chunks of 128
    split = run_pipeline(graph, "tensor-parallel{ways=2}")
    assert "emb" in {w.name for w in split.weights}
    inputs, weights = random_inputs(graph, 2), random_weights(graph, 2)
    want = run_reference(graph, inputs, weights)
    got = run_reference(split, inputs, shard_weights(graph, split, weights))
    assert nmse(got["y"], want["y"]) < 1e-12
