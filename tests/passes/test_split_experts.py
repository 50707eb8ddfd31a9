"""split-experts with split-backends: some experts of each moe on the CPU. Planned programs (the
race checker in the pipeline) run in the planned executor at their arena offsets, in random
stream interleavings, equal to the reference of the unsplit graph on the user's whole arrays, for
f32 and quantized stacks; the fewest host synchronizations (one wait a layer, x and the logits
copied once, the result once, the GPU part issued before the host waits); the pieces cut from
the user's arrays; `optgraph compile` and `optgraph run --device cpu --check` on such a graph."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from optgraph.analysis.races import find_races
from optgraph.cli.main import main
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.steps import EventStep, HostStep, KernelStep
from optgraph.errors import OptGraphError
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_backends import host_stream
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.codegen.test_moe_parts_emulated import BIASED
from tests.support.offload_models import run_planned

PLAN = (
    "split-experts{{{options}}},assign-streams{{max-streams=2}},split-backends,insert-sync,"
    "analyze-lifetimes,plan-memory,check-races"
)
E = 8


def moe_model(
    layers: int = 2,
    tokens: int = 1,
    k: int = 2,
    stacks: tuple[str, str, str] = ("f32", "f32", "f32"),
    hidden: int = 64,
    ffn: int = 32,
) -> og.Graph:
    """A residual stack of MoE layers: rms_norm, router, moe (its stacks of `stacks`' dtypes)."""
    g, u, d = stacks
    lines = [f"  input %x : f32[{tokens},{hidden}]"]
    for i in range(layers):
        lines += [
            f"  weight %l{i}.norm : f32[{hidden}]",
            f"  weight %l{i}.router : f32[{E},{hidden}]",
            f"  weight %l{i}.gate : {g}[{E},{ffn},{hidden}]",
            f"  weight %l{i}.up : {u}[{E},{ffn},{hidden}]",
            f"  weight %l{i}.down : {d}[{E},{hidden},{ffn}]",
        ]
    t, logits = f"f32[{tokens},{hidden}]", f"f32[{tokens},{E}]"
    x = "x"
    for i in range(layers):
        stacks_of = f"%l{i}.gate, %l{i}.up, %l{i}.down"
        lines += [
            f"  %l{i}.h = rms_norm(%{x}, %l{i}.norm) : {t}",
            f"  %l{i}.logits = matmul(%l{i}.h, %l{i}.router) {{transpose_b = true}} : {logits}",
            f"  %l{i}.m = moe(%l{i}.h, %l{i}.logits, {stacks_of}) {{k = {k}, norm_topk = true}} : {t}",
            f"  %l{i}.y = add(%{x}, %l{i}.m) : {t}",
        ]
        x = f"l{i}.y"
    graph = og.parse("graph moe_model {\n" + "\n".join(lines) + f"\n  output %{x}\n}}\n")
    og.verify(graph)
    return graph


def _planned(graph: og.Graph, options: str) -> og.Graph:
    return run_pipeline(graph, PLAN.format(options=options))


def _assert_planned_runs_equal_reference(
    source: og.Graph, planned: og.Graph, exact: bool, seeds: tuple[int | None, ...]
) -> None:
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=2)
    expected = run_reference(source, inputs, weights)
    pieces = expert_weights(source, planned, weights)
    for seed in seeds:
        got = run_planned(planned, inputs, pieces, seed)
        for name, value in expected.items():
            assert np.abs(value).max() > 0.0
            if exact:
                assert got[name].tobytes() == value.tobytes(), (seed, name)
            else:
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("tokens", "k", "stacks", "hidden"),
    [
        (1, 2, ("f32", "f32", "f32"), 64),
        (3, 2, ("q8_0", "q8_0", "q8_0"), 64),
        (2, 2, ("q4_k", "q4_k", "q8_0"), 256),
        (4, 3, ("f32", "f16", "f32"), 64),
    ],
)
def test_cpu_experts_run_equal_to_the_reference_in_any_interleaving(
    tokens: int, k: int, stacks: tuple[str, str, str], hidden: int
) -> None:
    """Bit for bit with k = 2 (a token's two terms add in either order), within f32 rounding
    of the reordered sum with k = 3."""
    source = moe_model(tokens=tokens, k=k, stacks=stacks, hidden=hidden)
    planned = _planned(source, "cpu-experts=3")
    moes = {n.name: n for n in planned.nodes if n.op == "moe"}
    assert {n.ann.backend for n in moes.values()} == {"cpu", "cuda"}
    for i in range(2):
        assert moes[f"l{i}.m.e0_5"].ann.backend == "cuda"
        assert moes[f"l{i}.m.e5_8"].ann.backend == "cpu"
    assert find_races(planned) == []
    _assert_planned_runs_equal_reference(source, planned, k <= 2, (None, 0, 1, 2, 3))


