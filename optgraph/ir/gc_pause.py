"""Pausing Python's cyclic garbage collector around work on whole large graphs.

Parsing, the passes and their analyses allocate O(V) small objects next to a graph of O(V) nodes,
and every full collection walks the whole heap: at 100k nodes the collector takes about a third
of a compile (figures in docs/results/). None of that work creates reference cycles (objects are
freed by reference counting as usual), so pausing the collector loses nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block; nested uses are fine."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                # Everything allocated during the pause is still in the youngest generation:
                # the first collection after it would walk all of it. Freezing and unfreezing
                # moves every tracked object to the oldest generation in constant time (still
                # collected there, with the next full collection).
                gc.freeze()
                gc.unfreeze()
            gc.enable()
