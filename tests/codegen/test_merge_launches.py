"""Merged launches (codegen/plan/merge_launches.py): the legality rules on hand-planned graphs, the
merged kernel's text, and properties on random scheduled graphs.

The end-to-end check (merged plans run in the CPU emulator at their planned offsets against the
reference interpreter) is in tests/test_merge_launches_emulated.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import optgraph as og
from optgraph.codegen.cuda_source import Kernel, kernels_source, make_kernel
from optgraph.codegen.lower_cuda import EventStep, KernelStep, lower_cuda
from optgraph.codegen.plan.merge_launches import MAX_MEMBERS, Group, conflict
from optgraph.codegen.plan.merged_kernel import merged_kernel
from optgraph.codegen.plan.plan_text import describe_plan, plan_json
from optgraph.ir.graph import Node, TensorType
from optgraph.passes.manager import run_pipeline
from tests.support.random_graphs import random_dag_graphs
from tests.support.scheduled_graphs import random_streams


def _kernels(text: str, merge: bool = True) -> list[KernelStep]:
    plan = lower_cuda(og.parse(text), merge_launches=merge)
    return [s for s in plan.steps if isinstance(s, KernelStep)]


def _members(text: str) -> list[tuple[str, ...]]:
    return [s.members for s in _kernels(text)]


def _graph(body: str, outputs: str) -> str:
    return f"graph g {{\n  input %x : f32[4,64]\n{body}  output {outputs}\n}}\n"


INDEPENDENT = _graph(
    "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
    "  %b = neg(%x) : f32[4,64] !{stream = 0, offset = 1024}\n"
    "  %c = tanh(%x) : f32[4,64] !{stream = 0, offset = 2048}\n",
    "%a, %b, %c",
)


def test_independent_kernels_of_a_stream_are_one_launch() -> None:
    steps = _kernels(INDEPENDENT)
    assert [s.members for s in steps] == [("a", "b", "c")]
    merged, alone = steps[0], _kernels(INDEPENDENT, merge=False)
    assert len(alone) == 3 and merged.node == "a" and merged.nodes == ("a", "b", "c")
    assert merged.grid == (sum(s.grid[0] for s in alone), 1, 1)
    assert merged.block == alone[0].block
    assert merged.args == tuple(a for s in alone for a in s.args)
    assert merged.kernel.startswith("og_merged_")


def test_a_dependent_pair_is_not_merged() -> None:
    text = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %b = neg(%a) : f32[4,64] !{stream = 0, offset = 1024}\n",
        "%b",
    )
    assert _members(text) == [("a",), ("b",)]


def test_a_dependence_through_a_view_is_not_merged() -> None:
    # %r aliases %a and issues nothing; %b reads %a through it.
    text = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %r = reshape(%a) {shape = [256]} : f32[256] !{stream = 0}\n"
        "  %b = neg(%r) : f32[256] !{stream = 0, offset = 1024}\n",
        "%b",
    )
    assert _members(text) == [("a",), ("b",)]


def test_an_event_between_blocks_the_merge() -> None:
    text = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  record ^e0 !{stream = 0}\n"
        "  %b = neg(%x) : f32[4,64] !{stream = 0, offset = 1024}\n"
        "  wait ^e0 !{stream = 1}\n"
        "  %c = tanh(%a) : f32[4,64] !{stream = 1, offset = 2048}\n",
        "%b, %c",
    )
    assert _members(text) == [("a",), ("b",), ("c",)]


def test_other_streams_may_interleave_and_the_merged_launch_takes_the_first_place() -> None:
    text = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %c = tanh(%x) : f32[4,64] !{stream = 1, offset = 2048}\n"
        "  %b = neg(%x) : f32[4,64] !{stream = 0, offset = 1024}\n",
        "%a, %b, %c",
    )
    steps = _kernels(text)
    assert [(s.members, s.stream) for s in steps] == [(("a", "b"), 0), (("c",), 1)]


def test_overlapping_planned_bytes_block_the_merge() -> None:
    # %r reads %a; %b gets %a's bytes (reused after %r on the stream): %r and %b are independent
    # in the graph, but merged, %b could overwrite %a before %r has read it.
    reuse = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %r = neg(%a) : f32[4,64] !{stream = 0, offset = 1024}\n"
        "  %b = tanh(%x) : f32[4,64] !{stream = 0, offset = 0}\n",
        "%r, %b",
    )
    assert _members(reuse) == [("a",), ("r",), ("b",)]
    assert _members(reuse.replace("offset = 0}\n  output", "offset = 2048}\n  output")) == [
        ("a",),
        ("r", "b"),
    ]
    # Writes into bytes another member writes are blocked too (%a is dead, its bytes reused).
    twice = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %s = slice(%x) {axis = 0, start = 0, end = 2} : f32[2,64] !{stream = 0}\n"
        "  %b = neg(%s) : f32[2,64] !{stream = 0, offset = 512}\n",
        "%b",
    )
    assert _members(twice) == [("a",), ("b",)]


def test_different_block_dims_block_the_merge() -> None:
    text = _graph(
        "  %a = exp(%x) : f32[4,64] !{stream = 0, offset = 0}\n"
        "  %s = softmax(%x) : f32[4,64] !{stream = 0, offset = 1024}\n"
        "  %b = neg(%x) : f32[4,64] !{stream = 0, offset = 2048}\n",
        "%a, %s, %b",
    )
    steps = _kernels(text, merge=False)
    assert steps[0].block != steps[1].block
    assert _members(text) == [("a",), ("s",), ("b",)]


def test_groups_hold_at_most_max_members() -> None:
    count = MAX_MEMBERS + 2
    body = "".join(
        f"  %v{i} = exp(%x) : f32[4,64] !{{stream = 0, offset = {1024 * i}}}\n"
        for i in range(count)
    )
    members = _members(_graph(body, ", ".join(f"%v{i}" for i in range(count))))
    assert [len(m) for m in members] == [MAX_MEMBERS, 2]


def test_a_workspace_kernel_joins_a_group_once() -> None:
    def kernel(decl: str) -> Kernel:
        return Kernel.assemble("og_k_1", ["float* out"], "  out[0] = 1.0f;", (decl,))

    def step(node: str, offset: int) -> KernelStep:
        return KernelStep(node, 0, "og_k_1", (1, 1, 1), (32, 1, 1), 0, (), (), ())

    with_ws = kernel("__device__ float og_ws_1[4];\n")
    group = Group(0)
    group.add(step("a", 0), with_ws)
    node = Node("b", "exp", (), {}, TensorType("f32", (1,)))
    assert (
        conflict(group, step("b", 0), with_ws, node) == "it shares a member's __device__ workspace"
    )
    plain = kernel("")
    group = Group(0)
    group.add(step("a", 0), plain)
    assert conflict(group, step("b", 0), plain, node) is None


def test_static_shared_memory_is_bounded() -> None:
    big = make_kernel("big", ["float* out"], "  __shared__ float s[8192];\n  out[0] = s[0];")
    assert big.shared_bytes == 32768
    group = Group(0)
    group.add(KernelStep("a", 0, big.name, (1, 1, 1), (32, 1, 1), 0, (), (), ()), big)
    other = make_kernel("other", ["float* out"], "  __shared__ float t[8192];\n  out[0] = t[0];")
    node = Node("b", "exp", (), {}, TensorType("f32", (1,)))
    step = KernelStep("b", 0, other.name, (1, 1, 1), (32, 1, 1), 0, (), (), ())
    assert conflict(group, step, other, node) == "too much static shared memory"
    unknown = make_kernel("dyn", ["float* out"], "  extern __shared__ float d[];\n  out[0] = d[0];")
    assert unknown.shared_bytes is None


def test_module_defines_each_declaration_and_member_function_once() -> None:
    ws = "__device__ float og_ws_7[8];\n"
    a = Kernel.assemble("og_a_1", ["float* out"], "  og_ws_7[0] = 1.0f; out[0] = 1.0f;", (ws,))
    b = make_kernel("b", ["float* out"], "  out[blockIdx.x] = (float)gridDim.x;")
    c = make_kernel("c", ["float* out"], "  out[0] = 2.0f;")
    m1 = merged_kernel([(a, (2, 1, 1)), (b, (3, 1, 1))])
    m2 = merged_kernel([(b, (3, 1, 1)), (c, (1, 1, 1))])
    text = kernels_source([a, m1, m2, b])
    assert text.count(ws) == 1
    assert text.count(f"void {b.name}_part(") == 1 and text.count(f"void {a.name}_part(") == 1
    assert text.count(f"void {a.name}(") == 1 and text.count(f"void {m1.name}(") == 1
    assert "out[og_block_idx.x] = (float)og_grid_dim.x;" in text
    assert m1.source.startswith(ws) and m1.name != m2.name
    assert merged_kernel([(a, (2, 1, 1)), (b, (3, 1, 1))]) == m1  # deterministic


def test_multi_dimensional_member_grids_rebuild_the_block_index() -> None:
    a = make_kernel("a", ["float* out"], "  out[blockIdx.y] = 1.0f;")
    b = make_kernel("b", ["float* out"], "  out[blockIdx.z] = 1.0f;")
    text = merged_kernel([(a, (4, 2, 1)), (b, (3, 2, 2))]).function
    assert "dim3{og_b % 4u, (og_b / 4u) % 2u, 0u}, dim3{4u, 2u, 1u}" in text
    assert "if (og_b < 8u)" in text
    assert "dim3{og_r % 3u, (og_r / 3u) % 2u, og_r / 6u}, dim3{3u, 2u, 2u}" in text


def test_describe_plan_and_json_show_the_members() -> None:
    plan = lower_cuda(og.parse(INDEPENDENT))
    assert "kernel %a+%b+%c og_merged_" in describe_plan(plan)
    (step,) = plan_json(plan)["steps"]  # type: ignore[misc]
    assert list(step["nodes"]) == ["a", "b", "c"] and step["kind"] == "kernel"
    assert sorted(plan.kernels) == [step["kernel"]]  # the members are not launched alone


def test_turned_off_every_kernel_is_its_own_launch() -> None:
    assert [s.members for s in _kernels(INDEPENDENT, merge=False)] == [("a",), ("b",), ("c",)]


# -- properties on random scheduled graphs ---------------------------------------------------------

PIPELINE = (
    "verify,dce,cse,fuse,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"
)


def _depends(graph: og.Graph) -> dict[str, set[str]]:
    """Every node's transitive operands (through views and nodes that issue nothing)."""
    seen: dict[str, set[str]] = {}
    for node in graph.nodes:
        if node.is_event:
            continue
        deps: set[str] = set()
        for o in node.operands:
            deps |= {o} | seen.get(o, set())
        seen[node.name] = deps
    return seen


