"""Typed reads of node attributes.

`Node.attrs` maps names to `AttrValue` (bool, int, float, str or a tuple of ints). The verifier
has already checked each attribute's kind against its op's definition, so these accessors narrow
the union for the type checker and fail loudly (a bug in optgraph, not in the model) when a kind
is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.ir.graph import AttrValue


def int_attr(attrs: Mapping[str, AttrValue], key: str, default: int | None = None) -> int:
    """The integer attribute `key` (or `default` where it is absent)."""
    value = attrs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"attribute '{key}' must be an integer, got {value!r}")
    return value


def float_attr(attrs: Mapping[str, AttrValue], key: str, default: float | None = None) -> float:
    """The numeric attribute `key` as a float (an integer literal such as `scale=1` counts)."""
    value = attrs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"attribute '{key}' must be a number, got {value!r}")
    return float(value)


def ints_attr(
    attrs: Mapping[str, AttrValue], key: str, default: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """The integer-list attribute `key` (`perm=[1,0]`)."""
    value = attrs.get(key, default)
    if not isinstance(value, tuple):
        raise TypeError(f"attribute '{key}' must be a list of integers, got {value!r}")
    return value
