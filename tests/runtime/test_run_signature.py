"""`CudaProgram.run` on arrays laid out as in its call before (`bound.run_signature`) takes
the last call's binding again instead of checking every array: on the fake CuPy
(tests/support/fake_cupy.py), counted by the calls of `_bind` and checked by what is staged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from optgraph.api.programs import cuda_program
from optgraph.errors import InputError
from optgraph.reference.interpreter import random_inputs
from tests.runtime.test_bound_step import _planned
from tests.support.fake_cupy import fake_cupy

Diamond = tuple[Any, Any, np.ndarray, Any, list[int]]


@pytest.fixture
def diamond(monkeypatch: pytest.MonkeyPatch) -> Iterator[Diamond]:
    """(fake CuPy, the diamond's program after one run, that run's host input `x` and device
    output `y`, one entry per full check of a run's arrays: one so far)."""
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        checks: list[int] = []
        full = program._bind

        def counted(*args: Any, **kwargs: Any) -> Any:
            checks.append(1)
            return full(*args, **kwargs)

        monkeypatch.setattr(program, "_bind", counted)
        x = random_inputs(graph)["x"]
        y = fake.asarray(np.zeros((4, 64), np.float32))
        program.run({"x": x}, out={"y": y})
        yield fake, program, x, y, checks
        program.close()


def _staged_x(program: Any) -> np.ndarray:
    """The values of input `x` in the program's pinned staging (what the run copied in)."""
    (variant,) = program._variants.values()
    off, t = variant.in_offsets["x"], variant.plan.types["x"]
    return variant.in_host[off : off + t.nbytes].view(np.float32).reshape(t.shape).copy()


def test_a_run_laid_out_as_the_last_is_not_checked_again_but_stages_its_own_values(
    diamond: Diamond,
) -> None:
    _, program, x, y, checks = diamond
    assert len(checks) == 1
    for k in range(3):
        new_x = x + np.float32(k + 1)  # a new array each call, as a serving loop makes
        program.run({"x": new_x}, out={"y": y})
        assert np.array_equal(_staged_x(program), new_x)
    assert len(checks) == 1
    assert program.last_key is not None and program.counters.captures == 1


def test_a_run_laid_out_otherwise_is_checked_in_full(diamond: Diamond) -> None:
    fake, program, x, _, checks = diamond
    other_y = fake.asarray(np.zeros((4, 64), np.float32))  # another address
    program.run({"x": x}, out={"y": other_y})
    program.run({"x": list(x)}, out={"y": other_y})  # a list: no signature
    program.run({"x": list(x)}, out={"y": other_y})
    assert len(checks) == 4
    program.run({"x": x}, out={"y": other_y})  # laid out as a run before the lists: checked
    program.run({"x": x}, out={"y": other_y})
    assert len(checks) == 5


def test_a_wrong_run_after_a_good_one_still_gets_its_error(diamond: Diamond) -> None:
    _, program, x, y, checks = diamond
    with pytest.raises(InputError, match=r"expected dtype f32"):
        program.run({"x": x.astype(np.float64)}, out={"y": y})
    with pytest.raises(InputError, match=r"has no input '%z'"):
        program.run({"x": x, "z": x}, out={"y": y})
    with pytest.raises(InputError, match=r"missing input '%x'"):
        program.run({}, out={"y": y})
    program.run({"x": x}, out={"y": y})  # the failed calls left the last good binding
    assert len(checks) == 4


def test_a_run_signature_names_each_argument_by_kind(diamond: Diamond) -> None:
    from optgraph.runtime.cuda.bound import run_signature

    fake = diamond[0]
    host = np.zeros((2, 3), np.float32)
    dev = fake.asarray(host)
    sig = run_signature({"a": host}, {"b": dev})
    assert sig == (("in", "a", (2, 3), np.dtype(np.float32)),
                   ("out", "b", (2, 3), np.dtype(np.float32), dev.data.ptr, True))  # fmt: skip
    assert run_signature({"a": host}, {"b": dev}) == sig
    assert run_signature({"b": host}, {"a": dev}) != sig  # names and kinds both count
    assert run_signature({"a": host.astype(np.float16)}, {"b": dev}) != sig
    assert run_signature({"a": 1.0}, {}) is None and run_signature({"a": [1.0]}, {}) is None