def test_first_moe_layers_whole_on_the_cpu() -> None:
    """cpu-moe=1 (llama.cpp's --n-cpu-moe 1): layer 0's moe on the CPU reading the user's whole
    stacks; layer 1's on the GPU; bit-identical to the reference."""
    source = moe_model(tokens=2)
    planned = _planned(source, "cpu-moe=1")
    placed = {n.name: n.ann.backend for n in planned.nodes if n.op == "moe"}
    assert placed == {"l0.m": "cpu", "l1.m": "cuda"}
    host = {w.name for w in planned.weights if w.placement == "host"}
    assert host == {"l0.gate", "l0.up", "l0.down"}
    _assert_planned_runs_equal_reference(source, planned, True, (None, 0, 1))


def test_fewest_synchronizations_and_the_gpu_part_first() -> None:
    """Per layer: x and the logits copied to the host (one host wait, for the later copy), the
    CPU part's result copied back (one host event), only the sum waiting for it; the GPU part
    issued before the host's wait, so it overlaps the CPU part."""
    source = moe_model(layers=2)
    split = run_pipeline(source, "split-experts{cpu-experts=2},split-backends")
    host = host_stream(split)
    nodes = split.nodes
    at = {n.name: i for i, n in enumerate(nodes) if not n.is_event}
    host_waits = [i for i, n in enumerate(nodes) if n.op == "wait" and n.stream == host]
    host_records = [i for i, n in enumerate(nodes) if n.op == "record" and n.stream == host]
    assert len(host_waits) == 2 and len(host_records) == 2
    copies = sorted((n.operands[0], n.attrs["to"]) for n in nodes if n.op == "copy")
    want = []
    for i in range(2):
        want += [(f"l{i}.h", "cpu"), (f"l{i}.logits", "cpu"), (f"l{i}.m.e6_8", "cuda")]
    assert copies == sorted(want)
    for i, wait in enumerate(host_waits):
        assert at[f"l{i}.m.e0_6"] < wait < at[f"l{i}.m.e6_8"]
        readers = [n for n in nodes if f"l{i}.m.e6_8.cuda" in n.operands]
        assert [n.name for n in readers] == [f"l{i}.m"]
    # Two per layer (the host waits for x and the logits; the sum waits for the host): the
    # fewest this placement allows.
    assert host_device_waits(split) == min_host_device_syncs(split) == 4
    # Every ordering is an event edge: a missing host wait is a race.
    synced = run_pipeline(split, "insert-sync")
    assert find_races(synced) == []
    broken = synced.with_nodes(synced.nodes[: host_waits[0]] + synced.nodes[host_waits[0] + 1 :])
    assert find_races(broken)


def test_pieces_are_the_users_rows() -> None:
    source = moe_model(layers=1, stacks=("q8_0", "f32", "q8_0"))
    split = run_pipeline(source, "split-experts{cpu-experts=3}")
    weights = random_weights(source, seed=3)
    pieces = expert_weights(source, split, weights)
    assert pieces["l0.gate.e5_8"].tobytes() == weights["l0.gate"][5:8].tobytes()
    assert pieces["l0.down.e0_5"].tobytes() == weights["l0.down"][:5].tobytes()
    assert np.shares_memory(pieces["l0.up.e5_8"], weights["l0.up"])  # a view, no copy
    types = split.value_types()
    for w in split.weights:
        assert pieces[w.name].shape[0] == types[w.name].shape[0]


def test_a_compiled_program_cuts_the_pieces_once_per_set_of_arrays() -> None:
    source = moe_model(layers=1, tokens=2)
    pipeline = "split-experts{cpu-experts=4},assign-streams,split-backends,insert-sync"
    program = og.compile(source, pipeline, target="cpu")
    inputs, weights = random_inputs(source, seed=4), random_weights(source, seed=5)
    want = run_reference(source, inputs, weights)
    first = program._with_pieces(weights)
    assert program._with_pieces(weights) is first  # the same arrays: the same pieces
    for seed in (None, 1):
        got = program.run(inputs, weights, seed=seed)
        assert got["l0.y"].tobytes() == want["l0.y"].tobytes()
    other = {name: a * 2 for name, a in weights.items()}
    assert program._with_pieces(other) is not first


def test_cpu_experts_option_is_checked() -> None:
    with pytest.raises(OptGraphError, match="cpu-experts must be >= 0"):
        run_pipeline(moe_model(layers=1), "split-experts{cpu-experts=-1}")


