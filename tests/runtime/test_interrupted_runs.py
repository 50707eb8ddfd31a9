"""A `KeyboardInterrupt` (Ctrl-C) in the middle of a run leaves the CUDA runtime able to run
again: a capture interrupted half-way is ended (no stream left capturing) and its graph thrown
away, and the next run captures anew and replays as if the first had never started. On the fake
CuPy (tests/support/fake_cupy.py): the runtime's host side; tests/gpu/test_gpu_long_runs.py
interrupts a real decode loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import optgraph as og
from optgraph.reference import interpreter as reference
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _interrupt_during_capture(fake: Any, after: int) -> None:
    """The `after`-th kernel launched while a capture is open raises KeyboardInterrupt (once)."""
    plain = fake.kernel
    seen = {"n": 0, "fired": False}

    def kernel(name: str) -> Any:
        launch = plain(name)

        def interrupted(*args: Any, **kwargs: Any) -> None:
            if fake.capture is not None and not seen["fired"]:
                seen["n"] += 1
                if seen["n"] == after:
                    seen["fired"] = True
                    raise KeyboardInterrupt
            launch(*args, **kwargs)

        return interrupted

    fake.kernel = kernel


@pytest.mark.parametrize("after", [1, 2])
def test_a_capture_interrupted_half_way_leaves_the_runtime_able_to_run(
    monkeypatch: Any, after: int
) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = og.parse_file(EXAMPLES / "mlp.ir")
        program = og.compile(graph, target="cuda")
        x = reference.random_inputs(graph)
        _interrupt_during_capture(fake, after)
        with pytest.raises(KeyboardInterrupt):
            program.run(x)
        assert fake.capture is None  # the capture was ended
        assert fake.live_graphs == 0  # and its half graph destroyed
        for _ in range(3):
            program.run(x)
        c = program._cuda.counters
        assert c.captures == 1 and c.replays == 2
        assert fake.live_graphs == 2  # one captured graph and its instantiation
        program.close()
