"""The PyTorch and cuBLAS variants of the head-to-head suite (head_to_head.py), and the
kernel-family profile of a run.

`torch_variant(kind)` builds a bench_gpu variant from `torch_interpreter.py`: eager, a CUDA graph of
the eager path, or `torch.compile` in a given mode, each compile limited to `COMPILE_LIMIT_S`
seconds (its duration recorded in `COMPILE_SECONDS` for the summary). `cublas_variant` is an
optgraph variant with the one-row matrix-vector kernel turned off. `kernel_profile` splits a run's
GPU time by kernel family through torch.profiler (CUPTI sees CuPy's kernels too).
"""

from __future__ import annotations

import importlib
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cupy as cp
import numpy as np

COMPILE_LIMIT_S = 45


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in the main thread after `seconds` (compiles that take too long)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- PyTorch variants ----------------------------------------------------------------------------

_TORCH_CACHE: dict[str, tuple[Any, dict[str, Any]]] = {}
COMPILE_SECONDS: dict[tuple[str, str], float] = {}


def _torch_module(model: Any) -> tuple[Any, dict[str, Any]]:
    """(TorchModule with the weights, device inputs) of a bench model, built once per model."""
    cached = _TORCH_CACHE.get(model.name)
    if cached is not None:
        return cached
    import torch

    from benchmarks.harness.torch_interpreter import TorchModel, TorchModule

    _TORCH_CACHE.clear()  # one model's weights at a time
    interp = TorchModel(model.graph, device="cuda")
    weights = {k: torch.from_dlpack(cp.asarray(v)) for k, v in model.weights.items()}
    inputs = {
        k: torch.tensor(np.asarray(v), device="cuda") for k, v in model.inputs.items()
    }  # own copies: kv_cache_write writes its cache input in place
    module = TorchModule(interp, weights).eval()
    _TORCH_CACHE[model.name] = (module, inputs)
    return module, inputs


def release_torch_model() -> None:
    """Drop the cached PyTorch module and inputs (before the next model's weights are drawn)."""
    _TORCH_CACHE.clear()


def torch_variant(kind: str) -> Callable[[Any], tuple[Callable[[], Any], Any]]:
    """A bench_gpu variant builder: kind is eager, graph or a torch.compile mode."""

    def build(model: Any) -> tuple[Callable[[], Any], Any]:
        from benchmarks.harness.torch_interpreter import (
            compiled_runner,
            cuda_graph_runner,
            eager_runner,
        )

        module, inputs = _torch_module(model)
        if kind == "eager":
            run = eager_runner(module, inputs)
        elif kind == "graph":
            run = cuda_graph_runner(module, inputs)
        else:
            start = time.perf_counter()
            try:
                with time_limit(COMPILE_LIMIT_S):
                    run, _seconds = compiled_runner(module, inputs, kind)
            except TimeoutError:
                import torch

                torch._dynamo.reset()
                raise TimeoutError(f"compile > {COMPILE_LIMIT_S} s") from None
            COMPILE_SECONDS[(model.name, kind)] = time.perf_counter() - start
        return run, cp.cuda.Stream.null  # PyTorch's default stream is the legacy null stream

    return build


def torch_eager_outputs(
    graph: Any, inputs: dict[str, Any], weights: dict[str, Any]
) -> dict[str, Any]:
    """PyTorch eager outputs of `graph` on these device arrays (for the agreement column): a
    module of its own, sharing the arrays' memory, nothing cached."""
    import torch

    from benchmarks.harness.torch_interpreter import TorchModel, TorchModule

    module = TorchModule(
        TorchModel(graph, device="cuda"),
        {k: torch.from_dlpack(cp.asarray(v)) for k, v in weights.items()},
    ).eval()
    with torch.no_grad():
        out = module({k: torch.from_dlpack(cp.asarray(v)) for k, v in inputs.items()})
    torch.cuda.synchronize()
    return {k: cp.from_dlpack(v.float().contiguous()) for k, v in out.items()}


