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

Complexity: O(C·(V·k + X·V)) for C candidates and X scales (a rewrite and X list schedules each).
"""

from __future__ import annotations

from collections.abc import Callable

from optgraph.analysis.happens_before import happens_before
from optgraph.analysis.prefetch_copies import insert_prefetches
from optgraph.analysis.prefetch_ring import ring_window
from optgraph.analysis.schedule_estimate import estimate_schedule, node_seconds
from optgraph.analysis.segments import Layout, spread
from optgraph.ir.graph import Graph
from optgraph.ir.ops import DeviceProfile

# Real compute / the roofline estimate, for the ratios the plan must do well at (see the docstring).
COMPUTE_SCALES = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
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


def least_regret_layout(
    graph: Graph,
    candidates: list[Layout],
    accesses: dict[str, list[int]],
    arena_base: int,
    copy_rate: tuple[float, DeviceProfile],
) -> Layout:
    """The candidate whose estimated step is within the least factor of the best candidate's at
    every scale of `COMPUTE_SCALES`; ties go to the earlier (more resident) candidate.
    `copy_rate`: host-to-device bytes/s, and the device whose roofline prices the compute."""
    if len(candidates) == 1:
        return candidates[0]
    bandwidth, profile = copy_rate
    hb = happens_before(graph)
    steps: list[list[float]] = []
    for layout in candidates:
        g = insert_prefetches(graph, layout, accesses, arena_base, False, hb, lifetimes=False)
        compute = node_seconds(g, profile)
        copies = [
            n.type.nbytes / bandwidth if n.op == "prefetch" and n.type is not None else None
            for n in g.nodes
        ]
        steps.append([_step(g, profile, compute, copies, x) for x in COMPUTE_SCALES])
    best = [min(s[j] for s in steps) for j in range(len(COMPUTE_SCALES))]
    regret = [max(s[j] / max(best[j], 1e-12) for j in range(len(best))) for s in steps]
    return candidates[min(range(len(candidates)), key=lambda c: (round(regret[c], 4), c))]


def _step(
    g: Graph, profile: DeviceProfile, compute: list[float], copies: list[float | None], scale: float
) -> float:
    """The list schedule's step of `g`: each copy its `copies` seconds, the rest its roofline
    `compute` seconds times `scale`."""
    seconds = [t * scale if c is None else c for t, c in zip(compute, copies)]
    return max(estimate_schedule(g, profile, seconds).end, default=0.0)
