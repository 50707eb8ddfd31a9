"""The lowered program as text a human reads: `lowered_plan.txt` of `optgraph compile -o DIR`.

The decode rewrites (`codegen/decode/`) and launch merging decide inside lowering, so the printed
IR cannot show them; this text does. It outlines (`plan/plan_outline.py`) each plan the program
holds:

- `main`: the program's own plan (no output bound to an input's array);
- `fallback`: for a program that streams weights, the plan that copies them synchronously
  through one prefetch slot (run when the main arena cannot be allocated);
- `in place`: where outputs may be computed in their inputs' buffers (`in_place_outputs`: a
  decode step's KV caches), the plan of a run that binds every one of them, as a decode loop
  does (`optgraph generate`, `Program.bind(out=...)`): the rewrites that need caches updated
  in place (`rope_cache_writes`, the cache writes of `qkv_folds`, `early_cache_reads`) show
  only there. It is lowered here, once more, exactly as the runtime would ask for it.

The header names the decode rewrites whose switch is off (`SWITCHES`).

    before: LoweredProgram(graph llama_decode, main=..., in_place={l0.k_cache_new: l0.k_cache})
    after:  # lowered plan of graph llama_decode (launches merged)
            decode rewrites switched off: argmax_folds.ARGMAX_CAST, ...
            == main: ...                      the outline of the main plan
            == in place: ...                  the outline of the in-place plan

Complexity: linear in the plans' steps, plus one more lowering where outputs may be in place.
"""

from __future__ import annotations

from types import ModuleType

from optgraph.codegen.decode import (
    argmax_folds,
    early_cache_reads,
    gathered_rows,
    qkv_folds,
    rope_cache_writes,
)
from optgraph.codegen.lower_cuda import lower_variant
from optgraph.codegen.plan.lowered import LoweredProgram, Relower
from optgraph.codegen.plan.plan_outline import plan_outline

# Each decode rewrite's switch (module, setting); residual_adds (rank programs) has none.
SWITCHES: tuple[tuple[ModuleType, str], ...] = (
    (qkv_folds, "FOLD_QKV"),
    (rope_cache_writes, "ROPE_CACHE_WRITES"),
    (early_cache_reads, "EARLY_CACHE_READS"),
    (argmax_folds, "ARGMAX_CAST"),
    (argmax_folds, "ARGMAX_IN_PRODUCT"),
    (gathered_rows, "GATHER_ROWS"),
)


def switched_off() -> list[str]:
    """The decode rewrites' switches that are off now, as `module.SETTING`."""
    return [
        f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
        for module, name in SWITCHES
        if not getattr(module, name)
    ]


def lowered_plan_text(program: LoweredProgram, relower: Relower | None = None) -> str:
    """The text of `program`'s plans (see the module docstring), ending in a newline.
    `relower`: what gives the in-place variant (a rank program's, `RankPrograms.relowers[r]`,
    offers its residual adds); by default `lower_variant` of the program's graph."""
    merged = "launches merged" if program.options.merge_launches else "one launch per kernel"
    off = switched_off()
    lines = [
        f"# lowered plan of graph {program.graph.name} ({merged})",
        "decode rewrites switched off: " + (", ".join(off) if off else "none"),
        "",
        "== main: the program's own plan (no output bound to an input's array)",
        *plan_outline(program.main.plan),
    ]
    fallback = program.main.fallback
    if fallback is not None:
        lines += [
            "",
            "== fallback: streamed weights copied synchronously through one prefetch slot",
            *plan_outline(fallback.plan),
        ]
    if program.in_place:
        if relower is None:
            variant = lower_variant(program.graph, program.options, program.in_place)
        else:
            variant = relower({i.name: i.type for i in program.graph.inputs}, program.in_place)
        lines += ["", "== in place: the plan of a run that binds each output to its input's array"]
        lines += [f"   %{out} in %{source}" for out, source in program.in_place.items()]
        lines += plan_outline(variant.plan)
    return "\n".join(lines) + "\n"
