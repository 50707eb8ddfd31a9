"""The head-to-head suite's floors and its agreement check (head_to_head.py).

Bandwidth floor of a decode step (`floor_bytes`): the bytes it must move (every weight byte
read, the embedding rows gathered rather than the whole table, every input including the KV
caches read, outputs written, KV rows written once) divided by the device-to-device copy
bandwidth measured in the same run (`copy_bandwidth`, bytes read + written).

Compute floor of a prefill: the FLOPs it must do (every matrix product 2·M·N·K; attention
4·D per visible (query, key) pair per head: q·kᵀ and p·v, a causal row seeing only its own keys)
divided by the f16 GEMM rate measured in the same run (`gemm_rate`: one large cuBLAS product,
8192³, float32 accumulation, as the models' products use).

Agreement (`agreement`): optgraph, PyTorch eager and CuPy eager (cupy_interpreter.py,
a third implementation) each run once on fresh device copies of the model's inputs and weights
drawn again from the same seed, never the arrays the timed variants used; the column shows the
NMSE of optgraph against PyTorch and against CuPy, and the weights' fingerprint (a float64 sum
per weight) taken when the model was built is compared with the weights' now, so a variant that
wrote into its weights is named rather than hidden in the figure. An output that is all zeros or
not finite is named too.

    og~torch 6.1e-06, og~cupy 5.9e-06                       (what a healthy row shows)
    og~torch 1.0e+00, og~cupy 1.0e+00 (ours all zeros)      (what a broken one shows)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import cupy as cp
import numpy as np

from optgraph.ir.graph import Graph
from optgraph.ir.ops import attrs_with_defaults

GEMM_SIZE = 8192


def gemm_rate(size: int = GEMM_SIZE, iters: int = 10) -> float:
    """FLOP/s of one f16 cuBLAS product of `size`³ (float32 accumulation), CUDA-event timed."""
    rng = cp.random.default_rng(0)  # random operands: constant ones draw less power, clock higher
    a = rng.standard_normal((size, size), dtype=cp.float32).astype(cp.float16)
    b = rng.standard_normal((size, size), dtype=cp.float32).astype(cp.float16)
    c = cp.empty((size, size), dtype=cp.float16)
    for _ in range(3):
        cp.matmul(a, b, out=c)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        cp.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    seconds = cp.cuda.get_elapsed_time(start, end) / 1000.0 / iters
    del a, b, c
    return 2.0 * size**3 / seconds


def floor_bytes(graph: Graph) -> int:
    """Bytes a decode step must move at least (see the module docstring)."""
    gathered: dict[str, int] = {}
    types = graph.value_types()
    for node in graph.nodes:
        if node.op == "get_rows" and node.type is not None:
            table = node.operands[0]
            gathered[table] = gathered.get(table, 0) + node.type.nbytes
    total = sum(gathered.get(w.name, w.type.nbytes) for w in graph.weights)
    total += sum(i.type.nbytes for i in graph.inputs)
    for name in graph.output_names():
        producer = next(n for n in graph.nodes if n.name == name)
        if producer.op == "kv_cache_write":
            total += types[producer.operands[1]].nbytes  # only the new rows are written
        else:
            total += types[name].nbytes
    return total


def copy_bandwidth(nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read and written."""
    src = cp.ones(nbytes // 2, dtype=cp.float16)
    dst = cp.empty_like(src)
    for _ in range(3):
        cp.copyto(dst, src)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        cp.copyto(dst, src)
    end.record()
    end.synchronize()
    seconds = cp.cuda.get_elapsed_time(start, end) / 1000.0 / iters
    del src, dst
    return 2.0 * nbytes / seconds


def rate_line(rate: float) -> str:
    """The summary's line on the GEMM rate and what each floor means."""
    return (
        f"f16 GEMM rate (one cuBLAS {GEMM_SIZE}³ product): {rate / 1e12:.0f} TFLOP/s; the"
        " prefill's floor is its FLOPs at that rate (head_to_head_checks), a decode step's its"
        " bytes at the copy bandwidth"
    )


def _visible_pairs(sq: int, skv: int, causal: bool) -> int:
    """(query, key) pairs a head attends to: all, or bottom-right causal (row i sees the keys up
    to skv - sq + i)."""
    if not causal:
        return sq * skv
    return sum(max(0, min(skv, skv - sq + i + 1)) for i in range(sq))


def compute_flops(graph: Graph) -> int:
    """Multiply-add FLOPs of the graph's matrix products and attention (see the docstring)."""
    types = graph.value_types()
    total = 0
    for node in graph.nodes:
        if node.type is None:
            continue
        if node.op == "matmul":
            a = types[node.operands[0]]
            ta = bool(attrs_with_defaults(node)["transpose_a"])
            k = a.shape[-2] if ta else a.shape[-1]
            total += 2 * node.type.numel * k
        elif node.op == "attention":
            b, hq, sq, d = types[node.operands[0]].shape
            skv = types[node.operands[1]].shape[2]
            causal = bool(attrs_with_defaults(node).get("causal", False))
            total += 4 * d * b * hq * _visible_pairs(sq, skv, causal)
    return total


def weight_fingerprint(weights: Mapping[str, Any]) -> dict[str, float]:
    """A float64 sum of every weight (device arrays summed on the device)."""
    out = {}
    for name, w in weights.items():
        arr = w if isinstance(w, cp.ndarray) else cp.asarray(w)
        out[name] = float(arr.astype(cp.float64).sum())
    return out


def changed_weights(before: Mapping[str, float], weights: Mapping[str, Any]) -> list[str]:
    """The weights whose fingerprint differs from `before` (a NaN sum counts as changed)."""
    now = weight_fingerprint(weights)
    return [n for n, v in before.items() if now.get(n) != v]


def _host(value: Any) -> np.ndarray:
    arr = cp.asnumpy(value) if isinstance(value, cp.ndarray) else value
    if hasattr(arr, "detach"):  # a torch tensor
        arr = arr.detach().float().cpu().numpy()
    return np.asarray(arr, dtype=np.float64)


def _nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    from optgraph.reference.interpreter import nmse

    return nmse(actual, expected)


def _health(name: str, arr: np.ndarray) -> str:
    if not np.all(np.isfinite(arr)):
        return f"{name} not finite"
    if not np.any(arr):
        return f"{name} all zeros"
    return ""


Run = Callable[[dict[str, Any], dict[str, Any]], Mapping[str, Any]]
SUSPECT_NMSE = 1e-3  # above it, the cell says which side is off and tries the diagnostics


def agreement(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    fresh_weights: Callable[[], dict[str, Any]],
    run_ours: Run,
    run_torch: Run,
    changed: list[str] | None = None,
    diagnostics: Mapping[str, Run] | None = None,
) -> str:
    """The agreement cell: each implementation on its own fresh copies (see the docstring);
    `changed` names the shared weights whose fingerprint moved since the model was built;
    `diagnostics` (other ways to run ours, e.g. without PDL) run only when optgraph and PyTorch
    disagree by more than `SUSPECT_NMSE`, each compared with PyTorch."""
    from benchmarks.harness.cupy_interpreter import CupyModel

    first = graph.output_names()[0]
    results: dict[str, np.ndarray] = {}

    def run_fresh(who: str, run: Run) -> None:
        fresh_inputs = {k: cp.asarray(np.array(v, copy=True)) for k, v in inputs.items()}
        out = run(fresh_inputs, fresh_weights())
        results[who] = _host(out[first])
        del out
        cp.get_default_memory_pool().free_all_blocks()

    run_fresh("ours", run_ours)
    run_fresh("torch", run_torch)
    run_fresh(
        "cupy", lambda i, w: CupyModel(graph)({**i, **{k: cp.asarray(v) for k, v in w.items()}})
    )
    versus_torch = _nmse(results["ours"], results["torch"])
    cells = [
        f"og~torch {versus_torch:.1e}",
        f"og~cupy {_nmse(results['ours'], results['cupy']):.1e}",
    ]
    if versus_torch > SUSPECT_NMSE:
        cells.append(f"torch~cupy {_nmse(results['torch'], results['cupy']):.1e}")
        for who, run in (diagnostics or {}).items():
            try:
                run_fresh(who, run)
                cells.append(f"{who}~torch {_nmse(results[who], results['torch']):.1e}")
            except Exception as err:  # noqa: BLE001 - a diagnostic must not hide the cell
                cells.append(f"{who}: {type(err).__name__}")
    notes = [h for who, arr in results.items() if (h := _health(who, arr))]
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        notes.append(f"weights changed by the variants: {', '.join(changed[:3])}{more}")
    return ", ".join(cells) + (f" ({'; '.join(notes)})" if notes else "")
