"""benchmarks/bench_decode_launches.py on the fake CuPy: a variant that fails to build is
reported in its row and the others still run (the table itself and every variant's launch
count: test_gpu_benchmarks_on_fake_cupy.py)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.support.fake_cupy import fake_cupy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake CuPy with what the decode benchmark uses beyond the runtime, `benchmarks(NAME)`
    importing `benchmarks.NAME` under it (every benchmark module dropped again afterwards): as
    test_gpu_benchmarks_on_fake_cupy's."""
    with fake_cupy(monkeypatch) as fake:
        cp = sys.modules["cupy"]

        def device_array(host: Any) -> Any:
            return fake.asarray(np.array(host))

        monkeypatch.setattr(cp, "asarray", device_array, raising=False)
        monkeypatch.setattr(
            cp, "empty", lambda shape, dtype: device_array(np.empty(shape, dtype)), raising=False
        )
        monkeypatch.setattr(cp.cuda, "get_elapsed_time", lambda a, b: 0.01, raising=False)
        monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0, raising=False)
        props = {"name": b"Fake GPU"}
        monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", lambda d: props, raising=False)
        monkeypatch.syspath_prepend(str(ROOT / "examples"))
        yield lambda name: importlib.import_module(f"benchmarks.{name}")
        for name in [n for n in sys.modules if n == "benchmarks" or n.startswith("benchmarks.")]:
            del sys.modules[name]


def _one_layer_bench(benchmarks: Any, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench_decode_launches with one small decode layer (`llama_launch`) as its only model."""
    bench: ModuleType = benchmarks("bench_decode_launches")
    head_to_head: ModuleType = benchmarks("harness.head_to_head")
    from gen_llama import generate_llama

    import optgraph as og
    from benchmarks.harness.gpu_variants import Model
    from optgraph.reference.interpreter import random_weights

    graph = og.parse(generate_llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64))
    model = Model("llama_launch", graph, head_to_head.decode_inputs(graph), random_weights(graph))
    monkeypatch.setattr(head_to_head, "copy_bandwidth", lambda: 3e12)
    monkeypatch.setattr(head_to_head, "models", lambda only: iter([model]))
    return bench


def test_decode_launch_variant_that_fails_gets_a_row(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _one_layer_bench(benchmarks, monkeypatch)
    real = bench.build

    def build(model: Any, values: Any, fusion: Any = None) -> Any:
        if values.get("early") is False:
            raise RuntimeError("no such kernel")
        return real(model, values, fusion)

    monkeypatch.setattr(bench, "build", build)
    out = tmp_path / "decode.md"
    assert (
        bench.main(
            [
                "--variants",
                "all-on,no-early-w",
                "--iters",
                "1",
                "--loop",
                "1",
                "--markdown",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "| llama_launch | no-early-w | RuntimeError: no such kernel |" in text
    assert "| llama_launch | all-on | 7 |" in text


def test_orders_build_every_variant_in_each_rotated_order(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--orders 3`: the variants are built three times, each time in the list rotated by one
    more (a program's place among the ones built moves its time), and each row reports the
    median and range of its six passes; a variant that cannot build is reported once."""
    bench = _one_layer_bench(benchmarks, monkeypatch)
    real = bench.build
    order: list[str] = []

    def build(model: Any, values: Any, fusion: Any = None) -> Any:
        name = next(n for n, v in bench.VARIANTS.items() if v == values)
        order.append(name)
        if name == "no-early-w":
            raise RuntimeError("no such kernel")
        return real(model, values, fusion)

    monkeypatch.setattr(bench, "build", build)
    out = tmp_path / "decode.md"
    argv = ["--variants", "all-on,no-qkv-fold,no-early-w", "--orders", "3", "--iters", "1"]
    assert bench.main([*argv, "--loop", "1", "--markdown", str(out)]) == 0
    assert order == [
        "all-on", "no-qkv-fold", "no-early-w",  # the list
        "no-qkv-fold", "all-on",  # rotated by one (the failed variant is not built again)
        "all-on", "no-qkv-fold",  # rotated by two
    ]  # fmt: skip
    text = out.read_text()
    assert text.count("RuntimeError: no such kernel") == 1
    assert "3 build orders" in text and "step µs (median, min–max)" in text
    rows = [line.split("|")[1:-1] for line in text.splitlines() if "| llama_launch | " in line]
    steps = {c[1].strip(): c[3].strip() for c in rows if "Error" not in c[2]}
    assert set(steps) == {"all-on", "no-qkv-fold"}
    assert all("(" in cell and "–" in cell for cell in steps.values())
