"""Structure-aware fuzzing (issue 13): mutate the parsed graph, not its bytes.

A mutation changes an input's dims or dtype (and re-infers every node's type, so the mutant can
still be valid), an attribute to an edge value, an operand to another value, or a stream
annotation. Every mutant either fails with a located `OptGraphError` (never another exception,
never an unlocated one from verify), or verifies, compiles, runs on the planned executor and
matches the reference interpreter. `HYPOTHESIS_PROFILE=fuzz` runs the long session.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.ir.graph import DTYPES, Graph, Node
from optgraph.ir.ops import infer_type
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.random_graphs import random_dag_graphs

EDGE_INTS = (0, 1, -1, 2, -2, 3, 7, 2**31, -(2**40), 10**18)
MUTATIONS = ("dims", "dtype", "attr", "operand", "stream")


def _retyped(graph: Graph) -> Graph:
    """Every node's declared type re-inferred from its operands (stops at the first error)."""
    types = {d.name: d.type for d in (*graph.inputs, *graph.weights)}
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.is_event or node.body is not None:
            nodes.append(node)
            continue
        try:
            t = infer_type(node, [types[o] for o in node.operands])
        except (OptGraphError, KeyError):
            nodes.append(node)
            continue
        types[node.name] = t
        nodes.append(replace(node, type=t))
    return graph.with_nodes(nodes)


def mutate(graph: Graph, kind: str, rng: random.Random) -> Graph:
    compute = [n for n in graph.nodes if not n.is_event]
    if kind in ("dims", "dtype") and graph.inputs:
        k = rng.randrange(len(graph.inputs))
        x = graph.inputs[k]
        if kind == "dims" and x.type.shape:
            shape = list(x.type.shape)
            shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 5])
            t = x.type.with_shape(shape)
        else:
            t = x.type.with_dtype(rng.choice(DTYPES))
        inputs = list(graph.inputs)
        inputs[k] = replace(x, type=t)
        return _retyped(replace(graph, inputs=tuple(inputs)))
    if not compute:
        return graph
    node = rng.choice(compute)
    if kind == "attr":
        key = rng.choice([*node.attrs, "axis", "axes", "keepdims", "shape"])
        value = rng.choice([rng.choice(EDGE_INTS), (rng.choice(EDGE_INTS),), True, 0.5])
        changed = replace(node, attrs={**node.attrs, key: value})
    elif kind == "operand" and node.operands:
        names = [v.name for v in (*graph.inputs, *graph.weights)] + [n.name for n in compute]
        operands = list(node.operands)
        operands[rng.randrange(len(operands))] = rng.choice(names)
        changed = replace(node, operands=tuple(operands))
    else:
        changed = node.with_ann(stream=rng.choice([0, 1, 3, 1023, 1024, 10**11]))
    nodes = [changed if n is node else n for n in graph.nodes]
    graph = graph.with_nodes(nodes)
    return _retyped(graph) if kind != "stream" else graph


def check_mutant(graph: Graph) -> None:
    try:
        og.verify(graph)
    except OptGraphError as err:
        assert str(err)  # renders
        return
    inputs, weights = random_inputs(graph), random_weights(graph)
    try:
        want = run_reference(graph, inputs, weights)
        program = og.compile(graph, target="cpu")
    except OptGraphError as err:
        assert str(err)
        return
    got = program.run(inputs, weights)
    for name, value in want.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        close = np.allclose(
            got[name].astype(np.float64),
            value.astype(np.float64),
            rtol=1e-2,
            atol=1e-3,
            equal_nan=True,
        )
        assert close, name


@given(
    graph=random_dag_graphs(max_nodes=10),
    kind=st.sampled_from(MUTATIONS),
    seed=st.integers(0, 2**16),
)
def test_structural_mutants_are_errors_or_run_right(graph: Graph, kind: str, seed: int) -> None:
    check_mutant(mutate(graph, kind, random.Random(seed)))
