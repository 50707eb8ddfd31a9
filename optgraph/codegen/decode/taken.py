"""The decode rewrites a lowering took, as records the plan keeps (`CudaPlan.rewrites`).

Each rewrite decides while lowering (`lower_cuda`), so no printed IR shows it; this module turns
the decisions that were carried out into `DecodeRewrite` records, one per launch that does more
than its own node's work, in issue order, each naming the kernel that launch runs (before launch
merging; after `gathered_rows` renamed its readers' kernels). `lowered_plan_text` prints them:

    folds = {"q": ProductFold(q, q_rot, None, ...)}, early = {"o": WrittenRows("pos", ...)}
    ->  (DecodeRewrite("qkv_folds", "q", "og_gemv_<hash>", ("q_rot",), "rope in ..."),
         DecodeRewrite("early_cache_reads", "o", "og_attention_decode_wide_<hash>", ...))

A decision whose node issued no kernel of its own (a CPU node) is not listed: it was not carried
out. `residual_adds` records its own offers (it rewrites a finished plan).

Complexity: O(steps + nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from optgraph.codegen.decode.argmax_folds import ArgmaxFold
from optgraph.codegen.decode.early_cache_reads import WrittenRows
from optgraph.codegen.decode.qkv_folds import ProductFold
from optgraph.codegen.decode.rope_cache_writes import rope_cache_taken
from optgraph.codegen.plan.steps import DecodeRewrite, KernelStep, Step
from optgraph.ir.graph import Graph, Node


def rewrites_taken(
    graph: Graph,
    steps: Sequence[Step],
    folds: Mapping[str, ProductFold],
    rope_writes: Mapping[str, Node],
    argmaxes: Mapping[str, ArgmaxFold],
    early_reads: Mapping[str, WrittenRows],
    gathered: Iterable[DecodeRewrite] = (),
) -> tuple[DecodeRewrite, ...]:
    """The records of the decisions carried out in `steps` (unmerged), in issue order:
    `folds` (`qkv_folds`), `rope_writes` (`rope_cache_writes`: rope -> its write), `argmaxes`
    (`argmax_folds`), `early_reads` (`early_cache_reads`), `gathered` (`gathered_rows`' own)."""
    kernel_of: dict[str, str] = {}
    for step in steps:
        if isinstance(step, KernelStep):
            kernel_of.setdefault(step.node, step.kernel)
    found = list(gathered)
    for name, fold in folds.items():
        if name in kernel_of:
            found.append(fold.taken(kernel_of[name]))
    for name, write in rope_writes.items():
        if name in kernel_of:
            found.append(rope_cache_taken(name, write, kernel_of[name]))
    for name, argmax in argmaxes.items():
        if name in kernel_of:
            found.append(argmax.taken(kernel_of[name]))
    for name, written in early_reads.items():
        if name in kernel_of:
            found.append(written.taken(name, kernel_of[name]))
    index = graph.producers()
    return tuple(sorted(found, key=lambda r: index.get(r.node, -1)))
