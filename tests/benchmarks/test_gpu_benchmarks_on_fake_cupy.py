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
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.support.fake_cupy import fake_cupy

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_MS = 0.01


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake CuPy with what the benchmarks use beyond the runtime; `benchmarks(NAME)` imports
    `benchmarks.NAME` under it (e.g. "bench_gpu", "harness.head_to_head"), and every benchmark
    module is dropped again afterwards, so no test sees another's fake."""
    with fake_cupy(monkeypatch) as fake:
        cp = sys.modules["cupy"]

        def device_array(host: Any) -> Any:
            return fake.asarray(np.array(host))

        extras: dict[str, Any] = {
            "asarray": device_array,
            "empty": lambda shape, dtype: device_array(np.empty(shape, dtype)),
        }
        for name, value in extras.items():
            monkeypatch.setattr(cp, name, value, raising=False)
        monkeypatch.setattr(cp.cuda, "get_elapsed_time", lambda a, b: INTERVAL_MS, raising=False)
        monkeypatch.setattr(cp.cuda.runtime, "getDevice", lambda: 0, raising=False)
        props = {"name": b"Fake GPU"}
        monkeypatch.setattr(cp.cuda.runtime, "getDeviceProperties", lambda d: props, raising=False)
        monkeypatch.setattr(cp.cuda.Stream, "null", cp.cuda.Stream(), raising=False)
        monkeypatch.syspath_prepend(str(ROOT / "examples"))
        yield lambda name: importlib.import_module(f"benchmarks.{name}")
        for name in [n for n in sys.modules if n == "benchmarks" or n.startswith("benchmarks.")]:
            del sys.modules[name]


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
    head_to_head: ModuleType = benchmarks("harness.head_to_head")
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


SMALL_LOOP = {
    "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 128,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 32, "mode": "decode",
}  # fmt: skip


