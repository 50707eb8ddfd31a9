"""Layout and inner loop of the one-row product kernels (`product_kernel`, `sibling_kernel`).

A kernel computes `[M, K] @ [K, N]` (M ≤ `product_kernel.ONE_ROW_MAX_M`) with blocks of THREADS
threads. A block owns a tile of `ct` column threads × one 16-byte vector of b each (8 halves,
4 floats) and rows [k0, k1) of K (split `blockIdx.y` of S); its THREADS / ct row lanes take
every lanes-th row. Per thread:

    for each batch of BATCH rows kk:           (the rows left: one batch of guarded loads)
        wv[j] = 16 bytes of b[kk_j, n0 .. n0 + vec)     all BATCH loads issued first
        acc[i][v] += row(i, kk_j) * wv[j][v]            then used; row(i, kk): the hook for a
                                                        prologue (cuda_row_prologue)

`layout(k, n, vec)` picks (ct, tiles, S, rows per split) from runs of
`benchmarks/bench_gemv.py --sweep` on an H100 (see docs/benchmarks.md):

- loads in flight: a 256-thread kernel without `__launch_bounds__(THREADS, MIN_BLOCKS)` gets 32
  registers from ptxas, which then issues only one or two loads before their first use, so the
  bounds are always set (the same layout runs clearly slower without them);
- about one block per multiprocessor (S = ⌈SMS / tiles⌉) rather than four: fewer partial sums
  and a cheaper second phase;
- a single pass (no split-K) for wide matrices, where a tile width of 32, 16 or 8 column threads
  gives between SMS and MIN_BLOCKS × SMS tiles: every block resident at once (narrower tiles
  that need two waves of blocks were slower);
- otherwise 16 column threads (32 when N has fewer than 16 tiles of 16): 256-byte row segments;
- `og_load_stream` (`ld.global.nc.L1::no_allocate`) and one release/acquire atomic a block
  (`og_arrive`) instead of a fence in every thread: each a small gain at every shape measured.

Small matrices (K ≤ SINGLE_PASS_ROWS × THREADS) keep the single-pass layout of fewer column
threads (8, 4, 2, 1) that gives every thread at most 4 (else 8) rows: one batch, one latency.
Tiles of 1 or 2 column threads (16 or 32 bytes of each row) only where the matrix is at most
NARROW_MAX_BYTES: from HBM, row segments of half a DRAM burst halve the bandwidth (a
tensor-parallel rank's [2048, 4096] f16 o-projection:
docs/results/2026-11-24-h200x2-several-gpus.md).

Not done: hiding a launch's fixed cost (ramp, first latency, tail) behind its neighbours, e.g.
an L2 prefetch of the first weight rows before the PDL wait (`product_kernel.PREFETCH`, off: no gain
established); blocks of other than 256 threads (a single pass of 1024-thread blocks was a little
faster on a square matrix, but would not merge with the step's other kernels). The figures behind
each choice are in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.codegen.kernels.one_row.epilogues import OneRowFold, column

THREADS = 256
SMS = 132  # multiprocessors of an H100 / H200
MIN_BLOCKS = 2  # __launch_bounds__(THREADS, MIN_BLOCKS): at most 128 registers a thread
BOUNDS = (THREADS, MIN_BLOCKS)
BATCH = 8  # 16-byte loads of b a thread issues before using the first
SINGLE_PASS_ROWS = 8  # small K: rows a thread may take without split-K (0: never single pass)
MIN_ROWS_PER_SPLIT = 64
VECTOR = {"f16": 8, "bf16": 8, "f32": 4}  # elements per 16-byte load
VECTOR_BYTES = 16
# Fewer than 4 column threads read 16 or 32 bytes of a row: half a DRAM burst or less. Such
# tiles are kept for matrices small enough to stay in L2 between steps (the small model's).
WHOLE_BURST_CT = 4
NARROW_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class Geometry:
    """The product `[m, k] @ [k, n]` and its layout (`layout` below): `ct` column
    threads of `vec` elements a tile, `tiles` tiles, `splits` slices of K of `rows` rows."""

    m: int
    k: int
    n: int
    dtype: str
    vec: int
    ct: int
    tiles: int
    splits: int
    rows: int
    fold: OneRowFold | None = None
    pairing: str = ""  # how tiles hold rope's column pairs (`epilogues.pairing`)

    @property
    def tile_cols(self) -> int:
        return self.ct * self.vec

    def column(self, local: str) -> str:
        """C expression of the global column of the tile's column `local` (`tile` in scope)."""
        if self.fold is None or self.pairing != "chunked":
            return f"tile * {self.tile_cols}u + {local}"
        return column(self.pairing, self.fold, self.tile_cols, local)

    @property
    def warps(self) -> int:
        return THREADS // 32

    @property
    def lanes(self) -> int:
        return THREADS // self.ct


