"""Timing and tables shared by the GPU benchmarks (bench_gpu.py, head_to_head.py,
bench_kernels.py, bench_stream_threshold.py, and the other scripts' reports).

- `median_us(run, stream, iters, warmup)`: the latency a caller sees. Each run is timed alone
  between CUDA events recorded on the stream it starts on, host issue included, and synchronized
  before the next; the median over `iters` runs after `warmup` untimed ones, in µs.
- `device_name()`: the current CUDA device as the driver names it (for table headers).
- `results_table(results, device, names, baseline)`: a Markdown table of models × variants
  with the ratios `baseline / variant` (above 1: the variant is faster).
- `print_report(text, markdown)`: a script's result printed, and written to its `--markdown`
  file when one is given.

CuPy is imported inside the functions, so a script can import this module and still answer
`--help` where CuPy is not installed.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Row = Mapping[str, float | str]  # variant name -> median µs, or a note ("not run", "error: …")


def median_us(run: Callable[[], Any], stream: Any, iters: int, warmup: int) -> float:
    """Median latency of `run()` in µs, each run timed alone with CUDA events on `stream`."""
    import cupy as cp

    for _ in range(warmup):
        run()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(iters):
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1000.0)
    return statistics.median(times)


def print_report(text: str, markdown: str | None) -> None:
    """Print `text` (a benchmark's tables) and write it to the file `markdown` when given."""
    print(text)
    if markdown:
        Path(markdown).write_text(text)


def device_name() -> str:
    """The name of the current CUDA device, e.g. `NVIDIA H100 80GB HBM3`."""
    import cupy as cp

    props: Any = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def results_table(
    results: Mapping[str, Row], device: str, names: Sequence[str], baseline: str
) -> str:
    """Markdown: one row per model, a µs column per variant, then `baseline / variant` for every
    variant after the first (`-` where either figure is missing)."""
    head = "| model | " + " | ".join(f"{n} (µs)" for n in names)
    head += " | " + " | ".join(f"{baseline} / {n}" for n in names[1:]) + " |"
    lines = [f"device: {device}; date: {datetime.date.today()}", "", head]
    lines.append("|" + "---|" * (1 + 2 * len(names) - 1))
    for model, row in results.items():
        cells = [_cell(row.get(n, "-")) for n in names]
        base = row.get(baseline)  # absent when --variants leaves it out
        ratios = [_ratio(base, row.get(n)) for n in names[1:]]
        lines.append(f"| {model} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def _cell(value: float | str) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _ratio(base: float | str | None, value: float | str | None) -> str:
    if isinstance(base, float) and isinstance(value, float):
        return f"{base / value:.2f}×"
    return "-"