@st.composite
def _wide_graphs(draw: st.DrawFn) -> og.Graph:
    """Elementwise nodes of one shape, each reading the input or earlier nodes at random (wide
    DAGs: many independent neighbours, and values that die early so plan-memory reuses bytes)."""
    lines = ["graph wide {", "  input %x : f32[4,8]"]
    names = ["x"]
    for i in range(draw(st.integers(2, 12))):
        a = draw(st.sampled_from(names))
        if draw(st.booleans()):
            op = draw(st.sampled_from(["exp", "neg", "tanh"]))
            lines.append(f"  %n{i} = {op}(%{a}) : f32[4,8]")
        else:
            b = draw(st.sampled_from(names))
            lines.append(f"  %n{i} = add(%{a}, %{b}) : f32[4,8]")
        names.append(f"n{i}")
    outs = draw(st.lists(st.sampled_from(names[1:]), min_size=1, max_size=3, unique=True))
    lines += [f"  output {', '.join('%' + o for o in outs)}", "}"]
    return og.parse("\n".join(lines) + "\n")


@given(
    st.one_of(random_dag_graphs(max_nodes=12), _wide_graphs()),
    st.integers(1, 3),
    st.integers(0, 2**16),
)
def test_merged_members_are_independent_disjoint_and_in_stream_order(
    graph: og.Graph, streams: int, seed: int
) -> None:
    scheduled = random_streams(run_pipeline(graph, "verify,dce"), streams, seed)
    planned = run_pipeline(scheduled, "analyze-lifetimes,plan-memory")
    alone = lower_cuda(planned, merge_launches=False)
    merged = lower_cuda(planned)
    depends = _depends(planned)
    for step in merged.steps:
        if not isinstance(step, KernelStep) or not step.nodes:
            continue
        assert 2 <= len(step.nodes) <= MAX_MEMBERS and len(set(step.nodes)) == len(step.nodes)
        for i, a in enumerate(step.nodes):
            for b in step.nodes[i + 1 :]:
                assert a not in depends[b] and b not in depends[a]
    # Per stream, the launches are the unmerged ones with each group collapsed, in order; the
    # other steps (events) are unchanged.
    for s in merged.streams:
        want = [x.node if isinstance(x, KernelStep) else x for x in alone.steps if x.stream == s]
        got: list[object] = []
        for x in merged.steps:
            if x.stream == s:
                got += list(x.members) if isinstance(x, KernelStep) else [x]
        assert got == want
    for x in merged.steps:
        if isinstance(x, KernelStep) and x.nodes:
            members = [a for a in alone.steps if isinstance(a, KernelStep) and a.node in x.nodes]
            for i, m in enumerate(members):
                for n in members[i + 1 :]:
                    assert not any(
                        w.overlaps(e) for w in m.writes or () for e in n.reads + n.writes
                    )
                    assert not any(
                        w.overlaps(e) for w in n.writes or () for e in m.reads + m.writes
                    )
    assert sum(isinstance(x, EventStep) for x in merged.steps) == alone.count(EventStep)


