"""Pausing Python's cyclic garbage collector around work on whole large graphs.

Parsing, the passes and their analyses allocate O(V) small objects next to a graph of O(V) nodes,
and every full collection walks the whole heap: at 100k nodes the collector takes about a third
of a compile (figures in docs/results/). None of that work creates reference cycles (objects are
freed by reference counting as usual), so pausing the collector loses nothing.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_state = {"depth": 0, "was_enabled": False}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block. Nested uses, and uses in several
    threads at once (the CUDA driver's thread runs host functions under it while the calling
    thread compiles), share one pause: the collector's state before the first is restored after
    the last."""
    with _LOCK:
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                if gc.get_freeze_count() == 0:
                    # Everything allocated during the pause is still in the youngest generation:
                    # the first collection after it would walk all of it. Freezing and
                    # unfreezing moves every tracked object to the oldest generation in constant
                    # time (still collected there, with the next full collection).
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()