def cublas_variant(build_fused: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The same optgraph variant with the one-row matrix-vector kernel off (cuBLAS + epilogue)
    for products without a prologue; a product with a norm prologue keeps the one-row kernel
    (cuBLAS cannot run the prologue)."""
    return codegen_setting_variant(build_fused, "ONE_ROW_MAX_M", 0)


def codegen_setting_variant(
    build_fused: Callable[[Any], Any],
    name: str,
    value: Any,
    module: str = "kernels.one_row.product_kernel",
) -> Callable[[Any], Any]:
    """The same optgraph variant built with `optgraph.codegen.<module>.<name>` set to `value`."""
    return codegen_settings_variant(build_fused, {(module, name): value})


def codegen_settings_variant(
    build_fused: Callable[[Any], Any], settings: dict[tuple[str, str], Any]
) -> Callable[[Any], Any]:
    """The same optgraph variant built with each `optgraph.codegen.<module>.<name>` of
    `settings` set to its value (restored afterwards)."""

    def build(model: Any) -> tuple[Callable[[], Any], Any]:
        olds = []
        for (module, name), value in settings.items():
            setting = importlib.import_module(f"optgraph.codegen.{module}")
            olds.append((setting, name, getattr(setting, name)))
            setattr(setting, name, value)
        try:
            run, stream = build_fused(model)
            run()  # the kernels are generated at the first run
            stream.synchronize()
        finally:
            for setting, name, old in reversed(olds):
                setattr(setting, name, old)
        return run, stream

    return build


# The prefill's bandwidth kernels (on by default): each one's setting and its value when off.
PREFILL_SETTINGS = {
    "novec": (("kernels.elementwise", "VECTOR_LOADS"), False, "scalar elementwise and epilogues"),
    "nowidecopy": (("kernels.data_movement", "VECTOR_COPIES"), False, "transposes per element"),
    "rope1": (("kernels.rope", "HEADS_PER_THREAD"), 1, "rope angles per head"),
    "blocksoftmax": (("kernels.attention.prefill_gemm", "WARP_ROWS"), 0, "a block per softmax row"),
}  # fmt: skip


def prefill_variants(build_fused: Callable[[Any], Any]) -> list[Any]:
    """og-fused-1s with each prefill kernel setting off, and with all of them off (the kernels
    as before them), to A/B them in one run."""
    from benchmarks.harness.gpu_variants import Variant

    variants = [
        Variant(f"og-fused-1s-{tag}", f"og-fused-1s with {what}",
                codegen_settings_variant(build_fused, {key: off}))
        for tag, (key, off, what) in PREFILL_SETTINGS.items()
    ]  # fmt: skip
    every = {key: off for key, off, _ in PREFILL_SETTINGS.values()}
    variants.append(
        Variant(
            "og-fused-1s-scalar",
            "og-fused-1s with every prefill kernel setting off ("
            + ", ".join(PREFILL_SETTINGS)
            + ")",
            codegen_settings_variant(build_fused, every),
        )
    )
    return variants


def kernel_family_times(
    run: Callable[[], Any], stream: Any, iters: int = 5, by_kernel: bool = False
) -> tuple[float, dict[str, tuple[float, int]]]:
    """(latency µs per run, {family: (GPU µs per run, launches per run)}) over `iters` runs
    under CUPTI (through torch.profiler, which sees CuPy's kernels too). A family is the word
    after `og_` of optgraph's kernels, the first 40 characters of other names; `by_kernel`: the
    first 40 characters of every name (optgraph's are hashes of the kernel text)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        run()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record(stream)
        for _ in range(iters):
            run()
        end.record(stream)
        end.synchronize()
    wall = cp.cuda.get_elapsed_time(start, end) * 1000.0 / iters
    families: dict[str, tuple[float, int]] = {}
    for evt in prof.key_averages():
        us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
        if us <= 0:
            continue
        name = evt.key
        family = name.split("_")[1] if name.startswith("og_") and not by_kernel else name[:40]
        total, count = families.get(family, (0.0, 0))
        families[family] = (total + us / iters, count + evt.count // iters)
    return wall, families


def kernel_profile(
    run: Callable[[], Any], stream: Any, iters: int = 5, by_kernel: bool = False
) -> str:
    """GPU time per run by kernel family (`kernel_family_times`), against the run's latency:
    how much of a run is kernels and how much is gaps and host. `by_kernel`: one line per
    kernel name instead (names are hashes of the kernel text, so `optgraph compile` of the same
    graph on any machine says which node each one is)."""
    wall, families = kernel_family_times(run, stream, iters, by_kernel)
    busy = sum(t for t, _ in families.values())
    rows = sorted(families.items(), key=lambda kv: -kv[1][0])
    lines = [f"latency {wall:.1f} µs per run, kernels busy {busy:.1f} µs ({busy / wall:.0%})"]
    shown = rows if by_kernel else rows[:12]
    lines += [f"  {fam:40s} {t:9.1f} µs  {c:4d} launches" for fam, (t, c) in shown]
    return "\n".join(lines)
