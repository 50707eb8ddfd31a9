"""A one-row `get_rows` read where it is used: its readers' kernels gather the row themselves.

A decode step starts with `h0 = get_rows(embed, tokens)`: a one-block kernel copying one row
of the table, read by layer 0's q/k/v products (their norm prologue) and by the residual add
in the o-projection's epilogue. With `GATHER_ROWS` on, the get_rows issues nothing and each
reader's kernel reads element e of h0 as the table's element where get_rows would have copied
it from (`data_movement._get_rows`: ids out of range give zeros):

    %h0 = get_rows(%embed, %tokens) : f16[1,512]     %q = fused(%h0, %g, %wq)
    ->  the q kernel's parameter in0 (h0) becomes the pair (table, ids), and its body reads
        in0[e] = ids[e / 512] in range ? table[ids[e / 512] * 512 + e % 512] : 0

The kernel text changes in one place: the parameter becomes an `OgGatheredRows` value whose
`operator[]` does that (so every load the kernel makes of `in<k>[...]` is a gather); each
reader's kernel is renamed by its new text.

Legality: the get_rows result has only kernel readers (no output, no view, no CPU node, no
cuBLAS call), each reader's every launch takes it as a parameter `in<k>` (k its operand index)
used only by subscripts; the table and the ids are weights or inputs that no output is
computed in (nothing in the program writes them, so reading them later than the get_rows would
have gives the same row); the result is one row (`ROW_LIMIT` elements at most: every reader
re-reads it, so bigger gathers stay a kernel).

Not handled: several rows beyond `ROW_LIMIT`, ids computed by the program, readers that are not
kernels with parts (`Kernel.params`, `Kernel.body`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

from optgraph.codegen.cuda_source import STORAGE, Kernel, kernel_template
from optgraph.codegen.plan.steps import (
    DecodeRewrite,
    EventStep,
    Extent,
    KernelStep,
    Location,
    Step,
)
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots

# A one-row get_rows issues nothing; its readers gather the row (one launch fewer a decode step).
GATHER_ROWS = False

ROW_LIMIT = 16384  # elements of a gathered value at most
READ_ONLY_SPACES = frozenset({"weights", "input"})

GATHER_DECL = """#ifndef OG_GATHERED_ROWS
#define OG_GATHERED_ROWS
template <typename T, typename I> struct OgGatheredRows {
  const T* table;
  const I* ids;
  long long rows;
  unsigned long long width;
  __device__ __forceinline__ T operator[](unsigned long long e) const {
    const long long r = (long long)ids[e / width];
    return (r >= 0 && r < rows) ? table[(unsigned long long)r * width + e % width] : T(0);
  }
};
#endif
"""


def gathered_rows(graph: Graph, in_place: Mapping[str, str]) -> dict[str, Node]:
    """{name: node} of the get_rows nodes whose readers may gather (before looking at kernels)."""
    if not GATHER_ROWS:
        return {}
    roots = alias_roots(graph)
    viewed = {root for root, _ in roots.values()}
    outputs = set(graph.output_names())
    written = set(in_place.values())
    given = graph.input_names() | graph.weight_names()
    found: dict[str, Node] = {}
    for node in graph.nodes:
        if node.op != "get_rows" or node.type is None or len(node.operands) != 2:
            continue
        if node.name in outputs or node.name in viewed or node.name in roots:
            continue
        if node.type.numel > ROW_LIMIT or node.ann.backend == "cpu":
            continue
        if all(o in given and o not in written for o in node.operands):
            found[node.name] = node
    return found


def _gathered_kernel(kernel: Kernel, role: str, types: Sequence[TensorType]) -> Kernel | None:
    """`kernel` with its parameter `role` read as gathered rows of table `types[0]` by ids
    `types[1]`, or None when the kernel does not read the parameter by subscripts only."""
    if kernel.params is None or kernel.body is None:
        return None
    table, ids = types
    t, i = STORAGE[table.dtype], STORAGE[ids.dtype]
    if f"const {t}* {role}" not in kernel.params:
        return None
    uses = re.findall(rf"\b{role}\b(.)", kernel.body)
    if not uses or any(c != "[" for c in uses) or re.search(rf"\b{role}\b", kernel.early):
        return None
    width = table.shape[-1]
    rows = table.numel // width if width else 0
    params: list[str] = []
    for p in kernel.params:
        if p == f"const {t}* {role}":
            params += [f"const {t}* {role}_table", f"const {i}* {role}_ids"]
        else:
            params.append(p)
    fields = f"{role}_table, {role}_ids, {rows}LL, {width}ull"
    head = f"  const OgGatheredRows<{t}, {i}> {role}{{{fields}}};"
    body = head + "\n" + kernel.body
    decls = (*kernel.decls, GATHER_DECL)
    template = kernel_template(params, body, kernel.bounds, kernel.early, kernel.self_wait)
    prefix = kernel.name.rsplit("_", 1)[0]
    digest = hashlib.sha1(("".join(decls) + template).encode()).hexdigest()[:12]
    return Kernel.assemble(
        f"{prefix}_{digest}", params, body, decls, kernel.bounds, kernel.early, kernel.self_wait
    )


def _rewrite(
    step: KernelStep,
    kernel: Kernel,
    node: Node,
    gather: Node,
    locations: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> tuple[KernelStep, Kernel] | None:
    """`step` (of reader `node`) reading `gather`'s row from the table, or None."""
    assert kernel.params is not None
    table, ids = gather.operands
    here = locations[gather.name]
    roles = [f"in{k}" for k, o in enumerate(node.operands) if o == gather.name]
    args = list(step.args)
    for role in roles:
        names = [p.rsplit(None, 1)[-1] for p in kernel.params]
        if role not in names or len(names) != len(args) or args[names.index(role)] != here:
            return None
        made = _gathered_kernel(kernel, role, (types[table], types[ids]))
        if made is None:
            return None
        p = names.index(role)
        args[p : p + 1] = [locations[table], locations[ids]]
        kernel = made
    gone = Extent.of(here, types[gather.name].nbytes)
    reads = tuple(e for e in step.reads or () if e != gone)
    reads += (
        Extent.of(locations[table], types[table].nbytes),
        Extent.of(locations[ids], types[ids].nbytes),
    )
    return KernelStep(
        step.node, step.stream, kernel.name, step.grid, step.block, step.shared_mem,
        tuple(args), reads, step.writes,
    ), kernel  # fmt: skip


