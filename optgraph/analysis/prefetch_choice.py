"""How many segments plan-prefetch keeps resident, when fewer would overlap the copies better.

Keeping the most segments resident streams the fewest bytes: the best layout when copying takes
much longer than the compute (a decode step). When the two take about as long (a long prefill),
the copy stream must run ahead of the compute across resident segments, and a ring of `depth`
large segments stalls it: trading a resident segment for ring bytes costs its copy but lets the
copies run further ahead. `least_regret_layout` estimates each trade with the list schedule
(`analysis.schedule_estimate`: the device profile's roofline for the compute, bytes / the
host-to-device bandwidth for each copy) and keeps the one whose worst loss against the best of
them is least over the scales `COMPUTE_SCALES` of the compute estimate. Why scales: the roofline
at the data-sheet rate is a lower bound, and real kernels take longer by a factor the plan cannot
know (a balanced prefill's resident step on the H100 took 2.0x the estimate at batch 14 and 3.2x
at batch 23, docs/results/2026-11-24-h100-*.md), so the ratio of compute to copying is uncertain;
a trade that wins only at one ratio and loses much at another is not taken.

    a balanced prefill, 14 segments resident with a 44 MiB ring, or 13 with 64 MiB:
    the step at scales 1 / 1.5 / 2: 8.36 / 9.60 / 12.61 ms against 8.60 / 9.50 / 12.49 ms
    -> worst losses 1.011x and 1.029x -> 14 resident.

Measured compute (`measured`: seconds by node name, from a run of the resident program)
replaces the roofline: the scales shrink to `MEASURED_SCALES` (the run's own noise), nodes the
measurement lacks take the roofline times the measured nodes' median ratio, and the candidates
also include `dense_resident` ones: the segments whose bytes are most per second of the compute
around them stay resident, since a copy can hide only under compute (a UNet's low-resolution
blocks: many weight bytes, little compute).

Complexity: O(C·(V·k + X·V)) for C candidates and X scales (a rewrite and X list schedules each).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from optgraph.analysis.happens_before import happens_before
from optgraph.analysis.prefetch_copies import insert_prefetches
from optgraph.analysis.prefetch_ring import ring_window
from optgraph.analysis.schedule_estimate import estimate_schedule, node_seconds
from optgraph.analysis.segments import Layout, spread
from optgraph.ir.graph import Graph
from optgraph.ir.ops import DeviceProfile

# Real compute / the roofline estimate, for the ratios the plan must do well at (see the docstring).
COMPUTE_SCALES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
MEASURED_SCALES = (0.9, 1.0, 1.15)  # the same for measured compute: a run's noise, about
MAX_CANDIDATES = 6  # resident counts tried, from the most that fit down
Grow = Callable[[Layout], Layout]


def fewer_resident(
    layout: Layout, fits: Callable[[int, int], bool], grow: Grow, limit: int = MAX_CANDIDATES
) -> list[Layout]:
    """`layout` and the layouts keeping 1, 2, ... fewer of its segments resident (`spread`), each
    ring grown by `grow`; until the ring holds `depth + 2` of the largest streamed segments."""
    segments, n = layout.segments, len(layout.segments)
    out = [layout]
    for k in range(len(layout.kept) - 1, -1, -1):
        if len(out) >= limit:
            break
        largest = max(s.nbytes for s in out[-1].streamed)
        if out[-1].ring >= (layout.depth + 2) * largest:
            break
        kept = spread(n, k)
        streamed = [s.nbytes for i, s in enumerate(segments) if i not in kept]
        window = ring_window(streamed, layout.depth)
        if not fits(sum(segments[i].nbytes for i in kept), window):
            continue
        out.append(grow(Layout(segments, kept, window, layout.depth)))
    return out


def dense_resident(
    layout: Layout,
    fits: Callable[[int, int], bool],
    grow: Grow,
    seconds: Mapping[int, float],
    limit: int = MAX_CANDIDATES,
) -> list[Layout]:
    """Layouts keeping the segments of most bytes per second of compute resident: the k
    densest for k from the most that fit down (`limit` of them), each ring grown by `grow`.
    A segment's compute is that of the issue range from the previous segment's first reader to
    its own last (`seconds`: by node index), the compute its copy could hide under.

        segments A (1 MiB over 5 ms), B (80 MiB over 0.5 ms), C (2 MiB over 4 ms), k = 1 -> {B}
    """
    segments = layout.segments
    prefix = [0.0]
    top = max((s.last for s in segments), default=0)
    for i in range(top + 1):
        prefix.append(prefix[-1] + seconds.get(i, 0.0))

    def density(i: int) -> float:
        start = segments[i - 1].first if i else 0
        return segments[i].nbytes / max(prefix[segments[i].last + 1] - prefix[start], 1e-9)

    order = sorted(range(len(segments)), key=lambda i: -density(i))
    out: list[Layout] = []
    for k in range(len(segments), -1, -1):
        if len(out) >= limit:
            break
        kept = frozenset(order[:k])
        streamed = [s.nbytes for i, s in enumerate(segments) if i not in kept]
        if not streamed:
            continue
        window = ring_window(streamed, layout.depth)
        if fits(sum(segments[i].nbytes for i in kept), window):
            out.append(grow(Layout(segments, kept, window, layout.depth)))
    return out


def measured_seconds(
    graph: Graph, profile: DeviceProfile, measured: Mapping[str, float]
) -> list[float]:
    """Each node's seconds: measured where the measurement has its name, else the roofline
    times the median of measured / roofline over the nodes that have both (1 when none do)."""
    roofline = node_seconds(graph, profile)
    ratios = sorted(
        measured[n.name] / t for n, t in zip(graph.nodes, roofline) if t > 0 and n.name in measured
    )
    scale = ratios[len(ratios) // 2] if ratios else 1.0
    return [measured.get(n.name, t * scale) for n, t in zip(graph.nodes, roofline)]


def least_regret_layout(
    graph: Graph,
    candidates: list[Layout],
    accesses: dict[str, list[int]],
    arena_base: int,
    copy_rate: tuple[float, DeviceProfile],
    measured: Mapping[str, float] | None = None,
) -> Layout:
    """The candidate whose estimated step is within the least factor of the best candidate's at
    every scale of `COMPUTE_SCALES` (`MEASURED_SCALES` with `measured` seconds by node name);
    ties go to the earlier candidate. `copy_rate`: host-to-device bytes/s, and the device whose
    roofline prices the compute."""
    if len(candidates) == 1:
        return candidates[0]
    bandwidth, profile = copy_rate
    scales = COMPUTE_SCALES if measured is None else MEASURED_SCALES
    hb = happens_before(graph)
    steps: list[list[float]] = []
    for layout in candidates:
        g = insert_prefetches(graph, layout, accesses, arena_base, False, hb, lifetimes=False)
        if measured is None:
            compute = node_seconds(g, profile)
        else:
            compute = measured_seconds(g, profile, measured)
        copies = [
            n.type.nbytes / bandwidth if n.op == "prefetch" and n.type is not None else None
            for n in g.nodes
        ]
        steps.append([_step(g, profile, compute, copies, x) for x in scales])
    best = [min(s[j] for s in steps) for j in range(len(scales))]
    regret = [max(s[j] / max(best[j], 1e-12) for j in range(len(best))) for s in steps]
    return candidates[min(range(len(candidates)), key=lambda c: (round(regret[c], 4), c))]


def _step(
    g: Graph, profile: DeviceProfile, compute: list[float], copies: list[float | None], scale: float
) -> float:
    """The list schedule's step of `g`: each copy its `copies` seconds, the rest its
    `compute` seconds times `scale`."""
    seconds = [t * scale if c is None else c for t, c in zip(compute, copies)]
    return max(estimate_schedule(g, profile, seconds).end, default=0.0)