def layout(
    k: int, n: int, vec: int, even: bool = False, most_splits: int | None = None
) -> tuple[int, int, int, int]:
    """(column threads, tiles, splits, rows per split) of a [K, N] matrix (see the docstring).
    `even`: an even number of column threads (a rope fold pairs the halves of a tile);
    `most_splits`: at most that many splits of K (a product sharing its launch with others,
    `codegen/plan/sibling_splits.py`)."""
    size = matrix_bytes(k, n, vec)
    for limit in (min(4, SINGLE_PASS_ROWS), SINGLE_PASS_ROWS):
        fits = [ct for ct in (8, 4, 2, 1) if limit and k <= limit * (THREADS // ct)]
        fits = [ct for ct in fits if not (even and ct % 2)]
        fits = [ct for ct in fits if ct >= WHOLE_BURST_CT or size <= NARROW_MAX_BYTES]
        if fits:
            ct = fits[0]
            return ct, -(-n // (ct * vec)), 1, k
    for ct in (32, 16, 8):
        tiles = -(-n // (ct * vec))
        if SMS <= tiles <= MIN_BLOCKS * SMS:
            return ct, tiles, 1, k
    ct = 32 if -(-n // (16 * vec)) < 16 else 16
    tiles = -(-n // (ct * vec))
    return (ct, tiles, *splits(k, tiles, most_splits, BATCH * (THREADS // ct)))


def matrix_bytes(k: int, n: int, vec: int) -> int:
    """Bytes of a [K, N] matrix of `vec` elements a 16-byte vector."""
    return k * n * (VECTOR_BYTES // vec)


def splits(k: int, tiles: int, most: int | None = None, unit: int = 1) -> tuple[int, int]:
    """(S, rows per split): about a block per multiprocessor, ≥ MIN_ROWS_PER_SPLIT rows each;
    with `most`, at most that many splits, all of the same whole number of batches of `unit`
    rows where K is whole batches (the most such splits up to `most`), else of whole batches but
    the last."""
    s = max(1, min(-(-SMS // tiles), k // MIN_ROWS_PER_SPLIT))
    if most is None:
        unit = 1
    else:
        s = max(1, min(s, most))
        if k % unit == 0:
            s = max(d for d in range(1, s + 1) if (k // unit) % d == 0)
    rows = -(-k // s)
    rows = -(-rows // unit) * unit
    return -(-k // rows), rows


def unpack(dtype: str, var: str, out: str) -> list[str]:
    """Statements turning the 16-byte vector `var` (uint4) into floats `out[0..v)`."""
    if dtype == "f32":
        return [
            f"{out}[0] = __uint_as_float({var}.x); {out}[1] = __uint_as_float({var}.y);",
            f"{out}[2] = __uint_as_float({var}.z); {out}[3] = __uint_as_float({var}.w);",
        ]
    conv, bits = ("og_f16_to_f32", "og_f16") if dtype == "f16" else ("og_bf16_to_f32", "og_bf16")
    lines = []
    for i, part in enumerate("xyzw"):
        lines.append(
            f"{out}[{2 * i}] = {conv}(({bits})({var}.{part} & 0xffffu)); "
            f"{out}[{2 * i + 1}] = {conv}(({bits})({var}.{part} >> 16));"
        )
    return lines


PRELOADED = "og_wv0"  # the first batch of weight vectors, loaded before the PDL wait


def first_batch(dtype: str, weights: Sequence[str], n: int, lanes: int) -> list[str]:
    """Statements declaring `PRELOADED` and loading into it the thread's first batch of weight
    rows (kb = k0 + rl, guarded by k1; nothing where the column is past N): they may run before
    the PDL wait when every weight is one no kernel writes. Needs `k0`, `k1`, `rl`, `n0`."""
    p = len(weights)
    batch = _batch(p)
    return [
        f"uint4 {PRELOADED}[{p}][{batch}];",
        "{",
        "  const unsigned int kb = k0 + rl;",
        f"  if (n0 < {n}u) {{",
        *_indented("    ", _loads(weights, n, lanes, batch, True, PRELOADED)),
        "  }",
        "}",
    ]


def _batch(p: int) -> int:
    return max(1, BATCH // p)  # loads in flight: BATCH, whatever the number of weights


def _loads(
    weights: Sequence[str], n: int, lanes: int, batch: int, guarded: bool, into: str = "wv"
) -> list[str]:
    lines = []
    for j in range(batch):
        row = f"kb + {j * lanes}u"
        each = [
            f"{into}[{q}][{j}] = og_load_stream({w} + (unsigned long long)({row}) * {n}u);"
            for q, w in enumerate(weights)
        ]
        lines.append(f"if ({row} < k1) {{ {' '.join(each)} }}" if guarded else " ".join(each))
    return lines


def _use(
    dtype: str, p: int, m: int, lanes: int, row_value: str, guarded: bool, wv: str = "wv"
) -> list[str]:
    """Statements of loop index j: the multiply-adds of row kk = kb + j · lanes."""
    vec = VECTOR[dtype]
    lines = [
        f"const unsigned int kk = kb + j * {lanes}u;",
        f"float wf[{p}][{vec}];",
    ]
    for q in range(p):
        lines += unpack(dtype, f"{wv}[{q}][j]", f"wf[{q}]")
    lines += [
        f"#pragma unroll\nfor (int i = 0; i < {m}; ++i) {{",
        f"  const float xv = {row_value};",
        f"  #pragma unroll\n  for (int q = 0; q < {p}; ++q) {{",
        f"    #pragma unroll\n    for (int v = 0; v < {vec}; ++v)",
        f"      acc[q * {m} + i][v] += xv * wf[q][v];",
        "  }",
        "}",
    ]
    if guarded:
        lines = ["if (kk < k1) {", *_indented("  ", lines[1:]), "}"]
        lines.insert(0, f"const unsigned int kk = kb + j * {lanes}u;")
    return lines


def product_loop(
    dtype: str,
    weights: Sequence[str],
    n: int,
    lanes: int,
    m: int,
    row_value: str,
    preloaded: bool = False,
) -> list[str]:
    """Statements adding the thread's rows kk = k0 + rl, k0 + rl + lanes, ... < k1 into
    `acc[q * m + i][v]` += row(i, kk) · `weights[q]`[kk · n + v], for every weight q (a pointer
    expression at the thread's first column) and row i < m; `row_value` is the C expression of
    row(i, kk). Declares `kb`; needs `k0`, `k1`, `rl` and `acc`. `preloaded`: the first batch
    is already in `PRELOADED` (`first_batch`, before the PDL wait)."""
    p = len(weights)
    batch = _batch(p)
    head = ["unsigned int kb = k0 + rl;"]
    if preloaded:
        head += [
            "{  // the first batch, loaded before the dependency wait",
            f"  #pragma unroll\n  for (int j = 0; j < {batch}; ++j) {{",
            *_indented("    ", _use(dtype, p, m, lanes, row_value, True, PRELOADED)),
            "  }",
            "}",
            f"kb += {batch * lanes}u;",
        ]
    return _indented(
        "",
        [
            *head,
            f"for (; kb + {(batch - 1) * lanes}u < k1; kb += {batch * lanes}u) {{",
            f"  uint4 wv[{p}][{batch}];",
            *_indented("  ", _loads(weights, n, lanes, batch, False)),
            f"  #pragma unroll\n  for (int j = 0; j < {batch}; ++j) {{",
            *_indented("    ", _use(dtype, p, m, lanes, row_value, False)),
            "  }",
            "}",
            "if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight",
            f"  uint4 wv[{p}][{batch}];",
            *_indented("  ", _loads(weights, n, lanes, batch, True)),
            f"  #pragma unroll\n  for (int j = 0; j < {batch}; ++j) {{",
            *_indented("    ", _use(dtype, p, m, lanes, row_value, True)),
            "  }",
            "}",
        ],
    )


def _indented(prefix: str, lines: Sequence[str]) -> list[str]:
    """`lines` split at embedded newlines (a `#pragma` before its loop), each after `prefix`."""
    return [prefix + part for line in lines for part in line.split("\n")]
