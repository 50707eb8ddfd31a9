"""The GPU benchmark scripts run end to end on the fake CuPy (tests/support/fake_cupy.py).

Kernels compute nothing there and every CUDA-event interval reads 10 µs, so no figure means
anything: these tests check the plumbing between bench_gpu.py, head_to_head.py,
bench_stream_threshold.py, gpu_variants.py and timing.py (variants built, programs lowered and
run through the CUDA runtime's host side, tables written), which otherwise only the GPU machine
would exercise.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.fake_cupy import fake_cupy

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_MS = 0.01


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake CuPy with what the benchmarks use beyond the runtime, and benchmarks/ importable
    (its modules dropped again afterwards, so no test sees another's fake)."""
    with fake_cupy(monkeypatch) as fake:
        cp = sys.modules["cupy"]

        def device_array(host: Any) -> Any:
            return fake.asarray(np.array(host))

        extras: dict[str, Any] = {
            "asarray": device_array,
            "empty": lambda shape, dtype: device_array(np.empty(shape, dtype)),
            "get_default_memory_pool": lambda: SimpleNamespace(free_all_blocks=lambda: None),
        }
        for name, value in extras.items():
            monkeypatch.setattr(cp, name, value, raising=False)
        monkeypatch.setattr(cp.cuda, "get_elapsed_time", lambda a, b: INTERVAL_MS, raising=False)
        monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0, raising=False)
        props = {"name": b"Fake GPU"}
        monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", lambda d: props, raising=False)
        monkeypatch.setattr(cp.cuda.Stream, "null", cp.cuda.Stream(), raising=False)
        monkeypatch.syspath_prepend(str(ROOT / "examples"))
        monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
        names = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
        yield lambda name: importlib.import_module(name)
        for name in names:
            sys.modules.pop(name, None)


def _rows(text: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_bench_gpu_examples_suite(benchmarks: Any, tmp_path: Path) -> None:
    bench_gpu: ModuleType = benchmarks("bench_gpu")
    out = tmp_path / "table.md"
    args = ["--only", "diamond,mlp", "--iters", "3", "--warmup", "1", "--markdown", str(out)]
    assert bench_gpu.main(args) == 0
    rows = _rows(out.read_text())
    assert set(rows) == {"model", "diamond", "mlp"}
    head = rows["model"]
    for model in ("diamond", "mlp"):
        cells = dict(zip(head, rows[model], strict=True))
        for variant in ("og-eager", "og-graph-1s", "og-graph-chains"):
            assert cells[f"{variant} (µs)"] == f"{INTERVAL_MS * 1000:.1f}"


def test_head_to_head_suite_with_optgraph_variants(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_gpu: ModuleType = benchmarks("bench_gpu")
    head_to_head: ModuleType = benchmarks("head_to_head")
    monkeypatch.setattr(head_to_head, "copy_bandwidth", lambda: 3e12)  # no 1 GiB on the host
    out = tmp_path / "h2h.md"
    args = ["--suite", "head-to-head", "--only", "inception", "--iters", "2"]
    args += ["--variants", "og-fused-1s,og-fused-streams", "--markdown", str(out)]
    assert bench_gpu.main(args) == 0
    text = out.read_text()
    assert "| inception_block | 10.0 | 10.0 | - |" in text  # both timed; no cupy-eager to divide
    assert "| inception_block | - | - | 10.0 (og-fused-1s) |" in text  # the summary's first cells
    names = [v.name for v in head_to_head.suite_variants()]
    assert len(names) == len(set(names)) and {"torch-graph", "og-fused-1s-cublas"} <= set(names)


def test_bench_gpu_rejects_an_unknown_variant(benchmarks: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        benchmarks("bench_gpu").main(["--suite", "head-to-head", "--variants", "og-nothing"])
    assert exit_.value.code == 2


def test_stream_threshold_launch_figures(benchmarks: Any) -> None:
    threshold: ModuleType = benchmarks("bench_stream_threshold")
    lines, times = threshold.launch_figures(length=4, iters=2, warmup=1)
    assert len(times) == 5 and all(t == INTERVAL_MS * 1000 for t in times.values())
    merged = next(line for line in lines if "lockstep" in line)
    assert merged.split("|")[2:4] == [" 16 ", " 4L "]  # 4 chains × 4 kernels in 4 merged launches


def test_prefill_compute_floor_counts_products_and_visible_attention(benchmarks: Any) -> None:
    checks: ModuleType = benchmarks("head_to_head_checks")
    import optgraph as og

    graph = og.parse("""graph p {
  input %x : f16[6,32]
  input %w : f16[32,16]
  input %q : f16[1,4,6,8]
  input %k : f16[1,2,6,8]
  %y = matmul(%x, %w) : f16[6,16]
  %a = attention(%q, %k, %k) {causal = true} : f16[1,4,6,8]
  %b = attention(%q, %k, %k) : f16[1,4,6,8]
  output %y, %a, %b
}
""")
    causal_pairs = 6 * 7 // 2  # row i sees i + 1 keys
    want = 2 * 6 * 16 * 32 + 4 * 8 * 4 * causal_pairs + 4 * 8 * 4 * 36
    assert checks.compute_flops(graph) == want
    assert checks._visible_pairs(2, 5, True) == 4 + 5  # bottom-right: rows see 4 and 5 keys
    assert "TFLOP/s" in checks.rate_line(7e14)


def test_agreement_names_the_side_that_is_off(benchmarks: Any, monkeypatch: Any) -> None:
    checks: ModuleType = benchmarks("head_to_head_checks")
    import optgraph as og

    graph = og.parse("graph g {\n input %x : f32[4]\n %y = exp(%x) : f32[4]\n output %y\n}\n")
    good = np.exp(np.arange(4, dtype=np.float32))

    class Exact:  # the third opinion: the right answer, whatever the fake CuPy computes
        def __init__(self, graph: Any) -> None:
            pass

        def __call__(self, env: Any) -> dict[str, np.ndarray]:
            return {"y": good}

    monkeypatch.setitem(sys.modules, "cupy_interpreter", SimpleNamespace(CupyModel=Exact))
    inputs = {"x": np.arange(4, dtype=np.float32)}
    seen: list[str] = []

    def zeros(i: Any, w: Any) -> dict[str, np.ndarray]:
        return {"y": np.zeros(4, np.float32)}

    def right(who: str) -> Any:
        return lambda i, w: seen.append(who) or {"y": good}

    cell = checks.agreement(
        graph, inputs, dict, zeros, right("torch"), ["w1"], {"og-x": right("x")}
    )
    assert cell.startswith(
        "og~torch 1.0e+00, og~cupy 1.0e+00, torch~cupy 0.0e+00, og-x~torch 0.0e+00"
    )
    assert "ours all zeros" in cell and "weights changed by the variants: w1" in cell
    assert seen == ["torch", "x"]
    healthy = checks.agreement(
        graph, inputs, dict, right("ours"), right("torch"), None, {"og-x": zeros}
    )
    assert healthy == "og~torch 0.0e+00, og~cupy 0.0e+00"  # no diagnostics when they agree
