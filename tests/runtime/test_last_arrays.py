"""Weights are uploaded again for new arrays, even ones that took a freed array's identity.

`id()` alone named the last upload's arrays: once they were freed, new arrays could take their
identities and an upload of new values was skipped (silently stale weights). The runtimes now
hold the last arrays weakly (`runtime/last_arrays.py`)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.runtime.last_arrays import LastArrays
from tests.support.fake_cupy import fake_cupy

ONE_WEIGHT = """graph one_weight {
  input %x : f32[4,64]
  weight %w : f32[64,64]
  %y = matmul(%x, %w) : f32[4,64]
  output %y
}"""


def test_the_very_same_arrays_match_and_others_do_not() -> None:
    a, b = np.ones(3), np.ones(3)
    last = LastArrays()
    assert last.empty and not last.same(["w"], {"w": a})
    last.remember(["w"], {"w": a})
    assert not last.empty
    assert last.same(["w"], {"w": a})
    assert last.same(["w"], {"w": a, "other": b})  # only the remembered names count
    assert not last.same(["w"], {"w": b})  # equal values, another array
    assert not last.same(["w"], {})
    assert not last.same(["w", "v"], {"w": a, "v": b})


def test_a_freed_arrays_identity_taken_by_a_new_array_does_not_match() -> None:
    last = LastArrays()
    held = []
    for _ in range(100):  # CPython hands a freed object's memory to the next of its size
        a = np.zeros(16, np.float32)
        old = id(a)
        last.remember(["w"], {"w": a})
        del a
        candidate = np.full(16, 7.0, np.float32)
        if id(candidate) == old:
            break
        held.append(candidate)  # not freed: the next try starts from another address
    assert id(candidate) == old, "no new array took the freed identity: the check is moot"
    assert not last.same(["w"], {"w": candidate})


def test_values_that_cannot_be_referenced_weakly_are_held() -> None:
    values = [[1.0, 2.0]]
    last = LastArrays()
    last.remember(["w"], {"w": values[0]})
    assert last.same(["w"], {"w": values[0]})
    assert not last.same(["w"], {"w": [1.0, 2.0]})


def _device_bytes(program, name: str, nbytes: int) -> bytes:
    at = program.weights_ptr() + program.plan().weight_offsets[name]
    raw = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * nbytes).from_address(at))
    return raw.tobytes()


def test_a_new_array_at_a_freed_arrays_identity_is_uploaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_cupy(monkeypatch):
        program = cuda_program(og.parse(ONE_WEIGHT), weights={"w": np.ones((64, 64), np.float32)})
        x = np.ones((4, 64), np.float32)
        w = np.full((64, 64), 1.0, np.float32)
        program.run({"x": x}, {"w": w})
        reused, stale = 0, []
        for value in range(2, 12):
            old = id(w)
            del w
            w = np.full((64, 64), value, np.float32)  # takes the freed array's memory
            reused += id(w) == old
            program.run({"x": x}, {"w": w})
            if _device_bytes(program, "w", w.nbytes) != w.tobytes():
                stale.append(value)
        assert reused, "no new array took a freed identity: the case is not exercised"
        assert stale == []
        program.close()


def test_set_weights_uploads_arrays_changed_in_place_and_run_skips_the_same_arrays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_cupy(monkeypatch):
        w = np.ones((64, 64), np.float32)
        weights = {"w": w}
        program = cuda_program(og.parse(ONE_WEIGHT), weights=weights)
        x = np.ones((4, 64), np.float32)
        program.run({"x": x}, weights)
        assert program.counters.weight_uploads == 1  # the very same array: no copy
        w[:] = 3.0
        program.set_weights(weights)  # asked for: copied although the same array
        assert program.counters.weight_uploads == 2
        assert _device_bytes(program, "w", w.nbytes) == w.tobytes()
        program.close()


def test_the_several_device_runner_restarts_for_a_new_array_at_a_freed_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from optgraph.api import program_devices

    made = []
    real = program_devices.MultiGpuProgram

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, ranks, weights, **kwargs):  # type: ignore[no-untyped-def]
            made.append({k: np.array(v) for k, v in weights.items()})
            super().__init__(ranks, weights, **kwargs)

    monkeypatch.setattr(program_devices, "MultiGpuProgram", Counted)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        program = og.compile(og.parse(ONE_WEIGHT), "default", target="cuda", devices=2)
        runner = program._cuda_runner()
        assert isinstance(runner, program_devices.MultiDeviceRunner)
        runner.launcher = "thread"
        x = np.ones((4, 64), np.float32)
        try:
            w = np.full((64, 64), 1.0, np.float32)
            program.run({"x": x}, {"w": w})
            program.run({"x": x}, {"w": w})  # the same array: the ranks keep running
            assert len(made) == 1
            old = id(w)
            del w
            # The freed identity goes to a later array of the same size; another thread (the
            # ranks') may take it first for a while: keep drawing, holding the misses.
            misses = []
            w = np.full((64, 64), 2.0, np.float32)
            while id(w) != old and len(misses) < 10_000:
                misses.append(w)
                w = np.full((64, 64), 2.0, np.float32)
            assert id(w) == old, "no new array took the freed identity: case moot"
            program.run({"x": x}, {"w": w})
        finally:
            program.close()
    assert len(made) == 2
    assert all((piece == 2.0).all() for piece in made[1].values())
