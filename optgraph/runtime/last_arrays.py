"""Whether a call passes the very arrays of the last upload: by identity, each held weakly.

A runtime that copies weights in skips the copy when it is given the same array objects as
last time (a serving loop passes one dict of weights run after run). Comparing `id()`s alone is
wrong: once the last arrays are freed, new arrays can take their identities (CPython reuses a
freed object's memory), and new values would be skipped. A weak reference dies with its array,
so a new array never matches it, and the runtime does not keep the caller's arrays alive:

    last = LastArrays()
    last.same(names, {"w": a})      False: nothing remembered yet
    last.remember(names, {"w": a})
    last.same(names, {"w": a})      True: the very same array, still alive
    del a
    last.same(names, {"w": b})      False, even where `b` took the freed array's id

Values that cannot be referenced weakly (a list, a Python scalar) are held strongly. An array
changed in place is still "the same": the caller uploads it explicitly (`CudaProgram.set_weights`).
O(names) a call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class LastArrays:
    """The arrays of the last upload, by name (see the module docstring)."""

    def __init__(self) -> None:
        self._refs: tuple[tuple[str, Callable[[], Any]], ...] | None = None

    def same(self, names: Iterable[str], values: Mapping[str, Any]) -> bool:
        """True when every name's value is the very object remembered for it, still alive."""
        if self._refs is None:
            return False
        names = tuple(names)
        if tuple(name for name, _ in self._refs) != names:
            return False
        missing = object()
        for name, ref in self._refs:
            value = values.get(name, missing)
            if value is missing or ref() is not value:
                return False
        return True

    def remember(self, names: Iterable[str], values: Mapping[str, Any]) -> None:
        """Remember each name's value (weakly where it can be), for `same`."""
        self._refs = tuple((name, _reference(values.get(name))) for name in names)

    @property
    def empty(self) -> bool:
        """Nothing uploaded yet."""
        return self._refs is None


def _reference(value: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(value)
    except TypeError:  # a list, a scalar, None: held strongly
        return lambda: value
