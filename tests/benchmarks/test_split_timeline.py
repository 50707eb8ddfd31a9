"""benchmarks/harness/split_timeline.py's interval arithmetic on hand-made intervals (no GPU, no
CuPy): unions, intersections, differences and a step's overlap figures, with nested,
overlapping, touching, empty and reversed intervals."""

from __future__ import annotations

import itertools
import random

import pytest

from benchmarks.harness.split_timeline import (
    OVERLAP_KEYS,
    Timeline,
    intersect,
    length,
    overlap,
    overlap_line,
    subtract,
    union,
)


def test_union_merges_nested_overlapping_and_touching_and_drops_empty() -> None:
    assert union([]) == []
    assert union([(5.0, 5.0), (7.0, 6.0)]) == []  # empty and reversed: nothing
    assert union([(0.0, 10.0), (2.0, 3.0)]) == [(0.0, 10.0)]  # nested
    assert union([(4.0, 8.0), (0.0, 5.0)]) == [(0.0, 8.0)]  # overlapping, out of order
    assert union([(0.0, 1.0), (1.0, 2.0)]) == [(0.0, 2.0)]  # touching
    assert union([(3.0, 4.0), (0.0, 1.0)]) == [(0.0, 1.0), (3.0, 4.0)]  # apart, sorted
    assert length([(0.0, 10.0), (2.0, 3.0), (9.0, 12.0), (20.0, 21.0)]) == 13.0


def test_intersect_and_subtract() -> None:
    a = [(0.0, 10.0), (20.0, 30.0)]
    b = [(5.0, 25.0), (28.0, 29.0)]
    assert intersect(a, b) == [(5.0, 10.0), (20.0, 25.0), (28.0, 29.0)]
    assert intersect(b, a) == intersect(a, b)
    assert subtract(a, b) == [(0.0, 5.0), (25.0, 28.0), (29.0, 30.0)]
    assert subtract(b, a) == [(10.0, 20.0)]
    assert intersect(a, []) == [] and subtract(a, []) == a and subtract([], a) == []
    assert intersect([(0.0, 1.0)], [(1.0, 2.0)]) == []  # touching: no time in common
    assert subtract([(0.0, 10.0)], [(2.0, 3.0), (2.5, 4.0)]) == [(0.0, 2.0), (4.0, 10.0)]
    assert subtract([(2.0, 3.0)], [(0.0, 10.0)]) == []  # nested inside what is taken away


def test_a_step_with_everything_overlapping() -> None:
    """GPU parts [0, 20] (two overlapping) and [50, 60]; CPU nodes [15, 30] and a nested pair
    [55, 70] ⊃ [56, 57]; a host wait [8, 12]; the step 80 long."""
    gpu = [(0.0, 10.0), (5.0, 20.0), (50.0, 60.0)]
    cpu = [(15.0, 30.0), (55.0, 70.0), (56.0, 57.0)]
    stats = overlap(gpu, cpu, [(8.0, 12.0)], 80.0)
    assert list(stats) == list(OVERLAP_KEYS)
    assert stats["gpu_busy"] == 30.0 and stats["cpu_nodes"] == 30.0
    assert stats["host_waits"] == 4.0
    assert stats["overlap"] == 5.0 + 5.0  # [15, 20] and [55, 60]
    assert stats["overlap_of_cpu"] == pytest.approx(10 / 30)
    assert stats["overlap_of_step"] == pytest.approx(10 / 80)
    # The host works in [0, 8] and [12, 80]; the GPU is idle there in [20, 50] and [60, 80].
    assert stats["gpu_idle_host_working"] == 50.0
    assert stats["gpu_idle_cpu_nodes"] == stats["cpu_nodes"] - stats["overlap"] == 20.0
    assert stats["host_waiting_gpu_working"] == 4.0  # the wait lies inside the GPU's [0, 20]


def test_empty_and_disjoint_steps() -> None:
    nothing = overlap([], [], [], 0.0)
    assert all(v == 0.0 for v in nothing.values())  # no division by zero
    # The calling thread's pattern when the GPU never runs beside the host: GPU, wait, CPU.
    serial = overlap([(0.0, 10.0), (40.0, 50.0)], [(12.0, 40.0)], [(5.0, 12.0)], 50.0)
    assert serial["overlap"] == serial["overlap_of_cpu"] == 0.0
    assert serial["gpu_idle_cpu_nodes"] == serial["cpu_nodes"] == 28.0
    assert serial["gpu_idle_host_working"] == 28.0 and serial["host_waiting_gpu_working"] == 5.0
    # Zero-length GPU parts (the fake CuPy's every event at one time) are no GPU time.
    flat = overlap([(10.0, 10.0)], [(0.0, 20.0)], [], 20.0)
    assert flat["gpu_busy"] == flat["overlap"] == 0.0 and flat["gpu_idle_host_working"] == 20.0
    # CPU work entirely under the GPU's: all of it overlapped.
    under = overlap([(0.0, 100.0)], [(10.0, 20.0), (30.0, 40.0)], [], 100.0)
    assert under["overlap_of_cpu"] == 1.0 and under["gpu_idle_host_working"] == 0.0


def test_overlap_against_a_grid_of_random_intervals() -> None:
    """On integer intervals every figure equals a count of unit cells [t, t + 1)."""
    rng = random.Random(0)
    for _ in range(200):
        sets = [
            [(float(a), float(a + rng.randint(-2, 8))) for a in rng.choices(range(40), k=4)]
            for _ in range(3)
        ]
        gpu, cpu, waits = sets
        step = 50.0

        def cells(intervals: list[tuple[float, float]]) -> set[int]:
            return {t for a, b in intervals for t in range(int(a), int(b))}

        g, c, w = cells(gpu), cells(cpu), cells(waits)
        stats = overlap(gpu, cpu, waits, step)
        assert stats["overlap"] == len(g & c)
        assert stats["gpu_busy"] == len(g) and stats["cpu_nodes"] == len(c)
        assert stats["gpu_idle_host_working"] == len(set(range(50)) - w - g)
        assert stats["gpu_idle_cpu_nodes"] == len(c - g)
        assert stats["host_waiting_gpu_working"] == len(w & g)
        for x, y in itertools.product(sets, repeat=2):
            assert length(intersect(x, y)) == len(cells(x) & cells(y))
            assert length(subtract(x, y)) == len(cells(x) - cells(y))


def test_a_timeline_sorts_its_pieces_by_kind_and_takes_medians_per_figure() -> None:
    names = ["GPU part 0 (3 calls)", "host wait", "cpu l0.moe", "GPU part 1 (2 calls)"]
    step = {
        0: (0.0, 2.0, 1.0, 20.0),
        1: (2.0, 20.0),
        2: (20.0, 40.0),
        3: (25.0, 26.0, 30.0, 50.0),
    }
    slow = {i: tuple(2 * t for t in times) for i, times in step.items()}
    timeline = Timeline(names, [step, step, slow], [50.0, 50.0, 100.0])
    first = timeline.step_overlap(0)
    assert first == overlap([(1.0, 20.0), (30.0, 50.0)], [(20.0, 40.0)], [(2.0, 20.0)], 50.0)
    assert first["overlap"] == 10.0 and first["host_waiting_gpu_working"] == 18.0
    assert timeline.median_overlap() == first  # two steps of three alike
    line = overlap_line(first, 3)
    assert line.startswith("overlap (µs a step, medians of 3): CPU nodes 20.0, of which 10.0 ")
    assert "(50.0% of the CPU nodes' time, 20.0% of the step 50.0)" in line
    assert "host waiting while the GPU works 18.0 (of 18.0 waiting)" in line
