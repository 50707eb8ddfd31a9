"""Raising of routed experts into `moe` (a rule of `raising`): the sparse mixture-of-experts
blocks of transformers' Mixtral, Qwen2-MoE and Qwen3-MoE as torch.export writes their default
`grouped_mm` experts, and their `batched_mm` experts through either importer.

    %ids, %w = the router's top k of softmax(%logits)       (topk.py's rounds of argmax)
    ... the T·k (token, slot) pairs sorted by expert (aten.sort), counted (aten.histc, cumsum),
    their rows gathered, grouped products with the stacks (grouped_mm_fallback), act(gate) · up,
    the down products, times the sorted weights, put back in (token, slot) order (index_put) ...
    %y = sum(%weighted) {axes = [1]} : f32[T,H]                     (%weighted: [T,k,H])
    ->  %y = moe(%x, %logits, %gate_up, %down) {k = 2, norm_topk = true} : f32[T,H]

Matched by what it computes, not by its spelling (so `batched_mm`'s gathered weights, the ONNX
exporter's Gathers and any lowering of the indexing match alike):

1. The root is a `sum` over axis 1 of a float `[T,k,H]`. Among the values at most `AREA` nodes
   back, the leaves are chosen: x (float, T·H elements), ids (integer, T·k) and w (float, T·k),
   neither x nor w computed from ids, such that the root is computed from them, constants and
   two or three rank-3 weights `[E,..]` (the expert stacks) alone.
2. That cone is evaluated on probe values: random x, k distinct random experts per token,
   random w, random stacks (overlapping views of one random matrix: expert e is its rows e to
   e+R-1, distinct experts in O((E+R)·C) memory whatever E), the source ops the IR lacks
   (`DISPATCH_KERNELS`: sort, histc, index_put, grouped products) run as their source defines
   them. It must equal Σ_j w[t,j] · down_e · (act(gate_e · x[t]) ⊙ (up_e · x[t])), e = ids[t,j],
   for an assignment of the stacks as stored (`gate_up [E,2F,H]` and `down [E,H,F]`, or
   `gate`, `up`, `down`) and an activation (silu, gelu, gelu_tanh).
3. ids and w must be the router's: their cone back to one float value of T·E elements, last
   axis E (the logits), evaluated on random logits, equals `reference.moe.route` for one of the
   moe op's routings (softmax then top k, renormalised or not; top k then softmax).

Not raised (a grouped dispatch is then `raising_dense_experts`'s to lower; a `batched_mm` one
stays as written): expert biases and gates other than act(gate) · up (gpt-oss's clamped SwiGLU
with biases), stacks stored transposed (`[E,H,2F]`: a transpose of every expert at each step),
interleaved gate/up rows, experts without a gate, routing other than the moe op's (a jitter,
grouped top-k, a sigmoid router), expert-parallel sentinels. Cost: one backward search of
`AREA` nodes per candidate root, at most `CONES` leaf choices' cones (the ids restricted to the
sort's keys where the dispatch sorts) and `PROBES` evaluations of the dispatch on the model's own
sizes (its T·k rows through the selected experts).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.frontends.moe_dispatch import DISPATCH_KERNELS
from optgraph.frontends.raising_probe import PSEUDO_KERNELS, known_value, probe
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue, Node, TensorType
from optgraph.reference import elementwise
from optgraph.reference.kernels import KERNELS, numpy_dtype
from optgraph.reference.moe import route

Producers = dict[str, Node]

AREA = 400  # nodes searched back from a root, and most nodes of a matched cone
PROBES = 8  # candidate leaf choices evaluated per root, at most
CONES = 4096  # leaf choices whose cone is searched per root, at most
SORTS = ("aten.sort.default", "aten.sort.stable")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
ROUTINGS = (("softmax_topk", True), ("softmax_topk", False), ("topk_softmax", False))
_INTEGERS = ("i32", "i64")


# -- cones ------------------------------------------------------------------------------------


def _evaluable(node: Node) -> bool:
    return node.op in KERNELS or node.op in PSEUDO_KERNELS or node.op in DISPATCH_KERNELS


def area_of(roots: Sequence[str], producers: Producers) -> list[str]:
    """Names at most `AREA` nodes back from `roots`, nearest first (breadth first)."""
    order: dict[str, None] = {}
    queue = list(roots)
    visited = 0
    while queue and visited < AREA:
        name = queue.pop(0)
        node = producers.get(name)
        if node is None:
            continue
        visited += 1
        for operand in node.operands:
            if operand not in order:
                order[operand] = None
                queue.append(operand)
    return list(order)


def cone_of(
    draft: Draft, root: str, producers: Producers, stops: set[str]
) -> tuple[list[Node], set[str]] | None:
    """(nodes in a topological order, ending with `root`'s; the known leaves) of `root` computed
    from `stops`, constants and weights alone; None when anything else is reached, a node is
    not evaluable, or the cone exceeds `AREA` nodes."""
    order: list[Node] = []
    known: set[str] = set()
    done: set[str] = set()
    stack: list[tuple[str, bool]] = [(root, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            order.append(producers[name])
            continue
        if name in done or name in stops:
            continue
        done.add(name)
        if known_value(draft, name) is not None:
            known.add(name)
            continue
        node = producers.get(name)
        if node is None or not _evaluable(node) or len(done) > AREA:
            return None
        stack.append((name, True))
        stack.extend((o, False) for o in node.operands if o not in done)
    return order, known


# -- the experts --------------------------------------------------------------------------------


def _activation(g: np.ndarray, act: str) -> np.ndarray:
    if act == "silu":
        return elementwise.silu(g)
    return elementwise.gelu(g, "none" if act == "gelu" else "tanh")


def _assignments(
    stacks: Sequence[str], types: Sequence[TensorType], hidden: int
) -> Iterator[tuple[str, ...]]:
    """The stacks in moe's operand order (gate_up, down or gate, up, down) that their shapes
    allow: `[E,2F,H]` (or `[E,F,H]` twice) and `[E,H,F]`, H = `hidden`."""
    shape_of = dict(zip(stacks, (t.shape for t in types)))
    for order in itertools.permutations(stacks):
        *ins, down = (shape_of[s] for s in order)
        experts, rows, width = down
        if rows != hidden:
            continue
        wanted = [(experts, width * (3 - len(ins)), hidden)] * len(ins)
        if ins == wanted:
            yield order


def _expected(
    x: np.ndarray, ids: np.ndarray, w: np.ndarray, stacks: Sequence[np.ndarray], act: str
) -> np.ndarray:
    """Σ_j w[t,j] · down_e · (act(gate_e · x[t]) ⊙ (up_e · x[t])) in f32; `stacks` in moe's
    operand order."""
    tokens, k = ids.shape
    out = np.zeros((tokens, x.shape[1]), np.float64)
    width = stacks[-1].shape[2]
    for t, j in itertools.product(range(tokens), range(k)):
        e = int(ids[t, j])
        xt = x[t].astype(np.float32)
        if len(stacks) == 2:
            both = stacks[0][e].astype(np.float32) @ xt
            gate, up = both[:width], both[width:]
        else:
            gate = stacks[0][e].astype(np.float32) @ xt
            up = stacks[1][e].astype(np.float32) @ xt
        h = _activation(gate, act) * up
        out[t] += float(w[t, j]) * (stacks[-1][e].astype(np.float32) @ h)
    return out


def probe_stack(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """A random `[E,R,C]` stack whose expert e is rows e..e+R-1 of one `[E+R, C]` matrix."""
    experts, rows, cols = shape
    base = (rng.standard_normal((experts + rows, cols)) / math.sqrt(cols)).astype(
        numpy_dtype(dtype)
    )
    step = base.strides[0]
    return np.lib.stride_tricks.as_strided(base, shape, (step, step, base.strides[1]))


def tolerance(dtype: str) -> float:
    return 1e-4 if dtype == "f32" else 3e-2


def close(got: np.ndarray, want: np.ndarray, tol: float) -> bool:
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 0.0)
    return got.shape == want.shape and float(np.max(np.abs(got - want))) <= tol * scale


class Leaves:
    """One choice of leaves: x, ids, w, the stacks, and the cone they close; `weights`: every
    weight the cone reads (the stacks among them)."""

    def __init__(
        self,
        names: tuple[str, str, str],
        cone: list[Node],
        stacks: list[str],
        experts: int,
        weights: list[str],
    ) -> None:
        self.x, self.ids, self.w = names
        self.cone, self.stacks, self.experts, self.weights = cone, stacks, experts, weights


def leaf_choices(
    draft: Draft,
    root: Node,
    producers: Producers,
    sizes: tuple[int, int, int],
    *,
    expert_weights: bool = False,
    ids: Sequence[str] = (),
) -> Iterator[Leaves]:
    """Leaf choices (nearest first) whose cone is closed, with two or three stacks of one E and
    only constants besides (`expert_weights`: and other weights of E rows, the experts' biases);
    `ids`: the candidates for the ids leaf, when known."""
    tokens, k, hidden = sizes
    area = [n for n in area_of([root.name], producers) if known_value(draft, n) is None]
    types = {n: draft.type_of(n) for n in area}
    ids_c = [n for n in area if types[n].dtype in _INTEGERS and types[n].numel == tokens * k]
    ids_c = [n for n in ids_c if n in ids] if ids else ids_c
    floats = [n for n in area if types[n].dtype in FLOAT_DTYPES]
    w_c = [n for n in floats if types[n].numel == tokens * k]
    x_c = [n for n in floats if types[n].numel == tokens * hidden and n != root.name]
    behind = {n: set(area_of([n], producers)) for n in [*w_c, *x_c]}
    combinations = itertools.product(ids_c, w_c, x_c)
    for chosen, w, x in itertools.islice(combinations, CONES):
        if chosen in behind[w] or chosen in behind[x]:
            continue  # x and w are not computed from the experts a token picked
        found = cone_of(draft, root.name, producers, {x, chosen, w})
        if found is None:
            continue
        cone, known = found
        stacks = sorted(n for n in known if draft.type_of(n).rank == 3)
        weights = sorted(n for n in known if n not in draft.constants)
        experts = {draft.type_of(n).shape[0] for n in stacks}
        if len(stacks) not in (2, 3) or len(experts) != 1:
            continue
        count = experts.pop()
        others = [n for n in weights if n not in stacks]
        if others and not (
            expert_weights and all(draft.type_of(n).shape[:1] == (count,) for n in others)
        ):
            continue  # another weight (a bias; the router's, for a cone too wide)
        yield Leaves((x, chosen, w), cone, stacks, count, weights)


def _experts(
    draft: Draft, leaves: Leaves, sizes: tuple[int, int, int]
) -> tuple[tuple[str, ...], str] | None:
    """(the stacks in moe's operand order, the activation) the cone computes, by probing."""
    tokens, k, hidden = sizes
    rng = np.random.default_rng(34)
    ids = np.stack([rng.permutation(leaves.experts)[:k] for _ in range(tokens)])
    w = rng.uniform(0.5, 1.5, (tokens, k))
    x = rng.standard_normal((tokens, hidden))
    stack_types = [draft.type_of(s) for s in leaves.stacks]
    values = {s: probe_stack(t.shape, t.dtype, rng) for s, t in zip(leaves.stacks, stack_types)}
    inputs = {s: v for s, v in values.items()}
    for name, value in ((leaves.ids, ids), (leaves.w, w), (leaves.x, x)):
        t = draft.type_of(name)
        inputs[name] = value.reshape(t.shape).astype(numpy_dtype(t.dtype))
    try:
        with np.errstate(all="ignore"):
            got = probe(draft, leaves.cone, inputs, DISPATCH_KERNELS).astype(np.float64)
    except (ValueError, IndexError):
        return None
    x_in = inputs[leaves.x].reshape(tokens, hidden)
    w_in = inputs[leaves.w].reshape(tokens, k).astype(np.float64)
    tol = tolerance(draft.type_of(leaves.x).dtype)
    for order in _assignments(leaves.stacks, stack_types, hidden):
        for act in ACTIVATIONS:
            want = _expected(x_in, ids, w_in, [values[s] for s in order], act)
            if got.size == want.size and close(got.reshape(want.shape), want, tol):
                return order, act
    return None


# -- the router ---------------------------------------------------------------------------------


def _router(
    draft: Draft, producers: Producers, leaves: Leaves, sizes: tuple[int, int]
) -> tuple[str, dict[str, AttrValue]] | None:
    """(logits, the routing attributes) when ids and w are the router's top k of the logits."""
    tokens, k = sizes
    experts = leaves.experts
    area = area_of([leaves.ids, leaves.w], producers)
    candidates = [
        n
        for n in area
        if known_value(draft, n) is None
        and draft.type_of(n).dtype in FLOAT_DTYPES
        and draft.type_of(n).numel == tokens * experts
        and draft.type_of(n).shape[-1:] == (experts,)
    ]
    rng = np.random.default_rng(35)
    for logits in candidates[:PROBES]:
        cones = []
        for leaf in (leaves.ids, leaves.w):
            found = cone_of(draft, leaf, producers, {logits})
            if found is not None and found[1] <= draft.constants.keys():
                cones.append(found[0])
        if len(cones) != 2:
            continue
        t = draft.type_of(logits)
        values = rng.standard_normal((tokens, experts)).astype(numpy_dtype(t.dtype))
        try:
            with np.errstate(all="ignore"):
                ids, w = (probe(draft, c, {logits: values.reshape(t.shape)}) for c in cones)
        except (ValueError, IndexError):
            continue
        ids, w = ids.reshape(tokens, k), w.reshape(tokens, k).astype(np.float64)
        for routing, norm in ROUTINGS:
            want_ids, want_w = route(values.astype(np.float32), k, routing, norm)
            if np.array_equal(ids, want_ids) and close(w, want_w, tolerance(t.dtype)):
                attrs: dict[str, AttrValue] = {"k": k}
                if routing != "softmax_topk":
                    attrs["routing"] = routing
                if norm:
                    attrs["norm_topk"] = True
                return logits, attrs
    return None


# -- the rule -----------------------------------------------------------------------------------


def root_sizes(draft: Draft, node: Node) -> tuple[int, int, int] | None:
    """(T, k, H) when `node` sums a float `[T,k,H]` over axis 1."""
    if node.op != "sum" or node.type is None or node.attrs.get("keepdims"):
        return None
    operand = draft.type_of(node.operands[0])
    if operand.rank != 3 or node.attrs.get("axes") not in ((1,), (-2,)):
        return None
    tokens, k, hidden = operand.shape
    if operand.dtype not in FLOAT_DTYPES or node.type.shape != (tokens, hidden) or k >= hidden:
        return None
    return tokens, k, hidden


def _shaped(draft: Draft, node: Node, name: str, want: TensorType) -> tuple[list[Node], str]:
    """(nodes, value): `name` reshaped to `want`'s shape where it differs."""
    have = draft.type_of(name)
    if have.shape == want.shape:
        return [], name
    flat = draft.fresh(f"{node.name}.{name}")
    attrs: dict[str, AttrValue] = {"shape": want.shape}
    reshaped = Node(flat, "reshape", (name,), attrs, have.with_shape(want.shape), span=node.span)
    return [reshaped], flat


def sort_keys(root: Node, producers: Producers) -> list[str]:
    """The keys of the one sort behind `root` (at most `AREA` nodes back) and what they are
    reshapes of: the ids leaf's candidates where a dispatch sorts by expert. Empty when there is
    no sort (a `batched_mm` dispatch) or several."""
    area = [producers[n] for n in area_of([root.name], producers) if n in producers]
    keys = {n.operands[0] for n in area if n.op in SORTS}
    if len(keys) != 1:
        return []
    chain = [keys.pop()]
    while (node := producers.get(chain[-1])) is not None and node.op == "reshape":
        chain.append(node.operands[0])
    return chain


def routed_experts(draft: Draft, node: Node, producers: Producers) -> list[Node] | None:
    """The rule: `node` (the weighted sum over the k slots) and its dispatch as one `moe`."""
    sizes = root_sizes(draft, node)
    if sizes is None:
        return None
    tokens, k, _ = sizes
    choices = leaf_choices(draft, node, producers, sizes, ids=sort_keys(node, producers))
    for count, leaves in enumerate(choices):
        if count >= PROBES:
            return None
        found = _experts(draft, leaves, sizes)
        router = found and _router(draft, producers, leaves, (tokens, k))
        if found and router:
            return _moe_nodes(draft, node, leaves, found, router)
    return None


def _moe_nodes(
    draft: Draft,
    node: Node,
    leaves: Leaves,
    experts: tuple[tuple[str, ...], str],
    router: tuple[str, dict[str, AttrValue]],
) -> list[Node]:
    assert node.type is not None
    stacks, act = experts
    logits, attrs = router
    tokens, hidden = node.type.shape
    x_type = draft.type_of(leaves.x)
    out = TensorType(x_type.dtype, (tokens, hidden))
    nodes, x = _shaped(draft, node, leaves.x, out)
    more, logits = _shaped(
        draft, node, logits, draft.type_of(logits).with_shape((tokens, leaves.experts))
    )
    nodes += more
    if act != "silu":
        attrs["act"] = act
    if out == node.type:
        return [*nodes, Node(node.name, "moe", (x, logits, *stacks), attrs, out, span=node.span)]
    moe = draft.fresh(f"{node.name}.moe")
    cast = {"dtype": node.type.dtype}
    return [
        *nodes,
        Node(moe, "moe", (x, logits, *stacks), attrs, out, span=node.span),
        Node(node.name, "cast", (moe,), cast, node.type, span=node.span),
    ]