def test_cli_compile_prints_the_placement_and_run_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "moe.ir"
    path.write_text(og.print_graph(moe_model(layers=2, tokens=2)))
    pipeline = "split-experts{cpu-experts=2},assign-streams,split-backends,insert-sync"
    assert main(["compile", str(path), "-p", pipeline]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["ops on cpu"] == "2"  # the two CPU parts
    assert rows["copies"] == "6"  # per layer: x and the logits in, the part's result out
    assert rows["races"] == "0"
    assert main(["opt", str(path), "-p", pipeline]) == 0
    placed = capsys.readouterr().out
    assert "experts = [6, 8], k = 2, norm_topk = true} : f32[2,64] !{stream = " in placed
    assert main(["run", str(path), "-p", pipeline, "--device", "cpu", "--check"]) == 0
    out = capsys.readouterr().out
    assert "bit-identical" in out and "ok" in out


def test_the_lowered_program_launches_the_gpu_part_before_the_host_works() -> None:
    """In the lowered steps (the order the CUDA runtime issues them), the GPU part's three moe
    kernels come before the host's one wait and its part: launched, they run while it works."""
    source = moe_model(layers=1)
    split = run_pipeline(
        source,
        "split-experts{cpu-experts=2},split-backends,insert-sync,analyze-lifetimes,plan-memory",
    )
    steps = lower_cuda(split).steps
    moe_kernels = [
        i for i, s in enumerate(steps) if isinstance(s, KernelStep) and "_moe_" in s.kernel
    ]
    (host,) = [i for i, s in enumerate(steps) if isinstance(s, HostStep)]
    assert len(moe_kernels) == 3 and moe_kernels[-1] < host
    between = steps[moe_kernels[-1] + 1 : host]
    assert len(between) == 1 and isinstance(between[0], EventStep)  # the host's wait


@settings(max_examples=12, deadline=None)
@given(
    experts=st.integers(2, 6),
    k=st.integers(1, 3),
    tokens=st.integers(1, 5),
    cpu=st.integers(1, 6),
    routing=st.sampled_from(["softmax_topk", "topk_softmax"]),
    seed=st.integers(0, 3),
)
def test_any_cut_runs_equal_to_the_reference(
    experts: int, k: int, tokens: int, cpu: int, routing: str, seed: int
) -> None:
    """Random expert counts, k, tokens, CPU experts and routing: the planned split program in a
    random interleaving equals the reference (bit for bit for k <= 2)."""
    k = min(k, experts)
    norm = ", norm_topk = true" if routing == "softmax_topk" else ""
    text = og.print_graph(moe_model(layers=1, tokens=tokens, k=k)).replace(f"[{E},", f"[{experts},")
    text = text.replace(f",{E}]", f",{experts}]").replace(", norm_topk = true", "")
    source = og.parse(text.replace(f"k = {k}}}", f'k = {k}, routing = "{routing}"{norm}}}'))
    og.verify(source)
    planned = _planned(source, f"cpu-experts={cpu}")
    parts = [n for n in planned.nodes if n.op == "moe"]
    assert len(parts) == (1 if cpu >= experts else 2)
    _assert_planned_runs_equal_reference(source, planned, k <= 2, (seed,))


@pytest.mark.parametrize(
    "pipeline",
    [
        (
            "verify,dce,cse,split-experts{cpu-experts=2},transpose-weights,fuse,"
            "assign-streams{max-streams=2},split-backends,insert-sync,analyze-lifetimes,"
            "plan-memory"
        ),
        (
            "verify,dce,cse,split-experts{cpu-experts=2},assign-streams{max-streams=2},"
            "split-backends,fuse,insert-sync,analyze-lifetimes,plan-memory"
        ),
    ],
)
def test_with_fusion_before_or_after_the_split(pipeline: str) -> None:
    """Fusion leaves the parts alone and may take their sum into the residual add; the program
    still equals the reference (these sums round as the reference's: bit for bit)."""
    source = moe_model(layers=2, tokens=3)
    planned = run_pipeline(source, pipeline)
    assert any(n.op == "fused" for n in planned.nodes)
    assert [n.ann.backend for n in planned.nodes if n.op == "moe"] == ["cuda", "cpu"] * 2
    assert find_races(planned) == []
    _assert_planned_runs_equal_reference(source, planned, True, (None, 0, 1))


def test_a_part_cut_again_takes_its_rows_from_its_first_expert() -> None:
    """A source moe holding experts 2..5 (its stacks' rows 0..3) with its last expert on the
    host: the pieces are rows 0..2 and 3 of the user's arrays, and the program equals the
    reference of the source."""
    text = re.sub(rf"\[{E},(\d+),(\d+)\]", r"[4,\1,\2]", og.print_graph(moe_model(1, 4)))
    source = og.parse(text.replace("{k = 2,", "{experts = [2, 6], k = 2,"))
    og.verify(source)
    planned = _planned(source, "cpu-experts=1")
    assert {w.name: w.type.shape[0] for w in planned.weights if ".e" in w.name} == {
        f"l0.{s}.{part}": 3 if part == "e2_5" else 1
        for s in ("gate", "up", "down")
        for part in ("e2_5", "e5_6")
    }
    weights = random_weights(source, seed=2)
    pieces = expert_weights(source, planned, weights)
    assert np.array_equal(pieces["l0.down.e5_6"], weights["l0.down"][3:4])
    _assert_planned_runs_equal_reference(source, planned, True, (None, 0))


def test_gpt_oss_experts_with_biases() -> None:
    """Biases follow their stacks (cut by expert); the clamped SwiGLU parts add up to the whole
    bit for bit (k = 2) in the planned program."""
    source = og.parse(BIASED)
    og.verify(source)
    planned = _planned(source, "cpu-experts=1")
    host = {w.name for w in planned.weights if w.placement == "host"}
    assert host == {"gate_up.e3_4", "down.e3_4", "gate_up_bias.e3_4", "down_bias.e3_4"}
    _assert_planned_runs_equal_reference(source, planned, True, (None, 0, 1))
