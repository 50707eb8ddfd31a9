"""fuse-siblings: semantics kept on random graphs and real decodes, one kernel per region.

Fixtures in tests/fixtures/fuse-siblings/ pin each behaviour (q/k/v concat, gate/up pair,
epilogue regions, the blocking rules); this file checks that the reference result of the fused
graph equals the unfused one, that regions plan as `siblings` and lower to exactly one kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.fusion_rules import SIBLINGS, plan_body
from optgraph.codegen.lower_cuda import GemmStep, KernelStep, lower_cuda
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.fuse_siblings import FuseSiblingsPass
from optgraph.passes.manager import DEFAULT_PIPELINE, parse_pipeline, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

LLAMA = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 64}


def _same_results(before: Graph, after: Graph, seed: int = 0) -> None:
    inputs, weights = random_inputs(before, seed), random_weights(before, seed)
    want = run_reference(before, inputs, weights)
    got = run_reference(after, inputs, {w.name: weights[w.name] for w in after.weights})
    assert list(got) == list(want)
    for name, value in want.items():
        np.testing.assert_allclose(
            got[name].astype(np.float64), value.astype(np.float64), rtol=1e-6, atol=1e-6
        )


def _siblings(graph: Graph) -> list[str]:
    types = graph.value_types()
    return [
        n.name
        for n in graph.nodes
        if n.body is not None and plan_body(n.body, [types[o] for o in n.operands]).kind == SIBLINGS
    ]


def test_llama_decode_example_agrees_with_unfused() -> None:
    graph = og.parse_file(str(ROOT / "examples" / "llama_decode.ir"))
    after = run_pipeline(graph, "fuse{row-prologues=false},fuse-siblings")
    assert _siblings(after)
    _same_results(graph, after, seed=1)


def test_generated_decode_agrees_and_fuses_qkv_and_gate_up() -> None:
    graph = og.parse(generate_llama(**LLAMA, dtype="f32"))
    after = run_pipeline(graph, "fuse{row-prologues=false},fuse-siblings")
    assert sorted(_siblings(after)) == sorted(
        f"l{i}.{name}" for i in range(2) for name in ("q.siblings", "gated")
    )
    _same_results(graph, after)


WITH_SIBLINGS = DEFAULT_PIPELINE.replace(
    ",fuse,fuse-siblings{concat=false},", ",fuse{row-prologues=false},fuse-siblings,"
)


def _layer_kernels(graph: Graph, pipeline: str) -> dict[str, int]:
    plan = lower_cuda(run_pipeline(graph, pipeline), merge_launches=False)
    counts: dict[str, int] = {}
    for step in plan.steps:
        if isinstance(step, KernelStep | GemmStep):
            counts[step.node] = counts.get(step.node, 0) + 1
    return counts


def test_each_siblings_region_is_one_kernel() -> None:
    """q/k/v and gate/up become one kernel each: 11 launches a layer, where the default pipeline
    (norms recomputed inside each product instead, and the q and k products doing their ropes:
    `qkv_folds`, here with copying cache writes) has 10 (launches not merged, to count them)."""
    graph = og.parse(generate_llama(**LLAMA, dtype="f16"))
    counts = _layer_kernels(graph, WITH_SIBLINGS)
    assert counts["l0.q.siblings"] == 1 and counts["l0.gated"] == 1
    assert sum(c for node, c in counts.items() if node.startswith("l0.")) == 11
    default = _layer_kernels(graph, DEFAULT_PIPELINE)
    assert sum(c for node, c in default.items() if node.startswith("l0.")) == 10


PAIR_AND_CONCAT = """graph pair_and_concat {
  input %x : f16[1,64]
  weight %wq : f16[64,64]
  weight %wk : f16[64,32]
  weight %wg : f16[64,128]
  weight %wu : f16[64,128]
  %q = matmul(%x, %wq) : f16[1,64]
  %k = matmul(%x, %wk) : f16[1,32]
  %gate = matmul(%x, %wg) : f16[1,128]
  %up = matmul(%x, %wu) : f16[1,128]
  %act = silu(%gate) : f16[1,128]
  %gated = mul(%act, %up) : f16[1,128]
  %qs = softmax(%q) : f16[1,64]
  %ks = softmax(%k) : f16[1,32]
  output %qs, %ks, %gated
}
"""


def test_default_pipeline_makes_pairs_but_no_concat_groups() -> None:
    """The default pipeline runs `fuse-siblings{concat=false}`: SwiGLU's gate and up become one
    region (measured faster on an H100), q and k stay apart (concat groups measured slower)."""
    (siblings,) = [p for p in parse_pipeline("default") if p.name == "fuse-siblings"]
    assert isinstance(siblings, FuseSiblingsPass) and not siblings.concat
    graph = og.parse(PAIR_AND_CONCAT)
    after = run_pipeline(graph, "default")
    by_name = {n.name: n for n in after.nodes}
    gated = by_name["gated"]
    assert gated.body is not None
    assert sorted(n.name for n in gated.body.nodes if n.op == "matmul") == ["gate", "up"]
    assert "up" not in by_name and "q" in by_name and "k" in by_name
    assert not any(n.op in ("slice", "concat") for n in after.nodes)
    both = run_pipeline(graph, "fuse,fuse-siblings")
    assert any(n.op == "slice" for n in both.nodes)  # the same graph does form a concat group
    _same_results(graph, after)


@st.composite
def _one_row_families(draw: st.DrawFn) -> Graph:
    """Products of one or two rows, with epilogues, pairs, outputs and views among the readers."""
    k = draw(st.sampled_from([8, 16]))
    lines = ["graph fam {", f"  input %x : f32[1,{k}]", f"  input %z : f32[1,{k}]"]
    body: list[str] = []
    outs: list[str] = []
    for i in range(draw(st.integers(2, 5))):
        row = draw(st.sampled_from(["x", "x", "z"]))
        n = 4 * draw(st.integers(1, 3))
        lines.append(f"  weight %w{i} : f32[{k},{n}]")
        body.append(f"  %m{i} = matmul(%{row}, %w{i}) : f32[1,{n}]")
        value = f"m{i}"
        kind = draw(st.sampled_from(["plain", "epilogue", "pair", "output", "view"]))
        if kind == "epilogue":
            body.append(f"  %e{i} = relu(%m{i}) : f32[1,{n}]")
            value = f"e{i}"
        if kind == "pair":
            lines.append(f"  weight %u{i} : f32[{k},{n}]")
            body.append(f"  %u{i}m = matmul(%{row}, %u{i}) : f32[1,{n}]")
            body.append(f"  %s{i} = silu(%m{i}) : f32[1,{n}]")
            body.append(f"  %g{i} = mul(%s{i}, %u{i}m) : f32[1,{n}]")
            value = f"g{i}"
        if kind == "output":
            outs.append(value)
            continue
        if kind == "view":
            body.append(f"  %r{i} = reshape(%{value}) {{shape = [{n}]}} : f32[{n}]")
            value = f"r{i}"
            shape = f"[{n}]"
        else:
            shape = f"[1,{n}]"
        body.append(f"  %o{i} = softmax(%{value}) : f32{shape}")
        outs.append(f"o{i}")
    graph = og.parse(
        "\n".join([*lines, *body, "  output " + ", ".join(f"%{o}" for o in outs), "}"])
    )
    verify(graph)
    return graph


@given(_one_row_families())
@settings(max_examples=examples(60))
def test_one_row_families_keep_results_and_outputs(graph: Graph) -> None:
    after = run_pipeline(graph, "fuse{row-prologues=false},fuse-siblings")
    _same_results(graph, after)
    assert og.parse(og.print_graph(after)) == after
    assert run_pipeline(after, "fuse-siblings") == after
    producers = {n.name: n for n in after.nodes}
    for name in after.output_names():  # graph outputs keep their own bytes
        assert producers[name].op != "slice"


@given(random_dag_graphs(max_nodes=14))
@settings(max_examples=examples(60))
def test_random_graphs_stay_valid_and_equal(graph: Graph) -> None:
    after = run_pipeline(graph, "fuse{row-prologues=false},fuse-siblings")
    verify(after)
    _same_results(graph, after)