def test_bench_decode_loop_plumbing(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop: ModuleType = benchmarks("bench_decode_loop")
    monkeypatch.setattr(loop, "model_sizes", lambda model: dict(SMALL_LOOP))
    cp = sys.modules["cupy"]
    from optgraph.reference.interpreter import random_weights

    def host_drawn(graph: Any) -> dict[str, Any]:
        return {k: cp.asarray(v) for k, v in random_weights(graph, 0).items()}

    monkeypatch.setattr(loop, "draw_weights", host_drawn)
    monkeypatch.setattr(cp.cuda.runtime, "deviceSynchronize", lambda: None, raising=False)
    out = tmp_path / "loop.md"
    args = ["--variants", "og,og-nopdl", "--steps", "8", "--repeats", "2", "--check-steps", "3"]
    assert loop.main([*args, "--markdown", str(out)]) == 0
    rows = _rows(out.read_text())
    assert set(rows) == {"variant", "og", "og-nopdl"}
    for name in ("og", "og-nopdl"):
        assert rows[name][1] == f"{INTERVAL_MS * 1000 / 8:.1f}"  # GPU µs/step from the events
        assert rows[name][2].endswith("/3")


def test_decode_loop_graph_feeds_back_token_and_position(benchmarks: Any) -> None:
    """The loop's step graph: the next token is the argmax of the logits, pos and kv_len advance,
    and the reference loop's caches grow one row a step (checked against the step run by hand)."""
    loop: ModuleType = benchmarks("bench_decode_loop")
    from optgraph.reference.interpreter import random_weights, run_reference

    graph = loop.loop_step_graph(dict(SMALL_LOOP))
    weights = random_weights(graph, 0)
    values = loop.start_values(graph, 5)
    out = run_reference(graph, values, weights)
    logits_graph = loop.og.parse(
        loop.og.print_graph(graph).replace(
            "output %l0.k_cache_new", "output %logits, %l0.k_cache_new"
        )
    )
    logits = run_reference(logits_graph, values, weights)["logits"]
    assert int(out["next_token"][0]) == int(np.argmax(logits[0]))
    assert int(out["next_pos"][0]) == 6 and int(out["next_kv_len"][0]) == 7
    tokens, margins = loop.reference_tokens(graph, weights, values, 3)
    assert tokens[0] == int(out["next_token"][0]) and len(tokens) == 3
    top = np.sort(logits[0].astype(np.float64))[-2:]
    assert margins[0] == top[1] - top[0] and len(margins) == 3 and min(margins) >= 0


def test_decode_launch_settings_table(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_decode_launches.py: every variant built under its settings (launch counts differ
    where they should), the table written."""
    bench: ModuleType = benchmarks("bench_decode_launches")
    head_to_head: ModuleType = benchmarks("harness.head_to_head")
    from gen_llama import generate_llama

    import optgraph as og
    from benchmarks.harness.gpu_variants import Model
    from optgraph.reference.interpreter import random_weights

    graph = og.parse(generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64))
    model = Model("llama_launch", graph, head_to_head.decode_inputs(graph), random_weights(graph))
    monkeypatch.setattr(head_to_head, "copy_bandwidth", lambda: 3e12)
    monkeypatch.setattr(head_to_head, "models", lambda only: iter([model]))
    out = tmp_path / "decode.md"
    assert bench.main(["--iters", "2", "--loop", "2", "--markdown", str(out)]) == 0
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if "llama" in line]
    launches = {cells[1].strip(): int(cells[2]) for cells in rows}
    tail = {name: launches.pop(name) for name in bench.TAIL_VARIANTS}
    assert tail == {  # no argmax in this step: its settings give the same program
        "argmax-cast": 12,
        "argmax-product": 12,
        "gather-rows": 11,  # no h0
        "tail-all": 11,
    }
    assert launches == {
        "all-on": 2 + 5 * 2,
        "all-on-pk16k": 2 + 5 * 2,  # hidden 64: the same program
        "no-qkv-fold": 2 + 6 * 2,
        "no-rope-kv": 2 + 7 * 2,
        "no-early-w": 12,
        "none": 16,
        "all-on-ew16k": 2 + 5 * 2,
        "warp-stats": 2 + 5 * 2,
        "no-warp-stats": 2 + 5 * 2,
        "tail-off": 2 + 5 * 2,
        "before": 2 + 5 * 2,
        "no-early-kv": 2 + 5 * 2,  # decode attention's loads after its wait: as many launches
        "attn-s8": 2 + 5 * 2,
        "attn-b528": 2 + 5 * 2,
        "attn-s8-b528": 2 + 5 * 2,
    }


def test_decode_launch_settings_on_the_loop_step(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_decode_launches.py's loop models (small sizes): the tail settings' launch counts,
    with the position adds last and first."""
    bench: ModuleType = benchmarks("bench_decode_launches")
    head_to_head: ModuleType = benchmarks("harness.head_to_head")
    loop: ModuleType = benchmarks("bench_decode_loop")
    from optgraph.reference.interpreter import random_weights

    small = {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 64,
             "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 16, "mode": "decode"}  # fmt: skip
    monkeypatch.setattr(loop, "model_sizes", lambda model: small)
    monkeypatch.setattr(head_to_head, "device_weights", random_weights)
    monkeypatch.setattr(head_to_head, "copy_bandwidth", lambda: 3e12)
    out = tmp_path / "decode.md"
    variants = "all-on,argmax-cast,argmax-product,gather-rows,tail-all"
    only = "loop_launch,loop_launch_adds_first"
    argv = ["--only", only, "--variants", variants, "--iters", "2", "--loop", "2"]
    assert bench.main([*argv, "--markdown", str(out)]) == 0
    rows = [
        line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| loop_")
    ]
    launches = {(c[0].strip(), c[1].strip()): int(c[2]) for c in rows}
    # h0, five launches for the layer, logits, argmax, cast, the two adds (one launch, or
    # merged with h0 when issued first)
    assert launches == {
        ("loop_launch", "all-on"): 10,
        ("loop_launch", "argmax-cast"): 9,  # the cast in the argmax's kernel
        ("loop_launch", "argmax-product"): 7,  # argmax and cast in logits', the adds merged
        ("loop_launch", "gather-rows"): 9,  # no h0
        ("loop_launch", "tail-all"): 6,
        ("loop_launch_adds_first", "all-on"): 9,  # the adds merged with h0
        ("loop_launch_adds_first", "argmax-cast"): 8,
        ("loop_launch_adds_first", "argmax-product"): 7,
        ("loop_launch_adds_first", "gather-rows"): 8,
        ("loop_launch_adds_first", "tail-all"): 6,
    }


TINY_QUANT = {
    "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 320, "vocab": 256,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 32, "mode": "decode",
}  # fmt: skip


def test_bench_quantized_table(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_quantized.py at tiny sizes (a 4096-wide shape stands in for the real one): every
    model and weight set built through the default pipeline and timed, the floors, ratios and
    targets filled, each quantized row checked (values mean nothing on the fake)."""
    bench: ModuleType = benchmarks("bench_quantized")
    checks: ModuleType = benchmarks("harness.head_to_head_checks")
    from benchmarks.harness.quantized_models import draw_weights

    cp = sys.modules["cupy"]
    sizes = {
        "llama_real": {**TINY_QUANT, "hidden": 4096, "heads": 32, "kv_heads": 8, "layers": 1},
        "llama_prefill_512": {**TINY_QUANT, "seq": 16, "cache_len": 16, "mode": "prefill"},
        "llama_launch": TINY_QUANT,
    }
    monkeypatch.setattr(bench, "model_sizes", lambda model: dict(sizes[model]))
    monkeypatch.setattr(bench, "CHECK_LAYERS", 1)

    def drawn(graph: Any) -> dict[str, Any]:  # quantized on the device; the fake has no `.T`
        weights = draw_weights(graph, np)
        return {k: cp.asarray(v) if v.dtype == np.uint8 else v for k, v in weights.items()}

    monkeypatch.setattr(bench, "weights_on_device", drawn)
    monkeypatch.setattr(cp, "asnumpy", lambda a: a.get(), raising=False)
    monkeypatch.setattr(checks, "copy_bandwidth", lambda: 4e12)
    monkeypatch.setattr(checks, "gemm_rate", lambda: 8e14)
    out = tmp_path / "quant.md"
    assert bench.main(["--iters", "2", "--warmup", "1", "--markdown", str(out)]) == 0
    text = out.read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| llama")]
    cells = {(r[0].strip(), r[1].strip()): [c.strip() for c in r[2:]] for r in rows}
    before = {
        (m, w + bench.BEFORE) for m in ("llama_real", "llama_launch") for w in ("q8_0", "q4_k_m")
    }
    every = {(m, w) for m in bench.MODELS for w in ("f16", "q8_0", "q4_k_m")}
    assert set(cells) == every | before
    for (model, weights), row in cells.items():
        assert row[2] == f"{INTERVAL_MS * 1000:.1f}", (model, weights)  # the step, from events
        assert row[4] == ("1.00×"), (model, weights)  # vs f16: every step reads 10 µs
        # checked: all but the earlier layout's rows and the f16 prefill (the f16 decode's)
        checked = (model, weights) not in before | {("llama_prefill_512", "f16")}
        assert (row[6] != "-") == checked, (model, weights)
    real = cells["llama_real", "q4_k_m"]
    assert real[5] == "1,000" and real[7].startswith("≤ 1.30× floor: ")
    assert cells["llama_launch", "q8_0"][7] == "≤ 1.00× f16: met"
    assert float(cells["llama_real", "q4_k_m"][0]) < float(cells["llama_real", "q8_0"][0])
    # layer 1 of 2 takes more bits; down (320 a row) falls back: q4_k -> q5_0, q6_k -> q8_0
    assert "- llama_launch q4_k_m: f16 5, q4_k 12, q5_0 1, q6_k 2, q8_0 1" in text


def test_bench_quantized_also_integer_adds_a_row_with_those_types(
    benchmarks: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--also-integer q4_k,q6_k,q8_0`: one more row per quantized decode, lowered with those
    types in `quantized.INTEGER_DOT_TYPES` (the library's default restored after); a type
    outside the integer forms is refused."""
    bench: ModuleType = benchmarks("bench_quantized")
    from optgraph.codegen.kernels import quantized

    default = quantized.INTEGER_DOT_TYPES
    seen: list[tuple[str, frozenset[str], bool]] = []

    def step(model: str, graph: Any, weights: Any, args: Any) -> float:
        seen.append((model, quantized.INTEGER_DOT_TYPES, quantized.INTEGER_DOT))
        return 10.0

    monkeypatch.setattr(bench, "_step_us", step)
    monkeypatch.setattr(bench, "model_sizes", lambda model: dict(TINY_QUANT))
    monkeypatch.setattr(bench, "weights_on_device", lambda graph: {})
    monkeypatch.setattr(bench, "floor_us", lambda model, graph, rates: 1.0)
    rates = {"copy": 4e12, "gemm": 8e14}
    rows = bench.measure(
        ["llama_launch"],
        ["q4_k_m"],
        bench.argparse.Namespace(also_integer="q4_k,q6_k,q8_0", before=True),
        rates,
    )
    labels = [r.weights for r in rows]
    assert labels == ["q4_k_m", "q4_k_m (integer q4_k,q6_k,q8_0)", "q4_k_m" + bench.BEFORE]
    assert [s[1:] for s in seen] == [
        (default, True),
        (frozenset({"q4_k", "q6_k", "q8_0"}), True),
        (default, False),
    ]
    assert quantized.INTEGER_DOT_TYPES == default
    with pytest.raises(SystemExit):
        bench.main(["--also-integer", "q4_k,q5_k"])
