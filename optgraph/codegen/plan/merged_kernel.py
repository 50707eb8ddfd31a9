"""The text of a merged launch: several kernels' bodies as one kernel whose blocks are partitioned.

`merged_kernel(members)` takes kernels with parts (`Kernel.params`, `Kernel.body`) and their
grids and returns one kernel: the PDL entry once, then a dispatch on `blockIdx.x`. Blocks
`[0, g0)` run member 0's body with block index `b`, the next `g1` blocks member 1's with `b - g0`,
and so on, where `g` is a member's whole grid (x·y·z blocks; its 3-D block index is rebuilt from
the linear one). Each body becomes a `__device__` function, `<kernel name>_part`, that takes its
block index and grid dims as parameters `og_block_idx` / `og_grid_dim` in place of the built-ins
`blockIdx` / `gridDim` (the one substitution made in a body: the identifiers, by word); a member's
`return` leaves its function and so its share of the merged kernel. `threadIdx` and `blockDim`
stay: every member has the same block dims, so a member's `__syncthreads` is reached by the
whole block (a block runs exactly one member). A member's `__launch_bounds__` (the one-row
products' register budget) carries over to the merged kernel (`merged_bounds`). When a member
waits for the preceding grid itself (`Kernel.self_wait`: its weight loads come first), the merged
kernel has no entry of its own and every other member's call is preceded by the entry.

    extern "C" __global__ void og_merged_<hash>(float* m0_out, const float* m0_in0, ...) {
      og_grid_dependency_wait(); og_grid_launch_dependents();
      const unsigned int og_b = blockIdx.x;
      if (og_b < 32u) { og_gemv_..._part(dim3{og_b, 0u, 0u}, dim3{32u, 1u, 1u}, m0_out, ...); }
      else { const unsigned int og_r = og_b - 32u; og_gemv_..._part(dim3{og_r, ...}, ...); }
    }

The member functions and the members' own file-scope declarations (split-K workspaces) are the
merged kernel's `decls`, so `cuda_source.kernels_source` defines each once in a module that also
holds a member as a standalone kernel. The name is `og_merged_<SHA-1 of the text>`, like every
kernel's. Legality (which launches may merge) is `merge_launches`' business, not this module's.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

from optgraph.codegen.cuda_source import Kernel, body_entry, kernel_template

BLOCK_INDEX, GRID_DIM = "og_block_idx", "og_grid_dim"
_BUILTINS = re.compile(r"\b(blockIdx|gridDim)\b")


def split_param(decl: str) -> tuple[str, str] | None:
    """`"const float* in0"` -> (`"const float*"`, `"in0"`); None unless a pointer parameter."""
    parts = decl.rsplit(None, 1)
    if len(parts) != 2 or not parts[1].isidentifier() or not parts[0].endswith("*"):
        return None
    return parts[0], parts[1]


def is_mergeable(kernel: Kernel) -> bool:
    """Whether `kernel` has the parts a merged kernel needs (pointer parameters, a body)."""
    if kernel.params is None or kernel.body is None:
        return False
    return all(split_param(p) is not None for p in kernel.params)


def part_name(kernel: Kernel) -> str:
    return f"{kernel.name}_part"


def part_function(kernel: Kernel, early: bool = False) -> str:
    """`kernel`'s body (or its `early` statements, in `<name>_early`) as a `__device__` function
    of its block index, grid dims and params."""
    assert kernel.params is not None and kernel.body is not None
    names = {"blockIdx": BLOCK_INDEX, "gridDim": GRID_DIM}
    body = _BUILTINS.sub(lambda m: names[m[1]], kernel.early if early else kernel.body)
    params = ", ".join((f"const dim3 {BLOCK_INDEX}", f"const dim3 {GRID_DIM}", *kernel.params))
    name = early_name(kernel) if early else part_name(kernel)
    return f"__device__ __forceinline__ void {name}({params}) {{\n{body}\n}}\n"


def early_name(kernel: Kernel) -> str:
    return f"{kernel.name}_early"


def _block_index(rel: str, grid: tuple[int, int, int]) -> str:
    gx, gy, gz = grid
    x = rel if gx * gy * gz == gx else f"{rel} % {gx}u"
    y = "0u" if gy == 1 else f"({rel} / {gx}u) % {gy}u"
    z = "0u" if gz == 1 else f"{rel} / {gx * gy}u"
    return f"dim3{{{x}, {y}, {z}}}"


def merged_kernel(members: Sequence[tuple[Kernel, tuple[int, int, int]]]) -> Kernel:
    """One kernel running every member's grid in one launch (grid: the sum of their blocks).
    Remembered for the last few thousand member lists: a plan's layers repeat theirs."""
    return _merged_kernel(tuple(members))


