"""What a weight-streaming plan orders, and how long it should take, without a GPU.

`bench_offload.py --dry-run` prints these for every variant, so a step that measures slower than
its plan allows points at the runtime, and one the plan itself serializes shows here first:

- `plan_order`: per streamed segment, its offset in the prefetch ring and bytes, the issue index
  its copies are issued at, the events they wait for (recorded after the last reads of the
  segments whose ring bytes they overwrite) and where the compute first waits for them;
  `layout_pattern` draws resident (R) and streamed (s) segments in order;
- `estimate_step`: the list schedule of `analysis.schedule_estimate` (streams in issue order,
  record/wait events) with each prefetch taking bytes / pinned bandwidth on its copy stream and
  each kernel its roofline time at the given f16 rate times `compute_scale`: (step, copy alone,
  compute alone) in ms. The roofline prices the balanced prefill's kernels too fast on the H100
  (its resident step took 1.58x the estimate at the measured GEMM rate, docs/results/
  2026-11-24-h100-decode-prefill-split-loop.md), so the dry run scales compute by
  `NOMINAL_COMPUTE_SCALE` and a GPU run by its own measured resident step over the estimate.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from optgraph.analysis.schedule_estimate import estimate_schedule, node_seconds, profile_named
from optgraph.analysis.segments import device_memory, format_size
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline

NOMINAL_PINNED = 51e9  # bytes/s: a host-to-device copy from pinned memory (H100 runs: 51-55)
NOMINAL_F16 = 767e12  # flops/s: the f16 GEMM rate measured at the FFN shape on the H100
NOMINAL_COMPUTE_SCALE = 1.6  # the H100's resident balanced step over its roofline estimate


@dataclass(frozen=True)
class StepEstimate:
    step_ms: float
    copy_ms: float  # the prefetches alone, back to back
    compute_ms: float  # everything but the prefetches, on their streams

    @property
    def overlap(self) -> float:
        """Step / max(copy alone, compute alone): 1.0 is perfect overlap."""
        return self.step_ms / max(self.copy_ms, self.compute_ms, 1e-12)


def estimate_step(
    graph: Graph, pinned: float, f16_flops: float, compute_scale: float = 1.0
) -> StepEstimate:
    """The estimated step of `graph` (see the module docstring)."""
    profile = replace(profile_named("h100"), peak_flops_f16=f16_flops)
    seconds = [t * compute_scale for t in node_seconds(graph, profile)]
    copy = 0.0
    for i, node in enumerate(graph.nodes):
        if node.op == "prefetch" and node.type is not None:
            seconds[i] = node.type.nbytes / pinned
            copy += seconds[i]
    compute = sum(seconds) - copy
    step = max(estimate_schedule(graph, profile, seconds).end, default=0.0)
    return StepEstimate(step * 1e3, copy * 1e3, compute * 1e3)


def layout_pattern(graph: Graph) -> str:
    """Segments in issue order: `R` resident, `s` streamed (from the weights' annotations)."""
    streamed = {w.ann.segment for w in graph.weights if w.ann.segment is not None}
    if not streamed:
        return ""
    return "".join("s" if k in streamed else "R" for k in range(max(streamed) + 1))


def plan_order(graph: Graph) -> list[str]:
    """One line per streamed segment: where its copies go and what orders them."""
    lines = []
    segments: dict[int, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        if node.op == "prefetch" and node.ann.segment is not None:
            segments.setdefault(node.ann.segment, []).append(i)
    waits = {n.name: i for i, n in enumerate(graph.nodes) if n.op == "wait"}
    ring = min((n.ann.offset or 0 for n in graph.nodes if n.op == "prefetch"), default=0)
    for number, copies in sorted(segments.items()):
        first = graph.nodes[copies[0]]
        nbytes = sum(graph.nodes[i].type.nbytes for i in copies)  # type: ignore[union-attr]
        frees, k = [], copies[0] - 1  # the copy stream's waits just before its copies
        while k >= 0 and graph.nodes[k].op == "wait" and graph.nodes[k].stream == first.stream:
            frees.append(graph.nodes[k].name)
            k -= 1
        names = {graph.nodes[i].name for i in copies}
        readers = [
            i for i, n in enumerate(graph.nodes) if not n.is_event and names & set(n.operands)
        ]
        ready = next((waits[w] for w in waits if w == f"pf{number}.ready"), None)
        lines.append(
            f"    segment {number:3d} at ring +{format_size((first.ann.offset or 0) - ring):>10s} "
            f"{format_size(nbytes):>10s} on stream "
            f"{first.stream}: copies at {copies[0]}-{copies[-1]}"
            + (f" after {', '.join('^' + f for f in frees)}" if frees else " (no wait)")
            + (f"; compute waits at {ready}" if ready is not None else "")
            + (f", reads {readers[0]}-{readers[-1]}" if readers else "")
        )
    return lines


def streamed_plans(
    resident: Graph, ratio: int, pinned: float, variants: dict[str, str]
) -> tuple[dict[str, Graph], int]:
    """`resident` (a planned graph) and each variant's `plan-prefetch` of it (options after the
    budget and bandwidth: `",depth=2"`), under the budget of what the step needs besides its
    weights + (weight bytes) / `ratio`; the plans are told the pinned bandwidth."""
    memory = device_memory(resident)
    budget = memory.peak - memory.resident_weights + memory.resident_weights // ratio
    graphs = {"resident": resident}
    for name, extra in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            options = f"budget={budget},host-bandwidth={int(pinned)}{extra}"
            graphs[name] = run_pipeline(resident, f"plan-prefetch{{{options}}}")
    return graphs, budget


def describe(graphs: dict[str, Graph], budget: int) -> list[str]:
    """A line a plan: peak against the budget, resident and streamed bytes, segments, ring."""
    lines = []
    for name, g in graphs.items():
        m = device_memory(g)
        segments = {w.ann.segment for w in g.weights if w.ann.segment is not None}
        lines.append(
            f"  {name:18s} peak {format_size(m.peak):>11s} (budget {format_size(budget)}), "
            f"resident {format_size(m.resident_weights)}, "
            f"streamed {format_size(m.streamed_weights)}"
            f" in {len(segments)} segments, ring {format_size(m.slots)} "
            f"{layout_pattern(g)}"
        )
    return lines
