"""Pipelines: parse `dce,cse,assign-streams{max-streams=4}`, check contracts, run, re-verify.

    run_pipeline(graph, "dce,assign-streams{max-streams=2},insert-sync")

Before each pass the manager checks its contract on the graph (`optgraph.passes.base`): every
required fact must hold (else the message names the pass to run first), and the graph must carry
no annotations the pass invalidates (else the message names the pass it must run before). After
each pass the graph is verified again, so a broken pass is caught where it broke (a pass that
only changed node annotations has those checked: `verify(graph, previous=...)`). `after_each`
receives (pass, graph) after every pass, which is how `--print-ir-after-all` works.

A pipeline is a list of passes: `parse_pipeline` reads one, `format_pipeline` writes one back, and
`with_vram_budget` edits one. `PASSES` is the one list of passes: a literal dictionary sorted by
name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any, get_type_hints

from optgraph.analysis.segments import parse_size
from optgraph.errors import OptGraphError, PipelineError, Span, did_you_mean
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.analyze_lifetimes import AnalyzeLifetimesPass
from optgraph.passes.assign_streams import AssignStreamsPass
from optgraph.passes.base import Pass
from optgraph.passes.check_races import CheckRacesPass
from optgraph.passes.cse import CsePass
from optgraph.passes.dce import DcePass
from optgraph.passes.facts import FACTS
from optgraph.passes.fuse import FusePass
from optgraph.passes.fuse_siblings import FuseSiblingsPass
from optgraph.passes.insert_sync import InsertSyncPass
from optgraph.passes.pipeline_parallel import PipelineParallelPass
from optgraph.passes.plan_memory import PlanMemoryPass
from optgraph.passes.plan_prefetch import PlanPrefetchPass
from optgraph.passes.split_backends import SplitBackendsPass
from optgraph.passes.split_experts import SplitExpertsPass
from optgraph.passes.tensor_parallel import TensorParallelPass
from optgraph.passes.transpose_weights import TransposeWeightsPass
from optgraph.passes.verify_pass import VerifyPass

PASSES: dict[str, type[Pass]] = {
    "analyze-lifetimes": AnalyzeLifetimesPass,
    "assign-streams": AssignStreamsPass,
    "check-races": CheckRacesPass,
    "cse": CsePass,
    "dce": DcePass,
    "fuse": FusePass,
    "fuse-siblings": FuseSiblingsPass,
    "insert-sync": InsertSyncPass,
    "pipeline-parallel": PipelineParallelPass,
    "plan-memory": PlanMemoryPass,
    "plan-prefetch": PlanPrefetchPass,
    "split-backends": SplitBackendsPass,
    "split-experts": SplitExpertsPass,
    "tensor-parallel": TensorParallelPass,
    "transpose-weights": TransposeWeightsPass,
    "verify": VerifyPass,
}

# The pipeline `optgraph compile` runs when none is given. The contracts allow fuse on either side
# of assign-streams and plan-memory; it runs before both by choice: streams then balance real
# kernels, fusion is not limited to one stream, and fused interiors need no arena bytes.
# fuse-siblings runs its pairs rewrite only (SwiGLU's gate and up as one kernel: faster on the
# measured decode steps); its concat groups made them slower (see docs/benchmarks.md). To use
# them: `-p verify,dce,cse,fuse{row-prologues=false},fuse-siblings,assign-streams,...`.
# transpose-weights runs before fuse so that imported `[out, in]` weights reach the fused products.
FUSION = "fuse,fuse-siblings{concat=false}"
DEFAULT_PIPELINE = (
    f"verify,dce,cse,transpose-weights,{FUSION},"
    "assign-streams,insert-sync,analyze-lifetimes,plan-memory"
)

_PASS_RE = re.compile(r"\s*([A-Za-z0-9_-]+)\s*(\{([^{}]*)\})?\s*(,|$)")


def _option_value(pass_name: str, option: str, raw: str, target: Any) -> Any:
    raw = raw.strip()
    if target is bool:
        if raw.lower() in ("true", "1", "yes", "on"):
            return True
        if raw.lower() in ("false", "0", "no", "off"):
            return False
    elif target is int:
        try:
            return int(raw)
        except ValueError:
            pass
    elif target is float:
        try:
            return float(raw)
        except ValueError:
            pass
    else:
        return raw.strip('"')
    kind = {bool: "true or false", int: "an integer", float: "a number"}[target]
    raise PipelineError(f"{pass_name}: option '{option}' must be {kind}, got '{raw}'")


def make_pass(name: str, options: dict[str, str] | None = None) -> Pass:
    """Instantiate the pass called `name` (kebab-case) with options given as text."""
    cls = PASSES.get(name)
    if cls is None:
        raise PipelineError(f"unknown pass '{name}'{did_you_mean(name, PASSES)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, raw in (options or {}).items():
        attr = key.replace("-", "_")
        if attr not in fields:
            known = [f.replace("_", "-") for f in fields]
            hint = did_you_mean(key, known) or (
                f" ({name} takes {', '.join(known)})" if known else f" ({name} takes no options)"
            )
            raise PipelineError(f"{name}: unknown option '{key}'{hint}")
        kwargs[attr] = _option_value(name, key, raw, hints[attr])
    try:
        return cls(**kwargs)
    except ValueError as err:  # a pass's own option validation
        raise PipelineError(f"{name}: {err}") from None


PIPELINE_PATH = "<pipeline>"  # how a pipeline string is named in the `path:line:col` of its errors


def _pipeline_error(err: PipelineError, text: str, start: int, end: int) -> PipelineError:
    """`err` pointing at `text[start:end]`: the pipeline string is the source line under the caret."""
    if err.span is not None:
        return err
    span = Span(PIPELINE_PATH, 1, start + 1, max(end, start + 1) + 1, text)
    return PipelineError(err.message, span)


def parse_pipeline(text: str) -> list[Pass]:
    """`"dce,assign-streams{max-streams=4,policy=chains}"` -> pass instances. `default` expands."""
    text = text.strip()
    if text == "default":
        text = DEFAULT_PIPELINE
    if not text:
        return []
    passes: list[Pass] = []
    pos = 0
    while pos < len(text):
        match = _PASS_RE.match(text, pos)
        if match is None or match.end() == pos:
            error = PipelineError(f"cannot read the pipeline at '{text[pos:]}'")
            raise _pipeline_error(error, text, pos, len(text))
        name, body = match.group(1), match.group(3)
        try:
            options = _pass_options(name, body)
            if name == "default":
                passes.extend(parse_pipeline(DEFAULT_PIPELINE))
            else:
                passes.append(make_pass(name, options))
        except PipelineError as err:
            raise _pipeline_error(err, text, match.start(1), match.end(2) if body else match.end(1))
        pos = match.end()
    return passes


def _pass_options(name: str, body: str | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in (body or "").split(","))):
        if "=" not in item:
            raise PipelineError(f"{name}: option '{item}' needs a value (name=value)")
        key, value = item.split("=", 1)
        options[key.strip()] = value
    return options


def format_pass(p: Pass) -> str:
    """The pipeline text of one pass: its name, then the options that differ from the defaults."""
    options = []
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        if value != f.default:
            text = str(value).lower() if isinstance(value, bool) else str(value)
            options.append(f"{f.name.replace('_', '-')}={text}")
    return p.name + (f"{{{','.join(options)}}}" if options else "")


def format_pipeline(passes: Sequence[Pass]) -> str:
    """Pipeline text that `parse_pipeline` reads back as the same passes."""
    return ",".join(format_pass(p) for p in passes)


def with_vram_budget(
    pipeline: str, budget: str, depth: int | None = None, experts: bool = False
) -> str:
    """`pipeline` ending in a memory plan, then `plan-prefetch{budget=...}`, as text.

    What `optgraph compile/run --vram-budget SIZE` runs: analyze-lifetimes,plan-memory are
    appended when the pipeline does not plan memory, and a plan-prefetch already in it is replaced.
    `experts` (the CLI sets it for a graph with moe nodes): experts go to the CPU before any
    weight is streamed, as llama.cpp's `--n-cpu-moe` does, unless the pipeline places experts
    itself: `split-experts{budget=...,overflow=stream}` before the first scheduling pass, and
    `split-backends` (which runs the host experts on the CPU) after assign-streams when the
    pipeline lacks it. plan-prefetch then streams whatever the planned step still cannot hold.

        before: verify,fuse,assign-streams,insert-sync,analyze-lifetimes,plan-memory
        after:  verify,fuse,split-experts{budget=8GiB,overflow=stream},assign-streams,
                split-backends,insert-sync,analyze-lifetimes,plan-memory,
                plan-prefetch{budget=8GiB}                                       (experts=True)
    """
    try:
        parse_size(budget)
    except ValueError as err:
        raise PipelineError(f"--vram-budget: {err}") from None
    passes = [p for p in parse_pipeline(pipeline) if p.name != "plan-prefetch"]
    if experts and not any(p.name == "split-experts" for p in passes):
        passes = _with_experts_on_the_host(passes, budget)
    if not any(p.name == "plan-memory" for p in passes):
        passes += [make_pass("analyze-lifetimes"), make_pass("plan-memory")]
    options = {"budget": budget} | ({} if depth is None else {"depth": str(depth)})
    return format_pipeline([*passes, make_pass("plan-prefetch", options)])


def _with_experts_on_the_host(passes: list[Pass], budget: str) -> list[Pass]:
    """`passes` with split-experts{budget} before the first pass it may not follow (one that
    schedules or places on devices) and split-backends after assign-streams (or right after
    split-experts) unless there is one. Linear in the passes."""
    stale = set(SplitExpertsPass.invalidates)
    at = next(
        (
            i
            for i, p in enumerate(passes)
            if stale & set(p.provides) or p.name in ("tensor-parallel", "pipeline-parallel")
        ),
        len(passes),
    )
    options = {"budget": budget, "overflow": "stream"}
    backends = [p for p in passes if isinstance(p, SplitBackendsPass)]
    if backends:  # the tokens from which a moe runs on the GPU: that split-backends' own
        options["gpu-min-batch"] = str(backends[0].gpu_min_batch)
    out = [*passes[:at], make_pass("split-experts", options), *passes[at:]]
    if backends:
        return out
    streams = [i for i, p in enumerate(out) if p.name == "assign-streams"]
    after = streams[0] + 1 if streams else at + 1
    return [*out[:after], make_pass("split-backends"), *out[after:]]


def with_merged_launches(pipeline: str, merged: bool) -> str:
    """`pipeline` whose assign-streams costs launches the way lowering will issue them.

    Whether lowering merges launches is one fact (`LoweringOptions.merge_launches`, the
    `--no-merge-launches` flag); the stream cost model reads it as assign-streams' option
    `merged-launches`, written here from the lowering's fact:

        before: verify,assign-streams,plan-memory                      (merged = False)
        after:  verify,assign-streams{merged-launches=false},plan-memory

    A pipeline that says `merged-launches=false` while lowering merges contradicts it: a
    PipelineError. Unchanged text when nothing changes. Linear in the pipeline's passes.
    """
    passes = parse_pipeline(pipeline)
    tied: list[Pass] = []
    for p in passes:
        if isinstance(p, AssignStreamsPass) and p.merged_launches != merged:
            if merged:
                raise PipelineError(
                    "assign-streams{merged-launches=false} contradicts lowering that merges "
                    "launches: drop the option and lower with --no-merge-launches "
                    "(LoweringOptions(merge_launches=False))"
                )
            p = dataclasses.replace(p, merged_launches=False)
        tied.append(p)
    return pipeline if tied == passes else format_pipeline(tied)


def check_contract(p: Pass, graph: Graph) -> None:
    """Raise a PipelineError naming the pass to run first, or to run `p` before, if `p` may not
    run on `graph`."""
    for fact_name in p.requires:
        fact = FACTS[fact_name]
        if not fact.holds(graph):
            raise PipelineError(
                f"{p.name} needs {fact.description} ({fact_name}): run {fact.established_by} first"
            )
    for fact in FACTS.values():  # in pipeline order: the earliest pass to run before
        if fact.name in p.invalidates and fact.is_marked(graph):
            raise PipelineError(
                f"{p.name} invalidates {fact.annotations} ({fact.name}) that this graph carries: "
                f"run {p.name} before {fact.established_by}"
            )


def run_pipeline(
    graph: Graph,
    pipeline: str | Sequence[Pass],
    after_each: Callable[[Pass, Graph], None] | None = None,
) -> Graph:
    """Run passes in order, checking contracts before and verifying after each one."""
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    with gc_paused():  # the passes build whole graphs and create no reference cycles
        verify(graph)
        for p in passes:
            check_contract(p, graph)
            result = p.run(graph)
            try:
                verify(result, previous=graph)  # only the annotations, where only they changed
            except OptGraphError as err:
                raise AssertionError(f"pass {p.name} produced an invalid graph:\n{err}") from err
            graph = result
            if after_each is not None:
                after_each(p, graph)
    return graph


def plan_memory_if_missing(graph: Graph) -> Graph:
    """`graph` itself when its lifetimes are analyzed and its memory planned, else `graph` through
    `analyze-lifetimes,plan-memory`: what every program needs before it is lowered."""
    if FACTS["memory-planned"].holds(graph) and FACTS["lifetimes-analyzed"].holds(graph):
        return graph
    return run_pipeline(graph, "analyze-lifetimes,plan-memory")


def describe_passes() -> list[tuple[str, str, list[tuple[str, str, Any]]]]:
    """(name, summary, [(option, type, default)]) for every pass, sorted by name."""
    out = []
    for name, cls in PASSES.items():
        hints = get_type_hints(cls)
        options = [
            (
                f.name.replace("_", "-"),
                getattr(hints[f.name], "__name__", str(hints[f.name])),
                f.default,
            )
            for f in dataclasses.fields(cls)
        ]
        out.append((name, cls.summary, options))
    return out
