"""Choosing the next token from a row of logits: greedy, or seeded temperature / top-k / top-p
sampling, with one definition that the CPU (`sample`, NumPy) and the GPU
(`codegen/kernels/sampling.py`, the same steps in a kernel) both follow.

    settings = Sampling(temperature=0.8, top_k=40, top_p=0.95, seed=7)
    token = sample(logits_row, settings, step=0)   # the first new token
    token = sample(logits_row, Sampling(), step=3) # greedy: the first index of the largest logit

The definition, for a row `x` of `V` logits (read as float32):

1. greedy (`temperature == 0` or `top_k == 1`): the smallest index of the largest value;
2. `z = x / temperature`; `m = max(z)`; `top_k` (0 < k < V): keep the tokens whose `z` is at
   least the k-th largest `z` (ties at the threshold all kept);
3. `w = exp(z - m)` over the kept tokens; `top_p` (0 < p < 1): keep the tokens whose `w` is at
   least `t`, the largest value such that the kept `w >= t` sum to at least `p` times all kept
   `w` (the smallest most-likely set of mass `p`, ties kept);
4. `u = uniform(seed, step)` in [0, 1), a counter-based draw (`uniform`: SplitMix64 of the seed
   and the step, 24 bits); the token is the first index, in index order, at which the running
   sum of the kept `w` exceeds `u` times their total.

So a seed gives the same tokens run to run; the CPU and the GPU agree except where float
summation order moves `u`'s target across a boundary (rare; both are reproducible). Top-p's
threshold is found on the GPU by bisection over the float bit patterns, here by sorting: the same
value.

Not handled: repetition penalties, min-p, beam search.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optgraph.errors import InputError

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen (module docstring). The defaults are greedy."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0 and np.isfinite(self.temperature)):
            raise InputError(f"--temperature must be 0 or positive, got {self.temperature}")
        if self.top_k < 0:
            raise InputError(f"--top-k must be 0 (off) or positive, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"--top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.seed <= MASK64:
            raise InputError(f"--seed must be in [0, 2^64), got {self.seed}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


def splitmix64(x: int) -> int:
    """SplitMix64's output function of the state `x` (a 64-bit integer)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed: int, step: int) -> np.float32:
    """The draw of `step` under `seed`: 24 random bits as a float32 in [0, 1), exact."""
    bits = splitmix64(splitmix64(seed) ^ (step & MASK64)) >> 40
    return np.float32(bits) / np.float32(1 << 24)


def sample(logits: np.ndarray, settings: Sampling, step: int) -> int:
    """The token chosen from one row of logits (module docstring)."""
    row = np.asarray(logits, dtype=np.float32).reshape(-1)
    if settings.is_greedy:
        return int(np.argmax(row))
    z = row / np.float32(settings.temperature)
    keep = np.ones(z.shape, bool)
    if 0 < settings.top_k < z.size:
        threshold = np.partition(z, z.size - settings.top_k)[z.size - settings.top_k]
        keep = z >= threshold
    w = np.where(keep, np.exp(z - z.max(), dtype=np.float32), np.float32(0))
    if settings.top_p < 1.0:
        ordered = np.sort(w[keep])[::-1]
        needed = np.float32(settings.top_p) * w.sum(dtype=np.float32)
        index = int(np.searchsorted(np.cumsum(ordered, dtype=np.float32), needed))
        keep &= w >= ordered[min(index, ordered.size - 1)]
        w = np.where(keep, w, np.float32(0))
    target = uniform(settings.seed, step) * w.sum(dtype=np.float32)
    running = np.cumsum(w, dtype=np.float32)
    chosen = int(np.searchsorted(running, target, side="right"))
    last_kept = int(np.flatnonzero(keep)[-1])
    return min(chosen, last_kept)  # u * total rounds to the total: the last kept token
