"""Candidate one-row product kernels `[1, K] @ [K, N]` (f16) for benchmarks/bench_gemv.py.

A `Config` is one layout: `threads` per block, `ct` column threads (each owns 8 halves, one
16-byte load per K row), `splits` of K across blocks (grid.y), `batch` independent loads issued
before the first is used, the load instruction, and how split-K partials are reduced:

- `last`: the original kernel's second phase (every thread fences, one counter per column tile,
  the block that arrives last sums the partials in split order);
- `rel`: the same with one release/acquire atomic per block instead of a fence per thread;
- `cluster`: a thread-block cluster of the tile's splits (sm_90); partials stay in shared memory
  and each block sums a slice of the tile's columns from its peers' (distributed shared memory)
  in split order.

Every variant is deterministic (fixed-order reductions) and accumulates in float32; the product is
rounded to f16 once. `legacy(k, n)` rebuilds the layout of optgraph's kernel before this work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

SMS = 132
VEC = 8  # halves per 16-byte load

LOADS = {
    "ldg": "ld.global.nc.v4.u32",
    "na": "ld.global.nc.L1::no_allocate.v4.u32",
    "na256": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32",
    "cs": "ld.global.cs.v4.u32",
    "ef": "ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32",
}


@dataclass(frozen=True)
class Config:
    threads: int = 256
    ct: int = 8
    splits: int = 1
    batch: int = 8  # 0: the legacy `#pragma unroll 4` loop, rows rounded up to 32 per split
    load: str = "ldg"
    reduce: str = "rel"
    legacy_rows: int = 0  # rows per split of the legacy layout (0: balanced ranges)
    min_blocks: int = 0  # __launch_bounds__'s second argument (0: none; ptxas then caps
    # registers for full occupancy and issues about 2 loads before their use)

    @property
    def lanes(self) -> int:
        return self.threads // self.ct

    def tiles(self, n: int) -> int:
        return -(-n // (self.ct * VEC))

    def describe(self, n: int) -> str:
        extra = f" b{self.batch}" if self.batch else " unroll4"
        extra += f" mb{self.min_blocks}" if self.min_blocks else ""
        return (
            f"{self.threads}t ct{self.ct} grid {self.tiles(n)}x{self.splits}{extra} "
            f"{self.load} {self.reduce if self.splits > 1 else 'single'}"
        )


def legacy(k: int, n: int) -> Config:
    """optgraph's layout before this work (`product_kernel._layout` at commit 81b7093)."""
    for limit in (4, 8):
        for ct in (8, 4, 2, 1):
            if k <= limit * (256 // ct):
                return Config(ct=ct, splits=1, batch=0, reduce="last", legacy_rows=k)
    tiles = -(-n // 64)
    s = max(1, min(-(-528 // tiles), k // 128))
    rows = -(-k // s)
    rows = -(-rows // 32) * 32
    return Config(ct=8, splits=-(-k // rows), batch=0, reduce="last", legacy_rows=rows)


def filled(
    k: int,
    n: int,
    ct: int,
    threads: int = 256,
    per_sm: float = 4.0,
    min_rows: int = 64,
    **kw: object,
) -> Config:
    """The fewest splits that give about `per_sm` blocks a multiprocessor (at least 1); register
    budget for `per_sm` blocks resident (unless `min_blocks` is given)."""
    kw.setdefault("min_blocks", max(1, min(math.ceil(per_sm), 2048 // threads)))
    cfg = Config(threads=threads, ct=ct, **kw)  # type: ignore[arg-type]
    want = int(SMS * per_sm)
    s = max(1, min(-(-want // cfg.tiles(n)), k // min_rows))
    if cfg.reduce == "cluster":
        s = min(s, 8)
    return replace(cfg, splits=s)


CLUSTER_SYNC = (
    'asm volatile("barrier.cluster.arrive.release.aligned;\\n'
    'barrier.cluster.wait.acquire.aligned;" ::: "memory");'
)
CLUSTER_READ = (  # part = og_part[c] of the cluster's block q (distributed shared memory)
    'asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(q));',
    'asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(part) : "r"(remote) : "memory");',
)


def _unpack(var: str) -> list[str]:
    lines = []
    for i, part in enumerate("xyzw"):
        lines.append(
            f"wf[{2 * i}] = og_f16_to_f32((og_f16)({var}.{part} & 0xffffu)); "
            f"wf[{2 * i + 1}] = og_f16_to_f32((og_f16)({var}.{part} >> 16));"
        )
    return lines


def _load(cfg: Config, dst: str, ptr: str) -> str:
    """One 16-byte load of `ptr` into the uint4 `dst` (a hint: inline PTX, volatile)."""
    if cfg.load == "ldg":
        return f"{dst} = __ldg(reinterpret_cast<const uint4*>({ptr}));"
    policy = (", %5", ', "l"(pol)') if cfg.load == "ef" else ("", "")
    return (
        f'asm volatile("{LOADS[cfg.load]} {{%0,%1,%2,%3}}, [%4]{policy[0]};" '
        f': "=r"({dst}.x), "=r"({dst}.y), "=r"({dst}.z), "=r"({dst}.w) : "l"({ptr}){policy[1]});'
    )


def kernel_source(name: str, cfg: Config, k: int, n: int) -> str:
    """The CUDA text of `cfg` for `[1, k] @ [k, n]`, kernel `name(out, x, w)` (f16)."""
    ct, lanes, tc, s = cfg.ct, cfg.lanes, cfg.ct * VEC, cfg.splits
    tiles = cfg.tiles(n)
    body: list[str] = [
        "const unsigned int tile = blockIdx.x, split = blockIdx.y;",
        f"const unsigned int cg = threadIdx.x % {ct}u, rl = threadIdx.x / {ct}u;",
        f"const unsigned int n0 = tile * {tc}u + cg * {VEC}u;",
    ]
    if cfg.legacy_rows:
        body += [
            f"const unsigned int k0 = split * {cfg.legacy_rows}u;",
            f"const unsigned int k1 = min({k}u, k0 + {cfg.legacy_rows}u);",
        ]
    else:
        body += [
            f"const unsigned int k0 = (unsigned int)(((unsigned long long)split * {k}u) / {s}u);",
            (
                "const unsigned int k1 = (unsigned int)(((unsigned long long)(split + 1u) * "
                f"{k}u) / {s}u);"
            ),
        ]
    if cfg.load == "ef":
        body.append(
            'unsigned long long pol; asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"'
            ' : "=l"(pol));'
        )
    body += [
        f"float acc[{VEC}];",
        f"#pragma unroll\nfor (int v = 0; v < {VEC}; ++v) acc[v] = 0.0f;",
        f"if (n0 < {n}u) {{",
        "  const og_f16* wp = w + n0;",
    ]
    if cfg.batch == 0:
        body += [
            f"  #pragma unroll {8 if s == 1 else 4}",
            f"  for (unsigned int kk = k0 + rl; kk < k1; kk += {lanes}u) {{",
            (
                "    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(wp + "
                f"(unsigned long long)kk * {n}u));"
            ),
            "    const float xv = og_f16_to_f32(x[kk]);",
            f"    float wf[{VEC}];",
            *("    " + line for line in _unpack("wv")),
            f"    #pragma unroll\n    for (int v = 0; v < {VEC}; ++v) acc[v] += xv * wf[v];",
            "  }",
        ]
    else:
        u = cfg.batch
        ptr = f"wp + (unsigned long long)(kk + {{u}} * {lanes}u) * {n}u"
        body += [
            "  unsigned int kk = k0 + rl;",
            f"  for (; kk + {(u - 1) * lanes}u < k1; kk += {u * lanes}u) {{",
            f"    uint4 wv[{u}];",
            *("    " + _load(cfg, f"wv[{j}]", ptr.replace("{u}", str(j))) for j in range(u)),
            f"    #pragma unroll\n    for (int j = 0; j < {u}; ++j) {{",
            f"      const float xv = og_f16_to_f32(x[kk + j * {lanes}u]);",
            f"      float wf[{VEC}];",
            *("      " + line for line in _unpack("wv[j]")),
            f"      #pragma unroll\n      for (int v = 0; v < {VEC}; ++v) acc[v] += xv * wf[v];",
            "    }",
            "  }",
            # the rows left (fewer than a batch): one batch of guarded loads, all in flight
            "  if (kk < k1) {",
            f"    uint4 wv[{u}];",
            *(
                f"    if (kk + {j * lanes}u < k1) "
                + _load(cfg, f"wv[{j}]", ptr.replace("{u}", str(j)))
                + f" else wv[{j}] = make_uint4(0u, 0u, 0u, 0u);"
                for j in range(u)
            ),
            f"    #pragma unroll\n    for (int j = 0; j < {u}; ++j) {{",
            f"      const unsigned int row = kk + j * {lanes}u;",
            "      const float xv = row < k1 ? og_f16_to_f32(x[row]) : 0.0f;",
            f"      float wf[{VEC}];",
            *("      " + line for line in _unpack("wv[j]")),
            f"      #pragma unroll\n      for (int v = 0; v < {VEC}; ++v) acc[v] += xv * wf[v];",
            "    }",
            "  }",
        ]
    body.append("}")
    # Row lanes of one warp (lane bits above the column group), then the groups in order.
    groups = cfg.threads // 32 if ct < 32 else lanes
    if ct < 32:
        body += [
            f"#pragma unroll\nfor (int v = 0; v < {VEC}; ++v)",
            (
                f"  for (int o = {ct}; o < 32; o <<= 1) "
                "acc[v] += __shfl_xor_sync(0xffffffffu, acc[v], o);"
            ),
        ]
    body += [
        f"__shared__ float og_red[{groups}][{tc}];",
        "const unsigned int lane = threadIdx.x & 31u;",
        f"const unsigned int group = {'threadIdx.x >> 5' if ct < 32 else 'rl'};",
        f"if ({'lane < ' + str(ct) + 'u' if ct < 32 else 'true'}) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {VEC}; ++v) og_red[group][cg * {VEC}u + v] = acc[v];",
        "}",
        "__syncthreads();",
    ]
    tile_sum = f"float val = 0.0f;\n  for (int g = 0; g < {groups}; ++g) val += og_red[g][c];"
    store = "out[col] = og_f32_to_f16(val);"
    each_col = (
        f"for (unsigned int c = threadIdx.x; c < {tc}u; c += {cfg.threads}u) {{\n"
        f"  const unsigned int col = tile * {tc}u + c;\n"
        f"  if (col >= {n}u) continue;"
    )
    decl = ""
    if s == 1:
        body += [each_col, "  " + tile_sum, "  " + store, "}"]
    elif cfg.reduce in ("last", "rel"):
        ws, cnt = f"{name}_ws", f"{name}_cnt"
        decl = f"__device__ float {ws}[{s * n}];\n__device__ unsigned int {cnt}[{tiles}];\n"
        body += [each_col, "  " + tile_sum, f"  {ws}[split * {n}u + col] = val;", "}"]
        if cfg.reduce == "last":
            body += [
                "__threadfence();",
                "__syncthreads();",
                "__shared__ bool og_last;",
                f"if (threadIdx.x == 0) og_last = atomicAdd(&{cnt}[tile], 1u) == {s - 1}u;",
                "__syncthreads();",
                "if (!og_last) return;",
                "__threadfence();",
            ]
        else:
            body += [
                "__syncthreads();",
                "__shared__ bool og_last;",
                "if (threadIdx.x == 0) {",
                "  unsigned int seen;",
                (
                    '  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(seen) '
                    f': "l"(&{cnt}[tile]) : "memory");'
                ),
                f"  og_last = seen == {s - 1}u;",
                "}",
                "__syncthreads();",
                "if (!og_last) return;",
            ]
        body += [
            each_col,
            "  float val = 0.0f;",
            f"  for (unsigned int q = 0; q < {s}u; ++q) val += __ldcg(&{ws}[q * {n}u + col]);",
            "  " + store,
            "}",
            f"if (threadIdx.x == 0) {cnt}[tile] = 0u;",
        ]
    else:  # cluster: the tile's splits are one cluster; partials in shared memory
        body += [
            f"__shared__ float og_part[{tc}];",
            f"for (unsigned int c = threadIdx.x; c < {tc}u; c += {cfg.threads}u) {{",
            "  " + tile_sum,
            "  og_part[c] = val;",
            "}",
            CLUSTER_SYNC,
            f"for (unsigned int c = threadIdx.x; c < {tc}u; c += {cfg.threads}u) {{",
            f"  if (c % {s}u != split) continue;",
            f"  const unsigned int col = tile * {tc}u + c;",
            "  float val = 0.0f;",
            "  const unsigned int local = (unsigned int)__cvta_generic_to_shared(&og_part[c]);",
            f"  for (unsigned int q = 0; q < {s}u; ++q) {{",
            "    unsigned int remote; float part;",
            *("    " + line for line in CLUSTER_READ),
            "    val += part;",
            "  }",
            f"  if (col < {n}u) " + store,
            "}",
            CLUSTER_SYNC,
        ]
    bounds = f"{cfg.threads}, {cfg.min_blocks}" if cfg.min_blocks else f"{cfg.threads}"
    attrs = f"__launch_bounds__({bounds})"
    if cfg.legacy_rows and not cfg.batch:
        attrs = ""  # optgraph's kernel had no launch bounds
    if cfg.reduce == "cluster" and s > 1:
        attrs = f"__cluster_dims__(1, {s}, 1) " + attrs
    text = "\n".join("  " + line for line in "\n".join(body).split("\n"))
    return (
        f'{decl}extern "C" __global__ void {attrs} {name}(og_f16* out, const og_f16* x, '
        f"const og_f16* w) {{\n{text}\n}}\n"
    )


def cluster_ok(cfg: Config) -> bool:
    """Cluster variants need splits ≤ 8 (portable cluster size) and ≥ the columns to share."""
    return cfg.reduce != "cluster" or cfg.splits <= 8
