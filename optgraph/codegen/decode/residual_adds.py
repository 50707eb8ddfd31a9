"""Offer a rank's residual add to the all_reduce before it (`CollectiveStep.then_add`).

A tensor-parallel layer ends in a row-parallel product, its all_reduce, then the residual add:

    %o = all_reduce(%o.d0) {group = [0, 1]}     CollectiveStep("o", ...)
    %h = add(%x, %o)                            KernelStep("h", og_add_...)
    -> CollectiveStep("o", ..., then_add=(<location of %x>, <location of %h>))   (the add kept)
       and plan.rewrites gains DecodeRewrite("residual_adds", "o", "", ("h",), "offers ...")

The add stays in the plan: a runtime whose reduction kernel can add `%x` itself does it there
and skips the add's launch (`runtime/cuda/peer_reduce.py`); NCCL cannot, and runs both as before.
Offered only where doing the add early changes nothing another step sees:

- the add is the step right after the all_reduce, on the same stream, a launch of that add
  alone, the all_reduce's result its only use (not an output either);
- the addend, the result and the sum have one type (no broadcast);
- the add's result is the sum's operand or the addend exactly, or overlaps neither: the kernel
  reads an element of each before writing that element.

Complexity O(steps + nodes).
"""

from __future__ import annotations

from dataclasses import replace

from optgraph.codegen.plan.steps import (
    CollectiveStep,
    CudaPlan,
    DecodeRewrite,
    Extent,
    KernelStep,
    Location,
)
from optgraph.ir.graph import Graph


def offer_residual_adds(graph: Graph, plan: CudaPlan) -> CudaPlan:
    """`plan` with `then_add` set on each all_reduce followed by its residual add (see above)."""
    nodes = {n.name: n for n in graph.nodes}
    users = graph.users()
    outputs = set(graph.output_names())
    types = plan.types
    steps = list(plan.steps)
    taken: list[DecodeRewrite] = []
    for i, step in enumerate(steps[:-1]):
        after = steps[i + 1]
        if not (isinstance(step, CollectiveStep) and step.kind == "all_reduce"):
            continue
        if not isinstance(after, KernelStep) or after.stream != step.stream or after.nodes:
            continue
        add = nodes.get(after.node)
        total = step.node
        if add is None or add.op != "add" or add.operands.count(total) != 1:
            continue
        if len(users.get(total, [])) != 1 or total in outputs:
            continue
        (addend,) = [o for o in add.operands if o != total]
        if not types[addend] == types[total] == types[add.name]:
            continue
        nbytes = types[total].nbytes
        out, plus = plan.locations.get(add.name), plan.locations.get(addend)
        if out is None or plus is None or step.src is None:
            continue
        if _clashes(out, plus, nbytes) or _clashes(out, step.src, nbytes):
            continue
        steps[i] = replace(step, then_add=(plus, out))
        note = f"offers %{add.name} (its sum plus %{addend}) to the reduction; the add is kept"
        taken.append(DecodeRewrite("residual_adds", total, "", (add.name,), note, False))
    return replace(plan, steps=steps, rewrites=_in_issue_order(graph, [*plan.rewrites, *taken]))


def _in_issue_order(graph: Graph, rewrites: list[DecodeRewrite]) -> tuple[DecodeRewrite, ...]:
    index = graph.producers()
    return tuple(sorted(rewrites, key=lambda r: index.get(r.node, -1)))


def _clashes(a: Location, b: Location, nbytes: int) -> bool:
    """Whether `a` and `b` overlap without being the same bytes."""
    if a == b:
        return False
    return Extent(a.space, a.key, a.offset, nbytes).overlaps(
        Extent(b.space, b.key, b.offset, nbytes)
    )
