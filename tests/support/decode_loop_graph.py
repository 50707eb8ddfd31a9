"""The decode loop's step graph at test sizes: `examples/gen_llama.py`'s decode step with the
three nodes `benchmarks/bench_decode_loop.py` appends (`next_token = cast(argmax(logits))`,
`next_pos = pos + one`, `next_kv_len = kv_len + one`), the caches and the three as outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import optgraph as og

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

SMALL = {"layers": 1, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 96, "vocab": 64,
         "cache_len": 16}  # fmt: skip
# The decode loop benchmark's launch-bound sizes (head_to_head.LLAMA_LAUNCH).
LAUNCH_BOUND = {"layers": 8, "hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1376,
                "vocab": 1024, "cache_len": 128}  # fmt: skip


def loop_step_text(dtype: str = "f32", adds_first: bool = False, **sizes: int) -> str:
    """The step graph's text at `SMALL` sizes, those of `sizes` replaced; `adds_first`: the two
    position adds (they read inputs only) are the first nodes instead of the last."""
    text = generate_llama(**{**SMALL, **sizes}, dtype=dtype, batch=1, seq=1, mode="decode")
    lines = text.rstrip().splitlines()
    caches = [c.strip() for c in lines[-2].strip()[len("output ") :].split(",")][1:]
    head = lines[:-2]
    first_input = next(i for i, line in enumerate(head) if line.strip().startswith("input "))
    body = [
        "  %next_token64 = argmax(%logits) {axis = -1} : i64[1]",
        '  %next_token = cast(%next_token64) {dtype = "i32"} : i32[1]',
        "  %next_pos = add(%pos, %one) : i32[1]",
        "  %next_kv_len = add(%kv_len, %one) : i32[1]",
        "  output " + ", ".join([*caches, "%next_token", "%next_pos", "%next_kv_len"]),
        "}",
    ]
    extra = ["  input %one : i32[1]"]
    lines = [*head[:first_input], *extra, *head[first_input:]]
    if adds_first:
        first_node = next(i for i, line in enumerate(lines) if line.strip().startswith("%"))
        lines[first_node:first_node] = body[2:4]
        body = body[:2] + body[4:]
    return "\n".join([*lines, *body]) + "\n"


def loop_step_graph(dtype: str = "f32", adds_first: bool = False, **sizes: int) -> og.Graph:
    return og.parse(loop_step_text(dtype, adds_first, **sizes))
