"""Which rope a model's frequency table is: the scaling and its parameters, for the rope matcher.

`rope_attributes(inv_freq, attention_factor)` takes the frequencies a model computes (probed from
its angle table at position 1, float32) and returns rope attributes whose table
(`op_rules_rope.rope_frequencies`, the one the reference and the kernels use) equals them to
`RTOL`, trying `"none"`, `"linear"`, `"llama3"` and `"yarn"` in that order; None when none fits.

    inv_freq = [1, 0.1, 0.01, 0.001] / 4      ->  {"theta": 10000.0, "scaling": "linear",
                                                     "factor": 4.0}

A table does not always determine a scaling's parameters: llama3's depends on
`original_max_position`, `low_freq_factor` and `high_freq_factor` only through two ratios, and
yarn's on `original_max_position`, `beta_fast` and `beta_slow` only through where its ramp starts
and ends. The fit then takes transformers' defaults (low_freq_factor 1; beta_fast 32,
beta_slow 1) and solves for the rest, so the attributes may differ from the model's config while
the rotation they describe is the same; the table is what is checked. A table no candidate
reproduces (yarn with other betas than the defaults and an original length no integer fits) is
not raised: it runs through the general ops. theta is taken as the roundest value within 3e-6
of its estimate (float32 frequencies move it by about 1e-6), so a model's theta that is not
round to that precision (500001) is read as the round one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from optgraph.ir.graph import AttrValue
from optgraph.ir.op_rules_rope import rope_frequencies

RTOL = 1e-5
Attributes = dict[str, AttrValue]


def rope_attributes(inv_freq: np.ndarray, attention_factor: float) -> Attributes | None:
    """Attributes (theta, scaling and its parameters) whose frequencies are `inv_freq`."""
    g = np.asarray(inv_freq, np.float64)
    if g.size < 2 or not np.all(g > 0) or not np.all(np.diff(g) < 0):
        return None
    for attrs in _candidates(g, attention_factor):
        got = rope_frequencies(attrs, 2 * g.size)
        if abs(got.attention_factor - attention_factor) <= RTOL * attention_factor and np.allclose(
            got.inv_freq, g, rtol=RTOL, atol=0
        ):
            return attrs
    return None


def _round(value: float) -> float:
    """The value a float32 table moved in its 7th digit, back to the one the model meant."""
    return float(f"{value:.6g}")


def _thetas(g: np.ndarray) -> list[float]:
    """theta from the run of unscaled frequencies at the start and from the run scaled by one
    factor at the end (every scaling has one of them): over the longest run that agrees with
    its first ratio, so float32 rounding moves theta by less than its 6th digit."""
    d = 2 * g.size
    found = []
    for run in (g, g[::-1]):
        steps = np.arange(1, g.size)
        estimates = (run[1:] / run[0]) ** (-d / (2.0 * np.where(run is g, steps, -steps)))
        agree = np.abs(estimates / estimates[0] - 1) < 1e-4
        longest = int(np.argmin(agree)) if not agree.all() else agree.size
        estimate = float(estimates[max(longest - 1, 0)])
        if math.isfinite(estimate) and estimate > 1:
            # The roundest value within float32's reach first (500000, not 499999).
            rounded = (float(f"{estimate:.{digits}g}") for digits in range(1, 7))
            found += [t for t in rounded if abs(t / estimate - 1) < 3e-6]
    return list(dict.fromkeys(found))


def _candidates(g: np.ndarray, attention_factor: float) -> Iterator[Attributes]:
    d = 2 * g.size
    for theta in _thetas(g):
        base = theta ** (-2.0 * np.arange(g.size) / d)
        yield {"theta": theta}
        factor = _round(float(base[-1] / g[-1]))
        if factor <= 0:
            continue
        yield {"theta": theta, "scaling": "linear", "factor": factor}
        yield from _llama3(g, base, theta, factor)
        yield from _yarn(g, base, theta, factor, attention_factor)


def _llama3(g: np.ndarray, base: np.ndarray, theta: float, factor: float) -> Iterator[Attributes]:
    """low_freq_factor 1; high_freq_factor and the original length from the blended part."""
    if factor <= 1:
        return
    blend = (g / base - 1 / factor) / (1 - 1 / factor)  # s: 1 kept, 0 divided by factor
    inside = (blend > 1e-4) & (blend < 1 - 1e-4)
    guesses: list[tuple[float, float]] = []
    if inside.sum() >= 2:
        f, s = base[inside], blend[inside]
        a = (s[0] - s[-1]) / (f[0] - f[-1])
        b = s[0] - a * f[0]
        if b < 0:
            guesses.append((1.0 - 1.0 / b, 2 * math.pi * a / -b))
    elif inside.sum() == 1:
        guesses.append(
            (4.0, 2 * math.pi * (3 * float(blend[inside][0]) + 1) / float(base[inside][0]))
        )
    else:
        low = base[blend <= 1e-4]
        if low.size:
            guesses.append((4.0, math.floor(2 * math.pi / float(low[0]) * (1 - 1e-9))))
    for high, context in guesses:
        if context >= 1:
            yield {
                "theta": theta,
                "scaling": "llama3",
                "factor": factor,
                "low_freq_factor": 1.0,
                "high_freq_factor": _round(high),
                "original_max_position": round(context),
            }


def _yarn(
    g: np.ndarray, base: np.ndarray, theta: float, factor: float, attention_factor: float
) -> Iterator[Attributes]:
    """beta_fast 32 and beta_slow 1; the original length whose ramp is the table's."""
    if factor <= 1:
        return
    ramp = 1 - (g - base / factor) / (base - base / factor)  # 0 unscaled, 1 divided by factor
    d = 2 * g.size
    k = 2 * math.log(theta) / d  # correction_dim(beta) = log(L / (2π·beta)) / k

    def length(beta: float, dim: float) -> float:
        return 2 * math.pi * beta * math.exp(dim * k)

    start = max(int(np.sum(ramp <= 1e-6)) - 1, 0)  # last index left unscaled: floor(low)
    inside = (ramp > 1e-6) & (ramp < 1 - 1e-6)
    if np.any(ramp >= 1 - 1e-6):
        end = int(np.argmax(ramp >= 1 - 1e-6))  # ceil(high): the first index fully scaled
    elif inside.any():
        i = int(np.flatnonzero(inside)[-1])
        end = min(round(start + (i - start) / float(ramp[i])), d - 1)
    else:
        return
    # truncate: floor(cd(32)) = start (or cd <= 0 where start is 0), ceil(cd(1)) = end.
    lower = max(length(32, start) if start > 0 else 0.0, length(1, end - 1))
    upper = min(length(32, start + 1), length(1, end) if end < d - 1 else math.inf)
    attrs: Attributes = {"theta": theta, "scaling": "yarn", "factor": factor}
    if abs(attention_factor - _default_attention_factor(factor)) > RTOL * attention_factor:
        attrs["attention_factor"] = _round(attention_factor)
    context = _roundest_integer(lower, upper)
    if context is not None:
        yield {**attrs, "original_max_position": context}
    if inside.any():  # not truncated: the ramp's line gives the original length
        at, r = np.flatnonzero(inside), ramp[inside]
        if at.size >= 2:
            slope = float((r[-1] - r[0]) / (at[-1] - at[0]))
            low = float(at[0] - r[0] / slope)
        else:  # one point: the ramp starts at 0 (a negative low clamps there)
            slope, low = float(r[0] / at[0]), 0.0
        unclamped = length(32, low) if low > 1e-3 else length(1, low + 1 / slope)
        yield {**attrs, "original_max_position": round(unclamped), "truncate": False}


def _roundest_integer(lower: float, upper: float) -> int | None:
    """The integer in (lower, upper) divisible by the largest power of two (original lengths
    are such numbers: 4096, 32768), None when there is none."""
    for bits in range(40, -1, -1):
        step = 1 << bits
        candidate = (math.floor(lower / step) + 1) * step
        if candidate < upper:
            return candidate
    return None


def _default_attention_factor(factor: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def table_tolerance(angles: np.ndarray, factor: float) -> float:
    """How far a cos / sin table computed in float32 may be from the exact one: 1e-5, plus the
    rounding of its angles (`inv_freq` and `pos · inv_freq` each rounded: about 2.4e-7 of the
    angle; 1.2e-4 at position 511), times the attention factor."""
    largest = float(np.max(np.abs(angles))) if angles.size else 0.0
    return (1e-5 + 2.4e-7 * largest) * max(1.0, abs(factor))