@functools.lru_cache(maxsize=4096)
def _merged_kernel(members: tuple[tuple[Kernel, tuple[int, int, int]], ...]) -> Kernel:
    assert len(members) >= 2 and all(is_mergeable(k) for k, _ in members)
    params: list[str] = []
    decls: dict[str, None] = {}
    calls: list[tuple[str, str]] = []  # (body call, early call or "") per member
    self_wait = any(kernel.self_wait for kernel, _ in members)
    for j, (kernel, grid) in enumerate(members):
        assert kernel.params is not None
        decls.update(dict.fromkeys(kernel.decls))
        decls[part_function(kernel)] = None
        args = []
        for decl in kernel.params:
            split = split_param(decl)
            assert split is not None
            params.append(f"{split[0]} m{j}_{split[1]}")
            args.append(f"m{j}_{split[1]}")
        rel = "og_b" if j == 0 else "og_r"
        dims = f"dim3{{{grid[0]}u, {grid[1]}u, {grid[2]}u}}"
        tail = f"({_block_index(rel, grid)}, {dims}, {', '.join(args)});"
        early = ""
        if kernel.early.strip():
            decls[part_function(kernel, early=True)] = None
            early = early_name(kernel) + tail
        # a member that does not wait itself, beside members that do: it waits in its branch
        entry = body_entry().replace("\n", " ") + " " if self_wait and not kernel.self_wait else ""
        calls.append((entry + part_name(kernel) + tail, early))
    grids = [grid for _, grid in members]
    body = _dispatch([c for c, _ in calls], grids)
    early = _dispatch([e for _, e in calls], grids) if any(e for _, e in calls) else ""
    bounds = merged_bounds([kernel for kernel, _ in members])
    text = "".join(decls) + kernel_template(params, body, bounds, early, self_wait)
    name = "og_merged_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return Kernel.assemble(name, params, body, tuple(decls), bounds, early, self_wait)


def _dispatch(calls: Sequence[str], grids: Sequence[tuple[int, int, int]]) -> str:
    """Statements running `calls[j]` (may be empty) in the blocks of member j, in a block of
    their own (so the early dispatch and the body's may both be in one kernel)."""
    lines = ["{", "const unsigned int og_b = blockIdx.x;"]
    start = 0
    for j, (call, grid) in enumerate(zip(calls, grids)):
        blocks = grid[0] * grid[1] * grid[2]
        if j == len(calls) - 1:
            lines.append("} else {")
        else:
            lines.append(f"{'if' if j == 0 else '} else if'} (og_b < {start + blocks}u) {{")
        if start and call:
            lines.append(f"  const unsigned int og_r = og_b - {start}u;")
        if call:
            lines.append("  " + call)
        start += blocks
    lines += ["}", "}"]
    return "\n".join("  " + line for line in lines)


def merged_bounds(kernels: Sequence[Kernel]) -> tuple[int, int] | None:
    """The launch bounds of a merged kernel: its members' (they share block dims), the fewest
    blocks a multiprocessor any of them asks for; None when no member has bounds."""
    bounded = [k.bounds for k in kernels if k.bounds is not None]
    if not bounded:
        return None
    return bounded[0][0], min(b[1] for b in bounded)
