"""A product region with few rows as ONE kernel: matrix-vector product with its epilogue inside.

Decode steps multiply one token (M = 1) by every weight matrix: memory-bound products that cuBLAS
runs as a gemm plus, in a product region, a separate epilogue kernel (`elementwise`). For
`M ≤ ONE_ROW_MAX_M` rows, `[M, K] @ [K, N]` with a 2-D, non-transposed `b`, this module emits one
kernel that computes the product and applies the region's epilogue before the only store:

    %y = fused(%x, %w, %b, %r) body(...) { %mm = matmul(%p0, %p1)  %t = add(%mm, %p2)
                                           %y = add(%p3, %t) }     (x : f16[1,4096])
    ->  one launch, grid (column tiles, S splits of K), 256 threads:
        acc[m][8 columns] over the block's K rows (16-byte loads of b, 8 in flight a thread,
        x from L1), reduced over the block, then y = epilogue(acc) at (m, n)

The layout (`geometry`: tile width, S, the batched inner loop, launch bounds) is chosen
from measurements on an H100: a single pass when N alone gives every multiprocessor a tile, else
about one block a multiprocessor. With S > 1 each block writes its partial sums to a per-kernel
workspace (a `__device__` array) and bumps a per-tile counter (one release/acquire atomic a
block); the block that arrives last sums the S partials in a fixed order (so results are
deterministic), applies the epilogue, stores, and resets the counter for the next launch. Kernels
with a workspace carry the node's name in their text, so two nodes never share one (they may run
concurrently on different streams).

Small matrices (K ≤ 8 × 256, the decode steps of small models) skip split-K and its second,
dependent phase (workspace, counter, the last block's re-read): the tile narrows to 4, 2 or 1
column threads (32, 16 or 8 halves) so that the 256 threads' row lanes cover K with at most 4
(else 8) rows each, all loads of a thread in flight at once.

Accumulation is float32; the product is rounded to the matmul's dtype before the epilogue, as the
unfused graph would round it. Not handled (the caller falls back to cuBLAS + one epilogue
kernel): M > ONE_ROW_MAX_M, transposed operands, batched `b`, N not a multiple of the vector width,
dtypes other than f32/f16/bf16.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from optgraph.analysis.fusion_rules import PRODUCT, plan_body
from optgraph.codegen.cuda_source import (
    LAUNCH_DEPENDENTS,
    Kernel,
    Launch,
    body_entry,
    in_param,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels.one_row.epilogues import (
    OneRowFold,
    fold_store,
    pairing,
    rope_factors,
)
from optgraph.codegen.kernels.one_row.geometry import (
    BATCH,
    BOUNDS,
    THREADS,
    VECTOR,
    Geometry,
    first_batch,
    layout,
    matrix_bytes,
    product_loop,
)
from optgraph.codegen.kernels.one_row.kernel_cache import (
    Made,
    OneRowInputs,
    kernel_name,
    recall,
    structure_key,
)
from optgraph.codegen.kernels.one_row.l2_ahead import weight_rows_to_l2
from optgraph.codegen.kernels.one_row.lane_reduce import reduce_lanes, store_sums
from optgraph.codegen.kernels.one_row.prologue import row_prologue, stage_row
from optgraph.codegen.kernels.scalars import emit_scalars, load_params, used_values
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

ONE_ROW_MAX_M = 1  # rows up to which the fused matrix-vector kernel replaces cuBLAS (0: never)


def one_row_shape(
    anchor: Node, a: TensorType, b: TensorType, has_prologue: bool = False
) -> tuple[int, int, int] | None:
    """(M, K, N) when `anchor` (a matmul) qualifies for the fused kernel, else None.

    A product with a prologue always does where fusion built it (`fusion_rules.one_row_product`
    is the contract): cuBLAS cannot run a prologue, so `ONE_ROW_MAX_M` (a tuning choice, 0 in the
    cuBLAS benchmark variant) only decides for products without one."""
    max_m = max(ONE_ROW_MAX_M, 1) if has_prologue else ONE_ROW_MAX_M
    if anchor.op != "matmul" or anchor.type is None or max_m <= 0:
        return None
    attrs = attrs_with_defaults(anchor)
    if attrs["transpose_a"] or attrs["transpose_b"] or b.rank != 2:
        return None
    dtype = a.dtype
    if dtype not in VECTOR or b.dtype != dtype:
        return None
    k, n = b.shape
    m = a.numel // k if k else 0
    if m < 1 or m > max_m or n % VECTOR[dtype] or anchor.type.numel != m * n:
        return None
    return m, k, n


def one_row_kernel(
    salt: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    anchor: Node,
    epilogue: Sequence[Node],
    result: str,
    out_type: TensorType,
    prologue: Sequence[Node] = (),
    resident: frozenset[str] = frozenset(),
    fold: OneRowFold | None = None,
    l2_ahead: bool = False,
    most_splits: int | None = None,
    rope_pairs: bool = False,
) -> tuple[Kernel, tuple[int, int, int]] | None:
    """(kernel, grid) of the fused product, or None when the shape does not qualify. While a
    graph is lowered, each structure's kernel is generated once (`kernel_cache`).
    `rope_pairs`: a rope reads the result (`qkv_folds.rope_read_products`), so the layout is
    the one a rope fold needs, folded or not (the same sums either way)."""
    inputs = OneRowInputs(
        params, types, anchor, epilogue, result, out_type, prologue, resident, fold, l2_ahead,
        most_splits, rope_pairs,
    )  # fmt: skip
    return recall(structure_key(inputs), salt, lambda name: _one_row_kernel(name, inputs))


def _one_row_kernel(salt: str, inputs: OneRowInputs) -> Made | None:
    """(kernel, grid, layout) of the fused product, or None when the shape does not qualify.

    `fold`: the store rotates the value and/or writes it to cache rows (`epilogues`;
    the region must have no epilogue); extra params follow the region's. None where the layout
    cannot hold rope's column pairs in one tile.

    `resident`: params bound to weights no kernel writes; when the product's weight is one (and
    `EARLY_WEIGHTS`), each thread loads its first batch of weight rows into registers before
    the PDL wait, so during the preceding kernel; with `l2_ahead` (the preceding kernel streams
    little from memory), the block's later rows are brought into L2 then too
    (`l2_ahead.weight_rows_to_l2`).

    `params` name the region's operands in0, in1, ...; the anchor's weight is a param, its row
    a param or the value of `prologue` (see `row_prologue`). The kernel's phases: the product
    (`_product`: indexing, the row, the weights' loads and the multiply-adds), the reduction of
    each tile's row lanes (`lane_reduce.reduce_lanes`), then the epilogue and store, in one
    pass or after the split-K partial sums (`lane_reduce.store_sums`).
    """
    (params, types, anchor, epilogue, result, out_type, prologue, resident, fold, l2_ahead,
     most_splits, rope_pairs) = inputs  # fmt: skip
    index = {p: k for k, p in enumerate(params)}
    computed = {n.name: n.type for n in prologue if n.type is not None}
    if anchor.operands[1] not in index or (
        anchor.operands[0] not in index and anchor.operands[0] not in computed
    ):
        return None
    a_type = types[index[anchor.operands[0]]] if anchor.operands[0] in index else None
    a_type = a_type or computed[anchor.operands[0]]
    b_type = types[index[anchor.operands[1]]]
    shape = one_row_shape(anchor, a_type, b_type, bool(prologue))
    if shape is None:
        return None
    assert anchor.type is not None
    m, k, n = shape
    vec = VECTOR[a_type.dtype]
    # rope pairs the halves of a tile: an even number of column threads, for a fold and for a
    # product whose rope is not folded alike (one layout: the same bits in either plan)
    even = (fold is not None and fold.rope is not None) or rope_pairs
    g = Geometry(m, k, n, a_type.dtype, vec, *layout(k, n, vec, even, most_splits))
    if fold is not None:
        mode = pairing(fold, g.tile_cols, g.ct, n)
        if mode is None or epilogue or result != anchor.name:
            return None
        g = replace(g, fold=fold, pairing=mode)
    b_role = f"in{index[anchor.operands[1]]}"
    preload = EARLY_WEIGHTS and anchor.operands[1] in resident
    row = (anchor.operands[0], a_type)
    factors: tuple[list[str], list[str]] = ([], [])
    if fold is not None and fold.rope is not None and ROPE_FACTORS_FIRST:
        items = g.m * g.tile_cols
        if items <= THREADS:  # one store item a thread: its factors computed up front
            factors = rope_factors(fold, len(types), items, g.tile_cols, g.column("c"))
    before_wait = preload and fold is not None and fold.pos_is_input
    ahead_rows = weight_rows_to_l2(g, b_role) if preload and l2_ahead else []
    late = preload and late_trigger(matrix_bytes(g.k, g.n, vec))
    body = _product(
        g, params, types, prologue, row, b_role, preload, (factors, before_wait), ahead_rows,
        late,
    )  # fmt: skip
    body += [LAUNCH_DEPENDENTS] if late else []
    body += reduce_lanes(g)
    if fold is None:
        epi = _epilogue(params, types, epilogue, anchor, result, out_type, n)
    else:
        hoisted = bool(factors[1])
        epi = fold_store(fold, anchor.type.dtype, out_type.dtype, n, len(types), hoisted)
    stores, decl = store_sums(g, salt, epi)
    body += stores
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, j) for j, t in enumerate(types)]
    decls += fold.params(len(types)) if fold is not None else []
    text = "\n".join("  " + line for line in "\n".join(body).split("\n"))
    prefetch = _prefetch_weights(b_role, g) if PREFETCH and not preload else ""
    template = kernel_template(decls, text, BOUNDS, prefetch, preload)
    name = kernel_name(salt, g, decl, template)
    kernel = Kernel.assemble(name, decls, text, (decl,), BOUNDS, prefetch, preload)
    return kernel, (g.tiles, g.splits, 1), g


def _product(
    g: Geometry,
    params: Sequence[str],
    types: Sequence[TensorType],
    prologue: Sequence[Node],
    row_of: tuple[str, TensorType],
    b_role: str,
    preload: bool = False,
    factors: tuple[tuple[list[str], list[str]], bool] = (([], []), False),
    l2_rows: Sequence[str] = (),
    late: bool = False,
) -> list[str]:
    """The thread's tile, column and rows of K, its row (a parameter, or computed by the
    prologue and staged in shared memory when it fits), and `acc[i][v]`: the products of its
    rows of K. `preload`: the first batch of weight rows is loaded, then the PDL entry runs (the
    kernel has `self_wait`), then everything that reads what other kernels write. `factors`:
    ((the rope position's load, the rope factors' statements), whether they may come before the
    PDL wait) of a fold (`epilogues.rope_factors`), placed before the product.
    `l2_rows`: statements prefetching later weight rows into L2 (`l2_ahead.weight_rows_to_l2`),
    after the first batch's loads and before the wait. `late`: the PDL entry is the wait alone
    (the caller lets the dependents launch after the product loop: `LATE_TRIGGER_BYTES`)."""
    row, row_type = row_of
    (load_pos, rope), before_wait = factors
    row_setup, row_value = row_prologue(params, types, prologue, row, row_type, g.m)
    staged = stage_row(row in params, g.dtype, g.m, g.rows)
    if staged:
        row_value = load(g.dtype, f"og_xs[i * {g.rows}u + (kk - k0)]")
    indexing = [
        "const unsigned int tile = blockIdx.x, split = blockIdx.y;",
        f"const unsigned int cg = threadIdx.x % {g.ct}u, rl = threadIdx.x / {g.ct}u;",
        f"const unsigned int n0 = {g.column(f'cg * {g.vec}u')};",
        f"const unsigned int k0 = split * {g.rows}u;",
        f"const unsigned int k1 = min({g.k}u, k0 + {g.rows}u);",
    ]
    if preload:
        weights = [f"{b_role} + n0"]
        batch = first_batch(g.dtype, weights, g.n, g.lanes)
        entry = body_entry(trigger=not late)
        if before_wait:  # the position's load ahead of the weights', the factors after them
            head = [*indexing, *load_pos, *batch, *l2_rows, *rope, entry, *row_setup]
        else:
            head = [*indexing, *batch, *l2_rows, entry, *load_pos, *rope, *row_setup]
    else:
        head = [*row_setup, *indexing, *load_pos, *rope]
    return [
        *head,
        *staged,
        f"float acc[{g.m}][{g.vec}];",
        f"#pragma unroll\nfor (int i = 0; i < {g.m}; ++i) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {g.vec}; ++v) acc[i][v] = 0.0f;",
        "}",
        f"if (n0 < {g.n}u) {{",
        *(
            "  " + s
            for s in product_loop(
                g.dtype, [f"{b_role} + n0"], g.n, g.lanes, g.m, row_value, preload
            )
        ),
        "}",
    ]


# A rope fold's cosine and sine (double-precision pow, cos, sin) computed where the product
# starts, before the PDL wait when the position is a graph input, instead of in the store after
# the block sums; False: in the store.
ROPE_FACTORS_FIRST = True

# Prefetch each thread's first batch of weight rows into L2 before the PDL wait. Off: on an H100
# the decode steps with and without it differed less than two runs of one program did, so no
# gain is established (see docs/benchmarks.md).
PREFETCH = False

# Load each thread's first batch of weight rows into registers before the PDL wait (weights in
# the device's weight buffer only: no kernel writes them), so the loads overlap the preceding
# kernel; the L2 prefetch above is then not emitted. False: every load after the wait.
EARLY_WEIGHTS = True

# A product that loads its weights early and reads at least this many bytes of them lets its
# dependents launch (`griddepcontrol.launch_dependents`) after its product loop instead of at its
# wait: the next kernels' blocks then do not take multiprocessor slots and issue their early loads
# while the product still streams its weights, only during its reductions and stores. Smaller
# products keep the trigger at the wait (their dependents' early loads are what hides their
# launch; later, the launch-bound decode step was 19 µs slower). Measured on an H100:
# docs/results/2026-11-25-h100-paired-gate-up.md. 0: always at the wait. The trigger only says
# when dependents may launch; their wait still waits for this kernel's completion and memory.
LATE_TRIGGER_BYTES = 4 << 20


def late_trigger(weight_bytes: int) -> bool:
    """Whether a product (loading its weights early) reading `weight_bytes` of weights triggers
    its dependents after its product loop (`LATE_TRIGGER_BYTES`)."""
    return 0 < LATE_TRIGGER_BYTES <= weight_bytes


def _prefetch_weights(b_role: str, g: Geometry) -> str:
    """Statements (a block of their own) bringing the rows of `b` this thread loads first into
    L2: they run before the dependency wait, during the preceding kernel (a hint only: the
    loads after the wait read whatever is current)."""
    ct, n, k, rows = g.ct, g.n, g.k, g.rows
    lines = [
        "{",
        "  const unsigned int tile = blockIdx.x;",
        f"  const unsigned int n0 = {g.column(f'(threadIdx.x % {ct}u) * {g.vec}u')};",
        f"  const unsigned int k0 = blockIdx.y * {rows}u, k1 = min({k}u, k0 + {rows}u);",
        f"  if (n0 < {n}u) {{",
        "    #pragma unroll",
        f"    for (unsigned int j = 0; j < {BATCH}u; ++j) {{",
        f"      const unsigned int kk = k0 + threadIdx.x / {ct}u + j * {g.lanes}u;",
        f"      if (kk < k1) og_prefetch_l2({b_role} + (unsigned long long)kk * {n}u + n0);",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join("  " + line for line in lines)


def _epilogue(
    params: Sequence[str],
    types: Sequence[TensorType],
    epilogue: Sequence[Node],
    anchor: Node,
    result: str,
    out_type: TensorType,
    n: int,
) -> list[str]:
    """Statements storing out[i * n + col] = epilogue(val) (val: the product, float)."""
    assert anchor.type is not None
    dtype = anchor.type.dtype
    lines = [f"const unsigned int oi = i * {n}u + col;"]
    rounded = f"{load(dtype, store(dtype, 'val'))}" if dtype != "f32" else "val"
    lines.append(f"const float a = {rounded};")
    env: dict[str, tuple[str, str]] = {anchor.name: ("a", dtype)}
    roles = [f"in{j}" for j in range(len(params))]
    used = used_values(epilogue, (result,))
    lines += load_params(params, types, roles, used, "oi", out_type.shape, env, "q")
    lines += emit_scalars(epilogue, env, "v")
    lines.append(f"out[oi] = {store(out_type.dtype, env[result][0])};")
    return lines


def _launch(kernel: Kernel, grid: tuple[int, int, int], arity: int) -> Launch:
    args = ("out",) + tuple(f"in{j}" for j in range(arity))
    return Launch(kernel, grid, (THREADS, 1, 1), args)


def one_row_region(
    node: Node,
    types: Sequence[TensorType],
    resident: frozenset[int] = frozenset(),
    fold: OneRowFold | None = None,
    l2_ahead: bool = False,
    most_splits: int | None = None,
    rope_pairs: bool = False,
) -> list[Launch] | None:
    """The one launch of a fused product region with few rows, or None (use cuBLAS).
    `resident`: the operands (by index) that are weights no kernel writes; `fold`, `l2_ahead`,
    `most_splits`, `rope_pairs`: see `one_row_kernel` (a fold's extra params are the launch's
    next roles: in{arity}, ...)."""
    if node.body is None or node.type is None:
        return (
            None  # ONE_ROW_MAX_M is applied by one_row_shape: a prologue needs this kernel anyway
        )
    try:
        plan = plan_body(node.body, types)
    except ValueError:
        return None
    if plan.kind != PRODUCT or plan.anchor is None:
        return None
    by_name = {inner.name: inner for inner in node.body.nodes}
    made = one_row_kernel(
        node.name,
        node.body.params,
        types,
        by_name[plan.anchor],
        [by_name[e] for e in plan.epilogue],
        node.body.result,
        node.type,
        [by_name[p] for p in plan.prologue],
        frozenset(node.body.params[k] for k in resident if k < len(node.body.params)),
        fold,
        l2_ahead,
        most_splits,
        rope_pairs,
    )
    if made is None:
        return None
    kernel, grid = made
    extra = len(fold.params(0)) if fold is not None else 0
    return [_launch(kernel, grid, len(types) + extra)]


def one_row_matmul(
    node: Node,
    types: Sequence[TensorType],
    resident: frozenset[int] = frozenset(),
    fold: OneRowFold | None = None,
    l2_ahead: bool = False,
    most_splits: int | None = None,
    rope_pairs: bool = False,
) -> list[Launch] | None:
    """A plain matmul with few rows as the same kernel (no epilogue), or None; `resident`,
    `fold`, `l2_ahead`, `most_splits`, `rope_pairs`: see `one_row_region`."""
    if node.op != "matmul" or node.type is None or len(types) != 2:
        return None
    params = ("#a", "#b")  # cannot clash with IR names
    anchor = Node(node.name, "matmul", params, node.attrs, node.type)
    named = frozenset(params[k] for k in resident if k < len(params))
    made = one_row_kernel(
        node.name, params, types, anchor, [], node.name, node.type, (), named, fold, l2_ahead,
        most_splits, rope_pairs,
    )  # fmt: skip
    if made is None:
        return None
    kernel, grid = made
    return [_launch(kernel, grid, 2 + (len(fold.params(0)) if fold is not None else 0))]
