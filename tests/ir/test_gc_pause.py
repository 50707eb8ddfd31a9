"""`gc_paused` (optgraph/ir/gc_pause.py): the collector stays off until the last of nested or
concurrent pauses ends, then is as it was before the first."""

from __future__ import annotations

import gc
import threading

from optgraph.ir.gc_pause import gc_paused


def test_nested_pauses_restore_the_collector_after_the_last() -> None:
    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_in_another_thread_keeps_the_collector_off_until_it_ends() -> None:
    """The calling thread's pause ends while a host function's (another thread) still runs:
    the collector must stay off until that one ends too."""
    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def host_function() -> None:
        with gc_paused():
            inside.set()
            leave.wait(5)
            seen.append(gc.isenabled())

    with gc_paused():
        worker = threading.Thread(target=host_function)
        worker.start()
        assert inside.wait(5)
    assert not gc.isenabled()  # the other pause is still running
    leave.set()
    worker.join(5)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_off_before_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