def _node(step: Step) -> str | None:
    return None if isinstance(step, EventStep) else step.node


def _absorbed(
    steps: list[Step],
    kernels: dict[str, Kernel],
    gather: Node,
    readers: Mapping[str, Node],
    locations: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> list[int] | None:
    """The indices of `gather`'s own steps, after rewriting its readers' steps in `steps` and
    adding their kernels to `kernels`; None (nothing changed) when a reader's cannot be."""
    own = [j for j, s in enumerate(steps) if _node(s) == gather.name]
    mine = {j: readers[n] for j, s in enumerate(steps) if (n := _node(s) or "") in readers}
    if not readers or not own or not all(isinstance(steps[j], KernelStep) for j in own):
        return None
    if {_node(steps[j]) for j in mine} != set(readers):
        return None  # a reader issued nothing of its own (folded elsewhere): keep the kernel
    rewritten: dict[int, tuple[KernelStep, Kernel]] = {}
    for j, reader in mine.items():
        step = steps[j]
        if not isinstance(step, KernelStep) or step.nodes or step.kernel not in kernels:
            return None
        done = _rewrite(step, kernels[step.kernel], reader, gather, locations, types)
        if done is None:
            return None
        rewritten[j] = done
    for j, (step, kernel) in rewritten.items():
        steps[j] = step
        kernels[kernel.name] = kernel
    return own


def gather_rows(
    graph: Graph,
    steps: Sequence[Step],
    origins: Sequence[int],
    kernels: Mapping[str, Kernel],
    locations: Mapping[str, Location],
    in_place: Mapping[str, str],
) -> tuple[list[Step], list[int], dict[str, Kernel], list[DecodeRewrite]]:
    """(steps, origins, kernels, what was taken) with every gather of `gathered_rows` done by
    its readers: its own steps dropped, its readers' steps launching rewritten kernels, one
    `DecodeRewrite` a reader. A gather any of whose readers' launches cannot be rewritten keeps
    its kernel."""
    out, where, table = list(steps), list(origins), dict(kernels)
    types = graph.value_types()
    users = graph.users()
    taken: list[DecodeRewrite] = []
    for name, gather in gathered_rows(graph, in_place).items():
        readers = {graph.nodes[u].name: graph.nodes[u] for u in users.get(name, [])}
        own = _absorbed(out, table, gather, readers, locations, types)
        if own is not None:
            keep = [j for j in range(len(out)) if j not in set(own)]
            out, where = [out[j] for j in keep], [where[j] for j in keep]
            taken += _gathered_by(out, gather, readers)
    launched = {s.kernel for s in out if isinstance(s, KernelStep)}
    return out, where, {k: v for k, v in table.items() if k in launched}, taken


def _gathered_by(
    steps: Sequence[Step], gather: Node, readers: Mapping[str, Node]
) -> list[DecodeRewrite]:
    """What the lowered plan text lists for `gather` read by `readers`' rewritten kernels:

    %h0 = get_rows(%embed, %tokens) read by %q -> DecodeRewrite("gathered_rows", "q",
        "og_gemv_<hash>", ("h0",), "reads %h0 as the rows of %embed at %tokens")
    """
    table, ids = gather.operands
    kernel_of: dict[str, str] = {}
    for step in steps:
        if isinstance(step, KernelStep) and step.node in readers:
            kernel_of.setdefault(step.node, step.kernel)
    note = f"reads %{gather.name} as the rows of %{table} at %{ids}"
    return [
        DecodeRewrite("gathered_rows", reader, kernel_of.get(reader, ""), (gather.name,), note)
        for reader in readers
    ]
