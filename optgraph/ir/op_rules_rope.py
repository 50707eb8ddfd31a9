"""rope: its type rule and its frequency table (scaling and partial rotary), shared by the
reference interpreter, the CUDA kernel and the importers' rope matcher.

    %q2 = rope(%q, %pos) {theta = 500000.0, scaling = "llama3", factor = 8.0,
                          low_freq_factor = 1.0, high_freq_factor = 4.0,
                          original_max_position = 8192} : f32[1,6,4,64]

The first `rotary_dim` (default D) entries of each head rotate as rotate-half (NeoX) pairs
`(i, i + rotary_dim/2)` by the angle `pos · inv_freq[i]`; the rest pass through. `inv_freq` is
that of Hugging Face transformers' rope_init functions, computed in float64:

- `"none"`: `theta^(-2i/rotary_dim)`;
- `"linear"`: that divided by `factor`;
- `"llama3"`: wavelengths `2π/f` above `original_max_position / low_freq_factor` divided by
  `factor`, below `original_max_position / high_freq_factor` kept, in between blended with
  `s = (original_max_position/wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)`
  as `(1 - s)·f/factor + s·f`;
- `"yarn"`: `f/factor` blended into `f` by a ramp over the pair indices between the correction
  dimensions of `beta_fast` (default 32) and `beta_slow` (default 1) rotations within
  `original_max_position` (floored and ceiled unless `truncate = false`); cosines and sines are
  multiplied by `attention_factor` (default `0.1·ln(factor) + 1`, 1 when factor <= 1).

Attributes that belong to another scaling are errors, so a table is never silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optgraph.ir.attrs import float_attr, int_attr
from optgraph.ir.graph import FLOAT_DTYPES, INT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, fail

SCALINGS: tuple[str, ...] = ("none", "linear", "llama3", "yarn")

# Which scaling each scaling-specific attribute belongs to, and which each scaling requires.
_BELONGS_TO: dict[str, tuple[str, ...]] = {
    "factor": ("linear", "llama3", "yarn"),
    "low_freq_factor": ("llama3",),
    "high_freq_factor": ("llama3",),
    "original_max_position": ("llama3", "yarn"),
    "beta_fast": ("yarn",),
    "beta_slow": ("yarn",),
    "attention_factor": ("yarn",),
    "truncate": ("yarn",),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "none": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position"),
    "yarn": ("factor", "original_max_position"),
}


@dataclass(frozen=True)
class RopeFrequencies:
    """The rotation of one rope node: `inv_freq[i]` for pair i of `rotary_dim / 2`, and the
    factor its cosines and sines are multiplied by."""

    inv_freq: tuple[float, ...]
    attention_factor: float
    rotary_dim: int


def rope(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x, pos = types
    if x.rank != 4:
        fail(node, f"x must be [B,S,H,D], got {x}")
    if x.dtype not in FLOAT_DTYPES:
        fail(node, f"expected a float x, got {x}")
    if pos.dtype not in INT_DTYPES:
        fail(node, f"pos must have an integer dtype (i32 or i64), got {pos}")
    if pos.shape != (x.shape[1],):
        fail(node, f"pos must be [S] = [{x.shape[1]}] for x {x}, got {pos}")
    if "rotary_dim" not in attrs and x.shape[3] % 2:
        fail(node, f"head dimension must be even, got {x.shape[3]} in {x}")
    rotary_dim = int_attr(attrs, "rotary_dim", x.shape[3])
    if not 0 < rotary_dim <= x.shape[3] or rotary_dim % 2:
        fail(
            node,
            f"attribute 'rotary_dim' must be even and in 2..{x.shape[3]} for {x}, got {rotary_dim}",
        )
    _check_scaling(node, attrs)
    return x


def _check_scaling(node: Node, attrs: Attrs) -> None:
    scaling = str(attrs["scaling"])
    for key, owners in _BELONGS_TO.items():
        if key in attrs and scaling not in owners:
            fail(node, f"attribute '{key}' does not apply to scaling = \"{scaling}\"")
    for key in _REQUIRED[scaling]:
        if key not in attrs:
            fail(node, f"scaling = \"{scaling}\" needs attribute '{key}'")
    if float_attr(attrs, "theta") <= 0 or (scaling == "yarn" and attrs["theta"] == 1.0):
        fail(node, f"attribute 'theta' must be > 0 (and not 1 for yarn), got {attrs['theta']}")
    positive = ["factor", "original_max_position", "low_freq_factor", "beta_fast", "beta_slow"]
    for key in positive:
        if key in attrs and float_attr(attrs, key) <= 0:
            fail(node, f"attribute '{key}' must be > 0, got {attrs[key]}")
    if scaling == "llama3":
        low, high = float_attr(attrs, "low_freq_factor"), float_attr(attrs, "high_freq_factor")
        if high <= low:
            fail(
                node,
                f"attribute 'high_freq_factor' ({high}) must be greater than "
                f"'low_freq_factor' ({low})",
            )


def rope_frequencies(attrs: Attrs, head_dim: int) -> RopeFrequencies:
    """The frequencies of a verified rope node's attributes (with defaults) for head size D."""
    rotary_dim = int_attr(attrs, "rotary_dim", head_dim)
    theta = float_attr(attrs, "theta")
    base = [theta ** (-2.0 * i / rotary_dim) for i in range(rotary_dim // 2)]
    scaling = str(attrs.get("scaling", "none"))
    if scaling == "none":
        return RopeFrequencies(tuple(base), 1.0, rotary_dim)
    factor = float_attr(attrs, "factor")
    if scaling == "linear":
        return RopeFrequencies(tuple(f / factor for f in base), 1.0, rotary_dim)
    if scaling == "llama3":
        return RopeFrequencies(_llama3(attrs, base, factor), 1.0, rotary_dim)
    return RopeFrequencies(
        _yarn(attrs, base, factor, theta), yarn_attention_factor(attrs), rotary_dim
    )


def _llama3(attrs: Attrs, base: list[float], factor: float) -> tuple[float, ...]:
    low = float_attr(attrs, "low_freq_factor")
    high = float_attr(attrs, "high_freq_factor")
    context = float(int_attr(attrs, "original_max_position"))
    out = []
    for f in base:
        wavelength = 2.0 * math.pi / f
        if wavelength < context / high:
            out.append(f)
        elif wavelength > context / low:
            out.append(f / factor)
        else:
            s = (context / wavelength - low) / (high - low)
            out.append((1.0 - s) * f / factor + s * f)
    return tuple(out)


def yarn_attention_factor(attrs: Attrs) -> float:
    """`attention_factor` where given, else transformers' default `0.1·ln(factor) + 1`."""
    if "attention_factor" in attrs:
        return float_attr(attrs, "attention_factor")
    factor = float_attr(attrs, "factor")
    return 1.0 if factor <= 1.0 else 0.1 * math.log(factor) + 1.0


def _yarn(attrs: Attrs, base: list[float], factor: float, theta: float) -> tuple[float, ...]:
    dim = 2 * len(base)
    context = float(int_attr(attrs, "original_max_position"))

    def correction_dim(rotations: float) -> float:
        return dim * math.log(context / (rotations * 2.0 * math.pi)) / (2.0 * math.log(theta))

    low = correction_dim(float_attr(attrs, "beta_fast", 32.0))
    high = correction_dim(float_attr(attrs, "beta_slow", 1.0))
    if attrs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    out = []
    for i, f in enumerate(base):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extrapolation = 1.0 - ramp
        out.append(f / factor * (1.0 - extrapolation) + f * extrapolation)
    return tuple(out)
