"""Reading a draft for raising: the producer of a value, known values (constants, weights,
one-element scalars), and part of the draft evaluated on probe values -- how raising checks that a
pattern computes what the fast op it becomes computes (a GELU formula on probe inputs, a rope's
angle tables on probe positions), with the reference interpreter's kernels.

    probe(draft, [n1, n2], {"x": values})  ->  n2's value for those x and the draft's constants
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.ir.graph import Node
from optgraph.ir.ops import attrs_with_defaults
from optgraph.reference.elementwise import erf
from optgraph.reference.kernels import KERNELS

# Ops the probe evaluator may run besides the IR's elementwise ones (pseudo ops of the draft).
PSEUDO_KERNELS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "erf": lambda x: erf(x).astype(np.float32),
    "cos": np.cos,
    "sin": np.sin,
}


def producer_of(producers: dict[str, Node], name: str, *ops: str) -> Node | None:
    """The node producing `name` when its op is one of `ops`."""
    node = producers.get(name)
    return node if node is not None and node.op in ops else None


def scalar_value(draft: Draft, name: str) -> float | None:
    """The value of a one-element constant, None for anything else."""
    value = draft.constants.get(name)
    if value is None or value.size != 1:
        return None
    return float(value.reshape(-1)[0])


def known_value(draft: Draft, name: str) -> np.ndarray | None:
    """The value of a constant or a weight (an ONNX float initializer), None for the others."""
    found = draft.constants.get(name)
    return draft.weights.get(name) if found is None else found


def _known(draft: Draft, name: str) -> np.ndarray:
    value = known_value(draft, name)
    assert value is not None, f"probe: '{name}' is neither computed nor known"
    return value


# A kernel of an op the draft holds under its source's name (`raising_moe`'s ATen sort): the
# node (its attributes are the source's arguments) and its operands' values.
NodeKernel = Callable[[Node, list[np.ndarray]], np.ndarray]


def probe(
    draft: Draft,
    nodes: Sequence[Node],
    inputs: dict[str, np.ndarray],
    kernels: Mapping[str, NodeKernel] | None = None,
) -> np.ndarray:
    """The last of `nodes` evaluated with `inputs` and the draft's constants and weights;
    `kernels`: how to evaluate ops of the source that the IR does not have."""
    env = dict(inputs)
    for node in nodes:
        args = [env[o] if o in env else _known(draft, o) for o in node.operands]
        if kernels is not None and node.op in kernels:
            env[node.name] = np.asarray(kernels[node.op](node, args))
        elif node.op in PSEUDO_KERNELS:
            env[node.name] = PSEUDO_KERNELS[node.op](args[0])
        else:
            env[node.name] = np.asarray(KERNELS[node.op](node, args, attrs_with_defaults(node)))
    return env[nodes[-1].name]


def ancestors(cone: list[Node], name: str) -> set[str]:
    """The names in `cone` that `name` is computed from, itself included."""
    by_name = {n.name: n for n in cone}
    seen: set[str] = set()
    stack = [name]
    while stack:
        node = by_name.get(stack.pop())
        if node is not None and node.name not in seen:
            seen.add(node.name)
            stack.extend(node.operands)
    return seen
