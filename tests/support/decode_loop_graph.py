"""The decode loop's step graph at test sizes: `examples/gen_llama.py`'s decode step with the
three nodes `benchmarks/bench_decode_loop.py` appends (`next_token = cast(argmax(logits))`,
`next_pos = pos + one`, `next_kv_len = kv_len + one`), the caches and the three as outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import optgraph as og

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama


def loop_step_text(
    dtype: str = "f32", layers: int = 1, hidden: int = 64, vocab: int = 64, cache_len: int = 16
) -> str:
    """The step graph's text (4 heads, 2 of them for keys and values, FFN 96)."""
    text = generate_llama(
        layers=layers, hidden=hidden, heads=4, kv_heads=2, ffn=96, vocab=vocab, dtype=dtype,
        batch=1, seq=1, cache_len=cache_len, mode="decode",
    )  # fmt: skip
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
    return "\n".join([*head[:first_input], *extra, *head[first_input:], *body]) + "\n"


def loop_step_graph(**sizes: int | str) -> og.Graph:
    return og.parse(loop_step_text(**sizes))  # type: ignore[arg-type]
