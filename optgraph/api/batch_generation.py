"""A batch of prompts generated together: one prefill and one decode step a token for every row,
each row with its own length, positions and `kv_len`. The CPU loop is here; the GPU's is
`runtime/cuda/rows_loop.py`, over the same steps and inputs (`rows_inputs`).

    for row, token in rows_tokens(prefill, decode, prompts, 32, Sampling(), stop):
        ...                              # token of prompt `row`, rows in order within a step

The steps are llama_ir's (a GGUF file: `ModelSource.batch_step`) or a checkpoint's
(`frontends/hf_row_steps.py`, transformers' forward with per-row positions and masks: `tokens
[B*S]`, `position_ids [S]` in the prefill and `[B]` in the decode step, no `kv_len`), B rows
each:

- prefill `tokens [B*S]` (each prompt at the start of its row, padded with 0 to the bucket S),
  `pos [S]` = 0..S-1 and `kv_len [1]` = S shared by the rows: every row is left-aligned in its
  cache, its prompt at rows 0..n_b-1; causal attention keeps a row's padding out of its real
  tokens, and the padding's cache rows are overwritten by that row's decode steps before any
  query reads them. Row b's first token is chosen from logits row `b*S + n_b - 1`;
- decode (`per_row`): `tokens [B]`, `pos [B]` = n_b + i - 1 for the i-th new token, `kv_len
  [B]` = pos + 1: attention's per-row form, so each row sees its own keys and no other's rows.

Each row's token i is `sample(its logits, sampling, i)`: the same draw as that prompt run alone,
so greedy and seeded rows give that prompt's own tokens. A row that ends (an end-of-sequence
token, or `max_new` tokens) yields no more; its later decode inputs repeat its last token at
the next positions, which write only its own cache rows, and the loop ends when every row has
ended.

Not handled: `.ir` steps (one sequence: `generation.py` runs their prompts in turn).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from optgraph.api.sampling import Sampling, sample
from optgraph.frontends.step_graphs import StepGraph
from optgraph.reference.kernels import numpy_dtype

MAX_BATCH = 8  # prompts a batch takes; more are generated in batches of this many


def rows_inputs(
    step: StepGraph, rows: Sequence[Sequence[int]], starts: Sequence[int]
) -> dict[str, np.ndarray]:
    """`step`'s inputs but its caches: row b's `rows[b]` (padded with 0 to the step's length)
    at positions `starts[b]`, `starts[b] + 1`, ... A step with one position vector (`pos [S]`)
    takes rows that all start together."""
    types = step.graph.value_types()
    batch, seq = step.batch, step.seq
    if len(rows) != batch or len(starts) != batch:
        raise ValueError(f"{len(rows)} rows for a step of {batch}")
    if any(not 0 < len(r) <= seq for r in rows):
        raise ValueError(f"rows of {[len(r) for r in rows]} tokens for a step of {seq}")
    out: dict[str, np.ndarray] = {}
    for name, role in step.roles.items():
        if role == "cache":
            continue
        t = types[name]
        shared = t.shape[0] in (1, seq) and t.shape[0] != batch * seq
        if shared and len(set(starts)) > 1 and role in ("positions", "kv_len"):
            raise ValueError(f"rows starting at {list(starts)} for a step of shared positions")
        if role == "tokens":
            values = np.zeros((batch, seq), np.int64)
            for b, row in enumerate(rows):
                values[b, : len(row)] = row
        elif role == "positions":
            values = np.array([np.arange(s, s + seq) for s in starts])
            values = values[0] if t.shape[0] == seq and batch > 1 else values
        elif role == "kv_len":
            values = np.array(starts) + seq
            values = values[:1] if t.shape[0] == 1 else values
        else:
            raise ValueError(f"input role {role!r} in a batch step")
        out[name] = values.astype(numpy_dtype(t.dtype)).reshape(t.shape)
    return out


def rows_tokens(
    prefill: tuple[StepGraph, Any, Mapping[str, Any]],
    decode: tuple[StepGraph, Any, Mapping[str, Any]],
    prompts: Sequence[Sequence[int]],
    max_new: int,
    sampling: Sampling,
    stop: set[int],
) -> Iterator[tuple[int, int]]:
    """(row, token) for every new token of every row (module docstring). `prefill`, `decode`:
    (step, compiled program, weights), B rows each."""
    (pre, pre_program, pre_weights), (step, program, weights) = prefill, decode
    types = step.graph.value_types()
    caches = {n: np.zeros(types[n].shape, numpy_dtype(types[n].dtype)) for n in step.cache_inputs}
    feed = rows_inputs(pre, prompts, [0] * len(prompts))
    feed |= dict(zip(pre.cache_inputs, caches.values()))
    out = pre_program.run(feed, pre_weights, seed=None)
    caches = dict(zip(step.cache_inputs, (out[n] for n in pre.cache_outputs)))
    logits = np.asarray(out[pre.logits]).reshape(len(prompts), pre.seq, -1)
    last = [sample(logits[b, len(p) - 1], sampling, 0) for b, p in enumerate(prompts)]
    live = [True] * len(prompts)
    for index in range(max_new):
        if index:
            starts = [len(p) + index - 1 for p in prompts]
            feed = rows_inputs(step, [[t] for t in last], starts)
            out = program.run({**feed, **caches}, weights, seed=None)
            caches = {n: out[o] for n, o in zip(step.cache_inputs, step.cache_outputs)}
            rows = np.asarray(out[step.logits]).reshape(len(prompts), -1)
            last = [
                sample(rows[b], sampling, index) if live[b] else last[b]
                for b in range(len(prompts))
            ]
        for b, token in enumerate(last):
            if live[b]:
                yield b, token
                live[b] = token not in stop
        if not any(live):
            return
