"""tensor-parallel cuts a KV-cache input by KV head where the ways divide the KV heads.

- The decode steps of llama_decode (2 KV heads) and of generated Llamas with 2 and 8 KV heads,
  2 and 4 ways where the ways divide the KV heads: no all_gather of the new k/v rows (per layer
  exactly the all_reduces after o and down; the embedding's and the logits' all_gathers, nothing
  else), each device's cache input and output piece holds KV/N heads, and the compiled program on
  the emulated devices (planned offsets, random interleavings), fed whole arrays, gives whole
  outputs equal to the single-device reference, caches included.
- Ways a multiple of the KV heads (grouped-query replication): k and v are computed whole on
  every device, the caches stay whole on every device, and the results still equal the reference.
- `shard_inputs` / `join_outputs` are inverse; a graph that is not tensor-parallel's passes whole.
- check-races still catches every removed wait of the split, multi-stream graph.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.races import find_races
from optgraph.ir.graph import Graph
from optgraph.passes.manager import plan_memory_if_missing, run_pipeline
from optgraph.passes.tensor_parallel import join_outputs, piece_layout, shard_inputs
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.cli.test_examples import gen_llama
from tests.passes.test_tensor_parallel import BOUNDS
from tests.support.parallel_models import PARALLEL_MODELS, dtype_of

GEN = {"hidden": 128, "heads": 8, "ffn": 256, "vocab": 256, "head_dim": 16, "mode": "decode"}
MODELS: dict[str, Graph] = {
    "llama_decode": PARALLEL_MODELS["llama_decode"],
    "gen_kv2": og.parse(gen_llama.generate_llama(**GEN, kv_heads=2), "gen_kv2"),  # type: ignore[arg-type]
    "gen_kv8": og.parse(gen_llama.generate_llama(**GEN, kv_heads=8), "gen_kv8"),  # type: ignore[arg-type]
}
SPLIT_CASES = [("llama_decode", 2), ("gen_kv2", 2), ("gen_kv8", 2), ("gen_kv8", 4)]
REPLICATED_CASES = [("llama_decode", 4), ("gen_kv2", 4)]  # ways a multiple of 2 KV heads
COLLECTIVES = ("all_reduce", "all_gather", "send", "recv")


def caches(graph: Graph) -> list[str]:
    return [i.name for i in graph.inputs if "cache" in i.name]


def layers(graph: Graph) -> int:
    return sum(1 for n in graph.nodes if n.op == "attention")


@pytest.mark.parametrize(("name", "ways"), SPLIT_CASES)
def test_caches_are_cut_by_kv_head_with_no_gather_of_the_new_rows(name: str, ways: int) -> None:
    graph = MODELS[name]
    split = run_pipeline(graph, f"tensor-parallel{{ways={ways}}}")
    ops = Counter(n.op for n in split.nodes if n.op in COLLECTIVES)
    assert ops == {"all_reduce": 2 * layers(graph), "all_gather": 2}  # o, down; embed, logits
    gathered = {n.name for n in split.nodes if n.op == "all_gather"}
    assert gathered == {"h0", "logits"}
    types = graph.value_types()
    inputs = {i.name: i for i in split.inputs}
    outputs = set(split.output_names())
    writes = {n.operands[0]: n for n in graph.nodes if n.op == "kv_cache_write"}
    for cache in caches(graph):
        kv_heads = types[cache].shape[1]
        assert cache not in inputs  # nowhere whole
        for i in range(ways):
            piece = inputs[f"{cache}.d{i}"]
            assert piece.ann.device == (i,)
            assert piece.type.shape == (*types[cache].shape[:1], kv_heads // ways,
                                        *types[cache].shape[2:])  # fmt: skip
            assert f"{writes[cache].name}.d{i}" in outputs
        assert writes[cache].name not in outputs
    assert og.parse(og.print_graph(split)) == split


@pytest.mark.parametrize(("name", "ways"), SPLIT_CASES + REPLICATED_CASES)
def test_emulated_devices_take_and_give_whole_arrays_equal_to_the_reference(
    name: str, ways: int
) -> None:
    graph = MODELS[name]
    program = og.compile(graph, "default", target="cpu", devices=ways)
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    want = run_reference(graph, inputs, weights)
    for seed in (0, 1):
        got = program.run(inputs, weights, seed=seed)
        assert list(got) == list(want)
        for out, value in want.items():
            assert got[out].shape == value.shape and got[out].dtype == value.dtype, out
            error = nmse(got[out].astype(np.float64), value.astype(np.float64))
            assert error <= BOUNDS[dtype_of(graph)], (out, error)
        for cache in caches(graph)[:2]:  # layer 0's new rows: no partial sum before them
            new = next(n.name for n in graph.nodes if n.operands[:1] == (cache,))
            assert got[new].tobytes() == want[new].tobytes(), new


@pytest.mark.parametrize(("name", "ways"), REPLICATED_CASES)
def test_fewer_kv_heads_than_devices_keep_whole_caches_written_on_every_device(
    name: str, ways: int
) -> None:
    """k and v are computed whole on every device here (each device's query heads read one KV
    head of them: the grouped-query replication), so each writes the whole cache: no rows to
    gather, no pieces."""
    graph = MODELS[name]
    split = run_pipeline(graph, f"tensor-parallel{{ways={ways}}}")
    inputs = {i.name: i for i in split.inputs}
    everywhere = tuple(range(ways))
    for cache in caches(graph):
        assert inputs[cache].ann.device == everywhere
    writes = [n for n in split.nodes if n.op == "kv_cache_write"]
    assert len(writes) == 2 * layers(graph) and all(n.devices == everywhere for n in writes)
    assert split.output_names() == graph.output_names()
    assert Counter(n.op for n in split.nodes)["all_gather"] == 2  # the embedding, the logits
    assert not piece_layout(graph, split).joins


def test_shard_inputs_and_join_outputs_are_inverse() -> None:
    graph = MODELS["gen_kv8"]
    split = run_pipeline(graph, "tensor-parallel{ways=4}")
    layout = piece_layout(graph, split)
    inputs = random_inputs(graph, 1)
    pieces = shard_inputs(graph, split, inputs, layout)
    assert list(pieces) == [i.name for i in split.inputs]
    assert np.array_equal(pieces["l0.k_cache.d2"], inputs["l0.k_cache"][:, 4:6])
    assert pieces["tokens"] is inputs["tokens"]  # whole inputs pass through, uncopied
    # Each cache output piece given back as its input piece: the joined outputs are the caches.
    writes = {n.name: n.operands[0] for n in graph.nodes if n.op == "kv_cache_write"}
    outputs = {"logits": np.zeros(1)}
    for write, cache in writes.items():
        outputs.update({f"{write}.d{i}": pieces[f"{cache}.d{i}"] for i in range(4)})
    assert set(outputs) == set(split.output_names())
    joined = join_outputs(graph, split, outputs, layout)
    assert list(joined) == list(graph.output_names())
    for write, cache in writes.items():
        assert np.array_equal(joined[write], inputs[cache]), write


def test_a_graph_placed_by_pipeline_parallel_passes_arrays_whole() -> None:
    graph = MODELS["llama_decode"]
    staged = run_pipeline(graph, "pipeline-parallel{stages=2}")
    layout = piece_layout(graph, staged)
    assert not layout.recipes and not layout.joins
    inputs = random_inputs(graph, 0)
    assert shard_inputs(graph, staged, inputs) == inputs
    outputs = {name: np.zeros(1) for name in graph.output_names()}
    assert join_outputs(graph, staged, outputs) == outputs


def test_every_removed_wait_of_the_split_graph_is_caught_by_check_races() -> None:
    pipeline = (
        "tensor-parallel{ways=2},assign-streams{policy=fanout,max-streams=3,min-branch-us=0},"
        "insert-sync,analyze-lifetimes,plan-memory"
    )
    planned = plan_memory_if_missing(run_pipeline(MODELS["llama_decode"], pipeline))
    assert find_races(planned) == []
    waits = [k for k, n in enumerate(planned.nodes) if n.op == "wait"]
    cache_writes = [n for n in planned.nodes if n.op == "kv_cache_write"]
    assert waits and all(len(n.devices) == 1 for n in cache_writes)
    for k in waits:
        mutant = planned.with_nodes(planned.nodes[:k] + planned.nodes[k + 1 :])
        assert find_races(mutant), planned.nodes[k].name


def test_a_cache_read_elsewhere_stays_whole_and_its_new_rows_are_gathered() -> None:
    """A cache input another node also reads (here: the step returns the old cache too) is not
    cut: every device holds it whole and the new k rows are gathered, as before."""
    text = og.print_graph(MODELS["llama_decode"])
    text = text.replace("output %logits,", "output %l0.k_cache, %logits,")
    graph = og.parse(text)
    split = run_pipeline(graph, "tensor-parallel{ways=2}")
    inputs = {i.name: i for i in split.inputs}
    assert inputs["l0.k_cache"].ann.device == (0, 1) and "l0.v_cache.d1" in inputs
    gathered = {n.name for n in split.nodes if n.op == "all_gather"}
    assert gathered == {"h0", "logits", "l0.k_t"}
    program = og.compile(graph, "default", target="cpu", devices=2)
    arrays, weights = random_inputs(graph, 2), random_weights(graph, 2)
    want = run_reference(graph, arrays, weights)
    got = program.run(arrays, weights, seed=3)
    assert all(nmse(got[k], want[k]) <= BOUNDS["f32"] for k in want)