@pytest.mark.parametrize("layers", [2])
def test_llama_decode_merges_q_k_v_on_one_stream(layers: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gen_llama import generate_llama

    graph = run_pipeline(og.parse(generate_llama(layers=layers, dtype="f16")), PIPELINE)
    merged, alone = lower_cuda(graph), lower_cuda(graph, merge_launches=False)
    members = {s.members for s in merged.steps if isinstance(s, KernelStep)}
    for i in range(1, layers):
        assert (f"l{i}.q", f"l{i}.k", f"l{i}.v") in members
    # layer 0's products gather the embedding row themselves (gathered_rows): larger kernels,
    # merged in other groups, but none of them alone
    for name in ("l0.q", "l0.k", "l0.v"):
        assert any(name in group and len(group) > 1 for group in members), name
    assert merged.count(KernelStep) < alone.count(KernelStep)


# -- turning it off: runtime, og.compile, CLI ---------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_runtime_launches_merged_kernels_unless_turned_off(monkeypatch) -> None:
    from optgraph.reference.interpreter import random_inputs, random_weights
    from tests.support.fake_cupy import fake_cupy

    graph = run_pipeline(og.parse_file(EXAMPLES / "gpt2_block.ir"), "default")
    with fake_cupy(monkeypatch) as fake:
        from optgraph.api.programs import cuda_program
        from optgraph.codegen.lowering_options import LoweringOptions

        launched = {}
        for merge in (True, False):
            program = cuda_program(
                graph, weights=random_weights(graph), options=LoweringOptions(merge_launches=merge)
            )
            start = len(fake.launches)
            program.run(random_inputs(graph))  # eager: every kernel once
            launched[merge] = fake.launches[start:]
            plan = program.plan()
            assert launched[merge] == [s.kernel for s in plan.steps if isinstance(s, KernelStep)]
            assert any(n.startswith("og_merged_") for n in launched[merge]) == merge
            program.close()
    assert len(launched[True]) < len(launched[False])


def test_compile_passes_the_switch_to_the_cuda_runtime(monkeypatch) -> None:
    from optgraph.codegen.lowering_options import LoweringOptions
    from tests.support.fake_cupy import fake_cupy

    graph = og.parse_file(EXAMPLES / "gpt2_block.ir")
    with fake_cupy(monkeypatch):
        on = og.compile(graph, target="cuda")
        off = og.compile(graph, target="cuda", options=LoweringOptions(merge_launches=False))
        assert on._cuda.options.merge_launches and not off._cuda.options.merge_launches
        on_steps, off_steps = on._cuda.plan().steps, off._cuda.plan().steps
        assert len(on_steps) < len(off_steps)


def test_compile_no_merge_launches_writes_one_launch_per_kernel(tmp_path: Path) -> None:
    import json

    from optgraph.cli.main import main

    model = str(EXAMPLES / "gpt2_block.ir")
    plans = {}
    for flag in ([], ["--no-merge-launches"]):
        out = tmp_path / ("off" if flag else "on")
        out.mkdir()
        assert main(["compile", model, "-o", str(out), *flag]) == 0
        plans[bool(flag)] = json.loads((out / "cuda_plan.json").read_text())
    merged = [s for s in plans[False]["steps"] if s["kind"] == "kernel" and s["nodes"]]
    assert merged and all(s["kernel"] in plans[False]["kernels"] for s in merged)
    assert not any(s.get("nodes") for s in plans[True]["steps"] if s["kind"] == "kernel")
    assert len(plans[True]["steps"]) > len(plans[False]["steps"])
