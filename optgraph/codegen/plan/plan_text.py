"""A lowered CUDA plan (`lower_cuda.lower_cuda`) spelled out: as text and as JSON-ready data.

`describe_plan(plan)` is the launch list as text, each kernel's source after its first launch
(what the CHECK fixtures of tests/codegen_checks match); `plan_json(plan)` is the plan as
JSON-ready data (kernels by name, every step with its pointers spelled as space/key/offset: the
`cuda_plan.json` of `optgraph compile -o`):

    GemmStep(stream 0, a=weights+0, b=input x, c=arena+0)
    ->  gemm %h f32 NN m=256 n=4 k=64 lda=256 ldb=64 ldc=256 batch=1 strides=0,0,1024
        a=weights+0 b=input:x+0 c=arena+0 stream 0

Complexity: linear in the steps plus the kernels' text.
"""

from __future__ import annotations

from optgraph.codegen.plan.json_records import json_record
from optgraph.codegen.plan.steps import (
    CollectiveStep,
    CopyStep,
    CudaPlan,
    EventStep,
    GemmStep,
    HostStep,
    Location,
    Step,
)


def plan_json(plan: CudaPlan) -> dict[str, object]:
    """The plan as JSON-ready data (what `optgraph compile -o` writes as cuda_plan.json)."""

    def step_json(step: Step) -> dict[str, object]:
        data = json_record(step)
        data["kind"] = type(step).__name__.removesuffix("Step").lower()
        if isinstance(step, GemmStep) and not step.gemm.c_dtype:
            del data["gemm"]["c_dtype"]  # C in A's dtype: the plan as it was written before
        return data

    return {
        "graph": plan.graph_name,
        "streams": list(plan.streams),
        "arena_bytes": plan.arena_bytes,
        "weights_bytes": plan.weights_bytes,
        "planned": plan.is_planned,
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "locations": {name: json_record(loc) for name, loc in plan.locations.items()},
        "kernels": sorted(plan.kernels),
        "steps": [step_json(s) for s in plan.steps],
    }


def _where(loc: Location) -> str:
    space = f"{loc.space}:{loc.key}" if loc.key else loc.space
    return f"{space}+{loc.offset}"


def describe_plan(plan: CudaPlan) -> str:
    """The launch list as text, each kernel's source after its first launch (what the CHECK
    fixtures of tests/codegen_checks match against)."""
    lines: list[str] = []
    shown: set[str] = set()
    for step in plan.steps:
        if isinstance(step, EventStep):
            lines.append(f"{step.kind} ^{step.event} stream {step.stream}")
        elif isinstance(step, CopyStep):
            lines.append(
                f"copy %{step.node} {step.nbytes} bytes {_where(step.dst)} <- {_where(step.src)}"
                f" stream {step.stream}"
            )
        elif isinstance(step, GemmStep):
            g = step.gemm
            ops = "NT"[g.transa] + "NT"[g.transb]
            lines.append(
                f"gemm %{step.node} {g.dtype}{'->' + g.c_dtype if g.c_dtype else ''} {ops} m={g.m} n={g.n} k={g.k} lda={g.lda}"
                f" ldb={g.ldb} ldc={g.ldc} batch={g.batch} strides={g.stride_a},{g.stride_b},"
                f"{g.stride_c} a={_where(step.a)} b={_where(step.b)} c={_where(step.c)}"
                f" stream {step.stream}"
            )
        elif isinstance(step, HostStep):
            lines.append(f"host %{step.node} stream {step.stream}")
        elif isinstance(step, CollectiveStep):
            ends = " ".join(
                f"{side}={_where(loc)}"
                for side, loc in (("src", step.src), ("dst", step.dst))
                if loc
            )
            group = ",".join(str(d) for d in step.group)
            lines.append(
                f"{step.kind} %{step.node} {step.dtype} count={step.count} group=[{group}]"
                f" rank={step.rank} rows={step.rows} {ends} stream {step.stream}"
            )
        else:
            args = ",".join(_where(a) for a in step.args)
            nodes = "+".join(f"%{n}" for n in step.members)
            lines.append(
                f"kernel {nodes} {step.kernel} grid={step.grid} block={step.block}"
                f" args={args} stream {step.stream}"
            )
            if step.kernel not in shown:
                shown.add(step.kernel)
                lines.append(plan.kernels[step.kernel].source.rstrip())
    return "\n".join(lines) + "\n"
