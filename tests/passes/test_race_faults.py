"""Fault injection for check-races (issue 13): compiler output over random graphs, every stream
policy and 1, 2, 4, 8 streams is never flagged; mutants (a wait removed, a wait moved later, a
record moved earlier, an op moved to another stream, a buffer moved onto a live one or onto an
output) that are racy by an independent ground truth are always caught, and a buffer moved onto
bytes that nothing reaches meanwhile (a harmless overlap or on-output mutant) is never flagged.

The ground truth is this file's own: happens-before as reachability over stream order and
record -> wait edges (no vector clocks), and accesses as byte ranges (arena offsets, aliasing views
at their root's bytes, a materialized slice's read only its rows, inputs and weights by name), with
the host reading every output at the end.
`HYPOTHESIS_PROFILE=fuzz` runs the long session.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from optgraph.ir.graph import Graph
from optgraph.ir.layout import alias_roots
from optgraph.passes.check_races import find_races
from optgraph.passes.manager import run_pipeline
from tests.support.random_graphs import random_dag_graphs
from tests.support.touched_bytes import read_bytes

POLICIES = ("chains", "fanout", "single")
PIPELINE = (
    "verify,dce,cse,fuse,assign-streams{{policy={policy},max-streams={streams},min-branch-us=0}},"
    "insert-sync,analyze-lifetimes,plan-memory"
)
MUTATIONS = ("drop-wait", "wait-later", "record-earlier", "other-stream", "overlap", "on-output")


def _reaches(graph: Graph) -> list[set[int]]:
    """after[i]: node indices i happens-before (transitively), by plain graph search."""
    nodes = graph.nodes
    succ: list[set[int]] = [set() for _ in nodes]
    last_on: dict[int, int] = {}
    records: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.stream in last_on:
            succ[last_on[n.stream]].add(i)
        last_on[n.stream] = i
        if n.op == "record":
            records[n.name] = i
        elif n.op == "wait" and n.name in records:
            succ[records[n.name]].add(i)
    after: list[set[int]] = [set() for _ in nodes]
    for i in reversed(range(len(nodes))):
        for j in succ[i]:
            after[i] |= {j} | after[j]
    return after


def _ranges(graph: Graph) -> dict[str, tuple[str, int, int]]:
    """Per value: (space, start, end) of its bytes; space "arena" or the input/weight name. A
    planned buffer holds the bytes of its plan (`size`, which may pad the value), a view only
    its own."""
    roots = alias_roots(graph)
    types = graph.value_types()
    base: dict[str, tuple[str, int]] = {}
    planned: dict[str, int] = {}
    for _, n in graph.compute_nodes():
        if n.name not in roots:
            base[n.name] = ("arena", n.ann.offset or 0) if n.ann.offset is not None else (n.name, 0)
            if n.ann.offset is not None and n.ann.size:
                planned[n.name] = n.ann.size
    for d in (*graph.inputs, *graph.weights):
        base[d.name] = (d.name, 0)
    out = {}
    for name, t in types.items():
        root, extra = roots.get(name, (name, 0))
        space, start = base.get(root, (root, 0))
        size = planned.get(name, max(t.nbytes, 1))
        out[name] = (space, start + extra, start + extra + size)
    return out


Bytes = tuple[str, frozenset[int]]  # (space, the bytes an access touches there)


def _bytes(ranges: dict[str, tuple[str, int, int]], name: str) -> Bytes:
    space, lo, hi = ranges[name]
    return space, frozenset(range(lo, hi))


def ground_truth_racy(graph: Graph) -> bool:
    """Whether two conflicting accesses are unordered, a write lands on an output's bytes after
    the output is written, or a node does not happen-before the end (stream 0's last node)."""
    after = _reaches(graph)
    ranges = _ranges(graph)
    roots = alias_roots(graph)
    types = graph.value_types()
    # node, value, writes, the bytes it touches (a materialized slice: only its rows)
    accesses: list[tuple[int, str, bool, Bytes]] = []
    for i, n in graph.compute_nodes():
        if n.name not in roots:
            accesses.append((i, n.name, True, _bytes(ranges, n.name)))
        for o in n.operands:
            touched = _bytes(ranges, o)
            rows = read_bytes(n, o, types, roots) if n.name not in roots else None
            if rows is not None:  # bytes of the root, placed where the root's bytes are
                root = roots.get(o, (o, 0))[0]
                space, lo, _ = ranges[root]
                touched = space, frozenset(lo + b for b in rows)
            accesses.append((i, o, False, touched))
        if n.op == "kv_cache_write" and ranges[n.name][:2] == ranges[n.operands[0]][:2]:
            # planned in place: writes the cache's bytes
            accesses.append((i, n.operands[0], True, _bytes(ranges, n.operands[0])))

    def meet(a: Bytes, b: Bytes) -> bool:
        return a[0] == b[0] and not a[1].isdisjoint(b[1])

    for x, (i, _, wa, ba) in enumerate(accesses):
        for j, _, wb, bb in accesses[x + 1 :]:
            conflict = i != j and (wa or wb) and meet(ba, bb)
            if conflict and j not in after[i] and i not in after[j]:
                return True
    written = {n.name: i for i, n in graph.compute_nodes() if n.name not in roots}
    if _reuse_out_of_order(graph, accesses, written, after, ranges, meet):
        return True
    for out in graph.output_names():
        root = roots.get(out, (out, 0))[0]
        if root not in written:
            continue
        for i, name, writes, touched in accesses:
            if (
                writes
                and name != root
                and i > written[root]
                and meet(touched, _bytes(ranges, root))
            ):
                return True
    ends = [i for i, n in enumerate(graph.nodes) if n.stream == 0]  # the host joins stream 0
    for i, n in graph.compute_nodes():
        if n.stream != 0 and not (ends and ends[-1] in after[i]):
            return True
    return False


def _reuse_out_of_order(graph, accesses, written, after, ranges, meet) -> bool:  # type: ignore[no-untyped-def]
    """Two buffers on shared bytes, ordered: every access of the first-written one that reaches
    the shared bytes must happen before the other's write (a node may write its result over an
    operand element for element)."""
    roots = alias_roots(graph)
    types = graph.value_types()
    by_root: dict[str, list[tuple[int, str, Bytes]]] = {}
    for i, name, _, touched in accesses:
        by_root.setdefault(roots.get(name, (name, 0))[0], []).append((i, name, touched))
    for x, wx in written.items():
        for y, wy in written.items():
            shared = _bytes(ranges, y)
            if x == y or not meet(_bytes(ranges, x), shared) or wy not in after[wx]:
                continue
            node = graph.nodes[wy]
            for i, name, touched in by_root.get(x, []):
                if not meet(touched, shared):
                    continue  # a slice's read of other bytes of x
                if i == wy:
                    in_place = ranges[name][:2] == ranges[y][:2] and types[name] == node.type
                    if in_place and (node.op == "kv_cache_write" or _is_elementwise(node.op)):
                        continue
                    return True
                if wy not in after[i]:
                    return True
    return False


def _is_elementwise(op: str) -> bool:
    from optgraph.ir.ops import get_op

    opdef = get_op(op)
    return opdef is not None and opdef.category == "elementwise"


def mutate(graph: Graph, kind: str, rng: random.Random) -> Graph | None:
    nodes = list(graph.nodes)
    waits = [i for i, n in enumerate(nodes) if n.op == "wait"]
    records = [i for i, n in enumerate(nodes) if n.op == "record"]
    compute = [i for i, n in enumerate(nodes) if not n.is_event]
    if kind == "drop-wait" and waits:
        del nodes[rng.choice(waits)]
    elif kind == "wait-later" and waits:
        i = rng.choice(waits)
        wait = nodes.pop(i)
        nodes.insert(rng.randrange(i, len(nodes) + 1), wait)
    elif kind == "record-earlier" and records:
        i = rng.choice(records)
        record = nodes.pop(i)
        wait_at = [k for k, n in enumerate(nodes) if n.op == "wait" and n.name == record.name]
        nodes.insert(rng.randrange(0, i + 1) if not wait_at else min(i, wait_at[0]), record)
    elif kind == "other-stream" and compute:
        i = rng.choice(compute)
        streams = sorted({n.stream for n in nodes} | {nodes[i].stream + 1})
        nodes[i] = nodes[i].with_ann(stream=rng.choice(streams))
    elif kind in ("overlap", "on-output"):
        roots = alias_roots(graph)
        planned = [i for i in compute if nodes[i].name not in roots and nodes[i].ann.size]
        outputs = {roots.get(o, (o, 0))[0] for o in graph.output_names()}
        targets = [i for i in planned if kind == "overlap" or nodes[i].name in outputs]
        if len(planned) < 2 or not targets:
            return None
        target = nodes[rng.choice(targets)]
        i = rng.choice([k for k in planned if nodes[k].name != target.name])
        nodes[i] = nodes[i].with_ann(offset=target.ann.offset)
    else:
        return None
    mutant = graph.with_nodes(tuple(nodes))
    return mutant if mutant != graph else None


@given(
    graph=random_dag_graphs(max_nodes=12),
    streams=st.sampled_from([1, 2, 4, 8]),
    policy=st.sampled_from(POLICIES),
    seed=st.integers(0, 2**16),
)
def test_compiler_output_passes_and_racy_mutants_are_caught(
    graph: Graph, streams: int, policy: str, seed: int
) -> None:
    compiled = run_pipeline(graph, PIPELINE.format(policy=policy, streams=streams))
    assert not ground_truth_racy(compiled)  # the ground truth agrees the compiler is right
    assert find_races(compiled) == []  # no false alarm
    rng = random.Random(seed)
    for kind in MUTATIONS:
        mutant = mutate(compiled, kind, rng)
        if mutant is None:
            continue
        if ground_truth_racy(mutant):
            assert find_races(mutant), f"{kind}: a racy mutant passed check-races"
        elif kind in ("overlap", "on-output"):
            # a buffer moved onto bytes nothing else reaches meanwhile: no false alarm
            assert find_races(mutant) == [], f"{kind}: a harmless mutant was flagged"


def test_the_ground_truth_sees_an_output_clobber() -> None:
    """The ground truth itself can fail: an output's bytes reused after its last read."""
    import optgraph as og

    text = """graph chain {
  input %x : f32[64]
  %a = exp(%x) : f32[64]
  %b = neg(%a) : f32[64]
  %c = relu(%b) : f32[64]
  output %a, %c
}"""
    planned = run_pipeline(
        og.parse(text), "assign-streams,insert-sync,analyze-lifetimes,plan-memory"
    )
    assert not ground_truth_racy(planned)
    a = next(n for n in planned.nodes if n.name == "a")
    moved = [
        replace(n, ann=replace(n.ann, offset=a.ann.offset)) if n.name == "c" else n
        for n in planned.nodes
    ]
    assert ground_truth_racy(planned.with_nodes(tuple(moved)))
